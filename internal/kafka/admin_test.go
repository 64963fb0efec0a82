package kafka

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// unknownDescribeConfigs makes c answer the next n DescribeConfigs requests
// with UNKNOWN_TOPIC_OR_PARTITION for every resource, as a broker does that
// has not yet learned of a topic the controller just created.
func unknownDescribeConfigs(c *kfake.Cluster, n int) *atomic.Int32 {
	var answered atomic.Int32
	c.ControlKey(int16(kmsg.DescribeConfigs), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
		if answered.Load() >= int32(n) {
			return nil, nil, false
		}
		c.KeepControl()
		answered.Add(1)
		req := kreq.(*kmsg.DescribeConfigsRequest)
		resp := req.ResponseKind().(*kmsg.DescribeConfigsResponse)
		for _, r := range req.Resources {
			rr := kmsg.NewDescribeConfigsResponseResource()
			rr.ResourceType, rr.ResourceName = r.ResourceType, r.ResourceName
			rr.ErrorCode = kerr.UnknownTopicOrPartition.Code
			resp.Resources = append(resp.Resources, rr)
		}
		return resp, nil, true
	})
	return &answered
}

// newFakeAdmin starts a one-broker kfake cluster and an Admin on it, both
// closed when t ends.
func newFakeAdmin(t *testing.T, opts ...kfake.Opt) (*kfake.Cluster, *Admin) {
	t.Helper()
	c, err := kfake.NewCluster(append([]kfake.Opt{kfake.NumBrokers(1)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	a, err := NewAdmin(c.ListenAddrs())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(a.Close)
	return c, a
}

// TestEnsureTopicWaitsForDescribeConfigs: a compacted topic's policy is
// checked with DescribeConfigs right after the topic was created; a broker
// that answers UNKNOWN_TOPIC_OR_PARTITION for a moment must not fail the
// start-up.
func TestEnsureTopicWaitsForDescribeConfigs(t *testing.T) {
	c, a := newFakeAdmin(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	answered := unknownDescribeConfigs(c, 3)
	if err := a.EnsureTopic(ctx, TopicSpec{Name: "log", Partitions: 2, Compacted: true}); err != nil {
		t.Fatalf("EnsureTopic: %v", err)
	}
	if n := answered.Load(); n != 3 {
		t.Fatalf("%d DescribeConfigs answered UNKNOWN_TOPIC_OR_PARTITION, want 3 (the test did not exercise the retry)", n)
	}
}

// TestEnsureTopicDescribeConfigsGivesUp: a broker that keeps saying
// UNKNOWN_TOPIC_OR_PARTITION fails EnsureTopic after describeConfigsPatience
// with the error, not a hang.
func TestEnsureTopicDescribeConfigsGivesUp(t *testing.T) {
	if testing.Short() {
		t.Skip("waits describeConfigsPatience")
	}
	c, a := newFakeAdmin(t, kfake.SeedTopics(1, "log"))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	unknownDescribeConfigs(c, 1<<30)
	start := time.Now()
	err := a.EnsureTopic(ctx, TopicSpec{Name: "log", Compacted: true})
	took := time.Since(start)
	if err == nil || !strings.Contains(err.Error(), "UNKNOWN_TOPIC_OR_PARTITION") || !strings.Contains(err.Error(), `"log"`) {
		t.Fatalf("EnsureTopic: %v, want the describe-configs error naming the topic", err)
	}
	if took < describeConfigsPatience/2 || took > 2*describeConfigsPatience {
		t.Fatalf("gave up after %v, want about %v", took, describeConfigsPatience)
	}
}

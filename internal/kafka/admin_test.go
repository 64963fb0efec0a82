package kafka

import (
	"context"
	"errors"
	"net"
	"strconv"
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

// TestPartitionsOfATopicNotEveryBrokerKnows: right after a topic is created on
// a cluster of several brokers, some brokers answer UNKNOWN_TOPIC_OR_PARTITION
// for a moment (seen on the three-broker cluster: a start right after the
// test created its output topic failed with "topic not found"). Partitions
// asks the other brokers before calling the topic missing; a topic no broker
// knows is still ErrTopicNotFound.
func TestPartitionsOfATopicNotEveryBrokerKnows(t *testing.T) {
	c, a := newFakeAdmin(t, kfake.NumBrokers(3))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := a.Kadm().CreateTopic(ctx, 4, 1, nil, "fresh"); err != nil {
		t.Fatal(err)
	}
	// Brokers 0 and 1 have not heard of "fresh"; broker 2 has.
	c.KeepControl()
	c.ControlKey(kmsg.Metadata.Int16(), func(kr kmsg.Request) (kmsg.Response, error, bool) {
		req := kr.(*kmsg.MetadataRequest)
		all := req.Topics == nil // every topic: the client's metadata refresh
		asks := all
		for _, rt := range req.Topics {
			asks = asks || rt.Topic != nil && *rt.Topic == "fresh"
		}
		if c.CurrentNode() == 2 || !asks {
			return nil, nil, false
		}
		resp := req.ResponseKind().(*kmsg.MetadataResponse)
		for i, addr := range c.ListenAddrs() {
			host, port, _ := net.SplitHostPort(addr)
			p, _ := strconv.Atoi(port)
			b := kmsg.NewMetadataResponseBroker()
			b.NodeID, b.Host, b.Port = int32(i), host, int32(p)
			resp.Brokers = append(resp.Brokers, b)
		}
		if !all { // "fresh" is the only topic: all topics are none
			rt := kmsg.NewMetadataResponseTopic()
			rt.Topic = kmsg.StringPtr("fresh")
			rt.ErrorCode = kerr.UnknownTopicOrPartition.Code
			resp.Topics = append(resp.Topics, rt)
		}
		return resp, nil, true
	})
	// The admin's metadata request goes to any broker: ten in a row all
	// reaching broker 2 would be (1/3)^10.
	for i := range 10 {
		n, err := a.Partitions(ctx, "fresh")
		if err != nil || n != 4 {
			t.Fatalf("Partitions #%d = %d, %v; want 4 (broker 2 knows the topic)", i, n, err)
		}
	}
	if _, err := a.Partitions(ctx, "missing"); !errors.Is(err, ErrTopicNotFound) {
		t.Errorf("Partitions of a missing topic: %v, want ErrTopicNotFound", err)
	}
}

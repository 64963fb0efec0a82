package kafka

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
)

func TestReplicationIssues(t *testing.T) {
	for _, tc := range []struct {
		name        string
		r           Replication
		wantRF, isr int
		whats       []string // substrings of the issues' What, in order
		fixes       []string // substrings of the issues' Fix, in order
	}{
		{name: "one broker, RF 1: a dev cluster", r: Replication{Topic: "t", ReplicationFactor: 1, MinInsyncReplicas: 1, Brokers: 1}},
		{name: "production", r: Replication{Topic: "t", ReplicationFactor: 3, MinInsyncReplicas: 2, Brokers: 3}, wantRF: 3, isr: 2},
		{name: "RF 1 on three brokers", r: Replication{Topic: "t", ReplicationFactor: 1, MinInsyncReplicas: 1, Brokers: 3},
			whats: []string{"replication factor 1 on a cluster of 3 brokers"}, fixes: []string{"kafka-reassign-partitions", `"t" 3 replicas`}},
		{name: "RF 1 on three brokers, asked for", r: Replication{Topic: "t", ReplicationFactor: 1, MinInsyncReplicas: 1, Brokers: 3}, wantRF: 1},
		{name: "RF below the option", r: Replication{Topic: "t", ReplicationFactor: 2, MinInsyncReplicas: 1, Brokers: 5}, wantRF: 3,
			whats: []string{"replication factor 2, below the 3 wanted (Options.Kafka.ReplicationFactor)"}, fixes: []string{"kafka-reassign-partitions"}},
		{name: "min ISR equals RF", r: Replication{Topic: "t", ReplicationFactor: 3, MinInsyncReplicas: 3, Brokers: 3},
			whats: []string{"min.insync.replicas 3 with replication factor 3: every replica must be in sync"}, fixes: []string{"--entity-name t --add-config min.insync.replicas=2"}},
		{name: "min ISR above RF", r: Replication{Topic: "t", ReplicationFactor: 2, MinInsyncReplicas: 3, Brokers: 3},
			whats: []string{"replication factor 2, below the 3 wanted", "min.insync.replicas 3 with replication factor 2"}, wantRF: 3,
			fixes: []string{"kafka-reassign-partitions", "min.insync.replicas=1"}},
		{name: "min ISR above RF 1: the broker counts 1", r: Replication{Topic: "t", ReplicationFactor: 1, MinInsyncReplicas: 2, Brokers: 1}},
		{name: "min ISR below the option", r: Replication{Topic: "t", ReplicationFactor: 3, MinInsyncReplicas: 1, Brokers: 3}, wantRF: 3, isr: 2,
			whats: []string{"min.insync.replicas 1, below the 2 wanted (Options.Kafka.MinInsyncReplicas)"}, fixes: []string{"min.insync.replicas=2"}},
		{name: "min ISR unknown (no DescribeConfigs ACL)", r: Replication{Topic: "t", ReplicationFactor: 3, Brokers: 3}, isr: 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := ReplicationIssues(tc.r, tc.wantRF, tc.isr)
			if len(got) != len(tc.whats) {
				t.Fatalf("issues %+v, want %d: %q", got, len(tc.whats), tc.whats)
			}
			for i, is := range got {
				if !strings.Contains(is.What, tc.whats[i]) || !strings.Contains(is.Fix, tc.fixes[i]) {
					t.Errorf("issue %d: %+v, want What with %q and Fix with %q", i, is, tc.whats[i], tc.fixes[i])
				}
			}
		})
	}
}

// TestReplicationOnSeveralBrokers: on a three-broker cluster, Replication
// reads each topic's replication factor and min.insync.replicas, and
// EnsureTopic creates with the spec's.
func TestReplicationOnSeveralBrokers(t *testing.T) {
	_, a := newFakeAdmin(t, kfake.NumBrokers(3))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := a.EnsureTopic(ctx, TopicSpec{Name: "replicated", Partitions: 2, ReplicationFactor: 3, MinInsyncReplicas: 2, Compacted: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Kadm().CreateTopic(ctx, 2, 1, map[string]*string{"min.insync.replicas": kadm.StringPtr("1")}, "single"); err != nil {
		t.Fatal(err)
	}
	for _, want := range []Replication{
		{Topic: "replicated", ReplicationFactor: 3, MinInsyncReplicas: 2, Brokers: 3},
		{Topic: "single", ReplicationFactor: 1, MinInsyncReplicas: 1, Brokers: 3},
	} {
		got, err := a.Replication(ctx, want.Topic)
		if err != nil {
			t.Fatal(err)
		}
		if got != want {
			t.Errorf("Replication(%q) = %+v, want %+v", want.Topic, got, want)
		}
	}
	if _, err := a.Replication(ctx, "missing"); !errors.Is(err, ErrTopicNotFound) {
		t.Errorf("Replication of a missing topic: %v, want ErrTopicNotFound", err)
	}
}

// TestEnsureTopicReplicationOverBrokers: a replication factor over the
// live brokers fails EnsureTopic with ErrReplicationFactor, naming both
// numbers, and creates nothing.
func TestEnsureTopicReplicationOverBrokers(t *testing.T) {
	_, a := newFakeAdmin(t) // one broker
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err := a.EnsureTopic(ctx, TopicSpec{Name: "log", Partitions: 2, ReplicationFactor: 3, Compacted: true})
	if !errors.Is(err, ErrReplicationFactor) || !strings.Contains(err.Error(), "replication factor 3 needs 3 brokers, the cluster has 1 live") {
		t.Fatalf("EnsureTopic: %v, want ErrReplicationFactor naming 3 and 1", err)
	}
	if _, err := a.Partitions(ctx, "log"); !errors.Is(err, ErrTopicNotFound) {
		t.Fatalf("the topic exists after a failed EnsureTopic: %v", err)
	}
}

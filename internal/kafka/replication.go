package kafka

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/twmb/franz-go/pkg/kadm"
)

// ErrReplicationFactor is wrapped by EnsureTopic's error when a topic to be
// created asks for more replicas than the cluster has live brokers: the
// broker would refuse it (INVALID_REPLICATION_FACTOR), now and at every
// retry until a broker joins.
var ErrReplicationFactor = errors.New("kafka: replication factor over the cluster's live brokers")

// Replication is how a topic is replicated and how many brokers the cluster
// has, as Admin.Replication reads them.
type Replication struct {
	Topic string
	// ReplicationFactor is the smallest replica count of the topic's
	// partitions (a partition being reassigned can have more for a while).
	ReplicationFactor int
	// MinInsyncReplicas is the topic's effective min.insync.replicas; 0
	// when it could not be read (no DescribeConfigs permission).
	MinInsyncReplicas int
	// Brokers is the number of live brokers in the cluster's metadata.
	Brokers int
}

// Replication reads topic's replication factor (metadata) and effective
// min.insync.replicas (DescribeConfigs). A DescribeConfigs the client is not
// authorized for leaves MinInsyncReplicas 0 and returns the *AuthError
// with the rest filled in.
func (a *Admin) Replication(ctx context.Context, topic string) (Replication, error) {
	var md kadm.Metadata
	var td kadm.TopicDetail
	for tries := 0; ; tries++ {
		var err error
		md, err = a.adm.Metadata(ctx, topic)
		if err != nil {
			return Replication{}, fmt.Errorf("kafka: describe topic %q: %w", topic, access{topic: topic}.classify(err))
		}
		var ok bool
		if td, ok = md.Topics[topic]; ok && td.Err == nil {
			break
		}
		// Unknown to the broker asked: Partitions asks again as long
		// as a topic created a moment ago may not have reached it (on
		// several brokers; Findings 1 and 5 of docs/RELIABILITY.md),
		// then the metadata is read once more.
		if _, err := a.Partitions(ctx, topic); err != nil {
			return Replication{}, err
		}
		if tries == 10 {
			return Replication{}, fmt.Errorf("%w: %q", ErrTopicNotFound, topic)
		}
	}
	r := Replication{Topic: topic, Brokers: len(md.Brokers)}
	for _, p := range td.Partitions {
		if n := len(p.Replicas); r.ReplicationFactor == 0 || n < r.ReplicationFactor {
			r.ReplicationFactor = n
		}
	}
	v, err := a.topicConfig(ctx, topic, "min.insync.replicas")
	if err != nil {
		return r, err
	}
	if n, err := strconv.Atoi(v); err == nil {
		r.MinInsyncReplicas = n
	}
	return r, nil
}

// liveBrokers is the number of brokers in the cluster's metadata.
func (a *Admin) liveBrokers(ctx context.Context) (int, error) {
	md, err := a.adm.BrokerMetadata(ctx)
	if err != nil {
		return 0, fmt.Errorf("kafka: list brokers: %w", access{}.classify(err))
	}
	return len(md.Brokers), nil
}

// ReplicationIssue is one way an internal topic's replication falls short
// of what production needs (ReplicationIssues).
type ReplicationIssue struct {
	// What is the problem, with the actual and the wanted value.
	What string
	// Fix is what to do, as the command that does it.
	Fix string
}

// ReplicationIssues compares r with what is wanted: wantRF and wantMinISR
// are the configured replication factor and min.insync.replicas (0: the
// broker's defaults, then only what no production cluster wants is
// reported). It reports
//   - a replication factor of 1 on a cluster of 3 or more brokers, unless
//     1 is what was asked for (one broker's loss stops, or loses, the
//     topic);
//   - a replication factor below wantRF;
//   - min.insync.replicas at or above a replication factor above 1 (the
//     broker counts one above it as the replication factor: every
//     replica must then be in sync, and one replica down, a broker
//     restart, stops every write);
//   - min.insync.replicas below wantMinISR.
func ReplicationIssues(r Replication, wantRF, wantMinISR int) []ReplicationIssue {
	var out []ReplicationIssue
	reassign := fmt.Sprintf("kafka-reassign-partitions.sh --bootstrap-server <broker> --execute --reassignment-json-file <file>, "+
		"the file giving each partition of %q %d replicas on distinct brokers (docs/OPERATIONS.md, \"Internal topics\")",
		r.Topic, max(wantRF, min(3, r.Brokers)))
	configs := func(n int) string {
		return fmt.Sprintf("kafka-configs.sh --bootstrap-server <broker> --alter --entity-type topics --entity-name %s --add-config min.insync.replicas=%d",
			r.Topic, n)
	}
	rf, isr := r.ReplicationFactor, r.MinInsyncReplicas
	if rf <= 0 {
		return nil
	}
	switch {
	case wantRF > 0 && rf < wantRF:
		out = append(out, ReplicationIssue{
			What: fmt.Sprintf("replication factor %d, below the %d wanted (Options.Kafka.ReplicationFactor)", rf, wantRF),
			Fix:  reassign})
	case rf == 1 && r.Brokers >= 3 && wantRF != 1:
		out = append(out, ReplicationIssue{
			What: fmt.Sprintf("replication factor 1 on a cluster of %d brokers: losing one broker stops the application (and its disk loses the topic); 3 wanted", r.Brokers),
			Fix:  reassign + "; set Options.Kafka.ReplicationFactor 3 for the topics kstate creates"})
	}
	switch {
	case rf > 1 && isr >= rf:
		out = append(out, ReplicationIssue{
			What: fmt.Sprintf("min.insync.replicas %d with replication factor %d: every replica must be in sync, so one replica down (a broker restart) stops every write", isr, rf),
			Fix:  configs(rf - 1)})
	case isr > 0 && wantMinISR > 0 && isr < wantMinISR && wantMinISR <= rf:
		out = append(out, ReplicationIssue{
			What: fmt.Sprintf("min.insync.replicas %d, below the %d wanted (Options.Kafka.MinInsyncReplicas)", isr, wantMinISR),
			Fix:  configs(wantMinISR)})
	}
	return out
}

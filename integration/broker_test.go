package integration

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// uniqueName keeps tests independent on a shared broker.
func uniqueName(t *testing.T, what string) string {
	return fmt.Sprintf("%s-%s-%d", strings.ReplaceAll(t.Name(), "/", "_"), what, time.Now().UnixNano())
}

func newAdmin(t *testing.T, brokers []string) *kadm.Client {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return kadm.NewClient(cl)
}

// createEagerlyCompacted creates a one-partition compacted topic whose
// segments roll every 100 ms and are cleaned at once, keeping tombstones
// for deleteRetention ms: the broker's cleaner (log.cleaner.backoff.ms 1 s
// in kafkatest) then compacts it while a test runs.
func createEagerlyCompacted(t *testing.T, adm *kadm.Client, name, deleteRetention string) {
	t.Helper()
	createTopic(t, adm, name, 1, map[string]*string{
		"cleanup.policy":            kadm.StringPtr("compact"),
		"segment.ms":                kadm.StringPtr("100"),
		"min.cleanable.dirty.ratio": kadm.StringPtr("0.01"),
		"min.compaction.lag.ms":     kadm.StringPtr("0"),
		"delete.retention.ms":       kadm.StringPtr(deleteRetention),
	})
}

func createTopic(t *testing.T, adm *kadm.Client, name string, partitions int32, configs map[string]*string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := adm.CreateTopics(ctx, partitions, -1, configs, name)
	if err != nil {
		t.Fatal(err)
	}
	if err := resp.Error(); err != nil {
		t.Fatalf("create topic %s: %v", name, err)
	}
}

// TestRealBrokerIdentity proves the tests talk to a real Apache Kafka broker
// and prints its version.
func TestRealBrokerIdentity(t *testing.T) {
	t.Parallel()
	k := realKafka(t)
	adm := newAdmin(t, k.Brokers())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	versions, err := adm.ApiVersions(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var guess string
	versions.Each(func(v kadm.BrokerApiVersions) {
		if v.Err != nil {
			t.Fatalf("ApiVersions from broker %d: %v", v.NodeID, v.Err)
		}
		guess = v.VersionGuess()
	})
	meta, err := adm.BrokerMetadata(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("KAFKA BROKER: source=%q version-guess=%q cluster=%s controller=%d brokers=%d",
		k.Source(), guess, meta.Cluster, meta.Controller, len(meta.Brokers))
	if len(meta.Brokers) == 0 {
		t.Fatal("metadata lists no brokers")
	}
	// kfake answers ApiVersions too, but only a real 4.x broker has KRaft
	// controller APIs and the 4.x request versions; the guess must say 4.x
	// unless the user pointed us at their own cluster.
	if strings.HasPrefix(k.Source(), "Apache Kafka") && !strings.Contains(guess, "v4.") {
		t.Fatalf("expected a Kafka 4.x broker, version guess is %q", guess)
	}
}

// TestCompactedTopicConfig creates a compacted topic and reads the policy back.
func TestCompactedTopicConfig(t *testing.T) {
	t.Parallel()
	brokers := realKafka(t).Brokers()
	adm := newAdmin(t, brokers)
	topic := uniqueName(t, "changelog")
	compact := "compact"
	createTopic(t, adm, topic, 3, map[string]*string{"cleanup.policy": &compact})

	policy := topicConfig(t, adm, topic, "cleanup.policy")
	t.Logf("topic %s cleanup.policy=%s", topic, policy)
	if policy != "compact" {
		t.Fatalf("cleanup.policy = %q, want compact", policy)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	td, err := adm.ListTopics(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(td[topic].Partitions); n != 3 {
		t.Fatalf("partitions = %d, want 3", n)
	}
}

// TestBrokerKeepsOldRecords: the broker the tests start has no time
// retention, so records with old timestamps (fixed event times) are not
// deleted by a retention check in the middle of a test (which made
// TestHeadersMetadataAndSecondTopic fail whenever it ran across one). A
// cluster of the user's (KSTATE_KAFKA_BROKERS) keeps its own settings.
func TestBrokerKeepsOldRecords(t *testing.T) {
	t.Parallel()
	k := realKafka(t)
	if !strings.HasPrefix(k.Source(), "Apache Kafka") {
		t.Skipf("broker %s is not one the tests started", k.Source())
	}
	adm := newAdmin(t, k.Brokers())
	topic := uniqueName(t, "old")
	createTopic(t, adm, topic, 1, nil)
	if retention := topicConfig(t, adm, topic, "retention.ms"); retention != "-1" {
		t.Fatalf("topic %s: retention.ms = %q, want -1 (kafkabroker's commonConfig)", topic, retention)
	}
}

// topicConfig returns the value of topic's config key as the broker
// describes it ("" when it lists none). CreateTopics returns once the
// controller has the topic; the broker answering DescribeConfigs may not
// have it in its metadata yet and say UNKNOWN_TOPIC_OR_PARTITION for a
// moment, so that answer is retried until the deadline.
func topicConfig(t *testing.T, adm *kadm.Client, topic, key string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var rc kadm.ResourceConfig
	for {
		rcs, err := adm.DescribeTopicConfigs(ctx, topic)
		if err != nil {
			t.Fatal(err)
		}
		rc, err = rcs.On(topic, nil)
		if err == nil && rc.Err == nil {
			break
		}
		if err == nil && errors.Is(rc.Err, kerr.UnknownTopicOrPartition) && ctx.Err() == nil {
			time.Sleep(50 * time.Millisecond)
			continue
		}
		t.Fatalf("describe %s: %v %v", topic, err, rc.Err)
	}
	for _, c := range rc.Configs {
		if c.Key == key && c.Value != nil {
			return *c.Value
		}
	}
	return ""
}

func produceTxn(t *testing.T, brokers []string, txnID, topic string, commit bool, values ...string) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.TransactionalID(txnID),
		kgo.DefaultProduceTopic(topic), kgo.TransactionTimeout(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := cl.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	for _, v := range values {
		if err := cl.ProduceSync(ctx, &kgo.Record{Key: []byte("k"), Value: []byte(v)}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	if err := cl.EndTransaction(ctx, kgo.TransactionEndTry(commit)); err != nil {
		t.Fatalf("end transaction (commit=%v): %v", commit, err)
	}
}

// consumeAll reads topic from the start until want records arrived or the
// timeout passed, with the given isolation level.
func consumeAll(t *testing.T, brokers []string, topic string, iso kgo.IsolationLevel, want int, timeout time.Duration) []string {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchIsolationLevel(iso))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var got []string
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) && len(got) < want {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		fs := cl.PollFetches(ctx)
		cancel()
		fs.EachRecord(func(r *kgo.Record) { got = append(got, string(r.Value)) })
	}
	return got
}

// TestTransactionsReadCommitted checks that a read_committed consumer sees the
// records of a committed transaction and none of an aborted one.
func TestTransactionsReadCommitted(t *testing.T) {
	t.Parallel()
	brokers := realKafka(t).Brokers()
	adm := newAdmin(t, brokers)
	topic := uniqueName(t, "txn")
	createTopic(t, adm, topic, 1, nil)

	produceTxn(t, brokers, topic+"-tx", topic, true, "c1", "c2")
	produceTxn(t, brokers, topic+"-tx", topic, false, "a1", "a2", "a3")
	produceTxn(t, brokers, topic+"-tx", topic, true, "c3")

	committed := consumeAll(t, brokers, topic, kgo.ReadCommitted(), 3, 15*time.Second)
	// Give the consumer a moment longer to prove nothing else arrives.
	committed = append(committed, consumeExtra(t, brokers, topic, len(committed))...)
	if want := []string{"c1", "c2", "c3"}; !slices.Equal(committed, want) {
		t.Fatalf("read_committed saw %v, want %v", committed, want)
	}
	uncommitted := consumeAll(t, brokers, topic, kgo.ReadUncommitted(), 6, 15*time.Second)
	if want := []string{"c1", "c2", "a1", "a2", "a3", "c3"}; !slices.Equal(uncommitted, want) {
		t.Fatalf("read_uncommitted saw %v, want %v (aborted records must be in the log)", uncommitted, want)
	}
	t.Logf("read_committed=%v read_uncommitted=%v", committed, uncommitted)
}

// consumeExtra re-reads the topic read_committed and returns anything beyond
// the first skip records seen within a short window.
func consumeExtra(t *testing.T, brokers []string, topic string, skip int) []string {
	all := consumeAll(t, brokers, topic, kgo.ReadCommitted(), skip+1, 2*time.Second)
	if len(all) > skip {
		return all[skip:]
	}
	return nil
}

package integration

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kstate/kstate"
	"github.com/kstate/kstate/internal/testprocs"
	"github.com/kstate/kstate/serde"
)

// The internal topics' replication options on the one real broker (issue
// #28 item 2). (min.insync.replicas cannot be lost on one broker: Kafka
// counts a min.insync.replicas above the replication factor as the
// replication factor; the lost-ISR case runs on kfake, retry_test.go in
// the root package, and on the three-broker cluster.)

// syncBuf is a log buffer safe for the App's goroutines.
type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuf) Write(p []byte) (int, error) { s.mu.Lock(); defer s.mu.Unlock(); return s.b.Write(p) }
func (s *syncBuf) String() string              { s.mu.Lock(); defer s.mu.Unlock(); return s.b.String() }

// replicationApp is a counter on a new input and output topic of 2
// partitions, logging Warn and above into the returned buffer.
func replicationApp(t *testing.T, k interface{ Brokers() []string }, in, out string) (testApp[string, string, string], *syncBuf) {
	logs := &syncBuf{}
	return testApp[string, string, string]{
		Topology: kstate.Topology[string, string, string]{
			Inputs:       kstate.Topics(serde.String(), in),
			KeySerde:     serde.String(),
			NewProcessor: testprocs.NewCounter,
			Output:       kstate.Output[string, string]{Topic: out, Serde: serde.String()},
		},
		Options: kstate.Options{
			ApplicationID: in + "-app",
			InstanceID:    "i1",
			Kafka:         kstate.KafkaOptions{Brokers: k.Brokers(), TransactionTimeout: time.Second, SessionTimeout: 6 * time.Second},
			State:         kstate.StateOptions{Dir: t.TempDir()},
			Batching:      kstate.BatchingOptions{MaxWait: 50 * time.Millisecond},
			Timeouts:      kstate.TimeoutOptions{Shutdown: 5 * time.Second},
			Observability: kstate.ObservabilityOptions{Logger: slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelWarn}))},
		},
	}, logs
}

// adminOn is a kadm client on brokers, closed when t ends.
func adminOn(t *testing.T, brokers []string) *kadm.Client {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return kadm.NewClient(cl)
}

// TestRealReplicationOptions: on the one-broker cluster, a replication
// factor of 3 fails Run at start naming the option and creates nothing;
// ReplicationFactor 1 with MinInsyncReplicas 1 creates the changelog so,
// and a one-broker cluster is warned about nothing.
func TestRealReplicationOptions(t *testing.T) {
	t.Parallel()
	k := realKafka(t)
	in, out := k.CreateTopic(t, "in", 2), k.CreateTopic(t, "out", 2)
	cfg, logs := replicationApp(t, k, in, out)
	cfg.Kafka.ReplicationFactor = 3
	app, err := kstate.New(cfg.Topology, cfg.Options)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	err = app.Run(ctx)
	if !errors.Is(err, kstate.ErrConfig) || !strings.Contains(err.Error(), "Options.Kafka.ReplicationFactor 3") {
		t.Fatalf("Run: %v; want an ErrConfig naming Options.Kafka.ReplicationFactor 3", err)
	}
	t.Logf("RF 3 on one broker: %v", err)
	adm := adminOn(t, k.Brokers())
	if tds, err := adm.ListTopics(ctx, app.ChangelogTopic()); err != nil || tds.Has(app.ChangelogTopic()) {
		t.Fatalf("the failed start left the changelog %s behind (%v)", app.ChangelogTopic(), err)
	}

	cfg.Kafka.ReplicationFactor, cfg.Kafka.MinInsyncReplicas = 1, 1
	app, err = kstate.New(cfg.Topology, cfg.Options)
	if err != nil {
		t.Fatal(err)
	}
	stop := testprocs.Start(t, app)
	testprocs.Produce(t, k.Brokers(), in, "a=1", "b=1", "a=2")
	wantOutputs(t, testprocs.WaitOutputs(t, k.Brokers(), out, 3, 60*time.Second), "a=[1 2] b=[1]")
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	rcs, err := adm.DescribeTopicConfigs(ctx, app.ChangelogTopic())
	if err != nil {
		t.Fatal(err)
	}
	rc, err := rcs.On(app.ChangelogTopic(), nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range rc.Configs {
		if c.Key == "min.insync.replicas" && (c.Value == nil || *c.Value != "1" || c.Source != 1 /* DYNAMIC_TOPIC_CONFIG */) {
			t.Errorf("changelog min.insync.replicas %v (source %v), want 1 set on the topic", c.Value, c.Source)
		}
	}
	if l := logs.String(); strings.Contains(l, "not replicated for production") {
		t.Errorf("a one-broker cluster warned about replication:\n%s", l)
	}
}

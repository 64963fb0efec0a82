package kstate_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kstate/kstate"
	"github.com/kstate/kstate/internal/testlog"
	"github.com/kstate/kstate/internal/testprocs"
	"github.com/kstate/kstate/kafka/embedded"
)

// startBrokers starts a kfake cluster of n brokers with the "in" and "out"
// topics of config, of partitions partitions.
func startBrokers(t *testing.T, n, partitions int) []string {
	t.Helper()
	e, err := embedded.Start(embedded.Options{NumBrokers: n, Partitions: partitions, Topics: map[string]int{"in": partitions, "out": partitions}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Close)
	return e.Brokers()
}

// testAdmin is a kadm client on brokers, closed when t ends.
func testAdmin(t *testing.T, brokers []string) *kadm.Client {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return kadm.NewClient(cl)
}

// replication returns topic's smallest partition replica count and its
// min.insync.replicas.
func replication(t *testing.T, adm *kadm.Client, topic string) (rf int, minISR string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	tds, err := adm.ListTopics(ctx, topic)
	if err != nil || tds[topic].Err != nil {
		t.Fatalf("describe %s: %v %v", topic, err, tds[topic].Err)
	}
	for _, p := range tds[topic].Partitions {
		if rf == 0 || len(p.Replicas) < rf {
			rf = len(p.Replicas)
		}
	}
	rcs, err := adm.DescribeTopicConfigs(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	rc, err := rcs.On(topic, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range rc.Configs {
		if c.Key == "min.insync.replicas" && c.Value != nil {
			minISR = *c.Value
		}
	}
	return rf, minISR
}

// logTo makes cfg log at Warn and above into a buffer it returns.
func logTo(cfg *testApp) *testlog.Buffer {
	var logs testlog.Buffer
	cfg.Observability.Logger = slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn}))
	return &logs
}

const replicationWarning = "internal topic not replicated for production"

// TestInternalTopicsReplicated (issue #28 item 2): with
// Options.Kafka.ReplicationFactor 3 and MinInsyncReplicas 2, the changelog
// and dead-letter topics kstate creates on a three-broker cluster get
// three replicas and min.insync.replicas 2, and nothing is warned about.
func TestInternalTopicsReplicated(t *testing.T) {
	brokers := startBrokers(t, 3, 2)
	cfg := config(brokers, t.TempDir(), testprocs.NewCounter)
	cfg.Kafka.ReplicationFactor, cfg.Kafka.MinInsyncReplicas = 3, 2
	cfg.OnDecodeError = kstate.DecodeErrorDeadLetter
	logs := logTo(&cfg)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("the application's log:\n%s", logs.String())
		}
	})
	app, err := kstate.New(cfg.Topology, cfg.Options)
	if err != nil {
		t.Fatal(err)
	}
	stop := testprocs.Start(t, app)
	testprocs.Produce(t, brokers, "in", "a=1", "a=2", "b=1")
	want(t, testprocs.WaitOutputs(t, brokers, "out", 3, 30*time.Second), "a=[1 2] b=[1]")
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	adm := testAdmin(t, brokers)
	for _, topic := range []string{"app-changelog", "app-dlq"} {
		if rf, isr := replication(t, adm, topic); rf != 3 || isr != "2" {
			t.Errorf("%s: replication factor %d, min.insync.replicas %q; want 3 and 2", topic, rf, isr)
		}
	}
	if l := logs.String(); strings.Contains(l, replicationWarning) {
		t.Errorf("warned about well replicated topics:\n%s", l)
	}
}

// TestInternalTopicRF1OnThreeBrokersWarns (issue #28 item 2): an existing
// changelog of one replica on a three-broker cluster is logged at Warn,
// once for the two pipelines, with the topic, the actual and the wanted
// replication and the command that fixes it; the application runs.
func TestInternalTopicRF1OnThreeBrokersWarns(t *testing.T) {
	brokers := startBrokers(t, 3, 2)
	adm := testAdmin(t, brokers)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := adm.CreateTopic(ctx, 2, 1, map[string]*string{"cleanup.policy": kadm.StringPtr("compact")}, "app-changelog"); err != nil {
		t.Fatal(err)
	}
	cfg := config(brokers, t.TempDir(), testprocs.NewCounter)
	cfg.Batching.Pipelines = 2
	logs := logTo(&cfg)
	app, err := kstate.New(cfg.Topology, cfg.Options)
	if err != nil {
		t.Fatal(err)
	}
	stop := testprocs.Start(t, app)
	testprocs.Produce(t, brokers, "in", "a=1", "b=1", "c=1", "a=2")
	want(t, testprocs.WaitOutputs(t, brokers, "out", 4, 30*time.Second), "a=[1 2] b=[1] c=[1]")
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	var warned []string
	for _, line := range strings.Split(logs.String(), "\n") {
		if strings.Contains(line, replicationWarning) {
			warned = append(warned, line)
		}
	}
	if len(warned) != 1 {
		t.Fatalf("%d replication warnings, want 1:\n%s", len(warned), strings.Join(warned, "\n"))
	}
	for _, s := range []string{"topic=app-changelog", "replication factor 1 on a cluster of 3 brokers", "replication_factor=1",
		"brokers=3", "kafka-reassign-partitions", "3 replicas", "Options.Kafka.ReplicationFactor 3"} {
		if !strings.Contains(warned[0], s) {
			t.Errorf("the warning lacks %q: %s", s, warned[0])
		}
	}
}

// TestReplicationFactorOverBrokersFailsStart (issue #28 item 2): a
// replication factor the cluster cannot give fails Run at start with an
// ErrConfig naming the option and both numbers, and creates no topic.
func TestReplicationFactorOverBrokersFailsStart(t *testing.T) {
	brokers := startBrokers(t, 1, 2)
	cfg := config(brokers, t.TempDir(), testprocs.NewCounter)
	cfg.Kafka.ReplicationFactor = 3
	app := newApp(t, cfg)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err := app.Run(ctx)
	if !errors.Is(err, kstate.ErrConfig) || !strings.Contains(err.Error(), "Options.Kafka.ReplicationFactor 3") ||
		!strings.Contains(err.Error(), "needs 3 brokers, the cluster has 1 live") {
		t.Fatalf("Run: %v; want an ErrConfig naming Options.Kafka.ReplicationFactor 3 and the 1 broker", err)
	}
	if topicExists(t, brokers, "app-changelog") {
		t.Fatal("the failed start created the changelog")
	}
}

// TestMinInsyncAtReplicationWarns (issue #28 item 2): an existing
// changelog whose min.insync.replicas equals its replication factor (one
// replica down would stop every write) is logged at Warn with the
// kafka-configs command that fixes it; the application runs.
func TestMinInsyncAtReplicationWarns(t *testing.T) {
	brokers := startBrokers(t, 3, 2)
	adm := testAdmin(t, brokers)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := adm.CreateTopic(ctx, 2, 2, map[string]*string{"cleanup.policy": kadm.StringPtr("compact"),
		"min.insync.replicas": kadm.StringPtr("2")}, "app-changelog"); err != nil {
		t.Fatal(err)
	}
	cfg := config(brokers, t.TempDir(), testprocs.NewCounter)
	logs := logTo(&cfg)
	app, err := kstate.New(cfg.Topology, cfg.Options)
	if err != nil {
		t.Fatal(err)
	}
	stop := testprocs.Start(t, app)
	testprocs.Produce(t, brokers, "in", "a=1")
	want(t, testprocs.WaitOutputs(t, brokers, "out", 1, 30*time.Second), "a=[1]")
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	l := logs.String()
	if strings.Count(l, replicationWarning) != 1 || !strings.Contains(l, "min.insync.replicas 2 with replication factor 2") ||
		!strings.Contains(l, "--entity-name app-changelog --add-config min.insync.replicas=1") {
		t.Fatalf("want one warning about min.insync.replicas 2 of 2 replicas with the fix; log:\n%s", l)
	}
}

package integration

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/kstate/kstate"
	"github.com/kstate/kstate/internal/kafka"
	"github.com/kstate/kstate/internal/testlog"
	"github.com/kstate/kstate/internal/testprocs"
	"github.com/kstate/kstate/kafka/kafkatest"
	"github.com/kstate/kstate/serde"
	"github.com/kstate/kstate/statereader"
)

// A group that never committed has no committed offsets: on the real
// broker as on the embedded Kafka (kfake answers GROUP_ID_NOT_FOUND, which
// Admin.CommittedOffsets turns into the same empty answer; see
// TestEmbeddedRunToEndNewApplication), so RunToEnd of a new application
// starts from nothing on both.
func TestCommittedOffsetsOfNewGroup(t *testing.T) {
	t.Parallel()
	cluster := realKafka(t)
	topic := cluster.CreateTopic(t, "newgroup-in", 2)
	cluster.Produce(t, topic, kafkatest.Record{Key: []byte("k"), Value: []byte("v")})
	adm, err := kafka.NewAdmin(cluster.Brokers())
	if err != nil {
		t.Fatal(err)
	}
	defer adm.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	offs, err := adm.CommittedOffsets(ctx, kafkatest.Name(t, "never-committed"), topic)
	if err != nil || len(offs) != 0 {
		t.Fatalf("CommittedOffsets of a new group: %v, %v; want none and no error", offs, err)
	}
}

// Time travel on a real compacted changelog (Spark's state reader batchId
// option; a purged batch fails there too). The changelog topic is created
// beforehand with segments rolled every 100ms and cleaned at once, a count
// of key "a" advances by one per batch, and the cleaner runs while the
// test reads: every batch the reader answers has exactly the count that
// batch committed (N+1), every other one is a BatchNotReadableError below
// the oldest readable batch, the latest batch always reads, and batch 0
// ends up not readable once the cleaner has run.
func TestStateReaderAtBatchCompactedRealBroker(t *testing.T) {
	longTest(t)
	cluster := realKafka(t)
	brokers := cluster.Brokers()
	in := cluster.CreateTopic(t, "tt-in", 1)
	out := cluster.CreateTopic(t, "tt-out", 1)
	appID := kafkatest.Name(t, "tt-app")
	adm := newAdmin(t, brokers)
	createEagerlyCompacted(t, adm, appID+"-changelog", "100")
	cfg := testApp[string, string, string]{kstate.Topology[string, string, string]{
		Inputs:       kstate.Topics(serde.String(), in),
		KeySerde:     serde.String(),
		NewProcessor: testprocs.NewCounter,
		Output: kstate.Output[string, string]{
			Topic: out,
			Serde: serde.String(),
		},
	}, kstate.Options{
		ApplicationID: appID,
		Kafka: kstate.KafkaOptions{
			Brokers: brokers,
		},
		State: kstate.StateOptions{
			Dir: t.TempDir(),
		},
		Batching: kstate.BatchingOptions{
			MaxWait: 20 * time.Millisecond,
		},
		Observability: kstate.ObservabilityOptions{
			Logger: testlog.New(t),
		},
	}}
	app, err := kstate.New(cfg.Topology, cfg.Options)
	if err != nil {
		t.Fatal(err)
	}
	stop := testprocs.Start(t, app)
	const batches = 15
	for i := range batches {
		cluster.Produce(t, in, kafkatest.Record{Key: []byte("a"), Value: []byte("x")})
		cluster.ReadCommitted(t, out, i+1, time.Minute)
		time.Sleep(150 * time.Millisecond) // a segment per batch
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	// One more batch rolls the last of them out of the active segment.
	stop = testprocs.Start(t, mustNew(t, cfg))
	cluster.Produce(t, in, kafkatest.Record{Key: []byte("a"), Value: []byte("x")})
	cluster.ReadCommitted(t, out, batches+1, time.Minute)
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	const latest = batches

	read := func(n int64) (string, error) {
		r, err := statereader.OpenChangelog(t.Context(), brokers, appID, statereader.AtBatch(0, n))
		if err != nil {
			return "", err
		}
		es, err := r.Read("count", statereader.Query{Key: []byte("a")})
		if err != nil || len(es) != 1 {
			t.Fatalf("batch %d: entries %v, %v", n, es, err)
		}
		return string(es[0].Value), nil
	}
	deadline := time.Now().Add(2 * time.Minute)
	for {
		_, err := read(0)
		if errors.Is(err, statereader.ErrBatchNotReadable) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if time.Now().After(deadline) {
			t.Fatal("batch 0 still readable after 2 minutes: the cleaner never compacted the changelog")
		}
		time.Sleep(time.Second)
	}
	readable := 0
	for n := int64(0); n <= latest; n++ {
		got, err := read(n)
		var nr *statereader.BatchNotReadableError
		switch {
		case err == nil:
			if got != strconv.FormatInt(n+1, 10) {
				t.Fatalf("batch %d reads count %s, want %d (the count it committed)", n, got, n+1)
			}
			readable++
		case errors.As(err, &nr):
			if n >= nr.Oldest || nr.Latest != latest {
				t.Fatalf("batch %d: %v (oldest %d, latest %d)", n, err, nr.Oldest, nr.Latest)
			}
		default:
			t.Fatal(err)
		}
	}
	if readable == 0 {
		t.Fatal("not even the latest batch reads")
	}
	t.Logf("after compaction %d of %d batches still readable", readable, latest+1)
}

func mustNew(t *testing.T, cfg testApp[string, string, string]) *kstate.App[string, string, string] {
	t.Helper()
	app, err := kstate.New(cfg.Topology, cfg.Options)
	if err != nil {
		t.Fatal(err)
	}
	return app
}

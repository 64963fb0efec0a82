package main

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kstate/kstate"
	"github.com/kstate/kstate/internal/kafka"
	"github.com/kstate/kstate/kafka/kafkatest"
	"github.com/kstate/kstate/processor"
	"github.com/kstate/kstate/serde"
)

// TestResetGroupBy: reset deletes the GroupBy repartition topic with the
// changelog, and its committed offsets: after a reset to latest the next
// run starts at once on empty state, and after a reset to earliest it
// reprocesses the input once (no old forwarded record counted again).
func TestResetGroupBy(t *testing.T) {
	cluster := kafkatest.Start(t, kafkatest.RequireReal())
	in, out := cluster.CreateTopic(t, "resetg-in", 2), cluster.CreateTopic(t, "resetg-out", 2)
	appID := kafkatest.Name(t, "resetg-app")
	dir := t.TempDir()
	brokers := strings.Join(cluster.Brokers(), ",")
	cfg := kstate.Topology[string, string, string]{
		Inputs:       kstate.Topics(serde.String(), in),
		GroupBy:      []kstate.GroupBy[string, string]{{Topic: in, Key: func(_ []byte, v string) (string, error) { return v, nil }}},
		KeySerde:     serde.String(),
		NewProcessor: func() processor.StatefulProcessor[string, string, string] { return &rowCounter{} },
		Output: kstate.Output[string, string]{
			Topic: out,
			Serde: serde.String(),
		},
	}
	opts := kstate.Options{
		ApplicationID: appID,
		Kafka: kstate.KafkaOptions{
			Brokers:              cluster.Brokers(),
			LeaveGroupOnShutdown: true,
			TransactionTimeout:   5 * time.Second, // bounds a restore's wait: a reset that left offsets behind fails fast
		},
		State: kstate.StateOptions{
			Dir: dir,
		},
		Batching: kstate.BatchingOptions{
			MaxWait: 20 * time.Millisecond,
		},
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	adm, err := kafka.NewAdmin(cluster.Brokers())
	if err != nil {
		t.Fatal(err)
	}
	defer adm.Close()
	// run processes rows more rows (stage 2) and returns every output.
	run := func(rows int, wantOut int, produce ...string) []string {
		t.Helper()
		app, err := kstate.New(cfg, opts)
		if err != nil {
			t.Fatal(err)
		}
		rctx, rcancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- app.Run(rctx) }()
		var kvs []kafkatest.Record
		for i, v := range produce {
			kvs = append(kvs, kafkatest.Record{Key: []byte{'u', byte('0' + i)}, Value: []byte(v)})
		}
		cluster.Produce(t, in, kvs...)
		for app.Metrics().Total.RowsIn < int64(rows) {
			select {
			case err := <-done:
				t.Fatalf("Run: %v", err)
			default:
			}
			if ctx.Err() != nil {
				t.Fatalf("timed out waiting for %d rows", rows)
			}
			time.Sleep(20 * time.Millisecond)
		}
		got := cluster.ReadCommitted(t, out, wantOut, time.Minute)
		rcancel()
		if err := <-done; err != nil {
			t.Fatalf("Run: %v", err)
		}
		var vals []string
		for _, r := range got {
			vals = append(vals, string(r.Value))
		}
		slices.Sort(vals)
		return vals
	}
	if got, want := run(3, 3, "de", "fr", "de"), []string{"de=1", "de=2", "fr=1"}; !slices.Equal(got, want) {
		t.Fatalf("first run %q, want %q", got, want)
	}
	rep := appID + "-repartition"
	if _, err := adm.Partitions(ctx, rep); err != nil {
		t.Fatalf("repartition topic: %v", err)
	}

	so, se, code := cli(t, "reset", "--brokers", brokers, "--app", appID, "--state-dir", dir, "--to-latest")
	if code != exitOK || !strings.Contains(so, "delete topic "+rep) {
		t.Fatalf("reset --to-latest: code %d\n%s%s", code, so, se)
	}
	if m, err := adm.CommittedOffsets(ctx, appID, rep); err == nil && len(m) > 0 {
		t.Fatalf("reset --to-latest left offsets of %s: %v", rep, m)
	}
	// Empty state, the old input skipped: "de" counts from 1 again.
	if got, want := run(1, 4, "de"), []string{"de=1", "de=1", "de=2", "fr=1"}; !slices.Equal(got, want) {
		t.Fatalf("after reset to latest: outputs %q, want %q", got, want)
	}

	so, se, code = cli(t, "reset", "--brokers", brokers, "--app", appID, "--state-dir", dir)
	if code != exitOK {
		t.Fatalf("reset: code %d\n%s%s", code, so, se)
	}
	// Everything once more, from empty state: de=1 de=2 de=3 fr=1 again.
	got := run(4, 8)
	if want := []string{"de=1", "de=1", "de=1", "de=2", "de=2", "de=3", "fr=1", "fr=1"}; !slices.Equal(got, want) {
		t.Fatalf("after reset to earliest: outputs %q, want %q", got, want)
	}
}

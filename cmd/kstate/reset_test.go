package main

import (
	"context"
	"fmt"
	"iter"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kstate/kstate"
	"github.com/kstate/kstate/internal/kafka"
	"github.com/kstate/kstate/kafka/kafkatest"
	"github.com/kstate/kstate/processor"
	"github.com/kstate/kstate/serde"
	"github.com/kstate/kstate/state"
)

// rowCounter counts rows per key and emits "key=count" for every row.
type rowCounter struct {
	processor.Defaults[string, string]
	count state.ValueState[int64]
}

func (c *rowCounter) Init(h processor.Handle) (err error) {
	c.count, err = processor.NewValueState(h, "count", state.Int64())
	return err
}

func (c *rowCounter) HandleInputRows(key string, rows iter.Seq[string], _ processor.TimerValues, out processor.Emitter[string]) error {
	n, _, err := c.count.Get()
	if err != nil {
		return err
	}
	for range rows {
		n++
		if err := out.Emit(fmt.Sprintf("%s=%d", key, n)); err != nil {
			return err
		}
	}
	return c.count.Update(n)
}

// TestReset: a dry run changes nothing; a reset to earliest makes the next
// run reprocess the input from scratch with exactly the first run's
// outputs; a reset to latest skips what is there; a running application's
// group is refused.
func TestReset(t *testing.T) {
	cluster := kafkatest.Start(t, kafkatest.RequireReal())
	in, out := cluster.CreateTopic(t, "reset-in", 2), cluster.CreateTopic(t, "reset-out", 2)
	appID := kafkatest.Name(t, "reset-app")
	dir := t.TempDir()
	brokers := strings.Join(cluster.Brokers(), ",")
	cfg := kstate.Topology[string, string, string]{
		Inputs:       kstate.Topics(serde.String(), in),
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
		},
		State: kstate.StateOptions{
			Dir: dir,
		},
		Batching: kstate.BatchingOptions{
			MaxWait: 20 * time.Millisecond,
		},
	}
	adm, err := kafka.NewAdmin(cluster.Brokers())
	if err != nil {
		t.Fatal(err)
	}
	defer adm.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	committed := func() map[int32]int64 {
		t.Helper()
		m, err := adm.CommittedOffsets(ctx, appID, in)
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	// run runs the app until it processed rows more input rows, with
	// inside() called while it runs, and returns all outputs so far.
	run := func(rows int, wantOut int, produce []string, inside func()) []string {
		t.Helper()
		app, err := kstate.New(cfg, opts)
		if err != nil {
			t.Fatal(err)
		}
		rctx, rcancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- app.Run(rctx) }()
		cluster.Produce(t, in, recs(produce...)...)
		for app.Metrics().Total.RowsIn < int64(rows) {
			if ctx.Err() != nil {
				t.Fatalf("timed out waiting for %d rows", rows)
			}
			time.Sleep(20 * time.Millisecond)
		}
		got := cluster.ReadCommitted(t, out, wantOut, time.Minute)
		if inside != nil {
			inside()
		}
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

	first := run(3, 3, []string{"a", "b", "a"}, func() {
		_, se, code := cli(t, "reset", "--brokers", brokers, "--app", appID)
		if code != exitRefused || !strings.Contains(se, "reset refused") {
			t.Errorf("reset of a running application: code %d, stderr %s", code, se)
		}
	})
	if want := []string{"a=1", "a=2", "b=1"}; !slices.Equal(first, want) {
		t.Fatalf("first run %q, want %q", first, want)
	}
	before := committed()
	changelog := appID + "-changelog"

	so, se, code := cli(t, "reset", "--brokers", brokers, "--app", appID, "--state-dir", dir, "--dry-run")
	if code != exitOK || !strings.Contains(so, "dry run: nothing changed") || !strings.Contains(so, "delete topic "+changelog) {
		t.Fatalf("dry run: code %d\n%s%s", code, so, se)
	}
	t.Logf("dry run:\n%s", so)
	if after := committed(); fmt.Sprint(after) != fmt.Sprint(before) {
		t.Errorf("dry run moved the offsets: %v → %v", before, after)
	}
	if _, err := adm.Partitions(ctx, changelog); err != nil {
		t.Errorf("dry run: changelog: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, appID)); err != nil {
		t.Errorf("dry run: local state: %v", err)
	}

	so, se, code = cli(t, "reset", "--brokers", brokers, "--app", appID, "--state-dir", dir)
	if code != exitOK {
		t.Fatalf("reset: code %d\n%s%s", code, so, se)
	}
	if _, err := adm.Partitions(ctx, changelog); err == nil {
		t.Errorf("reset: the changelog still exists")
	}
	if _, err := os.Stat(filepath.Join(dir, appID)); !os.IsNotExist(err) {
		t.Errorf("reset: local state still there: %v", err)
	}
	if m, err := adm.CommittedOffsets(ctx, appID, in); err == nil && len(m) > 0 {
		t.Errorf("reset to earliest: the group still has offsets %v", m)
	}

	// The rerun reprocesses everything from empty state: the same outputs again.
	all := run(3, 6, nil, nil)
	if want := []string{"a=1", "a=1", "a=2", "a=2", "b=1", "b=1"}; !slices.Equal(all, want) {
		t.Fatalf("after reset to earliest: outputs %q, want %q", all, want)
	}

	// Flags that contradict each other are a usage error; a time in the
	// future resets to the end (dry run: only the plan).
	if _, _, code := cli(t, "reset", "--brokers", brokers, "--app", appID, "--to-latest", "--to-earliest"); code != exitUsage {
		t.Errorf("--to-latest --to-earliest: code %d", code)
	}
	if _, _, code := cli(t, "reset", "--brokers", brokers, "--app", appID, "--to-datetime", "yesterday"); code != exitUsage {
		t.Errorf("--to-datetime yesterday: code %d", code)
	}
	so, se, code = cli(t, "reset", "--brokers", brokers, "--app", appID, "--to-datetime", "2999-01-01T00:00:00Z", "--dry-run")
	if code != exitOK || !strings.Contains(so, "the first record at or after 2999-01-01T00:00:00Z") || !strings.Contains(so, "dry run: nothing changed") {
		t.Errorf("--to-datetime dry run: code %d\n%s%s", code, so, se)
	}

	// To latest: the existing input is skipped, new input counts from zero.
	if _, se, code := cli(t, "reset", "--brokers", brokers, "--app", appID, "--to-latest", "--state-dir", dir); code != exitOK {
		t.Fatalf("reset --to-latest: code %d: %s", code, se)
	}
	all = run(2, 8, []string{"c", "a"}, nil)
	if want := []string{"a=1", "a=1", "a=1", "a=2", "a=2", "b=1", "b=1", "c=1"}; !slices.Equal(all, want) {
		t.Fatalf("after reset to latest: outputs %q, want %q", all, want)
	}
}

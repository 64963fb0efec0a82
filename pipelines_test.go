package kstate_test

import (
	"errors"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/kstate/kstate"
	"github.com/kstate/kstate/internal/testprocs"
	"github.com/kstate/kstate/kafka/embedded"
	"github.com/kstate/kstate/processor"
	"github.com/kstate/kstate/serde"
)

// checkExact fails unless got holds exactly 1..n per key, sent outputs in
// all, over keys keys.
func checkExact(t *testing.T, got testprocs.Outputs, sent, keys int) {
	t.Helper()
	if got.Count() != sent {
		t.Fatalf("%d outputs for %d inputs: %v", got.Count(), sent, got)
	}
	for k, vs := range got {
		for i, v := range vs {
			if v != strconv.Itoa(i+1) {
				t.Fatalf("key %s: outputs %v are not 1..%d", k, vs, len(vs))
			}
		}
	}
	if len(got) != keys {
		t.Fatalf("%d keys, want %d", len(got), keys)
	}
}

// pipelinesOf returns the pipelines owning the partitions of st, by
// pipeline.
func pipelinesOf(st kstate.Status) map[int][]int32 {
	out := map[int][]int32{}
	for _, p := range st.Partitions {
		out[p.Pipeline] = append(out[p.Pipeline], p.Partition)
	}
	return out
}

// Pipelines=2: the two group members of one instance split the partitions
// (Status shows both), every count is exact, and a restart with one
// pipeline continues from the state the two left (same state directory).
func TestEmbeddedPipelinesSplitPartitions(t *testing.T) {
	brokers := startEmbedded(t, 4)
	dir := t.TempDir()
	cfg := config(brokers, dir, testprocs.NewCounter)
	cfg.Batching.Pipelines = 2
	app := newApp(t, cfg)
	stop := testprocs.Start(t, app)
	const keys = 20
	in := &testprocs.KeyCycler{T: t, Brokers: brokers, Topic: "in", Keys: keys}
	in.Produce(200)
	checkExact(t, testprocs.WaitOutputs(t, brokers, "out", in.Sent, 30*time.Second), in.Sent, keys)
	testprocs.Eventually(t, 30*time.Second, "both pipelines own two partitions", func() bool {
		by := pipelinesOf(app.Status())
		return len(by[0]) == 2 && len(by[1]) == 2 && app.State() == kstate.Running
	})
	// The local commit (and its counters) follows the transaction's.
	testprocs.Eventually(t, 10*time.Second, "totals count every row", func() bool {
		st := app.Status()
		return st.Total.RowsIn == int64(in.Sent) && st.Total.RowsOut == int64(in.Sent)
	})
	t.Logf("partitions by pipeline: %v; totals %+v", pipelinesOf(app.Status()), app.Status().Total)
	// Queries and KeyOwner answer for the keys of both pipelines.
	got := testprocs.WaitOutputs(t, brokers, "out", in.Sent, 30*time.Second)
	owners := map[string]bool{}
	for k, vs := range got {
		res, err := app.Query(t.Context(), "count", k)
		if err != nil || len(res.Entries) != 1 || string(res.Entries[0].Value) != strconv.Itoa(len(vs)) {
			t.Fatalf("Query(count, %q) = %+v, %v; want %d", k, res, err, len(vs))
		}
		o, err := app.KeyOwner(t.Context(), k)
		if err != nil || !o.Local || !o.Assigned {
			t.Fatalf("KeyOwner(%q) = %+v, %v", k, o, err)
		}
		owners[o.InstanceID] = true
	}
	if !owners["i1"] || !owners["i1-p1"] || len(owners) != 2 {
		t.Fatalf("key owners %v, want the members i1 and i1-p1", owners)
	}
	if m := app.Metrics(); len(m.Assigned) != 4 || len(m.Restoring) != 0 {
		t.Fatalf("metrics: assigned %v, restoring %v", m.Assigned, m.Restoring)
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}

	cfg.Batching.Pipelines = 1
	app = newApp(t, cfg)
	stop = testprocs.Start(t, app)
	in.Produce(40)
	checkExact(t, testprocs.WaitOutputs(t, brokers, "out", in.Sent, 30*time.Second), in.Sent, keys)
	if err := stop(); err != nil {
		t.Fatal(err)
	}
}

// Two instances with two pipelines each share the partitions while input
// flows (shards move between pipelines of one process and between
// processes), then the first stops: outputs stay exactly 1..n per key.
func TestEmbeddedPipelinesRebalanceTwoInstances(t *testing.T) {
	brokers := startEmbedded(t, 4)
	cfg1 := config(brokers, t.TempDir(), testprocs.NewCounter)
	cfg1.Kafka.SessionTimeout = 4 * time.Second
	cfg1.Batching.Pipelines = 2
	cfg2 := cfg1
	cfg2.InstanceID, cfg2.State.Dir = "i2", t.TempDir()
	app1 := newApp(t, cfg1)
	stop1 := testprocs.Start(t, app1)
	const keys = 20
	in := &testprocs.KeyCycler{T: t, Brokers: brokers, Topic: "in", Keys: keys}
	in.Produce(100)
	testprocs.WaitOutputs(t, brokers, "out", in.Sent, 30*time.Second)

	app2 := newApp(t, cfg2)
	stop2 := testprocs.Start(t, app2)
	testprocs.Eventually(t, 30*time.Second, "all four pipelines own a partition", func() bool {
		in.Produce(10)
		time.Sleep(100 * time.Millisecond)
		b1, b2 := pipelinesOf(app1.Status()), pipelinesOf(app2.Status())
		return len(b1) == 2 && len(b2) == 2 && app1.State() == kstate.Running && app2.State() == kstate.Running
	})
	checkExact(t, testprocs.WaitOutputs(t, brokers, "out", in.Sent, 30*time.Second), in.Sent, keys)
	if err := stop1(); err != nil {
		t.Fatal(err)
	}
	testprocs.Eventually(t, 30*time.Second, "instance 2 owns all partitions", func() bool {
		in.Produce(5)
		time.Sleep(100 * time.Millisecond)
		m := app2.Metrics()
		return len(m.Assigned) == 4 && len(m.Restoring) == 0
	})
	in.Produce(50)
	checkExact(t, testprocs.WaitOutputs(t, brokers, "out", in.Sent, 30*time.Second), in.Sent, keys)
	if err := stop2(); err != nil {
		t.Fatal(err)
	}
	m1, m2 := app1.Metrics().Total, app2.Metrics().Total
	t.Logf("instance 1: %d commits, %d aborts; instance 2: %d commits, %d aborts, %d records restored",
		m1.Commits, m1.Aborts, m2.Commits, m2.Aborts, m2.RestoreRecords)
}

// A graceful stop in the first second of a run, while the App's pipelines
// are still rebalancing among themselves (the second pipeline joins after
// the first took every partition; cooperative-sticky then moves half of
// them), returns promptly: the pipelines close their sessions together and
// do not wait for a group join that waits for a sibling already closed
// (without the fix: SessionTimeout, or ShutdownTimeout with a batch in
// flight). Records are produced while the runs start and stop, and a last
// run checks that every count is exact.
func TestEmbeddedPipelinesStopDuringRebalance(t *testing.T) {
	rounds := 6
	if testing.Short() {
		rounds = 3
	}
	topics := map[string]int{}
	for r := range rounds {
		topics["in"+strconv.Itoa(r)], topics["out"+strconv.Itoa(r)] = 4, 4
	}
	e, err := embedded.Start(embedded.Options{Topics: topics})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Close)
	brokers := e.Brokers()
	const keys = 20
	var slow []string
	for round := range rounds {
		// A new application per round (its own group and topics): the
		// rebalance among the pipelines is at its longest in a group's
		// first second, as the second pipeline joins after the first
		// took every partition.
		r := strconv.Itoa(round)
		cfg := config(brokers, t.TempDir(), testprocs.NewCounter)
		cfg.ApplicationID, cfg.Inputs, cfg.Output.Topic = "stop"+r, kstate.Topics(serde.String(), "in"+r), "out"+r
		cfg.Batching.Pipelines = 2
		cfg.Kafka.SessionTimeout = 6 * time.Second
		cfg.Timeouts.Shutdown = 20 * time.Second
		in := &testprocs.KeyCycler{T: t, Brokers: brokers, Topic: "in" + r, Keys: keys}
		in.Produce(40)
		stop := testprocs.Start(t, newApp(t, cfg))
		time.Sleep(time.Duration(round%4) * 200 * time.Millisecond)
		in.Produce(40) // a batch in flight at the stop, often
		start := time.Now()
		if err := stop(); err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		if d := time.Since(start); d > 3*time.Second {
			slow = append(slow, fmt.Sprintf("round %d: %v", round, d.Round(time.Millisecond)))
		}
		// The same application again (the group possibly still in the
		// rebalance the stop abandoned): every count exact.
		in.Produce(20)
		stop = testprocs.Start(t, newApp(t, cfg))
		checkExact(t, testprocs.WaitOutputs(t, brokers, "out"+r, in.Sent, 30*time.Second), in.Sent, keys)
		if err := stop(); err != nil {
			t.Fatalf("round %d, second run: %v", round, err)
		}
	}
	if len(slow) > 0 {
		t.Fatalf("stops that took over 3s: %v", slow)
	}
}

// A processor error in one pipeline stops the other too: Run returns that
// error (and the App is Failed).
func TestEmbeddedPipelinesFirstErrorStopsAll(t *testing.T) {
	brokers := startEmbedded(t, 4)
	cfg := config(brokers, t.TempDir(), func() processor.StatefulProcessor[string, string, string] { return &failing{} })
	cfg.Batching.Pipelines = 2
	cfg.Kafka.LeaveGroupOnShutdown = true // not used: Run fails
	app := newApp(t, cfg)
	_, done := testprocs.StartWatch(t, app)
	testprocs.Eventually(t, 30*time.Second, "both pipelines own partitions", func() bool {
		return len(pipelinesOf(app.Status())) == 2 && app.State() == kstate.Running
	})
	testprocs.Produce(t, brokers, "in", "a=1", "k=boom")
	select {
	case err := <-done:
		var ue *kstate.UserError
		if !errors.As(err, &ue) || ue.Method != "HandleInputRows" || ue.Key != `"k"` {
			t.Fatalf("Run: %v", err)
		}
		if app.State() != kstate.Failed {
			t.Fatalf("state %v after a pipeline failed", app.State())
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Run did not fail")
	}
}

func TestPipelinesConfig(t *testing.T) {
	cfg := config([]string{"x:1"}, t.TempDir(), testprocs.NewCounter)
	cfg.Batching.Pipelines = -1
	if _, err := kstate.New(cfg.Topology, cfg.Options); !errors.Is(err, kstate.ErrConfig) {
		t.Fatalf("Pipelines -1: %v", err)
	}
	for _, n := range []int{0, 1, 4} {
		cfg.Batching.Pipelines = n
		if _, err := kstate.New(cfg.Topology, cfg.Options); err != nil {
			t.Fatalf("Pipelines %d: %v", n, err)
		}
	}
}

package integration

import (
	"context"
	"io"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kstate/kstate"
	"github.com/kstate/kstate/internal/testlog"
	"github.com/kstate/kstate/internal/testprocs"
	"github.com/kstate/kstate/processor"
)

// Options.Batching.Pipelines and the start-up pause on the real broker.

// byPipeline returns the partitions of st by owning pipeline.
func byPipeline(st kstate.Status) map[int][]int32 {
	out := map[int][]int32{}
	for _, p := range st.Partitions {
		out[p.Pipeline] = append(out[p.Pipeline], p.Partition)
	}
	return out
}

// Two pipelines in one instance split the four partitions (Status shows
// both), counts are exact, and the App is Running once both are.
func TestPipelinesSplitExactlyOnce(t *testing.T) {
	t.Parallel()
	e := newSpecEnv(t, 4)
	cfg := e.config(t, testprocs.NewCounter)
	cfg.Batching.Pipelines = 2
	app := newSpecApp(t, cfg)
	stop := testprocs.Start(t, app)
	const keys = 40
	in := &testprocs.KeyCycler{T: t, Brokers: e.brokers, Topic: e.in, Keys: keys}
	in.Produce(2000)
	checkCounts(t, testprocs.WaitOutputs(t, e.brokers, e.out, in.Sent, waitOut), in.Sent, keys)
	testprocs.Eventually(t, waitOut, "both pipelines own two partitions and every row is counted", func() bool {
		st := app.Status()
		by := byPipeline(st)
		return len(by[0]) == 2 && len(by[1]) == 2 && st.State == "Running" && st.Total.RowsIn == int64(in.Sent)
	})
	st := app.Status()
	t.Logf("partitions by pipeline %v; %d commits, %d aborts", byPipeline(st), st.Total.Commits, st.Total.Aborts)
	in.Produce(400)
	checkCounts(t, testprocs.WaitOutputs(t, e.brokers, e.out, in.Sent, waitOut), in.Sent, keys)
	if err := stop(); err != nil {
		t.Fatal(err)
	}
}

// Two instances with two pipelines each: the second joins while input
// flows (partitions move from the first instance's pipelines to the
// second's), then the first stops (its static members' partitions move
// after the session timeout): counts stay exact throughout.
func TestPipelinesRebalanceTwoInstances(t *testing.T) {
	t.Parallel()
	e := newSpecEnv(t, 4)
	cfg1 := e.config(t, testprocs.NewCounter)
	cfg1.Kafka.SessionTimeout = 6 * time.Second // the broker's minimum
	cfg1.Batching.Pipelines = 2
	cfg2 := cfg1
	cfg2.InstanceID, cfg2.State.Dir = "i2", t.TempDir()
	app1 := newSpecApp(t, cfg1)
	stop1 := testprocs.Start(t, app1)
	const keys = 20
	in := &testprocs.KeyCycler{T: t, Brokers: e.brokers, Topic: e.in, Keys: keys}
	in.Produce(200)
	testprocs.WaitOutputs(t, e.brokers, e.out, in.Sent, waitOut)

	app2 := newSpecApp(t, cfg2)
	stop2 := testprocs.Start(t, app2)
	testprocs.Eventually(t, waitOut, "each of the four pipelines owns a partition", func() bool {
		in.Produce(10)
		time.Sleep(100 * time.Millisecond)
		return len(byPipeline(app1.Status())) == 2 && len(byPipeline(app2.Status())) == 2 &&
			app1.State() == kstate.Running && app2.State() == kstate.Running
	})
	checkCounts(t, testprocs.WaitOutputs(t, e.brokers, e.out, in.Sent, waitOut), in.Sent, keys)
	if err := stop1(); err != nil {
		t.Fatal(err)
	}
	testprocs.Eventually(t, waitOut, "instance 2 owns all partitions", func() bool {
		in.Produce(5)
		time.Sleep(100 * time.Millisecond)
		m := app2.Metrics()
		return len(m.Assigned) == 4 && len(m.Restoring) == 0
	})
	in.Produce(100)
	checkCounts(t, testprocs.WaitOutputs(t, e.brokers, e.out, in.Sent, waitOut), in.Sent, keys)
	if err := stop2(); err != nil {
		t.Fatal(err)
	}
	m1, m2 := app1.Metrics().Total, app2.Metrics().Total
	t.Logf("instance 1: %d commits, %d aborts; instance 2: %d commits, %d aborts, %d changelog records restored",
		m1.Commits, m1.Aborts, m2.Commits, m2.Aborts, m2.RestoreRecords)
}

// RunToEnd with two pipelines returns once the group's committed offsets
// reached the ends, with exact counts.
func TestPipelinesRunToEnd(t *testing.T) {
	t.Parallel()
	const parts, keys, perKey = 4, 50, 40
	e := newSpecEnv(t, parts)
	n := produceBacklog(t, e.brokers, e.in, keys, perKey)
	cfg := e.config(t, testprocs.NewCounter)
	cfg.Batching.Pipelines = 2
	app := newSpecApp(t, cfg)
	done := make(chan error, 1)
	go func() { done <- app.RunToEnd(t.Context()) }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(2 * waitOut):
		t.Fatal("RunToEnd did not return")
	}
	committed, ends := offsetsAtEnd(t, e.brokers, e.app, e.in)
	for p, end := range ends {
		if committed[p] != end {
			t.Fatalf("partition %d: committed %d, end %d", p, committed[p], end)
		}
	}
	checkCounts(t, testprocs.WaitOutputs(t, e.brokers, e.out, n, waitOut), n, keys)
}

// A fresh start no longer fetches a partition before its state is ready:
// the sessions pause it inside the assignment callback, so the engine's
// rewind (an aborted empty transaction) does not happen, with one pipeline
// and with two; and the first transaction carries input (also when a
// ProcessingTime trigger is due at once), so it does not pay franz-go's
// 500 ms. The outputs are exact.
func TestFreshStartDoesNotRewind(t *testing.T) {
	// Not parallel (main_test.go): the commits must take < 500 ms in all.
	for _, tc := range []struct {
		name  string
		pipes int
		mode  processor.TimeMode
	}{{"one-pipeline", 1, processor.NoTime}, {"two-pipelines", 2, processor.NoTime}, {"processing-time", 1, processor.ProcessingTime}} {
		pipes := tc.pipes
		t.Run(tc.name, func(t *testing.T) {
			e := newSpecEnv(t, 4)
			const keys = 20
			in := &testprocs.KeyCycler{T: t, Brokers: e.brokers, Topic: e.in, Keys: keys}
			in.Produce(400) // a backlog waiting at the start: every partition has records
			cfg := e.config(t, testprocs.NewCounter)
			cfg.Batching.Pipelines, cfg.TimeMode = pipes, tc.mode
			var logs testlog.Buffer
			cfg.Observability.Logger = slog.New(slog.NewTextHandler(io.MultiWriter(&logs, t.Output()), nil))
			app := newSpecApp(t, cfg)
			stop := testprocs.Start(t, app)
			checkCounts(t, testprocs.WaitOutputs(t, e.brokers, e.out, in.Sent, waitOut), in.Sent, keys)
			if err := stop(); err != nil {
				t.Fatal(err)
			}
			m := app.Metrics()
			t.Logf("first commit %v after start; %d commits (%v in all), %d aborts", m.FirstCommit, m.Total.Commits, m.Total.CommitLatency, m.Total.Aborts)
			if strings.Contains(logs.String(), "rewinding to the committed offsets") {
				t.Fatal("a fresh start rewound: records of a partition not restored yet were fetched")
			}
			if pipes == 1 && m.Total.Aborts != 0 {
				t.Fatalf("%d aborted transactions on a fresh start", m.Total.Aborts)
			}
			// The first transaction rides with input (consumed offsets),
			// so franz-go's 500 ms wait of an offset-less first commit
			// is not paid: every commit is a few ms.
			if m.Total.CommitLatency >= 500*time.Millisecond {
				t.Errorf("%d commits took %v in all: the first transaction paid franz-go's 500 ms", m.Total.Commits, m.Total.CommitLatency)
			}
		})
	}
}

// groupInstances returns the static instance ids of the group's members.
func groupInstances(t *testing.T, brokers []string, group string) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	groups, err := newAdmin(t, brokers).DescribeGroups(ctx, group)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, m := range groups[group].Members {
		if m.InstanceID != nil {
			ids = append(ids, *m.InstanceID)
		}
	}
	slices.Sort(ids)
	return ids
}

// openTransactionalIDs returns the transactional ids of the app's
// producers the broker knows.
func openTransactionalIDs(t *testing.T, brokers []string, app string) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	txns, err := newAdmin(t, brokers).ListTransactions(ctx, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, tx := range txns.Sorted() {
		if strings.HasPrefix(tx.TxnID, app+"-") {
			ids = append(ids, tx.TxnID)
		}
	}
	slices.Sort(ids)
	return slices.Compact(ids)
}

// Upgrade and downgrade of the pipeline count with one state directory:
// an instance that ran one pipeline (Pipelines 1) restarts with two on
// four partitions (the automatic default's count on two cores, once it
// follows the cores: maxAutoPipelines): pipeline 0
// keeps its static member and transactional id, pipeline 1 joins as
// "<InstanceID>-p1" and takes partitions over from pipeline 0's shards on
// disk, counts stay exact. Then back to one pipeline without leaving the
// group: the static member "-p1" stays until its session times out, its
// partitions wait for that, and then the one pipeline owns all four, with
// exact counts.
func TestPipelinesUpgradeToAutomaticAndBack(t *testing.T) {
	// Not parallel (main_test.go): output delays are compared with SessionTimeout.
	e := newSpecEnv(t, 4)
	cfg := e.config(t, testprocs.NewCounter)
	cfg.Kafka.SessionTimeout = 6 * time.Second // the broker's minimum
	cfg.Batching.Pipelines = 1
	const keys = 40
	in := &testprocs.KeyCycler{T: t, Brokers: e.brokers, Topic: e.in, Keys: keys}
	// run runs an instance with pipelines, checks it, stops it and
	// returns how long its first outputs took after the input.
	run := func(name string, pipelines int, check func(app *kstate.App[string, string, string])) time.Duration {
		cfg.Batching.Pipelines = pipelines
		app := newSpecApp(t, cfg)
		stop := testprocs.Start(t, app)
		in.Produce(400)
		start := time.Now()
		checkCounts(t, testprocs.WaitOutputs(t, e.brokers, e.out, in.Sent, waitOut), in.Sent, keys)
		took := time.Since(start)
		t.Logf("%s: %d outputs exact %v after the input", name, in.Sent, took.Round(time.Millisecond))
		check(app)
		in.Produce(200)
		checkCounts(t, testprocs.WaitOutputs(t, e.brokers, e.out, in.Sent, waitOut), in.Sent, keys)
		st := app.Status()
		t.Logf("%s: partitions by pipeline %v; %d commits, %d aborts, %d changelog records restored", name,
			byPipeline(st), st.Total.Commits, st.Total.Aborts, st.Total.RestoreRecords)
		if err := stop(); err != nil {
			t.Fatal(err)
		}
		return took
	}
	two := func(app *kstate.App[string, string, string]) {
		testprocs.Eventually(t, waitOut, "two pipelines own two partitions each", func() bool {
			by := byPipeline(app.Status())
			return len(by[0]) == 2 && len(by[1]) == 2 && app.State() == kstate.Running
		})
		if got := groupInstances(t, e.brokers, e.app); !slices.Equal(got, []string{"i1", "i1-p1"}) {
			t.Fatalf("group members %v with two pipelines: want i1 (as before) and i1-p1", got)
		}
		if got, want := openTransactionalIDs(t, e.brokers, e.app), []string{e.app + "-i1", e.app + "-i1-p1"}; !slices.Equal(got, want) {
			t.Fatalf("transactional ids %v: want %v", got, want)
		}
	}
	onePipeline := func(app *kstate.App[string, string, string]) {
		testprocs.Eventually(t, waitOut, "one pipeline owns all four partitions", func() bool {
			in.Produce(4)
			time.Sleep(100 * time.Millisecond)
			st := app.Status()
			return len(st.Partitions) == 4 && len(byPipeline(st)[0]) == 4 && app.State() == kstate.Running
		})
		if got := groupInstances(t, e.brokers, e.app); !slices.Equal(got, []string{"i1"}) {
			t.Fatalf("group members %v with one pipeline", got)
		}
	}
	run("one pipeline", 1, func(app *kstate.App[string, string, string]) {
		if got := groupInstances(t, e.brokers, e.app); !slices.Equal(got, []string{"i1"}) {
			t.Fatalf("group members %v with Pipelines 1", got)
		}
	})
	run("two pipelines", 2, two)
	// Back to one pipeline, without LeaveGroupOnShutdown: "i1-p1" stays a
	// member until its session times out, and its partitions wait for it.
	if took := run("one pipeline again", 1, onePipeline); took < cfg.Kafka.SessionTimeout/2 {
		t.Logf("the outputs of i1-p1's partitions came %v after the input: expected a wait for its session timeout (%v)", took, cfg.Kafka.SessionTimeout)
	}
	// With LeaveGroupOnShutdown every pipeline leaves the group at the
	// stop: the one pipeline after it gets all partitions at once.
	cfg.Kafka.LeaveGroupOnShutdown = true
	run("two pipelines, leaving the group at the stop", 2, two)
	cfg.Kafka.LeaveGroupOnShutdown = false
	if took := run("one pipeline after leaving", 1, onePipeline); took >= cfg.Kafka.SessionTimeout {
		t.Fatalf("outputs %v after the input: the members that left still held partitions until their session timeout", took)
	}
}

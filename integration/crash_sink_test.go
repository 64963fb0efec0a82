package integration

import (
	"context"
	"database/sql"
	"fmt"
	"maps"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"

	_ "modernc.org/sqlite"

	"github.com/kstate/kstate/examples/foreachbatch/sqlsink"
	"github.com/kstate/kstate/internal/engine"
	"github.com/kstate/kstate/internal/testprocs"
)

// TestCrashSinkExactlyOnce: the counter application with a foreachBatch
// sink writing to SQLite (examples/foreachbatch/sqlsink, no output topic)
// runs as a child process that is SIGKILLed again and again, at seeded
// random moments and at the kill points of the sink protocol: after the
// batch plan committed, between the sink's write and the Kafka commit
// (after-sink), after the produce and before the local commit. The sink
// records every call. Afterwards every batch id the sink saw more than once
// had exactly the same rows each time, and the table equals the model (the
// count of every key in the input).
func TestCrashSinkExactlyOnce(t *testing.T) {
	t.Parallel()
	seed, kills := crashParams(t, 20)
	rng := rand.New(rand.NewPCG(seed, 7))
	const parts = 3
	e := newSpecEnv(t, parts)
	dbPath := filepath.Join(t.TempDir(), "sink.db")
	args := eosChildArgs{brokers: e.brokers, app: e.app, instance: "i1", stateDir: t.TempDir(),
		in: e.in, proc: "counter", sinkDB: dbPath}
	model := map[string]int{}
	produce := func(n int) {
		kvs := make([]string, n)
		for i := range kvs {
			k := "k" + strconv.Itoa(rng.IntN(40))
			model[k]++
			kvs[i] = k + "=x"
		}
		testprocs.Produce(t, e.brokers, e.in, kvs...)
	}
	kinds := []string{killDelay, string(engine.AfterPlan), string(engine.AfterSink), string(engine.AfterProduce), string(engine.BeforeLocalCommit)}
	st := newCrashStats()
	start := time.Now()
	for _, kind := range killSchedule(rng, kills, kinds) {
		st.planned[kind]++
		a := args
		a.maxBatch = []int{5, 25, 100}[rng.IntN(3)]
		if kind != killDelay {
			// Each kill point comes once per batch (before-local-commit
			// once per partition of the batch); a round's wave of input
			// makes one to a few batches.
			a.killPoint = fmt.Sprintf("%s@%d", kind, 1+rng.IntN(2))
		}
		c := startEOSChild(t, a)
		produce(40 + rng.IntN(80))
		if kind == killDelay {
			time.Sleep(time.Duration(100+rng.IntN(1400)) * time.Millisecond) // the kill's random moment
			c.failIfErrored(t)
			c.kill()
			continue
		}
		if !c.wait(10 * time.Second) {
			st.notReached++
			c.kill()
			t.Logf("kill point %s not reached in 10s: killed it", a.killPoint)
			continue
		}
		c.failIfErrored(t)
		p, ok := c.killPointReached()
		if !ok || p != kind {
			c.dump(t)
			t.Fatalf("child died (%s) without reporting kill point %s", describeExit(c), a.killPoint)
		}
		st.reached[p]++
	}
	t.Logf("%d kills in %v: %s", kills, time.Since(start).Round(time.Millisecond), st)
	for _, k := range kinds[1:] {
		if kills >= 2*len(kinds) && st.reached[k] == 0 {
			t.Errorf("kill point %s was never reached", k)
		}
	}

	// A clean final run consumes everything (it owns every partition
	// before the table is checked: the table may equal the model already).
	final := startEOSChild(t, args)
	waitFor(t, time.Minute, "the final run owns every partition", func() bool {
		m := final.metrics()
		return len(m.assigned) == parts && len(m.restoring) == 0
	}, final)
	db, err := sql.Open("sqlite", "file:"+dbPath+"?_pragma=busy_timeout(10000)")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ctx := context.Background()
	sink, err := sqlsink.Open(ctx, db, sqlsink.SQLite, "counts", true)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{}
	for k, n := range model {
		want[k] = strconv.Itoa(n)
	}
	var got map[string]string
	waitFor(t, time.Minute, "the sink's table equals the model", func() bool {
		got, err = sink.Table(ctx)
		return err == nil && maps.Equal(got, want)
	}, final)
	final.stop(t, 30*time.Second)

	got, err = sink.Table(ctx)
	if err != nil || !maps.Equal(got, want) {
		keys := slices.Sorted(maps.Keys(want))
		t.Fatalf("seed %d: sink table differs from the model (err %v)\nkeys %v\n got %v\nwant %v", seed, err, keys, got, want)
	}
	calls, err := sink.Calls(ctx)
	if err != nil {
		t.Fatal(err)
	}
	retries, err := sqlsink.CheckCalls(calls)
	if err != nil {
		t.Fatalf("seed %d: %v", seed, err)
	}
	t.Logf("sink: %d calls, %d of them retries of a batch id already seen (same rows each time); table of %d keys equals the model (%d input rows)",
		len(calls), retries, len(got), sum(model))
	if kills >= 2*len(kinds) && retries == 0 {
		t.Error("no batch was ever retried: the kills did not exercise the sink protocol")
	}
}

func sum(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}

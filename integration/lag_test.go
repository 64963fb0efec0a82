package integration

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/kstate/kstate/internal/testprocs"
	"github.com/kstate/kstate/processor"
)

// TestLagRealBrokerStuckBatch: on a real broker, while a batch is stuck in
// a processor call, /metrics' kstate_consumer_lag and /status follow a
// backlog produced meanwhile, equal to Kafka's own lag of the group (last
// stable offset minus committed offset) within the end offsets' refresh
// (5 s); the status shows the batch in flight on its partition; once the
// call returns the backlog is processed, exactly, and the lag falls to 0.
// It read 0 throughout before (the lag came from the last fetch's high
// watermark, noted after each batch: issue #25). One pipeline here; two
// (per-partition figures from both) in the long variant.
func TestLagRealBrokerStuckBatch(t *testing.T) {
	t.Parallel()
	testLagStuckBatch(t, 1)
}

func TestLagRealBrokerStuckBatchPipelines(t *testing.T) {
	longTest(t)
	testLagStuckBatch(t, 2)
}

func testLagStuckBatch(t *testing.T, pipelines int) {
	start := time.Now()
	e := newSpecEnv(t, 2)
	entered, release := make(chan struct{}, 4), make(chan struct{})
	cfg := e.config(t, func() processor.StatefulProcessor[string, string, string] {
		return &testprocs.GatedCounter{Counter: testprocs.NewCounter().(*testprocs.Counter), Entered: entered, Release: release}
	})
	cfg.Batching.Pipelines = pipelines
	app := newSpecApp(t, cfg)
	h := app.Handler()
	testprocs.Start(t, app)
	released := false
	releaseOnce := func() {
		if !released {
			released = true
			close(release)
		}
	}
	t.Cleanup(releaseOnce) // before the app stops (cleanups run last first)

	counts, total := map[string]int{}, 0
	produce := func(n int) {
		kvs := make([]string, n)
		for i := range kvs {
			k := fmt.Sprintf("k%d", total%29)
			total++
			counts[k]++
			kvs[i] = k + "=x"
		}
		testprocs.Produce(t, e.brokers, e.in, kvs...)
	}
	// matches waits until the App's lag is Kafka's with at least min
	// records behind (with two pipelines the other one processes its
	// partition's share of the backlog).
	matches := func(what string, min int64) {
		t.Helper()
		if pipelines > 1 {
			min /= 4
		}
		var l testprocs.AppLag
		var real map[int32]int64
		var err error
		deadline := time.Now().Add(30 * time.Second) // 6 refreshes
		for {
			if real, err = testprocs.RealLag(e.brokers, e.app, e.in); err == nil {
				l = testprocs.ReadAppLag(t, h)
				if l.Matches(real) && l.Total >= min {
					break
				}
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: waited 30s; last: %v; Kafka's lag %v (%v)", what, l, real, err)
			}
			time.Sleep(50 * time.Millisecond)
		}
		t.Logf("%s: %v; Kafka's lag %v", what, l, real)
	}

	const warm, backlog = 100, 2000
	produce(warm)
	testprocs.WaitOutputs(t, e.brokers, e.out, warm, waitOut)
	matches("lag 0 once caught up", 0)

	testprocs.Produce(t, e.brokers, e.in, "stuck=1")
	select {
	case <-entered:
	case <-time.After(waitOut):
		t.Fatal("the processor never reached the stuck key")
	}
	produce(backlog)
	stuckAt := time.Now()
	matches("the backlog's lag while the batch is stuck", backlog)
	t.Logf("lag matched %v after the backlog was produced", time.Since(stuckAt).Round(time.Millisecond))
	l := testprocs.ReadAppLag(t, h)
	if l.BatchInFlight <= 0 || len(l.InBatch) != 1 {
		t.Fatalf("while stuck: %v, want a batch in flight on one partition", l)
	}
	if v := testprocs.Scrape(t, h).Sum("kstate_batch_in_flight_seconds"); v <= 0 {
		t.Fatalf("kstate_batch_in_flight_seconds %v while stuck", v)
	}
	if code, page := probe(t, h, "/"); code != 200 || !strings.Contains(page, `id="card-batch"`) {
		t.Fatalf("GET /: %d, no batch in flight card", code)
	}
	produce(backlog)
	matches("the lag of more backlog, the batch still stuck", 2*backlog)

	releaseOnce()
	n := warm + 1 + 2*backlog
	out := testprocs.WaitOutputs(t, e.brokers, e.out, n, waitOut)
	matches("lag 0 once the backlog is processed", 0)
	// Exact: every key counted 1..n once.
	counts["stuck"]++
	for k, c := range counts {
		if got := out[k]; len(got) != c || got[c-1] != fmt.Sprint(c) {
			t.Fatalf("key %s: outputs %v, want 1..%d", k, got, c)
		}
	}
	if out.Count() != n {
		t.Fatalf("%d outputs, want %d", out.Count(), n)
	}
	t.Logf("took %v", time.Since(start).Round(time.Millisecond))
}

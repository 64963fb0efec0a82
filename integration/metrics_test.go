package integration

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kstate/kstate/internal/engine"
	"github.com/kstate/kstate/internal/testprocs"
)

// TestMetricsRealBroker runs the counter app on a real broker and scrapes
// /metrics during and after the run: the series exist with sensible
// values, the lag falls to 0 once caught up, the histograms have counts;
// then a second run on an empty state directory restores the changelog:
// /readyz is 503 and the restore series show it in progress while the
// restore is held, and once restored the progress reaches the total.
func TestMetricsRealBroker(t *testing.T) {
	start := time.Now()
	e := newSpecEnv(t, 2)
	cfg := e.config(t, testprocs.NewCounter)
	// One pipeline, as in TestMetricsEmbedded: the test broker has no
	// initial rebalance delay, so with two pipelines a partition can move
	// between them in the first second (an aborted batch, counters of the
	// moved partition started again).
	cfg.Batching.Pipelines = 1
	app := newSpecApp(t, cfg)
	h := app.Handler()
	stop := testprocs.Start(t, app)

	const n, keys = 6000, 1500
	kvs := make([]string, n)
	for i := range kvs {
		kvs[i] = fmt.Sprintf("k%d=x", i%keys)
	}
	testprocs.Produce(t, e.brokers, e.in, kvs...)
	// During the run: the series are there (values still moving).
	f := testprocs.Scrape(t, h)
	for _, name := range []string{"kstate_app_state", "kstate_ready", "kstate_live", "kstate_commits_total", "kstate_batch_duration_seconds"} {
		if _, ok := f[name]; !ok {
			t.Fatalf("during the run: %s missing; families %v", name, f.Names())
		}
	}
	testprocs.WaitOutputs(t, e.brokers, e.out, n, waitOut)
	testprocs.Eventually(t, waitOut, "lag 0 on both partitions", func() bool {
		f = testprocs.Scrape(t, h)
		lag := f.Series("kstate_consumer_lag", "partition")
		return len(lag) == 2 && lag["0"] == 0 && lag["1"] == 0
	})
	for name, want := range map[string]func(float64) bool{
		"kstate_records_in_total":           func(v float64) bool { return v == n },
		"kstate_records_out_total":          func(v float64) bool { return v == n },
		"kstate_commits_total":              func(v float64) bool { return v >= 1 },
		"kstate_batch_duration_seconds":     func(v float64) bool { return v >= 1 },
		"kstate_commit_latency_seconds":     func(v float64) bool { return v >= 1 },
		"kstate_end_to_end_latency_seconds": func(v float64) bool { return v >= 1 },
		"kstate_changelog_records_total":    func(v float64) bool { return v >= keys },
		"kstate_state_keys":                 func(v float64) bool { return v >= keys },
		"kstate_ready":                      func(v float64) bool { return v == 1 },
		"kstate_restoring":                  func(v float64) bool { return v == 0 },
		"kstate_aborts_total":               func(v float64) bool { return v == 0 },
	} {
		if v := f.Sum(name); !want(v) {
			t.Errorf("first run: %s = %v", name, v)
		}
	}
	checkDashboard(t, f)
	if err := stop(); err != nil {
		t.Fatal(err)
	}

	// Second run on an empty state directory: a restore of the changelog,
	// held at its first chunk so that its progress can be observed.
	cfg.State.Dir = t.TempDir()
	app2 := newSpecApp(t, cfg)
	h2 := app2.Handler()
	held, release := make(chan struct{}, 4), make(chan struct{})
	var once sync.Once
	defer once.Do(func() { close(release) })
	runCtx, cancel := context.WithCancel(context.Background())
	ctx := engine.WithKillHook(runCtx, func(p engine.KillPoint) {
		if p == engine.DuringRestore {
			select {
			case held <- struct{}{}:
			default:
			}
			<-release
		}
	})
	done := make(chan error, 1)
	go func() { done <- app2.Run(ctx) }()
	defer func() { // Run returns (and stops logging) before the test ends
		once.Do(func() { close(release) })
		cancel()
		if err := <-done; err != nil {
			t.Errorf("second run: %v", err)
		}
	}()
	select {
	case <-held:
	case <-time.After(waitOut):
		t.Fatal("the restore never reached the changelog")
	}
	if code, body := probe(t, h2, "/readyz"); code != 503 || !strings.HasPrefix(body, "Restoring") {
		t.Fatalf("/readyz during the restore: %d %q", code, body)
	}
	f = testprocs.Scrape(t, h2)
	if v, _ := f.Value("kstate_app_state", "state", "Restoring"); v != 1 {
		t.Errorf("during the restore: kstate_app_state{state=Restoring} = %v", v)
	}
	if v := f.Sum("kstate_ready"); v != 0 {
		t.Errorf("during the restore: kstate_ready = %v", v)
	}
	if v := f.Sum("kstate_restoring"); v < 1 {
		t.Errorf("during the restore: kstate_restoring sums to %v", v)
	}
	if v := f.Sum("kstate_restore_records_expected"); v < 1 {
		t.Errorf("during the restore: kstate_restore_records_expected sums to %v", v)
	}
	st := app2.Status()
	var total int64
	for _, p := range st.Partitions {
		total += p.RestoreTotal
	}
	if st.State != "Restoring" || len(st.Partitions) != 2 || total < 1 || (!st.Partitions[0].Restoring && !st.Partitions[1].Restoring) {
		t.Errorf("Status during the restore: %+v", st)
	}
	once.Do(func() { close(release) })
	testprocs.Eventually(t, waitOut, "/readyz 200 after the restore", func() bool {
		time.Sleep(50 * time.Millisecond)
		code, _ := probe(t, h2, "/readyz")
		return code == 200
	})
	f = testprocs.Scrape(t, h2)
	restored, expected := f.Series("kstate_restore_records", "partition"), f.Series("kstate_restore_records_expected", "partition")
	var sum float64
	for _, p := range []string{"0", "1"} {
		if restored[p] <= 0 || restored[p] != expected[p] {
			t.Errorf("after the restore, partition %s: %v of %v records restored", p, restored[p], expected[p])
		}
		sum += restored[p]
	}
	for _, p := range app2.Status().Partitions {
		if p.Restoring || p.RestoredRecords != p.RestoreTotal || p.RestoredRecords != int64(restored[fmt.Sprint(p.Partition)]) || p.RestoreETA != 0 {
			t.Errorf("Status after the restore: partition %+v", p)
		}
	}
	if v := f.Sum("kstate_restored_records_total"); v != sum || f.Sum("kstate_restore_eta_seconds") != 0 || f.Sum("kstate_restoring") != 0 {
		t.Errorf("after the restore: restored_records_total %v (partitions %v), eta %v, restoring %v",
			v, sum, f.Sum("kstate_restore_eta_seconds"), f.Sum("kstate_restoring"))
	}
	// Caught up and idle: the lag is known (from the end offsets read by
	// the restore) and 0 before any new input.
	testprocs.Eventually(t, waitOut, "lag 0 on both idle partitions after the restore", func() bool {
		f = testprocs.Scrape(t, h2)
		lag := f.Series("kstate_consumer_lag", "partition")
		return len(lag) == 2 && lag["0"] == 0 && lag["1"] == 0
	})
	// New input after the restore: processed, and the lag is 0 again.
	testprocs.Produce(t, e.brokers, e.in, "k1=y", "k2=y", "k3=y", "k4=y")
	testprocs.WaitOutputs(t, e.brokers, e.out, n+4, waitOut)
	testprocs.Eventually(t, waitOut, "lag 0 after the restore", func() bool {
		f = testprocs.Scrape(t, h2)
		lag := f.Series("kstate_consumer_lag", "partition")
		return len(lag) == 2 && lag["0"] == 0 && lag["1"] == 0
	})
	t.Logf("restored %v changelog records; whole test %v", sum, time.Since(start).Round(time.Millisecond))
}

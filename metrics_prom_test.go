package kstate_test

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/kstate/kstate"
	"github.com/kstate/kstate/internal/testprocs"
)

// TestMetricsEmbedded runs the counter app on the embedded cluster and
// checks the semantics of the /metrics series and the Status fields they
// share (lag, restore, last commit).
func TestMetricsEmbedded(t *testing.T) {
	brokers := startEmbedded(t, 2)
	// One pipeline: the test wants no aborted transaction and per-partition
	// counts summing to the input; with two pipelines (the automatic
	// default on two cores) a partition can move between them in the first
	// second on a cluster without an initial rebalance delay, aborting a
	// batch and starting the moved partition's counters again.
	cfg := config(brokers, t.TempDir(), testprocs.NewCounter)
	cfg.Batching.Pipelines = 1
	app := newApp(t, cfg)
	h := app.Handler()

	// Before Run: the series without partitions exist already.
	f := testprocs.Scrape(t, h)
	if v, ok := f.Value("kstate_app_state", "state", "Created", "application", "app"); !ok || v != 1 {
		t.Fatalf("kstate_app_state{state=Created} = %v, %v before Run; families %v", v, ok, f.Names())
	}
	if v, _ := f.Value("kstate_ready"); v != 0 {
		t.Fatalf("kstate_ready = %v before Run", v)
	}

	stop := testprocs.Start(t, app)
	const n = 300
	kvs := make([]string, n)
	for i := range kvs {
		kvs[i] = fmt.Sprintf("k%d=x", i%37)
	}
	testprocs.Produce(t, brokers, "in", kvs...)
	testprocs.WaitOutputs(t, brokers, "out", n, 30*time.Second)
	testprocs.Eventually(t, 30*time.Second, "lag 0 on both partitions", func() bool {
		// Settled: with several pipelines (the default on several cores)
		// a partition can still move between them in the first second.
		st := app.Status()
		if len(st.Partitions) != 2 || st.Partitions[0].Lag != 0 || st.Partitions[1].Lag != 0 || app.State() != kstate.Running {
			return false
		}
		f = testprocs.Scrape(t, h)
		lag := f.Series("kstate_consumer_lag", "partition")
		return len(lag) == 2 && lag["0"] == 0 && lag["1"] == 0
	})
	checks := []struct {
		name string
		want func(float64) bool
		what string
	}{
		{"kstate_records_in_total", func(v float64) bool { return v == n }, "n"},
		{"kstate_records_out_total", func(v float64) bool { return v == n }, "n"},
		{"kstate_commits_total", func(v float64) bool { return v >= 1 }, ">= 1"},
		{"kstate_batches_total", func(v float64) bool { return v >= 1 }, ">= 1"},
		{"kstate_batch_duration_seconds", func(v float64) bool { return v >= 1 }, "a count >= 1"},
		{"kstate_commit_latency_seconds", func(v float64) bool { return v >= 1 }, "a count >= 1"},
		{"kstate_end_to_end_latency_seconds", func(v float64) bool { return v >= 1 }, "a count >= 1"},
		{"kstate_rebalances_total", func(v float64) bool { return v >= 1 }, ">= 1 (the assignment)"},
		{"kstate_aborts_total", func(v float64) bool { return v == 0 }, "0"},
		{"kstate_dead_letter_records_total", func(v float64) bool { return v == 0 }, "0"},
		{"kstate_restoring", func(v float64) bool { return v == 0 }, "0"},
		{"kstate_ready", func(v float64) bool { return v == 1 }, "1"},
		{"kstate_live", func(v float64) bool { return v == 1 }, "1"},
		{"kstate_assigned_partitions", func(v float64) bool { return v == 2 }, "2"},
		{"kstate_state_entries", func(v float64) bool { return v >= 37 }, ">= 37 (the keys' counts)"},
		{"kstate_state_keys", func(v float64) bool { return v >= 37 }, ">= 37 (deprecated name of kstate_state_entries)"},
		// 37 keys' counts and kstate's metadata: some hundred bytes at least.
		{"kstate_state_size_bytes", func(v float64) bool { return v >= 37*4 }, ">= 148"},
		{"kstate_state_live_data_bytes", func(v float64) bool { return v >= 37*4 }, ">= 148 (deprecated name of kstate_state_size_bytes)"},
		{"kstate_batch_in_flight_records", func(v float64) bool { return v >= 0 }, "present"},
		{"kstate_last_commit_timestamp_seconds", func(v float64) bool { return time.Since(time.Unix(int64(v), 0)) < time.Minute }, "recent"},
		{"kstate_last_error_timestamp_seconds", func(v float64) bool { return v == 0 }, "0 (no error)"},
		{"kstate_first_commit_seconds", func(v float64) bool { return v > 0 }, "> 0"},
		{"kstate_batch_record_limit", func(v float64) bool { return v > 0 }, "> 0"},
	}
	for _, c := range checks {
		if _, ok := f[c.name]; !ok {
			t.Errorf("%s missing; families %v", c.name, f.Names())
			continue
		}
		if v := f.Sum(c.name); !c.want(v) {
			t.Errorf("%s = %v, want %s", c.name, v, c.what)
		}
	}
	if v, _ := f.Value("kstate_app_state", "state", "Running"); v != 1 {
		t.Errorf("kstate_app_state{state=Running} = %v", v)
	}
	if v, _ := f.Value("kstate_rebalances_total", "kind", "assigned"); v < 1 {
		t.Errorf("kstate_rebalances_total{kind=assigned} = %v", v)
	}

	// The Status fields of the same values.
	_, body := get(t, h, "/status")
	var st kstate.Status
	if err := json.Unmarshal([]byte(body), &st); err != nil {
		t.Fatal(err)
	}
	if st.Lag != 0 || st.LastCommitAt.IsZero() || st.LastError != "" || len(st.Partitions) != 2 ||
		st.Partitions[0].Lag != 0 || st.Partitions[1].Lag != 0 {
		t.Fatalf("/status:\n%s", body)
	}

	// Collector registers into the user's registry.
	reg := prometheus.NewRegistry()
	if err := reg.Register(app.Collector()); err != nil {
		t.Fatal(err)
	}
	mfs, err := reg.Gather()
	if err != nil || len(mfs) < 20 {
		t.Fatalf("Gather from a user registry: %d families, %v", len(mfs), err)
	}
	// Every metric the Grafana dashboard queries is exposed.
	names, err := testprocs.DashboardMetrics("docs/grafana/kstate-dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range names {
		if !f.Has(name) {
			t.Errorf("docs/grafana/kstate-dashboard.json queries %s, which the App does not expose", name)
		}
	}
	// Names, help and units per Prometheus conventions (promlint).
	if problems, err := testutil.CollectAndLint(app.Collector()); err != nil || len(problems) > 0 {
		t.Errorf("lint: %v %+v", err, problems)
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	f = testprocs.Scrape(t, h)
	if v, _ := f.Value("kstate_app_state", "state", "Stopped"); v != 1 {
		t.Errorf("after Run: kstate_app_state{state=Stopped} = %v", v)
	}
	if v, _ := f.Value("kstate_live"); v != 0 {
		t.Errorf("after Run: kstate_live = %v", v)
	}
}

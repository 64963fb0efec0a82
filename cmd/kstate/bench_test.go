package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kstate/kstate/kafka/embedded"
)

// TestBenchEmbedded runs the whole benchmark, tiny, on the in-process
// Kafka: it keeps `kstate bench` from rotting (the real-broker numbers come
// from `make bench`), and its exactly-once check must pass.
func TestBenchEmbedded(t *testing.T) {
	e, err := embedded.Start(embedded.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()

	o := defaultBenchOptions()
	o.Brokers = e.Brokers()
	o.Keys, o.Records, o.Partitions, o.Runs = 300, 3000, 2, 1
	o.Rate, o.LatencyFor, o.Warmup = 400, 500*time.Millisecond, false
	o.JSON = filepath.Join(t.TempDir(), "bench.json")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	var out, progress bytes.Buffer
	if err := runBenchCmd(ctx, &out, &progress, o); err != nil {
		t.Fatalf("bench: %v\n%s", err, progress.String())
	}
	t.Logf("\n%s%s", progress.String(), out.String())
	for _, want := range []string{"throughput (records/s", "e2e latency p99", "restore speed", "heavy/count"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("table has no %q", want)
		}
	}

	rep := readBenchReport(t, o.JSON)
	if len(rep.Runs) != 2 {
		t.Fatalf("%d results, want one per processor", len(rep.Runs))
	}
	for _, r := range rep.Runs {
		switch {
		case r.Throughput <= 0:
			t.Errorf("%s: throughput %v", r.Processor, r.Throughput)
		case r.LatencyRecords == 0 || r.LatencySamples != r.LatencyRecords:
			t.Errorf("%s: %d latency samples for %d paced records", r.Processor, r.LatencySamples, r.LatencyRecords)
		case r.LatencyP50 <= 0 || r.LatencyP99 < r.LatencyP50:
			t.Errorf("%s: latency p50 %v p99 %v", r.Processor, r.LatencyP50, r.LatencyP99)
		case r.FetchedP50 <= 0 || r.PolledP50 < r.FetchedP50 || r.ProduceReqP50 <= 0 || r.EndTxnReqP50 <= 0:
			// Every paced row is fetched, then polled (no earlier); each
			// batch produces and ends a transaction.
			t.Errorf("%s: inside the app: fetched p50 %v, polled p50 %v, Produce p50 %v, EndTxn p50 %v",
				r.Processor, r.FetchedP50, r.PolledP50, r.ProduceReqP50, r.EndTxnReqP50)
		case r.RestoreRecords == 0 || r.FirstCommit <= 0:
			t.Errorf("%s: restore of %d records, first commit after %v", r.Processor, r.RestoreRecords, r.FirstCommit)
		case r.Commits == 0 || len(r.CommitSamples) == 0:
			t.Errorf("%s: %d commits, %d sampled", r.Processor, r.Commits, len(r.CommitSamples))
		}
	}
	if c := rep.Summary.Ratios["changelog_per_row"]["heavy"]; c.Median <= 1 {
		t.Errorf("heavy writes %.2f× the changelog records of count; the state-heavy processor is not heavy", c.Median)
	}
}

func TestBenchQuantile(t *testing.T) {
	var ds []time.Duration
	for i := 100; i >= 1; i-- {
		ds = append(ds, time.Duration(i))
	}
	for _, c := range []struct {
		q    float64
		want time.Duration
	}{{0.5, 50}, {0.9, 90}, {0.99, 99}, {1, 100}, {0, 1}} {
		if got := quantile(ds, c.q); got != c.want {
			t.Errorf("quantile(%v) = %v, want %v", c.q, got, c.want)
		}
	}
	if s := spreadOf([]float64{3, 1, 2, 10}); s.Median != 2.5 || s.Min != 1 || s.Max != 10 || s.N != 4 {
		t.Errorf("spreadOf = %+v", s)
	}
}

// --backend multiplies the processors into per-backend variants, run
// interleaved and named processor.backend; an unknown backend is refused.
func TestBenchBackendVariants(t *testing.T) {
	o := defaultBenchOptions()
	o.Backends = []string{"rocksdb", "pebble"}
	o.expandBackends()
	if got := strings.Join(o.Processors, ","); got != "count.rocksdb,count.pebble,heavy.rocksdb,heavy.pebble" {
		t.Fatalf("variants %s", got)
	}
	p, backend := variant(benchProcs(o), "heavy.pebble")
	if p.name != "heavy.pebble" || backend != "pebble" || p.newProc == nil {
		t.Fatalf("variant: %+v %q", p, backend)
	}
	o.Processors = []string{"count.leveldb"}
	if err := o.validate(); err == nil {
		t.Fatal("unknown backend accepted")
	}
}

// TestBenchChurnNewKeys runs the churn workload's phases, tiny, on the
// in-process Kafka: the churn, every session closed (timers fired), the
// restart on the same state, then the new keys, timed and checked
// exactly-once (one output each, count 1).
func TestBenchChurnNewKeys(t *testing.T) {
	e, err := embedded.Start(embedded.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()

	o := defaultBenchOptions()
	o.Brokers = e.Brokers()
	o.Processors = []string{"churn"}
	o.Keys, o.Records, o.Partitions, o.Runs, o.NewKeys = 100, 2000, 2, 1, 300
	o.Rate, o.LatencyFor, o.Warmup, o.SessionGap = 0, 0, false, 300*time.Millisecond
	o.JSON = filepath.Join(t.TempDir(), "bench.json")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	var out, progress bytes.Buffer
	if err := runBenchCmd(ctx, &out, &progress, o); err != nil {
		t.Fatalf("bench: %v\n%s", err, progress.String())
	}
	t.Logf("\n%s%s", progress.String(), out.String())
	if !strings.Contains(out.String(), "new keys' records/s") {
		t.Error("table has no new keys' records/s")
	}
	rep := readBenchReport(t, o.JSON)
	if len(rep.Runs) != 1 {
		t.Fatalf("%d results, want 1", len(rep.Runs))
	}
	r := rep.Runs[0]
	// Every key's session closed: one fired timer per key at least.
	if r.NewKeys != o.NewKeys || r.NewKeysRate <= 0 || r.NewKeysFirst <= 0 || r.SessionsFired < int64(o.Keys) {
		t.Errorf("new keys %d, %.0f records/s, first output after %v, %d sessions closed",
			r.NewKeys, r.NewKeysRate, r.NewKeysFirst, r.SessionsFired)
	}
}

// readBenchReport reads the JSON report a bench run wrote to path.
func readBenchReport(t *testing.T, path string) benchReport {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var rep benchReport
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatal(err)
	}
	return rep
}

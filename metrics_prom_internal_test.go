package kstate

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"

	"github.com/kstate/kstate/internal/engine"
	"github.com/kstate/kstate/internal/kv"
)

// TestAppMetricsSemantics feeds the collector a snapshot and Observer
// calls and checks each series.
func TestAppMetricsSemantics(t *testing.T) {
	view := scrapeView{state: Restoring, live: true}
	m := newAppMetrics("app", func() scrapeView { return view })
	view.snap = engine.Snapshot{
		Assigned: []int32{0, 1},
		Partitions: map[int32]engine.Counters{
			0: {RowsIn: 10, RowsOut: 7, Batches: 2},
		},
		Status: map[int32]engine.PartitionStatus{
			0: {Ready: true, Lag: 5, RestoredRecords: 40, RestoreTotal: 40, RestoreRate: 100},
			1: {Ready: false, Lag: -1, RestoredRecords: 30, RestoreTotal: 90, RestoreETA: 3 * time.Second},
		},
		Total: engine.Counters{
			RowsIn: 25, Commits: 4, Aborts: 1, DeadLettered: 2, DecodeErrors: 3, ProcessingErrors: 1,
			TimersRegistered: 6, TimersFired: 5, TTLRemovals: 4, LateRowsDropped: 9, RestoreRecords: 40, Batches: 7,
		},
	}
	view.snap.BatchInFlight, view.snap.BatchInFlightRecords = time.Second, 321
	view.sizes = map[int32]kv.Estimate{0: {Bytes: 4096, Entries: 12}}

	m.Rebalanced("assigned", []int32{0, 1})
	m.Rebalanced("revoked", []int32{1})
	m.Rebalanced("assigned", []int32{1})
	now := time.Now()
	m.BatchCommitted(engine.BatchObservation{
		Duration: 300 * time.Millisecond, CommitLatency: 20 * time.Millisecond,
		Partitions: []engine.PartitionBatch{
			{Partition: 0, RecordsIn: 3, RecordsOut: 3, OldestMs: now.Add(-2 * time.Second).UnixMilli(), NewestMs: now.UnixMilli()},
			{Partition: 1}, // a timer-only share: no end-to-end latency
		},
	})
	m.Aborted(errors.New("boom"))

	want := `
# HELP kstate_consumer_lag Input records after the group's committed position: the end offset (last stable offset, read every few seconds independently of the batches, or the last fetch's high watermark when newer) minus the committed offset; the batch in flight's records count until it commits. Absent while unknown.
# TYPE kstate_consumer_lag gauge
kstate_consumer_lag{application="app",partition="0"} 5
# HELP kstate_records_in_total Input records consumed by committed batches, per assigned partition (rows handed to the processor).
# TYPE kstate_records_in_total counter
kstate_records_in_total{application="app",partition="0"} 10
kstate_records_in_total{application="app",partition="1"} 0
# HELP kstate_restore_records Changelog records the partition's restore applied so far (live).
# TYPE kstate_restore_records gauge
kstate_restore_records{application="app",partition="0"} 40
kstate_restore_records{application="app",partition="1"} 30
# HELP kstate_restore_records_expected Changelog records the partition's restore reads in all (an upper bound while restoring; exact once restored).
# TYPE kstate_restore_records_expected gauge
kstate_restore_records_expected{application="app",partition="0"} 40
kstate_restore_records_expected{application="app",partition="1"} 90
# HELP kstate_restore_eta_seconds Estimated time left of the partition's restore at its rate so far; 0 when done or unknown.
# TYPE kstate_restore_eta_seconds gauge
kstate_restore_eta_seconds{application="app",partition="0"} 0
kstate_restore_eta_seconds{application="app",partition="1"} 3
# HELP kstate_restoring 1 while the partition restores its state from the changelog, 0 once it processes.
# TYPE kstate_restoring gauge
kstate_restoring{application="app",partition="0"} 0
kstate_restoring{application="app",partition="1"} 1
# HELP kstate_state_size_bytes Estimated size of the partition's state store: its tables on disk (compressed) plus its memtables and unflushed committed writes. Overwritten and deleted entries count until compaction drops them.
# TYPE kstate_state_size_bytes gauge
kstate_state_size_bytes{application="app",partition="0"} 4096
# HELP kstate_state_entries Estimated number of entries of the partition's state store: every variable's values, list and map elements, timers, TTL index entries and kstate's metadata (not grouping keys); overwrites and deletions count until compaction. Absent with Pebble, which keeps no estimate.
# TYPE kstate_state_entries gauge
kstate_state_entries{application="app",partition="0"} 12
# HELP kstate_state_live_data_bytes Deprecated: the same value as kstate_state_size_bytes (it was RocksDB's estimate-live-data-size, far too low before compaction).
# TYPE kstate_state_live_data_bytes gauge
kstate_state_live_data_bytes{application="app",partition="0"} 4096
# HELP kstate_state_keys Deprecated: the same value as kstate_state_entries (store entries, not grouping keys).
# TYPE kstate_state_keys gauge
kstate_state_keys{application="app",partition="0"} 12
# HELP kstate_batch_in_flight_records Input records of the micro-batch in flight (summed over the pipelines); 0 between batches.
# TYPE kstate_batch_in_flight_records gauge
kstate_batch_in_flight_records{application="app"} 321
# HELP kstate_rebalances_total Group events delivered to this instance, by kind (assigned, revoked, lost).
# TYPE kstate_rebalances_total counter
kstate_rebalances_total{application="app",kind="assigned"} 2
kstate_rebalances_total{application="app",kind="revoked"} 1
# HELP kstate_aborts_total Aborted (and retried) batch transactions.
# TYPE kstate_aborts_total counter
kstate_aborts_total{application="app"} 1
# HELP kstate_dead_letter_records_total Records written to the dead-letter topic.
# TYPE kstate_dead_letter_records_total counter
kstate_dead_letter_records_total{application="app"} 2
# HELP kstate_decode_errors_total Undecodable input records (skipped or dead-lettered by the policy).
# TYPE kstate_decode_errors_total counter
kstate_decode_errors_total{application="app"} 3
# HELP kstate_processing_errors_total Processor calls that failed under ProcessingErrorDeadLetter.
# TYPE kstate_processing_errors_total counter
kstate_processing_errors_total{application="app"} 1
# HELP kstate_timers_fired_total Timers fired (HandleExpiredTimer calls).
# TYPE kstate_timers_fired_total counter
kstate_timers_fired_total{application="app"} 5
# HELP kstate_timers_registered_total Timers registered by processors.
# TYPE kstate_timers_registered_total counter
kstate_timers_registered_total{application="app"} 6
# HELP kstate_ttl_removals_total State rows removed by their TTL.
# TYPE kstate_ttl_removals_total counter
kstate_ttl_removals_total{application="app"} 4
# HELP kstate_late_rows_dropped_total EventTime rows dropped at or before the watermark.
# TYPE kstate_late_rows_dropped_total counter
kstate_late_rows_dropped_total{application="app"} 9
# HELP kstate_ready 1 when the App is ready (Running: /readyz 200), else 0.
# TYPE kstate_ready gauge
kstate_ready{application="app"} 0
# HELP kstate_live 1 when the App is live (/healthz 200), else 0.
# TYPE kstate_live gauge
kstate_live{application="app"} 1
`
	names := []string{"kstate_consumer_lag", "kstate_records_in_total", "kstate_restore_records", "kstate_restore_records_expected",
		"kstate_restore_eta_seconds", "kstate_restoring", "kstate_state_size_bytes", "kstate_state_entries", "kstate_state_live_data_bytes",
		"kstate_state_keys", "kstate_batch_in_flight_records", "kstate_rebalances_total",
		"kstate_aborts_total", "kstate_dead_letter_records_total", "kstate_decode_errors_total", "kstate_processing_errors_total",
		"kstate_timers_fired_total", "kstate_timers_registered_total", "kstate_ttl_removals_total", "kstate_late_rows_dropped_total",
		"kstate_ready", "kstate_live"}
	if err := testutil.CollectAndCompare(m, strings.NewReader(want), names...); err != nil {
		t.Fatal(err)
	}

	// One state is 1, the others 0.
	states := map[string]float64{}
	for _, st := range stateNames {
		states[st] = testutil.ToFloat64(stateGauge(t, m, st))
	}
	if states["Restoring"] != 1 || states["Running"] != 0 || len(states) != len(stateNames) {
		t.Fatalf("kstate_app_state: %v", states)
	}

	// Histograms: one batch; the end-to-end latency of partition 0 only,
	// its oldest record's (2s).
	if n := testutil.CollectAndCount(m.batchDuration); n != 1 {
		t.Fatalf("batch duration: %d series", n)
	}
	h := histogram(t, m.endToEnd)
	if h.GetSampleCount() != 1 || h.GetSampleSum() < 1.9 || h.GetSampleSum() > 5 {
		t.Fatalf("end-to-end: count %d sum %v, want one observation of about 2s", h.GetSampleCount(), h.GetSampleSum())
	}
	if h := histogram(t, m.commitLatency); h.GetSampleCount() != 1 || h.GetSampleSum() != 0.02 {
		t.Fatalf("commit latency: count %d sum %v", h.GetSampleCount(), h.GetSampleSum())
	}

	// The last error and the last commit: gauges and Status fields.
	lastErr, at, commitAt := m.last()
	if lastErr != "boom" || time.Since(at) > time.Minute || time.Since(commitAt) > time.Minute {
		t.Fatalf("last: %q %v %v", lastErr, at, commitAt)
	}
	m.noteError(nil) // Run returned nil: no error
	if e, _, _ := m.last(); e != "boom" {
		t.Fatalf("last error after a nil error: %q", e)
	}
	// A dead-lettered record's error is the last error too.
	m.BatchCommitted(engine.BatchObservation{Partitions: []engine.PartitionBatch{{Partition: 1, DeadLetterError: "bad value"}}})
	if e, _, _ := m.last(); e != "partition 1: a record was dead-lettered: bad value" {
		t.Fatalf("last error after a dead letter: %q", e)
	}
}

func stateGauge(t *testing.T, m *appMetrics, state string) prometheus.Collector {
	t.Helper()
	ch := make(chan prometheus.Metric, 200)
	m.Collect(ch)
	close(ch)
	for x := range ch {
		if !strings.Contains(x.Desc().String(), `"kstate_app_state"`) {
			continue
		}
		var d dtoMetric
		if err := x.Write(&d); err != nil {
			t.Fatal(err)
		}
		for _, l := range d.GetLabel() {
			if l.GetName() == "state" && l.GetValue() == state {
				return constCollector{x}
			}
		}
	}
	t.Fatalf("no kstate_app_state{state=%q}", state)
	return nil
}

type constCollector struct{ m prometheus.Metric }

func (c constCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.m.Desc() }
func (c constCollector) Collect(ch chan<- prometheus.Metric) { ch <- c.m }

func histogram(t *testing.T, h prometheus.Histogram) *dtoHistogram {
	t.Helper()
	var d dtoMetric
	if err := h.Write(&d); err != nil {
		t.Fatal(err)
	}
	return d.GetHistogram()
}

type (
	dtoMetric    = dto.Metric
	dtoHistogram = dto.Histogram
)

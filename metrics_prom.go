package kstate

import (
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/kstate/kstate/internal/engine"
	"github.com/kstate/kstate/internal/kv"
)

// appMetrics is an App's Prometheus collector (App.Collector, GET /metrics
// of App.Handler) and the engine's Observer. Counters and gauges are read
// from the coordinator's Snapshot at scrape time, so nothing is counted
// twice; the histograms and the rebalance counter are fed by the Observer,
// once per committed batch or group event (never per record).
type appMetrics struct {
	app string
	// scrape returns what a scrape reads; ok false before Run.
	scrape func() scrapeView

	batchDuration, commitLatency, endToEnd prometheus.Histogram
	rebalances                             *prometheus.CounterVec

	// kafka collects the Kafka client metrics (metrics_kafka.go).
	kafka *kafkaMetrics

	// The series read at scrape time (built once by newAppMetrics).
	perPart []partMetric
	sizes   []scrapeMetric // size, entries, then their deprecated names
	totals  []totalMetric
	gauges  scrapeGauges

	mu struct {
		sync.Mutex
		lastError    string
		lastErrorAt  time.Time
		lastCommitAt time.Time
	}
}

// scrapeView is what a scrape reads from the App.
type scrapeView struct {
	snap        engine.Snapshot
	sizes       map[int32]kv.Estimate
	state       State
	ready, live bool
}

// scrapeView reads what a scrape reports.
func (a *App[K, I, O]) scrapeView() scrapeView {
	v := scrapeView{state: a.State()}
	v.ready, _ = a.Ready()
	v.live, _ = a.Live()
	a.mu.Lock()
	c := a.mu.coord
	a.mu.Unlock()
	if c != nil {
		v.snap, v.sizes = c.Snapshot(), c.StateSizes()
	}
	return v
}

// Collector returns the App's Prometheus collector: the kstate_* series
// GET /metrics of Handler serves (docs/OPERATIONS.md, "Metrics"), each
// with the label application. Register it into your own registry to
// expose them with your other metrics (a registry takes it once; two Apps
// with distinct ApplicationIDs can share one). Each call returns the same
// collector. GET /metrics also serves the Go runtime (go_*), process
// (process_*) and Kafka client (kstate_kafka_*) series; Collector has only
// kstate's own, as your registry may have the Go and process collectors
// already.
func (a *App[K, I, O]) Collector() prometheus.Collector { return a.metrics }

// metricsHandler serves the App's metrics from a registry of its own (the
// global default registry is never touched): kstate's, the Kafka clients'
// (kprom) and the standard Go runtime and process collectors.
func (a *App[K, I, O]) metricsHandler() http.Handler {
	return promhttp.HandlerFor(a.registry(), promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError})
}

// registry is a new registry of everything GET /metrics serves.
func (a *App[K, I, O]) registry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(a.metrics, a.metrics.kafka,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return reg
}

// Histogram buckets, in seconds.
var (
	// 1ms .. 32s: a batch runs within MaxBatchDuration (default 5m), a
	// commit within the transaction timeout.
	latencyBuckets = prometheus.ExponentialBuckets(0.001, 2, 16)
	// 5ms .. ~11min: end-to-end includes the time records wait in Kafka.
	endToEndBuckets = prometheus.ExponentialBuckets(0.005, 2, 18)
)

func newAppMetrics(app string, scrape func() scrapeView) *appMetrics {
	labels := prometheus.Labels{"application": app}
	m := &appMetrics{
		app:    app,
		scrape: scrape,
		kafka:  newKafkaMetrics(app),
		batchDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "kstate_batch_duration_seconds", ConstLabels: labels, Buckets: latencyBuckets,
			Help: "Time of a committed micro-batch, from the start of its processor calls to the end of its transaction commit.",
		}),
		commitLatency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "kstate_commit_latency_seconds", ConstLabels: labels, Buckets: latencyBuckets,
			Help: "Time of a micro-batch's transaction commit (EndTxn).",
		}),
		endToEnd: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "kstate_end_to_end_latency_seconds", ConstLabels: labels, Buckets: endToEndBuckets,
			Help: "Commit time minus the timestamp of the oldest input record of each partition's share of a committed batch (its worst record; one observation per partition and batch).",
		}),
		rebalances: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "kstate_rebalances_total", ConstLabels: labels,
			Help: "Group events delivered to this instance, by kind (assigned, revoked, lost).",
		}, []string{"kind"}),
	}
	m.perPart, m.sizes, m.totals, m.gauges = m.scraped()
	return m
}

// Observer (engine.Observer), on the coordinator's loop goroutine.

func (m *appMetrics) BatchCommitted(b engine.BatchObservation) {
	now := time.Now() // wall clock: record timestamps are producers' wall clocks
	m.batchDuration.Observe(b.Duration.Seconds())
	m.commitLatency.Observe(b.CommitLatency.Seconds())
	dlErr := ""
	for _, p := range b.Partitions {
		if p.RecordsIn > 0 {
			m.endToEnd.Observe(max(0, now.Sub(time.UnixMilli(p.OldestMs)).Seconds()))
		}
		if p.DeadLetterError != "" {
			dlErr = fmt.Sprintf("partition %d: a record was dead-lettered: %s", p.Partition, p.DeadLetterError)
		}
	}
	m.mu.Lock()
	m.mu.lastCommitAt = now
	if dlErr != "" {
		m.mu.lastError, m.mu.lastErrorAt = dlErr, now
	}
	m.mu.Unlock()
}

func (m *appMetrics) Aborted(cause error) { m.noteError(cause) }

func (m *appMetrics) Rebalanced(kind string, parts []int32) {
	m.rebalances.WithLabelValues(kind).Inc()
}

// noteError records the App's last error.
func (m *appMetrics) noteError(err error) {
	if err == nil {
		return
	}
	m.mu.Lock()
	m.mu.lastError, m.mu.lastErrorAt = err.Error(), time.Now()
	m.mu.Unlock()
}

// last returns the last error and its time, and the last commit's time.
func (m *appMetrics) last() (lastErr string, lastErrAt, lastCommitAt time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.mu.lastError, m.mu.lastErrorAt, m.mu.lastCommitAt
}

// A metric read at scrape time.
type scrapeMetric struct {
	desc *prometheus.Desc
	typ  prometheus.ValueType
}

func (m *appMetrics) metric(name, help string, typ prometheus.ValueType, labels ...string) scrapeMetric {
	return scrapeMetric{prometheus.NewDesc(name, help, labels, prometheus.Labels{"application": m.app}), typ}
}

// scraped builds the series read from the Snapshot: per partition (currently assigned:
// they reset when a partition moves away and comes back, which rate()
// handles) and totals of the Run.
func (m *appMetrics) scraped() (perPart []partMetric, sizes []scrapeMetric, totals []totalMetric, gauges scrapeGauges) {
	pm := func(name, help string, typ prometheus.ValueType, v func(engine.Counters, engine.PartitionStatus) (float64, bool)) partMetric {
		return partMetric{m.metric(name, help, typ, "partition"), v}
	}
	ct := func(f func(engine.Counters) int64) func(engine.Counters, engine.PartitionStatus) (float64, bool) {
		return func(c engine.Counters, _ engine.PartitionStatus) (float64, bool) { return float64(f(c)), true }
	}
	perPart = []partMetric{
		pm("kstate_records_in_total", "Input records consumed by committed batches, per assigned partition (rows handed to the processor).",
			prometheus.CounterValue, ct(func(c engine.Counters) int64 { return c.RowsIn })),
		pm("kstate_records_out_total", "Output records produced by committed batches, per assigned partition.",
			prometheus.CounterValue, ct(func(c engine.Counters) int64 { return c.RowsOut })),
		pm("kstate_partition_batches_total", "Committed micro-batches that ran on the partition.",
			prometheus.CounterValue, ct(func(c engine.Counters) int64 { return c.Batches })),
		pm("kstate_consumer_lag", "Input records after the group's committed position: the end offset (last stable offset, read every few seconds independently of the batches, or the last fetch's high watermark when newer) minus the committed offset; the batch in flight's records count until it commits. Absent while unknown.",
			prometheus.GaugeValue, func(_ engine.Counters, s engine.PartitionStatus) (float64, bool) { return float64(s.Lag), s.Lag >= 0 }),
		pm("kstate_restoring", "1 while the partition restores its state from the changelog, 0 once it processes.",
			prometheus.GaugeValue, func(_ engine.Counters, s engine.PartitionStatus) (float64, bool) { return b2f(!s.Ready), true }),
		pm("kstate_restore_records", "Changelog records the partition's restore applied so far (live).",
			prometheus.GaugeValue, func(_ engine.Counters, s engine.PartitionStatus) (float64, bool) {
				return float64(s.RestoredRecords), true
			}),
		pm("kstate_restore_records_expected", "Changelog records the partition's restore reads in all (an upper bound while restoring; exact once restored).",
			prometheus.GaugeValue, func(_ engine.Counters, s engine.PartitionStatus) (float64, bool) {
				return float64(s.RestoreTotal), true
			}),
		pm("kstate_restore_eta_seconds", "Estimated time left of the partition's restore at its rate so far; 0 when done or unknown.",
			prometheus.GaugeValue, func(_ engine.Counters, s engine.PartitionStatus) (float64, bool) { return s.RestoreETA.Seconds(), true }),
	}
	// The state size series (read from the shards, not the Snapshot), in
	// sizeMetrics order.
	sizes = []scrapeMetric{
		m.metric("kstate_state_size_bytes", "Estimated size of the partition's state store: its tables on disk (compressed) plus its memtables and unflushed committed writes. Overwritten and deleted entries count until compaction drops them.",
			prometheus.GaugeValue, "partition"),
		m.metric("kstate_state_entries", "Estimated number of entries of the partition's state store: every variable's values, list and map elements, timers, TTL index entries and kstate's metadata (not grouping keys); overwrites and deletions count until compaction. Absent with Pebble, which keeps no estimate.",
			prometheus.GaugeValue, "partition"),
		// Before issue #25: kept for dashboards and alerts that use them.
		m.metric("kstate_state_live_data_bytes", "Deprecated: the same value as kstate_state_size_bytes (it was RocksDB's estimate-live-data-size, far too low before compaction).",
			prometheus.GaugeValue, "partition"),
		m.metric("kstate_state_keys", "Deprecated: the same value as kstate_state_entries (store entries, not grouping keys).",
			prometheus.GaugeValue, "partition"),
	}
	tm := func(name, help string, f func(engine.Counters) int64) totalMetric {
		return totalMetric{m.metric(name, help, prometheus.CounterValue), f}
	}
	totals = []totalMetric{
		tm("kstate_batches_total", "Committed micro-batches, summed over partitions (a batch of two partitions counts twice); see kstate_commits_total for transactions.", func(c engine.Counters) int64 { return c.Batches }),
		tm("kstate_commits_total", "Committed transactions.", func(c engine.Counters) int64 { return c.Commits }),
		tm("kstate_aborts_total", "Aborted (and retried) batch transactions.", func(c engine.Counters) int64 { return c.Aborts }),
		tm("kstate_timers_registered_total", "Timers registered by processors.", func(c engine.Counters) int64 { return c.TimersRegistered }),
		tm("kstate_timers_fired_total", "Timers fired (HandleExpiredTimer calls).", func(c engine.Counters) int64 { return c.TimersFired }),
		tm("kstate_ttl_removals_total", "State rows removed by their TTL.", func(c engine.Counters) int64 { return c.TTLRemovals }),
		tm("kstate_late_rows_dropped_total", "EventTime rows dropped at or before the watermark.", func(c engine.Counters) int64 { return c.LateRowsDropped }),
		tm("kstate_dead_letter_records_total", "Records written to the dead-letter topic.", func(c engine.Counters) int64 { return c.DeadLettered }),
		tm("kstate_decode_errors_total", "Undecodable input records (skipped or dead-lettered by the policy).", func(c engine.Counters) int64 { return c.DecodeErrors }),
		tm("kstate_skipped_records_total", "Input records dropped by DecodeErrorSkip or by kstate.SkipRecord (kstate skip).", func(c engine.Counters) int64 { return c.Skipped }),
		tm("kstate_processing_errors_total", "Processor calls that failed under ProcessingErrorDeadLetter.", func(c engine.Counters) int64 { return c.ProcessingErrors }),
		tm("kstate_key_partition_mismatches_total", "Input records whose key does not hash to the partition they were read from.", func(c engine.Counters) int64 { return c.KeyPartitionMismatches }),
		tm("kstate_changelog_records_total", "Changelog records produced by committed batches.", func(c engine.Counters) int64 { return c.ChangelogRecords }),
		tm("kstate_restored_records_total", "Changelog records applied by finished restores.", func(c engine.Counters) int64 { return c.RestoreRecords }),
	}
	// Tombstones stepped over by state scans (issue #25).
	totals = append(totals, tm("kstate_state_deletes_skipped_total",
		"Deleted state entries (tombstones) the state store stepped over while scanning state; a high rate per batch means deletions slow the scans until compaction drops them.",
		func(c engine.Counters) int64 { return c.StateDeletesSkipped }))
	gauges = scrapeGauges{
		state:           m.metric("kstate_app_state", "1 for the App's current state (label state), 0 for the others.", prometheus.GaugeValue, "state"),
		ready:           m.metric("kstate_ready", "1 when the App is ready (Running: /readyz 200), else 0.", prometheus.GaugeValue),
		live:            m.metric("kstate_live", "1 when the App is live (/healthz 200), else 0.", prometheus.GaugeValue),
		inFlight:        m.metric("kstate_batch_in_flight_seconds", "Age of the micro-batch in flight; 0 between batches.", prometheus.GaugeValue),
		inFlightRecords: m.metric("kstate_batch_in_flight_records", "Input records of the micro-batch in flight (summed over the pipelines); 0 between batches.", prometheus.GaugeValue),
		lastError:       m.metric("kstate_last_error_timestamp_seconds", "Unix time of the last error the App met (an aborted transaction, a dead-lettered record, Run's error); 0 when none.", prometheus.GaugeValue),
		lastCommit:      m.metric("kstate_last_commit_timestamp_seconds", "Unix time of the last committed transaction; 0 before the first.", prometheus.GaugeValue),
		assigned:        m.metric("kstate_assigned_partitions", "Input partitions assigned to this instance.", prometheus.GaugeValue),
		firstCommit:     m.metric("kstate_first_commit_seconds", "Time from the start of Run to its first committed transaction; 0 until then.", prometheus.GaugeValue),
		batchLimit:      m.metric("kstate_batch_record_limit", "Record limit of the next micro-batch (adaptive batches: grows under a backlog, back to MaxBatchRecords when caught up); the largest over the pipelines.", prometheus.GaugeValue),
	}
	return perPart, sizes, totals, gauges
}

type partMetric struct {
	scrapeMetric
	// value returns the series' value of a partition; ok false: absent.
	value func(engine.Counters, engine.PartitionStatus) (float64, bool)
}

type totalMetric struct {
	scrapeMetric
	value func(engine.Counters) int64
}

type scrapeGauges struct {
	state, ready, live, inFlight, lastError, lastCommit, assigned, firstCommit scrapeMetric
	batchLimit, inFlightRecords                                                scrapeMetric
}

func (g scrapeGauges) all() []scrapeMetric {
	return []scrapeMetric{g.state, g.ready, g.live, g.inFlight, g.lastError, g.lastCommit, g.assigned, g.firstCommit, g.batchLimit, g.inFlightRecords}
}

// Describe implements prometheus.Collector.
func (m *appMetrics) Describe(ch chan<- *prometheus.Desc) {
	perPart, totals, gauges := m.perPart, m.totals, m.gauges
	for _, p := range perPart {
		ch <- p.desc
	}
	for _, sz := range m.sizes {
		ch <- sz.desc
	}
	for _, t := range totals {
		ch <- t.desc
	}
	for _, g := range gauges.all() {
		ch <- g.desc
	}
	m.batchDuration.Describe(ch)
	m.commitLatency.Describe(ch)
	m.endToEnd.Describe(ch)
	m.rebalances.Describe(ch)
}

// Collect implements prometheus.Collector.
func (m *appMetrics) Collect(ch chan<- prometheus.Metric) {
	v := m.scrape()
	perPart, totals, g := m.perPart, m.totals, m.gauges
	s := v.snap
	for _, p := range s.Assigned {
		part := strconv.Itoa(int(p))
		ct, st := s.Partitions[p], s.Status[p]
		for _, pm := range perPart {
			if x, ok := pm.value(ct, st); ok {
				ch <- prometheus.MustNewConstMetric(pm.desc, pm.typ, x, part)
			}
		}
	}
	for p, sz := range v.sizes {
		part := strconv.Itoa(int(p))
		for i, d := range m.sizes {
			x := sz.Bytes
			if i%2 == 1 {
				x = sz.Entries
			}
			if x >= 0 { // entries: unknown with Pebble
				ch <- prometheus.MustNewConstMetric(d.desc, d.typ, float64(x), part)
			}
		}
	}
	for _, t := range totals {
		ch <- prometheus.MustNewConstMetric(t.desc, t.typ, float64(t.value(s.Total)))
	}
	for _, st := range stateNames {
		ch <- prometheus.MustNewConstMetric(g.state.desc, g.state.typ, b2f(st == v.state.String()), st)
	}
	lastErr, lastErrAt, lastCommit := m.last()
	ch <- prometheus.MustNewConstMetric(g.ready.desc, g.ready.typ, b2f(v.ready))
	ch <- prometheus.MustNewConstMetric(g.live.desc, g.live.typ, b2f(v.live))
	ch <- prometheus.MustNewConstMetric(g.inFlight.desc, g.inFlight.typ, s.BatchInFlight.Seconds())
	ch <- prometheus.MustNewConstMetric(g.inFlightRecords.desc, g.inFlightRecords.typ, float64(s.BatchInFlightRecords))
	ch <- prometheus.MustNewConstMetric(g.lastError.desc, g.lastError.typ, unixSeconds(lastErr != "", lastErrAt))
	ch <- prometheus.MustNewConstMetric(g.lastCommit.desc, g.lastCommit.typ, unixSeconds(true, lastCommit))
	ch <- prometheus.MustNewConstMetric(g.assigned.desc, g.assigned.typ, float64(len(s.Assigned)))
	ch <- prometheus.MustNewConstMetric(g.firstCommit.desc, g.firstCommit.typ, s.FirstCommit.Seconds())
	ch <- prometheus.MustNewConstMetric(g.batchLimit.desc, g.batchLimit.typ, float64(s.BatchRecordLimit))
	m.batchDuration.Collect(ch)
	m.commitLatency.Collect(ch)
	m.endToEnd.Collect(ch)
	m.rebalances.Collect(ch)
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

func unixSeconds(ok bool, t time.Time) float64 {
	if !ok || t.IsZero() {
		return 0
	}
	return float64(t.UnixNano()) / 1e9
}

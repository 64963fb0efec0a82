package main

import (
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"time"
	"unicode/utf8"
)

// quantile returns the q-quantile (nearest rank) of ds; 0 for none.
func quantile(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := int(math.Ceil(q*float64(len(s)))) - 1
	return s[min(max(i, 0), len(s)-1)]
}

func mean(total time.Duration, n int64) time.Duration {
	if n <= 0 {
		return 0
	}
	return total / time.Duration(n)
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// spread is the median, min and max of one metric over the runs; N = 0
// when there is no value.
type spread struct {
	Median, Min, Max float64
	N                int
}

func spreadOf(vs []float64) spread {
	var ok []float64
	for _, v := range vs {
		if !math.IsNaN(v) {
			ok = append(ok, v)
		}
	}
	if len(ok) == 0 {
		return spread{}
	}
	slices.Sort(ok)
	m := ok[len(ok)/2]
	if len(ok)%2 == 0 {
		m = (ok[len(ok)/2-1] + ok[len(ok)/2]) / 2
	}
	return spread{Median: m, Min: ok[0], Max: ok[len(ok)-1], N: len(ok)}
}

// metric names one row of the summary: how to read it from a run result
// and how to print it.
type metric struct {
	section    string
	key, label string
	format     string // fmt verb for one value
	get        func(*runResult) float64
}

func metrics() []metric {
	num := func(f func(*runResult) float64) func(*runResult) float64 { return f }
	dur := func(f func(*runResult) time.Duration) func(*runResult) float64 {
		return func(r *runResult) float64 { return ms(f(r)) }
	}
	const (
		thr = "throughput: the input is produced first, then the application runs"
		lat = "latency: rows produced at a fixed rate, each stamped; now − stamp when visible read_committed"
		rst = "restore: local state deleted, same instance restarted"
		chn = "churn: every session closed, restarted on its state, then --new-keys new keys (one row each)"
	)
	// churn returns NaN (no value: "–") for the other processors.
	churn := func(f func(*runResult) float64) func(*runResult) float64 {
		return func(r *runResult) float64 {
			if r.NewKeys == 0 {
				return math.NaN()
			}
			return f(r)
		}
	}
	return []metric{
		{thr, "throughput_rps", "throughput (records/s, first→last output)", "%.0f", num(func(r *runResult) float64 { return r.Throughput })},
		{thr, "startup_ms", "start → first committed output (ms)", "%.0f", dur(func(r *runResult) time.Duration { return r.Startup })},
		{thr, "first_txn_ms", "first transaction's commit (ms)", "%.0f", dur(func(r *runResult) time.Duration { return r.FirstTxn })},
		{thr, "rows_per_commit", "input rows per transaction", "%.0f", num(func(r *runResult) float64 { return r.RowsPerCommit })},
		{thr, "commit_mean_ms", "commit latency mean (ms, Metrics)", "%.1f", dur(func(r *runResult) time.Duration { return r.CommitMean })},
		{thr, "commit_p50_ms", "commit latency p50 (ms, sampled, after the first)", "%.1f", dur(func(r *runResult) time.Duration { return r.ThroughputCommitP50 })},
		{thr, "commit_p99_ms", "commit latency p99 (ms, sampled, after the first)", "%.1f", dur(func(r *runResult) time.Duration { return r.ThroughputCommitP99 })},
		{thr, "changelog_per_row", "changelog records per input row", "%.2f", num(func(r *runResult) float64 { return r.ChangelogPerRow })},
		{lat, "latency_p50_ms", "e2e latency p50 (ms)", "%.0f", dur(func(r *runResult) time.Duration { return r.LatencyP50 })},
		{lat, "latency_p90_ms", "e2e latency p90 (ms)", "%.0f", dur(func(r *runResult) time.Duration { return r.LatencyP90 })},
		{lat, "latency_p99_ms", "e2e latency p99 (ms)", "%.0f", dur(func(r *runResult) time.Duration { return r.LatencyP99 })},
		{lat, "latency_max_ms", "e2e latency max (ms)", "%.0f", dur(func(r *runResult) time.Duration { return r.LatencyMax })},
		{lat, "input_ack_p50_ms", "input producer's Produce call p50 (ms, included)", "%.0f", dur(func(r *runResult) time.Duration { return r.InputAckP50 })},
		{lat, "fetched_p50_ms", "input → fetched by the app p50 (ms)", "%.0f", dur(func(r *runResult) time.Duration { return r.FetchedP50 })},
		{lat, "fetched_p99_ms", "input → fetched by the app p99 (ms)", "%.0f", dur(func(r *runResult) time.Duration { return r.FetchedP99 })},
		{lat, "polled_p50_ms", "input → returned by the app's poll p50 (ms)", "%.0f", dur(func(r *runResult) time.Duration { return r.PolledP50 })},
		{lat, "polled_p99_ms", "input → returned by the app's poll p99 (ms)", "%.0f", dur(func(r *runResult) time.Duration { return r.PolledP99 })},
		{lat, "to_output_p50_ms", "input → output produced p50 (ms)", "%.0f", dur(func(r *runResult) time.Duration { return r.ToOutputP50 })},
		{lat, "to_visible_p50_ms", "output produced → visible p50 (ms)", "%.0f", dur(func(r *runResult) time.Duration { return r.ToVisibleP50 })},
		{lat, "to_visible_p99_ms", "output produced → visible p99 (ms)", "%.0f", dur(func(r *runResult) time.Duration { return r.ToVisibleP99 })},
		{lat, "produce_request_p50_ms", "the app's Produce requests p50 (ms)", "%.1f", dur(func(r *runResult) time.Duration { return r.ProduceReqP50 })},
		{lat, "produce_request_p99_ms", "the app's Produce requests p99 (ms)", "%.1f", dur(func(r *runResult) time.Duration { return r.ProduceReqP99 })},
		{lat, "txn_offset_commit_p50_ms", "TxnOffsetCommit requests p50 (ms)", "%.1f", dur(func(r *runResult) time.Duration { return r.OffsetCommitReqP50 })},
		{lat, "txn_offset_commit_p99_ms", "TxnOffsetCommit requests p99 (ms)", "%.1f", dur(func(r *runResult) time.Duration { return r.OffsetCommitReqP99 })},
		{lat, "end_txn_p50_ms", "EndTxn requests p50 (ms)", "%.1f", dur(func(r *runResult) time.Duration { return r.EndTxnReqP50 })},
		{lat, "end_txn_p99_ms", "EndTxn requests p99 (ms)", "%.1f", dur(func(r *runResult) time.Duration { return r.EndTxnReqP99 })},
		{lat, "latency_rows_per_commit", "input rows per transaction", "%.0f", num(func(r *runResult) float64 { return r.LatencyRowsPerCommit })},
		{lat, "latency_commit_p50_ms", "commit latency p50 (ms, sampled)", "%.1f", dur(func(r *runResult) time.Duration { return r.LatencyCommitP50 })},
		{lat, "latency_commit_p99_ms", "commit latency p99 (ms, sampled)", "%.1f", dur(func(r *runResult) time.Duration { return r.LatencyCommitP99 })},
		{chn, "churn_new_keys_rps", "new keys' records/s (restart → last output)", "%.0f", churn(func(r *runResult) float64 { return r.NewKeysRate })},
		{chn, "churn_new_keys_span_rps", "new keys' records/s (first → last output)", "%.0f", churn(func(r *runResult) float64 { return r.NewKeysSpanRate })},
		{chn, "churn_new_keys_first_output_ms", "restart → first committed output (ms)", "%.0f", churn(func(r *runResult) float64 { return ms(r.NewKeysFirst) })},
		{chn, "churn_new_keys_first_commit_ms", "restart → first commit (ms, Metrics.FirstCommit)", "%.0f", churn(func(r *runResult) float64 { return ms(r.NewKeysFirstCommit) })},
		{chn, "churn_new_keys_commit_mean_ms", "commit latency mean after the restart (ms)", "%.1f", churn(func(r *runResult) float64 { return ms(r.NewKeysCommitMean) })},
		{chn, "churn_sessions_closed_ms", "end of the latency phase → every session closed (ms)", "%.0f", churn(func(r *runResult) float64 { return ms(r.SessionsClosed) })},
		{chn, "churn_sessions_fired", "sessions closed (timers fired)", "%.0f", churn(func(r *runResult) float64 { return float64(r.SessionsFired) })},
		{rst, "restore_records", "changelog records restored", "%.0f", num(func(r *runResult) float64 { return float64(r.RestoreRecords) })},
		{rst, "restore_rps", "restore speed (records/s, partitions in parallel)", "%.0f", num(func(r *runResult) float64 { return r.RestoreRate })},
		{rst, "restore_ready_ms", "restart → all partitions restored (ms)", "%.0f", dur(func(r *runResult) time.Duration { return r.RestoreReady })},
		{rst, "first_commit_ms", "restart → first committed batch (ms)", "%.0f", dur(func(r *runResult) time.Duration { return r.FirstCommit })},
		{rst, "aborts", "aborted transactions (whole run)", "%.0f", num(func(r *runResult) float64 { return float64(r.Aborts) })},
	}
}

// summary is the per-metric spread per processor and the spread of the
// within-run ratio of each processor to the first one.
type summary struct {
	Processors []string                     `json:"processors"`
	Metrics    map[string]map[string]spread `json:"metrics"` // metric → processor → spread
	// Ratios: metric → processor → spread over the runs of
	// value(processor) / value(first processor) in the same run.
	Ratios map[string]map[string]spread `json:"ratios"`
}

func summarize(procs []string, results []*runResult) summary {
	s := summary{Processors: procs, Metrics: map[string]map[string]spread{}, Ratios: map[string]map[string]spread{}}
	byRun := map[int]map[string]*runResult{}
	for _, r := range results {
		if byRun[r.Run] == nil {
			byRun[r.Run] = map[string]*runResult{}
		}
		byRun[r.Run][r.Processor] = r
	}
	for _, m := range metrics() {
		s.Metrics[m.key] = map[string]spread{}
		s.Ratios[m.key] = map[string]spread{}
		for _, p := range procs {
			var vs, ratios []float64
			for _, r := range results {
				if r.Processor != p {
					continue
				}
				vs = append(vs, m.get(r))
				if base := byRun[r.Run][procs[0]]; base != nil && p != procs[0] {
					if b := m.get(base); b != 0 {
						ratios = append(ratios, m.get(r)/b)
					}
				}
			}
			s.Metrics[m.key][p] = spreadOf(vs)
			if p != procs[0] {
				s.Ratios[m.key][p] = spreadOf(ratios)
			}
		}
	}
	return s
}

// printTable writes the summary: per processor "median [min–max]", and
// the median within-run ratio to the first processor, under a line per
// section.
func printTable(w io.Writer, s summary) {
	type line struct {
		section string // a section title line when not empty
		cells   []string
	}
	hdr := []string{"metric"}
	for _, p := range s.Processors {
		hdr = append(hdr, p+" median [min–max]")
	}
	for _, p := range s.Processors[1:] {
		hdr = append(hdr, p+"/"+s.Processors[0])
	}
	lines := []line{{cells: hdr}}
	section := ""
	for _, m := range metrics() {
		if m.section != section {
			section = m.section
			lines = append(lines, line{section: section})
		}
		row := []string{"  " + m.label}
		for _, p := range s.Processors {
			sp := s.Metrics[m.key][p]
			v := "–"
			if sp.N > 0 {
				v = fmt.Sprintf(m.format, sp.Median)
			}
			if sp.N > 1 {
				v += fmt.Sprintf(" ["+m.format+"–"+m.format+"]", sp.Min, sp.Max)
			}
			row = append(row, v)
		}
		for _, p := range s.Processors[1:] {
			v := "–"
			if sp := s.Ratios[m.key][p]; sp.N > 0 {
				v = fmt.Sprintf("%.2f", sp.Median)
			}
			row = append(row, v)
		}
		lines = append(lines, line{cells: row})
	}
	width := make([]int, len(hdr))
	for _, l := range lines {
		for i, c := range l.cells {
			width[i] = max(width[i], utf8.RuneCountInString(c))
		}
	}
	for _, l := range lines {
		if l.section != "" {
			fmt.Fprintln(w, l.section)
			continue
		}
		var b strings.Builder
		for i, c := range l.cells {
			pad := strings.Repeat(" ", width[i]-utf8.RuneCountInString(c))
			if i == 0 {
				b.WriteString(c + pad)
			} else {
				b.WriteString("  " + pad + c) // numbers right-aligned
			}
		}
		fmt.Fprintln(w, b.String())
	}
}

// Command benchpeers prints the summary of a peer comparison run (`make
// bench-peers`, internal/tools/benchpeers/bench-peers.sh): from the
// harness's results.tsv, one row per peer and mode with the median
// records/s, its ratio to Kafka Streams and to the raw pipe, CPU per
// million records, peak RSS and latencies, as a Markdown table for
// docs/BENCHMARKS.md.
//
// The heavy workload's peers are named <x>-heavy-<threads>
// (bench-peers.sh WORKLOAD=heavy): their references are the Kafka Streams
// and Flink peers of the same workload and thread count,
// kstreams-heavy-<threads> and flink-heavy-<threads>; the other peers'
// are -kstreams and -flink.
//
//	go run ./internal/tools/benchpeers -results ~/.cache/kstate/bench-peers/results/<run>.tsv
//
// Next to the results it reads <results>.meta (the commit and the command)
// and <results>.load (the load average sampled during the run) if present.
package main

import (
	"bufio"
	"encoding/csv"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
)

func main() {
	results := flag.String("results", "", "the harness's results.tsv")
	kstreams := flag.String("kstreams", "kstreams-eos", "the peer of the \"× Kafka Streams\" column (a heavy peer's: kstreams-heavy-<its threads>)")
	flink := flag.String("flink", "flink-eos", "the peer of the \"× Flink\" comparisons (a heavy peer's: flink-heavy-<its threads>)")
	raw := flag.String("raw", "rawpipe-eos", "the peer of the \"× raw pipe\" column")
	flag.Parse()
	if *results == "" {
		fmt.Fprintln(os.Stderr, "benchpeers: -results is required")
		os.Exit(2)
	}
	f, err := os.Open(*results)
	if err != nil {
		fmt.Fprintln(os.Stderr, "benchpeers:", err)
		os.Exit(1)
	}
	defer f.Close()
	rows, err := readResults(f)
	if err != nil {
		fmt.Fprintln(os.Stderr, "benchpeers:", *results+":", err)
		os.Exit(1)
	}
	if b, err := os.ReadFile(*results + ".meta"); err == nil {
		fmt.Print(string(b))
	}
	if lf, err := os.Open(*results + ".load"); err == nil {
		if s := loadSummary(lf); s != "" {
			fmt.Println("# load average (1 min) during the run:", s)
		}
		lf.Close()
	}
	fmt.Println()
	fmt.Print(summarize(rows, refs{kstreams: *kstreams, flink: *flink, raw: *raw}))
}

// result is one line of results.tsv (one peer, one repeat).
type result struct {
	peer, guarantee, mode, ok string
	rep                       int
	n                         float64
	rate, cpu, rss            float64 // NaN-free: -1 = not available
	span                      float64 // out_span_s
	p50, p99, visP50, visP99  float64
	busy, loadStart           float64
}

func readResults(r io.Reader) ([]result, error) {
	cr := csv.NewReader(r)
	cr.Comma = '\t'
	cr.FieldsPerRecord = -1
	cr.LazyQuotes = true
	head, err := cr.Read()
	if err != nil {
		return nil, fmt.Errorf("no header: %w", err)
	}
	col := map[string]int{}
	for i, h := range head {
		col[h] = i
	}
	for _, need := range []string{"peer", "guarantee", "N", "records_per_s", "ok", "mode", "rep"} {
		if _, ok := col[need]; !ok {
			return nil, fmt.Errorf("column %q missing from the header", need)
		}
	}
	get := func(rec []string, name string) string {
		if i, ok := col[name]; ok && i < len(rec) {
			return rec[i]
		}
		return ""
	}
	num := func(rec []string, name string) float64 {
		s := get(rec, name)
		if name == "load_start" {
			s, _, _ = strings.Cut(s, "/")
		}
		x, err := strconv.ParseFloat(s, 64)
		if err != nil {
			return -1
		}
		return x
	}
	var out []result
	for {
		rec, err := cr.Read()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, err
		}
		if len(rec) == 0 || rec[0] == "peer" {
			continue
		}
		rep, _ := strconv.Atoi(get(rec, "rep"))
		out = append(out, result{
			peer: get(rec, "peer"), guarantee: get(rec, "guarantee"), mode: get(rec, "mode"), ok: get(rec, "ok"), rep: rep,
			n: num(rec, "N"), rate: num(rec, "records_per_s"), cpu: num(rec, "cpu_s"), rss: num(rec, "peak_rss_mb"),
			span: num(rec, "out_span_s"), p50: num(rec, "p50_ms"), p99: num(rec, "p99_ms"),
			visP50: num(rec, "vis_p50_ms"), visP99: num(rec, "vis_p99_ms"),
			busy: num(rec, "machine_busy_pct"), loadStart: num(rec, "load_start"),
		})
	}
}

// median of the available (non-negative) values; -1 if none.
func median(xs []float64) float64 {
	var v []float64
	for _, x := range xs {
		if x >= 0 {
			v = append(v, x)
		}
	}
	if len(v) == 0 {
		return -1
	}
	slices.Sort(v)
	if len(v)%2 == 1 {
		return v[len(v)/2]
	}
	return (v[len(v)/2-1] + v[len(v)/2]) / 2
}

func minMax(xs []float64) (lo, hi float64) {
	lo, hi = -1, -1
	for _, x := range xs {
		if x < 0 {
			continue
		}
		if lo < 0 || x < lo {
			lo = x
		}
		if x > hi {
			hi = x
		}
	}
	return lo, hi
}

// group is the runs of one peer in one mode.
type group struct {
	peer, guarantee, mode string
	all, ok               []result
}

func groups(rows []result) []*group {
	var gs []*group
	idx := map[[2]string]*group{}
	for _, r := range rows {
		k := [2]string{r.peer, r.mode}
		g := idx[k]
		if g == nil {
			g = &group{peer: r.peer, guarantee: r.guarantee, mode: r.mode}
			idx[k] = g
			gs = append(gs, g)
		}
		g.all = append(g.all, r)
		if r.ok == "true" {
			g.ok = append(g.ok, r)
		}
	}
	return gs
}

func field(rs []result, f func(result) float64) []float64 {
	out := make([]float64, len(rs))
	for i, r := range rs {
		out[i] = f(r)
	}
	return out
}

// num formats x with thousands separators and d decimals; "–" if absent.
func num(x float64, d int) string {
	if x < 0 {
		return "–"
	}
	s := strconv.FormatFloat(x, 'f', d, 64)
	intPart, frac, _ := strings.Cut(s, ".")
	var b strings.Builder
	for i, c := range intPart {
		if i > 0 && (len(intPart)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	if frac != "" {
		b.WriteString("." + frac)
	}
	return b.String()
}

func ratio(a, b float64) string {
	if a <= 0 || b <= 0 {
		return "–"
	}
	return strconv.FormatFloat(a/b, 'f', 2, 64) + "×"
}

// withinRun is the median over repeats of a's rate / b's rate in the same
// repeat (both verified), -1 if no repeat has both.
func withinRun(a, b *group) float64 {
	var rs []float64
	for _, x := range a.ok {
		for _, y := range b.ok {
			if x.rep == y.rep && x.rate > 0 && y.rate > 0 {
				rs = append(rs, x.rate/y.rate)
			}
		}
	}
	return median(rs)
}

// refs are the reference peers of the comparisons.
type refs struct{ kstreams, flink, raw string }

// of returns the references of peer: for a heavy workload peer
// <x>-heavy-<threads>, Kafka Streams and Flink on the heavy workload with
// the same threads.
func (r refs) of(peer string) refs {
	_, n, ok := strings.Cut(peer, "-heavy-")
	if !ok || n == "" || strings.Trim(n, "0123456789") != "" {
		return r
	}
	return refs{kstreams: "kstreams-heavy-" + n, flink: "flink-heavy-" + n, raw: r.raw}
}

// summarize renders the table and the within-run ratios.
func summarize(rows []result, ref refs) string {
	gs := groups(rows)
	find := func(peer, mode string) *group {
		for _, g := range gs {
			if g.peer == peer && g.mode == mode {
				return g
			}
		}
		return nil
	}
	rate := func(r result) float64 { return r.rate }
	var b strings.Builder
	fmt.Fprintln(&b, "| peer | guarantee | mode | verified runs | records/s, median [min–max] | × Kafka Streams | × raw pipe | steady records/s (N / first→last output) | CPU s per 1M records | peak RSS MB | p50 / p99 ms visible (read_committed) | machine busy % | load avg at start |")
	fmt.Fprintln(&b, "|---|---|---|---|---|---|---|---|---|---|---|---|---|")
	for _, g := range gs {
		m := median(field(g.ok, rate))
		lo, hi := minMax(field(g.ok, rate))
		r := ref.of(g.peer)
		vs := func(peer string) string {
			o := find(peer, g.mode)
			if o == nil {
				return "–"
			}
			return ratio(m, median(field(o.ok, rate)))
		}
		steady := median(field(g.ok, func(r result) float64 {
			if r.span <= 0 {
				return -1
			}
			return r.n / r.span
		}))
		cpu := median(field(g.ok, func(r result) float64 {
			if r.cpu < 0 || r.n <= 0 {
				return -1
			}
			return r.cpu / r.n * 1e6
		}))
		var loads []string
		for _, r := range g.all {
			loads = append(loads, num(r.loadStart, 1))
		}
		fmt.Fprintf(&b, "| %s | %s | %s | %d/%d | %s [%s–%s] | %s | %s | %s | %s | %s | %s / %s | %s | %s |\n",
			g.peer, g.guarantee, g.mode, len(g.ok), len(g.all), num(m, 0), num(lo, 0), num(hi, 0), vs(r.kstreams), vs(r.raw),
			num(steady, 0), num(cpu, 1), num(median(field(g.ok, func(r result) float64 { return r.rss })), 0),
			num(median(field(g.ok, func(r result) float64 { return r.visP50 })), 0),
			num(median(field(g.ok, func(r result) float64 { return r.visP99 })), 0),
			num(median(field(g.ok, func(r result) float64 { return r.busy })), 0), strings.Join(loads, ", "))
	}
	fmt.Fprintln(&b)
	for _, g := range gs {
		r := ref.of(g.peer)
		for _, ref := range []string{r.kstreams, r.flink, r.raw} {
			o := find(ref, g.mode)
			if o == nil || o == g {
				continue
			}
			if strings.HasPrefix(g.mode, "live") {
				// At a fixed rate every peer keeps up: compare latencies.
				vis := func(gr *group, p99 bool) float64 {
					return median(field(gr.ok, func(r result) float64 {
						if p99 {
							return r.visP99
						}
						return r.visP50
					}))
				}
				fmt.Fprintf(&b, "- %s / %s (%s): visible latency p50 %s, p99 %s (ratio of the medians)\n", g.peer, ref, g.mode,
					ratio(vis(g, false), vis(o, false)), ratio(vis(g, true), vis(o, true)))
				continue
			}
			if w := withinRun(g, o); w > 0 {
				fmt.Fprintf(&b, "- %s / %s (%s): median of the within-repeat ratios %.2f×\n", g.peer, ref, g.mode, w)
			}
		}
	}
	return b.String()
}

// loadSummary reads "<unix> <load1>" lines and returns "min / median / max
// over n samples".
func loadSummary(r io.Reader) string {
	var v []float64
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) != 2 {
			continue
		}
		if x, err := strconv.ParseFloat(f[1], 64); err == nil {
			v = append(v, x)
		}
	}
	if len(v) == 0 {
		return ""
	}
	lo, hi := minMax(v)
	return fmt.Sprintf("min %.2f, median %.2f, max %.2f over %d samples (every 5 s)", lo, median(v), hi, len(v))
}

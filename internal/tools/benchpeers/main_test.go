package main

import (
	"strconv"
	"strings"
	"testing"
)

const sample = "peer\tguarantee\tN\tK\tP\tseconds\trecords_per_s\tp50_ms\tp99_ms\tduplicates\tmissing\tpeak_rss_mb\tok\tcpu_s\tout_span_s\tseconds_visible\tvis_p50_ms\tvis_p99_ms\tmax_ms\tover_counts\tout_records\tmode\trep\tapp_id\tstarted\tpeer_exit\tlog\tload_start\tload_end\tmachine_busy_pct\tmachine_nice_pct\n" +
	"kstate\texactly-once\t1000000\t100000\t4\t12.5\t80000\t1\t2\t0\t0\t200\ttrue\t13.0\t10\t12.6\t5\t9\t10\t0\t1000000\tbacklog\t1\ta\ts\t0\tl\t1.50/1/1\t2/2/2\t60\t0\n" +
	"kstreams-eos\texactly-once\t1000000\t100000\t4\t10\t100000\t1\t2\t0\t0\t370\ttrue\t10.0\t8\t10\t5\t9\t10\t0\t1000000\tbacklog\t1\tb\ts\t0\tl\t2/1/1\t2/2/2\t75\t0\n" +
	"rawpipe-eos\texactly-once\t1000000\t100000\t4\t1.25\t800000\t1\t2\t0\t0\t70\ttrue\t1.0\t1\t1.3\t5\t9\t10\t0\t1000000\tbacklog\t1\tc\ts\t0\tl\t2/1/1\t2/2/2\t20\t0\n" +
	"kstate\texactly-once\t1000000\t100000\t4\t10\t100000\t1\t2\t0\t0\t210\ttrue\t12.0\t9\t10\t5\t9\t10\t0\t1000000\tbacklog\t2\td\ts\t0\tl\t3/1/1\t2/2/2\t60\t0\n" +
	"kstreams-eos\texactly-once\t1000000\t100000\t4\t10\t50000\t1\t2\t3\t0\t370\tfalse\t10.0\t8\t10\t5\t9\t10\t0\t1000000\tbacklog\t2\te\ts\t0\tl\t2/1/1\t2/2/2\t75\t0\n"

func TestSummarize(t *testing.T) {
	rows, err := readResults(strings.NewReader(sample))
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 5 {
		t.Fatalf("%d rows, want 5", len(rows))
	}
	out := summarize(rows, refs{kstreams: "kstreams-eos", flink: "flink-eos", raw: "rawpipe-eos"})
	t.Log("\n" + out)
	for _, want := range []string{
		// kstate: median of 80k and 100k; vs Kafka Streams' only verified run (100k), vs the raw pipe (800k).
		"| kstate | exactly-once | backlog | 2/2 | 90,000 [80,000–100,000] | 0.90× | 0.11× |",
		"| kstreams-eos | exactly-once | backlog | 1/2 | 100,000 [100,000–100,000] | 1.00× | 0.12× |",
		"| 12.5 | 205 |", // kstate: CPU s per 1M (median of 13 and 12), peak RSS
		"- kstate / kstreams-eos (backlog): median of the within-repeat ratios 0.80×", // only repeat 1 has both verified
		"- kstate / rawpipe-eos (backlog): median of the within-repeat ratios 0.10×",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("summary lacks %q", want)
		}
	}
}

func TestReadResultsNeedsColumns(t *testing.T) {
	if _, err := readResults(strings.NewReader("peer\tN\n")); err == nil {
		t.Fatal("a header without records_per_s accepted")
	}
}

func TestNum(t *testing.T) {
	for _, c := range []struct {
		x    float64
		d    int
		want string
	}{{1234567, 0, "1,234,567"}, {999, 0, "999"}, {1000, 1, "1,000.0"}, {-1, 0, "–"}, {12.34, 1, "12.3"}} {
		if got := num(c.x, c.d); got != c.want {
			t.Errorf("num(%v, %d) = %q, want %q", c.x, c.d, got, c.want)
		}
	}
}

// At a fixed rate every peer keeps up, so the comparison lines give the
// visible latencies' ratios, not throughput.
func TestSummarizeLive(t *testing.T) {
	live := strings.ReplaceAll(sample, "\tbacklog\t", "\tlive@5000\t")
	live = strings.Replace(live, "\t12.6\t5\t9\t", "\t12.6\t4\t18\t", 1) // kstate, repeat 1
	rows, err := readResults(strings.NewReader(live))
	if err != nil {
		t.Fatal(err)
	}
	// kstate's visible p50/p99: 4/18 and 5/9, medians 4.5/13.5; Kafka Streams' verified run 5/9.
	out := summarize(rows, refs{kstreams: "kstreams-eos", flink: "flink-eos", raw: "rawpipe-eos"})
	if want := "- kstate / kstreams-eos (live@5000): visible latency p50 0.90×, p99 1.50× (ratio of the medians)"; !strings.Contains(out, want) {
		t.Errorf("summary lacks %q:\n%s", want, out)
	}
	if strings.Contains(out, "within-repeat") {
		t.Errorf("throughput ratios in a live-mode summary:\n%s", out)
	}
}

// The heavy workload's peers are compared with Kafka Streams and Flink on
// the heavy workload with the same threads, not with count's peers.
func TestSummarizeHeavy(t *testing.T) {
	line := func(peer string, rate, rep int) string {
		return strings.Join([]string{peer, "exactly-once", "1000000", "100000", "4", "10", strconv.Itoa(rate), "1", "2", "0", "0", "300", "true",
			"20.0", "9", "10", "5", "9", "10", "0", "1000000", "backlog", strconv.Itoa(rep), "a", "s", "0", "l", "1/1/1", "2/2/2", "90", "0"}, "\t") + "\n"
	}
	head := sample[:strings.Index(sample, "\n")+1]
	in := head + line("kstate-heavy-2", 60000, 1) + line("kstreams-heavy-2", 20000, 1) + line("flink-heavy-2", 12000, 1) +
		line("kstate-heavy-1", 40000, 1) + line("kstreams-heavy-1", 16000, 1) + line("flink-heavy-1", 10000, 1) + line("kstreams-eos", 50000, 1)
	rows, err := readResults(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	out := summarize(rows, refs{kstreams: "kstreams-eos", flink: "flink-eos", raw: "rawpipe-eos"})
	t.Log("\n" + out)
	for _, want := range []string{
		"| kstate-heavy-2 | exactly-once | backlog | 1/1 | 60,000 [60,000–60,000] | 3.00× | – |",
		"| kstate-heavy-1 | exactly-once | backlog | 1/1 | 40,000 [40,000–40,000] | 2.50× | – |",
		"| flink-heavy-1 | exactly-once | backlog | 1/1 | 10,000 [10,000–10,000] | 0.62× | – |",
		"- kstate-heavy-2 / kstreams-heavy-2 (backlog): median of the within-repeat ratios 3.00×",
		"- kstate-heavy-2 / flink-heavy-2 (backlog): median of the within-repeat ratios 5.00×",
		"- kstate-heavy-1 / flink-heavy-1 (backlog): median of the within-repeat ratios 4.00×",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("summary lacks %q", want)
		}
	}
	if strings.Contains(out, "kstate-heavy-2 / kstreams-eos") || strings.Contains(out, "kstate-heavy-2 / kstreams-heavy-1") {
		t.Errorf("a heavy peer compared with another workload's or thread count's peer:\n%s", out)
	}
}

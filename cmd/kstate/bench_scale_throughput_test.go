package main

import (
	"context"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kstate/kstate/kafka/kafkatest"
)

func TestTputMedianAndSpan(t *testing.T) {
	for _, c := range []struct {
		xs   []float64
		want float64
	}{{nil, 0}, {[]float64{3}, 3}, {[]float64{5, 1, 3}, 3}, {[]float64{4, 1, 3, 2}, 2.5}} {
		if got := medianF(c.xs); got != c.want {
			t.Errorf("medianF(%v) = %v, want %v", c.xs, got, c.want)
		}
	}
	t0 := time.Unix(1000, 0)
	col := &gapCollector{}
	col.mu.arrivals = map[int32][]time.Time{
		0: {t0.Add(2 * time.Second), t0.Add(9 * time.Second)},
		1: {t0.Add(time.Second), t0.Add(5 * time.Second)},
		2: nil,
	}
	if first, last := col.span(); !first.Equal(t0.Add(time.Second)) || !last.Equal(t0.Add(9*time.Second)) {
		t.Errorf("span = %v, %v; want 1 s and 9 s after t0", first.Sub(t0), last.Sub(t0))
	}
}

func TestTputOptionsValidate(t *testing.T) {
	for _, c := range []struct {
		name string
		edit func(*tputOptions)
		want string // "" = valid
	}{
		{"defaults", func(*tputOptions) {}, ""},
		{"no records", func(o *tputOptions) { o.Records = 0 }, "--records"},
		{"no instance", func(o *tputOptions) { o.Instances = 0 }, "--instances 0"},
		{"no repeat", func(o *tputOptions) { o.Repeats = 0 }, "--repeats 0"},
		{"negative standbys", func(o *tputOptions) { o.Standbys = []int{0, -1} }, "--standbys -1"},
		{"bad set", func(o *tputOptions) { o.Sets = []string{"Group.Nope=1"} }, "Group.Nope"},
	} {
		o := defaultTputOptions()
		c.edit(&o)
		err := o.validate()
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%s: %v", c.name, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%s: error %v, want one naming %q", c.name, err, c.want)
		}
	}
}

// TestBenchScaleThroughputSmoke runs `kstate bench scale throughput` small
// on a real broker: every run processes every record exactly once, and
// with standbys 1 the group view lists standby partitions. KSTATE_LONG=1
// only (about a minute).
func TestBenchScaleThroughputSmoke(t *testing.T) {
	if os.Getenv("KSTATE_LONG") == "" {
		t.Skip("long test: run with KSTATE_LONG=1 (make test-long)")
	}
	c := kafkatest.Start(t, kafkatest.RequireReal())
	exe := filepath.Join(t.TempDir(), "kstate")
	if out, err := exec.Command("go", "build", "-o", exe, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	o := defaultTputOptions()
	o.Brokers, o.WorkerExe = c.Brokers(), exe
	o.Records, o.Keys, o.Partitions, o.StateBytes, o.Repeats = 20_000, 2_000, 4, 64, 1
	o.JSON = filepath.Join(t.TempDir(), "tput.json")
	rep, table := runBenchReport[tputReport](t, "bench scale throughput", 5*time.Minute, func(ctx context.Context, out, progress io.Writer) error { return runTputCmd(ctx, out, progress, o) }, o.JSON)
	if len(rep.Runs) != 2 {
		t.Fatalf("%d runs, want one per standbys value", len(rep.Runs))
	}
	for _, r := range rep.Runs {
		if r.ExactlyOnce != "ok" || r.PerSec <= 0 || r.Took <= 0 {
			t.Errorf("standbys %d: exactly-once %q, %.0f records/s in %v", r.Standbys, r.ExactlyOnce, r.PerSec, r.Took)
		}
		if r.Standbys == 1 && r.StandbyParts+r.WarmupParts == 0 {
			t.Errorf("standbys 1: the group view lists no standby partition (active %v)", r.Active)
		}
	}
	if !strings.Contains(table, "median") {
		t.Errorf("no medians in the table:\n%s", table)
	}
}

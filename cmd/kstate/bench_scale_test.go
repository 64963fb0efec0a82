package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kstate/kstate"
	"github.com/kstate/kstate/kafka/kafkatest"
)

func TestScaleGaps(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(ms ...int) []time.Time {
		var ts []time.Time
		for _, m := range ms {
			ts = append(ts, t0.Add(time.Duration(m)*time.Millisecond))
		}
		return ts
	}
	ev, end := t0.Add(20*time.Second), t0.Add(40*time.Second)
	const s = 1000 // ms
	for _, c := range []struct {
		name     string
		arrivals []time.Time
		want     partGap
	}{{
		// A 3 s pause across the event, then a longer one after it;
		// Before counts only the gaps within the 10 s before the event.
		name:     "the longest gap after the event",
		arrivals: at(9*s, 9*s+500, 19*s, 19*s+100, 19*s+500, 22*s+500, 23*s, 39*s+900),
		want:     partGap{MaxGap: 16*time.Second + 900*time.Millisecond, First: 2500 * time.Millisecond, Before: 400 * time.Millisecond},
	}, {
		name:     "gap from the last output before the event",
		arrivals: at(19*s, 19*s+200, 25*s, 26*s, 27*s, 28*s, 29*s, 30*s, 31*s, 32*s, 33*s, 34*s, 35*s, 36*s, 37*s, 38*s, 39*s, 40*s),
		want:     partGap{MaxGap: 5800 * time.Millisecond, First: 5 * time.Second, Before: 200 * time.Millisecond},
	}, {
		// The partition never outputs again: the gap runs to the end of
		// the window and is open.
		name:     "no output after the event",
		arrivals: at(5*s, 15*s, 18*s),
		want:     partGap{MaxGap: 22 * time.Second, Open: true, First: -1, Before: 3 * time.Second},
	}, {
		name:     "no output at all",
		arrivals: nil,
		want:     partGap{MaxGap: 20 * time.Second, Open: true, First: -1},
	}, {
		// Arrivals after the window do not count; before the 10 s span
		// before the event do not count for Before.
		name:     "outside the window",
		arrivals: at(1*s, 8*s, 21*s, 40*s, 41*s, 60*s),
		want:     partGap{MaxGap: 19 * time.Second, First: time.Second, Before: 0},
	}, {
		name:     "an arrival at the event belongs before it",
		arrivals: at(19*s, 20*s, 20*s+300, 40*s),
		want:     partGap{MaxGap: 19*time.Second + 700*time.Millisecond, First: 300 * time.Millisecond, Before: time.Second},
	}} {
		t.Run(c.name, func(t *testing.T) {
			if got := gapsOf(c.arrivals, ev, end); got != c.want {
				t.Errorf("gapsOf:\n got %+v\nwant %+v", got, c.want)
			}
		})
	}

	gs := []partGap{{MaxGap: time.Second, Moved: true}, {MaxGap: 5 * time.Second, Open: true}, {MaxGap: 2 * time.Second, Moved: true}}
	if d, open := maxGap(gs, true); d != 2*time.Second || open {
		t.Errorf("maxGap of the moved: %v %v, want 2s, not open", d, open)
	}
	if d, open := maxGap(gs, false); d != 5*time.Second || !open {
		t.Errorf("maxGap of all: %v %v, want 5s, open", d, open)
	}
}

func TestScaleVerifier(t *testing.T) {
	key := func(k int) string { return string(keyBytes(k)) }
	// feed adds counts 1..n of key k (in a shuffled order).
	feed := func(v *verifier, k, n int) {
		for c := n; c >= 1; c-- {
			v.add(key(k), int64(c))
		}
	}
	perKey := []int32{1, 3, 70, 2}
	good := func() *verifier {
		v := newVerifier(len(perKey))
		for k, n := range perKey {
			feed(v, k, int(n))
		}
		return v
	}
	if err := good().check(perKey); err != nil {
		t.Fatalf("exact outputs: %v", err)
	}
	for _, c := range []struct {
		name   string
		change func(v *verifier)
		want   string
	}{
		{"a duplicate", func(v *verifier) { v.add(key(1), 2) }, "1 duplicate outputs"},
		{"a duplicate above 64", func(v *verifier) { v.add(key(2), 66) }, "1 duplicate outputs"},
		{"a count beyond the inputs", func(v *verifier) { v.add(key(3), 3) }, "1 of 4 keys"},
		{"an unknown key", func(v *verifier) { v.add("x1", 1) }, "1 outputs of unknown keys"},
		{"a key out of range", func(v *verifier) { v.add(key(9), 1) }, "1 outputs of unknown keys"},
		{"count 0", func(v *verifier) { v.add(key(0), 0) }, "1 outputs of unknown keys"},
		{"undecodable", func(v *verifier) { v.decodeErrs++ }, "1 undecodable outputs"},
	} {
		t.Run(c.name, func(t *testing.T) {
			v := good()
			c.change(v)
			if err := v.check(perKey); err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("check: %v, want an error with %q", err, c.want)
			}
		})
	}
	// A lost output: a count missing (below and above 64).
	for _, lost := range []int64{2, 65} {
		v := newVerifier(len(perKey))
		for k, n := range perKey {
			for c := int64(1); c <= int64(n); c++ {
				if k == 2 && c == lost || k == 1 && lost == 2 && c == 2 {
					continue
				}
				v.add(key(k), c)
			}
		}
		if err := v.check(perKey); err == nil || !strings.Contains(err.Error(), "do not have their counts 1..n exactly once") {
			t.Errorf("count %d lost: check: %v", lost, err)
		}
	}
	// The right number of outputs, no count twice, but the counts are
	// not 1..n (below and above 64); or one count twice and one missing.
	for _, counts := range [][]int64{{1, 2, 4}, {1, 2, 2}, append(seq(69), 71)} {
		v := newVerifier(1)
		for _, c := range counts {
			v.add(key(0), c)
		}
		if err := v.check([]int32{int32(len(counts))}); err == nil {
			t.Errorf("counts %v for %d inputs: check passed", counts, len(counts))
		}
	}
}

func TestScaleSetOption(t *testing.T) {
	var o kstate.Options
	for _, s := range []string{"Group.Standbys=1", "Kafka.SessionTimeout=6s", "Kafka.LeaveGroupOnShutdown=true", "Group.AcceptableLag=500", "InstanceID=x"} {
		if err := setOption(&o, s); err != nil {
			t.Fatalf("%s: %v", s, err)
		}
	}
	if o.Group.Standbys != 1 || o.Kafka.SessionTimeout != 6*time.Second || !o.Kafka.LeaveGroupOnShutdown || o.Group.AcceptableLag != 500 || o.InstanceID != "x" {
		t.Errorf("options after the sets: %+v", o)
	}
	for s, want := range map[string]string{
		"Group.Standbys":       "want Path=value",
		"Group.Nope=1":         "no settable field Group.Nope",
		"Group=1":              "no settable field Group",
		"Group.Standbys.X=1":   "no settable field",
		"Group.Standbys=one":   "invalid syntax",
		"Kafka.Brokers=a":      "cannot be set",
		"Kafka.SessionTimeout": "want Path=value",
	} {
		if err := setOption(&o, s); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want an error with %q", s, err, want)
		}
	}
}

func TestScaleGoal(t *testing.T) {
	o := defaultScaleOptions()
	if g := o.goal("join"); g != 2*time.Second {
		t.Errorf("join: %v", g)
	}
	if g := o.goal("kill"); g != 11*time.Second {
		t.Errorf("kill, default session timeout: %v", g)
	}
	o.Sets = []string{"Kafka.SessionTimeout=6s"}
	if g := o.goal("kill"); g != 7*time.Second {
		t.Errorf("kill, session timeout 6s: %v", g)
	}
}

func TestScaleOptionsValidate(t *testing.T) {
	if o := defaultScaleOptions(); o.validate() != nil {
		t.Fatalf("defaults: %v", o.validate())
	}
	for name, change := range map[string]func(*scaleOptions){
		"keys":        func(o *scaleOptions) { o.Keys = 0 },
		"few keys":    func(o *scaleOptions) { o.Keys = 5 },
		"state bytes": func(o *scaleOptions) { o.StateBytes = 4 },
		"value bytes": func(o *scaleOptions) { o.ValueBytes = 8 },
		"rate":        func(o *scaleOptions) { o.Rate = 0 },
		"standbys":    func(o *scaleOptions) { o.Standbys = nil },
		"negative":    func(o *scaleOptions) { o.Standbys = []int{-1} },
		"windows":     func(o *scaleOptions) { o.MaxWindow = time.Second },
		"set":         func(o *scaleOptions) { o.Sets = []string{"Nope=1"} },
	} {
		o := defaultScaleOptions()
		change(&o)
		if err := o.validate(); err == nil {
			t.Errorf("%s: validate passed", name)
		}
	}
}

// TestFatCountValue: the state value holds the count and is as large as
// asked, its padding not compressible to nothing (not all zero).
func TestFatCountValue(t *testing.T) {
	v := fatValue(newTestRand(), 7, 512)
	if len(v) != 512 || v[7] != 7 || bytes.Count(v[8:], []byte{0}) > 64 {
		t.Errorf("fatValue: %d bytes, count byte %d, %d zero padding bytes", len(v), v[7], bytes.Count(v[8:], []byte{0}))
	}
	if v := fatValue(newTestRand(), 1, 3); len(v) != 8 {
		t.Errorf("fatValue of 3 bytes: %d bytes, want the count's 8", len(v))
	}
}

// TestBenchScaleSmoke runs `kstate bench scale` tiny (a few thousand keys,
// short windows, standbys 0 and 1) on the test binary's broker, the
// instances running a kstate binary built for the test: the four events
// run, every partition moves somewhere, the kill's gap includes the
// session timeout, and the exactly-once check passes. About 2 minutes:
// KSTATE_LONG=1 only.
func TestBenchScaleSmoke(t *testing.T) {
	if os.Getenv("KSTATE_LONG") == "" {
		t.Skip("long test: run with KSTATE_LONG=1 (make test-long)")
	}
	c := kafkatest.Start(t, kafkatest.RequireReal())
	exe := filepath.Join(t.TempDir(), "kstate")
	if out, err := exec.Command("go", "build", "-o", exe, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	o := defaultScaleOptions()
	o.Brokers, o.WorkerExe = c.Brokers(), exe
	o.Keys, o.Partitions, o.Rate, o.StateBytes = 4000, 3, 500, 256
	o.MinWindow, o.Settle, o.MaxWindow = 4*time.Second, 2*time.Second, time.Minute
	o.Sets = []string{"Kafka.SessionTimeout=6s"}
	o.JSON = filepath.Join(t.TempDir(), "scale.json")
	rep, table := runBenchReport[scaleReport](t, "bench scale", 5*time.Minute, func(ctx context.Context, out, progress io.Writer) error { return runScaleCmd(ctx, out, progress, o) }, o.JSON)
	if rep.ExactlyOnce != "ok" || rep.SteadyRows == 0 || rep.Preload.ChangelogBytes < int64(o.Keys*o.StateBytes) {
		t.Errorf("exactly-once %q, %d steady rows, changelog %d bytes", rep.ExactlyOnce, rep.SteadyRows, rep.Preload.ChangelogBytes)
	}
	if len(rep.Events) != 8 {
		t.Fatalf("%d events, want 4 per standbys value", len(rep.Events))
	}
	for _, ev := range rep.Events {
		switch {
		case ev.Moved == 0 || len(ev.Gaps) != o.Partitions:
			t.Errorf("%s %s: %d partitions moved of %d", ev.Kind, ev.Subject, ev.Moved, len(ev.Gaps))
		case ev.MaxGapMoved <= 0 || ev.MaxGapAll < ev.MaxGapMoved || ev.FirstMoved <= 0:
			t.Errorf("%s %s: gaps %v (moved) %v (all), first %v", ev.Kind, ev.Subject, ev.MaxGapMoved, ev.MaxGapAll, ev.FirstMoved)
		case ev.Kind == "kill" && ev.Standbys == 0 && ev.MaxGapMoved < 5*time.Second:
			// The group gives a killed static member's partitions
			// away after the session timeout (6s, minus the heartbeats'
			// slack).
			t.Errorf("kill: longest gap %v, shorter than the session timeout", ev.MaxGapMoved)
		case len(ev.Status) == 0:
			t.Errorf("%s %s: no instance status", ev.Kind, ev.Subject)
		}
	}
	for _, want := range []string{"longest gap, moved", "join i2", "stop i1", "kill i2", "exactly-once: ok"} {
		if !strings.Contains(table, want) {
			t.Errorf("table has no %q", want)
		}
	}
}

func newTestRand() *rand.Rand { return rand.New(rand.NewPCG(1, 2)) }

// seq returns 1..n.
func seq(n int) []int64 {
	s := make([]int64, n)
	for i := range s {
		s[i] = int64(i + 1)
	}
	return s
}

// TestScaleSettled: an event's window may end only when every partition
// is owned once, none restores, each has output since its owner got it and
// no warm-up waits to move.
func TestScaleSettled(t *testing.T) {
	t0 := time.Unix(1000, 0)
	ev, now := t0.Add(10*time.Second), t0.Add(30*time.Second)
	inst := func(name, raw string, assigned map[int32]time.Time) *instance {
		in := &instance{name: name}
		if err := json.Unmarshal([]byte(raw), &in.mu.status); err != nil {
			t.Fatal(err)
		}
		in.mu.raw, in.mu.assignedAt = json.RawMessage(raw), assigned
		return in
	}
	col := &gapCollector{}
	col.mu.arrivals = map[int32][]time.Time{
		0: {t0.Add(9 * time.Second), t0.Add(12 * time.Second)},
		1: {t0.Add(9 * time.Second), t0.Add(11 * time.Second), t0.Add(25 * time.Second)},
	}
	const (
		a = `{"state":"Running","partitions":[{"partition":0}]}`
		b = `{"state":"Running","partitions":[{"partition":1}]}`
	)
	early, late := map[int32]time.Time{0: t0, 1: t0}, map[int32]time.Time{1: t0.Add(20 * time.Second)}
	for _, c := range []struct {
		name string
		live []*instance
		want bool
	}{
		{"settled", []*instance{inst("i1", a, early), inst("i2", b, late)}, true},
		// Partition 1's new owner got it at 20 s: its output at 11 s was
		// its old owner's; the one at 25 s is its own.
		{"no output since the owner got it", []*instance{inst("i1", a, early), inst("i2", b, map[int32]time.Time{1: t0.Add(26 * time.Second)})}, false},
		{"unowned partition", []*instance{inst("i1", a, early)}, false},
		{"owned twice", []*instance{inst("i1", a, early), inst("i2", b, late), inst("i3", a, early)}, false},
		{"restoring", []*instance{inst("i1", a, early), inst("i2", `{"state":"Running","partitions":[{"partition":1,"restoring":true}]}`, late)}, false},
		{"not running", []*instance{inst("i1", a, early), inst("i2", `{"state":"Restoring","partitions":[{"partition":1}]}`, late)}, false},
		{"a warm-up to move", []*instance{inst("i1", a, early), inst("i2", `{"state":"Running","partitions":[{"partition":1}],"group":{"moves":[{"partition":0,"from":"i1","to":"i2"}]}}`, late)}, false},
		{"no moves reported", []*instance{inst("i1", a, early), inst("i2", `{"state":"Running","partitions":[{"partition":1}],"group":{"moves":[]}}`, late)}, true},
	} {
		r := &scaleRun{o: scaleOptions{Partitions: 2}, col: col, live: c.live}
		owners, ok := r.settledOwners()
		got := ok && r.resumed(owners, ev, now) && !r.moving()
		if got != c.want {
			t.Errorf("%s: settled %v, want %v (owners %v)", c.name, got, c.want, owners)
		}
	}
}

// TestScaleWarmedWhileJoining: the warm-ups an event's window sees are
// collected also while the joined instance owns nothing yet (the window
// cannot end then): they are the warm-ups of the join.
func TestScaleWarmedWhileJoining(t *testing.T) {
	st := func(raw string) *instance {
		in := &instance{name: "i1"}
		if err := json.Unmarshal([]byte(raw), &in.mu.status); err != nil {
			t.Fatal(err)
		}
		in.mu.raw = json.RawMessage(raw)
		return in
	}
	owner := st(`{"state":"Running","partitions":[{"partition":0},{"partition":1}],"group":{"moves":[{"partition":1,"from":"i1","to":"i2"}]}}`)
	joined := st(`{"state":"Running","partitions":[]}`)
	joined.name = "i2"
	r := &scaleRun{o: scaleOptions{Partitions: 2, MinWindow: time.Millisecond, Settle: time.Millisecond, MaxWindow: time.Millisecond},
		col: &gapCollector{}, live: []*instance{owner, joined}, warmed: map[int32]bool{}}
	r.col.mu.arrivals = map[int32][]time.Time{}
	if err := r.waitSettled(context.Background(), time.Now().Add(-time.Minute), joined); !errors.Is(err, errNotSettled) {
		t.Fatalf("waitSettled = %v, want errNotSettled (the joined instance owns nothing)", err)
	}
	if !r.warmed[1] || len(r.warmed) != 1 {
		t.Errorf("warmed %v, want partition 1 (listed in Status.Group.Moves)", r.warmed)
	}
}

// runBenchReport runs a bench command (run, with out and progress buffers)
// within timeout, logs its output, and returns the JSON report it wrote to
// path and its table (out); it fails t on an error (what names the command).
func runBenchReport[R any](t *testing.T, what string, timeout time.Duration, run func(ctx context.Context, out, progress io.Writer) error, path string) (R, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var out, progress bytes.Buffer
	if err := run(ctx, &out, &progress); err != nil {
		t.Fatalf("%s: %v\n%s\n%s", what, err, progress.String(), out.String())
	}
	t.Logf("\n%s%s", progress.String(), out.String())
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var rep R
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatal(err)
	}
	return rep, out.String()
}

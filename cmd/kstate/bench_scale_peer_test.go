package main

import (
	"context"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kstate/kstate/kafka/kafkatest"
)

// TestScalePeerFlowSettled: a peer's window ends by the output's flow:
// every partition has output since the event, and none paused longer than
// the flow gap over the last settle (up to now).
func TestScalePeerFlowSettled(t *testing.T) {
	t0 := time.Unix(1000, 0)
	ms := func(m int) time.Time { return t0.Add(time.Duration(m) * time.Millisecond) }
	// every returns arrivals every step ms in [from, to].
	every := func(from, to, step int) []time.Time {
		var ts []time.Time
		for m := from; m <= to; m += step {
			ts = append(ts, ms(m))
		}
		return ts
	}
	cat := func(parts ...[]time.Time) []time.Time {
		var ts []time.Time
		for _, p := range parts {
			ts = append(ts, p...)
		}
		return ts
	}
	const settle, gap = 5 * time.Second, time.Second
	at, now := ms(10_000), ms(30_000)
	steady := every(0, 30_000, 300)
	for _, c := range []struct {
		name     string
		arrivals map[int32][]time.Time
		now      time.Time
		want     bool
	}{
		{"flowing", map[int32][]time.Time{0: steady, 1: steady}, now, true},
		// The pause of the event (12 s) ended 13 s ago: settled.
		{"paused, resumed long ago", map[int32][]time.Time{0: steady, 1: cat(every(0, 9_900, 300), every(22_000, 30_000, 300))}, now, true},
		// It resumed 3 s ago: not yet settle (5 s) of flow.
		{"resumed within settle", map[int32][]time.Time{0: steady, 1: cat(every(0, 9_900, 300), every(27_000, 30_000, 300))}, now, false},
		{"no output since the event", map[int32][]time.Time{0: steady, 1: every(0, 9_900, 300)}, now, false},
		{"a partition without any output", map[int32][]time.Time{0: steady}, now, false},
		// Flowing, but a 1.5 s pause 2 s ago (a later rebalance).
		{"a pause within settle", map[int32][]time.Time{0: steady, 1: cat(every(0, 26_400, 300), every(27_900, 30_000, 300))}, now, false},
		// A 1.5 s pause 8 s ago is older than settle.
		{"a pause before settle", map[int32][]time.Time{0: steady, 1: cat(every(0, 20_400, 300), every(21_900, 30_000, 300))}, now, true},
		// Stopped 2 s ago: the tail counts as a pause.
		{"stopped", map[int32][]time.Time{0: steady, 1: every(0, 28_000, 300)}, now, false},
		// Settle cannot reach before the event.
		{"too soon after the event", map[int32][]time.Time{0: steady, 1: steady}, ms(14_000), false},
		// Arrivals after now (a later poll) do not count.
		{"arrivals after now", map[int32][]time.Time{0: steady, 1: cat(every(0, 9_900, 300), every(27_000, 40_000, 300))}, now, false},
	} {
		if got := flowSettled(c.arrivals, 2, at, c.now, settle, gap); got != c.want {
			t.Errorf("%s: flowSettled = %v, want %v", c.name, got, c.want)
		}
	}
}

// TestScalePeerConfig: the Kafka Streams settings follow kstate's options
// (defaults included), probing is raised to Kafka Streams' minimum with a
// note, and a --set with no Kafka Streams setting is refused by name.
func TestScalePeerConfig(t *testing.T) {
	o := defaultScaleOptions()
	o.Peer = peerKStreams
	ps, err := o.peerConfig()
	if err != nil {
		t.Fatal(err)
	}
	if ps.SessionTimeout != 10*time.Second || ps.TxnTimeout != 10*time.Second || ps.AcceptableLag != 10_000 || ps.Probing != time.Minute ||
		ps.Commit != 200*time.Millisecond || !ps.Leave || len(ps.Notes) != 0 {
		t.Errorf("defaults: %+v", ps)
	}
	o.Sets = []string{"Kafka.SessionTimeout=6s", "Kafka.TransactionTimeout=6s", "Group.AcceptableLag=5000", "Group.ProbingInterval=10s"}
	if ps, err = o.peerConfig(); err != nil {
		t.Fatal(err)
	}
	if ps.SessionTimeout != 6*time.Second || ps.TxnTimeout != 6*time.Second || ps.AcceptableLag != 5000 || ps.Probing != time.Minute || len(ps.Notes) != 1 ||
		!strings.Contains(ps.Notes[0], "Group.ProbingInterval 10s") {
		t.Errorf("matched: %+v", ps)
	}
	o.Sets = []string{"Group.ProbingInterval=2m"}
	if ps, err = o.peerConfig(); err != nil || ps.Probing != 2*time.Minute || len(ps.Notes) != 0 {
		t.Errorf("2m: %+v, %v", ps, err)
	}
	o.Sets = []string{"Batching.MaxWait=50ms"}
	if err := o.validate(); err == nil || !strings.Contains(err.Error(), "Batching.MaxWait=50ms") {
		t.Errorf("unmappable --set: %v", err)
	}
	o.Sets, o.Peer = nil, "flink"
	if err := o.validate(); err == nil || !strings.Contains(err.Error(), `--peer "flink"`) {
		t.Errorf("unknown peer: %v", err)
	}
	o.Peer = ""
	o.Sets = []string{"Batching.MaxWait=50ms"}
	if err := o.validate(); err != nil {
		t.Errorf("kstate's own path takes any option: %v", err)
	}
}

// TestScalePeerMoving: Kafka Streams' warm-ups are standby tasks beyond
// num.standby.replicas; the peer's window goes on while there are any.
func TestScalePeerMoving(t *testing.T) {
	inst := func(name, raw string, standbys int) *instance {
		in := &instance{name: name, standbys: standbys}
		in.mu.raw = json.RawMessage(raw)
		return in
	}
	for _, c := range []struct {
		name     string
		standbys int
		raws     []string
		want     bool
	}{
		{"alone", 0, []string{`{"kstreams":{"standby":[]}}`}, false},
		{"warm-ups, no standbys", 0, []string{`{"kstreams":{"standby":[]}}`, `{"kstreams":{"standby":[0,1]}}`}, true},
		{"no warm-ups", 0, []string{`{"kstreams":{"standby":[]}}`, `{"kstreams":{"standby":[]}}`}, false},
		{"one standby each", 1, []string{`{"kstreams":{"standby":[3,4,5]}}`, `{"kstreams":{"standby":[0,1,2]}}`}, false},
		{"standbys and warm-ups", 1, []string{`{"kstreams":{"standby":[3,4,5]}}`, `{"kstreams":{"standby":[0,1,2,3,4]}}`}, true},
		// Alone, an instance can have no standby: any standby task would
		// be one too many.
		{"alone with standbys 1", 1, []string{`{"kstreams":{"standby":[]}}`}, false},
		// Two instances hold at most one copy of a partition besides
		// its active task, whatever num.standby.replicas asks.
		{"standbys 2 on two instances", 2, []string{`{"kstreams":{"standby":[3,4,5]}}`, `{"kstreams":{"standby":[0,1,2]}}`}, false},
		{"standbys 2 on two instances, a warm-up", 2, []string{`{"kstreams":{"standby":[3,4,5]}}`, `{"kstreams":{"standby":[0,1,2,3]}}`}, true},
	} {
		r := &scaleRun{o: scaleOptions{Partitions: 6}}
		for i, raw := range c.raws {
			r.live = append(r.live, inst(string(rune('a'+i)), raw, c.standbys))
		}
		if got := r.peerMoving(c.standbys); got != c.want {
			t.Errorf("%s: peerMoving = %v, want %v", c.name, got, c.want)
		}
	}
}

// TestBenchScalePeerSmoke runs `kstate bench scale --peer kstreams` small
// (4,000 keys, 3 partitions, short windows, standbys 0 and 1) on the test
// binary's broker: the Kafka Streams peer's jar is built (mvn, cached),
// the four events run with its instances, every event moves partitions,
// and the exactly-once check passes on its outputs. About 4-9 minutes
// (the first build 1-2 more): KSTATE_LONG=1 only, and java and mvn on
// PATH.
func TestBenchScalePeerSmoke(t *testing.T) {
	if os.Getenv("KSTATE_LONG") == "" {
		t.Skip("long test: run with KSTATE_LONG=1 (make test-long)")
	}
	for _, tool := range []string{"java", "mvn"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("no %s on PATH: the Kafka Streams peer cannot be built", tool)
		}
	}
	c := kafkatest.Start(t, kafkatest.RequireReal())
	o := defaultScaleOptions()
	o.Brokers, o.Peer = c.Brokers(), peerKStreams
	o.Keys, o.Partitions, o.Rate, o.StateBytes = 4000, 3, 500, 256
	o.MinWindow, o.Settle, o.MaxWindow = 4*time.Second, 3*time.Second, 3*time.Minute
	o.Sets = []string{"Kafka.SessionTimeout=6s"}
	o.JSON = filepath.Join(t.TempDir(), "scale.json")
	rep, table := runBenchReport[scaleReport](t, "bench scale --peer kstreams", 15*time.Minute, func(ctx context.Context, out, progress io.Writer) error { return runScaleCmd(ctx, out, progress, o) }, o.JSON)
	if rep.ExactlyOnce != "ok" || rep.SteadyRows == 0 || rep.Peer.Name != peerKStreams || rep.Peer.Settings.SessionTimeout != 6*time.Second {
		t.Errorf("exactly-once %q, %d steady rows, peer %+v", rep.ExactlyOnce, rep.SteadyRows, rep.Peer)
	}
	if len(rep.Events) != 8 {
		t.Fatalf("%d events, want 4 per standbys value", len(rep.Events))
	}
	for _, ev := range rep.Events {
		if ev.Moved == 0 || ev.MaxGapMoved <= 0 || len(ev.Status) == 0 {
			t.Errorf("%s %s: %d partitions moved, gap %v, %d statuses", ev.Kind, ev.Subject, ev.Moved, ev.MaxGapMoved, len(ev.Status))
		}
	}
	if !strings.Contains(table, "peer kstreams") || !strings.Contains(table, "exactly-once: ok") {
		t.Errorf("table:\n%s", table)
	}
}

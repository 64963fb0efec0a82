package main

import (
	"encoding/binary"
	"errors"
	"log/slog"
	"math"
	"slices"
	"testing"
	"time"

	"github.com/kstate/kstate/kstatetest"
	"github.com/kstate/kstate/state"
)

// The heavy workload's state and timer on the real runtime (kstatetest):
// per key the list of the last 5 send times, the map's count/sum/min/max
// and one timer at the processing time + 1 h, moved on every call; the
// output is count's (count 1..n once each, with the row's send time),
// also across a crash between produce and commit; the timer fires only
// after an hour without input, clears the key's state and emits nothing,
// which is the semantics the Kafka Streams and Flink peers share.
func TestHeavyProcessor(t *testing.T) {
	o, err := parseFlags([]string{"-brokers", "b:1", "-group", "g", "-state", t.TempDir(), "-processor", "heavy"})
	if err != nil {
		t.Fatal(err)
	}
	top, _, err := config(o, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	d := kstatetest.New(t, top, kstatetest.Partitions(2))

	sent := map[string][]int64{}
	input := func(key string, ns ...int64) {
		for _, s := range ns {
			v := make([]byte, 100)
			binary.BigEndian.PutUint64(v, uint64(s))
			d.InputRecord([]byte(key), v, d.Now())
			sent[key] = append(sent[key], s)
		}
	}
	counts := map[string]int64{}
	checkOutputs := func(want int) {
		t.Helper()
		outs := d.Outputs()
		if len(outs) != want {
			t.Fatalf("%d outputs, want %d", len(outs), want)
		}
		for _, out := range outs {
			k := string(out.Key)
			c, s := int64(binary.BigEndian.Uint64(out.Bytes)), int64(binary.BigEndian.Uint64(out.Bytes[8:]))
			if c != counts[k]+1 || s != sent[k][c-1] {
				t.Fatalf("key %s: output count %d send time %d, want count %d send time %d", k, c, s, counts[k]+1, sent[k][counts[k]])
			}
			counts[k] = c
		}
	}
	checkState := func(key string) {
		t.Helper()
		all := sent[key]
		wantList := all[max(0, len(all)-heavyHistory):]
		if got := kstatetest.ListOf(d, key, "recent", state.Int64()); !slices.Equal(got, wantList) {
			t.Errorf("key %s: recent %v, want %v", key, got, wantList)
		}
		var sum int64
		for _, s := range all {
			sum += s
		}
		want := map[string]int64{"count": int64(len(all)), "sum": sum, "min": slices.Min(all), "max": slices.Max(all)}
		got := map[string]int64{}
		for _, e := range kstatetest.MapOf(d, key, "agg", state.String(), state.Int64()) {
			got[e.Key] = e.Value
		}
		if len(got) != 4 || got["count"] != want["count"] || got["sum"] != want["sum"] || got["min"] != want["min"] || got["max"] != want["max"] {
			t.Errorf("key %s: agg %v, want %v", key, got, want)
		}
	}

	input("a", 10, -3, 7)
	input("b", math.MaxInt64-1)
	d.MustRunBatch()
	checkOutputs(4)
	checkState("a")
	checkState("b")
	deadline := d.Now().Add(heavyIdle).UnixMilli()
	if got := d.Timers("a"); !slices.Equal(got, []int64{deadline}) {
		t.Fatalf("timers of a: %v, want [%d] (now + %v)", got, deadline, heavyIdle)
	}

	// Past the list's length, moving the timer; a crash between produce
	// and commit changes nothing.
	d.AdvanceClock(30 * time.Minute)
	input("a", 4, 12, 9, 1)
	d.Crash(kstatetest.AfterProduce)
	if err := d.RunBatch(); !errors.Is(err, kstatetest.ErrCrashed) {
		t.Fatalf("RunBatch with a crash: %v", err)
	}
	d.Restart()
	d.MustRunBatch()
	checkOutputs(4)
	checkState("a")
	checkState("b")
	deadline = d.Now().Add(heavyIdle).UnixMilli()
	if got := d.Timers("a"); !slices.Equal(got, []int64{deadline}) {
		t.Fatalf("timers of a after the move: %v, want [%d]", got, deadline)
	}

	// b's timer (set 30 min before a's) fires first: b's state goes,
	// nothing is emitted; a's stays until its own hour is over.
	d.AdvanceClock(30*time.Minute + time.Second)
	d.MustRunBatch()
	checkOutputs(0)
	if l, m, tm := kstatetest.ListOf(d, "b", "recent", state.Int64()), kstatetest.MapOf(d, "b", "agg", state.String(), state.Int64()), d.Timers("b"); l != nil || m != nil || tm != nil {
		t.Fatalf("b after its timer: list %v, map %v, timers %v; want all empty", l, m, tm)
	}
	checkState("a")
	d.AdvanceClock(30 * time.Minute)
	d.MustRunBatch()
	checkOutputs(0)
	if l, m, tm := kstatetest.ListOf(d, "a", "recent", state.Int64()), kstatetest.MapOf(d, "a", "agg", state.String(), state.Int64()), d.Timers("a"); l != nil || m != nil || tm != nil {
		t.Fatalf("a after its timer: list %v, map %v, timers %v; want all empty", l, m, tm)
	}
	// A key starts over after its timer.
	sent["a"], counts["a"] = nil, 0
	input("a", 5)
	d.MustRunBatch()
	checkOutputs(1)
	checkState("a")
}

func TestProcessorFlag(t *testing.T) {
	if _, err := parseFlags([]string{"-brokers", "b:1", "-group", "g", "-state", "s", "-processor", "heavyy"}); err == nil {
		t.Fatal("-processor heavyy accepted")
	}
	for _, p := range []string{"count", "heavy"} {
		if _, err := parseFlags([]string{"-brokers", "b:1", "-group", "g", "-state", "s", "-processor", p}); err != nil {
			t.Errorf("-processor %s: %v", p, err)
		}
	}
}

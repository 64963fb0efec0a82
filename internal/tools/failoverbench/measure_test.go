package main

import (
	"strings"
	"testing"
	"time"
)

func at(ms ...int) []time.Time {
	base := time.Unix(1000, 0)
	ts := make([]time.Time, len(ms))
	for i, m := range ms {
		ts[i] = base.Add(time.Duration(m) * time.Millisecond)
	}
	return ts
}

func TestPauseOf(t *testing.T) {
	base := time.Unix(1000, 0)
	ms := func(n int) time.Time { return base.Add(time.Duration(n) * time.Millisecond) }
	for _, tc := range []struct {
		name       string
		arrivals   []time.Time
		event, end int
		want       pause
		ok         bool
	}{
		// Outputs every 100 ms until 1000, the event at 1050, nothing
		// until 7000, then every 100 ms again: the gap spanning the
		// event.
		{"spans the event", at(800, 900, 1000, 7000, 7100, 7200), 1050, 8000, pause{Gap: 6000 * time.Millisecond, Resume: 5950 * time.Millisecond, Paused: 6000 * time.Millisecond}, true},
		// The gap that spans the event is short; a later one (a second
		// rebalance) is the longest.
		{"a later gap", at(900, 1000, 1100, 1200, 4200, 4300), 1050, 5000, pause{Gap: 3000 * time.Millisecond, Resume: 3150 * time.Millisecond, Paused: 3000 * time.Millisecond}, true},
		// A gap that ended before the event does not count.
		{"earlier gap ignored", at(0, 900, 1000, 1100, 1200), 1050, 5000, pause{Gap: 100 * time.Millisecond, Resume: 50 * time.Millisecond}, true},
		// Nothing after the event yet: not resumed.
		{"not resumed", at(900, 1000), 1050, 5000, pause{}, false},
		// A partition that moves away and back pauses twice: both
		// count in Paused.
		{"twice", at(900, 1000, 7000, 7100, 9100, 9200), 1050, 10000, pause{Gap: 6000 * time.Millisecond, Resume: 5950 * time.Millisecond, Paused: 8000 * time.Millisecond}, true},
		// Outputs after end are not looked at.
		{"after end", at(1000, 9000), 1050, 5000, pause{}, false},
		// The partition's first output ever comes after the event.
		{"first output", at(3000, 3100), 1050, 5000, pause{Gap: 100 * time.Millisecond, Resume: 2050 * time.Millisecond}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := pauseOf(tc.arrivals, ms(tc.event), ms(tc.end))
			if got != tc.want || ok != tc.ok {
				t.Fatalf("pauseOf = %+v, %v; want %+v, %v", got, ok, tc.want, tc.ok)
			}
		})
	}
}

func TestEventResult(t *testing.T) {
	s := time.Second
	r := eventResult{Pauses: []pause{{Gap: s / 10, Resume: s / 20}, {Gap: 7 * s, Resume: 6 * s, Paused: 7 * s}, {Gap: 2 * s, Resume: 9 * s, Paused: 9 * s}, {Gap: s / 2, Resume: s}},
		Stopped: []int32{1, 2}}
	if g, w := r.StoppedGap(), 7*s; g != w {
		t.Errorf("StoppedGap = %v, want %v", g, w)
	}
	if g, w := r.StoppedResume(), 9*s; g != w {
		t.Errorf("StoppedResume = %v, want %v (the last stopped partition to resume)", g, w)
	}
	if g, w := r.StoppedPaused(), 9*s; g != w {
		t.Errorf("StoppedPaused = %v, want %v", g, w)
	}
	if g, w := r.OtherGap(), s/2; g != w {
		t.Errorf("OtherGap = %v, want %v", g, w)
	}
}

func TestStatsOf(t *testing.T) {
	s := time.Second
	if g := statsOf([]time.Duration{3 * s, s, 2 * s}); g != (stats{Median: 2 * s, Min: s, Max: 3 * s}) {
		t.Errorf("odd: %+v", g)
	}
	if g := statsOf([]time.Duration{4 * s, s, 2 * s, 3 * s}); g != (stats{Median: 2500 * time.Millisecond, Min: s, Max: 4 * s}) {
		t.Errorf("even: %+v", g)
	}
	if g, w := statsOf([]time.Duration{1500 * time.Millisecond}).String(), "1.5 s"; g != w {
		t.Errorf("String = %q, want %q", g, w)
	}
	if g, w := statsOf([]time.Duration{s, 3 * s}).String(), "2.0 s [1.0–3.0]"; g != w {
		t.Errorf("String = %q, want %q", g, w)
	}
}

func TestSeqChecker(t *testing.T) {
	var ok seqChecker
	for _, kv := range [][2]string{{"a", "1"}, {"b", "1"}, {"a", "2"}, {"a", "3"}} {
		ok.add(kv[0], kv[1])
	}
	if err := ok.check(map[string]int64{"a": 3, "b": 1}); err != nil {
		t.Fatalf("exact outputs: %v", err)
	}
	for _, tc := range []struct {
		name string
		outs [][2]string
		sent map[string]int64
		want string
	}{
		{"duplicate", [][2]string{{"a", "1"}, {"a", "2"}, {"a", "2"}}, map[string]int64{"a": 2}, `output count 2 after 2`},
		{"skipped", [][2]string{{"a", "1"}, {"a", "3"}}, map[string]int64{"a": 3}, `output count 3 after 1`},
		{"missing tail", [][2]string{{"a", "1"}}, map[string]int64{"a": 2}, `2 inputs, last output count 1`},
		{"missing key", nil, map[string]int64{"b": 1}, `key "b": 1 inputs, last output count 0`},
		{"not a count", [][2]string{{"a", "x"}}, map[string]int64{}, `is not a count`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var c seqChecker
			for _, kv := range tc.outs {
				c.add(kv[0], kv[1])
			}
			err := c.check(tc.sent)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("check = %v, want an error containing %q", err, tc.want)
			}
		})
	}
}

func TestComplete(t *testing.T) {
	t0 := time.Unix(1000, 0)
	after := t0.Add(time.Second)
	mk := func(owned map[int32]time.Time, last map[int32]time.Time) *member {
		return &member{owned: owned, last: last}
	}
	full := []*member{
		mk(map[int32]time.Time{0: t0, 1: t0}, map[int32]time.Time{0: after, 1: after}),
		mk(map[int32]time.Time{2: t0}, map[int32]time.Time{2: after}),
	}
	if !complete(full, 3, t0) {
		t.Fatal("every partition held once, balanced, consumed after the event: want complete")
	}
	for _, tc := range []struct {
		name string
		ms   []*member
	}{
		{"a partition unowned", []*member{mk(map[int32]time.Time{0: t0, 1: t0}, map[int32]time.Time{0: after, 1: after}), mk(nil, nil)}},
		{"owned twice", []*member{mk(map[int32]time.Time{0: t0, 1: t0}, map[int32]time.Time{0: after, 1: after}), mk(map[int32]time.Time{1: t0, 2: t0}, map[int32]time.Time{1: after, 2: after})}},
		{"unbalanced", []*member{mk(map[int32]time.Time{0: t0, 1: t0, 2: t0}, map[int32]time.Time{0: after, 1: after, 2: after}), mk(map[int32]time.Time{}, nil)}},
		{"not consumed since the event", []*member{mk(map[int32]time.Time{0: t0, 1: t0}, map[int32]time.Time{0: after, 1: t0}), mk(map[int32]time.Time{2: t0}, map[int32]time.Time{2: after})}},
		{"not consumed since assigned", []*member{mk(map[int32]time.Time{0: t0, 1: t0}, map[int32]time.Time{0: after, 1: after}), mk(map[int32]time.Time{2: after.Add(time.Second)}, map[int32]time.Time{2: after})}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if complete(tc.ms, 3, t0) {
				t.Fatal("complete = true, want false")
			}
		})
	}
}

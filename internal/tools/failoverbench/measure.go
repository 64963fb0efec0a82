package main

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"
)

// pause is what one event did to one partition's committed output: the
// longest gap between two consecutive committed outputs of the partition
// that ends after the event (the gap that spans the event, or a later one
// while the group settles), and how long after the event that gap ended.
type pause struct {
	Gap    time.Duration // longest gap ending after the event
	Resume time.Duration // event → the output that ended that gap
	// Paused sums the gaps longer than movedGap ending after the event:
	// a partition that moves away and back pauses twice.
	Paused time.Duration
}

// pauseOf measures one partition's pause around event from the arrival
// times of its committed outputs (sorted), counting gaps that end in
// (event, end]. ok is false when no output arrived in (event, end]: the
// partition has not resumed.
func pauseOf(arrivals []time.Time, event, end time.Time) (p pause, ok bool) {
	i := sort.Search(len(arrivals), func(i int) bool { return arrivals[i].After(event) })
	for ; i < len(arrivals) && !arrivals[i].After(end); i++ {
		ok = true
		if i == 0 {
			continue // no earlier output: the partition's first ever
		}
		gap := arrivals[i].Sub(arrivals[i-1])
		if gap > movedGap {
			p.Paused += gap
		}
		if gap > p.Gap {
			p.Gap, p.Resume = gap, arrivals[i].Sub(event)
		}
	}
	return p, ok
}

// eventResult is one event's measurement over every partition.
type eventResult struct {
	Session time.Duration
	Event   string
	// Pauses per partition (index: partition).
	Pauses []pause
	// Stopped are the partitions the instance the event was done to held
	// before it; the others are the surviving instance's.
	Stopped []int32
}

// StoppedGap is the longest output gap of the stopped instance's
// partitions.
func (r eventResult) StoppedGap() time.Duration {
	var m time.Duration
	for _, p := range r.Stopped {
		m = max(m, r.Pauses[p].Gap)
	}
	return m
}

// StoppedResume is the time from the event to the first committed output
// of the last of the stopped instance's partitions to resume (the output
// that ended its longest gap).
func (r eventResult) StoppedResume() time.Duration {
	var m time.Duration
	for _, p := range r.Stopped {
		m = max(m, r.Pauses[p].Resume)
	}
	return m
}

// StoppedPaused is the longest time one of the stopped instance's
// partitions spent in gaps longer than movedGap.
func (r eventResult) StoppedPaused() time.Duration {
	var m time.Duration
	for _, p := range r.Stopped {
		m = max(m, r.Pauses[p].Paused)
	}
	return m
}

// OtherGap is the longest output gap of the surviving instance's
// partitions: what the rebalance cost the partitions that did not move.
func (r eventResult) OtherGap() time.Duration {
	var m time.Duration
	for p, ps := range r.Pauses {
		if !slices.Contains(r.Stopped, int32(p)) {
			m = max(m, ps.Gap)
		}
	}
	return m
}

// movedGap is the gap above which StoppedPaused counts a partition as
// paused: steady input gives every partition an output at least every few
// hundred milliseconds (a batch), so a longer gap is an event's.
const movedGap = time.Second

// stats is the median and range of some durations.
type stats struct{ Median, Min, Max time.Duration }

func statsOf(ds []time.Duration) stats {
	if len(ds) == 0 {
		return stats{}
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	med := s[len(s)/2]
	if len(s)%2 == 0 {
		med = (s[len(s)/2-1] + s[len(s)/2]) / 2
	}
	return stats{Median: med, Min: s[0], Max: s[len(s)-1]}
}

func (s stats) String() string {
	r := func(d time.Duration) string { return fmt.Sprintf("%.1f", d.Seconds()) }
	if s.Min == s.Max {
		return r(s.Median) + " s"
	}
	return fmt.Sprintf("%s s [%s–%s]", r(s.Median), r(s.Min), r(s.Max))
}

// seqChecker checks that the outputs of each key are its running count,
// 1, 2, 3, ... in order: a skipped count is a lost input, a repeated one a
// duplicate.
type seqChecker struct {
	last map[string]int64
	errs []string
}

func (c *seqChecker) add(key string, value string) {
	if c.last == nil {
		c.last = make(map[string]int64)
	}
	var n int64
	if _, err := fmt.Sscan(value, &n); err != nil {
		c.fail("key %q: output %q is not a count", key, value)
		return
	}
	if want := c.last[key] + 1; n != want {
		c.fail("key %q: output count %d after %d (want %d)", key, n, c.last[key], want)
	}
	c.last[key] = max(c.last[key], n)
}

func (c *seqChecker) fail(format string, args ...any) {
	if len(c.errs) < 20 {
		c.errs = append(c.errs, fmt.Sprintf(format, args...))
	}
}

// check compares the last count of every key with the inputs sent.
func (c *seqChecker) check(sent map[string]int64) error {
	errs := slices.Clone(c.errs)
	for k, n := range sent {
		if c.last[k] != n {
			errs = append(errs, fmt.Sprintf("key %q: %d inputs, last output count %d", k, n, c.last[k]))
		}
	}
	if len(errs) > 0 {
		slices.Sort(errs)
		return fmt.Errorf("outputs not exactly once:\n  %s", strings.Join(errs, "\n  "))
	}
	return nil
}

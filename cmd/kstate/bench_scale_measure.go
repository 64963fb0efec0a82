package main

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/kstate/kstate/internal/kafka"
)

// The measurements of `kstate bench scale`: when committed outputs arrive
// per partition (gaps), and whether every key's counts arrived exactly once.

// gapCollector reads the output topic read_committed, as a downstream
// consumer does, records per partition the times outputs arrived (one per
// poll) and feeds every output to a verifier.
type gapCollector struct {
	s        *kafka.Session
	assigned chan struct{}
	done     chan struct{}
	err      error

	mu struct {
		sync.Mutex
		arrivals map[int32][]time.Time
		n        int
		v        *verifier
	}
}

func newGapCollector(brokers []string, group, topic string, keys int) (*gapCollector, error) {
	c := &gapCollector{assigned: make(chan struct{}), done: make(chan struct{})}
	c.mu.arrivals = make(map[int32][]time.Time)
	c.mu.v = newVerifier(keys)
	var once sync.Once
	s, err := kafka.NewSession(kafka.SessionConfig{
		Brokers: brokers, GroupID: group, Topics: []string{topic},
		FetchMaxWait: 50 * time.Millisecond,
		OnAssigned: func(context.Context, []kafka.Partition) {
			once.Do(func() { close(c.assigned) })
		},
	})
	if err != nil {
		return nil, err
	}
	c.s = s
	return c, nil
}

func (c *gapCollector) run(ctx context.Context) {
	defer close(c.done)
	var codec outCodec
	var buf []kafka.Record
	for {
		recs, err := c.s.PollInto(ctx, 0, buf)
		if err != nil {
			if ctx.Err() == nil && !errors.Is(err, kafka.ErrClosed) {
				c.err = err
			}
			return
		}
		buf = recs
		if len(recs) == 0 {
			continue
		}
		now := time.Now()
		c.mu.Lock()
		c.mu.n += len(recs)
		for i := range recs {
			p := recs[i].Partition
			if a := c.mu.arrivals[p]; len(a) == 0 || !a[len(a)-1].Equal(now) {
				c.mu.arrivals[p] = append(a, now)
			}
			o, err := codec.Deserialize(recs[i].Value)
			if err != nil {
				c.mu.v.decodeErrs++
				continue
			}
			c.mu.v.add(string(recs[i].Key), o.Count)
		}
		c.mu.Unlock()
	}
}

// count returns the outputs read so far.
func (c *gapCollector) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.mu.n
}

// gaps returns every partition's gaps for an event at ev whose window
// ends at end.
func (c *gapCollector) gaps(partitions int, ev, end time.Time) []partGap {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]partGap, partitions)
	for p := range partitions {
		out[p] = gapsOf(c.mu.arrivals[int32(p)], ev, end)
		out[p].Partition = int32(p)
	}
	return out
}

// firstAfter returns the time from ev to partition p's first output
// after t (and not after end), -1 if none.
func (c *gapCollector) firstAfter(p int32, t, end, ev time.Time) time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, a := range c.mu.arrivals[p] {
		if a.After(end) {
			break
		}
		if a.After(t) {
			return a.Sub(ev)
		}
	}
	return -1
}

// waitFor waits until n outputs arrived.
func (c *gapCollector) waitFor(ctx context.Context, n int, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for {
		have := c.count()
		if have >= n {
			return nil
		}
		select {
		case <-c.done:
			return fmt.Errorf("bench scale: output consumer stopped: %v", c.err)
		case <-ctx.Done():
			return fmt.Errorf("bench scale: waiting for %d outputs, have %d: %w", n, have, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("bench scale: %d outputs after %v, want %d", have, limit, n)
		}
	}
}

func (c *gapCollector) close() { _ = c.s.Close() }

// partGap is one partition's outputs around an event.
type partGap struct {
	Partition int32 `json:"partition"`
	// MaxGap is the longest time between two consecutive arrivals of its
	// outputs from the last one before the event to the end of the
	// window; Open when that is the time from its last output to the end
	// of the window (the partition did not output again, or not for that
	// long).
	MaxGap time.Duration `json:"max_gap_ns"`
	Open   bool          `json:"open,omitempty"`
	// First is the time from the event to the partition's first output
	// after it, for a moved partition its first output after its new
	// owner's status listed it (the old owner's last outputs may arrive
	// after the event); -1 when none arrived in the window.
	First time.Duration `json:"first_output_ns"`
	// Before is the longest gap within the 10 s before the event: the
	// steady-state gap (commit interval, polls) to compare MaxGap with.
	Before time.Duration `json:"before_gap_ns"`

	// Set by the scenario from the instances' reports.
	From           string        `json:"from,omitempty"` // owner before the event
	To             string        `json:"to,omitempty"`   // owner at the end of the window
	Moved          bool          `json:"moved,omitempty"`
	RestoreRecords int64         `json:"restore_records,omitempty"` // reported by To for the partition
	RestoreTime    time.Duration `json:"restore_time_ns,omitempty"`
	// Warmed: a warm-up copy of it was listed as moving once caught up
	// (Status.Group.Moves) during the window.
	Warmed bool `json:"warmed,omitempty"`
}

// beforeSpan is how far before an event partGap.Before looks.
const beforeSpan = 10 * time.Second

// gapsOf computes a partition's gaps around an event at ev, its window
// ending at end, from the sorted arrival times of its outputs.
func gapsOf(arrivals []time.Time, ev, end time.Time) partGap {
	g := partGap{First: -1}
	prev := time.Time{}
	for _, a := range arrivals {
		switch {
		case a.After(end):
			// outside the window
		case !a.After(ev):
			if !prev.IsZero() && !prev.Before(ev.Add(-beforeSpan)) {
				g.Before = max(g.Before, a.Sub(prev))
			}
			prev = a
		default:
			if g.First < 0 {
				g.First = a.Sub(ev)
			}
			if prev.IsZero() {
				prev = ev // no output before the event: count from it
			}
			g.MaxGap = max(g.MaxGap, a.Sub(prev))
			prev = a
		}
	}
	if prev.IsZero() {
		prev = ev
	}
	if tail := end.Sub(prev); tail > g.MaxGap {
		g.MaxGap, g.Open = tail, true
	}
	return g
}

// verifier checks exactly-once on the outputs: every key's outputs carry
// its counts 1..n, each exactly once, n being the input rows of the key.
type verifier struct {
	n          []int32  // outputs per key
	seen       []uint64 // bit c-1 set: count c arrived (c <= 64)
	high       map[int]map[int64]bool
	dups       int // outputs whose count had arrived already
	unknown    int // outputs of keys outside 0..keys-1
	decodeErrs int
}

func newVerifier(keys int) *verifier {
	return &verifier{n: make([]int32, keys), seen: make([]uint64, keys), high: map[int]map[int64]bool{}}
}

// keyIndex parses a key written by keyBytes.
func keyIndex(key string) (int, bool) {
	if len(key) < 2 || key[0] != 'k' {
		return 0, false
	}
	k, err := strconv.Atoi(key[1:])
	return k, err == nil && k >= 0
}

func (v *verifier) add(key string, count int64) {
	k, ok := keyIndex(key)
	if !ok || k >= len(v.n) || count < 1 {
		v.unknown++
		return
	}
	v.n[k]++
	if count <= 64 {
		bit := uint64(1) << (count - 1)
		if v.seen[k]&bit != 0 {
			v.dups++
		}
		v.seen[k] |= bit
		return
	}
	m := v.high[k]
	if m == nil {
		m = map[int64]bool{}
		v.high[k] = m
	}
	if m[count] {
		v.dups++
	}
	m[count] = true
}

// check compares the outputs with the input rows per key.
func (v *verifier) check(perKey []int32) error {
	var errs []error
	if v.decodeErrs > 0 {
		errs = append(errs, fmt.Errorf("%d undecodable outputs", v.decodeErrs))
	}
	if v.unknown > 0 {
		errs = append(errs, fmt.Errorf("%d outputs of unknown keys or counts", v.unknown))
	}
	if v.dups > 0 {
		errs = append(errs, fmt.Errorf("%d duplicate outputs (a key's count arrived twice)", v.dups))
	}
	var bad []string
	nbad := 0
	for k, want := range perKey {
		ok := v.n[k] == want
		if ok {
			low := min(want, 64)
			ok = v.seen[k] == uint64(1)<<low-1
			if want > 64 {
				ok = ok && len(v.high[k]) == int(want-64)
				for c := range v.high[k] {
					ok = ok && c <= int64(want)
				}
			}
		}
		if !ok {
			nbad++
			if len(bad) < 5 {
				bad = append(bad, fmt.Sprintf("%s: %d outputs for %d inputs", keyBytes(k), v.n[k], want))
			}
		}
	}
	if nbad > 0 {
		errs = append(errs, fmt.Errorf("%d of %d keys do not have their counts 1..n exactly once (%v)", nbad, len(perKey), bad))
	}
	if len(errs) > 0 {
		return fmt.Errorf("bench scale: exactly-once check: %w", errors.Join(errs...))
	}
	return nil
}

// verify checks the outputs read so far against perKey.
func (c *gapCollector) verify(perKey []int32) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.mu.v.check(perKey)
}

// maxGap returns the longest gap over gs (moved partitions only, when
// moved is set) and whether it is open.
func maxGap(gs []partGap, moved bool) (d time.Duration, open bool) {
	for _, g := range gs {
		if moved && !g.Moved {
			continue
		}
		if g.MaxGap > d {
			d, open = g.MaxGap, g.Open
		}
	}
	return d, open
}

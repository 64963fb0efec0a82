package enginetest

import (
	"context"
	"sync"
	"time"
)

// Clock is a manual engine.Clock: time moves only by Advance, and Sleep
// returns when Advance passes its deadline (or its ctx ends).
type Clock struct {
	mu       sync.Mutex
	now      time.Time
	elapsed  time.Duration
	sleepers []sleeper
	sleeps   int           // Sleep calls so far
	slept    chan struct{} // closed (and replaced) by each Sleep call
}

type sleeper struct {
	until time.Duration
	wake  chan struct{}
}

// NewClock returns a clock at t.
func NewClock(t time.Time) *Clock { return &Clock{now: t} }

func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *Clock) Elapsed() time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.elapsed
}

func (c *Clock) Sleep(ctx context.Context, d time.Duration) error {
	c.mu.Lock()
	s := sleeper{until: c.elapsed + d, wake: make(chan struct{})}
	c.sleepers = append(c.sleepers, s)
	c.sleeps++
	if c.slept != nil {
		close(c.slept)
		c.slept = nil
	}
	c.mu.Unlock()
	select {
	case <-s.wake:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Advance moves the clock by d and wakes the sleepers it passes.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	c.elapsed += d
	keep := c.sleepers[:0]
	for _, s := range c.sleepers {
		if s.until <= c.elapsed {
			close(s.wake)
		} else {
			keep = append(keep, s)
		}
	}
	c.sleepers = keep
}

// Sleeps is the number of Sleep calls so far.
func (c *Clock) Sleeps() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.sleeps
}

// SleepCalled returns a channel closed by the next Sleep call.
func (c *Clock) SleepCalled() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.slept == nil {
		c.slept = make(chan struct{})
	}
	return c.slept
}

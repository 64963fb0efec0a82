package testprocs

import (
	"sync/atomic"
	"time"
)

// Clock is a manual clock for Options.Observability.Clock: time moves only by Set/Add.
type Clock struct{ ms atomic.Int64 }

// NewClock returns a clock at ms since the epoch.
func NewClock(ms int64) *Clock {
	c := &Clock{}
	c.ms.Store(ms)
	return c
}

// Now is the Options.Observability.Clock function.
func (c *Clock) Now() time.Time { return time.UnixMilli(c.ms.Load()) }

// Set moves the clock to ms.
func (c *Clock) Set(ms int64) { c.ms.Store(ms) }

// Add moves the clock by d.
func (c *Clock) Add(d time.Duration) { c.ms.Add(d.Milliseconds()) }

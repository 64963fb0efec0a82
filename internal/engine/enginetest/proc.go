package enginetest

import (
	"errors"
	"fmt"
	"iter"
	"strconv"
	"strings"

	"github.com/kstate/kstate/processor"
	"github.com/kstate/kstate/state"
)

// Counter is the scenarios' processor: one ValueState[int64] "count" per
// key (so Env can read the shard's state back), emitting the new count for
// every row. A row "boom" makes HandleInputRows fail. With timers (any
// time mode but NoTime) every row registers a timer — ProcessingTime: at
// batch time + 1s; EventTime: at the row's event time ("value@ms") — and a
// fired timer emits "timer@<expiry>". Initial state rows add to the count.
type Counter struct {
	mode processor.TimeMode
	// block, when set, is called with the key at the start of
	// HandleInputRows, and with "init/p<partition>" at the start of Init,
	// and may block there (a stuck processor); trace reports the blocked
	// calls.
	block func(key string) bool
	trace func(format string, args ...any)
	// traceRows makes every HandleInputRows call trace its key and rows
	// (the scenarios with several input topics).
	traceRows bool

	h     processor.Handle
	count state.ValueState[int64]
}

// NewCounter returns a Counter factory for mode.
func NewCounter(mode processor.TimeMode) func() processor.StatefulProcessor[string, string, string] {
	return func() processor.StatefulProcessor[string, string, string] { return &Counter{mode: mode} }
}

func (c *Counter) Init(h processor.Handle) (err error) {
	c.h = h
	// "block i1 init/p0" makes partition 0's Init block.
	if key := fmt.Sprintf("init/p%d", h.QueryInfo().Partition); c.block != nil && c.block(key) && c.trace != nil {
		c.trace("Init returned after blocking")
	}
	c.count, err = processor.NewValueState(h, "count", state.Int64())
	return err
}

func (c *Counter) HandleInitialState(_ string, start int64, _ processor.TimerValues) error {
	n, _, err := c.count.Get()
	if err != nil {
		return err
	}
	return c.count.Update(n + start)
}

func (c *Counter) HandleInputRows(key string, rows iter.Seq[string], tv processor.TimerValues, out processor.Emitter[string]) error {
	if c.block != nil && c.block(key) && c.trace != nil {
		c.trace("HandleInputRows(%q) returned after blocking", key)
	}
	n, _, err := c.count.Get()
	if err != nil {
		return err
	}
	var seen []string
	defer func() {
		if c.traceRows && c.trace != nil {
			c.trace("HandleInputRows(%q) rows %v", key, seen)
		}
	}()
	for v := range rows {
		seen = append(seen, v)
		if v == "boom" {
			return errors.New("boom")
		}
		if v == "clear" {
			// The key's count is deleted (a changelog tombstone).
			if err := c.count.Clear(); err != nil {
				return err
			}
			n = 0
			if err := out.Emit("cleared"); err != nil {
				return err
			}
			continue
		}
		n++
		if err := c.count.Update(n); err != nil {
			return err
		}
		if err := out.Emit(strconv.FormatInt(n, 10)); err != nil {
			return err
		}
		switch c.mode {
		case processor.ProcessingTime:
			err = c.h.RegisterTimer(tv.ProcessingTimeMs() + 1000)
		case processor.EventTime:
			err = c.h.RegisterTimer(EventTime(v, 0))
		}
		if err != nil {
			return err
		}
	}
	return nil
}

func (c *Counter) HandleExpiredTimer(_ string, _ processor.TimerValues, t processor.ExpiredTimerInfo, out processor.Emitter[string]) error {
	return out.Emit("timer@" + strconv.FormatInt(t.ExpiryTimeMs, 10))
}

func (c *Counter) Close() error { return nil }

// EventTime is the event time of a value "x@ms"; def without "@".
func EventTime(v string, def int64) int64 {
	if _, t, ok := strings.Cut(v, "@"); ok {
		if ms, err := strconv.ParseInt(t, 10, 64); err == nil {
			return ms
		}
	}
	return def
}

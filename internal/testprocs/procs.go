package testprocs

import (
	"errors"
	"fmt"
	"iter"
	"strconv"
	"strings"
	"time"

	"github.com/kstate/kstate/processor"
	"github.com/kstate/kstate/state"
)

// Counter counts rows per key with all three kinds of state: a ValueState
// count, a ListState of the rows seen and a MapState row→count. For every
// row it emits "<count>" (so a,a,a,b,b emits a:1,a:2,a:3,b:1,b:2 whatever
// the batching), and it checks on every row that the three states agree.
// A row "clear" deletes the key's state (changelog tombstones) and emits
// "cleared". It accepts initial state rows (int64 start counts).
type Counter struct {
	count state.ValueState[int64]
	seen  state.ListState[string]
	per   state.MapState[string, int64]
}

// NewCounter is a processor factory.
func NewCounter() processor.StatefulProcessor[string, string, string] { return &Counter{} }

func (c *Counter) Init(h processor.Handle) (err error) {
	if c.count, err = processor.NewValueState(h, "count", state.Int64()); err != nil {
		return err
	}
	if c.seen, err = processor.NewListState(h, "seen", state.String()); err != nil {
		return err
	}
	c.per, err = processor.NewMapState(h, "per", state.String(), state.Int64())
	return err
}

func (c *Counter) HandleInitialState(key string, start int64, _ processor.TimerValues) error {
	n, _, err := c.count.Get()
	if err != nil {
		return err
	}
	return c.count.Update(n + start)
}

func (c *Counter) HandleInputRows(key string, rows iter.Seq[string], _ processor.TimerValues, out processor.Emitter[string]) error {
	n, _, err := c.count.Get()
	if err != nil {
		return err
	}
	for v := range rows {
		if v == "clear" {
			// The key's state is deleted (changelog tombstones).
			n = 0
			if err := errors.Join(c.count.Clear(), c.seen.Clear(), c.per.Clear()); err != nil {
				return err
			}
			if err := out.Emit("cleared"); err != nil {
				return err
			}
			continue
		}
		n++
		if err := c.count.Update(n); err != nil {
			return err
		}
		if err := c.seen.AppendValue(v); err != nil {
			return err
		}
		m, _, err := c.per.GetValue(v)
		if err != nil {
			return err
		}
		if err := c.per.UpdateValue(v, m+1); err != nil {
			return err
		}
		if err := out.Emit(strconv.FormatInt(n, 10)); err != nil {
			return err
		}
	}
	return c.check(key)
}

// check verifies that the list length and the map's sum equal the count
// minus the initial state (which only feeds the count).
func (c *Counter) check(key string) error {
	list, err := c.seen.Get()
	if err != nil {
		return err
	}
	var l int64
	for range list {
		l++
	}
	vals, err := c.per.Values()
	if err != nil {
		return err
	}
	var m int64
	for v := range vals {
		m += v
	}
	if l != m {
		return fmt.Errorf("key %q: list has %d rows, map sums to %d", key, l, m)
	}
	return nil
}

func (c *Counter) HandleExpiredTimer(string, processor.TimerValues, processor.ExpiredTimerInfo, processor.Emitter[string]) error {
	return nil
}

func (c *Counter) Close() error { return nil }

// Sessions tracks a user's sessions in a MapState session→events. A row is
// "<session>:start", "<session>:event" or "<session>:end". On "end" it
// emits "<session> ended after <n> events; open [<sessions>]" and removes
// the session.
type Sessions struct {
	open state.MapState[string, int64]
}

// NewSessions is a processor factory.
func NewSessions() processor.StatefulProcessor[string, string, string] { return &Sessions{} }

func (s *Sessions) Init(h processor.Handle) (err error) {
	s.open, err = processor.NewMapState(h, "sessions", state.String(), state.Int64())
	return err
}

func (s *Sessions) HandleInputRows(user string, rows iter.Seq[string], _ processor.TimerValues, out processor.Emitter[string]) error {
	for row := range rows {
		id, action, ok := strings.Cut(row, ":")
		if !ok {
			return fmt.Errorf("bad row %q", row)
		}
		switch action {
		case "start":
			if err := s.open.UpdateValue(id, 0); err != nil {
				return err
			}
		case "event":
			n, ok, err := s.open.GetValue(id)
			if err != nil {
				return err
			}
			if !ok {
				return out.Emit(id + " unknown")
			}
			if err := s.open.UpdateValue(id, n+1); err != nil {
				return err
			}
		case "end":
			n, _, err := s.open.GetValue(id)
			if err != nil {
				return err
			}
			if err := s.open.RemoveKey(id); err != nil {
				return err
			}
			keys, err := s.open.Keys()
			if err != nil {
				return err
			}
			var open []string
			for k := range keys {
				open = append(open, k)
			}
			if err := out.Emit(fmt.Sprintf("%s ended after %d events; open %v", id, n, open)); err != nil {
				return err
			}
		default:
			return fmt.Errorf("bad action %q", action)
		}
	}
	return nil
}

func (s *Sessions) HandleExpiredTimer(string, processor.TimerValues, processor.ExpiredTimerInfo, processor.Emitter[string]) error {
	return nil
}

func (s *Sessions) Close() error { return nil }

// Quiet (ProcessingTime) emits "quiet since <last row time>" when a key
// received no row for Gap: every row moves the key's single timer to
// now+Gap; the timer handler emits and clears.
type Quiet struct {
	Gap   time.Duration
	h     processor.Handle
	timer state.ValueState[int64]
	last  state.ValueState[int64]
}

// NewQuiet returns a factory of Quiet processors with the given gap.
func NewQuiet(gap time.Duration) func() processor.StatefulProcessor[string, string, string] {
	return func() processor.StatefulProcessor[string, string, string] { return &Quiet{Gap: gap} }
}

func (q *Quiet) Init(h processor.Handle) (err error) {
	q.h = h
	if q.timer, err = processor.NewValueState(h, "timer", state.Int64()); err != nil {
		return err
	}
	q.last, err = processor.NewValueState(h, "last", state.Int64())
	return err
}

func (q *Quiet) HandleInputRows(key string, rows iter.Seq[string], tv processor.TimerValues, out processor.Emitter[string]) error {
	for range rows {
	}
	if old, ok, err := q.timer.Get(); err != nil {
		return err
	} else if ok {
		if err := q.h.DeleteTimer(old); err != nil {
			return err
		}
	}
	at := tv.ProcessingTimeMs() + q.Gap.Milliseconds()
	if err := q.h.RegisterTimer(at); err != nil {
		return err
	}
	if err := q.timer.Update(at); err != nil {
		return err
	}
	return q.last.Update(tv.ProcessingTimeMs())
}

func (q *Quiet) HandleExpiredTimer(key string, tv processor.TimerValues, t processor.ExpiredTimerInfo, out processor.Emitter[string]) error {
	last, _, err := q.last.Get()
	if err != nil {
		return err
	}
	if err := q.timer.Clear(); err != nil {
		return err
	}
	return out.Emit(fmt.Sprintf("quiet since %d (timer %d, now %d)", last, t.ExpiryTimeMs, tv.ProcessingTimeMs()))
}

func (q *Quiet) Close() error { return nil }

// Deadline (EventTime): a row "<eventTimeMs>" registers a timer at the
// row's event time + After; the timer emits "deadline <expiry> passed at
// watermark <wm>". Use EventTimeOf as Topology.EventTime.
type Deadline struct {
	After time.Duration
	h     processor.Handle
}

// NewDeadline returns a factory of Deadline processors.
func NewDeadline(after time.Duration) func() processor.StatefulProcessor[string, string, string] {
	return func() processor.StatefulProcessor[string, string, string] { return &Deadline{After: after} }
}

// EventTimeOf parses a row "<eventTimeMs>".
func EventTimeOf(row string, recordTs int64) int64 {
	ms, err := strconv.ParseInt(row, 10, 64)
	if err != nil {
		return recordTs
	}
	return ms
}

func (d *Deadline) Init(h processor.Handle) error { d.h = h; return nil }

func (d *Deadline) HandleInputRows(key string, rows iter.Seq[string], tv processor.TimerValues, out processor.Emitter[string]) error {
	for row := range rows {
		if err := d.h.RegisterTimer(EventTimeOf(row, 0) + d.After.Milliseconds()); err != nil {
			return err
		}
	}
	return nil
}

func (d *Deadline) HandleExpiredTimer(key string, tv processor.TimerValues, t processor.ExpiredTimerInfo, out processor.Emitter[string]) error {
	return out.Emit(fmt.Sprintf("deadline %d passed at watermark %d", t.ExpiryTimeMs, tv.WatermarkMs()))
}

func (d *Deadline) Close() error { return nil }

// Expiring (ProcessingTime) keeps the last row of a key in a ValueState
// with TTL. A row "get" emits the value or "absent"; any other row is
// stored.
type Expiring struct {
	TTL time.Duration
	v   state.ValueState[string]
}

// NewExpiring returns a factory of Expiring processors.
func NewExpiring(ttl time.Duration) func() processor.StatefulProcessor[string, string, string] {
	return func() processor.StatefulProcessor[string, string, string] { return &Expiring{TTL: ttl} }
}

func (e *Expiring) Init(h processor.Handle) (err error) {
	e.v, err = processor.NewValueState(h, "last", state.String(), state.WithTTL(e.TTL))
	return err
}

func (e *Expiring) HandleInputRows(key string, rows iter.Seq[string], tv processor.TimerValues, out processor.Emitter[string]) error {
	for row := range rows {
		if row != "get" {
			if err := e.v.Update(row); err != nil {
				return err
			}
			continue
		}
		v, ok, err := e.v.Get()
		if err != nil {
			return err
		}
		if !ok {
			v = "absent"
		}
		if err := out.Emit(v); err != nil {
			return err
		}
	}
	return nil
}

func (e *Expiring) HandleExpiredTimer(string, processor.TimerValues, processor.ExpiredTimerInfo, processor.Emitter[string]) error {
	return nil
}

func (e *Expiring) Close() error { return nil }

// CountryOf is a GroupBy key: the country of a value "<country>:<id>"
// (the record key, a user id, is ignored).
func CountryOf(_ []byte, v string) (string, error) {
	c, _, ok := strings.Cut(v, ":")
	if !ok || c == "" {
		return "", fmt.Errorf("value %q has no country", v)
	}
	return c, nil
}

package main

import (
	"iter"
	"time"

	"github.com/kstate/kstate/processor"
	"github.com/kstate/kstate/state"
)

// churnProc is the session processor of issue #25: every call reads the
// key's session (a MapState iterated, a ListState read, the key's timers
// listed) and moves the key's processing-time timer to now + gap (the
// README's heartbeat pattern); when the timer fires the session closes and
// its map and list are cleared. Keys come back after their session closed
// (the input is uniform over --keys), so every call opens a new session
// among the deleted entries of the closed ones: the scans of an empty range
// that stepped over every tombstone up to the next live key, 100x slower.
// It emits the key's running count (a ValueState never cleared) like the
// other processors, so the exactly-once check holds.
type churnProc struct {
	gap     time.Duration
	history int
	h       processor.Handle
	total   state.ValueState[int64]
	session state.MapState[string, int64]
	recent  state.ListState[int64]
}

func (p *churnProc) Init(h processor.Handle) (err error) {
	p.h = h
	if p.total, err = processor.NewValueState(h, "total", state.Int64()); err != nil {
		return err
	}
	if p.session, err = processor.NewMapState(h, "session", state.String(), state.Int64()); err != nil {
		return err
	}
	p.recent, err = processor.NewListState(h, "recent", state.Int64())
	return err
}

func (p *churnProc) HandleInputRows(_ string, rows iter.Seq[benchRow], tv processor.TimerValues, out processor.Emitter[benchOut]) error {
	n, _, err := p.total.Get()
	if err != nil {
		return err
	}
	entries, err := p.session.Iterator()
	if err != nil {
		return err
	}
	var events, sum int64
	for k, v := range entries {
		switch k {
		case "events":
			events = v
		case "sum":
			sum = v
		}
	}
	old, err := p.recent.Get()
	if err != nil {
		return err
	}
	kept := 0
	for range old {
		kept++
	}
	var add []int64
	for r := range rows {
		n++
		events++
		sum += r.V
		add = append(add, r.V)
		if err := out.Emit(benchOut{Count: n, ProducedNs: r.ProducedNs}); err != nil {
			return err
		}
	}
	if kept+len(add) <= p.history {
		if err := p.recent.AppendList(add); err != nil {
			return err
		}
	}
	if err := p.session.UpdateValue("events", events); err != nil {
		return err
	}
	if err := p.session.UpdateValue("sum", sum); err != nil {
		return err
	}
	if err := p.total.Update(n); err != nil {
		return err
	}
	timers, err := p.h.ListTimers()
	if err != nil {
		return err
	}
	for _, t := range timers {
		if err := p.h.DeleteTimer(t); err != nil {
			return err
		}
	}
	return p.h.RegisterTimer(tv.ProcessingTimeMs() + p.gap.Milliseconds())
}

// HandleExpiredTimer closes the session: its map and list are cleared (the
// running count stays).
func (p *churnProc) HandleExpiredTimer(string, processor.TimerValues, processor.ExpiredTimerInfo, processor.Emitter[benchOut]) error {
	if err := p.recent.Clear(); err != nil {
		return err
	}
	return p.session.Clear()
}

func (p *churnProc) Close() error { return nil }

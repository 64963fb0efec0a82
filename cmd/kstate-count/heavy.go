package main

import (
	"iter"
	"math"
	"time"

	"github.com/kstate/kstate/processor"
	"github.com/kstate/kstate/state"
)

// The heavy workload (-processor heavy), the same as `kstate bench`'s heavy
// processor and as the Kafka Streams and Flink peers of
// internal/tools/benchpeers/heavy: per key a list of the last
// heavyHistory values, a map of 4 aggregates (count, sum, min, max) and one
// processing-time timer, moved on every call to now + heavyIdle. A row's
// value is its send time (the first 8 bytes of the input). The output is
// count's: the map's count after the row and the row's send time.
//
// Timer semantics, identical in the three peers: the timer never fires
// during a run (heavyIdle is far beyond one); if it fires, it clears the
// key's list and map (and the timer is gone) and emits nothing.
const (
	heavyHistory = 5
	heavyIdle    = time.Hour
)

var heavyAggNames = [4]string{"count", "sum", "min", "max"}

// heavy is the heavy workload's processor.
type heavy struct {
	h      processor.Handle
	recent state.ListState[int64]
	agg    state.MapState[string, int64]
}

func (p *heavy) Init(h processor.Handle) (err error) {
	p.h = h
	if p.recent, err = processor.NewListState(h, "recent", state.Int64()); err != nil {
		return err
	}
	p.agg, err = processor.NewMapState(h, "agg", state.String(), state.Int64())
	return err
}

func (p *heavy) HandleInputRows(_ string, rows iter.Seq[int64], tv processor.TimerValues, out processor.Emitter[countOut]) error {
	var agg [4]int64
	for i, name := range heavyAggNames {
		v, ok, err := p.agg.GetValue(name)
		if err != nil {
			return err
		}
		switch {
		case ok:
			agg[i] = v
		case name == "min":
			agg[i] = math.MaxInt64
		case name == "max":
			agg[i] = math.MinInt64
		}
	}
	old, err := p.recent.Get()
	if err != nil {
		return err
	}
	var list []int64
	for v := range old {
		list = append(list, v)
	}
	kept := len(list)
	for sent := range rows {
		agg[0]++
		agg[1] += sent
		agg[2] = min(agg[2], sent)
		agg[3] = max(agg[3], sent)
		list = append(list, sent)
		if err := out.Emit(countOut{count: agg[0], sentNs: sent}); err != nil {
			return err
		}
	}
	if len(list) <= heavyHistory {
		if err := p.recent.AppendList(list[kept:]); err != nil {
			return err
		}
	} else if err := p.recent.Put(list[len(list)-heavyHistory:]); err != nil {
		return err
	}
	for i, name := range heavyAggNames {
		if err := p.agg.UpdateValue(name, agg[i]); err != nil {
			return err
		}
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
	return p.h.RegisterTimer(tv.ProcessingTimeMs() + heavyIdle.Milliseconds())
}

// HandleExpiredTimer clears the key's list and map and emits nothing.
func (p *heavy) HandleExpiredTimer(string, processor.TimerValues, processor.ExpiredTimerInfo, processor.Emitter[countOut]) error {
	if err := p.recent.Clear(); err != nil {
		return err
	}
	return p.agg.Clear()
}

func (p *heavy) Close() error { return nil }

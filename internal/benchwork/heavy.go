// Package benchwork holds the benchmark workloads that more than one
// benchmark runs: `kstate bench` (cmd/kstate) and the peer harness's kstate
// peer (cmd/kstate-count) run the same heavy processor, so that its figures
// compare with the Kafka Streams and Flink implementations of
// internal/tools/benchpeers/heavy.
package benchwork

import (
	"iter"
	"math"
	"time"

	"github.com/kstate/kstate/processor"
	"github.com/kstate/kstate/state"
)

// HeavyIdle is how far ahead the heavy processor moves a key's timer on
// every call: far beyond any benchmark run, so the timers are maintained
// (deleted and registered on every call) but never fire.
const HeavyIdle = time.Hour

var aggNames = [4]string{"count", "sum", "min", "max"}

// Heavy is a state-heavy processor: on every call it reads and rewrites a
// list of the last History values, a map of 4 aggregates (count, sum, min,
// max) and the key's one processing-time timer, moved to now + HeavyIdle.
// It emits one row per input row, Out(the map's count after the row, the
// row). If the timer fires, it clears the key's list and map and emits
// nothing. Value is the number a row adds to the aggregates.
//
// The list and the map are packed (state.Packed): each is one stored value
// per key, as the Kafka Streams peer keeps them (and Flink its list).
type Heavy[R, O any] struct {
	History int
	Value   func(R) int64
	Out     func(count int64, row R) O

	h      processor.Handle
	recent state.ListState[int64]
	agg    state.MapState[string, int64]
}

// Init declares the list and the map.
func (p *Heavy[R, O]) Init(h processor.Handle) (err error) {
	p.h = h
	if p.recent, err = processor.NewListState(h, "recent", state.Int64(), state.Packed()); err != nil {
		return err
	}
	p.agg, err = processor.NewMapState(h, "agg", state.String(), state.Int64(), state.Packed())
	return err
}

// HandleInputRows updates the aggregates and the list, emits a row per
// input row and moves the key's timer.
func (p *Heavy[R, O]) HandleInputRows(_ string, rows iter.Seq[R], tv processor.TimerValues, out processor.Emitter[O]) error {
	var agg [4]int64
	for i, name := range aggNames {
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
	for r := range rows {
		v := p.Value(r)
		agg[0]++
		agg[1] += v
		agg[2] = min(agg[2], v)
		agg[3] = max(agg[3], v)
		list = append(list, v)
		if err := out.Emit(p.Out(agg[0], r)); err != nil {
			return err
		}
	}
	if len(list) <= p.History {
		if err := p.recent.AppendList(list[kept:]); err != nil {
			return err
		}
	} else if err := p.recent.Put(list[len(list)-p.History:]); err != nil {
		return err
	}
	for i, name := range aggNames {
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
	return p.h.RegisterTimer(tv.ProcessingTimeMs() + HeavyIdle.Milliseconds())
}

// HandleExpiredTimer clears the key's list and map and emits nothing.
func (p *Heavy[R, O]) HandleExpiredTimer(string, processor.TimerValues, processor.ExpiredTimerInfo, processor.Emitter[O]) error {
	if err := p.recent.Clear(); err != nil {
		return err
	}
	return p.agg.Clear()
}

// Close does nothing.
func (p *Heavy[R, O]) Close() error { return nil }

package processor_test

import (
	"fmt"
	"iter"

	"github.com/kstate/kstate/processor"
	"github.com/kstate/kstate/state"
	"github.com/kstate/kstate/state/kv"
	"github.com/kstate/kstate/timers"
)

// WordCount counts rows per key in a ValueState and emits the running count.
type WordCount struct {
	count *state.ValueState[int64]
}

func (w *WordCount) Init(h processor.Handle) (err error) {
	w.count, err = processor.NewValueState(h, "count", state.Int64())
	return err
}

func (w *WordCount) HandleInputRows(key string, rows iter.Seq[string], tv processor.TimerValues, out processor.Emitter[string]) error {
	n, _, err := w.count.Get() // absent reads as (0, false)
	if err != nil {
		return err
	}
	for range rows {
		n++
	}
	if err := w.count.Update(n); err != nil {
		return err
	}
	return out.Emit(fmt.Sprintf("%s=%d", key, n))
}

func (w *WordCount) HandleExpiredTimer(string, processor.TimerValues, processor.ExpiredTimerInfo, processor.Emitter[string]) error {
	return nil
}

func (w *WordCount) Close() error { return nil }

// A processor can be driven without Kafka through a Runtime over a shard
// with an in-memory backend — the same calls the engine makes per batch.
func Example() {
	shard, _ := state.OpenShard(state.ShardOptions{Backend: kv.NewMemory()})
	defer shard.Close()
	rt := processor.NewRuntime(processor.RuntimeConfig{Shard: shard, Timers: timers.New(shard), TimeMode: processor.NoTime})

	var p processor.StatefulProcessor[string, string, string] = &WordCount{}
	rt.SetPhase(processor.PhaseInit)
	if err := p.Init(rt.Handle()); err != nil {
		fmt.Println(err)
	}
	rt.SetPhase(processor.PhaseIdle)

	print := processor.EmitterFunc[string](func(s string) error { fmt.Println(s); return nil })
	batch := func(key string, rows ...string) {
		shard.Begin(-1)
		rt.SetKey([]byte(key))
		rt.SetPhase(processor.PhaseInput)
		seq := func(yield func(string) bool) {
			for _, r := range rows {
				if !yield(r) {
					return
				}
			}
		}
		if err := p.HandleInputRows(key, seq, processor.NewTimerValues(-1, -1), print); err != nil {
			fmt.Println(err)
		}
		rt.SetPhase(processor.PhaseIdle)
		shard.Finish()
		shard.Commit(0)
	}
	batch("a", "x", "y", "z")
	batch("b", "x")
	batch("a", "w")
	// Output:
	// a=3
	// b=1
	// a=4
}

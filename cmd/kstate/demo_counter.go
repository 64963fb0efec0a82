package main

import (
	"iter"
	"strconv"

	"github.com/kstate/kstate/processor"
	"github.com/kstate/kstate/state"
)

// demoCounter is the README's counter (examples/readme/counter.go) plus
// initial state: it counts the rows of each key in a ValueState, starting
// from the key's initial count if the application was given one, and emits
// the new count.
type demoCounter struct {
	// Defaults supplies the no-op HandleExpiredTimer and Close it does not need.
	processor.Defaults[string, string]

	count state.ValueState[int64]
}

func newDemoCounter() processor.StatefulProcessor[string, string, string] { return &demoCounter{} }

func (c *demoCounter) Init(h processor.Handle) (err error) {
	c.count, err = processor.NewValueState(h, "count", state.Int64())
	return err
}

// HandleInitialState makes demoCounter a
// processor.InitialStateHandler[string, int64].
func (c *demoCounter) HandleInitialState(_ string, start int64, _ processor.TimerValues) error {
	n, _, err := c.count.Get()
	if err != nil {
		return err
	}
	return c.count.Update(n + start)
}

func (c *demoCounter) HandleInputRows(_ string, rows iter.Seq[string], _ processor.TimerValues, out processor.Emitter[string]) error {
	n, _, err := c.count.Get()
	if err != nil {
		return err
	}
	for range rows {
		n++
	}
	if err := c.count.Update(n); err != nil {
		return err
	}
	return out.Emit(strconv.FormatInt(n, 10))
}

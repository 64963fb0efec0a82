package main

import (
	"iter"
	"strconv"

	"github.com/kstate/kstate/processor"
	"github.com/kstate/kstate/state"
)

// Counter counts the records of each key and emits the key's new count.
// Defaults supplies the no-op HandleExpiredTimer and Close it does not need.
type Counter struct {
	processor.Defaults[string, string]
	count state.ValueState[int64]
}

// Init declares the state variables (here one durable value per key).
func (c *Counter) Init(h processor.Handle) (err error) {
	c.count, err = processor.NewValueState(h, "count", state.Int64())
	return err
}

// HandleInputRows gets all rows of one key in a micro-batch.
func (c *Counter) HandleInputRows(key string, rows iter.Seq[string], _ processor.TimerValues, out processor.Emitter[string]) error {
	n, _, err := c.count.Get() // absent state: ok == false, n == 0
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

package kstatetest_test

import (
	"fmt"
	"iter"
	"testing"

	"github.com/kstate/kstate"
	"github.com/kstate/kstate/kstatetest"
	"github.com/kstate/kstate/processor"
	"github.com/kstate/kstate/serde"
	"github.com/kstate/kstate/state"
)

// Counter counts the rows of each key and emits the key's new count.
type Counter struct {
	processor.Defaults[string, int64]
	count state.ValueState[int64]
}

func (c *Counter) Init(h processor.Handle) (err error) {
	c.count, err = processor.NewValueState(h, "count", state.Int64())
	return err
}

func (c *Counter) HandleInputRows(_ string, rows iter.Seq[string], _ processor.TimerValues, out processor.Emitter[int64]) error {
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
	return out.Emit(n)
}

// A counter test as a user writes it: the application's Topology, input,
// one batch, then the outputs and the committed state. (In a real test t
// is the test's *testing.T.)
func Example() {
	t := &testing.T{}
	cfg := kstate.Topology[string, string, int64]{
		Inputs:       kstate.Topics(serde.String(), "words"),
		KeySerde:     serde.String(),
		NewProcessor: func() processor.StatefulProcessor[string, string, int64] { return &Counter{} },
		Output: kstate.Output[string, int64]{
			Topic: "counts",
			Serde: serde.Int64(),
		},
	}
	d := kstatetest.New(t, cfg)
	defer d.Close()
	for _, w := range []string{"a", "a", "a", "b", "b"} {
		d.Input(w, w)
	}
	d.MustRunBatch()
	for _, o := range d.Outputs() {
		fmt.Printf("%s=%d\n", o.Key, o.Value)
	}
	n, ok := kstatetest.ValueOf(d, "a", "count", state.Int64())
	fmt.Println("state of a:", n, ok)

	d.Restart() // the processors' Close, then shards restored from the changelog
	d.Input("a", "a")
	d.MustRunBatch()
	fmt.Println("after a restart:", d.OutputValues())
	// Output:
	// a=3
	// b=2
	// state of a: 3 true
	// after a restart: [4]
}

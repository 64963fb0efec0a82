package integrationtest

import (
	"iter"
	"strconv"

	"github.com/kstate/kstate"
	"github.com/kstate/kstate/processor"
	"github.com/kstate/kstate/serde"
	"github.com/kstate/kstate/state"
)

// Counter counts the records of each key (a word) and emits the word's
// count after each record: the third "to" emits "3".
type Counter struct {
	processor.Defaults[string, string]
	count state.ValueState[int64]
}

// Init declares the state: one durable count per word.
func (c *Counter) Init(h processor.Handle) (err error) {
	c.count, err = processor.NewValueState(h, "count", state.Int64())
	return err
}

// HandleInputRows gets all rows of one word in a micro-batch.
func (c *Counter) HandleInputRows(word string, rows iter.Seq[string], _ processor.TimerValues, out processor.Emitter[string]) error {
	n, _, err := c.count.Get()
	if err != nil {
		return err
	}
	for range rows {
		n++
		if err := out.Emit(strconv.FormatInt(n, 10)); err != nil {
			return err
		}
	}
	return c.count.Update(n)
}

// Settings are what differs between production and a test.
type Settings struct {
	Brokers       []string
	ApplicationID string
	InputTopic    string // keyed by word
	OutputTopic   string // word → its new count, as a decimal string
	StateDir      string
}

// Config is the service's kstate topology and options. The service's main
// and its integration test both build the application from them, so the
// test runs the configuration that ships.
func Config(s Settings) (kstate.Topology[string, string, string], kstate.Options) {
	return kstate.Topology[string, string, string]{
			Inputs:       kstate.Topics(serde.String(), s.InputTopic),
			KeySerde:     serde.String(),
			NewProcessor: func() processor.StatefulProcessor[string, string, string] { return &Counter{} },
			Output: kstate.Output[string, string]{
				Topic: s.OutputTopic,
				Serde: serde.String(),
			},
		}, kstate.Options{
			ApplicationID: s.ApplicationID,
			Kafka: kstate.KafkaOptions{
				Brokers: s.Brokers,
			},
			State: kstate.StateOptions{
				Dir: s.StateDir,
			},
		}
}

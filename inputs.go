package kstate

import (
	"fmt"

	"github.com/kstate/kstate/internal/engine"
	"github.com/kstate/kstate/internal/kafka"
	"github.com/kstate/kstate/processor"
	"github.com/kstate/kstate/serde"
)

// Input is one input topic of Config.Inputs with the decoder of its
// values into the processor's input type I: two topics with different
// formats can feed one processor.
//
// The input topics must be co-partitioned: the same partition count
// (checked at start: an InputPartitionsError) and the same partitioning of
// the grouping key (Kafka's default partitioner, murmur2 of the key
// bytes). Partition task p reads partition p of every input topic, so a
// key's rows from every topic reach the same HandleInputRows call: in a
// batch, the rows of the first input (in the order of Config.Inputs), in
// offset order, then those of the second, and so on. With several input
// topics the group uses Kafka's range assignor (partition p of every
// topic to one member), not the cooperative-sticky one: a rebalance moves
// every partition, and every instance must run the same input list.
//
// The first input's recorded offsets keep the format of a one-input
// application, so an input may be added at the end of the list of a
// running application (stop every instance first); the first input must
// stay first.
type Input[I any] struct {
	// Topic (required) is the input topic; its records' keys are the
	// grouping keys.
	Topic string
	// ValueSerde decodes the topic's record values, unless ValueFromRecord
	// is set instead (exactly one of the two).
	ValueSerde serde.Deserializer[I]
	// ValueFromRecord decodes an input value from the whole record, as
	// Config.ValueFromRecord.
	ValueFromRecord func(rec processor.Record) (I, error)
}

// InputPartitionsError is returned by Run when the input topics (Inputs or
// InputTopics) do not all have the same partition count: partition p of
// every input topic feeds partition task p, so they must be
// co-partitioned.
type InputPartitionsError struct {
	Topic      string // the first input topic
	Partitions int    // its partition count
	// Other is an input topic with another count, OtherPartitions.
	Other           string
	OtherPartitions int
}

func (e *InputPartitionsError) Error() string {
	return "kstate: " + (&engine.InputPartitionsError{Topic: e.Topic, Partitions: e.Partitions, Other: e.Other, OtherPartitions: e.OtherPartitions}).Error()
}

// inputList returns the application's inputs: Inputs, or the short form
// InputTopics with ValueSerde / ValueFromRecord. Valid after withDefaults.
func (c *Config[K, I, O]) inputList() []Input[I] {
	if len(c.Inputs) > 0 {
		return c.Inputs
	}
	out := make([]Input[I], len(c.InputTopics))
	for i, t := range c.InputTopics {
		out[i] = Input[I]{Topic: t, ValueSerde: c.ValueSerde, ValueFromRecord: c.ValueFromRecord}
	}
	return out
}

// inputTopics returns the input topics in order.
func (c *Config[K, I, O]) inputTopics() []string {
	in := c.inputList()
	out := make([]string, len(in))
	for i, x := range in {
		out[i] = x.Topic
	}
	return out
}

// inputDecoders returns the engine's decoders of the inputs.
func (c *Config[K, I, O]) inputDecoders() []engine.InputDecoder[I] {
	in := c.inputList()
	out := make([]engine.InputDecoder[I], len(in))
	for i, x := range in {
		out[i] = engine.InputDecoder[I]{ValueSerde: x.ValueSerde, ValueFromRecord: x.ValueFromRecord}
	}
	return out
}

// checkInputs validates Inputs / InputTopics; "" when valid.
func (c *Config[K, I, O]) checkInputs() string {
	field := func(i int) string { return fmt.Sprintf("Config.InputTopics[%d]", i) }
	if len(c.Inputs) > 0 {
		if len(c.InputTopics) > 0 || c.ValueSerde != nil || c.ValueFromRecord != nil {
			return "Config.Inputs: set Inputs or InputTopics with ValueSerde (or ValueFromRecord), not both: Inputs names each topic with its decoder"
		}
		field = func(i int) string { return fmt.Sprintf("Config.Inputs[%d].Topic", i) }
	} else {
		switch {
		case len(c.InputTopics) == 0:
			return "Config.InputTopics (or Inputs) is required"
		case c.ValueSerde == nil && c.ValueFromRecord == nil:
			return "Config.ValueSerde (or ValueFromRecord) is required with InputTopics"
		case c.ValueSerde != nil && c.ValueFromRecord != nil:
			return "Config.ValueSerde, ValueFromRecord: set ValueSerde or ValueFromRecord, not both"
		}
	}
	seen := map[string]bool{}
	for i, in := range c.inputList() {
		if err := kafka.CheckTopic(in.Topic); err != nil {
			return fmt.Sprintf("%s: input topic %q: %v", field(i), in.Topic, err)
		}
		switch {
		case seen[in.Topic]:
			return fmt.Sprintf("%s: input topic %q is listed twice", field(i), in.Topic)
		case in.ValueSerde == nil && in.ValueFromRecord == nil:
			return fmt.Sprintf("Config.Inputs[%d] (topic %q) needs ValueSerde or ValueFromRecord", i, in.Topic)
		case in.ValueSerde != nil && in.ValueFromRecord != nil:
			return fmt.Sprintf("Config.Inputs[%d] (topic %q): set ValueSerde or ValueFromRecord, not both", i, in.Topic)
		}
		seen[in.Topic] = true
	}
	return ""
}

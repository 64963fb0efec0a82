package kstate

import (
	"fmt"

	"github.com/kstate/kstate/internal/engine"
	"github.com/kstate/kstate/internal/kafka"
	"github.com/kstate/kstate/processor"
	"github.com/kstate/kstate/serde"
)

// Input is one input topic of Topology.Inputs with the decoder of its
// values into the processor's input type I: two topics with different
// formats can feed one processor.
//
// The input topics must be co-partitioned: the same partition count
// (checked at start: an InputPartitionsError) and the same partitioning of
// the grouping key (Kafka's default partitioner, murmur2 of the key
// bytes). Partition task p reads partition p of every input topic, so a
// key's rows from every topic reach the same HandleInputRows call: in a
// batch, the rows of the first input (in the order of Topology.Inputs), in
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
	// ValueFromRecord, instead of ValueSerde, decodes an input value from
	// the whole record: topic, partition, offset, timestamp, key, value and
	// headers (processor.Record). A processor that needs record metadata
	// makes its input type I carry it, and keeps HandleInputRows' plain
	// iter.Seq[I]; one that does not is unaffected. Its errors and panics
	// meet Topology.OnDecodeError like ValueSerde's.
	ValueFromRecord func(rec processor.Record) (I, error)
}

// InputPartitionsError is returned by Run when the input topics
// (Topology.Inputs) do not all have the same partition count: partition p of
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

// inputList returns the application's inputs, Topology.Inputs.
func (c *config[K, I, O]) inputList() []Input[I] { return c.Inputs }

// inputTopics returns the input topics in order.
func (c *config[K, I, O]) inputTopics() []string {
	in := c.inputList()
	out := make([]string, len(in))
	for i, x := range in {
		out[i] = x.Topic
	}
	return out
}

// inputDecoders returns the engine's decoders of the inputs.
func (c *config[K, I, O]) inputDecoders() []engine.InputDecoder[I] {
	in := c.inputList()
	out := make([]engine.InputDecoder[I], len(in))
	for i, x := range in {
		out[i] = engine.InputDecoder[I]{ValueSerde: x.ValueSerde, ValueFromRecord: x.ValueFromRecord}
	}
	return out
}

// checkInputs validates Topology.Inputs; "" when valid.
func (c *config[K, I, O]) checkInputs() string {
	if len(c.Inputs) == 0 {
		return "Topology.Inputs is required: list the input topics (kstate.Topics(valueSerde, \"topic\", ...) is the short form)"
	}
	seen := map[string]bool{}
	for i, in := range c.Inputs {
		if err := kafka.CheckTopic(in.Topic); err != nil {
			return fmt.Sprintf("Topology.Inputs[%d].Topic: input topic %q: %v", i, in.Topic, err)
		}
		switch {
		case seen[in.Topic]:
			return fmt.Sprintf("Topology.Inputs[%d].Topic: input topic %q is listed twice", i, in.Topic)
		case in.ValueSerde == nil && in.ValueFromRecord == nil:
			return fmt.Sprintf("Topology.Inputs[%d] (topic %q) needs ValueSerde or ValueFromRecord", i, in.Topic)
		case in.ValueSerde != nil && in.ValueFromRecord != nil:
			return fmt.Sprintf("Topology.Inputs[%d] (topic %q): set ValueSerde or ValueFromRecord, not both", i, in.Topic)
		}
		seen[in.Topic] = true
	}
	return ""
}

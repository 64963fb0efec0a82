package processor

import (
	"errors"
	"time"

	"github.com/kstate/kstate/serde"
)

// Record metadata in and out. A processor that only needs values keeps the
// plain iter.Seq[I] of HandleInputRows and Emitter.Emit; the rest is opt-in
// and costs nothing when unused:
//
//   - In: kstate.Topology.Inputs[i].ValueFromRecord decodes a whole Record (topic,
//     partition, offset, timestamp, key, value, headers) into the input type
//     I, so a processor that wants metadata makes I carry it (a struct with
//     the value and the fields it needs). The decoder sees the record once,
//     where the engine decodes anyway: no per-row accessor, no wrapper type
//     forced on every processor, no change to HandleInputRows.
//   - Out: EmitWith sets an output record's key, timestamp and headers;
//     EmitTo writes a value of another type to another output topic,
//     declared in kstate.Topology.Output.EmitTo with its serializer. Both go
//     into the batch's transaction like Emit.

// Header is a Kafka record header. It is the one header type from the
// polled record to Record, EmitWith's OutputMeta and the dead-letter
// record: an input record's headers reach ValueFromRecord as the engine
// received them, without a copy.
type Header struct {
	Key   string
	Value []byte
}

// Record is an input record as Kafka delivered it, for
// kstate.Topology.Inputs[i].ValueFromRecord. Its slices (Key, Value, Headers) are the
// polled record's own and are not reused by the engine: the decoded value
// may keep them, but must not modify them (the record's dead-letter copy,
// if it gets one, shares them).
type Record struct {
	Topic     string
	Partition int32
	Offset    int64
	Timestamp time.Time // the record's timestamp (CreateTime or LogAppendTime)
	Key       []byte
	Value     []byte
	Headers   []Header
}

// OutputMeta is what an output record carries besides its value (EmitWith,
// EmitTo). Zero fields keep the defaults.
type OutputMeta struct {
	// Key is the record key; nil: the default (kstate.Topology.Output.Key for
	// the output topic, else the grouping key's bytes). The record's
	// partition is murmur2 of it, as with Emit.
	Key []byte
	// Timestamp is the record timestamp; zero: the default
	// (kstate.Topology.Output.EventTime for the output topic, else the
	// producer's clock). In EventTime mode it is checked against the
	// watermark like OutputEventTime (ErrLateOutput).
	Timestamp time.Time
	// Headers are the record's headers.
	Headers []Header
}

// OutputTopic is an output topic besides kstate.Topology.Output.Topic, with
// the serializer of its values: declare it in kstate.Topology.Output.EmitTo
// (checked to exist at start-up) and emit to it with EmitTo.
type OutputTopic[T any] struct {
	name string
	ser  serde.Serializer[T]
}

// NewOutputTopic returns the output topic name whose values ser encodes.
func NewOutputTopic[T any](name string, ser serde.Serializer[T]) *OutputTopic[T] {
	return &OutputTopic[T]{name: name, ser: ser}
}

// Name is the topic's name.
func (t *OutputTopic[T]) Name() string { return t.name }

// NamedTopic is what kstate.Topology.Output.EmitTo holds: an *OutputTopic[T]
// of any T.
type NamedTopic interface{ Name() string }

// ErrForeignEmitter is returned by EmitWith and EmitTo given an Emitter
// that is not the engine's (a test fake): they need the engine. Test
// processors with package kstatetest, which runs them on the real engine.
var ErrForeignEmitter = errors.New("processor: EmitWith and EmitTo need the Emitter the engine passed to the handler (test with package kstatetest)")

// metaEmitter is the engine's Emitter's capability behind EmitWith.
type metaEmitter[O any] interface {
	EmitMeta(o O, m OutputMeta) error
}

// topicEmitter is the engine's Emitter's capability behind EmitTo: value is
// already encoded, or encodeErr says why not (the engine makes it fail the
// batch even if the processor ignores it, as with Emit).
type topicEmitter interface {
	EmitToTopic(topic string, value []byte, encodeErr error, m OutputMeta) error
}

// EmitWith emits o to the output topic like out.Emit(o), with the key,
// timestamp and headers of m. Valid, like out, only during the handler
// call.
func EmitWith[O any](out Emitter[O], o O, m OutputMeta) error {
	em, ok := out.(metaEmitter[O])
	if !ok {
		return ErrForeignEmitter
	}
	return em.EmitMeta(o, m)
}

// EmitTo emits v to topic t, encoded by t's serializer, with the key (nil:
// the grouping key's bytes), timestamp and headers of m, in the batch's
// transaction. t must be declared in kstate.Topology.Output.EmitTo (else the
// call fails the batch). Valid, like out, only during the handler call.
func EmitTo[T, O any](out Emitter[O], t *OutputTopic[T], v T, m OutputMeta) error {
	em, ok := out.(topicEmitter)
	if !ok {
		return ErrForeignEmitter
	}
	b, err := t.ser.Serialize(v)
	return em.EmitToTopic(t.name, b, err, m)
}

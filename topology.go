package kstate

import (
	"time"

	"github.com/kstate/kstate/processor"
	"github.com/kstate/kstate/serde"
)

// Topology is what an application is: the topics it reads and how their
// records decode, the grouping key, the processor, its time and output
// modes, where its output goes, its initial state and what a bad record
// does. K is the grouping key, I the input value and O the output value
// type. How the application runs (Kafka, state store, batching,
// timeouts, observability) is in Options. Required fields are marked;
// every other zero value means the documented default. New validates it
// once, together with the Options.
type Topology[K, I, O any] struct {
	// Inputs (required) are the input topics, each with the decoder of its
	// values (Input); their records' keys are the grouping keys. Topics
	// (one value serde for every topic) and TopicsFromRecord (a decoder of
	// the whole record) are the short forms. Several topics must be
	// co-partitioned (see Input). If InitialState is used, the topics must
	// be partitioned by Kafka's default partitioner (murmur2 of the key
	// bytes), as every standard Kafka producer does.
	Inputs []Input[I]
	// KeySerde (required) decodes record keys into grouping keys. Encoding
	// a decoded key must give back the record's key bytes (state is stored
	// under the key bytes).
	KeySerde serde.Serde[K]
	// GroupBy re-keys input topics whose grouping key is not the record
	// key, through the internal topic "<ApplicationID>-repartition" (see
	// GroupBy). Default: none (every input is grouped by its record key).
	GroupBy []GroupBy[K, I]

	// NewProcessor (required) returns a new processor; it is called once
	// per partition task (and, when InitialState is set, once by New to
	// check that the processor implements HandleInitialState; that
	// instance is dropped without Init or Close).
	NewProcessor func() processor.StatefulProcessor[K, I, O]
	// TimeMode is fixed per application. Default processor.NoTime.
	TimeMode processor.TimeMode
	// EventTime (EventTime mode) extracts a row's event time in ms.
	// Default: the record timestamp.
	EventTime func(value I, recordTimestampMs int64) int64
	// AllowedLateness (EventTime mode) is subtracted from the max event time
	// seen to give the watermark. Default 0.
	AllowedLateness time.Duration
	// OutputMode is fixed per application. Default processor.Append.
	OutputMode processor.OutputMode

	// Output (required: a Topic or Sinks) says where the rows the
	// processor emits go (see Output).
	Output Output[K, O]

	// InitialState is applied through the processor's HandleInitialState
	// on the application's first run (see InitialStateFromSeq,
	// InitialStateFromTopic). Default: none.
	InitialState InitialState[K]

	// OnDecodeError says what an undecodable record, or one with a nil
	// key, does. Default DecodeErrorFail: Run stops with a DecodeError
	// naming topic, partition and offset; nothing from that batch on is
	// committed. DecodeErrorSkip drops it (Warn log, Counters.Skipped);
	// DecodeErrorDeadLetter writes it to DeadLetterTopic in the batch's
	// transaction. A serde error wrapping serde.ErrUnavailable (a schema
	// registry down) stops Run under every policy.
	OnDecodeError DecodeErrorPolicy
	// OnKeyPartitionMismatch says what a record whose key does not hash
	// (murmur2, Kafka's default partitioner) to the partition it was read
	// from does. Default KeyPartitionAllow: it is processed on the
	// partition it arrived on, counted (Counters.KeyPartitionMismatches)
	// and logged at Warn once per partition.
	OnKeyPartitionMismatch KeyPartitionPolicy
	// OnProcessingError says what a failing HandleInputRows or
	// HandleExpiredTimer call (an error, a panic, an output that does not
	// serialize or is too large, a late output) does. Default
	// ProcessingErrorFail: Run stops with a UserError and nothing of the
	// batch is committed. ProcessingErrorDeadLetter discards what the call
	// did (state, timers, outputs), writes the key's rows of the batch (or,
	// for a timer, a record describing it) to DeadLetterTopic, and commits
	// every other key. Init and HandleInitialState errors always stop Run.
	OnProcessingError ProcessingErrorPolicy
	// DeadLetterTopic receives the records of the DeadLetter policies,
	// written in the batch's transaction (read it read_committed). It is
	// created with the input topic's partition count when missing; a
	// record goes to the partition numbered like its source partition
	// (modulo the topic's count). It must not be an input, the changelog
	// or the repartition topic (New refuses it, as it refuses any output
	// topic that is: a record written to an input is read again, forever).
	// Default "<Options.ApplicationID>-dlq"; unused unless a policy is
	// DeadLetter.
	DeadLetterTopic string
}

// Output says where the rows a processor emits go: the records it emits
// with Emit to Topic, encoded with Serde, and every batch's rows to
// Sinks; the records it writes with processor.EmitTo to the topics of
// EmitTo. Topic or Sinks (or both) is required:
//
//	Output: kstate.Output[string, int64]{Topic: "counts", Serde: serde.Int64()}
type Output[K, O any] struct {
	// Topic receives the emitted rows. It must exist, and not be an
	// input, the changelog or the repartition topic. Required unless
	// Sinks is set. Default (with Sinks): none: the rows go to Sinks only.
	Topic string
	// Serde encodes emitted rows; required with Topic. Default (without
	// Topic): none.
	Serde serde.Serializer[O]
	// Key gives an output record's key. Default: the grouping key's
	// bytes. Output records are partitioned by murmur2 of their key.
	Key func(key K, out O) []byte
	// EventTime gives an emitted row's event time in ms; it becomes the
	// output record's timestamp (so a downstream kstate application keeps
	// event time), and in EventTime mode a row older than the watermark
	// is an error. Default: none (the producer's clock).
	EventTime func(out O) int64
	// Sinks receive every partition batch that emitted rows, with the
	// batch's id, before its transaction commits (foreachBatch; see Sink):
	// a batch retried after a crash, an abort or a rebalance has the same
	// id and rows. With a sink every batch is planned first, in a small
	// transaction of its own. Default: none.
	Sinks []Sink[K, O]
	// EmitTo declares further output topics, each with the serializer of
	// its values (processor.NewOutputTopic), that the processor writes to
	// with processor.EmitTo, in the batch's transaction like Topic. Each
	// must exist: Run checks them at start (a missing one is an error
	// naming it). Default: none.
	EmitTo []processor.NamedTopic
}

// Topics is the short form of Topology.Inputs for topics whose values all
// decode with one serde: an Input per topic, in order.
//
//	Inputs: kstate.Topics(serde.String(), "clicks", "views"),
func Topics[I any](values serde.Deserializer[I], topics ...string) []Input[I] {
	out := make([]Input[I], len(topics))
	for i, t := range topics {
		out[i] = Input[I]{Topic: t, ValueSerde: values}
	}
	return out
}

// TopicsFromRecord is the short form of Topology.Inputs for topics whose
// values all decode with one function of the whole record (see
// Input.ValueFromRecord): an Input per topic, in order.
func TopicsFromRecord[I any](decode func(rec processor.Record) (I, error), topics ...string) []Input[I] {
	out := make([]Input[I], len(topics))
	for i, t := range topics {
		out[i] = Input[I]{Topic: t, ValueFromRecord: decode}
	}
	return out
}

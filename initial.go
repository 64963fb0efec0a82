package kstate

import (
	"iter"

	"github.com/kstate/kstate/internal/initial"
	"github.com/kstate/kstate/serde"
)

// InitialState is the initial state of an application, applied through the
// processor's HandleInitialState on the application's first run only. Build
// one with InitialStateFromSeq or InitialStateFromTopic; the processor must
// implement processor.InitialStateHandler[K, S] for the rows' type S.
//
// "First run" is decided per partition: a partition whose changelog holds
// no committed batch and whose group has no committed offset gets the rows
// whose keys hash to it (Kafka's murmur2 partitioner, so the input topic
// must be partitioned that way), in the same transaction as its first
// micro-batch, together with a marker that prevents a second application.
type InitialState[K any] interface {
	initial.Source[K]
}

// InitialStateFromSeq takes the initial state from a Go iterator of (key,
// value) pairs, e.g. read from a file. Several rows per key are allowed.
// The iterator is consumed once per Run, when the first partition needs it,
// and its rows are kept in memory for the rest of the Run.
func InitialStateFromSeq[K, S any](rows iter.Seq2[K, S]) InitialState[K] {
	return initial.FromSeq(rows)
}

// InitialStateFromTopic takes the initial state from a topic read from
// beginning to end (read_committed); record keys are grouping keys (decoded
// with Config.KeySerde) and values are decoded with codec.
func InitialStateFromTopic[K, S any](topic string, codec serde.Deserializer[S]) InitialState[K] {
	return initial.FromTopic[K](topic, codec)
}

package kstate

import (
	"context"
	"fmt"
	"iter"

	"github.com/kstate/kstate/internal/engine"
	"github.com/kstate/kstate/internal/kafka"
	"github.com/kstate/kstate/processor"
	"github.com/kstate/kstate/state"
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
	// rows returns every initial-state row with its encoded key.
	rows(ctx context.Context, brokers []string, kc state.Codec[K]) ([]engine.InitialRow[K], error)
	// check reports whether proc can take the rows.
	check(proc any) error
}

// InitialStateFromSeq takes the initial state from a Go iterator of (key,
// value) pairs, e.g. read from a file. Several rows per key are allowed.
// The iterator is consumed once per Run, when the first partition needs it,
// and its rows are kept in memory for the rest of the Run.
func InitialStateFromSeq[K, S any](rows iter.Seq2[K, S]) InitialState[K] {
	return initialSeq[K, S]{seq: rows}
}

// InitialStateFromTopic takes the initial state from a topic read from
// beginning to end (read_committed); record keys are grouping keys (decoded
// with Config.KeyCodec) and values are decoded with codec.
func InitialStateFromTopic[K, S any](topic string, codec state.Codec[S]) InitialState[K] {
	return initialTopic[K, S]{topic: topic, codec: codec}
}

func checkHandler[K, S any](proc any) error {
	if _, ok := proc.(processor.InitialStateHandler[K, S]); !ok {
		var k K
		var s S
		return fmt.Errorf("Config.InitialState has rows of type %T, but the processor %T does not implement processor.InitialStateHandler[%T, %T] (HandleInitialState(key %T, initial %T, tv processor.TimerValues) error)", s, proc, k, s, k, s)
	}
	return nil
}

func initialRow[K, S any](key K, kb []byte, v S) engine.InitialRow[K] {
	return engine.InitialRow[K]{Key: key, KeyBytes: kb, Apply: func(proc any, tv processor.TimerValues) error {
		return proc.(processor.InitialStateHandler[K, S]).HandleInitialState(key, v, tv)
	}}
}

type initialSeq[K, S any] struct{ seq iter.Seq2[K, S] }

func (s initialSeq[K, S]) check(proc any) error { return checkHandler[K, S](proc) }

func (s initialSeq[K, S]) rows(ctx context.Context, _ []string, kc state.Codec[K]) ([]engine.InitialRow[K], error) {
	var out []engine.InitialRow[K]
	for k, v := range s.seq {
		kb, err := kc.Encode(k)
		if err != nil {
			return nil, fmt.Errorf("kstate: initial state row %d: encode key %v: %w", len(out), k, err)
		}
		out = append(out, initialRow(k, kb, v))
		if len(out)%4096 == 0 && ctx.Err() != nil {
			return nil, ctx.Err()
		}
	}
	return out, nil
}

type initialTopic[K, S any] struct {
	topic string
	codec state.Codec[S]
}

func (s initialTopic[K, S]) check(proc any) error {
	if s.topic == "" || s.codec == nil {
		return fmt.Errorf("InitialStateFromTopic needs a topic and a codec")
	}
	return checkHandler[K, S](proc)
}

func (s initialTopic[K, S]) rows(ctx context.Context, brokers []string, kc state.Codec[K]) ([]engine.InitialRow[K], error) {
	recs, err := kafka.ReadAll(ctx, brokers, s.topic)
	if err != nil {
		return nil, fmt.Errorf("kstate: read initial state: %w", err)
	}
	out := make([]engine.InitialRow[K], 0, len(recs))
	for _, r := range recs {
		k, err := kc.Decode(r.Key)
		if err != nil {
			return nil, fmt.Errorf("kstate: initial state topic %q partition %d offset %d: decode key: %w", r.Topic, r.Partition, r.Offset, err)
		}
		v, err := s.codec.Decode(r.Value)
		if err != nil {
			return nil, fmt.Errorf("kstate: initial state topic %q partition %d offset %d: decode value: %w", r.Topic, r.Partition, r.Offset, err)
		}
		out = append(out, initialRow(k, r.Key, v))
	}
	return out, nil
}

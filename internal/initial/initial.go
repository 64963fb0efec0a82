// Package initial holds the implementations of kstate.InitialState: where the
// initial-state rows come from (a Go iterator or a Kafka topic) and how each
// is applied to a processor. Package kstate seals the interface (it embeds
// Source), so the engine and kstatetest can read the rows while users only
// build sources through kstate.InitialStateFromSeq and FromTopic.
package initial

import (
	"context"
	"fmt"
	"iter"

	"github.com/kstate/kstate/internal/engine"
	"github.com/kstate/kstate/processor"
	"github.com/kstate/kstate/serde"
)

// Record is one record of an initial-state topic.
type Record struct {
	Topic      string
	Partition  int32
	Offset     int64
	Key, Value []byte
}

// ReadTopic reads a whole topic, read_committed, from beginning to end.
type ReadTopic func(ctx context.Context, topic string) ([]Record, error)

// Source is the sealed side of kstate.InitialState.
type Source[K any] interface {
	// Rows returns every initial-state row with its encoded key; read is
	// used by topic sources.
	Rows(ctx context.Context, read ReadTopic, keys serde.Serde[K]) ([]engine.InitialRow[K], error)
	// Check reports whether proc (a new processor) can take the rows.
	Check(proc any) error
}

// FromSeq is a Source over a Go iterator.
func FromSeq[K, S any](rows iter.Seq2[K, S]) Source[K] { return seqSource[K, S]{seq: rows} }

// FromTopic is a Source over a topic whose values are decoded with d.
func FromTopic[K, S any](topic string, d serde.Deserializer[S]) Source[K] {
	return topicSource[K, S]{topic: topic, values: d}
}

func checkHandler[K, S any](proc any) error {
	if _, ok := proc.(processor.InitialStateHandler[K, S]); !ok {
		var k K
		var s S
		return fmt.Errorf("Topology.InitialState has rows of type %T, but the processor %T does not implement processor.InitialStateHandler[%T, %T] (HandleInitialState(key %T, initial %T, tv processor.TimerValues) error)", s, proc, k, s, k, s)
	}
	return nil
}

func row[K, S any](key K, kb []byte, v S) engine.InitialRow[K] {
	return engine.InitialRow[K]{Key: key, KeyBytes: kb, Apply: func(proc any, tv processor.TimerValues) error {
		return proc.(processor.InitialStateHandler[K, S]).HandleInitialState(key, v, tv)
	}}
}

type seqSource[K, S any] struct{ seq iter.Seq2[K, S] }

func (s seqSource[K, S]) Check(proc any) error { return checkHandler[K, S](proc) }

func (s seqSource[K, S]) Rows(ctx context.Context, _ ReadTopic, keys serde.Serde[K]) ([]engine.InitialRow[K], error) {
	var out []engine.InitialRow[K]
	for k, v := range s.seq {
		kb, err := keys.Serialize(k)
		if err != nil {
			return nil, fmt.Errorf("initial state row %d: serialize key %v: %w", len(out), k, err)
		}
		out = append(out, row(k, kb, v))
		if len(out)%4096 == 0 && ctx.Err() != nil {
			return nil, ctx.Err()
		}
	}
	return out, nil
}

type topicSource[K, S any] struct {
	topic  string
	values serde.Deserializer[S]
}

func (s topicSource[K, S]) Check(proc any) error {
	if s.topic == "" || s.values == nil {
		return fmt.Errorf("InitialStateFromTopic needs a topic and a value deserializer")
	}
	return checkHandler[K, S](proc)
}

func (s topicSource[K, S]) Rows(ctx context.Context, read ReadTopic, keys serde.Serde[K]) ([]engine.InitialRow[K], error) {
	if read == nil {
		return nil, fmt.Errorf("initial state topic %q: no Kafka to read it from", s.topic)
	}
	recs, err := read(ctx, s.topic)
	if err != nil {
		return nil, fmt.Errorf("read initial state topic %q: %w", s.topic, err)
	}
	out := make([]engine.InitialRow[K], 0, len(recs))
	for _, r := range recs {
		k, err := keys.Deserialize(r.Key)
		if err != nil {
			return nil, fmt.Errorf("initial state topic %q partition %d offset %d: key: %w", r.Topic, r.Partition, r.Offset, err)
		}
		v, err := s.values.Deserialize(r.Value)
		if err != nil {
			return nil, fmt.Errorf("initial state topic %q partition %d offset %d: value: %w", r.Topic, r.Partition, r.Offset, err)
		}
		out = append(out, row(k, r.Key, v))
	}
	return out, nil
}

package engine

import (
	"fmt"
	"slices"

	"github.com/kstate/kstate/internal/recordsize"
	"github.com/kstate/kstate/processor"
)

// emitter is the Emitter of one HandleInputRows/HandleExpiredTimer call. An
// error it reports is sticky: the batch fails even if the processor ignores
// the error Emit returned.
type emitter[K, I, O any] struct {
	t        *Task[K, I, O]
	key      K
	keyBytes []byte
	method   string
	out      *[]Output
	done     bool
	err      error
}

func (e *emitter[K, I, O]) Emit(o O) error { return e.EmitMeta(o, processor.OutputMeta{}) }

// EmitMeta is processor.EmitWith: Emit with the key, timestamp and headers
// of m where set.
func (e *emitter[K, I, O]) EmitMeta(o O, m processor.OutputMeta) error {
	if err := e.usable(); err != nil {
		return err
	}
	cfg := &e.t.cfg
	ts, hasTs := int64(-1), false
	switch {
	case !m.Timestamp.IsZero():
		ts, hasTs = m.Timestamp.UnixMilli(), true
	case cfg.OutputEventTime != nil:
		ts, hasTs = cfg.OutputEventTime(o), true
	}
	if hasTs {
		if err := e.checkLate("Emit", ts); err != nil {
			return err
		}
	}
	v, err := cfg.OutputSerde.Serialize(o)
	if err != nil {
		e.err = fmt.Errorf("Emit: encode output: %w", err)
		return e.err
	}
	seq := e.t.emitSeq
	e.t.emitSeq++
	k := m.Key
	if k == nil {
		k = e.keyBytes
		if cfg.OutputKey != nil {
			k = cfg.OutputKey(e.key, o)
		}
	}
	if err := e.add("Emit", Output{Key: k, Value: v, TimestampMs: ts, Seq: seq, Headers: headers(m.Headers)}); err != nil {
		return err
	}
	if cfg.Sink != nil {
		// The sink's typed rows: the main output's rows only (not
		// EmitTo's); a discarded call cuts them at its savepoint.
		e.t.sinkKeys = append(e.t.sinkKeys, e.key)
		e.t.sinkValues = append(e.t.sinkValues, o)
	}
	return nil
}

// EmitToTopic is processor.EmitTo: value (encoded by the topic's
// serializer, or encodeErr) to a declared output topic.
func (e *emitter[K, I, O]) EmitToTopic(topic string, value []byte, encodeErr error, m processor.OutputMeta) error {
	if err := e.usable(); err != nil {
		return err
	}
	op := fmt.Sprintf("EmitTo(%q)", topic)
	if !e.t.cfg.OutputTopics[topic] {
		e.err = fmt.Errorf("%s: %w", op, ErrUndeclaredTopic)
		return e.err
	}
	if encodeErr != nil {
		e.err = fmt.Errorf("%s: encode output: %w", op, encodeErr)
		return e.err
	}
	ts := int64(-1)
	if !m.Timestamp.IsZero() {
		ts = m.Timestamp.UnixMilli()
		if err := e.checkLate(op, ts); err != nil {
			return err
		}
	}
	k := m.Key
	if k == nil {
		k = e.keyBytes
	}
	return e.add(op, Output{Topic: topic, Key: k, Value: value, TimestampMs: ts, Seq: -1, Headers: headers(m.Headers)})
}

// usable reports an Emitter used after its call, or a sticky error.
func (e *emitter[K, I, O]) usable() error {
	if e.done {
		return ErrEmitOutsideCall
	}
	return e.err
}

// checkLate: in EventTime mode an output's event time is checked against
// the watermark for late events (the previous batch's), not the one timers
// fire at, as Spark does: a timer that fires at watermark W may emit a row
// stamped with its own expiry ≤ W, which downstream sees as on time.
func (e *emitter[K, I, O]) checkLate(op string, ts int64) error {
	if lw := e.t.lateWatermark; e.t.cfg.TimeMode == processor.EventTime && lw != noWatermark && ts < lw {
		e.err = fmt.Errorf("%s: %w: event time %d, watermark for late events %d", op, ErrLateOutput, ts, lw)
		return e.err
	}
	return nil
}

// add appends o after checking its size: per key, with the producer's
// limit and measure, rather than left to the producer, whose refusal would
// fail the whole transaction on every retry.
func (e *emitter[K, I, O]) add(op string, o Output) error {
	var hs recordsize.Headers
	for _, h := range o.Headers {
		hs.Add(h.Key, h.Value)
	}
	if n := recordsize.Of(o.Key, o.Value, hs); e.t.cfg.MaxOutputBytes > 0 && n > e.t.cfg.MaxOutputBytes {
		e.err = fmt.Errorf("%s: %w: the record is %d bytes as Kafka counts them, over Options.Kafka.MaxRecordBytes = %d", op, ErrOutputTooLarge, n, e.t.cfg.MaxOutputBytes)
		return e.err
	}
	*e.out = append(*e.out, o)
	return nil
}

// headers copies the slice of an output's headers (not their bytes, as
// with the key and value): the processor may reuse its slice for the next
// emit, while the output keeps them until the batch is produced. nil stays
// nil.
func headers(hs []processor.Header) []Header {
	if len(hs) == 0 {
		return nil
	}
	return slices.Clone(hs)
}

// close ends the call; it returns the sticky error as a UserError: an
// emit's, or a state write's refused for being over MaxOutputBytes
// (shard.ErrValueTooLarge), even if the processor ignored it, so that the
// processing-error policy handles it per key like an oversized output.
func (e *emitter[K, I, O]) close() error {
	e.done = true
	if err := e.t.shard.TakeOversize(); err != nil && e.err == nil {
		e.err = err
	}
	if e.err == nil {
		return nil
	}
	return &UserError{Method: e.method, Key: fmt.Sprintf("%#v", e.key), Partition: e.t.cfg.Partition, Err: e.err}
}

var _ processor.Emitter[int] = (*emitter[int, int, int])(nil)

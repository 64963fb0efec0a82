package engine

import (
	"fmt"

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

func (e *emitter[K, I, O]) Emit(o O) error {
	if e.done {
		return ErrEmitOutsideCall
	}
	if e.err != nil {
		return e.err
	}
	cfg := &e.t.cfg
	ts := int64(-1)
	if cfg.OutputEventTime != nil {
		ts = cfg.OutputEventTime(o)
		// Checked against the watermark for late events (the previous
		// batch's), not the one timers fire at, as Spark does: a timer
		// that fires at watermark W may emit a row stamped with its own
		// expiry ≤ W, which downstream sees as on time.
		if lw := e.t.lateWatermark; cfg.TimeMode == processor.EventTime && lw != noWatermark && ts < lw {
			e.err = fmt.Errorf("Emit: %w: event time %d, watermark for late events %d", ErrLateOutput, ts, lw)
			return e.err
		}
	}
	v, err := cfg.OutputSerde.Serialize(o)
	if err != nil {
		e.err = fmt.Errorf("Emit: encode output: %w", err)
		return e.err
	}
	seq := e.t.emitSeq
	e.t.emitSeq++
	k := e.keyBytes
	if cfg.OutputKey != nil {
		k = cfg.OutputKey(e.key, o)
	}
	if n := recordsize.Of(k, v, nil); cfg.MaxOutputBytes > 0 && n > cfg.MaxOutputBytes {
		// Checked here, per key, with the producer's limit and measure,
		// rather than left to the producer, whose refusal would fail the
		// whole transaction on every retry.
		e.err = fmt.Errorf("Emit: %w: the record is %d bytes as Kafka counts them, over Config.MaxRecordBytes = %d", ErrOutputTooLarge, n, cfg.MaxOutputBytes)
		return e.err
	}
	*e.out = append(*e.out, Output{Key: k, Value: v, TimestampMs: ts, Seq: seq})
	if cfg.Sink != nil {
		// In lockstep with the outputs (a discarded call cuts both).
		e.t.sinkKeys = append(e.t.sinkKeys, e.key)
		e.t.sinkValues = append(e.t.sinkValues, o)
	}
	return nil
}

// close ends the call; it returns the sticky error as a UserError.
func (e *emitter[K, I, O]) close() error {
	e.done = true
	if e.err == nil {
		return nil
	}
	return &UserError{Method: e.method, Key: fmt.Sprintf("%#v", e.key), Partition: e.t.cfg.Partition, Err: e.err}
}

var _ processor.Emitter[int] = (*emitter[int, int, int])(nil)

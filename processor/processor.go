package processor

import (
	"fmt"
	"iter"
)

// StatefulProcessor is the user's per-key logic. K is the grouping key, I the
// input row and O the output row type. Every method returns an error instead
// of panicking; a panic is recovered by the engine and reported like an error
// naming the method, the key and the partition.
type StatefulProcessor[K, I, O any] interface {
	// Init is called once per partition task before anything else. It
	// declares the state variables (NewValueState, ...) and may drop old
	// ones (Handle.DeleteIfExists). It must not register timers or emit.
	Init(h Handle) error
	// HandleInputRows is called once per grouping key present in a
	// micro-batch with all of that key's rows, in offset order.
	HandleInputRows(key K, rows iter.Seq[I], tv TimerValues, out Emitter[O]) error
	// HandleExpiredTimer is called once per expired timer of key, after all
	// HandleInputRows calls of the batch, in ascending (expiry, key) order.
	// The timer is deleted when the call returns without error.
	HandleExpiredTimer(key K, tv TimerValues, t ExpiredTimerInfo, out Emitter[O]) error
	// Close is called when the partition task stops (revoke, shutdown). It
	// must not touch state.
	Close() error
}

// InitialStateHandler is the optional capability of a processor that accepts
// initial state rows of type S. The engine calls it only on the application's
// first run, once per initial-state row, before any input row of the key's
// partition; the rows are committed in the same transaction as that
// partition's first micro-batch. It may read and write state and timers but
// cannot emit.
type InitialStateHandler[K, S any] interface {
	HandleInitialState(key K, initial S, tv TimerValues) error
}

// Emitter receives the output rows of a HandleInputRows or HandleExpiredTimer
// call. It is only valid during that call.
type Emitter[O any] interface {
	Emit(O) error
}

// EmitterFunc adapts a function to an Emitter (handy in processor tests).
type EmitterFunc[O any] func(O) error

// Emit calls f(o).
func (f EmitterFunc[O]) Emit(o O) error { return f(o) }

// TimeMode selects what timers and TTL are evaluated against. It is fixed
// per application: changing it across restarts is a start-up error.
type TimeMode int

const (
	// NoTime: no timers, no TTL.
	NoTime TimeMode = iota
	// ProcessingTime: timers and TTL are evaluated against the micro-batch's
	// processing time (one timestamp per batch, from the engine's clock).
	ProcessingTime
	// EventTime: timers fire when the partition's event-time watermark
	// passes them. No TTL.
	EventTime
)

func (m TimeMode) String() string {
	switch m {
	case NoTime:
		return "NoTime"
	case ProcessingTime:
		return "ProcessingTime"
	case EventTime:
		return "EventTime"
	}
	return fmt.Sprintf("TimeMode(%d)", int(m))
}

// Valid reports whether m is one of the defined modes.
func (m TimeMode) Valid() bool { return m >= NoTime && m <= EventTime }

// OutputMode is Spark's output mode of the operator. It is fixed per
// application: changing it across restarts is a start-up error.
type OutputMode int

const (
	// Append: every emitted row is a new, final row.
	Append OutputMode = iota
	// Update: emitted rows update earlier rows of the same key downstream.
	Update
)

func (m OutputMode) String() string {
	switch m {
	case Append:
		return "Append"
	case Update:
		return "Update"
	}
	return fmt.Sprintf("OutputMode(%d)", int(m))
}

// Valid reports whether m is one of the defined modes.
func (m OutputMode) Valid() bool { return m == Append || m == Update }

// TimerValues carries the time of the micro-batch in progress. User code
// must take time from here, never from the wall clock: every call of one
// batch then agrees on "now", and tests can drive time through the engine's
// injected clock.
type TimerValues struct {
	processingTimeMs int64
	watermarkMs      int64
}

// NewTimerValues returns TimerValues; −1 marks a value as unavailable.
func NewTimerValues(processingTimeMs, watermarkMs int64) TimerValues {
	return TimerValues{processingTimeMs: processingTimeMs, watermarkMs: watermarkMs}
}

// ProcessingTimeMs is the batch's processing time in ms since the epoch, taken
// once per batch; −1 in NoTime mode.
func (tv TimerValues) ProcessingTimeMs() int64 { return tv.processingTimeMs }

// WatermarkMs is the partition's event-time watermark in ms in effect for the
// batch; −1 outside EventTime mode and before the first event was seen.
func (tv TimerValues) WatermarkMs() int64 { return tv.watermarkMs }

// ExpiredTimerInfo describes the timer being fired.
type ExpiredTimerInfo struct {
	// ExpiryTimeMs is the timer's timestamp as registered.
	ExpiryTimeMs int64
}

// QueryInfo identifies the running query.
type QueryInfo struct {
	// ApplicationID is the application (consumer group) id; stable across runs.
	ApplicationID string
	// RunID is unique per App.Run call.
	RunID string
	// BatchID counts the partition's committed non-empty micro-batches; it
	// is stable across retries of the same batch.
	BatchID int64
	// Partition is the input partition of the task.
	Partition int32
}

// Defaults gives a processor a no-op HandleExpiredTimer and Close, like the
// default methods of Spark's StatefulProcessor. Embed it in a processor that
// uses no timers and holds nothing to release:
//
//	type Counter struct {
//		processor.Defaults[string, string]
//		count state.ValueState[int64]
//	}
//
// A processor that registers timers must define HandleExpiredTimer itself;
// with Defaults its timers would fire and do nothing.
type Defaults[K, O any] struct{}

// HandleExpiredTimer does nothing.
func (Defaults[K, O]) HandleExpiredTimer(K, TimerValues, ExpiredTimerInfo, Emitter[O]) error {
	return nil
}

// Close does nothing.
func (Defaults[K, O]) Close() error { return nil }

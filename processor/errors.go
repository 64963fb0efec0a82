package processor

import (
	"errors"
	"fmt"
)

var (
	// ErrNoTimers is returned by timer operations in NoTime mode.
	ErrNoTimers = errors.New("processor: timers are not available in NoTime mode; use ProcessingTime or EventTime")
	// ErrNoKey is returned by key-scoped operations called outside
	// HandleInputRows, HandleExpiredTimer and HandleInitialState (e.g. in Init).
	ErrNoKey = errors.New("processor: no current grouping key; only allowed in HandleInputRows, HandleExpiredTimer and HandleInitialState")
	// ErrNotInit is returned by DeleteIfExists called outside Init.
	ErrNotInit = errors.New("processor: only allowed in Init")
	// ErrLateOutput is returned by Emit (and fails the batch) in EventTime
	// mode when kstate.Topology.Output.EventTime gives a row an event time older than
	// the watermark the previous batch ran with: downstream would see it as
	// late. Emit rows at or after TimerValues.WatermarkMs.
	ErrLateOutput = errors.New("processor: output event time is older than the watermark")
	// ErrEmitOutsideCall is returned by an Emitter used after the
	// HandleInputRows or HandleExpiredTimer call it was passed to returned.
	ErrEmitOutsideCall = errors.New("processor: Emit called after its handler returned (an Emitter is only valid during the call)")
	// ErrForeignHandle is returned when a Handle not created by this package is used.
	ErrForeignHandle = errors.New("processor: handle was not created by the kstate engine (test a processor with package kstatetest)")
)

// OpError names the Handle operation that failed.
type OpError struct {
	Op  string // e.g. "RegisterTimer(1700000000000)"
	Err error
}

func (e *OpError) Error() string {
	// Sentinels already carry the "processor:" prefix.
	return fmt.Sprintf("processor: %s: %v", e.Op, trimPrefix(e.Err))
}

func (e *OpError) Unwrap() error { return e.Err }

func trimPrefix(err error) string {
	s := err.Error()
	const p = "processor: "
	if len(s) > len(p) && s[:len(p)] == p {
		return s[len(p):]
	}
	return s
}

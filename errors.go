package kstate

import (
	"errors"

	"github.com/kstate/kstate/internal/engine"
)

var (
	// ErrConfig is wrapped by every configuration error returned by New.
	ErrConfig = errors.New("kstate: invalid config")
	// ErrRunning is returned by a second concurrent or repeated Run.
	ErrRunning = errors.New("kstate: Run already called on this App")
)

// Errors of processor code, undecodable records and mode changes keep their
// type through Run's error chain; use errors.As with these.
type (
	// UserError is an error returned, or a panic raised, by the processor;
	// it names the method, the grouping key and the partition.
	UserError = engine.UserError
	// DecodeError is an input record that cannot be decoded; it names the
	// topic, partition and offset. Nothing from its batch on is committed.
	DecodeError = engine.DecodeError
	// ModeError is a time or output mode that differs from the one the
	// application's state was created with.
	ModeError = engine.ModeError
)

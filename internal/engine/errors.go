package engine

import (
	"errors"
	"fmt"

	"github.com/kstate/kstate/processor"
)

var (
	// ErrClosed is returned by a task used after Close.
	ErrClosed = errors.New("engine: task is closed")
	// ErrInBatch is returned when a batch is started while one is in progress.
	ErrInBatch = errors.New("engine: a batch is already in progress (call Commit or Abort)")
	// ErrNoBatch is returned by Commit without a batch in progress.
	ErrNoBatch = errors.New("engine: no batch in progress")
	// ErrLateOutput is processor.ErrLateOutput, wrapped by a UserError when a processor emits a row
	// whose event time is older than the watermark.
	ErrLateOutput = processor.ErrLateOutput
	// ErrEmitOutsideCall is wrapped when an Emitter is used after its call returned.
	ErrEmitOutsideCall = processor.ErrEmitOutsideCall
)

// UserError is an error returned by, or a panic recovered from, processor
// code. It names the method, the grouping key and the partition.
type UserError struct {
	Method    string // "Init", "HandleInputRows", ...
	Key       string // formatted grouping key; empty for Init and Close
	Partition int32
	Err       error // the returned error; nil when Panic is set
	Panic     any   // the recovered value
	Stack     []byte
}

func (e *UserError) Error() string {
	where := e.Method
	if e.Key != "" {
		where = fmt.Sprintf("%s(key %s)", e.Method, e.Key)
	}
	if e.Panic != nil {
		return fmt.Sprintf("partition %d: %s panicked: %v", e.Partition, where, e.Panic)
	}
	return fmt.Sprintf("partition %d: %s: %v", e.Partition, where, e.Err)
}

func (e *UserError) Unwrap() error { return e.Err }

// DecodeError is a record that cannot be decoded with the configured codecs.
type DecodeError struct {
	Topic     string
	Partition int32
	Offset    int64
	Part      string // "key" or "value"
	Err       error
}

func (e *DecodeError) Error() string {
	return fmt.Sprintf("cannot decode record %s at topic %q partition %d offset %d: %v",
		e.Part, e.Topic, e.Partition, e.Offset, e.Err)
}

func (e *DecodeError) Unwrap() error { return e.Err }

// ModeError is a time mode or output mode that differs from the one the
// application's state was created with.
type ModeError struct {
	Partition int32
	What      string // "time mode" or "output mode"
	Old, New  string
}

func (e *ModeError) Error() string {
	return fmt.Sprintf("partition %d: %s changed from %s to %s across restarts; "+
		"it is fixed per application: run with %s again, or use a new application id",
		e.Partition, e.What, e.Old, e.New, e.Old)
}

var (
	// ErrFenced is wrapped by a Session error when a newer instance with the
	// same transactional or group instance id took over: this instance is a
	// zombie and must stop.
	ErrFenced = errors.New("engine: fenced by a newer instance with the same transactional or group instance id")
	// ErrOffsetOutOfRange is wrapped by Changelog.Open when the start offset
	// is not in the partition's log (records deleted, topic recreated).
	ErrOffsetOutOfRange = errors.New("engine: offset out of range")
	// ErrUnavailable is wrapped by an Admin or Session error when the
	// cluster could not be reached (or is not ready): at start-up the
	// coordinator retries such errors for StartupTimeout.
	ErrUnavailable = errors.New("engine: Kafka unreachable")
)

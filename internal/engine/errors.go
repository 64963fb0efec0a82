package engine

import (
	"errors"
	"fmt"
	"time"

	"github.com/kstate/kstate/processor"
)

var (
	// ErrClosed is returned by a task used after Close.
	ErrClosed = errors.New("engine: task is closed")
	// ErrInBatch is returned when a batch is started while one is in progress.
	ErrInBatch = errors.New("engine: a batch is already in progress (call Commit or Abort)")
	// ErrNoBatch is returned by Commit without a batch in progress.
	ErrNoBatch = errors.New("engine: no batch in progress")
	// ErrAbandoned is returned by RunBatch after Abandon.
	ErrAbandoned = errors.New("engine: batch abandoned by its owner")
	// ErrLateOutput is processor.ErrLateOutput, wrapped by a UserError when a processor emits a row
	// whose event time is older than the watermark.
	ErrLateOutput = processor.ErrLateOutput
	// ErrEmitOutsideCall is wrapped when an Emitter is used after its call returned.
	ErrEmitOutsideCall = processor.ErrEmitOutsideCall
	// ErrNilKey is wrapped by the DecodeError of an input record without a
	// key (Part "key"): a grouping key is required, and a nil key is not
	// the empty key.
	ErrNilKey = errors.New("kstate: record has no key (a nil key); every input record needs a grouping key")
	// ErrKeyPartition is wrapped by the DecodeError (Part "key") of a
	// record whose key does not hash (murmur2) to the partition it was
	// read from, under KeyPartitionFail.
	ErrKeyPartition = errors.New("kstate: record key does not hash to the partition it was read from " +
		"(the producer did not use Kafka's default partitioner on the grouping key)")
	// ErrOutputTooLarge is wrapped when an emitted record is larger than
	// the producer can send.
	ErrOutputTooLarge = errors.New("kstate: output record too large")
)

// Policy says what a bad record or a failing key does (the root package's
// OnDecodeError, OnKeyPartitionMismatch and OnProcessingError).
type Policy int

const (
	// PolicyFail fails the batch: nothing of it is committed and Run stops.
	PolicyFail Policy = iota
	// PolicySkip drops the record (logged at Warn, counted).
	PolicySkip
	// PolicyDeadLetter writes the record (or the failing key's rows) to
	// the dead-letter topic in the batch's transaction.
	PolicyDeadLetter
	// PolicyAllow processes the record anyway (logged once per partition
	// at Warn, counted); key-partition mismatches only.
	PolicyAllow
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

// ErrStuck is wrapped by a StuckError.
var ErrStuck = errors.New("engine: a processor call did not return in time")

// StuckError is a batch abandoned because user code did not return: past
// MaxBatchDuration (the instance gives its partitions up) or, during a
// shutdown, past ShutdownTimeout. Nothing of the batch was committed.
type StuckError struct {
	Partition int32
	Method    string        // the processor method in progress; "RunBatch" when none was
	Key       string        // formatted grouping key; empty when none
	For       time.Duration // age of the batch when it was abandoned
	Limit     string        // "MaxBatchDuration" or "ShutdownTimeout"
}

func (e *StuckError) Error() string {
	where := e.Method
	if e.Key != "" {
		where = fmt.Sprintf("%s(key %s)", e.Method, e.Key)
	}
	if e.Limit == LimitShutdown {
		return fmt.Sprintf("partition %d: %s was still running %v into its batch when ShutdownTimeout expired: "+
			"the batch was abandoned, nothing of it was committed", e.Partition, where, e.For)
	}
	return fmt.Sprintf("partition %d: %s did not return within MaxBatchDuration (%v): the instance gave its partitions up "+
		"and nothing of the batch was committed; find why the call blocks (the log has its stack), "+
		"or raise MaxBatchDuration if batches are legitimately this slow", e.Partition, where, e.For)
}

func (e *StuckError) Unwrap() error { return ErrStuck }

// StuckError.Limit values.
const (
	LimitMaxBatch = "MaxBatchDuration"
	LimitShutdown = "ShutdownTimeout"
)

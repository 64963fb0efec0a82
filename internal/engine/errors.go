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
	// ErrUndeclaredTopic is wrapped when processor.EmitTo names a topic
	// missing from Topology.Output.EmitTo.
	ErrUndeclaredTopic = errors.New("kstate: output topic not declared in Topology.Output.EmitTo")
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
	Method    string        // the processor method in progress; "RunBatch" when none was ("NewProcessor" at a partition's start)
	Key       string        // formatted grouping key; empty when none
	For       time.Duration // age of the batch when it was abandoned
	Limit     string        // "MaxBatchDuration" or "ShutdownTimeout"
}

func (e *StuckError) Error() string {
	where := e.Method
	if e.Key != "" {
		where = fmt.Sprintf("%s(key %s)", e.Method, e.Key)
	}
	if e.Method == "Init" || e.Method == "NewProcessor" {
		// The partition's start (restore goroutine), not a batch.
		if e.Limit == LimitShutdown {
			return fmt.Sprintf("partition %d: the processor's %s was still running %v into the partition's start when ShutdownTimeout expired: "+
				"the partition was given up before it processed anything", e.Partition, where, e.For)
		}
		return fmt.Sprintf("partition %d: the processor's %s did not return within MaxBatchDuration (%v): the instance gave its partitions up "+
			"before this one processed anything; find why the call blocks (the log has its stack), "+
			"or raise MaxBatchDuration if it is legitimately this slow", e.Partition, where, e.For)
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

// ErrUnknownTopic is wrapped by Admin.Partitions when the topic does not
// exist.
var ErrUnknownTopic = errors.New("engine: unknown topic")

// PartitionsChangedError is a change of the input topic's partition count
// under an application: Kafka's default partitioner then routes keys to
// other partitions, whose state is not theirs, so nothing is processed on
// the new layout. Old is the count the state was built on (the changelog's
// partition count), New the input topic's count now.
type PartitionsChangedError struct {
	Topic     string // the input topic
	Changelog string // the changelog topic, which keeps the old layout
	Old, New  int
}

func (e *PartitionsChangedError) Error() string {
	return fmt.Sprintf("the partition count of input topic %q changed from %d to %d (changelog %q has %d): "+
		"keys now map to other partitions, so nothing is processed on the new layout; "+
		"to continue, stop the application and rebuild its state for the new count as a new application id with kstate state rescale "+
		"(README: \"Changing the number of input partitions\")",
		e.Topic, e.Old, e.New, e.Changelog, e.Old)
}

// ChangelogLostError is a changelog partition that no longer holds the
// shard's state (topic deleted, recreated or truncated below the shard's
// offset) while the local shard cannot be proven consistent with the
// group's committed offset, so it cannot re-seed the changelog either. The
// shard is left untouched on disk.
type ChangelogLostError struct {
	Changelog   string
	Partition   int32
	ShardDir    string // "" for an in-memory shard
	ShardOffset int64  // the changelog offset the shard was restored to
	// StateOffset is the shard's input offset (MetaInputOffset); HasState
	// is false when the shard never committed a batch with input.
	StateOffset  int64
	HasState     bool
	Committed    int64 // the group's committed input offset
	HasCommitted bool
	// Input is the input topic whose offsets disagree, with several input
	// topics ("" with one).
	Input string
}

func (e *ChangelogLostError) Error() string {
	state, committed := "no input offset", "no committed offset"
	if e.HasState {
		state = fmt.Sprintf("input offset %d", e.StateOffset)
	}
	if e.HasCommitted {
		committed = fmt.Sprintf("committed input offset %d", e.Committed)
	}
	if e.Input != "" {
		state += fmt.Sprintf(" of input topic %q", e.Input)
		committed += fmt.Sprintf(" of input topic %q", e.Input)
	}
	dir := e.ShardDir
	if dir == "" {
		dir = fmt.Sprintf("the shard of partition %d", e.Partition)
	}
	return fmt.Sprintf("partition %d: restore: the changelog %q no longer contains the shard's offset %d (topic deleted, recreated or truncated), "+
		"and the local shard (%s, state up to %s) is not consistent with the group's %s, so it cannot re-seed the changelog: "+
		"the shard is left untouched; restore the changelog topic, or delete %s to rebuild it from the changelog, "+
		"or start a new application id with this state as initial state",
		e.Partition, e.Changelog, e.ShardOffset, dir, state, committed, dir)
}

package kstate

import (
	"errors"
	"fmt"
	"time"

	"github.com/kstate/kstate/internal/engine"
	"github.com/kstate/kstate/internal/kafka"
	"github.com/kstate/kstate/internal/shard"
)

var (
	// ErrConfig is wrapped by every configuration error returned by New.
	ErrConfig = errors.New("kstate: invalid config")
	// ErrRunning is returned by a second concurrent or repeated Run.
	ErrRunning = errors.New("kstate: Run already called on this App")
	// ErrFenced is wrapped by Run's error when a newer instance with the
	// same InstanceID (transactional id) took over: this instance stopped
	// without committing anything more. Check that every running instance
	// has its own InstanceID.
	ErrFenced = errors.New("kstate: fenced by a newer instance with the same instance id")
	// ErrNilKey is wrapped by the DecodeError (Part "key") of an input
	// record without a key: every record needs a grouping key, and a nil
	// key is not the empty key. Topology.OnDecodeError applies.
	ErrNilKey = engine.ErrNilKey
	// ErrKeyPartition is wrapped by the DecodeError (Part "key") of a
	// record whose key does not hash to the partition it was read from,
	// under KeyPartitionFail; the message names the partition it hashes to.
	ErrKeyPartition = engine.ErrKeyPartition
	// ErrOutputTooLarge is wrapped by the UserError of a handler call that
	// emitted a record larger than Options.Kafka.MaxRecordBytes (as Kafka counts
	// it: key + value + ~80 bytes). Topology.OnProcessingError applies.
	ErrOutputTooLarge = engine.ErrOutputTooLarge
	// ErrStateTooLarge is wrapped by the error of a state write (a
	// ValueState value, ListState element or MapState entry) whose
	// changelog record would be larger than Options.Kafka.MaxRecordBytes (as
	// Kafka counts it: key + value + ~80 bytes): the write is refused, and
	// the call that made it fails with a UserError wrapping it even if the
	// processor ignored the error, naming the variable and the grouping
	// key. Topology.OnProcessingError applies, as to an oversized output.
	ErrStateTooLarge = shard.ErrValueTooLarge
	// ErrUndeclaredTopic is wrapped by the UserError of a handler call
	// that emitted (processor.EmitTo) to a topic missing from
	// Topology.Output.EmitTo. Topology.OnProcessingError applies.
	ErrUndeclaredTopic = engine.ErrUndeclaredTopic
	// ErrStuck is wrapped by every StuckError.
	ErrStuck = errors.New("kstate: a processor call did not return in time")
	// ErrRecordTooLarge is wrapped by every *RecordTooLargeError.
	ErrRecordTooLarge = errors.New("kstate: record too large")
)

// StuckError is a micro-batch, or a partition's start, given up because a
// processor call did not return: within MaxBatchDuration (the instance
// gave its partitions up) or, after Run's ctx was cancelled, within
// ShutdownTimeout. Nothing of the batch was committed; the records are
// processed again by the partitions' next owner. A start given up (Method
// "Init", or "NewProcessor") had processed nothing. It matches ErrStuck.
type StuckError struct {
	Partition int32
	Method    string        // "HandleInputRows", "HandleExpiredTimer", "HandleInitialState"; "RunBatch" outside them; "Init" or "NewProcessor" at a partition's start
	Key       string        // formatted grouping key; empty when none
	For       time.Duration // how long the batch (or the Init call) had run
	Limit     string        // "MaxBatchDuration" or "ShutdownTimeout"
}

func (e *StuckError) Error() string {
	return "kstate: " + (&engine.StuckError{Partition: e.Partition, Method: e.Method, Key: e.Key, For: e.For, Limit: e.Limit}).Error()
}

func (e *StuckError) Unwrap() error { return ErrStuck }

// RecordTooLargeError is a produced record over Options.Kafka.MaxRecordBytes
// that was not found earlier, at the Emit or the state write that made it
// (those fail their call: ErrOutputTooLarge, ErrStateTooLarge). It is
// found before anything of its batch is sent; the batch was not
// committed. Raise MaxRecordBytes (and the topic's max.message.bytes) or
// make the record smaller.
type RecordTooLargeError struct {
	Topic     string
	Partition int32 // -1 when the partition was to be chosen by key
	Key       []byte
	Size      int // bytes, as Kafka counts them against max.message.bytes
	Limit     int // Options.Kafka.MaxRecordBytes
}

func (e *RecordTooLargeError) Error() string {
	return fmt.Sprintf("kstate: a record of %d bytes (key %.64q) for topic %q is over the client-side limit Options.Kafka.MaxRecordBytes = %d: "+
		"raise MaxRecordBytes (and the topic's max.message.bytes), or make the record smaller",
		e.Size, e.Key, e.Topic, e.Limit)
}

// Unwrap makes errors.Is(err, ErrRecordTooLarge) true.
func (e *RecordTooLargeError) Unwrap() error { return ErrRecordTooLarge }

// UserError is an error returned, or a panic raised, by the processor; it
// names the method, the grouping key and the partition. Nothing of the
// batch it happened in was committed.
type UserError struct {
	Method    string // "Init", "HandleInputRows", "HandleExpiredTimer", ...
	Key       string // formatted grouping key; empty for Init and Close
	Partition int32
	Err       error // the returned error; nil when Panic is set
	Panic     any   // the recovered value
	Stack     []byte
}

// Error has the engine's wording (one place words each error) with this
// package's prefix.
func (e *UserError) Error() string {
	return "kstate: " + (&engine.UserError{Method: e.Method, Key: e.Key, Partition: e.Partition, Err: e.Err, Panic: e.Panic}).Error()
}

func (e *UserError) Unwrap() error { return e.Err }

// DecodeError is an input record that cannot be decoded; it names the
// topic, partition and offset. Nothing from its batch on is committed.
type DecodeError struct {
	Topic     string
	Partition int32
	Offset    int64
	Part      string // "key" or "value"
	Err       error
}

func (e *DecodeError) Error() string {
	return "kstate: " + (&engine.DecodeError{Topic: e.Topic, Partition: e.Partition, Offset: e.Offset, Part: e.Part, Err: e.Err}).Error()
}

func (e *DecodeError) Unwrap() error { return e.Err }

// ModeError is a time or output mode that differs from the one the
// application's state was created with.
type ModeError struct {
	Partition int32
	What      string // "time mode" or "output mode"
	Old, New  string
}

func (e *ModeError) Error() string {
	return "kstate: " + (&engine.ModeError{Partition: e.Partition, What: e.What, Old: e.Old, New: e.New}).Error()
}

// PartitionsChangedError is returned by Run when the input topic's
// partition count differs from the one the application's state was built
// on (the changelog topic's partition count), at start or while running.
// Kafka's default partitioner routes a key by murmur2(key) mod N, so keys
// would move to partitions that do not hold their state; nothing is
// committed on the new layout. The supported procedure (README: "Changing
// the number of input partitions"): stop the application and rebuild its
// state for the new count as a new application id with kstate state
// rescale (or export it as a new application's Topology.InitialState).
type PartitionsChangedError struct {
	Topic     string // the input topic
	Changelog string // the changelog topic, which keeps the old count
	Old, New  int    // partition counts: the state's, the input topic's now
}

func (e *PartitionsChangedError) Error() string {
	return "kstate: " + (&engine.PartitionsChangedError{Topic: e.Topic, Changelog: e.Changelog, Old: e.Old, New: e.New}).Error()
}

// ChangelogLostError is returned by Run when a changelog partition no
// longer holds the state of the local shard (topic deleted, recreated or
// truncated) and the shard cannot re-seed it, because its input offset is
// not the group's committed offset of the partition (the shard is stale,
// or the offsets were moved). The shard is left untouched on disk. A
// consistent shard re-seeds the changelog by itself and Run continues.
// See docs/OPERATIONS.md, "A lost changelog".
type ChangelogLostError struct {
	Changelog   string
	Partition   int32
	ShardDir    string // the shard's directory
	ShardOffset int64  // the changelog offset the shard was restored to
	// StateOffset is the input offset the shard's state was built up to;
	// HasState is false when it never committed a batch with input.
	StateOffset int64
	HasState    bool
	// Committed is the group's committed offset of the partition;
	// HasCommitted is false when the group has none.
	Committed    int64
	HasCommitted bool
	// Input is the input topic whose offsets disagree, with several input
	// topics ("" with one).
	Input string
	err   error
}

func (e *ChangelogLostError) Error() string { return "kstate: " + e.err.Error() }

// StartupTimeoutError is returned by Run when Kafka did not answer within
// Options.Timeouts.Startup of Run's start: the brokers refused connections,
// could not be resolved, or accepted connections and never answered (a
// frozen broker). Run retried meanwhile, logging each retry (and every few
// seconds of a call that hangs) at Warn. Once started, Run rides out a
// broker that goes away (it rejoins when the broker is back) and returns
// no such error. See docs/OPERATIONS.md, "Kafka unreachable at start".
type StartupTimeoutError struct {
	Brokers []string      // Options.Kafka.Brokers
	Timeout time.Duration // Options.Timeouts.Startup
	Waited  time.Duration // since Run started
	Err     error         // the last error of the start-up step that waited
}

func (e *StartupTimeoutError) Error() string {
	return fmt.Sprintf("kstate: Kafka brokers %q did not answer within StartupTimeout %v (waited %v); "+
		"check Options.Kafka.Brokers, the network and that Kafka is up, or raise Options.Timeouts.Startup: %v",
		e.Brokers, e.Timeout, e.Waited.Round(time.Millisecond), e.Err)
}

func (e *StartupTimeoutError) Unwrap() error { return e.Err }

// publicError turns the engine's errors into this package's: the typed
// errors users match with errors.As, and ErrFenced.
func publicError(err error) error {
	if err == nil {
		return nil
	}
	var (
		rt *kafka.RecordTooLargeError
		ue *engine.UserError
		de *engine.DecodeError
		me *engine.ModeError
		se *engine.StuckError
		pc *engine.PartitionsChangedError
		cl *engine.ChangelogLostError
		ip *engine.InputPartitionsError
	)
	if ae, ok := authError(err); ok {
		return ae
	}
	if tm, ok := topicMismatch(err); ok {
		return tm
	}
	var sk *SinkError
	switch {
	case errors.As(err, &sk):
		return sk
	case errors.As(err, &pc):
		return &PartitionsChangedError{Topic: pc.Topic, Changelog: pc.Changelog, Old: pc.Old, New: pc.New}
	case errors.As(err, &cl):
		return newChangelogLostError(cl)
	case errors.As(err, &ip):
		return &InputPartitionsError{Topic: ip.Topic, Partitions: ip.Partitions, Other: ip.Other, OtherPartitions: ip.OtherPartitions}
	case errors.Is(err, engine.ErrFenced):
		return &fencedError{err}
	case errors.As(err, &rt):
		return &RecordTooLargeError{Topic: rt.Topic, Partition: rt.Partition, Key: rt.Key, Size: rt.Size, Limit: rt.Limit}
	case errors.As(err, &ue):
		return &UserError{Method: ue.Method, Key: ue.Key, Partition: ue.Partition, Err: ue.Err, Panic: ue.Panic, Stack: ue.Stack}
	case errors.As(err, &de):
		return &DecodeError{Topic: de.Topic, Partition: de.Partition, Offset: de.Offset, Part: de.Part, Err: de.Err}
	case errors.As(err, &me):
		return &ModeError{Partition: me.Partition, What: me.What, Old: me.Old, New: me.New}
	case errors.As(err, &se):
		return &StuckError{Partition: se.Partition, Method: se.Method, Key: se.Key, For: se.For, Limit: se.Limit}
	}
	return err
}

// fencedError keeps the coordinator's message and matches ErrFenced.
type fencedError struct{ err error }

func (e *fencedError) Error() string   { return e.err.Error() }
func (e *fencedError) Unwrap() []error { return []error{ErrFenced, e.err} }

// newChangelogLostError converts the engine's error (shared with package
// kstatetest).
func newChangelogLostError(cl *engine.ChangelogLostError) *ChangelogLostError {
	return &ChangelogLostError{
		Changelog: cl.Changelog, Partition: cl.Partition, ShardDir: cl.ShardDir, ShardOffset: cl.ShardOffset,
		StateOffset: cl.StateOffset, HasState: cl.HasState, Committed: cl.Committed, HasCommitted: cl.HasCommitted, Input: cl.Input, err: cl,
	}
}

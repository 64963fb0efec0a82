package engine

import (
	"context"
	"time"

	kgroup "github.com/kstate/kstate/internal/group"
	"github.com/kstate/kstate/processor"
)

// The coordinator's view of Kafka: three narrow interfaces and a clock.
// Package kstate implements them over internal/kafka; package enginetest
// implements them in memory so the protocol can be tested without a broker
// and without sleeping. No franz-go type crosses them.

// Message is a Kafka record as the coordinator sees it: polled input,
// produced output and changelog records, changelog records read back.
// It is the one record type between the Kafka client and the engine:
// internal/kafka's Session and readers fill it straight from franz-go's
// records (kafka.Record is this type), so a polled record reaches the task
// without another copy of its fields or headers.
type Message struct {
	Topic     string
	Partition int32
	Offset    int64 // set by the log; ignored when producing
	Key       []byte
	Value     []byte    // nil is a tombstone
	Timestamp time.Time // zero when producing: the producer's clock
	Headers   []Header
}

// Header is a Kafka record header: processor.Header, the one header type
// from the polled record to the processor's Record, the dead-letter record
// and the produced output, so that a record's headers pass through without
// a copy of the slice.
type Header = processor.Header

// Partition names one topic partition.
type Partition struct {
	Topic     string
	Partition int32
}

// GroupEvents receives the consumer group's assignment changes. A Session
// calls it only from inside Poll, on the caller's goroutine, before Poll
// returns records of a newly assigned partition; so events always fall
// between batches.
type GroupEvents interface {
	Assigned(ctx context.Context, parts []Partition)
	// Revoked: the partitions were handed over in a rebalance.
	Revoked(ctx context.Context, parts []Partition)
	// Lost: the member was evicted; another member may already process them.
	Lost(ctx context.Context, parts []Partition)
}

// Session is one member of the consumer group doing exactly-once
// consume-transform-produce (internal/kafka.Session):
//
//	Poll* → Begin → Produce* → End(commit): polled offsets + produced records visible
//	                         → End(abort) or a rebalance: nothing visible, consumption
//	                           rewinds to the committed offsets
//
// A transaction open when partitions are revoked or lost always aborts
// (End returns committed=false), and Poll never returns records of a
// partition after reporting it revoked or lost. Errors of Begin, Produce
// and End are final; one wrapping ErrFenced means a newer instance took over.
type Session interface {
	// Poll returns up to max records, delivering queued group events to ev
	// first. Every returned record counts as consumed by the next End. The
	// returned slice is valid until the next Poll (the session may reuse
	// its array); the records' byte slices stay valid.
	Poll(ctx context.Context, max int, ev GroupEvents) ([]Message, error)
	Pause(parts []Partition)
	Resume(parts []Partition)
	Begin() error
	// Produce writes msgs in the open transaction and returns their offsets
	// in order. It does not keep msgs: the caller reuses it once Produce
	// returned.
	Produce(ctx context.Context, msgs []Message) ([]int64, error)
	End(ctx context.Context, commit bool) (committed bool, err error)
	// TransactionalID is for log messages.
	TransactionalID() string
	Close() error
}

// AsyncProducer is a Session that can also produce without waiting: the
// coordinator then produces each task's records as soon as the task
// finished, in task order, while the other tasks still run (produce.go).
type AsyncProducer interface {
	// ProduceAsync hands msgs to the producer in the open transaction, in
	// order after the records of earlier calls (it may block while the
	// producer's buffer is full), and returns; done is called once, from
	// any goroutine (possibly before ProduceAsync returns), when every
	// record is acknowledged, with their offsets in order, or with the
	// first error. Never concurrent with Begin, End or Poll; End must wait
	// for every done. It does not keep msgs: the caller reuses it once
	// ProduceAsync returned.
	ProduceAsync(ctx context.Context, msgs []Message, done func(offsets []int64, err error))
}

// GroupLeaver is a Session that can also leave its group for good: Leave
// closes the session like Close and then takes the member out of the group
// even when it is static (a static member's Close keeps its place until the
// session times out). The coordinator calls it instead of Close on a
// graceful shutdown when CoordinatorConfig.LeaveGroupOnShutdown is set.
type GroupLeaver interface {
	Leave(ctx context.Context) error
}

// Admin is the metadata the coordinator needs.
type Admin interface {
	// Partitions returns a topic's partition count, fresh from the cluster
	// (the coordinator calls it every MetadataRefresh to watch the input
	// topic); a missing topic is an error wrapping ErrUnknownTopic.
	Partitions(ctx context.Context, topic string) (int, error)
	// EnsureChangelog creates the compacted changelog topic with n
	// partitions, or checks an existing one (another count or policy is an
	// error).
	EnsureChangelog(ctx context.Context, topic string, n int) error
	// EnsureDeadLetter creates the dead-letter topic with n partitions
	// (delete cleanup policy) when it is missing and returns its partition
	// count; an existing topic is used with whatever count it has.
	EnsureDeadLetter(ctx context.Context, topic string, n int) (int, error)
	// CommittedOffsets returns the group's committed offsets of topic
	// (stable: it waits for pending transactional offset commits).
	CommittedOffsets(ctx context.Context, group, topic string) (map[int32]int64, error)
}

// RetentionDescriber is an optional capability of an Admin: the changelog
// topic's delete.retention.ms, how long compaction keeps a tombstone (0
// and no error: unknown, e.g. not authorized to describe the topic's
// configs). The coordinator restores a shard whose changelog offset is
// older than that in full (stale.go).
type RetentionDescriber interface {
	DeleteRetention(ctx context.Context, topic string) (time.Duration, error)
}

// Changelog opens readers of changelog partitions.
type Changelog interface {
	// Open returns a reader of topic/partition from offset from (0: the log
	// start) to the last stable offset at open time. A non-zero from
	// outside the log is an error wrapping ErrOffsetOutOfRange.
	Open(ctx context.Context, topic string, partition int32, from int64) (ChangelogReader, error)
	// Reseed writes msgs to topic/partition in ONE transaction of its own
	// (not the session's, which belongs to the loop goroutine) and returns
	// the offset after the last one (0 for no msgs). It rewrites a lost changelog partition
	// from a local shard: all or nothing, so a crash leaves either the
	// whole shard in the changelog or nothing visible to read_committed
	// readers.
	Reseed(ctx context.Context, topic string, partition int32, msgs []Message) (next int64, err error)
}

// ChangelogReader reads one partition, read_committed.
type ChangelogReader interface {
	// Next returns the next records (at least one) or io.EOF at End.
	Next(ctx context.Context) ([]Message, error)
	// Position is the next offset to read, past markers and aborted records.
	Position() int64
	// End is the last stable offset captured at open.
	End() int64
	Close()
}

// Clock is the coordinator's time. The engine never reads the system
// clock nor sleeps by itself, so tests drive time by hand.
type Clock interface {
	// Now is the batch processing time (kstate.Options.Observability.Clock).
	Now() time.Time
	// Elapsed is a monotonic reading for latencies and deadlines (the
	// commit latency, the time to the first commit, the restore wait):
	// unlike Now it is not frozen by a test's manual batch clock. It is
	// the time since the application's Run started (kstate's clock starts
	// at the top of App.Run, before the start-up checks and the wait for
	// an unreachable cluster), so that Snapshot.FirstCommit, its reading
	// at the first commit, is the time from Run's start.
	Elapsed() time.Duration
	// Sleep waits for d or until ctx is done (then it returns ctx's error):
	// the pause between restore rounds, the shutdown timeout.
	Sleep(ctx context.Context, d time.Duration) error
}

// GroupViewer is a Session that knows its whole group (package group):
// the view the group's leader sent with the member's last assignment —
// every member, its advertised address, its active, standby and warm-up
// partitions — and the member's last rebalances. Coordinator.GroupView
// reads it, from any goroutine: GroupView must be safe to call
// concurrently with every other method of the session. A zero View
// (no Members) means none yet, or a group whose leader runs a release
// that sends none.
type GroupViewer interface {
	GroupView() (kgroup.View, []kgroup.Rebalance)
}

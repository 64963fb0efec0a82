package engine

import (
	"context"
	"fmt"
	"sync"

	"github.com/kstate/kstate/changelog"
	"github.com/kstate/kstate/internal/shard"
)

// TaskHandle is the coordinator's non-generic view of one partition task.
// *Task[K, I, O] implements it; the root package supplies a NewTask factory
// that builds one per assigned partition, so the coordinator never needs
// the key, input and output types.
type TaskHandle interface {
	Partition() int32
	// ShardDir is the shard's directory, named in errors ("" in memory).
	ShardDir() string

	// Restore hooks (see restore.go): the shard to replay the changelog
	// into, and the input offset the restored state was built up to.
	Shard() *shard.Shard
	// StoredInputOffset is input i's (InputOffsetMeta).
	StoredInputOffset(input int) (int64, bool, error)
	// Start checks modes and runs the processor's Init, after restore.
	Start() error
	// InitialStatePending reports, after Start, whether the task has an
	// initial-state source and its partition never committed a batch nor
	// applied the initial state.
	InitialStatePending() bool
	// LoadInitialState hands the task the initial-state rows routed to
	// its partition among partitions; it returns how many.
	LoadInitialState(ctx context.Context, partitions int) (int, error)

	// Batch plans (sink.go): the outstanding plan or nil; its records
	// re-read after a restore; staging, committing and aborting a plan.
	Planned() *Plan
	SetPlanRecords(recs []Record)
	PlanBatch(nowMs int64, recs []Record) ([]changelog.Record, error)
	CommitPlan(nextChangelogOffset int64) error
	AbortPlan()

	NeedsBatch() bool
	RunBatch(nowMs int64, recs []Record) (*BatchResult, error)
	// CurrentCall and Abandon may be called from any goroutine while
	// RunBatch runs: the watchdog's view of a batch that takes too long
	// (see watchdog.go).
	CurrentCall() (Call, bool)
	Abandon()
	Commit(nextChangelogOffset int64) error
	Abort()
	Close() error

	Counters() Counters
	AddCounters(Counters)
	Watermark() int64
	BatchID() int64
}

// NewTask builds the task of a newly assigned partition; its shard is open
// and not restored yet.
type NewTask func(partition int32) (TaskHandle, error)

var _ TaskHandle = (*Task[int, int, int])(nil)

// InitialStatePending implements TaskHandle.
func (t *Task[K, I, O]) InitialStatePending() bool {
	return t.cfg.Initial != nil && t.fresh && !t.initialApplied
}

// LoadInitialState implements TaskHandle.
func (t *Task[K, I, O]) LoadInitialState(ctx context.Context, partitions int) (int, error) {
	if t.cfg.Initial == nil {
		return 0, nil
	}
	rows, err := t.cfg.Initial.forPartition(ctx, t.cfg.Partition, partitions)
	if err != nil {
		return 0, err
	}
	t.SetInitialState(rows)
	return len(rows), nil
}

// InitialCache loads the initial state once per Run, when the first
// partition on its first run needs it, and routes the rows to partitions
// with Kafka's default partitioner (PartitionFor of the key bytes).
// Restore goroutines call it concurrently.
type InitialCache[K any] struct {
	load func(ctx context.Context) ([]InitialRow[K], error)

	mu     sync.Mutex
	loaded bool
	byPart map[int32][]InitialRow[K]
}

// NewInitialCache returns a cache over load (e.g. internal/initial's
// Source.Rows bound to a topic reader and the key serde).
func NewInitialCache[K any](load func(ctx context.Context) ([]InitialRow[K], error)) *InitialCache[K] {
	return &InitialCache[K]{load: load}
}

func (c *InitialCache[K]) forPartition(ctx context.Context, p int32, n int) ([]InitialRow[K], error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.loaded {
		rows, err := c.load(ctx)
		if err != nil {
			return nil, fmt.Errorf("initial state: %w", err)
		}
		c.byPart = make(map[int32][]InitialRow[K])
		for _, row := range rows {
			q := PartitionFor(row.KeyBytes, n)
			c.byPart[q] = append(c.byPart[q], row)
		}
		c.loaded = true
	}
	return c.byPart[p], nil
}

package engine

import "time"

// Counters are cumulative engine counters. Batch-level counters only count
// committed batches: an aborted (and retried) batch is not counted twice.
type Counters struct {
	Batches          int64 // committed micro-batches that ran on the task
	RowsIn           int64 // input rows handed to HandleInputRows
	RowsOut          int64 // rows emitted
	Keys             int64 // HandleInputRows calls
	LateRowsDropped  int64 // EventTime rows at or before the watermark
	TimersRegistered int64
	TimersDeleted    int64
	TimersFired      int64
	TTLRemovals      int64
	StateRowsUpdated int64
	StateRowsRemoved int64
	InitialStateRows int64
	ChangelogRecords int64
	RestoreRecords   int64
	RestoreTime      time.Duration
	Commits          int64         // committed transactions (app level)
	CommitLatency    time.Duration // summed time of End(commit) calls (app level)
	Aborts           int64         // aborted transactions (app level)
	Rounds           int64         // batch rounds run, including ones with nothing to commit (app level)
	// DecodeErrors counts undecodable input records (nil keys included)
	// under DecodeErrorSkip or DecodeErrorDeadLetter.
	DecodeErrors int64
	// Skipped counts input records dropped by DecodeErrorSkip or by
	// SkipRecord (`kstate skip`).
	Skipped int64
	// DeadLettered counts records written to the dead-letter topic
	// (undecodable records, misrouted records, rows of failing keys, failed
	// timers).
	DeadLettered int64
	// ProcessingErrors counts handler calls that failed under
	// ProcessingErrorDeadLetter (their changes were discarded).
	ProcessingErrors int64
	// KeyPartitionMismatches counts records whose key does not hash to the
	// partition they were read from.
	KeyPartitionMismatches int64
	// StateDeletesSkipped counts the deleted state entries (tombstones)
	// the state store stepped over while scanning state (maps, lists,
	// timers), aborted batches included. It grows with deletions inside
	// the ranges scanned, until a compaction drops them; a per-batch
	// figure in the thousands means scans are slowed by them.
	StateDeletesSkipped int64
}

// Add adds o to c.
func (c *Counters) Add(o Counters) {
	c.Batches += o.Batches
	c.RowsIn += o.RowsIn
	c.RowsOut += o.RowsOut
	c.Keys += o.Keys
	c.LateRowsDropped += o.LateRowsDropped
	c.TimersRegistered += o.TimersRegistered
	c.TimersDeleted += o.TimersDeleted
	c.TimersFired += o.TimersFired
	c.TTLRemovals += o.TTLRemovals
	c.StateRowsUpdated += o.StateRowsUpdated
	c.StateRowsRemoved += o.StateRowsRemoved
	c.InitialStateRows += o.InitialStateRows
	c.ChangelogRecords += o.ChangelogRecords
	c.RestoreRecords += o.RestoreRecords
	c.RestoreTime += o.RestoreTime
	c.Commits += o.Commits
	c.CommitLatency += o.CommitLatency
	c.Aborts += o.Aborts
	c.Rounds += o.Rounds
	c.DecodeErrors += o.DecodeErrors
	c.Skipped += o.Skipped
	c.DeadLettered += o.DeadLettered
	c.ProcessingErrors += o.ProcessingErrors
	c.KeyPartitionMismatches += o.KeyPartitionMismatches
	c.StateDeletesSkipped += o.StateDeletesSkipped
}

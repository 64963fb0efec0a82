package engine

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"time"
)

// slot is one assigned partition. Its life:
//
//	Assigned: partition paused, restore goroutine started
//	restore goroutine: open the task, restore the changelog tail, Start
//	    (modes, Init), initial state; then hands the task over (task,
//	    restored) under mu
//	promote (loop): ready = true, partition resumed — only now can Poll
//	    return its records
//	Revoked/Lost/shutdown (loop): restore cancelled and waited for (an
//	    Init in progress within MaxBatchDuration, or ShutdownTimeout after
//	    cancellation: startTask), task closed (processor Close, shard
//	    Close; kept on disk)
//
// Group events run inside Poll on the loop goroutine, between batches, so
// a task is never closed while it runs a batch.
type slot struct {
	part   int32
	cancel context.CancelFunc
	done   chan struct{} // closed when the restore goroutine returned

	// Written by the restore goroutine under Coordinator.mu, read by the loop.
	task     TaskHandle
	restored bool
	// ready is loop-only (also read under mu by Snapshot).
	ready bool
	// planPaused (loop-only): paused until its planned batch committed.
	planPaused bool
	// waitFirst (loop-only): promote resumed it at resumedAt (Clock.Elapsed)
	// and no poll has brought its records yet; its first batch without
	// input waits for them (round.go, deferFirst).
	waitFirst bool
	resumedAt time.Duration
	// running: a batch goroutine runs the task (set by the loop, cleared
	// by that goroutine; under mu). orphaned: the loop gave the batch up
	// and closeSlot left the task to that goroutine (watchdog.go).
	running, orphaned bool
	// Under mu, written by the loop (noteStatus) for Snapshot.
	watermark, batchID int64
	// Under mu: per input topic, the consumed input position as of the
	// last commit (the committed offset at restore, then after each
	// commit; -1 unknown); the lag computed from them (noteLag, summed
	// over the inputs; -1 unknown).
	position []int64
	lag      int64
	// Under mu: per input topic, the input partition's end offset read by
	// the restore (EndOffsetter) and then by every NoteEndOffsets (-1
	// unknown); and the high watermark and log start offset of the last
	// fetch that returned the partition (noteLag; -1 unknown). The lag's
	// end is the larger of endOffset and fetchEnd (lag.go).
	endOffset, fetchEnd, logStart []int64
	// topics (loop-only) are the inputs whose partition is assigned: the
	// task is promoted only when every input's is (inputs.go).
	topics           map[int]bool
	warnedIncomplete bool // loop-only: the incomplete assignment was logged
	// Under mu: the restore's progress (observe.go).
	restore restoreProgress
	// acquired: Assigned reserved the shard in the process's
	// ShardPositions (the restore goroutine waits for it before opening
	// it); closeSlot gives it back. Written before the goroutine starts.
	acquired bool
}

// groupEvents is the Coordinator's GroupEvents (kept off its method set).
type groupEvents struct{ c *Coordinator }

func (g groupEvents) Assigned(_ context.Context, parts []Partition) {
	c := g.c
	var ps []Partition
	for _, p := range parts {
		if _, ok := c.inputIndex(p.Topic); ok {
			ps = append(ps, p)
		}
	}
	// Pause before anything else: a partition must not deliver records
	// until its state is restored (their offsets would be committed with
	// the next transaction otherwise; see rewind for records that were
	// fetched before this pause).
	c.session.Pause(ps)
	if c.bnd != nil && len(ps) > 0 {
		c.bnd.assigned = true
	}
	for _, p := range ps {
		in, _ := c.inputIndex(p.Topic)
		if !c.noteAssigned(p.Partition) {
			continue // no task: checkLayout stops Run before the next batch
		}
		c.mu.Lock()
		old := c.mu.slots[p.Partition]
		if old != nil && !old.topics[in] {
			// Another input topic's partition p of a task assigned
			// already (several inputs); the task cannot be ready yet
			// (promote waits for every input), and promote resumes it.
			old.topics[in] = true
			c.mu.Unlock()
			continue
		}
		ctx, cancel := context.WithCancel(c.workCtx)
		s := &slot{part: p.Partition, cancel: cancel, done: make(chan struct{}), watermark: -1, lag: -1,
			position: minusOnes(len(c.cfg.Topics)), endOffset: minusOnes(len(c.cfg.Topics)),
			fetchEnd: minusOnes(len(c.cfg.Topics)), logStart: minusOnes(len(c.cfg.Topics)), topics: map[int]bool{in: true}}
		c.mu.slots[p.Partition] = s
		c.mu.Unlock()
		if old != nil {
			// Assigned twice without a revoke in between (should not
			// happen): keep the new one; close the old first (shard lock).
			c.closeSlot(old, "reassigned")
		}
		// Reserved now, on the loop goroutine: the standby set delivered
		// after this assignment in the same poll may drop p, and the
		// standby reader must then hand its open shard over to the
		// restore rather than close it (standbys.reconcile).
		s.acquired = true
		c.cfg.Positions.reserveActive(p.Partition)
		c.log.Info("partition assigned: restoring", "partition", p.Partition)
		c.wg.Go(func() { c.restoreTask(ctx, s) })
	}
	c.observeRebalance("assigned", c.inputParts(ps))
}

// observeRebalance reports a group event to the Observer.
func (c *Coordinator) observeRebalance(kind string, parts []int32) {
	if c.cfg.Observer != nil && len(parts) > 0 {
		c.cfg.Observer.Rebalanced(kind, parts)
	}
}

func (g groupEvents) Revoked(_ context.Context, parts []Partition) {
	ps := g.c.inputParts(parts)
	g.c.closeTasks(ps, "revoked")
	g.c.observeRebalance("revoked", ps)
}

// Lost: the partitions may already be processed elsewhere. There is no
// batch in flight (events come between batches) and the transaction that
// was open when they were lost aborted, so there is no staged state left
// to drop: closing the tasks is all there is to do.
func (g groupEvents) Lost(_ context.Context, parts []Partition) {
	ps := g.c.inputParts(parts)
	g.c.closeTasks(ps, "lost")
	g.c.observeRebalance("lost", ps)
}

func (c *Coordinator) inputParts(parts []Partition) []int32 {
	var out []int32
	for _, p := range parts {
		if _, ok := c.inputIndex(p.Topic); ok {
			out = append(out, p.Partition)
		}
	}
	return uniq(out)
}

// closeTasks removes and closes the tasks of parts; it returns the first
// error of a processor's Close.
func (c *Coordinator) closeTasks(parts []int32, why string) error {
	var first error
	for _, p := range parts {
		c.mu.Lock()
		s := c.mu.slots[p]
		delete(c.mu.slots, p)
		c.mu.Unlock()
		if s != nil {
			if err := c.closeSlot(s, why); err != nil && first == nil {
				first = err
			}
		}
	}
	return first
}

// closeSlot cancels the slot's restore, waits for it, and closes its task.
func (c *Coordinator) closeSlot(s *slot, why string) error {
	s.cancel()
	<-s.done
	c.mu.Lock()
	t := s.task
	s.task, s.ready = nil, false
	running := t != nil && s.running
	s.orphaned = running
	c.mu.Unlock()
	pos := int64(-1) // the shard's position as closed, for the hint
	if t != nil && !running {
		pos = t.Shard().ChangelogOffset()
	}
	if s.acquired {
		defer c.cfg.Positions.releaseActive(s.part, pos)
	}
	if t == nil {
		c.log.Info("partition "+why+" during restore", "partition", s.part)
		return nil
	}
	if running {
		// Its batch was abandoned with a processor call still running:
		// closing now would race with that call. The batch goroutine
		// closes the task when the call returns (watchdog.go).
		call, _ := t.CurrentCall()
		c.log.Warn("partition "+why+": processor Close skipped, a call of the processor is still running; "+
			"the task is closed when it returns", "partition", s.part, "method", call.Method, "key", call.Key)
		return nil
	}
	err := t.Close()
	c.retire(t.Counters())
	if err != nil {
		c.log.Error("partition "+why+": closing the task failed", "partition", s.part, "err", err)
		return fmt.Errorf("kstate: %w", err)
	}
	c.log.Info("partition "+why+": task closed", "partition", s.part)
	return nil
}

// promote resumes the partitions whose restore finished.
func (c *Coordinator) promote() {
	var ps []Partition
	var promoted []*slot
	c.mu.Lock()
	for p, s := range c.mu.slots {
		if s.restored && !s.ready {
			if len(s.topics) < len(c.cfg.Topics) {
				// Not every input's partition p is assigned (yet):
				// the group's assignment is not co-partitioned. The
				// task must not run on part of its input.
				if !s.warnedIncomplete {
					s.warnedIncomplete = true
					c.log.Warn("partition p of some input topics is not assigned to this instance: the task waits (every instance must run the same input list; the group must use the range assignor)",
						"partition", p, "assigned_inputs", len(s.topics), "inputs", len(c.cfg.Topics))
				}
				continue
			}
			s.ready, s.waitFirst, s.resumedAt = true, c.cfg.DeferFirstBatch, c.clock.Elapsed()
			s.lag = s.computeLag() // from the restore's end offsets (lag.go)
			ps = append(ps, c.inputPartitions(p)...)
			promoted = append(promoted, s)
		}
	}
	c.mu.Unlock()
	c.noteStatus(promoted, false)
	if len(ps) > 0 {
		sort.Slice(ps, func(i, j int) bool { return ps[i].Partition < ps[j].Partition })
		c.session.Resume(ps)
	}
}

// readyTasks returns the slots whose tasks may run batches.
func (c *Coordinator) readyTasks() map[int32]*slot {
	out := make(map[int32]*slot)
	c.mu.Lock()
	defer c.mu.Unlock()
	for p, s := range c.mu.slots {
		if s.ready {
			out[p] = s
		}
	}
	return out
}

// Snapshot is a point-in-time view of a Coordinator's counters.
type Snapshot struct {
	// Total sums every task of the run (past and present) and the
	// coordinator's own counters.
	Total Counters
	// Partitions holds the counters of the currently assigned tasks.
	Partitions map[int32]Counters
	// Assigned lists the assigned partitions, Restoring the subset not
	// ready yet; both sorted.
	Assigned, Restoring []int32
	// FirstCommit is the time from the start of the application's Run
	// (Clock.Elapsed) to its first committed transaction (0 until then).
	FirstCommit time.Duration
	// BatchInFlight is the age of the batch in flight (its tasks running
	// or its transaction ending); 0 between batches.
	BatchInFlight time.Duration
	// BatchInFlightRecords and BatchInFlightPartitions are the input
	// records and the partitions (sorted) of the batch in flight; 0 and
	// nil between batches.
	BatchInFlightRecords    int
	BatchInFlightPartitions []int32
	// Phase is the coordinator's phase (phase.go).
	Phase Phase
	// Standbys holds this member's standby partitions (standby.go); nil
	// without any.
	Standbys map[int32]StandbyStatus
	// SinceCommit is the time since the last committed transaction; 0
	// before the first.
	SinceCommit time.Duration
	// Status holds what the loop last saw of each assigned partition.
	Status map[int32]PartitionStatus
	// BatchRecordLimit is the record limit of the loop's next poll
	// (adaptive batches, adaptive.go).
	BatchRecordLimit int
}

// Snapshot returns the counters. Safe to call at any time, also after Run.
func (c *Coordinator) Snapshot() Snapshot {
	m := Snapshot{Partitions: map[int32]Counters{}, Status: map[int32]PartitionStatus{}, Standbys: c.standby.status()}
	c.mu.Lock()
	defer c.mu.Unlock()
	m.Total = c.mu.retired
	m.FirstCommit = c.mu.firstCommit
	m.Phase = c.mu.phase
	m.BatchRecordLimit = c.mu.batchLimit
	if c.mu.lastCommit > 0 {
		m.SinceCommit = max(c.clock.Elapsed()-c.mu.lastCommit, time.Nanosecond)
	}
	if c.mu.inFlight {
		m.BatchInFlight = max(c.clock.Elapsed()-c.mu.roundStart, time.Nanosecond)
		m.BatchInFlightRecords = c.mu.roundRecords
		m.BatchInFlightPartitions = slices.Clone(c.mu.roundParts)
	}
	for p, s := range c.mu.slots {
		m.Assigned = append(m.Assigned, p)
		if !s.ready {
			m.Restoring = append(m.Restoring, p)
		}
		ps := PartitionStatus{Ready: s.ready, Watermark: s.watermark, BatchID: s.batchID, Lag: s.lag,
			RestoredRecords: s.restore.done, RestoreTotal: s.restore.total,
			InBatch: c.mu.inFlight && slices.Contains(c.mu.roundParts, p)}
		ps.RestoreRate, ps.RestoreETA = s.restore.rate(c.clock.Elapsed())
		m.Status[p] = ps
		if s.task != nil {
			ct := s.task.Counters()
			m.Partitions[p] = ct
			m.Total.Add(ct)
		}
	}
	sort.Slice(m.Assigned, func(i, j int) bool { return m.Assigned[i] < m.Assigned[j] })
	sort.Slice(m.Restoring, func(i, j int) bool { return m.Restoring[i] < m.Restoring[j] })
	return m
}

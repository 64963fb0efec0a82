package engine

import "time"

// Phase is where a Coordinator is in its life, as the root package's
// App.State reports it. The loop and the shutdown timer drive it; readers
// take it from Phase or Snapshot.
type Phase int

const (
	// PhaseStarting: the topic checks and the group join (setup), until the
	// loop's first poll returned; again after Kafka was unreachable, until
	// the new session's group assigned partitions (reconnect.go).
	PhaseStarting Phase = iota
	// PhaseRestoring: an assigned partition is restoring, or restored and
	// not resumed yet. A rebalance shows here: newly assigned partitions
	// restore while the others keep processing.
	PhaseRestoring
	// PhaseRunning: every assigned partition (there may be none: more
	// members than partitions) is restored and processing.
	PhaseRunning
	// PhaseStopping: Run's ctx was cancelled; the batch in flight commits
	// or aborts and the tasks close. It is final.
	PhaseStopping
)

var phaseNames = [...]string{"Starting", "Restoring", "Running", "Stopping"}

func (p Phase) String() string {
	if p < 0 || int(p) >= len(phaseNames) {
		return "Phase(?)"
	}
	return phaseNames[p]
}

// PartitionStatus is what the loop last saw of an assigned partition.
type PartitionStatus struct {
	// Ready: restored and resumed (processing).
	Ready bool
	// Watermark (EventTime mode; -1 without one) and BatchID (the id the
	// next batch will have) as of the last commit of the partition, or of
	// its restore.
	Watermark, BatchID int64
	// Lag is the number of input records after the committed position:
	// end offset - position, the end offset being the latest of the last
	// fetch's high watermark and the end offsets read by the restore and by
	// NoteEndOffsets (lag.go); -1 when unknown (not ready, or no end offset
	// known yet).
	Lag int64
	// InBatch: the partition's task is part of the batch in flight.
	InBatch bool
	// RestoredRecords is the number of changelog records the partition's
	// restore applied so far (live); RestoreTotal its upper bound (the
	// changelog offsets to read; exact once restored). RestoreRate is in
	// records per second, RestoreETA the time left at that rate (0:
	// unknown or done).
	RestoredRecords, RestoreTotal int64
	RestoreRate                   float64
	RestoreETA                    time.Duration
}

// Phase returns the coordinator's phase. Safe to call at any time.
func (c *Coordinator) Phase() Phase {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.mu.phase
}

// updatePhase recomputes the phase from the slots (loop only, after the
// events of a poll and the promotions) and reports a change.
func (c *Coordinator) updatePhase() {
	c.mu.Lock()
	old := c.mu.phase
	switch {
	case old == PhaseStopping:
	case c.mu.rejoining:
		// Kafka was unreachable: rejoining with a new session
		// (reconnect.go) until the group assigns partitions again.
		c.mu.phase = PhaseStarting
	default:
		c.mu.phase = PhaseRunning
		for _, s := range c.mu.slots {
			if !s.ready {
				c.mu.phase = PhaseRestoring
				break
			}
		}
	}
	changed := c.mu.phase != old
	c.mu.Unlock()
	if changed {
		c.phaseChanged()
	}
}

// stopping enters PhaseStopping (the shutdown timer, when Run's ctx ends).
func (c *Coordinator) stopping() {
	c.mu.Lock()
	changed := c.mu.phase != PhaseStopping
	c.mu.phase = PhaseStopping
	c.mu.Unlock()
	if changed {
		c.phaseChanged()
	}
}

// phaseChanged calls the OnPhase hook, never under mu.
func (c *Coordinator) phaseChanged() {
	if c.cfg.OnPhase != nil {
		c.cfg.OnPhase()
	}
}

// noteStatus records the watermark and the batch id of the slots' tasks
// (loop only, while no batch runs them: after a commit or a promotion),
// and the time of a commit.
//
// It also feeds the process's ShardPositions with the shards' changelog
// positions (a hint for the group's balancer, positions.go).
func (c *Coordinator) noteStatus(parts []*slot, committed bool) {
	tasks := make([]TaskHandle, len(parts))
	c.mu.Lock()
	for i, s := range parts {
		if s.task != nil {
			s.watermark, s.batchID = s.task.Watermark(), s.task.BatchID()
			tasks[i] = s.task
		}
	}
	if committed {
		c.mu.lastCommit = max(c.clock.Elapsed(), time.Nanosecond)
	}
	c.mu.Unlock()
	for i, t := range tasks {
		if t != nil {
			c.cfg.Positions.set(parts[i].part, t.Shard().ChangelogOffset(), false)
		}
	}
}

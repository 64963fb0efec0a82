package runtime

// The pipelines of one Run (kstate.Options.Batching.Pipelines), like Kafka Streams'
// stream threads: each is an engine.Coordinator of its own (its group
// member, transactional producer, batch loop and share of the input
// partitions). PipelineSet merges their views as one coordinator's;
// CloseBarrier lets them close their sessions together.

import (
	"context"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/kstate/kstate/internal/engine"
	"github.com/kstate/kstate/internal/group"
	"github.com/kstate/kstate/internal/kv"
)

// DropCreated deletes the changelog topic a failed first start created,
// once every pipeline has stopped (engine.Coordinator.DropCreatedChangelog).
func (ps *PipelineSet) DropCreated(ctx context.Context, err error) {
	if err == nil || ctx.Err() != nil {
		return
	}
	for _, c := range ps.Coords {
		if c.DropCreatedChangelog(ctx, err) {
			return
		}
	}
}

// CloseBarrier lets the pipelines of one Run close their sessions together
// (engine.CoordinatorConfig.BeforeSessionClose). A pipeline's last
// transaction commit and a group join in flight both wait until every
// member of the group has joined the rebalance again; a pipeline that has
// closed its session stays in the group as a static member without
// joining, so a sibling still committing would wait for its session
// timeout (or ShutdownTimeout). On a graceful stop each pipeline
// therefore keeps its session (and its group member, which goes on
// heartbeating and joining) until all have finished their batches, or
// for ShutdownTimeout at most. A pipeline that fails does not wait.
type CloseBarrier struct {
	mu      sync.Mutex
	arrived []bool
	pending int
	all     chan struct{} // closed once every pipeline arrived
	timeout time.Duration
}

// NewCloseBarrier returns the barrier of n pipelines; a graceful close
// waits for the others at most timeout (ShutdownTimeout).
func NewCloseBarrier(n int, timeout time.Duration) *CloseBarrier {
	return &CloseBarrier{arrived: make([]bool, n), pending: n, all: make(chan struct{}), timeout: timeout}
}

// Arrive counts pipeline i as done with its batches (once; later calls
// only wait) and, if the shutdown is graceful, waits for the others.
func (b *CloseBarrier) Arrive(i int, graceful bool) {
	b.mu.Lock()
	if !b.arrived[i] {
		b.arrived[i] = true
		if b.pending--; b.pending == 0 {
			close(b.all)
		}
	}
	b.mu.Unlock()
	if !graceful {
		return
	}
	t := time.NewTimer(b.timeout)
	defer t.Stop()
	select {
	case <-b.all:
	case <-t.C:
	}
}

// PipelineSet is the coordinators of one Run (one per pipeline), seen as
// one: the App's status, metrics, queries and lifecycle read it.
type PipelineSet struct {
	Coords []*engine.Coordinator // fixed once published
}

// Phase is the App's phase over its pipelines: Stopping once any stops,
// otherwise the earliest of theirs (Running only when every pipeline is).
func (ps *PipelineSet) Phase() engine.Phase {
	ph := engine.PhaseRunning
	for _, c := range ps.Coords {
		p := c.Phase()
		if p == engine.PhaseStopping {
			return p
		}
		ph = min(ph, p)
	}
	return ph
}

// Snapshot merges the pipelines' snapshots (see SnapshotOwners).
func (ps *PipelineSet) Snapshot() engine.Snapshot {
	s, _, _ := ps.SnapshotOwners()
	return s
}

// SnapshotOwners merges the pipelines' snapshots; owner maps each assigned
// partition to its pipeline. A partition that two pipelines list at once
// (handed over, the new owner restoring while the old one has not yet seen
// its revoke) is shown from the one that has it ready, else the first;
// handover maps it to the other one, the pipeline it moves to.
func (ps *PipelineSet) SnapshotOwners() (s engine.Snapshot, owner, handover map[int32]int) {
	if len(ps.Coords) == 1 {
		s := ps.Coords[0].Snapshot()
		owner := make(map[int32]int, len(s.Assigned))
		for _, p := range s.Assigned {
			owner[p] = 0
		}
		return s, owner, map[int32]int{}
	}
	snaps := make([]engine.Snapshot, len(ps.Coords))
	for i, c := range ps.Coords {
		snaps[i] = c.Snapshot()
	}
	return mergeSnapshots(snaps, ps.Phase())
}

// mergeSnapshots is SnapshotOwners' merge of the pipelines' snapshots.
func mergeSnapshots(snaps []engine.Snapshot, phase engine.Phase) (engine.Snapshot, map[int32]int, map[int32]int) {
	m := engine.Snapshot{Partitions: map[int32]engine.Counters{}, Status: map[int32]engine.PartitionStatus{}, Phase: phase}
	owner, handover := map[int32]int{}, map[int32]int{}
	for i, s := range snaps {
		m.Total.Add(s.Total)
		m.FirstCommit = minPositive(m.FirstCommit, s.FirstCommit)
		m.SinceCommit = minPositive(m.SinceCommit, s.SinceCommit)
		m.BatchInFlight = max(m.BatchInFlight, s.BatchInFlight)
		m.BatchInFlightRecords += s.BatchInFlightRecords
		m.BatchInFlightPartitions = append(m.BatchInFlightPartitions, s.BatchInFlightPartitions...)
		m.BatchRecordLimit = max(m.BatchRecordLimit, s.BatchRecordLimit)
		for p, st := range s.Standbys {
			// Two pipelines may both list p (the group gave each a
			// standby): the one that has the shard open counts.
			if old, seen := m.Standbys[p]; !seen || (!old.Open && st.Open) {
				if m.Standbys == nil {
					m.Standbys = map[int32]engine.StandbyStatus{}
				}
				m.Standbys[p] = st
			}
		}
		for _, p := range s.Assigned {
			st := s.Status[p]
			if prev, seen := owner[p]; seen {
				if m.Status[p].Ready || !st.Ready {
					handover[p] = i
					continue
				}
				handover[p] = prev
			}
			owner[p] = i
			m.Status[p] = st
			if ct, ok := s.Partitions[p]; ok {
				m.Partitions[p] = ct
			} else {
				delete(m.Partitions, p)
			}
		}
	}
	for p, st := range m.Status {
		m.Assigned = append(m.Assigned, p)
		if !st.Ready {
			m.Restoring = append(m.Restoring, p)
		}
	}
	sort.Slice(m.Assigned, func(i, j int) bool { return m.Assigned[i] < m.Assigned[j] })
	sort.Slice(m.Restoring, func(i, j int) bool { return m.Restoring[i] < m.Restoring[j] })
	slices.Sort(m.BatchInFlightPartitions)
	return m, owner, handover
}

// minPositive is the smaller of two durations where 0 means none.
func minPositive(a, b time.Duration) time.Duration {
	switch {
	case a == 0:
		return b
	case b == 0:
		return a
	}
	return min(a, b)
}

// StateSizes merges the pipelines' shard estimates.
func (ps *PipelineSet) StateSizes() map[int32]kv.Estimate {
	out := map[int32]kv.Estimate{}
	for _, c := range ps.Coords {
		for p, e := range c.StateSizes() {
			out[p] = e
		}
	}
	return out
}

// KeyPartition is the partition of key (every pipeline knows the input's
// partition count once it started).
func (ps *PipelineSet) KeyPartition(key []byte) (int32, error) {
	var err error
	for _, c := range ps.Coords {
		var p int32
		if p, err = c.KeyPartition(key); err == nil {
			return p, nil
		}
	}
	return 0, err
}

// Owning returns the pipeline that owns partition p, restored; nil if none.
func (ps *PipelineSet) Owning(p int32) *engine.Coordinator {
	for _, c := range ps.Coords {
		if c.Owns(p) {
			return c
		}
	}
	return nil
}

// Owns reports whether a pipeline of this instance owns p, restored.
func (ps *PipelineSet) Owns(p int32) bool { return ps.Owning(p) != nil }

// ReadCommitted reads partition p's committed state from the pipeline that
// owns it (engine.Coordinator.ReadCommitted).
func (ps *PipelineSet) ReadCommitted(p int32, lower, upper []byte, each func(key, value []byte) bool) error {
	c := ps.Owning(p)
	if c == nil {
		c = ps.Coords[0] // answers ErrNotOwned
	}
	return c.ReadCommitted(p, lower, upper, each)
}

// GroupView merges the pipelines' group views (engine.Coordinator.GroupView):
// the view of the highest generation (every pipeline is a member of the
// same group, and a pipeline that has not seen the last rebalance yet
// holds an older one), and the rebalances of all pipelines, newest first,
// one per generation: the pipelines of one process take part in the same
// rebalances, so one generation's entries are merged (the earliest start,
// the longest duration, leader if any pipeline led, the partitions gained
// and lost by any pipeline — a partition handed over between two of them
// is in both lists). ok is false when no pipeline has a view.
func (ps *PipelineSet) GroupView() (v group.View, rebalances []group.Rebalance, ok bool) {
	views := make([]pipelineView, len(ps.Coords))
	for i, c := range ps.Coords {
		views[i].View, views[i].Rebalances, views[i].OK = c.GroupView()
	}
	return mergeGroupViews(views)
}

// pipelineView is one pipeline's engine.Coordinator.GroupView.
type pipelineView struct {
	View       group.View
	Rebalances []group.Rebalance
	OK         bool
}

// mergeGroupViews is PipelineSet.GroupView's merge of its pipelines' views.
func mergeGroupViews(views []pipelineView) (v group.View, rebalances []group.Rebalance, ok bool) {
	byGen := map[int32]int{} // generation → index in rebalances
	for _, pv := range views {
		if pv.OK && (!ok || pv.View.Generation > v.Generation) {
			v, ok = pv.View, true
		}
		for _, r := range pv.Rebalances {
			i, seen := byGen[r.Generation]
			if !seen {
				byGen[r.Generation] = len(rebalances)
				r.Assigned, r.Revoked = slices.Clone(r.Assigned), slices.Clone(r.Revoked)
				rebalances = append(rebalances, r)
				continue
			}
			m := &rebalances[i]
			if !r.Start.IsZero() && (m.Start.IsZero() || r.Start.Before(m.Start)) {
				m.Start = r.Start
			}
			m.Duration = max(m.Duration, r.Duration)
			m.Leader = m.Leader || r.Leader
			m.Assigned = union(m.Assigned, r.Assigned)
			m.Revoked = union(m.Revoked, r.Revoked)
		}
	}
	sort.SliceStable(rebalances, func(i, j int) bool { return rebalances[i].Generation > rebalances[j].Generation })
	return v, rebalances, ok
}

// union returns the sorted union of two partition lists.
func union(a, b []int32) []int32 {
	out := append(slices.Clone(a), b...)
	slices.Sort(out)
	return slices.Compact(out)
}

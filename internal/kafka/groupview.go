package kafka

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/kstate/kstate/internal/balancer"
	"github.com/kstate/kstate/internal/group"
)

// The session's side of kstate's group balancer (internal/balancer): what
// the member reports as it joins, what the leader reads to balance, the
// standby partitions and the group view it receives, and the probing
// rebalances while warm-ups exist.

// Defaults of the group fields of SessionConfig (kstate.Options.Group's).
const (
	DefaultAcceptableLag   = 10_000
	DefaultProbingInterval = time.Minute
	// endOffsetsTimeout bounds the leader's read of the changelog's end
	// offsets: every member waits for the leader's assignment meanwhile.
	endOffsetsTimeout = 2 * time.Second
	// rebalanceHistory is how many rebalances View keeps.
	rebalanceHistory = 20
)

// groupState is what the group goroutine tells the rest of the session;
// under its own lock, taken by View from any goroutine.
type groupState struct {
	mu     sync.Mutex
	closed bool
	// joinAt is when the member last began to join, assignedAt when it
	// last received an assignment: joinAt after assignedAt is a join in
	// progress.
	joinAt     time.Time
	assignedAt time.Time
	leader     bool // this member balanced the join in progress
	view       group.View
	history    []group.Rebalance
	// active are the partition numbers of the last assignment; standby
	// its standby and warm-up partitions (sorted).
	active  []int32
	standby []int32
	// probe is the probing timer (leader with warm-ups in the group);
	// probeSeq invalidates a timer that fired after a newer assignment.
	probe    *time.Timer
	probeSeq int
}

// newBalancer builds the session's group balancer.
func (s *Session) newBalancer() *balancer.Balancer {
	return &balancer.Balancer{
		Config: balancer.Config{Standbys: s.cfg.Standbys, AcceptableLag: s.cfg.AcceptableLag,
			MaxWarmups: balancer.DefaultMaxWarmups, CoPartitioned: s.cfg.CoPartitioned},
		Probing: s.cfg.ProbingInterval,
		Meta: func() group.Meta {
			m := group.Meta{Version: group.Version, InstanceID: s.cfg.InstanceID, Process: s.cfg.Process, Addr: s.cfg.Addr}
			if s.cfg.LocalShards != nil {
				m.Shards = s.cfg.LocalShards()
			}
			s.grp.mu.Lock()
			m.Standby = slices.Clone(s.grp.standby)
			s.grp.mu.Unlock()
			return m
		},
		EndOffsets: s.changelogEnds,
		OnJoin: func() {
			s.grp.mu.Lock()
			s.grp.joinAt, s.grp.leader = time.Now(), false
			s.grp.mu.Unlock()
		},
		OnBalance: func(gen int32, err error) {
			s.grp.mu.Lock()
			s.grp.leader = true
			s.grp.mu.Unlock()
			if err != nil && !errors.Is(err, errNoChangelog) {
				s.log.Warn("balancing the group without the changelog's end offsets (sticky and balanced only, no warm-ups this time)",
					"group", s.cfg.GroupID, "generation", gen, "changelog", s.cfg.ChangelogTopic, "err", err)
			}
		},
		OnAssignment: s.onAssignment,
	}
}

var errNoChangelog = errors.New("kafka: no changelog topic configured")

// changelogEnds reads the changelog's end offsets (the leader, balancing).
func (s *Session) changelogEnds() (map[int32]int64, error) {
	cl := s.client.Load()
	if s.cfg.ChangelogTopic == "" {
		return nil, errNoChangelog
	}
	if cl == nil {
		return nil, errors.New("kafka: client not ready")
	}
	ctx, cancel := context.WithTimeout(context.Background(), endOffsetsTimeout)
	defer cancel()
	listed, err := kadm.NewClient(cl).ListEndOffsets(ctx, s.cfg.ChangelogTopic)
	if err == nil {
		err = listed.Error()
	}
	if err != nil {
		return nil, fmt.Errorf("list end offsets of changelog %q: %w", s.cfg.ChangelogTopic, err)
	}
	out := map[int32]int64{}
	for p, o := range listed[s.cfg.ChangelogTopic] {
		out[p] = o.Offset
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("changelog %q: no partitions listed", s.cfg.ChangelogTopic)
	}
	return out, nil
}

// onAssignment runs on franz-go's group goroutine with each assignment.
func (s *Session) onAssignment(active map[string][]int32, a group.Assignment, ok bool) {
	var parts []int32
	for _, ps := range active {
		for _, p := range ps {
			if !slices.Contains(parts, p) {
				parts = append(parts, p)
			}
		}
	}
	slices.Sort(parts)
	if ok {
		// Before the assignment takes effect: franz-go fetches its
		// offsets next (takeover.go).
		s.abortDeparted(parts, a.View)
	}
	now := time.Now()
	gen := a.View.Generation
	if !ok {
		if cl := s.client.Load(); cl != nil {
			_, gen = cl.GroupMetadata()
		}
	}

	g := &s.grp
	g.mu.Lock()
	defer g.mu.Unlock()
	prev := g.view
	var moving, standby, warmup []int32
	if ok {
		moving = movesInProgress(prev, a.View)
		// A partition in transit whose warm-up or standby copy this
		// member holds open: the probing rebalance takes it from its owner
		// and gives it to no one, and the follow-up one gives it to the
		// process with the caught-up copy, to the pipeline holding it open
		// (internal/balancer). It stays a warm-up meanwhile, so that its
		// copy stays open and current for the assignment to take over
		// (internal/engine's handover) instead of being closed and opened
		// again; a standby was dropped here before, as the probing
		// assignment places no standby on the process it moves to.
		warmup = slices.Clone(a.Warmup)
		for _, p := range moving {
			if slices.Contains(g.standby, p) && !slices.Contains(warmup, p) {
				warmup = append(warmup, p)
			}
		}
		standby = slices.Sorted(maps.Keys(setOf(append(slices.Clone(a.Standby), warmup...))))
	}
	r := group.Rebalance{Generation: gen, Start: g.joinAt, Leader: g.leader,
		Assigned: minus(parts, g.active), Revoked: minus(g.active, parts)}
	if !g.joinAt.IsZero() {
		r.Duration = now.Sub(g.joinAt)
	}
	g.assignedAt = now
	g.history = append(g.history, r)
	if len(g.history) > rebalanceHistory {
		g.history = slices.Delete(g.history, 0, len(g.history)-rebalanceHistory)
	}
	g.active, g.standby = parts, standby
	if ok {
		g.view = a.View
	} else {
		// The group runs an older release's protocol: no view.
		g.view = group.View{Generation: gen}
	}
	g.probeSeq++
	if g.probe != nil {
		g.probe.Stop()
		g.probe = nil
	}
	if !ok || g.closed {
		return
	}
	// Every member, not only the leader, probes: they all received
	// Probing with this assignment, within moments of each other, so they
	// all rejoin together when it ends. A member that only hears of the
	// leader's rejoin at its next heartbeat (up to 3 s later) holds the
	// rebalance up for that long, and with it the other members' commits
	// (franz-go's End waits for the join).
	if a.Probing > 0 {
		s.armProbe(g.probeSeq)
	}
	// A cooperative move in progress: its owner revokes the partition and
	// rejoins at once; the follow-up rebalance gives it to its new owner.
	// The other members would only hear of that rebalance at their next
	// heartbeat (half a second after an assignment with franz-go): they
	// rejoin now. (The revoking member itself is rejoined by franz-go.)
	if len(moving) > 0 && len(r.Revoked) == 0 {
		s.log.Info("rejoining for the follow-up rebalance of a move", "group", s.cfg.GroupID,
			"generation", a.View.Generation, "partitions", moving)
		go func() {
			// Not on the group goroutine: ForceRebalance takes franz-go's
			// group lock. The signal waits in franz-go's rejoin channel
			// until the heartbeat loop of this generation reads it.
			if cl := s.client.Load(); cl != nil {
				cl.ForceRebalance()
			}
		}()
	}
}

// movesInProgress returns the partitions next leaves unowned that prev gave
// a member still in next: a cooperative rebalance took them from that
// member, and the follow-up rebalance (the member rejoins after revoking)
// gives them to their new owner. A partition unowned in prev too is not a
// move of this rebalance (no follow-up is due for it).
func movesInProgress(prev, next group.View) []int32 {
	var out []int32
	for _, p := range next.Unowned() {
		was, ok := prev.Owner(p)
		if !ok {
			continue
		}
		for _, m := range next.Members {
			if m.MemberID == was.MemberID || (m.InstanceID != "" && m.InstanceID == was.InstanceID) {
				out = append(out, p)
				break
			}
		}
	}
	return out
}

// armProbe schedules a probing rebalance (g.mu held): every member forces
// one ProbingInterval after an assignment with warm-ups in the group (and
// again every ProbingInterval until the next assignment), so that a warm-up
// within AcceptableLag becomes active. The members received the assignment
// within moments of each other: they all rejoin at once, and the rebalance
// waits for no heartbeat.
func (s *Session) armProbe(seq int) {
	s.grp.probe = time.AfterFunc(s.cfg.ProbingInterval, func() {
		due, current, gen := s.grp.probeDue(seq)
		if !current {
			return
		}
		switch cl := s.client.Load(); {
		case !due:
			s.log.Info("probing rebalance skipped: a join is in progress", "group", s.cfg.GroupID, "generation", gen)
		case cl != nil:
			// Not under grp.mu: ForceRebalance takes franz-go's group
			// lock, and the group goroutine calls onAssignment.
			s.log.Info("probing rebalance: warm-ups in the group", "group", s.cfg.GroupID, "generation", gen)
			cl.ForceRebalance()
		}
		// Again after another interval if no assignment came meanwhile.
		s.grp.mu.Lock()
		defer s.grp.mu.Unlock()
		if !s.grp.closed && s.grp.probeSeq == seq {
			s.armProbe(seq)
		}
	})
}

// probeDue tells the probe of assignment seq whether to force a rebalance
// now: current false, the probe is stale (a newer assignment, or closed);
// due false, a join is in progress. That rebalance probes the warm-ups
// already and its assignment arms the next probe, while a ForceRebalance
// during it would wait in franz-go's rejoin channel and start one more
// rebalance right after it (issue #27: 7 rebalances for a join instead of
// 3–4).
func (g *groupState) probeDue(seq int) (due, current bool, gen int32) {
	g.mu.Lock()
	defer g.mu.Unlock()
	current = !g.closed && g.probeSeq == seq
	return current && !g.joinAt.After(g.assignedAt), current, g.view.Generation
}

// stopGroup stops the probing (Close).
func (s *Session) stopGroup() {
	s.grp.mu.Lock()
	defer s.grp.mu.Unlock()
	s.grp.closed = true
	if s.grp.probe != nil {
		s.grp.probe.Stop()
	}
}

// View returns the group as of the last assignment this member received
// (zero before the first, or only a Generation while the group runs an
// older release's protocol) and the last rebalances this member saw,
// oldest first. Safe from any goroutine.
func (s *Session) View() (group.View, []group.Rebalance) {
	s.grp.mu.Lock()
	defer s.grp.mu.Unlock()
	return s.grp.view, slices.Clone(s.grp.history)
}

// deliverStandby calls OnStandby (Poll goroutine, after the assigned and
// revoked callbacks) when the member's standby and warm-up partitions
// changed. A partition also held active (its assignment is delivered first)
// is left out: it is the active task's.
func (s *Session) deliverStandby(ctx context.Context) {
	if s.cfg.OnStandby == nil {
		return
	}
	s.grp.mu.Lock()
	standby := slices.Clone(s.grp.standby)
	s.grp.mu.Unlock()
	standby = slices.DeleteFunc(standby, func(p int32) bool {
		for q := range s.owned {
			if q.Partition == p {
				return true
			}
		}
		return false
	})
	if slices.Equal(standby, s.standbyDelivered) {
		return // unchanged (or nothing before and nothing now)
	}
	s.standbyDelivered = standby
	s.log.Info("standby partitions", "group", s.cfg.GroupID, "partitions", standby)
	s.cfg.OnStandby(ctx, standby)
}

func setOf(ps []int32) map[int32]struct{} {
	m := make(map[int32]struct{}, len(ps))
	for _, p := range ps {
		m[p] = struct{}{}
	}
	return m
}

// minus returns a's partitions not in b, in a's order.
func minus(a, b []int32) []int32 {
	var out []int32
	for _, p := range a {
		if !slices.Contains(b, p) {
			out = append(out, p)
		}
	}
	return out
}

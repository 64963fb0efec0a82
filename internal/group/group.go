// Package group is what kstate's group members tell each other through the
// consumer group protocol (classic, KIP-345 static members): the metadata a
// member sends as it joins — its advertised address and the changelog
// position of every shard it holds locally — and the assignment the leader
// sends back: the member's active partitions, its standby and warm-up
// shards, and the whole group's View, so that every member, not only the
// leader, knows who owns and who stands by for each partition.
//
// The encodings are versioned (Version): a member decodes what a newer
// release sent as far as it understands it, and a group that mixes releases
// keeps working (internal/balancer).
package group

import "time"

// Version is the version of the member metadata and assignment encodings
// this release writes.
const Version = 1

// Meta is what a member reports as it joins the group.
type Meta struct {
	Version    int
	InstanceID string
	// Process is the application instance the member runs in
	// (Options.InstanceID): the pipelines of one Run are members of their
	// own (instance ids "<InstanceID>" and "<InstanceID>-p<i>") sharing one
	// state directory, so a process's shards are local to all of them and
	// a standby of a partition is never placed in the process that holds
	// it active.
	Process string
	// Addr is the member's advertised URL for live queries
	// (Options.Group.AdvertisedURL); "" when it advertises none.
	Addr string
	// Shards maps each partition whose shard this member holds locally —
	// active, standby, or closed on its disk — to the shard's changelog
	// position: the next changelog offset it would read. The leader
	// compares it with the changelog's end offset to know how far each copy
	// is behind. Every pipeline of a process reports the process's shards.
	Shards map[int32]int64
	// Standby are the partitions whose standby or warm-up copy this
	// member holds open (those of its last assignment). A partition
	// moving to its process goes to this member among the process's
	// pipelines when it has room: its standby reader hands the open shard
	// to its own active task, where a sibling pipeline would close the
	// shard and open it again (seconds at a large state).
	Standby []int32
}

// Member is one member of the group as the leader assigned it.
type Member struct {
	MemberID   string
	InstanceID string
	Process    string
	Addr       string
	// Active are the partitions the member processes (partition p of every
	// input topic: one task per partition number).
	Active []int32
	// Standby are the partitions whose shards the member keeps current from
	// the changelog, to take them over on failover.
	Standby []int32
	// Warmup are standby shards that are to become active on this member
	// once they are within AcceptableLag: the partition moves at a later
	// (probing) rebalance.
	Warmup []int32
	// Lag is, for each of the member's standby and warm-up partitions, how
	// many changelog records its copy was behind when the leader assigned
	// it.
	Lag map[int32]int64
}

// View is the group as the leader saw it at one rebalance: sent to every
// member with its assignment.
type View struct {
	Generation int32
	LeaderID   string
	// Partitions is the number of partitions (tasks) assigned.
	Partitions int32
	Members    []Member
	// At is when the leader balanced.
	At time.Time
}

// Unowned returns the partitions below v.Partitions that no member holds
// active, in order.
func (v View) Unowned() []int32 {
	owned := make(map[int32]bool)
	for _, m := range v.Members {
		for _, p := range m.Active {
			owned[p] = true
		}
	}
	var out []int32
	for p := range v.Partitions {
		if !owned[p] {
			out = append(out, p)
		}
	}
	return out
}

// Owner returns the member holding partition p active.
func (v View) Owner(p int32) (Member, bool) {
	for _, m := range v.Members {
		for _, q := range m.Active {
			if q == p {
				return m, true
			}
		}
	}
	return Member{}, false
}

// Rebalance is one rebalance as a member saw it: from the start of its
// join to its new assignment.
type Rebalance struct {
	Generation int32
	Start      time.Time
	Duration   time.Duration
	// Leader is whether this member balanced the group.
	Leader bool
	// Assigned and Revoked are the partitions the member gained and lost.
	Assigned, Revoked []int32
}

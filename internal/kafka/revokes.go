package kafka

import "github.com/twmb/franz-go/pkg/kgo"

// Revokes that franz-go does not report.
//
// kgo.GroupTransactSession wraps the revoke and lost callbacks so that a
// rebalance aborts the transaction in flight. Its wrapper calls ours only
// for the first revoke (and the first loss) after an End: until the next
// End it returns at once. The engine ends a transaction only for a batch,
// so a member that sees two rebalances without one in between — idle, its
// partitions restoring, or one batch outlasting both under load — was
// never told of the second revoke. It kept the task of a partition the
// group had given to another member: a sibling pipeline of the same
// process, the new owner, waited for the shard's lock until its restore
// gave up (integration's TestInputsTwoCodecsOneCounter under load), and
// the generation fence kept the partition as owned, free to re-commit its
// old offset over the new owner's (fence.go).
//
// So the session also follows the group from the member's side of each
// join, which franz-go always reports to the balancer (trackedBalancer) on
// the same group goroutine as the callbacks, in order with them: the join
// metadata names what the member still owns — for kstate's balancer (and
// the cooperative-sticky one of a group mixing releases) its assignment
// less what it just revoked (it joins again after every revoke); nothing
// for the eager range balancer of a mixed co-partitioned group, which
// revokes everything before every join; and nothing after a loss. franz-go
// builds every protocol's metadata at each join, so the wrapper on the
// first protocol (kstate's) sees every join, whichever protocol the group
// runs.
// Whatever the queued events leave assigned beyond that (Session.mu.queued)
// was revoked or lost without our callback: reconcile queues the revoke.
//
// The join comes after franz-go's own revoke: the partitions' fetches are
// stopped, and the transaction in flight is marked to abort (the wrapper
// skips our callback only when it is marked already). The engine closes
// the task at its next Poll, as for a reported revoke; a transaction it
// ends before then aborts on the group's generation (the rebalance is in
// progress; the generation fence gives a commit without offsets one, once
// the group has committed any). A
// revoke reported by franz-go is queued before the join and leaves
// nothing to reconcile.
//
// franz-go takes its KIP-848 path only for its own balancer types, so the
// wrapper keeps a session on the classic group protocol, which kstate uses
// anyway (it does not opt in to KIP-848).

// trackedBalancer is the session's group balancer, reporting the member's
// side of each join to reconcile. The protocol name, the balancing (as the
// leader) and the parsing of the assignment are the wrapped balancer's.
type trackedBalancer struct {
	kgo.GroupBalancer
	s *Session
}

func (b trackedBalancer) JoinGroupMetadata(interests []string, current map[string][]int32, generation int32) []byte {
	b.s.reconcile(current)
	return b.GroupBalancer.JoinGroupMetadata(interests, current, generation)
}

// reconcile queues a revoke of the partitions the queued events leave
// assigned and current, what franz-go says the member owns as it joins,
// does not hold (franz-go's group goroutine).
func (s *Session) reconcile(current map[string][]int32) {
	has := make(map[Partition]struct{})
	for topic, ps := range current {
		for _, p := range ps {
			has[Partition{topic, p}] = struct{}{}
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	var gone []Partition
	for p := range s.mu.queued {
		if _, ok := has[p]; !ok {
			gone = append(gone, p)
		}
	}
	if len(gone) == 0 {
		return
	}
	sortPartitions(gone)
	s.fence.forget(gone)
	for _, p := range gone {
		delete(s.mu.queued, p)
	}
	s.mu.events = append(s.mu.events, groupEvent{kind: evRevoked, parts: gone, missed: true})
}

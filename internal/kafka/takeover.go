package kafka

import (
	"context"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kstate/kstate/internal/group"
)

// A crashed member's open transaction, aborted by the member that takes its
// partitions over (issue #27).
//
// A member that dies (SIGKILL, OOM kill, a lost node) leaves its
// transaction open. Until the transaction coordinator aborts it, the dead
// member's records hold the last stable offset of every partition it wrote
// (its outputs and changelog partitions), and its pending offset commit
// makes the group's RequireStable offset fetch of its input partitions
// answer UNSTABLE_OFFSET_COMMIT. The coordinator aborts it only once it is
// older than its TransactionTimeout, at its next scan for timed-out
// transactions (the broker's
// transaction.abort.timed.out.transaction.cleanup.interval.ms, 10 s by
// default). So the partitions moved by the member's death paused for that
// long after the group had noticed it (SessionTimeout), whatever the new
// owner's copy of the state.
//
// The new owner does not wait: when an assignment gives it a partition
// whose owner in the previous view is no longer in the group, it describes
// that member's transactional id and, if a transaction is open, sends
// InitProducerID with it, as a restart of that member would. The
// coordinator aborts the transaction at once and bumps the producer epoch,
// which fences the member's producer should it still be alive (a member
// removed for missing its session timeout is a zombie: its commit must
// fail). The new owner waits (at most takeoverWait) until the abort is
// complete, before franz-go fetches the partitions' offsets, so the fetch
// answers at its first attempt and the restore finds the changelog stable.
//
// Only a transaction that began well before the rebalance is aborted: it
// began at least SessionTimeout minus a heartbeat interval before the
// leader balanced (the member was silent for SessionTimeout before it was
// removed). One that began later is the member's next incarnation (the
// same InstanceID restarted, after this rebalance): left alone.

// takeoverWait bounds the abort of a departed member's transaction, from
// the describe to the abort's completion. The group's sync waits for it.
const takeoverWait = 2 * time.Second

// departedOwners returns the instance ids of the members that own, in prev,
// a partition of assigned and are not in next: they left the group. Members
// without an instance id are left out (their transactional ids are random).
func departedOwners(prev, next group.View, assigned []int32) []string {
	var out []string
	for _, p := range assigned {
		was, ok := prev.Owner(p)
		if !ok || was.InstanceID == "" || slices.Contains(out, was.InstanceID) {
			continue
		}
		gone := true
		for _, m := range next.Members {
			if m.MemberID == was.MemberID || m.InstanceID == was.InstanceID {
				gone = false
				break
			}
		}
		if gone {
			out = append(out, was.InstanceID)
		}
	}
	return out
}

// abortDeparted aborts the open transactions of the members that owned, in
// the view of this member's previous assignment, partitions of parts (its
// active partitions in next) and that left the group (see above). It runs on franz-go's
// group goroutine, before the assignment takes effect; it returns within
// takeoverWait.
func (s *Session) abortDeparted(parts []int32, next group.View) {
	if s.cfg.InstanceID == "" || s.cfg.TransactionalID != s.cfg.GroupID+"-"+s.cfg.InstanceID {
		// The members' transactional ids are not derived from their
		// instance ids (a caller's own TransactionalID).
		return
	}
	s.grp.mu.Lock()
	prev, had := s.grp.view, s.grp.active
	s.grp.mu.Unlock()
	gone := departedOwners(prev, next, minus(parts, had))
	cl := s.client.Load()
	if len(gone) == 0 || cl == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), takeoverWait)
	defer cancel()
	// A transaction that began after this is not the departed member's
	// last one.
	before := next.At.Add(-s.cfg.SessionTimeout + heartbeatInterval(s.cfg.SessionTimeout))
	for _, id := range gone {
		txnID := s.cfg.GroupID + "-" + id
		start := time.Now()
		d, err := describeTxn(ctx, cl, txnID)
		if err != nil {
			s.log.Info("could not check the open transaction of a member that left the group: the broker aborts it after its timeout",
				"group", s.cfg.GroupID, "member", id, "transactional_id", txnID, "err", err)
			continue
		}
		if d.State != "Ongoing" {
			continue
		}
		if d.StartTimestamp <= 0 || !time.UnixMilli(d.StartTimestamp).Before(before) {
			s.log.Info("left the open transaction of a member that left the group: it began after the member left (a new incarnation)",
				"group", s.cfg.GroupID, "member", id, "transactional_id", txnID, "began", time.UnixMilli(d.StartTimestamp))
			continue
		}
		if err := abortTxn(ctx, cl, d); err != nil {
			s.log.Info("could not abort the open transaction of a member that left the group: the broker aborts it after its timeout",
				"group", s.cfg.GroupID, "member", id, "transactional_id", txnID, "err", err)
			continue
		}
		s.log.Info("aborted the open transaction of a member that left the group",
			"group", s.cfg.GroupID, "member", id, "transactional_id", txnID,
			"open_for", time.Since(time.UnixMilli(d.StartTimestamp)).Round(time.Millisecond),
			"took", time.Since(start).Round(time.Millisecond))
	}
}

// describeTxn describes one transactional id.
func describeTxn(ctx context.Context, cl *kgo.Client, txnID string) (kadm.DescribedTransaction, error) {
	ds, err := kadm.NewClient(cl).DescribeTransactions(ctx, txnID)
	if err != nil {
		return kadm.DescribedTransaction{}, err
	}
	d, ok := ds[txnID]
	if !ok {
		return kadm.DescribedTransaction{}, kerr.TransactionalIDNotFound
	}
	if d.Err != nil {
		return kadm.DescribedTransaction{}, d.Err
	}
	return d, nil
}

// abortTxn makes the coordinator of d's transactional id abort d, its open
// transaction (an InitProducerID, as the producer's restart sends: the
// coordinator aborts the open transaction and answers
// CONCURRENT_TRANSACTIONS meanwhile), then waits until the abort is
// complete: its markers are written, so the last stable offsets and the
// group's stable offsets are free.
//
// The request names d's producer id and epoch (KIP-360), so the
// coordinator bumps the epoch only if no one did since the describe: when
// the departed instance, restarted meanwhile, has already initialized its
// producer (which aborted d), the coordinator answers PRODUCER_FENCED to
// this request instead of fencing the new incarnation.
func abortTxn(ctx context.Context, cl *kgo.Client, d kadm.DescribedTransaction) error {
	txnID := d.TxnID
	req := kmsg.NewPtrInitProducerIDRequest()
	req.TransactionalID = &txnID
	req.TransactionTimeoutMillis = d.TimeoutMillis
	req.ProducerID, req.ProducerEpoch = d.ProducerID, d.ProducerEpoch
	resp, err := req.RequestWith(ctx, cl)
	if err != nil {
		return err
	}
	switch err := kerr.ErrorForCode(resp.ErrorCode); err {
	case nil, kerr.ConcurrentTransactions:
	case kerr.ProducerFenced, kerr.InvalidProducerEpoch:
		// Someone bumped the epoch since the describe (the restarted
		// instance, or another member taking over): d is aborted or
		// being aborted; wait for it below.
	default:
		return err
	}
	for {
		now, err := describeTxn(ctx, cl, txnID)
		switch {
		case err != nil:
			return err
		case now.State != "PrepareAbort" && now.State != "PrepareEpochFence" && now.State != "Ongoing":
			return nil
		case now.State == "Ongoing" && (now.ProducerID != d.ProducerID || now.ProducerEpoch != d.ProducerEpoch):
			return nil // d is over: a new incarnation's transaction
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
}

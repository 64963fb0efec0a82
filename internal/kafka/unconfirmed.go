package kafka

import (
	"context"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// A commit whose outcome is unconfirmed (issue #28, RELIABILITY.md Finding 3).
//
// An End(commit) whose EndTxn failed on the way (the coordinator's broker
// refused the dial during a controlled shutdown, a connection broke before
// the answer, NOT_COORDINATOR past franz-go's retries) comes back from
// franz-go as an error: the request may or may not have reached the
// coordinator, so the transaction may have committed or may still be open.
// franz-go marks the producer id for reloading and rewinds consumption to
// the last committed offsets. Before this file the session returned that
// error and the engine rebuilt its whole session (closing every task,
// rejoining, restoring from the changelog): exact, but heavy for one
// broker's planned restart.
//
// settleUnconfirmed finds the outcome instead, in three steps, and reports
// an abort only when Kafka says so:
//
//  1. the producer id is initialised again (InitProducerId at the same
//     transactional id and epoch, retried with backoff until the
//     coordinator answers): the coordinator completes a transaction that
//     reached PrepareCommit and aborts one still open, and bumps the
//     epoch, so nothing of the old transaction can commit later;
//  2. the group's committed offsets of the batch's partitions are fetched
//     stable (KIP-447: they wait for the transaction's markers);
//  3. every partition the batch moved is still at the offset committed
//     before the batch: the transaction aborted, and End reports
//     committed=false (consumption is already rewound: the batch is redone
//     in this session, as after a rebalance). Every partition at the
//     batch's end means it committed; anything else (a partition moved
//     elsewhere meanwhile, the coordinator unreachable until the bound,
//     a batch that moved no offset and so cannot be told apart) keeps the
//     error, and the engine rebuilds the session as before, which reads
//     the outcome from Kafka the same way a restart does.
//
// An end that was an abort (the caller's, or the one franz-go sent instead
// of the caller's commit after a rebalance revoked the batch's partitions)
// is settled by step 1 alone (settleAbort): no commit was sent, so the
// re-initialised producer id leaves the transaction aborted for sure.
//
// The bound is the transaction timeout: past it the coordinator aborts the
// transaction by itself, and an outage that long is the session rebuild's.

// unconfirmed reports whether err, from End(commit), leaves the
// transaction's outcome to be found: the cluster unreachable or a
// retriable error franz-go gave up on, not fencing, not a context ended.
func unconfirmed(ctx context.Context, err error) bool {
	return err != nil && ctx.Err() == nil && !isFenced(err) && !isAuthErr(err) &&
		(IsConnectionError(err) || retriable(err))
}

// retriable is IsRetriable; SetRetriableForTest breaks it on purpose.
var retriable = IsRetriable

// SetRetriableForTest replaces the classification of the retriable Kafka
// errors an unconfirmed commit is settled for, until restore is called (a
// test breaks it, with package kstate's, to show that a fault case then
// fails). Not safe beside running sessions of other tests.
func SetRetriableForTest(f func(error) bool) (restore func()) {
	old := retriable
	retriable = f
	return func() { retriable = old }
}

// settleWait is the first pause between attempts of settleUnconfirmed's
// steps (doubling up to settleWaitMax).
const (
	settleWait    = 50 * time.Millisecond
	settleWaitMax = 500 * time.Millisecond
)

// settleUnconfirmed finds the outcome of the transaction whose commit
// failed with cause; moved is, for each partition its TxnOffsetCommit
// moved, the committed offset before and after (generationFence.moves). It
// returns true only when Kafka shows the transaction aborted.
func (s *Session) settleUnconfirmed(ctx context.Context, moved map[string]map[int32][2]int64, cause error) bool {
	if len(moved) == 0 {
		s.log.Warn("commit unconfirmed and its transaction committed no input offset (nothing polled): the outcome cannot be read from the group; rebuilding the session",
			"group", s.cfg.GroupID, "err", cause)
		return false
	}
	start := time.Now()
	ctx, cancel := context.WithTimeout(ctx, s.cfg.TransactionTimeout)
	defer cancel()
	cl := s.gts.Client()

	giveUp := func(what string, err error) bool {
		s.log.Warn("commit unconfirmed: "+what+"; rebuilding the session", "group", s.cfg.GroupID,
			"waited", time.Since(start).Round(time.Millisecond), "err", err, "commit_err", cause)
		return false
	}

	// 1. Re-initialise the producer id.
	if !reinitProducer(ctx, cl, giveUp) {
		return false
	}

	if _, broken := unconfirmedAsAborted.Load(s.cfg.GroupID); broken {
		s.log.Warn("commit unconfirmed, taken for aborted without looking (SetUnconfirmedAsAbortedForTest)", "group", s.cfg.GroupID)
		return true
	}

	// 2. The committed offsets, stable (Admin.CommittedOffsets waits out
	// UNSTABLE_OFFSET_COMMIT), and 3. aborted only when every moved
	// partition is where it was.
	a := &Admin{cl: cl, adm: kadm.NewClient(cl)}
	aborted, committed := true, true
	for t, ps := range moved {
		got, err := a.CommittedOffsets(ctx, s.cfg.GroupID, t)
		if err != nil {
			return giveUp("the group's committed offsets could not be read", err)
		}
		for p, ends := range ps {
			at, ok := got[p]
			if !ok {
				at = -1
			}
			aborted = aborted && at == ends[0]
			committed = committed && at == ends[1]
		}
	}
	took := time.Since(start).Round(time.Millisecond)
	switch {
	case aborted:
		s.log.Warn("commit unconfirmed, then found aborted: consumption rewound, the batch is redone in this session",
			"group", s.cfg.GroupID, "settled_in", took, "commit_err", cause)
		return true
	case committed:
		s.log.Warn("commit unconfirmed, then found committed: rebuilding the session to continue from it",
			"group", s.cfg.GroupID, "settled_in", took, "commit_err", cause)
	default:
		s.log.Warn("commit unconfirmed and the group's offsets match neither the batch's start nor its end (partitions moved meanwhile?): rebuilding the session",
			"group", s.cfg.GroupID, "settled_in", took, "commit_err", cause)
	}
	return false
}

// settleAbort settles a transaction whose end failed unconfirmed (cause)
// when that end was an abort: the caller's (commit false), or the one
// franz-go sent instead of the caller's commit (a rebalance revoked the
// batch's partitions, or its offset commit failed: abortSent). No commit
// of it was sent, so once step 1 re-initialised the producer id the
// transaction is aborted for sure: true, unless the coordinator could not
// be reached within the transaction timeout (the session is rebuilt).
func (s *Session) settleAbort(ctx context.Context, commit bool, cause error) bool {
	start := time.Now()
	ctx, cancel := context.WithTimeout(ctx, s.cfg.TransactionTimeout)
	defer cancel()
	what := "abort"
	if commit {
		what = "commit turned abort (rebalance or failed offset commit)"
	}
	giveUp := func(step string, err error) bool {
		s.log.Warn(what+" unconfirmed: "+step+"; rebuilding the session", "group", s.cfg.GroupID,
			"waited", time.Since(start).Round(time.Millisecond), "err", err, "end_err", cause)
		return false
	}
	if !reinitProducer(ctx, s.gts.Client(), giveUp) {
		return false
	}
	s.log.Warn(what+" unconfirmed, settled aborted once the producer id was initialised again: consumption rewound, the batch is redone in this session",
		"group", s.cfg.GroupID, "settled_in", time.Since(start).Round(time.Millisecond), "end_err", cause)
	return true
}

// reinitProducer initialises cl's producer id again after an unconfirmed
// end, retrying with backoff until ctx ends; on failure it returns
// giveUp's result. A TryAbort after an unconfirmed end flags the id for
// reloading and reloads it (InitProducerId); when that load fails,
// franz-go keeps the failure until a Begin flags it again: an empty
// Begin/TryAbort pair, without a request.
func reinitProducer(ctx context.Context, cl *kgo.Client, giveUp func(what string, err error) bool) bool {
	for wait := settleWait; ; wait = min(2*wait, settleWaitMax) {
		if err := cl.EndTransaction(ctx, kgo.TryAbort); err != nil && !IsUnreachable(err) {
			return giveUp("the producer's abort failed", err)
		}
		_, _, err := cl.ProducerID(ctx)
		if err == nil {
			return true
		}
		if isFenced(err) || !sleepCtx(ctx, wait) {
			return giveUp("the producer id could not be initialised again", err)
		}
		if err := cl.BeginTransaction(); err != nil {
			return giveUp("the producer could not begin", err)
		}
	}
}

// unconfirmedAsAborted holds the groups whose sessions take every
// unconfirmed commit for aborted once the producer id is initialised
// again, skipping the offsets: what a fix that trusted a refused dial would
// do. Tests only.
var unconfirmedAsAborted sync.Map

// SetUnconfirmedAsAbortedForTest breaks settleUnconfirmed on purpose for
// the sessions of group (see unconfirmedAsAborted) until restore is called:
// a test shows that a commit whose answer was lost is then redone,
// duplicating its outputs.
func SetUnconfirmedAsAbortedForTest(group string) (restore func()) {
	unconfirmedAsAborted.Store(group, struct{}{})
	return func() { unconfirmedAsAborted.Delete(group) }
}

// sleepCtx waits d; false when ctx ended first.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

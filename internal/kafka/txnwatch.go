package kafka

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// Telling an outage from a zombie (issue #28).
//
// The broker aborts a transaction that stays open for its whole
// TransactionTimeout and bumps the producer's epoch; the producer's next
// request then meets INVALID_PRODUCER_EPOCH or PRODUCER_FENCED, as a
// zombie's does. Two very different processes see that answer:
//
//   - a live process whose writes the brokers kept refusing or not
//     answering: a topic with fewer in-sync replicas than its
//     min.insync.replicas (NOT_ENOUGH_REPLICAS, retried by franz-go until
//     the broker aborted the transaction), a broker unreachable or a
//     connection that broke. It should ride the outage out: rejoin with a
//     new session, as after a broker restart (engine/reconnect.go);
//   - a process that did not run (SIGSTOP, a VM or container frozen, a
//     debugger): its session timed out, the group gave its partitions to
//     another member, and the broker aborted its transaction. It is a
//     zombie and must stop (ErrFenced).
//
// From inside, both are "a transaction open for its timeout, then fenced".
// The difference is what the process did meanwhile, which txnWatch
// records: a ticker notes every watchTick that the process runs, so a
// freeze shows as a gap between ticks, and the running time during which
// a Kafka call of the transaction (Produce, ProduceAsync's records, End)
// was in flight is summed. verdict reads the outage only when the process
// ran throughout (no gap of freezeGap or more) and either a connection to
// a broker failed during the transaction or its calls waited on the
// brokers for at least half the timeout (they were being retried).
// Everything else (a freeze, user code slower than the timeout) stays
// fencing, as before.
//
// Why a rejoin after such a fence is safe whichever way it was read: the
// fence itself proves the broker aborted the transaction (the epoch it was
// written with is dead, so none of its records or offsets can commit), and
// the rejoin is the reconnect path — every task and the session closed, a
// new producer epoch (InitProducerId), a fresh group generation (JoinGroup),
// and state and offsets read back from what Kafka committed (stable offset
// fetch, read_committed changelog restore). Stopping a zombie is kept for
// what it says to an operator, not for correctness.

// watchTick is how often txnWatch notes that the process runs.
const watchTick = 250 * time.Millisecond

// freezeGap is the gap between ticks that shows the process did not run
// (for a third of the transaction timeout, at least a second; a loaded
// machine delays a tick by milliseconds, not by that).
func freezeGap(timeout time.Duration) time.Duration {
	return max(timeout/3, time.Second)
}

// txnWatch records what the process did during the open transaction.
type txnWatch struct {
	mu       sync.Mutex
	began    time.Time     // the open transaction's Begin; zero before the first
	lastTick time.Time     // the last time the ticker ran (or began)
	maxGap   time.Duration // the longest gap between ticks since began
	pending  int           // Kafka calls of the transaction in flight
	waited   time.Duration // running time with a call in flight, since began
}

// run ticks until ctx ends (the session's client context).
func (w *txnWatch) run(ctx context.Context) {
	t := time.NewTicker(watchTick)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			w.tick(time.Now())
		}
	}
}

// tick notes that the process runs at now.
func (w *txnWatch) tick(now time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.noteLocked(now)
}

func (w *txnWatch) noteLocked(now time.Time) {
	gap := now.Sub(w.lastTick)
	if w.lastTick.IsZero() || gap < 0 {
		gap = 0
	}
	if !w.began.IsZero() {
		w.maxGap = max(w.maxGap, gap)
		if w.pending > 0 {
			// Only running time counts as waiting: a freeze does not.
			w.waited += min(gap, 2*watchTick)
		}
	}
	w.lastTick = now
}

// begin starts watching a new transaction.
func (w *txnWatch) begin(now time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.began, w.lastTick, w.maxGap, w.waited = now, now, 0, 0
}

// enter and leave bracket a Kafka call of the transaction.
func (w *txnWatch) enter(now time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.noteLocked(now)
	w.pending++
}

func (w *txnWatch) leave(now time.Time) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.noteLocked(now)
	w.pending = max(w.pending-1, 0)
}

// verdict classifies a fence met at now by the open transaction: outage
// true when the broker aborted it for its timeout during an outage of a
// live process (why says what showed it), false when it is fencing (why
// names a freeze when one showed). connFailed is when a connection to a
// broker last failed (zero: never).
func (w *txnWatch) verdict(now time.Time, timeout time.Duration, connFailed time.Time) (outage bool, why string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.began.IsZero() {
		return false, ""
	}
	open := now.Sub(w.began)
	gap := w.maxGap
	if !w.lastTick.IsZero() {
		gap = max(gap, now.Sub(w.lastTick)) // frozen since the last tick
	}
	switch {
	case gap >= freezeGap(timeout):
		return false, fmt.Sprintf("this process did not run for %v of the transaction's %v (frozen: SIGSTOP, a paused VM or container): a zombie",
			gap.Round(time.Millisecond), open.Round(time.Millisecond))
	case !connFailed.IsZero() && !connFailed.Before(w.began):
		return true, fmt.Sprintf("a connection to a broker failed during the transaction (open %v, TransactionTimeout %v)",
			open.Round(time.Millisecond), timeout)
	case open >= timeout && w.waited >= timeout/2:
		return true, fmt.Sprintf("its writes waited %v on the brokers (retried: NOT_ENOUGH_REPLICAS while a topic has fewer in-sync replicas "+
			"than its min.insync.replicas, or requests timing out) until the broker aborted it (open %v, TransactionTimeout %v)",
			w.waited.Round(time.Millisecond), open.Round(time.Millisecond), timeout)
	}
	return false, ""
}

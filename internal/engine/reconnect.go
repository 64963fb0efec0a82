package engine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"sync"
	"time"
)

// Riding out a broker that went away (issue #25).
//
// A session call that fails because Kafka cannot be reached (connection
// refused while a broker restarts, a reset connection, EOF, an I/O
// timeout: errors marked ErrUnavailable) does not stop Run. The batch in
// flight is given up like an aborted one — its tasks Abort, dropping the
// batch's staged state, so the shards stay at the last batch they
// committed locally — and then the coordinator does in-process what a
// crash and restart do, a path the crash tests hold exact:
//
//  1. every task is closed (processor Close, shard Close; nothing staged
//     is kept) and the session is closed;
//  2. a new session is created; its first Poll initialises the
//     transactional producer again (InitProducerId), retrying while the
//     cluster is unreachable. With a stable transactional id (a static
//     InstanceID) that init settles the old producer's transaction on the
//     broker: a commit that reached PrepareCommit completes, anything
//     else is aborted. With a random one, the old transaction completes or
//     times out (TransactionTimeout) on its own;
//  3. the group assigns the partitions again and each one restores: the
//     committed offset is fetched stable (KIP-447: it waits for the old
//     transaction's outcome), and the shard catches up with the
//     changelog's committed records.
//
// So a batch whose EndTxn outcome is unknown (the request may or may not
// have reached the coordinator before the connection broke) is never
// applied to a shard from memory: if it committed, its changelog records
// and offsets are visible once settled and the restore applies them; if
// it aborted, the shard never saw it and its input is read again from
// the committed offsets. Either way outputs and state stay exactly once.
//
// There is no upper bound: the coordinator keeps rejoining while Run's
// ctx lives (an operator's SIGTERM stops it), logging a Warn at each
// attempt and while the new producer's init retries (every few seconds),
// and the phase is Starting from the failure until the group assigned
// partitions again, so readiness probes report the outage.

// Abandoner is a Session that can cut off its calls in flight from another
// goroutine (kafka.Session.Abandon): the shutdown timer uses it when Run
// has not ended abandonGrace after ShutdownTimeout, so that a produce
// retried against a broker that is down (which no context cancels) does
// not hold Run. Optional.
type Abandoner interface {
	Abandon()
}

// abandonGrace is how long after ShutdownTimeout the shutdown timer waits
// for Run to end by itself before it abandons the session.
const abandonGrace = 2 * time.Second

// setSession makes s the loop's session, also for the shutdown timer
// (abandonSession).
func (c *Coordinator) setSession(s Session) {
	c.session = s
	c.mu.Lock()
	c.mu.session = s
	c.mu.Unlock()
}

// abandonSession cuts off the current session's calls in flight if it is
// an Abandoner (the shutdown timer, at ShutdownTimeout).
func (c *Coordinator) abandonSession() {
	c.mu.Lock()
	s := c.mu.session
	c.mu.Unlock()
	if a, ok := s.(Abandoner); ok {
		c.log.Warn("shutdown timeout exceeded: closing the Kafka session under the batch in flight (its transaction is aborted by the broker)")
		a.Abandon()
	}
}

// reconnectable reports whether err, from the loop's session calls or a
// restore, is Kafka being unreachable (and not fencing: a zombie stops).
func reconnectable(err error) bool {
	return errors.Is(err, ErrUnavailable) && !errors.Is(err, ErrFenced)
}

// Backoff between reconnects that follow each other closely.
const (
	reconnectBackoffMin = 250 * time.Millisecond
	reconnectBackoffMax = 5 * time.Second
	// reconnectQuiet: a reconnect this long after the previous one starts
	// the backoff again.
	reconnectQuiet = 30 * time.Second
)

// reconnect closes every task and the session after a session call failed
// with err because Kafka is unreachable, and opens a new session (see the
// file comment). It returns an error only when the new session cannot be
// created; nil when ctx ended meanwhile (the loop then stops).
func (c *Coordinator) reconnect(ctx context.Context, what string, err error) error {
	now := c.clock.Elapsed()
	if c.reconnects > 0 && now-c.lastReconnect < reconnectQuiet {
		c.reconnectDelay = min(max(2*c.reconnectDelay, reconnectBackoffMin), reconnectBackoffMax)
	} else {
		c.reconnectDelay = 0
	}
	c.reconnects++
	c.lastReconnect = now
	c.mu.Lock()
	c.mu.rejoining = true
	changed := c.mu.phase != PhaseStarting && c.mu.phase != PhaseStopping
	if changed {
		c.mu.phase = PhaseStarting
	}
	var parts []int32
	for p := range c.mu.slots {
		parts = append(parts, p)
	}
	c.mu.Unlock()
	if changed {
		c.phaseChanged()
	}
	sort.Slice(parts, func(i, j int) bool { return parts[i] < parts[j] })
	c.log.Warn("Kafka unreachable: closing the session and the partitions' tasks, then rejoining with a new session; "+
		"the batch in flight is redone or restored from the changelog, exactly once",
		"during", what, "partitions", parts, "attempt", c.reconnects, "retry_in", c.reconnectDelay, "err", err)
	c.retire(Counters{Aborts: 1})
	if c.cfg.Observer != nil {
		c.cfg.Observer.Aborted(fmt.Errorf("kafka unreachable during %s: %w", what, err))
	}
	if cerr := c.closeTasks(parts, "closed (Kafka unreachable)"); cerr != nil {
		return cerr
	}
	c.session.Close()
	c.setSession(nil)
	if c.reconnectDelay > 0 {
		if c.clock.Sleep(ctx, c.reconnectDelay) != nil {
			return nil
		}
	}
	s, nerr := c.cfg.NewSession()
	if nerr != nil {
		return fmt.Errorf("kstate: %w", nerr)
	}
	c.setSession(s)
	return nil
}

// rejoined ends the Starting phase of a reconnect once the new session's
// group assigned partitions (loop only, after a poll returned and its
// events ran), or reconnectQuiet after the reconnect for a member the
// group gives no partition.
func (c *Coordinator) rejoined() {
	quiet := c.clock.Elapsed()-c.lastReconnect > reconnectQuiet
	c.mu.Lock()
	if c.mu.rejoining && (len(c.mu.slots) > 0 || quiet) {
		c.mu.rejoining = false
	}
	c.mu.Unlock()
}

// pollCtx is the ctx of the loop's Poll: until the run's first poll
// returned, the start-up deadline bounds it too (StartupTimeout).
func (c *Coordinator) pollCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	if c.polled || c.startupDeadline.IsZero() {
		return ctx, func() {}
	}
	return context.WithDeadline(ctx, c.startupDeadline)
}

// StartupTimeoutError is a start-up that did not complete within
// StartupTimeout: the topic checks, the group join or the producer's
// init found Kafka unreachable or not answering (a frozen broker) until
// the time was up.
type StartupTimeoutError struct {
	Timeout time.Duration // CoordinatorConfig.StartupTimeout
	Waited  time.Duration // since Run started
	What    string        // the step that was waiting
	Err     error         // the last error
}

func (e *StartupTimeoutError) Error() string {
	return fmt.Sprintf("Kafka did not answer within StartupTimeout %v (waited %v, during %s): %v",
		e.Timeout, e.Waited.Round(time.Millisecond), e.What, e.Err)
}

func (e *StartupTimeoutError) Unwrap() error { return e.Err }

// startupFailed turns an error of a start-up step (the topic checks and
// group join, or the first poll's producer init) into a
// *StartupTimeoutError when the start-up's time is up: the deadline ctx
// sctx expired while Run's ctx lives (a call to a broker that never
// answers), or the step gave up retrying an unreachable cluster.
func (c *Coordinator) startupFailed(ctx, sctx context.Context, what string, err error) error {
	if (sctx.Err() != nil && ctx.Err() == nil) || reconnectable(err) {
		return fmt.Errorf("kstate: %w", &StartupTimeoutError{Timeout: c.cfg.StartupTimeout, Waited: c.clock.Elapsed() - c.start, What: what, Err: err})
	}
	return err
}

// warnStarting logs a Warn every few seconds until stop is called, while a
// start-up step waits for Kafka (a call to a broker that accepts
// connections and never answers returns only at the deadline).
func (c *Coordinator) warnStarting(what string) (stop func()) {
	if c.startupDeadline.IsZero() {
		return func() {}
	}
	return WarnWhileStarting(c.log, c.cfg.StartupTimeout, what, func() time.Duration { return c.clock.Elapsed() - c.start })
}

// WarnWhileStarting logs "Kafka not answering at start-up: still waiting"
// on log, with what, the time waited (waited) and attrs, every
// startupWarnEvery (at most a quarter of timeout, at least 100 ms) until
// stop is called; stop returns once the logging goroutine has ended and may
// be called more than once. The coordinator's start-up steps and the App's
// (the input's partition count, before the coordinators start) share it.
func WarnWhileStarting(log *slog.Logger, timeout time.Duration, what string, waited func() time.Duration, attrs ...any) (stop func()) {
	every := min(startupWarnEvery, max(timeout/4, 100*time.Millisecond))
	done, exited := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(exited)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				log.Warn("Kafka not answering at start-up: still waiting", append([]any{"during", what,
					"waited", waited().Round(time.Millisecond), "startup_timeout", timeout}, attrs...)...)
			}
		}
	}()
	var once sync.Once
	return func() {
		once.Do(func() { close(done) })
		<-exited
	}
}

// startupWarnEvery is the interval of WarnWhileStarting's warnings.
const startupWarnEvery = 5 * time.Second

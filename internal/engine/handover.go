package engine

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/kstate/kstate/state"
)

// Handover of a shard between two members of one process (the root
// package's pipelines, Options.Batching.Pipelines). Each partition's shard directory
// is flock'ed while its task is open, and the two members learn of a move
// independently: the new owner's assignment can be delivered (and its
// restore start) before the old owner's loop has seen the revoke, which it
// only does at its next poll, after the batch it is running. So a restore
// that finds the shard locked waits, with backoff, for the old owner to
// close it. The wait is cancelled with the restore (the partition revoked
// again) and bounded: past handoverWarnAfter it warns, and past
// RestoreTimeout + MaxBatchDuration (the old owner's batch in flight
// cannot outlast that) it fails with the lock error — then another process
// holds the directory (two instances sharing a StateDir).
//
// Waiting is safe for exactly-once: the new owner has not read its
// committed offset nor fetched a record yet; it restores from the changelog
// after the old owner's transaction ended (aborted by the rebalance), like
// a restart.

// Backoff of the handover wait.
const (
	handoverBackoffMin = 10 * time.Millisecond
	handoverBackoffMax = 500 * time.Millisecond
)

// newTask is NewTask, waiting while the partition's shard is locked by its
// previous owner (see above).
func (c *Coordinator) newTask(ctx context.Context, p int32) (TaskHandle, error) {
	start := c.clock.Elapsed()
	limit := c.cfg.RestoreTimeout + c.cfg.MaxBatchDuration
	warnAfter := c.cfg.RestoreTimeout
	warned := false
	for delay := handoverBackoffMin; ; delay = min(2*delay, handoverBackoffMax) {
		t, err := c.cfg.NewTask(p)
		if err == nil || !errors.Is(err, state.ErrLocked) {
			if err == nil && c.clock.Elapsed() > start+handoverBackoffMin {
				c.log.Info("partition's shard handed over: the previous owner closed it", "partition", p,
					"waited", (c.clock.Elapsed() - start).Round(time.Millisecond))
			}
			return t, err
		}
		waited := c.clock.Elapsed() - start
		if waited+delay > limit {
			return nil, fmt.Errorf("partition %d: still locked after %v: %w", p, waited.Round(time.Millisecond), err)
		}
		if !warned && waited >= warnAfter {
			warned = true
			c.log.Warn("partition's shard is still locked by its previous owner: waiting", "partition", p,
				"waited", waited.Round(time.Millisecond), "limit", limit, "err", err)
		}
		if err := c.clock.Sleep(ctx, delay); err != nil {
			return nil, err
		}
	}
}

package engine

// This file is the coordinator's only user of package changelog and of the
// state shard (ChangelogOffset, Wipe, restore.Restore): keep it that way,
// those packages are being moved.

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/kstate/kstate/changelog"
	"github.com/kstate/kstate/internal/restore"
)

// restoreTask runs on its own goroutine per assigned partition, so that
// other partitions keep processing while it restores.
func (c *Coordinator) restoreTask(ctx context.Context, s *slot) {
	defer close(s.done)
	t, err := c.openTask(ctx, s.part)
	if err != nil {
		if ctx.Err() == nil {
			c.fail(err)
		}
		return
	}
	c.mu.Lock()
	if ctx.Err() != nil { // revoked meanwhile: closeSlot is waiting for done
		c.mu.Unlock()
		t.Close()
		c.retire(t.Counters())
		return
	}
	s.task, s.restored = t, true
	c.mu.Unlock()
}

// openTask opens the partition's task, restores the changelog tail, checks
// it against the group's committed offset, starts the task and gives it its
// initial state when this is the partition's first run.
func (c *Coordinator) openTask(ctx context.Context, p int32) (_ TaskHandle, err error) {
	start := c.clock.Elapsed()
	t, err := c.cfg.NewTask(p)
	if err != nil {
		return nil, fmt.Errorf("kstate: %w", err)
	}
	defer func() {
		if err != nil {
			t.Close()
		}
	}()
	// The committed offset is fetched stable: it waits for a previous
	// owner's transaction to finish, so the changelog read below normally
	// sees that transaction's records too.
	offs, err := c.cfg.Admin.CommittedOffsets(ctx, c.cfg.ApplicationID, c.cfg.Topic)
	if err != nil {
		return nil, fmt.Errorf("kstate: partition %d: %w", p, err)
	}
	committed, hasCommitted := offs[p]
	n, err := c.restore(ctx, t, p, committed, hasCommitted)
	if err != nil {
		return nil, err
	}
	t.AddCounters(Counters{RestoreRecords: n, RestoreTime: c.clock.Elapsed() - start})
	if err := t.Start(); err != nil {
		return nil, fmt.Errorf("kstate: %w", err)
	}
	if t.InitialStatePending() {
		if hasCommitted {
			c.log.Warn("changelog is empty but the group committed an offset: not applying the initial state (not a first run)", "partition", p, "committed_offset", committed)
		} else {
			rows, err := t.LoadInitialState(ctx, c.partitions)
			if err != nil {
				return nil, fmt.Errorf("kstate: %w", err)
			}
			c.log.Info("first run: initial state rows will be applied", "partition", p, "rows", rows)
		}
	}
	c.log.Info("partition ready", "partition", p, "restore_time", c.clock.Elapsed()-start, "restored_records", n,
		"changelog_offset", t.Shard().ChangelogOffset(), "watermark", t.Watermark(), "batch", t.BatchID())
	return t, nil
}

// restore replays the changelog tail into t's shard until the shard's
// input offset (MetaInputOffset of the last batch) reaches the group's
// committed offset.
//
// Why the loop: the previous owner's EndTxn returns before the broker has
// written the commit markers to every partition. Our committed-offset fetch
// waited for the marker on __consumer_offsets, but the changelog
// partition's marker may land a moment later; a reader opened before that
// ends at the old last stable offset and misses the last batch. Processing
// on top of that shard would silently lose the batch's state, so we read
// again until the shard has caught up with the committed offset. If it
// never does (the changelog was deleted or truncated, or the group's
// offsets were moved forward by hand), Run fails after RestoreTimeout.
func (c *Coordinator) restore(ctx context.Context, t TaskHandle, p int32, committed int64, hasCommitted bool) (int64, error) {
	deadline := c.clock.Elapsed() + c.cfg.RestoreTimeout
	var total int64
	for {
		n, err := c.restoreOnce(ctx, t, p)
		total += n
		if err != nil {
			return total, err
		}
		stored, ok, err := t.StoredInputOffset()
		if err != nil {
			return total, fmt.Errorf("kstate: %w", err)
		}
		switch {
		case !hasCommitted:
			if ok {
				c.log.Warn("the group has no committed offset but the state was built up to an input offset (offsets expired or deleted?): input is consumed from the reset position", "partition", p, "state_input_offset", stored)
			}
			return total, nil
		case ok && stored >= committed:
			if stored > committed {
				c.log.Warn("state was built past the group's committed offset (moved back by hand?): records from the committed offset on are processed again", "partition", p, "state_input_offset", stored, "committed_offset", committed)
			}
			return total, nil
		}
		if c.clock.Elapsed() > deadline {
			have := "no committed batch"
			if ok {
				have = fmt.Sprintf("input offset %d", stored)
			}
			return total, fmt.Errorf("kstate: partition %d: the changelog %q restores state up to %s, but the group committed input offset %d: "+
				"the changelog is missing records (deleted or truncated topic) or the group's offsets were moved forward; "+
				"refusing to process on inconsistent state", p, c.cfg.ChangelogTopic, have, committed)
		}
		if err := c.clock.Sleep(ctx, c.cfg.RestoreRetry); err != nil {
			return total, err
		}
	}
}

// restoreOnce reads the changelog partition from the shard's offset to the
// last stable offset captured now.
func (c *Coordinator) restoreOnce(ctx context.Context, t TaskHandle, p int32) (int64, error) {
	sh := t.Shard()
	rd, err := c.cfg.Changelog.Open(ctx, c.cfg.ChangelogTopic, p, sh.ChangelogOffset())
	if errors.Is(err, ErrOffsetOutOfRange) {
		// The stored offset is not in the topic's log any more (topic
		// recreated or truncated): the shard cannot be trusted.
		c.log.Warn("shard offset is outside the changelog: wiping the shard and restoring from the start", "partition", p, "shard_offset", sh.ChangelogOffset(), "err", err)
		if werr := sh.Wipe(); werr != nil {
			return 0, fmt.Errorf("kstate: partition %d: %w", p, werr)
		}
		rd, err = c.cfg.Changelog.Open(ctx, c.cfg.ChangelogTopic, p, 0)
	}
	if err != nil {
		return 0, fmt.Errorf("kstate: partition %d: restore: %w", p, err)
	}
	defer rd.Close()
	st, err := restore.Restore(ctx, changelogSource{rd, c.cfg.KillHook}, sh, restore.Options{
		EndOffset: rd.End(),
		Now:       func() time.Time { return time.Unix(0, 0).Add(c.clock.Elapsed()) },
		Logger:    c.log.With("partition", p),
	})
	if err != nil {
		return st.Records, fmt.Errorf("kstate: partition %d: %w", p, err)
	}
	return st.Records, nil
}

// changelogSource adapts a ChangelogReader to restore.Source.
type changelogSource struct {
	rd   ChangelogReader
	kill KillHook
}

func (s changelogSource) Next(ctx context.Context) ([]changelog.Record, error) {
	recs, err := s.rd.Next(ctx)
	if err != nil {
		return nil, err
	}
	s.kill.at(DuringRestore)
	out := make([]changelog.Record, len(recs))
	for i, rec := range recs {
		out[i] = changelog.Record{Key: rec.Key, Value: rec.Value, Offset: rec.Offset}
	}
	return out, nil
}

func (s changelogSource) Position() int64 { return s.rd.Position() }

package engine

// This file is the coordinator's only user of package changelog and of the
// state shard (ChangelogOffset, Records, the re-seed marks, restore.Restore, Estimate): keep it that way,
// those packages are being moved.

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/kstate/kstate/changelog"
	"github.com/kstate/kstate/internal/kv"
	"github.com/kstate/kstate/internal/restore"
)

// restoreTask runs on its own goroutine per assigned partition, so that
// other partitions keep processing while it restores.
func (c *Coordinator) restoreTask(ctx context.Context, s *slot) {
	defer close(s.done)
	t, err := c.openTask(ctx, s)
	if err != nil {
		// A cancelled restore's error is its cancellation, except for an
		// Init given up: Run reports that one even at shutdown.
		var stuck *StuckError
		if ctx.Err() == nil || errors.As(err, &stuck) {
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
func (c *Coordinator) openTask(ctx context.Context, s *slot) (_ TaskHandle, err error) {
	p := s.part
	start := c.clock.Elapsed()
	c.mu.Lock()
	s.restore.start, s.restore.lastLog = start, start
	c.mu.Unlock()
	// The shard is taken in the process first (reserved by Assigned): a
	// standby reader holding it (this pipeline's or a sibling's) gives it
	// up now, and a cleanup deleting it is waited for (positions.go).
	// closeSlot gives it back.
	if err := c.cfg.Positions.awaitActive(ctx, p); err != nil {
		return nil, err
	}
	// This pipeline's standby reader hands its shard over open: the
	// restore below goes on from where the standby left off.
	t := c.cfg.Positions.takeHanded(p, c)
	if t != nil {
		c.log.Info("partition's shard taken over open from the standby", "partition", p,
			"changelog_offset", t.Shard().ChangelogOffset())
	} else if t, err = c.newTask(ctx, p); err != nil { // handover.go
		return nil, fmt.Errorf("kstate: %w", err)
	}
	orphaned := false // Init given up: its goroutine closes t
	defer func() {
		if err != nil && !orphaned {
			t.Close()
		}
	}()
	// The committed offset is fetched stable: it waits for a previous
	// owner's transaction to finish, so the changelog read below normally
	// sees that transaction's records too.
	ci := committedInputs{off: make([]int64, len(c.cfg.Topics)), has: make([]bool, len(c.cfg.Topics))}
	for i, topic := range c.cfg.Topics {
		offs, err := c.cfg.Admin.CommittedOffsets(ctx, c.cfg.ApplicationID, topic)
		if err != nil {
			return nil, fmt.Errorf("kstate: partition %d: %w", p, err)
		}
		ci.off[i], ci.has[i] = offs[p]
		if ci.has[i] {
			c.mu.Lock()
			s.position[i] = ci.off[i]
			c.mu.Unlock()
		}
	}
	n, err := c.restore(ctx, t, s, ci)
	if err != nil {
		return nil, err
	}
	c.restoreEnded(s, n)
	c.noteEndOffset(ctx, s)
	t.AddCounters(Counters{RestoreRecords: n, RestoreTime: c.clock.Elapsed() - start})
	if orphaned, err = c.startTask(t, p); err != nil {
		return nil, fmt.Errorf("kstate: %w", err)
	}
	if err := c.readPlanned(ctx, t); err != nil {
		return nil, err
	}
	if t.InitialStatePending() {
		// Offsets set by SetInputOffsets (a new application continuing
		// another's input) come with the same input offset recorded in the
		// changelog: then the committed offset is a start position, not
		// the sign of a previous run.
		stored, ok, serr := storedInputs(t, len(c.cfg.Topics))
		if serr != nil {
			return nil, fmt.Errorf("kstate: %w", serr)
		}
		preset := ci.any()
		for i := range ci.has {
			if ci.has[i] && (!ok[i] || stored[i] != ci.off[i]) {
				preset = false
			}
		}
		if ci.any() && !preset {
			c.log.Warn("changelog is empty but the group committed an offset: not applying the initial state (not a first run)", "partition", p, "committed_offsets", ci.off)
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
// never does (the changelog lost records, or the group's offsets were moved
// forward by hand), Run fails after RestoreTimeout.
func (c *Coordinator) restore(ctx context.Context, t TaskHandle, s *slot, ci committedInputs) (int64, error) {
	p := s.part
	deadline := c.clock.Elapsed() + c.cfg.RestoreTimeout
	var total int64
	for {
		n, err := c.restoreOnce(ctx, t, s, total, ci)
		total += n
		if err != nil {
			return total, err
		}
		stored, ok, err := storedInputs(t, len(c.cfg.Topics))
		if err != nil {
			return total, fmt.Errorf("kstate: %w", err)
		}
		behind := -1 // the first input the state is behind on
		for i, topic := range c.cfg.Topics {
			switch {
			case !ci.has[i]:
				if ok[i] {
					c.log.Warn("the group has no committed offset but the state was built up to an input offset (offsets expired or deleted?): input is consumed from the reset position", "partition", p, "topic", topic, "state_input_offset", stored[i])
				}
			case ok[i] && stored[i] >= ci.off[i]:
				if stored[i] > ci.off[i] {
					c.log.Warn("state was built past the group's committed offset (moved back by hand?): records from the committed offset on are processed again", "partition", p, "topic", topic, "state_input_offset", stored[i], "committed_offset", ci.off[i])
				}
			default:
				if behind < 0 {
					behind = i
				}
			}
		}
		if behind < 0 {
			return total, nil
		}
		if c.clock.Elapsed() > deadline {
			have := "no committed batch"
			if ok[behind] {
				have = fmt.Sprintf("input offset %d", stored[behind])
			}
			if len(c.cfg.Topics) > 1 {
				have += fmt.Sprintf(" of input topic %q", c.cfg.Topics[behind])
			}
			return total, fmt.Errorf("kstate: partition %d: the changelog %q restores state up to %s, but the group committed input offset %d: "+
				"the changelog is missing records (deleted or truncated topic) or the group's offsets were moved forward; "+
				"refusing to process on inconsistent state", p, c.cfg.ChangelogTopic, have, ci.off[behind])
		}
		if err := c.clock.Sleep(ctx, c.cfg.RestoreRetry); err != nil {
			return total, err
		}
	}
}

// restoreOnce reads the changelog partition from the shard's offset to the
// last stable offset captured now. When the shard's offset is not in the
// changelog any more, it re-seeds the changelog from the shard or refuses
// (reseedOrRefuse); it never wipes the shard.
func (c *Coordinator) restoreOnce(ctx context.Context, t TaskHandle, s *slot, base int64, ci committedInputs) (int64, error) {
	p := s.part
	sh := t.Shard()
	pending, err := sh.ReseedPending()
	if err != nil {
		return 0, fmt.Errorf("kstate: partition %d: %w", p, err)
	}
	if pending {
		// A re-seed was begun and not finished: the changelog may hold an
		// aborted partial copy at and above the shard's offset, which a
		// read_committed restore would skip and call caught up. Decide
		// again, without reading.
		c.log.Warn("a re-seed of the changelog from the shard was interrupted: deciding again", "partition", p)
		if err := c.reseedOrRefuse(ctx, t, p, ci, nil); err != nil {
			return 0, err
		}
	}
	if err := c.wipeIfStale(ctx, sh, p); err != nil {
		return 0, err
	}
	opened := c.wallNow()
	rd, err := c.cfg.Changelog.Open(ctx, c.cfg.ChangelogTopic, p, sh.ChangelogOffset())
	if errors.Is(err, ErrOffsetOutOfRange) {
		if err := c.reseedOrRefuse(ctx, t, p, ci, err); err != nil {
			return 0, err
		}
		rd, err = c.cfg.Changelog.Open(ctx, c.cfg.ChangelogTopic, p, sh.ChangelogOffset())
	}
	if err != nil {
		return 0, fmt.Errorf("kstate: partition %d: restore: %w", p, err)
	}
	defer rd.Close()
	c.restoreReader(s, base, sh.ChangelogOffset(), rd.End())
	// The progress lines are the engine's (restoreApplied, restoreEnded).
	st, err := restore.Restore(ctx, changelogSource{rd, c.cfg.KillHook}, sh, restore.Options{
		EndOffset: rd.End(),
		Now:       func() time.Time { return time.Unix(0, 0).Add(c.clock.Elapsed()) },
		OnApplied: func(records, offset int64) { c.restoreApplied(s, records, offset) },
	})
	if err != nil {
		return st.Records, fmt.Errorf("kstate: partition %d: %w", p, err)
	}
	if err := c.caughtUp(sh, opened); err != nil {
		return st.Records, fmt.Errorf("kstate: partition %d: %w", p, err)
	}
	return st.Records, nil
}

// reseedOrRefuse handles a shard whose changelog offset is outside the
// changelog (topic deleted and recreated, or records deleted below it).
// The shard may then hold the only copy of the state, so it is never
// wiped. If it is consistent with the group — its input offset equals the
// partition's committed offset, or neither exists — it is the state of the
// last committed batch, and the changelog is re-seeded from it; otherwise
// Run stops with a *ChangelogLostError and the shard stays on disk.
//
// Crash safety: the shard is marked "re-seed pending" (a local key, synced)
// before anything is produced, and the mark is cleared together with the
// new changelog offset only after the re-seed transaction committed. A
// crash in between leaves the mark: the next restore does not trust the
// offset (the aborted partial copy occupies offsets a read_committed
// restore would skip) and re-seeds again. A crash after the commit and
// before the local write re-seeds a second time: the same values again,
// which is idempotent.
func (c *Coordinator) reseedOrRefuse(ctx context.Context, t TaskHandle, p int32, ci committedInputs, cause error) error {
	sh := t.Shard()
	stored, ok, err := storedInputs(t, len(c.cfg.Topics))
	if err != nil {
		return fmt.Errorf("kstate: partition %d: %w", p, err)
	}
	for i, topic := range c.cfg.Topics {
		if consistent := (ci.has[i] && ok[i] && stored[i] == ci.off[i]) || (!ci.has[i] && !ok[i]); consistent {
			continue
		}
		lost := &ChangelogLostError{
			Changelog: c.cfg.ChangelogTopic, Partition: p, ShardDir: t.ShardDir(), ShardOffset: sh.ChangelogOffset(),
			StateOffset: stored[i], HasState: ok[i], Committed: ci.off[i], HasCommitted: ci.has[i],
		}
		if len(c.cfg.Topics) > 1 {
			lost.Input = topic
		}
		c.log.Error("changelog lost and the shard is not consistent with the group's committed offset: refusing; the shard is left untouched",
			"partition", p, "topic", topic, "shard_offset", sh.ChangelogOffset(), "state_input_offset", stored[i], "committed_offset", ci.off[i], "cause", cause)
		return fmt.Errorf("kstate: %w", lost)
	}
	recs, err := sh.Records()
	if err != nil {
		return fmt.Errorf("kstate: partition %d: %w", p, err)
	}
	c.log.Warn("shard offset is outside the changelog (deleted, recreated or truncated): re-seeding the changelog from the shard, which is consistent with the group's committed offset",
		"partition", p, "shard_offset", sh.ChangelogOffset(), "committed_offsets", ci.off, "records", len(recs), "cause", cause)
	if err := sh.BeginReseed(); err != nil {
		return fmt.Errorf("kstate: partition %d: %w", p, err)
	}
	c.cfg.KillHook.at(BeforeReseed)
	msgs := make([]Message, len(recs))
	for i, r := range recs {
		msgs[i] = Message{Topic: c.cfg.ChangelogTopic, Partition: p, Key: r.Key, Value: r.Value}
	}
	next, err := c.cfg.Changelog.Reseed(ctx, c.cfg.ChangelogTopic, p, msgs)
	if err != nil {
		return fmt.Errorf("kstate: partition %d: re-seed the changelog %q from the shard: %w", p, c.cfg.ChangelogTopic, err)
	}
	c.cfg.KillHook.at(AfterReseed)
	if err := sh.EndReseed(next); err != nil {
		return fmt.Errorf("kstate: partition %d: %w", p, err)
	}
	c.log.Info("changelog re-seeded from the shard", "partition", p, "records", len(recs), "changelog_offset", next)
	return nil
}

// changelogSource adapts a ChangelogReader to restore.Source.
type changelogSource struct {
	rd   ChangelogReader
	kill KillHook
}

// changelogRecordsReader is an optional capability of a ChangelogReader:
// NextChangelog is Next returning the restore's record type directly, with
// no Message in between (one conversion from the fetched records).
type changelogRecordsReader interface {
	NextChangelog(ctx context.Context) ([]changelog.Record, error)
}

func (s changelogSource) Next(ctx context.Context) ([]changelog.Record, error) {
	if rd, ok := s.rd.(changelogRecordsReader); ok {
		recs, err := rd.NextChangelog(ctx)
		if err != nil {
			return nil, err
		}
		s.kill.at(DuringRestore)
		return recs, nil
	}
	recs, err := s.rd.Next(ctx)
	if err != nil {
		return nil, err
	}
	s.kill.at(DuringRestore)
	out := make([]changelog.Record, len(recs))
	for i, rec := range recs {
		out[i] = changelog.Record{Key: rec.Key, Value: rec.Value, Offset: rec.Offset, TimestampMs: unixMs(rec.Timestamp)}
	}
	return out, nil
}

func (s changelogSource) Position() int64 { return s.rd.Position() }

// StateSizes returns the estimated size of the state shard of every
// assigned partition whose task is open (for metrics); shards that cannot
// say (closing) are left out. Safe to call at any time: the stores'
// Estimate is safe concurrently with the tasks.
func (c *Coordinator) StateSizes() map[int32]kv.Estimate {
	c.mu.Lock()
	tasks := make(map[int32]TaskHandle, len(c.mu.slots))
	for p, s := range c.mu.slots {
		if s.task != nil {
			tasks[p] = s.task
		}
	}
	c.mu.Unlock()
	out := make(map[int32]kv.Estimate, len(tasks))
	for p, t := range tasks {
		if e, err := t.Shard().Estimate(); err == nil {
			out[p] = e
		}
	}
	return out
}

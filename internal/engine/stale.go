package engine

import (
	"context"
	"fmt"
	"time"

	"github.com/kstate/kstate/internal/shard"
)

// Long outages: a shard resumes its restore from its changelog offset,
// replaying only the records after it. Compaction removes a tombstone from
// the changelog once it is delete.retention.ms old (24 h by default) and
// its segment is cleaned, together with the older values of its key. A
// shard whose offset predates such a tombstone (an instance down for a
// day, a partition coming back to an instance that had it last week, a
// standby directory left behind) would replay the records after its
// offset without the deletion, and keep the deleted key: state that
// resurrects deleted keys. Kafka Streams has the same exposure with an old
// checkpoint.
//
// The shard records, with its offset, a time at or before which every
// changelog record after that offset was written (Shard.ChangelogSince).
// When that time is older than the changelog's delete.retention.ms less a
// margin, the shard is wiped and restored from the start of the
// changelog, which holds every live key. A changelog whose records below
// the shard's offset were deleted (its start is past 0) cannot restore it
// in full: the shard is kept and resumed, as before, with a Warn.

// staleMargin is how much sooner than delete.retention.ms a shard counts as
// stale: the record timestamps are the producers' clocks, and the
// cleaner's horizon is its segment's newest timestamp.
func staleMargin(retention time.Duration) time.Duration {
	return min(retention/2, time.Hour)
}

// loadDeleteRetention reads the changelog's delete.retention.ms once at
// start-up (0: unknown, no check).
func (c *Coordinator) loadDeleteRetention(ctx context.Context) {
	rd, ok := c.cfg.Admin.(RetentionDescriber)
	if !ok {
		return
	}
	d, err := rd.DeleteRetention(ctx, c.cfg.ChangelogTopic)
	if err != nil {
		c.log.Warn("cannot read the changelog's delete.retention.ms: a shard restored after a long outage is not checked for deletions compaction removed",
			"changelog", c.cfg.ChangelogTopic, "err", err)
		return
	}
	c.deleteRetention.Store(int64(d))
}

// wipeIfStale wipes sh for a full restore when its changelog offset is
// older than the changelog keeps tombstones (see above).
func (c *Coordinator) wipeIfStale(ctx context.Context, sh *shard.Shard, p int32) error {
	retention := time.Duration(c.deleteRetention.Load())
	since, off := sh.ChangelogSince(), sh.ChangelogOffset()
	if retention <= 0 || since <= 0 || off == 0 {
		return nil
	}
	age := c.wallNow().Sub(time.UnixMilli(since))
	if age < retention-staleMargin(retention) {
		return nil
	}
	// A reader opened at 0 starts at the log's start.
	rd, err := c.cfg.Changelog.Open(ctx, c.cfg.ChangelogTopic, p, 0)
	if err != nil {
		return fmt.Errorf("kstate: partition %d: restore: %w", p, err)
	}
	start := rd.Position()
	rd.Close()
	if start > 0 {
		c.log.Warn("local state is older than the changelog keeps deletions, and the changelog's start is past offset 0, so it cannot restore the partition in full: resuming from the local offset; keys deleted meanwhile may be back",
			"partition", p, "changelog_offset", off, "changelog_start", start, "age", age.Round(time.Second), "delete_retention", retention)
		return nil
	}
	c.log.Warn("local state is older than the changelog's delete.retention.ms: restoring the partition in full, since compaction may have removed deletions after its offset",
		"partition", p, "changelog_offset", off, "age", age.Round(time.Second), "delete_retention", retention)
	if err := sh.Wipe(); err != nil {
		return fmt.Errorf("kstate: partition %d: %w", p, err)
	}
	return nil
}

// caughtUp records, after sh read its changelog to the end captured when
// its reader opened at opened, that every later record was written after
// opened less a transaction timeout (Shard.RaiseChangelogSince).
func (c *Coordinator) caughtUp(sh *shard.Shard, opened time.Time) error {
	if c.deleteRetention.Load() <= 0 {
		return nil // not checked: no write
	}
	tt := c.cfg.TransactionTimeout
	if tt <= 0 {
		tt = c.cfg.RestoreTimeout
	}
	return sh.RaiseChangelogSince(opened.Add(-tt).UnixMilli())
}

// unixMs is t in Unix milliseconds, 0 for the zero time.
func unixMs(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixMilli()
}

// wallNow is CoordinatorConfig.WallNow, time.Now when unset.
func (c *Coordinator) wallNow() time.Time {
	if c.cfg.WallNow == nil {
		return time.Now()
	}
	return c.cfg.WallNow()
}

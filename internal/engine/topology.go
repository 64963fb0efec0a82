package engine

import (
	"context"
	"errors"
	"fmt"

	"github.com/kstate/kstate/internal/changelogfmt"
)

// The input topic's layout. Kafka's default partitioner maps a key to
// murmur2(key) mod N, so a change of N moves keys to partitions whose state
// is not theirs; the state of partition p lives in changelog partition p.
// The changelog's partition count therefore records the layout the state
// was built on, and the coordinator never processes on another one: it
// checks at start-up, re-reads the input topic's count every
// MetadataRefresh, and checks at once when an assignment names a partition
// it does not know. A change stops Run with a *PartitionsChangedError
// before the next batch, so nothing is committed on the new layout (records
// a producer wrote with the new layout to an old partition are caught by
// checkMisrouted: see docs/OPERATIONS.md).

// checkChangelog compares the changelog's partition count with the input
// topic's. A missing changelog is created by EnsureChangelog; if the group
// has committed offsets the state is not new, so every shard then goes
// through the re-seed-or-refuse decision of the restore (restore.go).
func (c *Coordinator) checkChangelog(ctx context.Context) (missing bool, err error) {
	cl, err := c.cfg.Admin.Partitions(ctx, c.cfg.ChangelogTopic)
	switch {
	case errors.Is(err, ErrUnknownTopic):
		// Only for the warning: a group that never committed may not
		// exist yet, which brokers report as an error (GROUP_ID_NOT_FOUND,
		// or COORDINATOR_NOT_AVAILABLE while a new cluster creates its
		// offsets topic): expected on a first start, so at Debug.
		offs, err := c.cfg.Admin.CommittedOffsets(ctx, c.cfg.ApplicationID, c.cfg.Topic)
		switch {
		case err != nil:
			c.log.Debug("changelog topic missing, and the group's committed offsets could not be read (a new group has none)", "group", c.cfg.ApplicationID, "err", err)
		case len(offs) > 0:
			c.log.Warn("the changelog topic is missing but the group has committed offsets: creating it empty; each partition's shard re-seeds it if consistent with the committed offset, otherwise Run stops",
				"changelog", c.cfg.ChangelogTopic, "committed_partitions", len(offs))
		}
		return true, nil
	case err != nil:
		return false, fmt.Errorf("kstate: changelog topic %q: %w", c.cfg.ChangelogTopic, err)
	case cl != c.partitions:
		return false, fmt.Errorf("kstate: %w", &PartitionsChangedError{Topic: c.cfg.Topic, Changelog: c.cfg.ChangelogTopic, Old: cl, New: c.partitions})
	}
	return false, nil
}

// noteAssigned records assigned partitions the coordinator does not know
// (the input topic grew); it reports whether p is known.
func (c *Coordinator) noteAssigned(p int32) bool {
	if int(p) < c.partitions {
		return true
	}
	c.unknownPart = max(c.unknownPart, p)
	c.log.Error("assigned a partition the input topic did not have at start: the partition count changed", "partition", p, "partitions", c.partitions)
	return false
}

// checkLayout runs on the loop goroutine after every Poll, before the
// batch: every MetadataRefresh, or at once after an assignment of an
// unknown partition, it re-reads the input topic's partition count.
func (c *Coordinator) checkLayout(ctx context.Context) error {
	now := c.clock.Elapsed()
	if c.unknownPart < 0 && now-c.lastMetadata < c.cfg.MetadataRefresh {
		return nil
	}
	c.lastMetadata = now
	n, err := c.cfg.Admin.Partitions(ctx, c.cfg.Topic)
	if err != nil && c.unknownPart < 0 {
		// A failed refresh is not a change: the next one retries.
		c.log.Warn("reading the input topic's partition count failed", "err", err)
		return nil
	}
	n = max(n, int(c.unknownPart)+1)
	if n != c.partitions {
		return fmt.Errorf("kstate: %w", &PartitionsChangedError{Topic: c.cfg.Topic, Changelog: c.cfg.ChangelogTopic, Old: c.partitions, New: n})
	}
	for _, t := range c.cfg.Topics[1:] {
		m, err := c.cfg.Admin.Partitions(ctx, t)
		if err != nil {
			c.log.Warn("reading an input topic's partition count failed", "topic", t, "err", err)
			continue
		}
		if m != c.partitions {
			return fmt.Errorf("kstate: %w", &PartitionsChangedError{Topic: t, Changelog: c.cfg.ChangelogTopic, Old: c.partitions, New: m})
		}
	}
	return nil
}

// checkMisrouted runs before a batch's tasks: a batch holding a record
// whose key does not hash to its partition among the known count (a
// key/partition mismatch) re-reads the partition counts first, one
// metadata request, so that nothing of it runs or commits on a changed
// layout. Such records are what a producer writes with the new layout
// right after partitions were added, long before the next MetadataRefresh
// (a non-murmur2 producer's records pay the request in every batch that
// holds one). A change is a *PartitionsChangedError; a failed read
// rewinds the batch to the committed offsets (ok false), so the records
// are polled and checked again.
func (c *Coordinator) checkMisrouted(byPart map[int32][]Record) (ok bool, err error) {
	var mis *Record
	var part int32
	for p, rs := range byPart {
		for i := range rs {
			if rs[i].Misrouted {
				mis, part = &rs[i], p
				break
			}
		}
		if mis != nil {
			break
		}
	}
	if mis == nil {
		return true, nil
	}
	ctx := c.workCtx
	c.lastMetadata = c.clock.Elapsed()
	for _, t := range c.cfg.Topics {
		n, err := c.cfg.Admin.Partitions(ctx, t)
		if err != nil {
			c.log.Warn("a batch holds a record whose key hashes to another partition, and reading the partition count failed: retrying the batch from the committed offsets",
				"topic", t, "partition", part, "offset", mis.Offset, "key_partition", mis.KeyPartition, "err", err)
			// An empty aborted transaction rewinds consumption (rewind).
			if err := c.session.Begin(); err != nil {
				return false, c.kafkaErr("begin transaction", err)
			}
			if _, err := c.session.End(ctx, false); err != nil {
				return false, c.kafkaErr("abort transaction", err)
			}
			return false, nil
		}
		if n != c.partitions {
			c.log.Error("a record written with another partition count arrived: the input topic's partition count changed; nothing of this batch is processed",
				"topic", t, "partition", part, "offset", mis.Offset, "key_partition", mis.KeyPartition, "partitions", c.partitions, "now", n)
			return false, fmt.Errorf("kstate: %w", &PartitionsChangedError{Topic: t, Changelog: c.cfg.ChangelogTopic, Old: c.partitions, New: n})
		}
	}
	return true, nil
}

// InputOffsetRecord is the changelog record of MetaInputOffset = offset:
// written together with the group's committed offset of the partition
// (kstate.SetInputOffsets), it keeps the state consistent with an offset
// moved by hand, and on a new application it marks the committed offset as
// a start position, so the initial state is still applied.
func InputOffsetRecord(offset int64) (key, value []byte) {
	return changelogfmt.MetaKey(MetaInputOffset), putInt(offset)
}

// InputOffsetRecordOf is InputOffsetRecord for input i (topic) of an
// application with several inputs (InputOffsetMeta).
func InputOffsetRecordOf(i int, topic string, offset int64) (key, value []byte) {
	return changelogfmt.MetaKey(InputOffsetMeta(i, topic)), putInt(offset)
}

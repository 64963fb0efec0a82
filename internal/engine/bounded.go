package engine

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sort"
	"time"
)

// A bounded run (CoordinatorConfig.RunToEnd, kstate's App.RunToEnd) is
// Spark's availableNow: it captures the input's end offsets at start and
// returns once everything before them is processed and committed.
//
// The end condition is the GROUP's, not this instance's: an instance
// returns when the group's committed offset of every input partition has
// reached its captured end. A partition moved by a rebalance (an instance
// crashed, or another one returned first and left) is still finished by
// whoever owns it next, and an instance that finished its own partitions
// keeps polling (and stays in the group, ready to take partitions over)
// until the others are done. Committed offsets are read with
// StableOffsetter.GroupOffsets (stable: pending transactional commits
// resolved).
//
// A committed offset can stay below the end for good when the input is
// written transactionally: the end (last stable offset) lies past the last
// commit marker, while a consumer commits the offset after the last record
// it was given. A partition whose committed offset did not move between two
// checks is therefore probed: read read_committed from the committed
// offset (Changelog.Open on the input topic); if the first readable record
// is at or after the end (or there is none), nothing is left before the
// end. Probes only run on stalled partitions (and, before joining, on every
// partition below its end), never on one this instance is still
// restoring, and their answer is remembered per committed offset, so a
// partition that is being processed costs no read.
//
// Timers and initial state (BoundedNeedsTasks): the end also requires that
// this instance got its first assignment and that every partition it holds
// is restored and wants no batch (Task.NeedsBatch: initial state pending,
// event-time timers made due by the last watermark). In ProcessingTime
// mode one more batch then runs on each held partition at the end's
// processing time (Clock.Now), so timers due by then fire and TTL applies,
// before Run returns. Without timers and initial state (NoTime), a run
// whose ends are already committed returns before joining the group: a
// second run with no new input returns at once.
//
// The end is checked after every poll that returned no records; while
// records keep coming (written after the start), once every partition
// this instance holds has been polled past its end, at most every
// busyCheckEvery. Records past the end that a poll brings along are
// processed like any other.

// StableOffsetter is the Admin capability a bounded run needs.
type StableOffsetter interface {
	// StableOffsets returns the last stable offset of every partition of
	// topic: the end of what a read_committed consumer can read now.
	StableOffsets(ctx context.Context, topic string) (map[int32]int64, error)
	// GroupOffsets is Admin.CommittedOffsets for the bounded run's end
	// check, a call of the loop (Admin.CommittedOffsets is the restores'
	// call, which a test Admin may hold back).
	GroupOffsets(ctx context.Context, group, topic string) (map[int32]int64, error)
}

// bounded is the state of a bounded run; loop-only.
type bounded struct {
	// Per input topic partition:
	ends     map[Partition]int64 // captured at start
	last     map[Partition]int64 // committed offsets at the previous check; -1: none
	probed   map[Partition]int64 // a committed offset a probe found nothing after (before the end)
	pending  map[Partition]int64 // a committed offset a probe found a record after (before the end)
	pos      map[Partition]int64 // the offset after the last record polled
	assigned bool                // the first assignment was delivered
	lastBusy time.Duration       // Clock.Elapsed of the last check while records flow
	ended    bool                // the end was reached: Run returns nil, a graceful shutdown
}

// captureEnds reads the input's end offsets (bounded runs only).
func (c *Coordinator) captureEnds(ctx context.Context) error {
	eo := c.cfg.Admin.(StableOffsetter) // checked by NewCoordinator
	c.bnd = &bounded{ends: map[Partition]int64{}, last: map[Partition]int64{}, probed: map[Partition]int64{},
		pending: map[Partition]int64{}, pos: map[Partition]int64{}}
	for _, topic := range c.cfg.Topics {
		ends, err := eo.StableOffsets(ctx, topic)
		if err != nil {
			return fmt.Errorf("kstate: end offsets of input topic %q: %w", topic, err)
		}
		for p, o := range ends {
			c.bnd.ends[Partition{Topic: topic, Partition: p}] = o
		}
	}
	return nil
}

// busyCheckEvery bounds how often the end is checked while records keep
// coming (input written after the start): the group's offsets are read at
// most this often then.
const busyCheckEvery = 200 * time.Millisecond

// shouldCheck says whether the loop checks the end after a batch of recs:
// always after a poll without records; while records flow, only once every
// partition this instance holds was polled up to its end (the records
// past it were written after the start), and at most every busyCheckEvery.
func (c *Coordinator) shouldCheck(recs []Message) bool {
	b := c.bnd
	for i := range recs {
		r := &recs[i]
		if tp := (Partition{Topic: r.Topic, Partition: r.Partition}); r.Offset+1 > b.pos[tp] {
			b.pos[tp] = r.Offset + 1
		}
	}
	if len(recs) == 0 {
		return true
	}
	c.mu.Lock()
	for p := range c.mu.slots {
		for _, tp := range c.inputPartitions(p) {
			if end := b.ends[tp]; end > 0 && b.pos[tp] < end {
				c.mu.Unlock()
				return false
			}
		}
	}
	c.mu.Unlock()
	if now := c.clock.Elapsed(); b.lastBusy == 0 || now-b.lastBusy >= busyCheckEvery {
		b.lastBusy = now
		return true
	}
	return false
}

// reachedEnd reports whether the bounded run is complete (see above).
// probeAll probes every partition below its end, not only stalled ones
// (the check before joining, when nothing has run yet).
func (c *Coordinator) reachedEnd(ctx context.Context, probeAll bool) (bool, error) {
	b := c.bnd
	restoring := map[int32]bool{} // held, not ready: not probed (no batch ran on them yet)
	c.mu.Lock()
	for p, s := range c.mu.slots {
		if !s.ready {
			restoring[p] = true
		}
	}
	c.mu.Unlock()
	if c.cfg.BoundedNeedsTasks {
		if !b.assigned {
			return false, nil
		}
		c.mu.Lock()
		for _, s := range c.mu.slots {
			if !s.ready || s.task.NeedsBatch() {
				c.mu.Unlock()
				return false, nil
			}
		}
		c.mu.Unlock()
	}
	committed := map[Partition]int64{}
	for _, topic := range c.cfg.Topics {
		offs, err := c.cfg.Admin.(StableOffsetter).GroupOffsets(ctx, c.cfg.ApplicationID, topic)
		if err != nil {
			return false, fmt.Errorf("kstate: committed offsets of group %q: %w", c.cfg.ApplicationID, err)
		}
		for p, o := range offs {
			committed[Partition{Topic: topic, Partition: p}] = o
		}
	}
	parts := make([]Partition, 0, len(b.ends))
	for tp := range b.ends {
		parts = append(parts, tp)
	}
	sort.Slice(parts, func(i, j int) bool {
		if parts[i].Topic != parts[j].Topic {
			return parts[i].Topic < parts[j].Topic
		}
		return parts[i].Partition < parts[j].Partition
	})
	done := true
	for _, p := range parts {
		end := b.ends[p]
		at, ok := committed[p]
		if !ok {
			at = -1
		}
		if end <= 0 || at >= end {
			continue
		}
		prev, seen := b.last[p]
		b.last[p] = at
		if o, ok := b.probed[p]; ok && o == at {
			continue
		}
		if o, ok := b.pending[p]; ok && o == at {
			done = false // probed at this offset already: records are left
			continue
		}
		if restoring[p.Partition] || (!probeAll && (!seen || prev != at)) {
			done = false // moving (or first seen): being processed
			continue
		}
		empty, err := c.nothingBefore(ctx, p.Topic, p.Partition, max(at, 0), end)
		if err != nil {
			return false, err
		}
		if !empty {
			b.pending[p] = at
			done = false
			continue
		}
		b.probed[p] = at
	}
	return done, nil
}

// nothingBefore reports whether partition p of input topic has no record a
// read_committed consumer would get between from and end.
func (c *Coordinator) nothingBefore(ctx context.Context, topic string, p int32, from, end int64) (bool, error) {
	rd, err := c.cfg.Changelog.Open(ctx, topic, p, from)
	if errors.Is(err, ErrOffsetOutOfRange) {
		// Below the log start (retention): the consumer resets too.
		rd, err = c.cfg.Changelog.Open(ctx, topic, p, 0)
	}
	if err != nil {
		return false, fmt.Errorf("kstate: reading input topic %q partition %d from offset %d (bounded run's end check): %w", topic, p, from, err)
	}
	defer rd.Close()
	if rd.End() <= from {
		return true, nil
	}
	msgs, err := rd.Next(ctx)
	if errors.Is(err, io.EOF) {
		return true, nil
	}
	if err != nil {
		return false, fmt.Errorf("kstate: reading input topic %q partition %d from offset %d (bounded run's end check): %w", topic, p, from, err)
	}
	return len(msgs) == 0 || msgs[0].Offset >= end, nil
}

// finishBounded runs the end's last batch (ProcessingTime: timers due at
// the end's processing time fire) and marks the run ended.
func (c *Coordinator) finishBounded() error {
	if c.cfg.ProcessingTime {
		c.forceTrigger = true
		err := c.batch(nil)
		c.forceTrigger = false
		if err != nil {
			return err
		}
	}
	c.bnd.ended = true
	c.log.Info("bounded run reached the end offsets captured at start: stopping", "ends", c.bnd.ends)
	return nil
}

package kstate

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strconv"
	"time"

	"github.com/kstate/kstate/changelog"
	"github.com/kstate/kstate/internal/engine"
	"github.com/kstate/kstate/internal/kafka"
	"github.com/kstate/kstate/internal/restore"
)

// slot is one assigned partition. Its life:
//
//	onAssigned: partition paused, restore goroutine started
//	restore goroutine: open shard, restore changelog tail, Start (modes,
//	    Init), initial state; then hands the task over (task, restored) under mu
//	promote (loop): ready = true, partition resumed — only now can Poll
//	    return its records
//	onRevoked/onLost/shutdown (loop): restore cancelled and waited for, task
//	    closed (processor Close, shard Close; kept on disk)
//
// Callbacks run inside Poll on the loop goroutine, between batches, so a
// task is never closed while it runs a batch.
type slot[K, I, O any] struct {
	part   int32
	cancel context.CancelFunc
	done   chan struct{} // closed when the restore goroutine returned

	// Written by the restore goroutine under runner.mu, read by the loop.
	task     *engine.Task[K, I, O]
	restored bool
	// ready is loop-only (also read under mu by Metrics).
	ready bool
}

func (r *runner[K, I, O]) onAssigned(_ context.Context, parts []kafka.Partition) {
	var ps []kafka.Partition
	for _, p := range parts {
		if p.Topic == r.topic {
			ps = append(ps, p)
		}
	}
	// Pause before anything else: a partition must not deliver records
	// until its state is restored (their offsets would be committed with
	// the next transaction otherwise; see runner.rewind for records that
	// were fetched before this pause).
	r.session.Pause(ps)
	for _, p := range ps {
		ctx, cancel := context.WithCancel(r.workCtx)
		s := &slot[K, I, O]{part: p.Partition, cancel: cancel, done: make(chan struct{})}
		r.mu.Lock()
		old := r.mu.slots[p.Partition]
		r.mu.slots[p.Partition] = s
		r.mu.Unlock()
		if old != nil {
			// Assigned twice without a revoke in between (should not
			// happen): keep the new one; close the old first (shard lock).
			r.closeSlot(old, "reassigned")
		}
		r.logf("partition %d assigned: restoring", p.Partition)
		r.wg.Go(func() { r.restoreTask(ctx, s) })
	}
}

func (r *runner[K, I, O]) onRevoked(_ context.Context, parts []kafka.Partition) {
	r.closeTasks(r.inputParts(parts), "revoked")
}

// onLost: the partitions may already be processed elsewhere. There is no
// batch in flight (callbacks run between batches) and the transaction that
// was open when they were lost aborted, so there is no staged state left
// to drop: closing the tasks is all there is to do.
func (r *runner[K, I, O]) onLost(_ context.Context, parts []kafka.Partition) {
	r.closeTasks(r.inputParts(parts), "lost")
}

func (r *runner[K, I, O]) inputParts(parts []kafka.Partition) []int32 {
	var out []int32
	for _, p := range parts {
		if p.Topic == r.topic {
			out = append(out, p.Partition)
		}
	}
	return out
}

// closeTasks removes and closes the tasks of parts; it returns the first
// error of a processor's Close.
func (r *runner[K, I, O]) closeTasks(parts []int32, why string) error {
	var first error
	for _, p := range parts {
		r.mu.Lock()
		s := r.mu.slots[p]
		delete(r.mu.slots, p)
		r.mu.Unlock()
		if s != nil {
			if err := r.closeSlot(s, why); err != nil && first == nil {
				first = err
			}
		}
	}
	return first
}

// closeSlot cancels the slot's restore, waits for it, and closes its task.
func (r *runner[K, I, O]) closeSlot(s *slot[K, I, O], why string) error {
	s.cancel()
	<-s.done
	r.mu.Lock()
	t := s.task
	s.task, s.ready = nil, false
	r.mu.Unlock()
	if t == nil {
		r.logf("partition %d %s during restore", s.part, why)
		return nil
	}
	err := t.Close()
	r.app.retire(t.Counters())
	if err != nil {
		r.logf("partition %d %s: %v", s.part, why, err)
		return fmt.Errorf("kstate: %w", err)
	}
	r.logf("partition %d %s: task closed", s.part, why)
	return nil
}

// promote resumes the partitions whose restore finished.
func (r *runner[K, I, O]) promote() {
	var ps []kafka.Partition
	r.mu.Lock()
	for p, s := range r.mu.slots {
		if s.restored && !s.ready {
			s.ready = true
			ps = append(ps, kafka.Partition{Topic: r.topic, Partition: p})
		}
	}
	r.mu.Unlock()
	if len(ps) > 0 {
		r.session.Resume(ps)
	}
}

// readyTasks returns the slots whose tasks may run batches.
func (r *runner[K, I, O]) readyTasks() map[int32]*slot[K, I, O] {
	out := make(map[int32]*slot[K, I, O])
	r.mu.Lock()
	defer r.mu.Unlock()
	for p, s := range r.mu.slots {
		if s.ready {
			out[p] = s
		}
	}
	return out
}

// snapshot adds the live tasks' counters to m.
func (r *runner[K, I, O]) snapshot(m *Metrics) {
	if m.Partitions == nil {
		m.Partitions = map[int32]Counters{}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	m.FirstCommit = r.mu.firstCommit
	for p, s := range r.mu.slots {
		m.Assigned = append(m.Assigned, p)
		if !s.ready {
			m.Restoring = append(m.Restoring, p)
		}
		if s.task != nil {
			c := s.task.Counters()
			m.Partitions[p] = c
			m.Total.Add(c)
		}
	}
}

func (r *runner[K, I, O]) taskConfig(p int32) engine.Config[K, I, O] {
	c := r.cfg
	return engine.Config[K, I, O]{
		ApplicationID:     c.ApplicationID,
		RunID:             r.runID,
		Topic:             r.topic,
		Partition:         p,
		Dir:               filepath.Join(c.StateDir, c.ApplicationID, strconv.Itoa(int(p))),
		TimeMode:          c.TimeMode,
		OutputMode:        c.OutputMode,
		KeySerde:          c.KeySerde,
		ValueSerde:        c.ValueSerde,
		OutputSerde:       c.OutputSerde,
		NewProcessor:      c.NewProcessor,
		EventTime:         c.EventTime,
		AllowedLatenessMs: c.AllowedLateness.Milliseconds(),
		OutputEventTime:   c.OutputEventTime,
		OutputKey:         c.OutputKey,
		Logf:              r.logf,
	}
}

// restoreTask runs on its own goroutine per assigned partition, so that
// other partitions keep processing while it restores.
func (r *runner[K, I, O]) restoreTask(ctx context.Context, s *slot[K, I, O]) {
	defer close(s.done)
	t, err := r.openTask(ctx, s.part)
	if err != nil {
		if ctx.Err() == nil {
			r.fail(err)
		}
		return
	}
	r.mu.Lock()
	if ctx.Err() != nil { // revoked meanwhile: closeSlot is waiting for done
		r.mu.Unlock()
		t.Close()
		r.app.retire(t.Counters())
		return
	}
	s.task, s.restored = t, true
	r.mu.Unlock()
}

// openTask opens the partition's shard, restores the changelog tail, checks
// it against the group's committed offset, starts the task and gives it its
// initial state when this is the partition's first run.
func (r *runner[K, I, O]) openTask(ctx context.Context, p int32) (_ *engine.Task[K, I, O], err error) {
	start := time.Now()
	t, err := engine.Open(r.taskConfig(p))
	if err != nil {
		return nil, fmt.Errorf("kstate: %w", err)
	}
	defer func() {
		if err != nil {
			t.Close()
		}
	}()
	// The committed offset is fetched with RequireStable: it waits for a
	// previous owner's transaction to finish, so the changelog read below
	// normally sees that transaction's records too.
	offs, err := r.admin.CommittedOffsets(ctx, r.cfg.ApplicationID, r.topic)
	if err != nil {
		return nil, fmt.Errorf("kstate: partition %d: %w", p, err)
	}
	committed, hasCommitted := offs[p]
	n, err := r.restore(ctx, t, p, committed, hasCommitted)
	if err != nil {
		return nil, err
	}
	t.AddCounters(engine.Counters{RestoreRecords: n, RestoreTime: time.Since(start)})
	if err := t.Start(); err != nil {
		return nil, fmt.Errorf("kstate: %w", err)
	}
	if r.cfg.InitialState != nil && t.Fresh() && !t.InitialStateApplied() {
		if hasCommitted {
			r.logf("partition %d: changelog is empty but the group committed offset %d: not applying the initial state (not a first run)", p, committed)
		} else {
			rows, err := r.initial.forPartition(ctx, r, p)
			if err != nil {
				return nil, err
			}
			t.SetInitialState(rows)
			r.logf("partition %d: first run: %d initial state rows will be applied", p, len(rows))
		}
	}
	r.logf("partition %d ready in %v (%d changelog records restored, changelog offset %d, watermark %d, next batch id %d)",
		p, time.Since(start).Round(time.Millisecond), n, t.Shard().ChangelogOffset(), t.Watermark(), t.BatchID())
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
// offsets were moved forward by hand), Run fails after TransactionTimeout.
func (r *runner[K, I, O]) restore(ctx context.Context, t *engine.Task[K, I, O], p int32, committed int64, hasCommitted bool) (int64, error) {
	deadline := time.Now().Add(r.cfg.TransactionTimeout)
	var total int64
	for {
		n, err := r.restoreOnce(ctx, t, p)
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
				r.logf("partition %d: the group has no committed offset but the state was built up to input offset %d (offsets expired or deleted?): input is consumed from the reset position", p, stored)
			}
			return total, nil
		case ok && stored >= committed:
			if stored > committed {
				r.logf("partition %d: state was built up to input offset %d, the group's committed offset is %d (moved back by hand?): records from %d on are processed again", p, stored, committed, committed)
			}
			return total, nil
		}
		if time.Now().After(deadline) {
			have := "no input offset"
			if ok {
				have = fmt.Sprintf("input offset %d", stored)
			}
			return total, fmt.Errorf("kstate: partition %d: the changelog %q restores state up to %s, but the group committed input offset %d: "+
				"the changelog is missing records (deleted or truncated topic) or the group's offsets were moved forward; "+
				"refusing to process on inconsistent state", p, r.changelogTopic, have, committed)
		}
		select {
		case <-ctx.Done():
			return total, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// restoreOnce reads the changelog partition from the shard's offset to the
// last stable offset captured now.
func (r *runner[K, I, O]) restoreOnce(ctx context.Context, t *engine.Task[K, I, O], p int32) (int64, error) {
	sh := t.Shard()
	rd, err := kafka.NewPartitionReader(ctx, r.cfg.Brokers, r.changelogTopic, p, sh.ChangelogOffset())
	if errors.Is(err, kafka.ErrOffsetOutOfRange) {
		// The stored offset is not in the topic's log any more (topic
		// recreated or truncated): the shard cannot be trusted.
		r.logf("partition %d: shard offset %d is outside the changelog: wiping the shard and restoring from the start (%v)", p, sh.ChangelogOffset(), err)
		if werr := sh.Wipe(); werr != nil {
			return 0, fmt.Errorf("kstate: partition %d: %w", p, werr)
		}
		rd, err = kafka.NewPartitionReader(ctx, r.cfg.Brokers, r.changelogTopic, p, 0)
	}
	if err != nil {
		return 0, fmt.Errorf("kstate: partition %d: restore: %w", p, err)
	}
	defer rd.Close()
	st, err := restore.Restore(ctx, changelogSource{rd}, sh, restore.Options{
		EndOffset: rd.End(),
		Logf: func(format string, args ...any) {
			r.logf("partition %d: "+format, append([]any{p}, args...)...)
		},
	})
	if err != nil {
		return st.Records, fmt.Errorf("kstate: partition %d: %w", p, err)
	}
	return st.Records, nil
}

// changelogSource adapts a kafka.PartitionReader to restore.Source.
type changelogSource struct{ rd *kafka.PartitionReader }

func (s changelogSource) Next(ctx context.Context) ([]changelog.Record, error) {
	recs, err := s.rd.Next(ctx)
	if err != nil {
		return nil, err
	}
	engine.At(engine.DuringRestore)
	out := make([]changelog.Record, len(recs))
	for i, rec := range recs {
		out[i] = changelog.Record{Key: rec.Key, Value: rec.Value, Offset: rec.Offset}
	}
	return out, nil
}

func (s changelogSource) Position() int64 { return s.rd.Position() }

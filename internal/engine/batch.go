package engine

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"time"

	"github.com/kstate/kstate/changelog"
	"github.com/kstate/kstate/internal/handle"
	"github.com/kstate/kstate/internal/kv"
	"github.com/kstate/kstate/internal/timers"
	"github.com/kstate/kstate/processor"
	"github.com/kstate/kstate/state"
)

// BatchResult is what a batch hands back to the owner for the transaction.
type BatchResult struct {
	Outputs   []Output
	Changelog []changelog.Record
	// DeadLetters go to the dead-letter topic in the same transaction.
	DeadLetters []DeadLetter
	// Empty is true when the batch changed nothing and emitted nothing: the
	// owner may skip the transaction for this task.
	Empty bool
	// Repartition are the records forwarded to the repartition topic
	// (GroupBy inputs, repartition.go), in the same transaction.
	Repartition []Output
	// Sink, set when the task has a sink and the batch emitted rows, hands
	// them to it; the owner calls it before the transaction (sink.go). Its
	// error is a *SinkError.
	Sink func(ctx context.Context) error
}

// group is the rows of one grouping key in a batch.
type group[K, I any] struct {
	keyBytes []byte
	key      K
	n        int           // rows
	first    int32         // the first row's index in b, -1: none yet
	last     int32         // the last row's index in b
	b        *batchRows[I] // the batch's rows
	call     activeCall[K] // the key's HandleInputRows call, as the watchdog sees it
}

// batchRows are the grouped rows of a batch, in record order; the rows of
// one group are chained by next. One array each per batch instead of
// slices per key (issue #13: the per-key appends were a sixth of the count
// path's allocations).
type batchRows[I any] struct {
	vals []I
	recs []*Record // the rows' records, for the dead-letter topic
	next []int32   // index of the same group's next row, -1 after its last
}

// add appends row j of g.
func (g *group[K, I]) add(v I, r *Record) {
	b := g.b
	j := int32(len(b.vals))
	b.vals = append(b.vals, v)
	b.recs = append(b.recs, r)
	b.next = append(b.next, -1)
	if g.first < 0 {
		g.first = j
	} else {
		b.next[g.last] = j
	}
	g.last = j
	g.n++
}

// rows yields g's rows in record order (HandleInputRows's iter.Seq).
func (g *group[K, I]) rows(yield func(I) bool) {
	for j := g.first; j >= 0; j = g.b.next[j] {
		if !yield(g.b.vals[j]) {
			return
		}
	}
}

// records yields g's records in order.
func (g *group[K, I]) records(yield func(*Record) bool) {
	for j := g.first; j >= 0; j = g.b.next[j] {
		if !yield(g.b.recs[j]) {
			return
		}
	}
}

// RunBatch runs one micro-batch over recs (the task's records of this poll,
// in offset order) with batch processing time nowMs (taken once per batch by
// the owner from its clock). After an error the owner must call Abort (or
// Close); after success, Commit once the transaction committed or Abort if
// it did not.
func (t *Task[K, I, O]) RunBatch(nowMs int64, recs []Record) (_ *BatchResult, err error) {
	// Processor methods recover their own panics (invoke); this catches
	// panics of the configured callbacks that run outside them (codecs,
	// the event-time extractor), which would otherwise kill the process
	// from the batch goroutine.
	defer func() {
		t.rt.ForgetKey() // keep none of recs' bytes alive after the batch
		if r := recover(); r != nil {
			t.rt.SetPhase(handle.PhaseIdle)
			err = &UserError{Method: "RunBatch (codec or Topology callback)", Partition: t.cfg.Partition, Panic: r, Stack: debug.Stack()}
		}
	}()
	if t.closed {
		return nil, ErrClosed
	}
	if t.inBatch {
		return nil, ErrInBatch
	}
	mode := t.cfg.TimeMode
	procMs, ttlMs := int64(-1), int64(-1)
	if mode != processor.NoTime {
		procMs = nowMs
	}
	if mode == processor.ProcessingTime {
		ttlMs = nowMs
	}
	if t.proc == nil {
		return nil, fmt.Errorf("partition %d: RunBatch before Start", t.cfg.Partition)
	}
	if pl := t.Planned(); pl != nil || t.hasSink() {
		// A batch with a sink executes exactly its committed plan; so
		// does an outstanding plan of a run that had a sink.
		if pl == nil || !pl.recsPresent || pl.TimeMs != nowMs || int64(len(recs)) != pl.Count() {
			return nil, fmt.Errorf("partition %d: batch %d does not match its plan (internal error)", t.cfg.Partition, t.batchID)
		}
		t.sinkKeys, t.sinkValues = nil, nil
	}
	t.shard.Begin(ttlMs)
	t.inBatch = true
	t.emitSeq = 0
	t.pend = pending{
		watermark:      t.watermark,
		lateWatermark:  t.watermark,
		batchID:        t.batchID,
		initialApplied: t.initialApplied,
	}
	p := &t.pend
	if mode == processor.EventTime && t.watermark != t.lateWatermark {
		// This batch's watermark becomes the next batch's watermark for
		// late events.
		if err := t.shard.PutMeta(MetaLateWatermark, putInt(t.watermark)); err != nil {
			return nil, t.metaErr(err)
		}
	}
	tv := processor.NewTimerValues(procMs, t.Watermark())
	t.rt.SetBatchID(t.batchID)
	res := &BatchResult{}
	busy := false // the batch ran user code on input, timers or initial state

	// Initial state: first run only, before any input of the partition.
	if len(t.initial) > 0 && !t.initialApplied {
		for _, row := range t.initial {
			t.rt.SetKey(row.KeyBytes)
			t.rt.SetPhase(handle.PhaseInitialState)
			err := t.invoke("HandleInitialState", row.Key, true, func() error { return row.Apply(t.proc, tv) })
			t.rt.SetPhase(handle.PhaseIdle)
			if err != nil {
				return nil, err
			}
			p.counters.InitialStateRows++
		}
		if err := t.shard.PutMeta(MetaInitialApplied, []byte{1}); err != nil {
			return nil, t.metaErr(err)
		}
		p.initialApplied = true
		busy = true
	}

	// A record skipped by hand (kstate.SkipRecord) is dropped here; recs
	// keeps it for the input offsets.
	kept, err := t.applySkips(recs)
	if err != nil {
		return nil, err
	}
	// Records of GroupBy inputs go to the repartition topic; recs keeps
	// all of them for the input offsets.
	rest, err := t.forward(kept, nowMs, res)
	if err != nil {
		return nil, err
	}
	groups, maxEvent, err := t.group(rest, nowMs, res)
	if err != nil {
		return nil, err
	}
	if len(res.DeadLetters) > 0 {
		busy = true
	}
	if err := t.prefetch(groups); err != nil {
		return nil, err
	}
	res.Outputs = make([]Output, 0, t.outputsHint(len(rest)))
	ems := make([]emitter[K, I, O], len(groups)) // one allocation, not one per key
	for gi := range groups {
		g := &groups[gi]
		sp, err := t.savepoint(res)
		if err != nil {
			return nil, err
		}
		em := &ems[gi]
		*em = emitter[K, I, O]{t: t, key: g.key, keyBytes: g.keyBytes, method: "HandleInputRows", out: &res.Outputs}
		t.rt.SetKey(g.keyBytes)
		t.rt.SetPhase(handle.PhaseInput)
		g.call = activeCall[K]{method: "HandleInputRows", key: g.key, withKey: true}
		err = t.invokeCall(&g.call, func() error {
			return t.proc.HandleInputRows(g.key, g.rows, tv, em)
		})
		t.rt.SetPhase(handle.PhaseIdle)
		if cerr := em.close(); err == nil {
			err = cerr
		}
		busy = true
		if err != nil {
			if !sp.on || notTheKeys(err) {
				return nil, err
			}
			// OnProcessingError DeadLetter: the key's rows go to the
			// dead-letter topic; what its call did is discarded.
			if derr := t.discard(sp, res); derr != nil {
				return nil, derr
			}
			for r := range g.records {
				res.DeadLetters = append(res.DeadLetters, t.deadLetter(r, StageProcess, err, nowMs))
			}
			p.counters.ProcessingErrors++
			p.counters.DeadLettered += int64(g.n)
			t.log.Warn("failing key's rows sent to the dead-letter topic; its changes in this batch are discarded",
				"key", fmt.Sprintf("%#v", g.key), "rows", g.n, "err", err)
			continue
		}
		p.counters.Keys++
		p.counters.RowsIn += int64(g.n)
	}
	if len(rest) > 0 {
		t.lastRows, t.lastOutputs = len(rest), len(res.Outputs)
	}

	fired, err := t.fireTimers(tv, nowMs, res)
	if err != nil {
		return nil, err
	}
	if fired > 0 {
		busy = true
	}

	if mode == processor.EventTime && maxEvent != noWatermark {
		if wm := maxEvent - t.cfg.AllowedLatenessMs; wm > p.watermark {
			p.watermark = wm
			if err := t.shard.PutMeta(MetaWatermark, putInt(wm)); err != nil {
				return nil, t.metaErr(err)
			}
		}
	}
	if err := t.putInputOffsets(recs); err != nil {
		return nil, err
	}
	if busy {
		p.batchID = t.batchID + 1
		if err := t.shard.PutMeta(MetaBatchID, putInt(p.batchID)); err != nil {
			return nil, t.metaErr(err)
		}
		p.counters.Batches++
	}

	if err := t.markPlanDone(); err != nil {
		return nil, err
	}

	recsOut, err := t.shard.Finish()
	if err != nil {
		return nil, fmt.Errorf("partition %d: finish batch: %w", t.cfg.Partition, err)
	}
	res.Changelog = recsOut
	p.counters.RowsOut = int64(len(res.Outputs))
	p.counters.ChangelogRecords = int64(len(recsOut))
	res.Empty = len(res.Outputs) == 0 && len(res.Changelog) == 0 && len(res.DeadLetters) == 0 && len(res.Repartition) == 0
	if t.hasSink() && len(t.sinkKeys) > 0 {
		res.Sink = t.sinkCall(t.batchID, t.sinkKeys, t.sinkValues)
	}
	return res, nil
}

// prefetch passes the batch's grouping keys to the shard, which reads
// ahead the state their handlers will read (shard.Prefetch).
func (t *Task[K, I, O]) prefetch(groups []group[K, I]) error {
	keys := t.groupKeys[:0]
	for gi := range groups {
		keys = append(keys, groups[gi].keyBytes)
	}
	err := t.shard.Prefetch(keys)
	clear(keys) // keep no batch's keys alive
	t.groupKeys = keys
	if err != nil {
		return fmt.Errorf("partition %d: %w", t.cfg.Partition, err)
	}
	return nil
}

// group decodes recs, drops late rows (EventTime) and groups the rest by
// key: keys in order of first appearance, rows of a key in record order
// (by input, then offset: orderRecords).
// It returns the max event time of the rows kept (noWatermark if none).
// Undecodable records (and nil keys) meet OnDecodeError, misrouted ones
// OnKeyPartition; skipped and dead-lettered records are not grouped.
func (t *Task[K, I, O]) group(recs []Record, nowMs int64, res *BatchResult) ([]group[K, I], int64, error) {
	maxEvent := int64(noWatermark)
	if len(recs) == 0 {
		return nil, maxEvent, nil
	}
	b := &batchRows[I]{vals: make([]I, 0, len(recs)), recs: make([]*Record, 0, len(recs)), next: make([]int32, 0, len(recs))}
	byKey := make(map[string]int32, len(recs)) // index in groups
	var badKeys map[string]error               // key bytes that do not decode
	groups := make([]group[K, I], 0, len(recs))
	for i := range recs {
		r := &recs[i]
		if r.Key == nil {
			if err := t.badRecord(r, "key", ErrNilKey, nowMs, res); err != nil {
				return nil, 0, err
			}
			continue
		}
		if r.Misrouted {
			handled, err := t.misrouted(r, nowMs, res)
			if err != nil {
				return nil, 0, err
			}
			if handled {
				continue
			}
		}
		if kerr, bad := badKeys[string(r.Key)]; bad {
			if err := t.badRecord(r, "key", kerr, nowMs, res); err != nil {
				return nil, 0, err
			}
			continue
		}
		v, err := t.decodeValue(r)
		if err != nil {
			if err := t.badRecord(r, "value", err, nowMs, res); err != nil {
				return nil, 0, err
			}
			continue
		}
		gi, seen := byKey[string(r.Key)]
		var k K
		if !seen {
			k, err = deserialize(t.cfg.KeySerde.Deserialize, r.Key)
			if err != nil {
				if badKeys == nil {
					badKeys = make(map[string]error)
				}
				badKeys[string(r.Key)] = err
				if err := t.badRecord(r, "key", err, nowMs, res); err != nil {
					return nil, 0, err
				}
				continue
			}
		}
		if t.cfg.TimeMode == processor.EventTime {
			ev := r.TimestampMs
			if t.cfg.EventTime != nil {
				ev = t.cfg.EventTime(v, r.TimestampMs)
			}
			if t.watermark != noWatermark && ev <= t.watermark {
				t.pend.counters.LateRowsDropped++
				continue
			}
			maxEvent = max(maxEvent, ev)
		}
		if !seen {
			gi = int32(len(groups))
			byKey[string(r.Key)] = gi
			groups = append(groups, group[K, I]{keyBytes: r.Key, key: k, first: -1, b: b})
		}
		groups[gi].add(v, r)
	}
	return groups, maxEvent, nil
}

// fireTimers fires the timers expired at the batch's threshold. The expired
// set is snapshotted once: a timer registered by a handler for a time at or
// before the threshold fires in the next batch, a snapshotted timer deleted
// by an earlier handler of this batch is skipped, and each fired timer is
// deleted after its handler returned.
func (t *Task[K, I, O]) fireTimers(tv processor.TimerValues, nowMs int64, res *BatchResult) (int, error) {
	var threshold int64
	switch t.cfg.TimeMode {
	case processor.ProcessingTime:
		threshold = tv.ProcessingTimeMs()
	case processor.EventTime:
		if t.watermark == noWatermark {
			return 0, nil
		}
		threshold = t.watermark
	default:
		return 0, nil
	}
	expired, err := t.timers.Expired(threshold)
	if err != nil {
		return 0, fmt.Errorf("partition %d: list expired timers: %w", t.cfg.Partition, err)
	}
	fired := 0
	for _, tm := range expired {
		ok, err := t.timers.Exists(tm.Key, tm.Expiry)
		if err != nil {
			return fired, fmt.Errorf("partition %d: timer %d: %w", t.cfg.Partition, tm.Expiry, err)
		}
		if !ok {
			continue
		}
		if err := t.fireTimer(tm, tv, nowMs, res); err != nil {
			return fired, err
		}
		fired++
	}
	t.pend.counters.TimersFired += int64(fired)
	return fired, nil
}

// Under OnProcessingError DeadLetter a failing handler's changes and
// outputs are discarded, a record describing the timer goes to the
// dead-letter topic, and the timer is deleted all the same: kept, it would
// fail again in every batch.
func (t *Task[K, I, O]) fireTimer(tm timers.Timer, tv processor.TimerValues, nowMs int64, res *BatchResult) error {
	key, err := t.cfg.KeySerde.Deserialize(tm.Key)
	if err != nil {
		return fmt.Errorf("partition %d: timer %d: cannot decode its grouping key %x: %w", t.cfg.Partition, tm.Expiry, tm.Key, err)
	}
	sp, err := t.savepoint(res)
	if err != nil {
		return err
	}
	em := &emitter[K, I, O]{t: t, key: key, keyBytes: tm.Key, method: "HandleExpiredTimer", out: &res.Outputs}
	t.rt.SetKey(tm.Key)
	t.rt.SetPhase(handle.PhaseTimer)
	err = t.invoke("HandleExpiredTimer", key, true, func() error {
		return t.proc.HandleExpiredTimer(key, tv, processor.ExpiredTimerInfo{ExpiryTimeMs: tm.Expiry}, em)
	})
	t.rt.SetPhase(handle.PhaseIdle)
	if cerr := em.close(); err == nil {
		err = cerr
	}
	if err != nil {
		if !sp.on || notTheKeys(err) {
			return err
		}
		if derr := t.discard(sp, res); derr != nil {
			return derr
		}
		res.DeadLetters = append(res.DeadLetters, t.timerDeadLetter(tm.Key, tm.Expiry, err, nowMs))
		t.pend.counters.ProcessingErrors++
		t.pend.counters.DeadLettered++
		t.log.Warn("failing timer sent to the dead-letter topic and deleted; its changes in this batch are discarded",
			"key", fmt.Sprintf("%#v", key), "expiry", tm.Expiry, "err", err)
	}
	if err := t.timers.Delete(tm.Key, tm.Expiry); err != nil {
		return fmt.Errorf("partition %d: delete fired timer %d: %w", t.cfg.Partition, tm.Expiry, err)
	}
	return nil
}

// invoke calls processor code, turning an error or a panic into a UserError
// naming the method, the key (when withKey) and the partition.
func (t *Task[K, I, O]) invoke(method string, key K, withKey bool, fn func() error) (err error) {
	return t.invokeCall(&activeCall[K]{method: method, key: key, withKey: withKey}, fn)
}

// invokeCall is invoke of the call c, which must not change until the
// next call starts (the watchdog may read it meanwhile): the key is
// formatted only when someone asks (CurrentCall, an error), not per call.
func (t *Task[K, I, O]) invokeCall(c *activeCall[K], fn func() error) (err error) {
	if t.abandoned.Load() {
		return ErrAbandoned
	}
	t.call.Store(c)
	defer func() {
		t.call.Store(nil)
		if r := recover(); r != nil {
			err = &UserError{Method: c.method, Key: c.keyString(), Partition: t.cfg.Partition, Panic: r, Stack: debug.Stack()}
		}
		if t.abandoned.Load() {
			// The owner gave up on this batch while the call ran: whatever
			// it returned, the batch goes no further.
			err = ErrAbandoned
		}
	}()
	if e := fn(); e != nil {
		return &UserError{Method: c.method, Key: c.keyString(), Partition: t.cfg.Partition, Err: e}
	}
	return nil
}

// notTheKeys reports whether a failed processor call's error is the
// state store's failure (kv.IsStoreFailure: closed, damaged, an I/O error;
// or the shard closed) rather than its key's: such a call is not
// dead-lettered under OnProcessingError DeadLetter, which would take the
// key's rows out of the output for a fault of the machine. The batch
// fails instead, nothing of it is committed, and the rows are processed
// again after the restart.
func notTheKeys(err error) bool {
	return kv.IsStoreFailure(err) || errors.Is(err, state.ErrClosed)
}

// activeCall is a processor call in progress (Task.CurrentCall).
type activeCall[K any] struct {
	method  string
	key     K
	withKey bool
}

// keyString is the formatted key, "" without one.
func (c *activeCall[K]) keyString() string {
	if !c.withKey {
		return ""
	}
	return fmt.Sprintf("%#v", c.key)
}

// decodeValue decodes r's value with ValueSerde, or from the whole record
// with ValueFromRecord.
func (t *Task[K, I, O]) decodeValue(r *Record) (I, error) {
	in := r.Input
	if in != 0 && in == t.cfg.RepartitionInput {
		var err error
		if in, err = t.sourceInput(r); err != nil {
			var zero I
			return zero, err
		}
	}
	vs, vr := t.cfg.ValueSerde, t.cfg.ValueFromRecord
	if in < len(t.cfg.Inputs) {
		vs, vr = t.cfg.Inputs[in].ValueSerde, t.cfg.Inputs[in].ValueFromRecord
	}
	if vr == nil {
		return deserialize(vs.Deserialize, r.Value)
	}
	rec := processor.Record{
		Topic: t.topic(in), Partition: t.cfg.Partition, Offset: r.Offset,
		Timestamp: time.UnixMilli(r.TimestampMs), Key: r.Key, Value: r.Value,
		Headers: r.Headers, // the polled record's own slice, as Key and Value
	}
	return deserialize(func([]byte) (I, error) { return vr(rec) }, r.Value)
}

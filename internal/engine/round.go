package engine

import (
	"fmt"
	"slices"
	"sort"
	"time"
)

// batch runs one micro-batch over the polled records: every ready task
// with records, or wanting a batch anyway, runs it on its own goroutine;
// its outputs and changelog records are produced, as soon as it returns,
// in one transaction with the offsets of everything polled (produce.go);
// once that committed the tasks commit locally, in parallel, or all abort.
func (c *Coordinator) batch(recs []Message) error {
	now := c.clock.Now()
	ready := c.readyTasks()
	byPart, unready := c.split(recs, ready)
	if len(c.cfg.Topics) > 1 {
		for _, rs := range byPart {
			orderRecords(rs)
		}
	}
	if len(unready) > 0 {
		return c.rewind(unready)
	}
	if ok, err := c.checkMisrouted(byPart); err != nil || !ok {
		return err
	}
	trigger := c.cfg.ProcessingTime && (c.forceTrigger || now.Sub(c.lastTrigger) >= c.cfg.TriggerInterval)
	var parts []*slot
	deferred := false // a slot sits this trigger out (deferFirst): keep it due
	for p, s := range ready {
		switch {
		case len(byPart[p]) > 0 || ((trigger || s.task.NeedsBatch()) && !c.deferFirst(s)):
			parts = append(parts, s)
			s.waitFirst = false
		case trigger:
			deferred = true
		}
	}
	if len(parts) == 0 {
		return nil
	}
	c.retire(Counters{Rounds: 1})
	batchStart := c.clock.Elapsed()
	if trigger && !deferred {
		// (With a slot deferred, the trigger stays due and the slot
		// joins it once its wait ends: its timers must not wait for the
		// next TriggerInterval.)
		c.lastTrigger = now
	}
	sort.Slice(parts, func(i, j int) bool { return parts[i].part < parts[j].part })

	defer func() {
		c.mu.Lock()
		c.mu.inFlight = false
		c.mu.Unlock()
	}()
	if c.cfg.Sink {
		// Fix every task's batch (records, time, id) before it runs.
		if ok, err := c.plan(parts, now.UnixMilli(), byPart); err != nil || !ok {
			return err
		}
	}
	// With input and no sink, the transaction opens before the tasks run
	// (franz-go's Begin is local) and each task's records are produced as
	// soon as its RunBatch returns, overlapping the broker's round trips
	// with the other tasks' processing (produce.go). Without input the
	// batch may need no transaction at all, and with a sink the sinks run
	// before the transaction (sink.go): both produce after every task ran.
	// So do batches after one whose tasks ran longer than a quarter of
	// the transaction timeout: the broker's clock of a transaction starts
	// at its first produce, and the tasks still running count against it
	// (a slow processor's batch must not be aborted by the broker). The
	// margin is 4x: the sizer at most doubles a batch's records.
	var pg *produceGroup
	var finished func(int, *BatchResult, error)
	txnTimeout := c.cfg.TransactionTimeout
	if txnTimeout <= 0 {
		txnTimeout = c.cfg.RestoreTimeout
	}
	// Small batches (the caught-up, latency regime) keep the old order
	// too: their produce is one short request, and splitting it made the
	// end-to-end latency worse (docs/benchmarks/history.md, "Produce while
	// processing, parallel local commits"). Crash tests (a
	// KillHook set) overlap every batch, so that the overlap's kill
	// points occur in their small batches.
	minRecs := overlapMinRecords
	if c.cfg.KillHook != nil {
		minRecs = 1
	}
	ap, async := c.session.(AsyncProducer)
	if async && len(recs) >= minRecs && !c.cfg.Sink && c.lastTasks <= txnTimeout/4 {
		if err := c.session.Begin(); err != nil {
			return c.kafkaErr("begin transaction", err)
		}
		pg = newProduceGroup(c.workCtx, ap, &c.msgs, len(parts), len(recs), c.cfg.KillHook)
		finished = func(i int, res *BatchResult, err error) {
			if err != nil {
				pg.finished(i, nil, 0)
				return
			}
			msgs, clEnd := c.taskRecords(parts[i], res, c.msgs.get(res.records()))
			pg.finished(i, msgs, clEnd)
		}
	}
	// abortTxn ends an overlapped batch's transaction without committing,
	// once its produces returned.
	abortTxn := func() {
		if pg == nil {
			return
		}
		if err := pg.wait(); err != nil {
			c.log.Debug("produce of an aborted batch failed", "err", err)
		}
		if _, err := c.session.End(c.workCtx, false); err != nil {
			c.log.Warn("abort of the batch's transaction failed", "err", err)
		}
	}
	results, errs, err := c.runTasks(parts, now.UnixMilli(), byPart, finished)
	tasksDone := c.clock.Elapsed()
	c.lastStaged = changelogWeight(results)
	c.lastTasks = tasksDone - batchStart
	if err != nil {
		abortTxn()
		return fmt.Errorf("kstate: %w", err)
	}
	abortAll := func() {
		for _, s := range parts {
			s.task.Abort()
		}
	}
	for _, err := range errs {
		if err != nil {
			abortAll()
			abortTxn()
			return fmt.Errorf("kstate: %w", err)
		}
	}

	if err := c.runSinks(parts, results); err != nil {
		abortAll()
		abortTxn()
		return fmt.Errorf("kstate: %w", err)
	}

	next := make([]int64, len(parts))
	if pg != nil {
		if err := pg.wait(); err != nil {
			abortAll()
			if _, aerr := c.session.End(c.workCtx, false); aerr != nil {
				c.log.Warn("abort after a failed produce failed too", "err", aerr)
			}
			return c.kafkaErr("produce", err)
		}
		copy(next, pg.next)
	} else {
		out, clEnd := c.records(parts, results)
		if len(out) == 0 && len(recs) == 0 {
			// Nothing consumed, nothing produced, nothing staged: no
			// transaction needed.
			for _, s := range parts {
				if err := s.task.Commit(-1); err != nil {
					return fmt.Errorf("kstate: %w", err)
				}
			}
			c.noteStatus(parts, false)
			return nil
		}
		if err := c.session.Begin(); err != nil {
			abortAll()
			return c.kafkaErr("begin transaction", err)
		}
		offsets, err := c.session.Produce(c.workCtx, out)
		c.msgs.put(out) // Produce does not keep it
		if err != nil {
			abortAll()
			if _, aerr := c.session.End(c.workCtx, false); aerr != nil {
				c.log.Warn("abort after a failed produce failed too", "err", aerr)
			}
			return c.kafkaErr("produce", err)
		}
		for i := range parts {
			next[i] = -1
			if clEnd[i] > 0 {
				next[i] = offsets[clEnd[i]-1] + 1
			}
		}
	}
	c.cfg.KillHook.at(AfterProduce)
	t0 := c.clock.Elapsed()
	committed, err := c.session.End(c.workCtx, true)
	latency := c.clock.Elapsed() - t0
	if err != nil {
		abortAll()
		return c.kafkaErr("commit transaction", err)
	}
	if !committed {
		// A rebalance intervened: Kafka aborted the transaction and the
		// session rewound to the committed offsets; the next polls
		// deliver the same records again to whoever owns them now.
		abortAll()
		c.retire(Counters{Aborts: 1})
		if c.cfg.Observer != nil {
			c.cfg.Observer.Aborted(errAbortedByRebalance)
		}
		c.log.Warn("batch aborted by a rebalance; retrying from the committed offsets", "partitions", partsOf(parts))
		for _, s := range parts {
			if s.task.Planned() != nil {
				c.pauseForPlan(s)
			}
		}
		return nil
	}
	// The fixed per-transaction cost: what the batch waited for Kafka
	// once its tasks were done (the produce tail and End), for the sizer.
	c.lastTxn = c.clock.Elapsed() - tasksDone
	c.retire(Counters{Commits: 1, CommitLatency: latency})
	since := c.clock.Elapsed() // from Run's start (Clock.Elapsed)
	c.mu.Lock()
	first := c.mu.firstCommit == 0
	if first {
		c.mu.firstCommit = max(since, time.Nanosecond)
	}
	c.mu.Unlock()
	if first {
		c.log.Info("first batch committed", "since_start", since.Round(time.Millisecond),
			"since_pipeline_start", (since - c.start).Round(time.Millisecond), "partitions", partsOf(parts))
	}
	// A caught-up application's small batch lets a full write-behind
	// layer be written in the background: the write (tens of ms) paused
	// the pipeline, in the visible latency, while a core was idle. A
	// backlog's writes stay in the commit, where they do not compete
	// with the next batch for the cores (internal/shard, SetBackgroundFlush).
	bg := len(recs) < overlapMinRecords
	for _, s := range parts {
		s.task.Shard().SetBackgroundFlush(bg)
	}
	if err := c.commitLocal(parts, next); err != nil {
		// Kafka has the batch; a shard does not. A restart restores the
		// missing tail from the changelog.
		return fmt.Errorf("kstate: %w", err)
	}
	c.resumeAfterPlan(parts)
	c.noteStatus(parts, true)
	c.observeCommit(parts, byPart, results, batchStart, latency)
	return nil
}

// split converts the polled records of ready tasks to Records, by
// partition in poll order, and returns the partitions of the others
// (unready: not restored yet, or with a planned batch to run first). The
// Records of all partitions share one array, sized by a first pass: no
// slice grows record by record (issue #13: the appends were a tenth of the
// count path's allocated bytes).
func (c *Coordinator) split(recs []Message, ready map[int32]*slot) (byPart map[int32][]Record, unready []int32) {
	counts := make(map[int32]int, len(ready))
	n := 0
	for i := range recs {
		rec := &recs[i]
		if _, ok := c.inputIndex(rec.Topic); !ok || ready[rec.Partition] == nil {
			unready = append(unready, rec.Partition)
			continue
		}
		if s := ready[rec.Partition]; s.task.Planned() != nil {
			// Its planned batch runs first, over the planned records
			// only: these must not be committed before they are
			// processed (sink.go).
			c.pauseForPlan(s)
			unready = append(unready, rec.Partition)
			continue
		}
		counts[rec.Partition]++
		n++
	}
	if len(unready) > 0 || n == 0 {
		return nil, unready // the batch rewinds, or has no records
	}
	byPart = make(map[int32][]Record, len(counts))
	all := make([]Record, n)
	off := 0
	for p, k := range counts {
		byPart[p] = all[off : off : off+k] // capped: a partition's appends stay in its part
		off += k
	}
	for i := range recs {
		rec := &recs[i]
		byPart[rec.Partition] = append(byPart[rec.Partition], c.toRecord(rec))
	}
	return byPart, unready
}

// deferFirst reports whether a task that wants a batch without input (its
// first: metadata, Init's declarations, initial state; or a ProcessingTime
// trigger) waits for its first records instead: it was resumed a moment
// ago and no poll has brought its records yet (a resumed partition is
// fetched with the next fetch to its broker, possibly a poll or two
// later). Batched with its first input (RunBatch applies the initial state
// before it), the transaction commits consumed offsets; a new group's
// offset-less transaction would cost 500 ms in franz-go's
// GroupTransactSession.End (without a TxnOffsetCommit response it cannot
// tell that the broker supports KIP-447, and sleeps before releasing its
// lock: docs/ARCHITECTURE.md, assignment step 7). Without input the batch
// runs firstBatchWait after the resume. A planned batch (sink.go) never
// waits: its records must not arrive first; nor does a bounded run's last
// batch (forceTrigger: timers due at the end must fire). Only with
// CoordinatorConfig.DeferFirstBatch.
func (c *Coordinator) deferFirst(s *slot) bool {
	return s.waitFirst && s.task.Planned() == nil && !c.forceTrigger && c.clock.Elapsed()-s.resumedAt < firstBatchWait
}

// firstBatchWait bounds deferFirst's wait for a resumed partition's first
// records.
const firstBatchWait = time.Second

// records builds the transaction's records: per task its records
// (taskRecords), in task order. clEnd[i] is the index after task i's last
// changelog record, 0 if it has none.
func (c *Coordinator) records(parts []*slot, results []*BatchResult) ([]Message, []int) {
	n := 0
	for _, res := range results {
		n += res.records()
	}
	out := c.msgs.get(n)
	clEnd := make([]int, len(parts))
	for i, s := range parts {
		var end int
		out, end = c.taskRecords(s, results[i], out)
		if end > 0 {
			clEnd[i] = end
		}
	}
	return out, clEnd
}

// taskRecords appends one task's records to out: its outputs, its
// repartition records, its dead-letter records (dead-letter partition =
// input partition modulo the dead-letter topic's count: one source
// partition's bad records stay in order, nil keys included), then its
// changelog records (changelog partition = input partition). clEnd is the
// index in out after its last changelog record, 0 if it has none.
func (c *Coordinator) taskRecords(s *slot, res *BatchResult, out []Message) (_ []Message, clEnd int) {
	out = slices.Grow(out, res.records()) // Message is large: no growth record by record
	for _, o := range res.Outputs {
		if c.cfg.OutputTopic == "" {
			break // sinks only
		}
		ts := msTime(o.TimestampMs)
		topic, n := c.cfg.OutputTopic, c.outPartitions
		if o.Topic != "" {
			topic, n = o.Topic, c.topicPartitions[o.Topic]
		}
		out = append(out, Message{
			Topic: topic, Partition: outputPartition(o.Key, s.part, n),
			Key: o.Key, Value: o.Value, Timestamp: ts, Headers: o.Headers,
		})
	}
	for _, r := range res.Repartition {
		ts := msTime(r.TimestampMs)
		out = append(out, Message{
			Topic: c.cfg.RepartitionTopic, Partition: PartitionFor(r.Key, c.partitions),
			Key: r.Key, Value: r.Value, Timestamp: ts, Headers: r.Headers,
		})
	}
	for _, d := range res.DeadLetters {
		ts := msTime(d.TimestampMs)
		out = append(out, Message{
			Topic: c.cfg.DeadLetterTopic, Partition: s.part % int32(max(c.dlqPartitions, 1)),
			Key: d.Key, Value: d.Value, Timestamp: ts, Headers: d.Headers,
		})
	}
	for _, r := range res.Changelog {
		out = append(out, Message{Topic: c.cfg.ChangelogTopic, Partition: s.part, Key: r.Key, Value: r.Value})
	}
	if len(res.Changelog) > 0 {
		clEnd = len(out)
	}
	return out, clEnd
}

// records is the number of records res produces (taskRecords).
func (res *BatchResult) records() int {
	return len(res.Outputs) + len(res.Repartition) + len(res.DeadLetters) + len(res.Changelog)
}

// outputPartition is murmur2 of the key like Kafka's default partitioner;
// computed here (not left to the producer) so that a record with a nil key
// goes deterministically to the input partition's counterpart.
func outputPartition(key []byte, input int32, partitions int) int32 {
	if key == nil {
		return input % int32(partitions)
	}
	return PartitionFor(key, partitions)
}

// rewind handles records of partitions that are not ready: the session
// delivered them in the same Poll that reported the partitions assigned,
// before the coordinator could pause them. Their offsets were advanced by
// the poll, so committing now would skip them; an empty aborted
// transaction rewinds consumption to the committed offsets instead. The
// partitions are paused by now, so the next poll does not deliver them
// again.
func (c *Coordinator) rewind(parts []int32) error {
	c.log.Info("poll returned records of partitions not restored yet; rewinding to the committed offsets", "partitions", uniq(parts))
	if err := c.session.Begin(); err != nil {
		return c.kafkaErr("begin transaction", err)
	}
	if _, err := c.session.End(c.workCtx, false); err != nil {
		return c.kafkaErr("abort transaction", err)
	}
	return nil
}

func partsOf(ss []*slot) []int32 {
	out := make([]int32, len(ss))
	for i, s := range ss {
		out[i] = s.part
	}
	return out
}

func uniq(ps []int32) []int32 {
	sort.Slice(ps, func(i, j int) bool { return ps[i] < ps[j] })
	out := ps[:0]
	for i, p := range ps {
		if i == 0 || p != ps[i-1] {
			out = append(out, p)
		}
	}
	return out
}

// msTime is a record timestamp in milliseconds as a time.Time, the zero
// time (the producer stamps it) when negative.
func msTime(ms int64) time.Time {
	if ms < 0 {
		return time.Time{}
	}
	return time.UnixMilli(ms)
}

// changelogWeight is the stagedWeight of the changelogs of results (nil
// results are tasks that failed).
func changelogWeight(results []*BatchResult) int64 {
	n, bytes := 0, int64(0)
	for _, res := range results {
		if res == nil {
			continue
		}
		n += len(res.Changelog)
		for _, r := range res.Changelog {
			bytes += int64(len(r.Key) + len(r.Value))
		}
	}
	return stagedWeight(n, bytes)
}

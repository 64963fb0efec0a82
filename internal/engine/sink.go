package engine

// ForeachBatch sinks and the batch plan that makes their batch ids stable.
//
// A sink is called with a partition's batch (partition, batch id, rows)
// before the batch's Kafka transaction commits. For a sink that writes
// idempotently by (partition, batch id) to be exactly-once, a batch retried
// after a crash, an abort or a rebalance must carry the same id and exactly
// the same rows. The rows depend on the committed state (restored exactly),
// the input records and the batch's processing time (timers, TTL). So, with
// a sink configured, the coordinator first commits a plan per partition of
// the round — batch id, the exact input offsets polled, the processing
// time — in a small transaction of its own (which also commits the polled
// input offsets: from then on the group's committed offset is the plan's
// end, and MetaInputOffset says so too, so restore's consistency check is
// unchanged). Only then the batch executes, the sinks run, and the batch's
// transaction commits the state with the plan marked done. A plan that is
// not done is re-executed exactly: same records (kept in memory, or re-read
// from the input topic after a restart or a partition move), same time.
// See docs/ARCHITECTURE.md, "ForeachBatch sinks".

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"

	"github.com/kstate/kstate/changelog"
)

// MetaPlan is the shard metadata holding the partition's last batch plan.
const MetaPlan = "engine/batch_plan"

// Plan is a partition's planned batch: its id, its input records (per
// input topic, offsets First..End−1 as read_committed, Count of them;
// First = End = −1 when the input has none in the batch) and its
// processing time.
type Plan struct {
	BatchID     int64
	Ranges      []InputRange // one per input topic
	TimeMs      int64
	Done        bool // the batch committed
	FirstBatch  bool // planned on a fresh shard: initial state is still due
	recsPresent bool // Recs holds the records (in memory only)
	Recs        []Record
}

// InputRange is a plan's records of one input topic.
type InputRange struct {
	First, End, Count int64
}

// Count is the plan's number of records over every input.
func (p *Plan) Count() int64 {
	var n int64
	for _, r := range p.Ranges {
		n += r.Count
	}
	return n
}

// The encoding: batch id, the first input's range, time, flags (the
// one-input format of earlier releases), then the range of every further
// input.
const (
	planLen      = 5*8 + 1
	planRangeLen = 3 * 8
)

func (p Plan) encode() []byte {
	r0 := InputRange{First: -1, End: -1}
	if len(p.Ranges) > 0 {
		r0 = p.Ranges[0]
	}
	b := make([]byte, 0, planLen+planRangeLen*max(len(p.Ranges)-1, 0))
	for _, v := range []int64{p.BatchID, r0.First, r0.End, r0.Count, p.TimeMs} {
		b = binary.BigEndian.AppendUint64(b, uint64(v))
	}
	var f byte
	if p.Done {
		f |= 1
	}
	if p.FirstBatch {
		f |= 2
	}
	b = append(b, f)
	for i := 1; i < len(p.Ranges); i++ {
		for _, v := range []int64{p.Ranges[i].First, p.Ranges[i].End, p.Ranges[i].Count} {
			b = binary.BigEndian.AppendUint64(b, uint64(v))
		}
	}
	return b
}

// decodePlan decodes a plan of inputs input topics; a plan with fewer
// ranges (written with fewer inputs) has no records of the others.
func decodePlan(b []byte, inputs int) (Plan, error) {
	if len(b) < planLen || (len(b)-planLen)%planRangeLen != 0 {
		return Plan{}, fmt.Errorf("metadata %q has %d bytes, want %d + a multiple of %d", MetaPlan, len(b), planLen, planRangeLen)
	}
	v := func(i int) int64 { return int64(binary.BigEndian.Uint64(b[8*i:])) }
	p := Plan{BatchID: v(0), TimeMs: v(4), Done: b[40]&1 != 0, FirstBatch: b[40]&2 != 0}
	p.Ranges = []InputRange{{First: v(1), End: v(2), Count: v(3)}}
	for rest := b[planLen:]; len(rest) > 0; rest = rest[planRangeLen:] {
		w := func(i int) int64 { return int64(binary.BigEndian.Uint64(rest[8*i:])) }
		p.Ranges = append(p.Ranges, InputRange{First: w(0), End: w(1), Count: w(2)})
	}
	if len(p.Ranges) > inputs {
		for _, r := range p.Ranges[inputs:] {
			if r.Count > 0 && !p.Done {
				return Plan{}, fmt.Errorf("metadata %q plans records of %d input topics, the application has %d: "+
					"run the previous configuration until the planned batch committed", MetaPlan, len(p.Ranges), inputs)
			}
		}
		p.Ranges = p.Ranges[:inputs]
	}
	for len(p.Ranges) < inputs {
		p.Ranges = append(p.Ranges, InputRange{First: -1, End: -1})
	}
	return p, nil
}

// SinkError is a sink's error: the batch (partition, id) was not committed
// and Run stops. Its rows may or may not have reached the sink; the next
// run re-executes the same batch with the same id and rows.
type SinkError struct {
	Partition int32
	BatchID   int64
	Err       error
}

func (e *SinkError) Error() string {
	return fmt.Sprintf("sink failed for partition %d batch %d (the batch is not committed; a restart retries it with the same id and rows): %v",
		e.Partition, e.BatchID, e.Err)
}

func (e *SinkError) Unwrap() error { return e.Err }

// ErrPlanMismatch is wrapped when the input records of a planned batch
// cannot be read back as planned (the input topic was truncated or
// recreated).
var ErrPlanMismatch = errors.New("planned batch cannot be re-read from the input topic")

// hasSink reports whether the task has a sink (batches are planned).
func (t *Task[K, I, O]) hasSink() bool { return t.cfg.Sink != nil }

// Planned implements TaskHandle: the plan the next batch must execute, or
// nil when the next batch is free (no sink, or the last plan is done).
func (t *Task[K, I, O]) Planned() *Plan {
	if t.plan == nil || t.plan.Done {
		return nil
	}
	return t.plan
}

// loadPlan reads MetaPlan at Start.
func (t *Task[K, I, O]) loadPlan() error {
	b, ok, err := t.shard.GetMeta(MetaPlan)
	if err != nil {
		return fmt.Errorf("partition %d: read metadata: %w", t.cfg.Partition, err)
	}
	if !ok {
		return nil
	}
	p, err := decodePlan(b, t.inputs())
	if err != nil {
		return fmt.Errorf("partition %d: %w", t.cfg.Partition, err)
	}
	if !p.Done && p.BatchID != t.batchID {
		return fmt.Errorf("partition %d: planned batch %d but the state is at batch %d (corrupt metadata)", t.cfg.Partition, p.BatchID, t.batchID)
	}
	t.plan = &p
	if !p.Done && p.FirstBatch {
		// Planned on a fresh shard: the plan's transaction committed the
		// mode metadata, but the first batch (initial state) is still due.
		t.fresh = true
	}
	return nil
}

// SetPlanRecords implements TaskHandle: the records of the outstanding
// plan, re-read from the input topic after a restore.
func (t *Task[K, I, O]) SetPlanRecords(recs []Record) {
	if t.plan != nil {
		t.plan.Recs, t.plan.recsPresent = recs, true
	}
}

// PlanBatch implements TaskHandle: it stages the plan of the next batch
// over recs at nowMs and returns its changelog records (the plan, the new
// input offset, and anything staged outside a batch such as Init's
// declarations). CommitPlan or AbortPlan ends it.
func (t *Task[K, I, O]) PlanBatch(nowMs int64, recs []Record) ([]changelog.Record, error) {
	if t.closed {
		return nil, ErrClosed
	}
	if t.inBatch {
		return nil, ErrInBatch
	}
	p := Plan{BatchID: t.batchID, TimeMs: nowMs, FirstBatch: t.fresh, Recs: recs, recsPresent: true,
		Ranges: make([]InputRange, t.inputs())}
	for i := range p.Ranges {
		p.Ranges[i] = InputRange{First: -1, End: -1}
	}
	for i := range recs {
		r := &p.Ranges[recs[i].Input]
		if r.Count == 0 {
			r.First = recs[i].Offset
		}
		r.End = recs[i].Offset + 1
		r.Count++
	}
	t.shard.Begin(-1)
	t.inBatch = true
	if err := t.shard.PutMeta(MetaPlan, p.encode()); err != nil {
		return nil, t.metaErr(err)
	}
	if err := t.putInputOffsets(recs); err != nil {
		return nil, err
	}
	cl, err := t.shard.Finish()
	if err != nil {
		return nil, fmt.Errorf("partition %d: finish plan: %w", t.cfg.Partition, err)
	}
	t.pendPlan = &p
	return cl, nil
}

// CommitPlan implements TaskHandle: the plan's transaction committed.
func (t *Task[K, I, O]) CommitPlan(nextChangelogOffset int64) error {
	if !t.inBatch || t.pendPlan == nil {
		return ErrNoBatch
	}
	t.inBatch = false
	if err := t.shard.Commit(nextChangelogOffset); err != nil {
		return fmt.Errorf("partition %d: apply committed batch plan to the shard%s (Kafka has it: a restart restores it from the changelog): %w",
			t.cfg.Partition, dirSuffix(t.cfg.Dir), err)
	}
	t.plan, t.pendPlan = t.pendPlan, nil
	return nil
}

// AbortPlan implements TaskHandle: the plan's transaction did not commit.
func (t *Task[K, I, O]) AbortPlan() {
	t.pendPlan = nil
	t.Abort()
}

// markPlanDone stages, inside RunBatch, the executed plan marked done
// (committed with the batch).
func (t *Task[K, I, O]) markPlanDone() error {
	if t.plan == nil || t.plan.Done {
		return nil
	}
	done := *t.plan
	done.Done, done.Recs, done.recsPresent = true, nil, false
	if err := t.shard.PutMeta(MetaPlan, done.encode()); err != nil {
		return t.metaErr(err)
	}
	return nil
}

// readPlanned re-reads the records of t's outstanding plan from the input
// topics (after a restore: the group's committed offsets are already the
// plan's ends, so the session will not deliver them again), input by
// input, in the order the batch had them (orderRecords).
func (c *Coordinator) readPlanned(ctx context.Context, t TaskHandle) error {
	p := t.Planned()
	if p == nil || p.recsPresent {
		return nil
	}
	var recs []Record
	for i, r := range p.Ranges {
		if r.Count == 0 {
			continue
		}
		got, err := c.readRange(ctx, t.Partition(), i, p.BatchID, r)
		if err != nil {
			return err
		}
		recs = append(recs, got...)
	}
	t.SetPlanRecords(recs)
	if len(recs) > 0 {
		c.log.Info("re-executing a planned batch", "partition", t.Partition(), "batch", p.BatchID, "records", len(recs), "batch_time_ms", p.TimeMs)
	}
	return nil
}

// readRange reads a plan's records of input i, partition part.
func (c *Coordinator) readRange(ctx context.Context, part int32, i int, batch int64, p InputRange) ([]Record, error) {
	topic := c.cfg.Topics[i]
	rd, err := c.cfg.Changelog.Open(ctx, topic, part, p.First)
	if err != nil {
		return nil, fmt.Errorf("kstate: partition %d: re-read planned batch %d (input topic %q offsets %d..%d): %w", part, batch, topic, p.First, p.End-1, err)
	}
	defer rd.Close()
	var recs []Record
	for {
		ms, err := rd.Next(ctx)
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("kstate: partition %d: re-read planned batch %d from input topic %q: %w", part, batch, topic, err)
		}
		done := false
		for _, m := range ms {
			if m.Offset >= p.End {
				done = true
				break
			}
			recs = append(recs, c.toRecord(&m))
		}
		if done {
			break
		}
	}
	if int64(len(recs)) != p.Count || (len(recs) > 0 && (recs[0].Offset != p.First || recs[len(recs)-1].Offset != p.End-1)) {
		return nil, fmt.Errorf("kstate: partition %d: %w: batch %d planned %d records of input topic %q at offsets %d..%d, read %d back",
			part, ErrPlanMismatch, batch, p.Count, topic, p.First, p.End-1, len(recs))
	}
	return recs, nil
}

// toRecord is a polled input message as a task record.
func (c *Coordinator) toRecord(m *Message) Record {
	in, _ := c.inputIndex(m.Topic)
	r := Record{Input: in, Offset: m.Offset, Key: m.Key, Value: m.Value, TimestampMs: m.Timestamp.UnixMilli(), Headers: m.Headers}
	if m.Key != nil {
		if kp := PartitionFor(m.Key, c.partitions); kp != m.Partition {
			r.Misrouted, r.KeyPartition = true, kp
		}
	}
	return r
}

// plan commits, in a transaction of its own, the plans of the tasks of
// parts that have none outstanding (recs by partition, time nowMs). It
// returns false when a rebalance aborted it (nothing planned; the session
// rewound to the committed offsets).
func (c *Coordinator) plan(parts []*slot, nowMs int64, byPart map[int32][]Record) (bool, error) {
	var todo []*slot
	var out []Message
	var clEnd []int
	for _, s := range parts {
		if s.task.Planned() != nil {
			continue
		}
		cl, err := s.task.PlanBatch(nowMs, byPart[s.part])
		if err != nil {
			for _, d := range todo {
				d.task.AbortPlan()
			}
			s.task.AbortPlan()
			return false, fmt.Errorf("kstate: %w", err)
		}
		todo = append(todo, s)
		for _, r := range cl {
			out = append(out, Message{Topic: c.cfg.ChangelogTopic, Partition: s.part, Key: r.Key, Value: r.Value})
		}
		clEnd = append(clEnd, len(out))
	}
	if len(todo) == 0 {
		return true, nil
	}
	abort := func() {
		for _, s := range todo {
			s.task.AbortPlan()
		}
	}
	if err := c.session.Begin(); err != nil {
		abort()
		return false, c.kafkaErr("begin plan transaction", err)
	}
	offsets, err := c.session.Produce(c.workCtx, out)
	if err != nil {
		abort()
		if _, aerr := c.session.End(c.workCtx, false); aerr != nil {
			c.log.Warn("abort after a failed produce failed too", "err", aerr)
		}
		return false, c.kafkaErr("produce plan", err)
	}
	committed, err := c.session.End(c.workCtx, true)
	if err != nil {
		abort()
		return false, c.kafkaErr("commit plan transaction", err)
	}
	if !committed {
		abort()
		c.retire(Counters{Aborts: 1})
		c.log.Warn("batch plan aborted by a rebalance; retrying from the committed offsets", "partitions", partsOf(todo))
		return false, nil
	}
	for i, s := range todo {
		if err := s.task.CommitPlan(offsets[clEnd[i]-1] + 1); err != nil {
			return false, fmt.Errorf("kstate: %w", err)
		}
	}
	c.cfg.KillHook.at(AfterPlan)
	return true, nil
}

// runSinks calls the sinks of every task result that has rows, in
// partition order, before the batch's transaction.
func (c *Coordinator) runSinks(parts []*slot, results []*BatchResult) error {
	called := false
	for i := range parts {
		if res := results[i]; res.Sink != nil {
			called = true
			if err := res.Sink(c.workCtx); err != nil {
				return err
			}
		}
	}
	if called {
		c.cfg.KillHook.at(AfterSink)
	}
	return nil
}

// sinkCall returns the call of the task's sink with a batch's rows; a
// panic of the sink becomes its SinkError.
func (t *Task[K, I, O]) sinkCall(batchID int64, keys []K, values []O) func(context.Context) error {
	part := t.cfg.Partition
	return func(ctx context.Context) (err error) {
		defer func() {
			if r := recover(); r != nil {
				err = &SinkError{Partition: part, BatchID: batchID, Err: fmt.Errorf("panic: %v", r)}
			}
		}()
		if e := t.cfg.Sink(ctx, part, batchID, keys, values); e != nil {
			return &SinkError{Partition: part, BatchID: batchID, Err: e}
		}
		return nil
	}
}

// pauseForPlan pauses a partition whose planned batch has not run: the
// session must not deliver (and the next transaction commit) records past
// the plan before it ran. resumeAfterPlan resumes it once it committed.
func (c *Coordinator) pauseForPlan(s *slot) {
	if !s.planPaused {
		s.planPaused = true
		c.session.Pause(c.inputPartitions(s.part))
	}
}

func (c *Coordinator) resumeAfterPlan(parts []*slot) {
	var ps []Partition
	for _, s := range parts {
		if s.planPaused && s.task.Planned() == nil {
			s.planPaused = false
			ps = append(ps, c.inputPartitions(s.part)...)
		}
	}
	if len(ps) > 0 {
		c.session.Resume(ps)
	}
}

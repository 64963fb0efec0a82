package kstate

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"time"

	"github.com/kstate/kstate/internal/engine"
	"github.com/kstate/kstate/internal/kafka"
	"github.com/kstate/kstate/processor"
)

// runner is one App.Run: the group session, the partition tasks and the
// batch loop. The loop goroutine (the one in run) owns the session and
// drives every batch; group callbacks are delivered by the session inside
// Poll, on that same goroutine, so they never race with a batch. Restore
// goroutines (one per partition being restored, see tasks.go) only touch
// their own task until they hand it over under mu.
type runner[K, I, O any] struct {
	app            *App[K, I, O]
	cfg            *Config[K, I, O]
	runID          string
	topic          string
	changelogTopic string
	partitions     int // of the input (and changelog) topic
	outPartitions  int
	start          time.Time
	lastTrigger    time.Time // Clock time of the last ProcessingTime trigger

	admin   *kafka.Admin
	session *kafka.Session

	// workCtx bounds Kafka calls of batches and restores. It outlives the
	// Run ctx by ShutdownTimeout, so that the batch in flight at
	// cancellation can still commit.
	workCtx    context.Context
	cancelWork context.CancelFunc
	wg         sync.WaitGroup // restore goroutines and the shutdown timer

	initial initialCache[K]

	mu struct {
		sync.Mutex
		slots       map[int32]*slot[K, I, O]
		err         error // first error of a restore goroutine
		firstCommit time.Duration
	}
}

func newRunner[K, I, O any](a *App[K, I, O]) *runner[K, I, O] {
	r := &runner[K, I, O]{
		app:            a,
		cfg:            &a.cfg,
		runID:          newRunID(),
		topic:          a.cfg.InputTopics[0],
		changelogTopic: a.ChangelogTopic(),
	}
	r.mu.slots = make(map[int32]*slot[K, I, O])
	return r
}

func (r *runner[K, I, O]) logf(format string, args ...any) {
	r.cfg.Logf("kstate: "+r.cfg.ApplicationID+": "+format, args...)
}

// run is App.Run.
func (r *runner[K, I, O]) run(ctx context.Context) (err error) {
	r.start = time.Now()
	r.workCtx, r.cancelWork = context.WithCancel(context.WithoutCancel(ctx))
	stop := make(chan struct{})
	r.wg.Go(func() {
		// After ctx is cancelled, the batch in flight has ShutdownTimeout.
		select {
		case <-stop:
			return
		case <-ctx.Done():
		}
		t := time.NewTimer(r.cfg.ShutdownTimeout)
		defer t.Stop()
		select {
		case <-stop:
		case <-t.C:
			r.logf("shutdown timeout %v exceeded: abandoning the batch in flight", r.cfg.ShutdownTimeout)
			r.cancelWork()
		}
	})
	defer func() {
		if cerr := r.shutdown(); err == nil && ctx.Err() == nil {
			err = cerr
		}
		close(stop)
		r.cancelWork()
		r.wg.Wait()
	}()

	if err := r.setup(ctx); err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	r.logf("instance %q (transactional id %q) run %s started: input %q (%d partitions), output %q, changelog %q, %v, %v",
		r.cfg.InstanceID, r.session.TransactionalID(), r.runID, r.topic, r.partitions, r.cfg.OutputTopic, r.changelogTopic, r.cfg.TimeMode, r.cfg.OutputMode)
	for {
		if err := r.failed(); err != nil {
			return err
		}
		recs, err := r.session.Poll(ctx, r.cfg.MaxBatchRecords)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return r.kafkaErr("poll", err)
		}
		r.promote()
		if err := r.batch(recs); err != nil {
			return err
		}
		if ctx.Err() != nil {
			return nil
		}
	}
}

// setup checks the topics and joins the group.
func (r *runner[K, I, O]) setup(ctx context.Context) error {
	adm, err := kafka.NewAdmin(r.cfg.Brokers)
	if err != nil {
		return fmt.Errorf("kstate: %w", err)
	}
	r.admin = adm
	n, err := adm.Partitions(ctx, r.topic)
	if err != nil {
		return fmt.Errorf("kstate: input topic %q: %w", r.topic, err)
	}
	r.partitions = n
	spec := kafka.TopicSpec{Name: r.changelogTopic, Partitions: n, ReplicationFactor: -1, Compacted: true}
	if err := adm.EnsureTopic(ctx, spec); err != nil {
		return fmt.Errorf("kstate: changelog topic (must be compacted, with the %d partitions of input topic %q): %w", n, r.topic, err)
	}
	if r.outPartitions, err = adm.Partitions(ctx, r.cfg.OutputTopic); err != nil {
		return fmt.Errorf("kstate: output topic %q (create it before Run): %w", r.cfg.OutputTopic, err)
	}
	if err := os.MkdirAll(filepath.Join(r.cfg.StateDir, r.cfg.ApplicationID), 0o755); err != nil {
		return fmt.Errorf("kstate: state directory: %w", err)
	}
	r.session, err = kafka.NewSession(kafka.SessionConfig{
		Brokers:            r.cfg.Brokers,
		GroupID:            r.cfg.ApplicationID,
		InstanceID:         r.cfg.InstanceID,
		Topics:             []string{r.topic},
		TransactionTimeout: r.cfg.TransactionTimeout,
		SessionTimeout:     r.cfg.SessionTimeout,
		FetchMaxWait:       r.cfg.MaxBatchWait,
		OnAssigned:         r.onAssigned,
		OnRevoked:          r.onRevoked,
		OnLost:             r.onLost,
		Logf:               r.cfg.Logf,
	})
	if err != nil {
		return fmt.Errorf("kstate: %w", err)
	}
	return nil
}

// shutdown closes every task (processor Close, shard Close; restores are
// cancelled), then the session (leaving the group unless static).
func (r *runner[K, I, O]) shutdown() error {
	r.mu.Lock()
	var parts []int32
	for p := range r.mu.slots {
		parts = append(parts, p)
	}
	r.mu.Unlock()
	sort.Slice(parts, func(i, j int) bool { return parts[i] < parts[j] })
	err := r.closeTasks(parts, "shutdown")
	if r.session != nil {
		r.session.Close()
	}
	if r.admin != nil {
		r.admin.Close()
	}
	r.logf("stopped")
	return err
}

// failed returns the first error of a restore goroutine.
func (r *runner[K, I, O]) failed() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.mu.err
}

func (r *runner[K, I, O]) fail(err error) {
	r.mu.Lock()
	if r.mu.err == nil {
		r.mu.err = err
	}
	r.mu.Unlock()
}

func (r *runner[K, I, O]) kafkaErr(what string, err error) error {
	if errors.Is(err, kafka.ErrFenced) {
		return fmt.Errorf("kstate: %s: instance %q of application %q was fenced by a newer instance with the same instance id (or transactional id): stopping: %w",
			what, r.cfg.InstanceID, r.cfg.ApplicationID, err)
	}
	return fmt.Errorf("kstate: %s: %w", what, err)
}

// batch runs one micro-batch over the polled records: every ready task
// with records, or wanting a batch anyway, runs it on its own goroutine;
// then outputs and changelog records are produced in one transaction with
// the offsets of everything polled, and the tasks commit or abort locally.
func (r *runner[K, I, O]) batch(recs []kafka.Record) error {
	now := r.cfg.Clock()
	ready := r.readyTasks()
	byPart := make(map[int32][]engine.Record)
	var unready []int32
	for i := range recs {
		rec := &recs[i]
		if rec.Topic != r.topic || ready[rec.Partition] == nil {
			unready = append(unready, rec.Partition)
			continue
		}
		byPart[rec.Partition] = append(byPart[rec.Partition], engine.Record{
			Offset: rec.Offset, Key: rec.Key, Value: rec.Value, TimestampMs: rec.Timestamp.UnixMilli(),
		})
	}
	if len(unready) > 0 {
		return r.rewind(unready)
	}
	trigger := r.cfg.TimeMode == processor.ProcessingTime && now.Sub(r.lastTrigger) >= r.cfg.TriggerInterval
	var parts []*slot[K, I, O]
	for p, s := range ready {
		if len(byPart[p]) > 0 || trigger || s.task.NeedsBatch() {
			parts = append(parts, s)
		}
	}
	if len(parts) == 0 {
		return nil
	}
	r.app.retire(Counters{Rounds: 1})
	if trigger {
		r.lastTrigger = now
	}
	sort.Slice(parts, func(i, j int) bool { return parts[i].part < parts[j].part })

	results := make([]*engine.BatchResult, len(parts))
	errs := make([]error, len(parts))
	var wg sync.WaitGroup
	for i, s := range parts {
		wg.Go(func() { results[i], errs[i] = s.task.RunBatch(now.UnixMilli(), byPart[s.part]) })
	}
	wg.Wait()
	abortAll := func() {
		for _, s := range parts {
			s.task.Abort()
		}
	}
	for _, err := range errs {
		if err != nil {
			abortAll()
			return fmt.Errorf("kstate: %w", err)
		}
	}

	out, clEnd := r.records(parts, results)
	if len(out) == 0 && len(recs) == 0 {
		// Nothing consumed, nothing produced, nothing staged: no
		// transaction needed.
		for _, s := range parts {
			if err := s.task.Commit(-1); err != nil {
				return fmt.Errorf("kstate: %w", err)
			}
		}
		return nil
	}
	if err := r.session.Begin(); err != nil {
		abortAll()
		return r.kafkaErr("begin transaction", err)
	}
	offsets, err := r.session.Produce(r.workCtx, out)
	if err != nil {
		abortAll()
		if _, aerr := r.session.End(r.workCtx, false); aerr != nil {
			r.logf("abort after failed produce: %v", aerr)
		}
		return r.kafkaErr("produce", err)
	}
	engine.At(engine.AfterProduce)
	t0 := time.Now()
	committed, err := r.session.End(r.workCtx, true)
	latency := time.Since(t0)
	if err != nil {
		abortAll()
		return r.kafkaErr("commit transaction", err)
	}
	if !committed {
		// A rebalance intervened: Kafka aborted the transaction and the
		// session rewound to the committed offsets; the next polls
		// deliver the same records again to whoever owns them now.
		abortAll()
		r.app.retire(Counters{Aborts: 1})
		r.logf("batch of partitions %v aborted by a rebalance; retrying from the committed offsets", partsOf(parts))
		return nil
	}
	r.app.retire(Counters{Commits: 1, CommitLatency: latency})
	r.mu.Lock()
	first := r.mu.firstCommit == 0
	if first {
		r.mu.firstCommit = max(time.Since(r.start), time.Nanosecond)
	}
	r.mu.Unlock()
	if first {
		r.logf("first batch committed %v after start (partitions %v)", time.Since(r.start).Round(time.Millisecond), partsOf(parts))
	}
	for i, s := range parts {
		next := int64(-1)
		if clEnd[i] > 0 {
			next = offsets[clEnd[i]-1] + 1
		}
		engine.At(engine.BeforeLocalCommit)
		if err := s.task.Commit(next); err != nil {
			// Kafka has the batch; the shard does not. A restart
			// restores the missing tail from the changelog.
			return fmt.Errorf("kstate: %w", err)
		}
	}
	return nil
}

// records builds the transaction's records: per task its outputs, then its
// changelog records (changelog partition = input partition). clEnd[i] is
// the index after task i's last changelog record, 0 if it has none.
func (r *runner[K, I, O]) records(parts []*slot[K, I, O], results []*engine.BatchResult) ([]kafka.Record, []int) {
	var out []kafka.Record
	clEnd := make([]int, len(parts))
	for i, s := range parts {
		res := results[i]
		for _, o := range res.Outputs {
			var ts time.Time
			if o.TimestampMs >= 0 {
				ts = time.UnixMilli(o.TimestampMs)
			}
			out = append(out, kafka.Record{
				Topic: r.cfg.OutputTopic, Partition: r.outputPartition(o.Key, s.part),
				Key: o.Key, Value: o.Value, Timestamp: ts,
			})
		}
		for _, c := range res.Changelog {
			out = append(out, kafka.Record{Topic: r.changelogTopic, Partition: s.part, Key: c.Key, Value: c.Value})
		}
		if len(res.Changelog) > 0 {
			clEnd[i] = len(out)
		}
	}
	return out, clEnd
}

// outputPartition is murmur2 of the key like Kafka's default partitioner;
// computed here (not left to the producer) so that a record with a nil key
// goes deterministically to the input partition's counterpart.
func (r *runner[K, I, O]) outputPartition(key []byte, input int32) int32 {
	if key == nil {
		return input % int32(r.outPartitions)
	}
	return engine.PartitionFor(key, r.outPartitions)
}

// rewind handles records of partitions that are not ready: the session
// delivered them in the same Poll that reported the partitions assigned,
// before the engine could pause them. Their offsets were advanced by the
// poll, so committing now would skip them; an empty aborted transaction
// rewinds consumption to the committed offsets instead. The partitions are
// paused by now, so the next poll does not deliver them again.
func (r *runner[K, I, O]) rewind(parts []int32) error {
	r.logf("poll returned records of partitions %v that are not restored yet; rewinding to the committed offsets", uniq(parts))
	if err := r.session.Begin(); err != nil {
		return r.kafkaErr("begin transaction", err)
	}
	if _, err := r.session.End(r.workCtx, false); err != nil {
		return r.kafkaErr("abort transaction", err)
	}
	return nil
}

func partsOf[K, I, O any](ss []*slot[K, I, O]) []int32 {
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

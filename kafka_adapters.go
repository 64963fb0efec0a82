package kstate

// Adapters from internal/kafka to the engine's Session, Admin and Changelog
// interfaces, and from Options.Observability.Clock to engine.Clock. They only translate
// types and errors: the protocol lives in internal/engine.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/kstate/kstate/changelog"
	"github.com/kstate/kstate/internal/engine"
	"github.com/kstate/kstate/internal/group"
	"github.com/kstate/kstate/internal/kafka"
)

// joinGroup joins the group as instance (runtime.Ports.NewSession). The
// session does not leave the group (LeaveGroupOnShutdown) once stayIn (if
// not nil) returns true: another pipeline failed, and Run, returning an
// error, never leaves the group. closeJoinGrace is
// kafka.SessionConfig.CloseJoinGrace (0: its default).
func (a *App[K, I, O]) joinGroup(instance string, stayIn func() bool, closeJoinGrace time.Duration) (engine.Session, error) {
	cfg := &a.cfg
	s := &kafkaSession{stayIn: stayIn}
	a.mu.Lock()
	positions := a.mu.positions
	a.mu.Unlock()
	var localShards func() map[int32]int64
	if positions != nil {
		localShards = positions.Snapshot
	}
	ks, err := kafka.NewSession(kafka.SessionConfig{
		Brokers:            cfg.Brokers,
		Client:             a.metrics.kafka.clientConfig(cfg.clientConfig(), a.pipelineClient(instance)),
		GroupID:            cfg.ApplicationID,
		InstanceID:         instance,
		Topics:             cfg.engineTopics(),
		CoPartitioned:      len(cfg.engineTopics()) > 1,
		TransactionTimeout: cfg.TransactionTimeout,
		SessionTimeout:     cfg.SessionTimeout,
		CloseJoinGrace:     closeJoinGrace,
		FetchMaxWait:       cfg.MaxBatchWait,
		MaxRecordBytes:     cfg.MaxRecordBytes,
		StartupTimeout:     cfg.StartupTimeout,
		PauseAssigned:      true, // the coordinator resumes a partition once restored
		OnAssigned:         func(ctx context.Context, ps []kafka.Partition) { s.ev.Assigned(ctx, toParts(ps)) },
		OnRevoked:          func(ctx context.Context, ps []kafka.Partition) { s.ev.Revoked(ctx, toParts(ps)) },
		OnLost:             func(ctx context.Context, ps []kafka.Partition) { s.ev.Lost(ctx, toParts(ps)) },
		Logger:             cfg.Logger.With("app", cfg.ApplicationID),

		// The group's balancer (internal/balancer): every pipeline of
		// this Run is a member of process InstanceID, sharing its shards.
		Process:         cfg.InstanceID,
		Addr:            cfg.AdvertisedURL,
		ChangelogTopic:  a.ChangelogTopic(),
		Standbys:        cfg.Standbys,
		AcceptableLag:   cfg.AcceptableLag,
		ProbingInterval: cfg.ProbingInterval,
		LocalShards:     localShards,
		OnStandby: func(ctx context.Context, parts []int32) {
			if se, ok := s.ev.(engine.StandbyEvents); ok {
				se.Standby(ctx, parts)
			}
		},
	})
	if err != nil {
		return nil, err
	}
	s.s = ks
	return s, nil
}

// kafkaSession is an engine.Session over a kafka.Session. The kafka
// session calls its group callbacks inside Poll, so ev is set for exactly
// that call (all on the coordinator's loop goroutine).
type kafkaSession struct {
	s      *kafka.Session
	ev     engine.GroupEvents
	stayIn func() bool // see newSession; nil: always leave when asked
	// polled is the array of the last Poll's records, reused by the next
	// (engine.Session: valid until the next Poll).
	polled []engine.Message
}

// GroupView is the group as the leader last assigned it, and this member's
// last rebalances (engine.GroupViewer).
func (k *kafkaSession) GroupView() (group.View, []group.Rebalance) { return k.s.View() }

func (k *kafkaSession) Poll(ctx context.Context, max int, ev engine.GroupEvents) ([]engine.Message, error) {
	k.ev = ev
	clear(k.polled) // the last poll's records: the engine is done with them
	// kafka.Record is engine.Message: the session's records as they are.
	out, err := k.s.PollInto(ctx, max, k.polled)
	k.ev = nil
	if err != nil {
		return nil, sessionErr(err)
	}
	k.polled = out
	return out, nil
}

func (k *kafkaSession) Pause(ps []engine.Partition) { k.s.Pause(fromParts(ps)) }

// HighWatermark implements engine.HighWatermarks (consumer lag).
func (k *kafkaSession) HighWatermark(topic string, p int32) (hwm, logStart int64, ok bool) {
	return k.s.HighWatermark(topic, p)
}
func (k *kafkaSession) Resume(ps []engine.Partition) { k.s.Resume(fromParts(ps)) }
func (k *kafkaSession) Begin() error                 { return sessionErr(k.s.Begin()) }

func (k *kafkaSession) Produce(ctx context.Context, msgs []engine.Message) ([]int64, error) {
	offs, err := k.s.Produce(ctx, msgs) // kafka.Record is engine.Message
	return offs, sessionErr(err)
}

// ProduceAsync implements engine.AsyncProducer.
func (k *kafkaSession) ProduceAsync(ctx context.Context, msgs []engine.Message, done func([]int64, error)) {
	k.s.ProduceAsync(ctx, msgs, func(offs []int64, err error) { done(offs, sessionErr(err)) })
}

func (k *kafkaSession) End(ctx context.Context, commit bool) (bool, error) {
	ok, err := k.s.End(ctx, commit)
	return ok, sessionErr(err)
}

func (k *kafkaSession) TransactionalID() string { return k.s.TransactionalID() }
func (k *kafkaSession) Close() error            { return k.s.Close() }

// Abandon implements engine.Abandoner.
func (k *kafkaSession) Abandon() { k.s.Abandon() }

// Leave makes the session an engine.GroupLeaver (LeaveGroupOnShutdown).
func (k *kafkaSession) Leave(ctx context.Context) error {
	if k.stayIn != nil && k.stayIn() {
		k.s.Close()
		return errors.New("kstate: another pipeline of this instance failed: Run returns its error and does not leave the group")
	}
	return k.s.Leave(ctx)
}

// isRetriable is kafka.IsRetriable; a test breaks it to show that a case
// then fails (export_test.go).
var isRetriable = kafka.IsRetriable

// sessionErr marks fencing with engine.ErrFenced, and an unreachable
// cluster (connection refused, reset or broken, EOF, I/O timeouts) or a
// retriable Kafka error franz-go gave up on (kafka.IsRetriable:
// NOT_ENOUGH_REPLICAS, NOT_COORDINATOR, REQUEST_TIMED_OUT...) with
// engine.ErrUnavailable, which the coordinator rides out by giving the
// batch up and rejoining with a new session, with backoff (keeping the
// kafka error).
func sessionErr(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, kafka.ErrFenced):
		return &markedError{err: err, mark: engine.ErrFenced}
	case kafka.IsConnectionError(err), isRetriable(err):
		return &markedError{err: err, mark: engine.ErrUnavailable}
	}
	return err
}

// markedError is err that also matches mark with errors.Is.
type markedError struct{ err, mark error }

func (e *markedError) Error() string   { return e.err.Error() }
func (e *markedError) Unwrap() []error { return []error{e.mark, e.err} }

func toParts(ps []kafka.Partition) []engine.Partition {
	out := make([]engine.Partition, len(ps))
	for i, p := range ps {
		out[i] = engine.Partition{Topic: p.Topic, Partition: p.Partition}
	}
	return out
}

func fromParts(ps []engine.Partition) []kafka.Partition {
	out := make([]kafka.Partition, len(ps))
	for i, p := range ps {
		out[i] = kafka.Partition{Topic: p.Topic, Partition: p.Partition}
	}
	return out
}

// kafkaAdmin is an engine.Admin over a kafka.Admin. maxRecordBytes is
// Options.Kafka.MaxRecordBytes: a changelog topic created here accepts records of
// that size. rf and minISR are Options.Kafka.ReplicationFactor and
// MinInsyncReplicas, given to the internal topics created here and checked
// against existing ones (checkReplication); warned holds the warnings
// logged already (once per process, for every pipeline and rejoin).
type kafkaAdmin struct {
	a              *kafka.Admin
	maxRecordBytes int
	rf, minISR     int
	warned         *sync.Map // "topic\x00what" → struct{}
	log            *slog.Logger
}

func (k kafkaAdmin) Partitions(ctx context.Context, topic string) (int, error) {
	n, err := k.a.Partitions(ctx, topic)
	if errors.Is(err, kafka.ErrTopicNotFound) {
		return 0, &markedError{err: err, mark: engine.ErrUnknownTopic}
	}
	return n, adminErr(err)
}

// spec is the TopicSpec of an internal topic of n partitions.
func (k kafkaAdmin) spec(topic string, n int) kafka.TopicSpec {
	return kafka.TopicSpec{Name: topic, Partitions: n, ReplicationFactor: int16(k.rf), MinInsyncReplicas: k.minISR}
}

func (k kafkaAdmin) EnsureChangelog(ctx context.Context, topic string, n int) error {
	spec := k.spec(topic, n)
	spec.Compacted = true
	if k.maxRecordBytes > kafka.DefaultMaxRecordBytes {
		spec.Configs = map[string]string{"max.message.bytes": strconv.Itoa(k.maxRecordBytes)}
	}
	if err := k.ensure(ctx, spec); err != nil {
		return err
	}
	return k.checkReplication(ctx, topic)
}

func (k kafkaAdmin) EnsureDeadLetter(ctx context.Context, topic string, n int) (int, error) {
	have, err := k.a.Partitions(ctx, topic)
	if errors.Is(err, kafka.ErrTopicNotFound) {
		if err := k.ensure(ctx, k.spec(topic, n)); err != nil {
			return 0, err
		}
		have, err = k.a.Partitions(ctx, topic)
	}
	if err != nil {
		return 0, adminErr(err)
	}
	return have, k.checkReplication(ctx, topic)
}

// ensure is EnsureTopic, with a replication factor the cluster cannot
// give a configuration error naming the option.
func (k kafkaAdmin) ensure(ctx context.Context, spec kafka.TopicSpec) error {
	err := k.a.EnsureTopic(ctx, spec)
	if errors.Is(err, kafka.ErrReplicationFactor) {
		opt := fmt.Sprintf("Options.Kafka.ReplicationFactor %d", k.rf)
		if k.rf <= 0 {
			opt = "Options.Kafka.ReplicationFactor 0 (the broker's default.replication.factor)"
		}
		return fmt.Errorf("%w: %s: %w: give at most the number of brokers (3 for production), "+
			"or start the brokers that are down", ErrConfig, opt, err)
	}
	return adminErr(err)
}

// checkReplication checks an internal topic's replication factor and
// min.insync.replicas (kafka.ReplicationIssues) and logs each problem at
// Warn, once per topic and problem, with the command that fixes it.
func (k kafkaAdmin) checkReplication(ctx context.Context, topic string) error {
	r, err := k.a.Replication(ctx, topic)
	if err != nil && !kafka.IsAuthError(err) {
		return fmt.Errorf("kstate: topic %q: %w", topic, adminErr(err))
	}
	if err != nil {
		// Running needs no DescribeConfigs ACL; do not demand one just
		// for this check.
		k.warnOnce(topic, "unchecked", "cannot check the internal topic's min.insync.replicas (not authorized to describe its configs)",
			"topic", topic, "err", err)
	}
	for _, is := range kafka.ReplicationIssues(r, k.rf, k.minISR) {
		k.warnOnce(topic, is.What, "internal topic not replicated for production",
			"topic", topic, "problem", is.What, "replication_factor", r.ReplicationFactor,
			"min_insync_replicas", r.MinInsyncReplicas, "brokers", r.Brokers, "fix", is.Fix)
	}
	return nil
}

// warnOnce logs msg at Warn the first time it is called with topic and
// key.
func (k kafkaAdmin) warnOnce(topic, key, msg string, attrs ...any) {
	if k.warned != nil {
		if _, dup := k.warned.LoadOrStore(topic+"\x00"+key, struct{}{}); dup {
			return
		}
	}
	k.log.Warn(msg, attrs...)
}

// DeleteRetention implements engine.RetentionDescriber: without the
// DescribeConfigs ACL it is unknown (0), with a Warn once.
func (k kafkaAdmin) DeleteRetention(ctx context.Context, topic string) (time.Duration, error) {
	d, err := k.a.DeleteRetention(ctx, topic)
	if err != nil && kafka.IsAuthError(err) {
		k.warnOnce(topic, "retention", "cannot read the changelog's delete.retention.ms (not authorized to describe its configs): a shard restored after a long outage is not checked for deletions compaction removed",
			"topic", topic, "err", err)
		return 0, nil
	}
	return d, adminErr(err)
}

// EndOffsets implements engine.EndOffsetter (consumer lag).
func (k kafkaAdmin) EndOffsets(ctx context.Context, topic string) (map[int32]int64, error) {
	return k.a.EndOffsets(ctx, topic)
}

func (k kafkaAdmin) CommittedOffsets(ctx context.Context, group, topic string) (map[int32]int64, error) {
	offs, err := k.a.CommittedOffsets(ctx, group, topic)
	return offs, adminErr(err)
}

// StableOffsets makes kafkaAdmin an engine.StableOffsetter (RunToEnd).
func (k kafkaAdmin) StableOffsets(ctx context.Context, topic string) (map[int32]int64, error) {
	offs, err := k.a.StableOffsets(ctx, topic)
	if errors.Is(err, kafka.ErrTopicNotFound) {
		return nil, &markedError{err: err, mark: engine.ErrUnknownTopic}
	}
	return offs, adminErr(err)
}

// GroupOffsets is CommittedOffsets, for RunToEnd's end check.
func (k kafkaAdmin) GroupOffsets(ctx context.Context, group, topic string) (map[int32]int64, error) {
	return k.CommittedOffsets(ctx, group, topic)
}

// DropEmptyTopic implements engine.TopicDropper: a failed first start
// deletes the changelog topic it created.
func (k kafkaAdmin) DropEmptyTopic(ctx context.Context, topic string) (bool, error) {
	return k.a.DropEmptyTopic(ctx, topic)
}

// checkRecordLimit is the coordinator's CheckTopics: MaxRecordBytes must
// fit the max.message.bytes of the topics records are produced to, or the
// broker would reject what the producer lets through.
func (k kafkaAdmin) checkRecordLimit(topics ...string) func(ctx context.Context) error {
	return func(ctx context.Context) error {
		for _, topic := range topics {
			limit, err := k.a.MaxMessageBytes(ctx, topic)
			if err != nil && kafka.IsAuthError(err) {
				// Producing needs no DescribeConfigs ACL; do not demand one
				// just for this check.
				k.log.Warn("cannot check MaxRecordBytes against the topic's max.message.bytes (not authorized to describe its configs)",
					"topic", topic, "max_record_bytes", k.maxRecordBytes, "err", err)
				continue
			}
			if err != nil {
				return fmt.Errorf("kstate: topic %q: %w", topic, adminErr(err))
			}
			if k.maxRecordBytes > limit {
				return fmt.Errorf("%w: MaxRecordBytes %d is over the max.message.bytes %d of topic %q: "+
					"raise the topic's max.message.bytes to at least %d, or lower MaxRecordBytes",
					ErrConfig, k.maxRecordBytes, limit, topic, k.maxRecordBytes)
			}
		}
		return nil
	}
}

// adminErr marks errors of an unreachable cluster with
// engine.ErrUnavailable, which start-up retries.
func adminErr(err error) error {
	if err != nil && kafka.IsUnreachable(err) {
		return &markedError{err: err, mark: engine.ErrUnavailable}
	}
	return err
}

// kafkaChangelog opens kafka.PartitionReaders on Run's admin client (the
// coordinator waits for every restore before Run closes it) and
// re-seeds a partition with a short-lived transactional producer whose id,
// "<app>-reseed-<partition>", fences a crashed earlier re-seed of the same
// partition.
type kafkaChangelog struct {
	client  kafka.ClientConfig
	admin   *kafka.Admin // its client is shared by the readers
	app     string
	timeout time.Duration // the transaction timeout
}

func (k kafkaChangelog) Reseed(ctx context.Context, topic string, p int32, msgs []engine.Message) (int64, error) {
	if len(msgs) == 0 {
		return 0, nil // an empty shard: restore from the log start
	}
	recs := make([]kafka.Record, len(msgs))
	for i, m := range msgs {
		recs[i] = kafka.Record{Topic: topic, Partition: p, Key: m.Key, Value: m.Value}
	}
	offs, err := k.client.WriteTransaction(ctx, fmt.Sprintf("%s-reseed-%d", k.app, p), k.timeout, recs)
	if err != nil {
		return 0, err
	}
	return offs[len(offs)-1] + 1, nil
}

func (k kafkaChangelog) Open(ctx context.Context, topic string, p int32, from int64) (engine.ChangelogReader, error) {
	rd, err := k.admin.NewPartitionReader(ctx, topic, p, from)
	if err != nil {
		if errors.Is(err, kafka.ErrOffsetOutOfRange) {
			return nil, &markedError{err: err, mark: engine.ErrOffsetOutOfRange}
		}
		return nil, err
	}
	return kafkaReader{rd}, nil
}

type kafkaReader struct{ rd *kafka.PartitionReader }

func (k kafkaReader) Next(ctx context.Context) ([]engine.Message, error) {
	// kafka.Record is engine.Message, headers included (a planned batch's
	// input re-read, sink.go: its dead letters keep the original headers).
	return k.rd.Next(ctx) // io.EOF passes through unwrapped
}

// NextChangelog is the restore's path (engine's changelogRecordsReader):
// changelog records straight from the fetch, no Message in between.
func (k kafkaReader) NextChangelog(ctx context.Context) ([]changelog.Record, error) {
	return k.rd.NextChangelog(ctx) // io.EOF passes through unwrapped
}

func (k kafkaReader) Position() int64 { return k.rd.Position() }
func (k kafkaReader) End() int64      { return k.rd.End() }
func (k kafkaReader) Close()          { k.rd.Close() }

// clock is Options.Observability.Clock as an engine.Clock; elapsed time and waits are
// real.
type clock struct {
	now   func() time.Time
	start time.Time
}

func (c clock) Now() time.Time         { return c.now() }
func (c clock) Elapsed() time.Duration { return time.Since(c.start) }
func (c clock) Sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

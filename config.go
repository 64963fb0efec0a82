package kstate

import (
	"crypto/tls"
	"fmt"
	"hash/fnv"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/kstate/kstate/internal/engine"
	"github.com/kstate/kstate/internal/kafka"
	"github.com/kstate/kstate/internal/kv"
	"github.com/kstate/kstate/processor"
	"github.com/kstate/kstate/serde"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl"
)

// Config configures an App. K is the grouping key, I the input value and O
// the output value type. Required fields are marked; every other zero value
// means the documented default. New validates the whole Config once.
type Config[K, I, O any] struct {
	// ApplicationID (required) is the consumer group id, the prefix of the
	// changelog topic "<ApplicationID>-changelog" and of the transactional
	// id, and the state directory name: 1 to 237 letters, digits, '.', '_'
	// or '-' (Kafka's topic name rules for "<ApplicationID>-repartition"),
	// not "." or "..".
	ApplicationID string
	// Brokers (required) are the bootstrap addresses, "host:port" (or
	// "host" for port 9092; "[::1]:9092" for IPv6), checked by New.
	Brokers []string
	// TLS, when not nil, encrypts every connection to Kafka (and, with
	// Certificates, authenticates the client by certificate); see
	// TLSConfigFromFiles. Default nil: plaintext.
	TLS *tls.Config
	// SASL, when not nil, authenticates every connection: PLAIN and
	// SCRAM-SHA-256/512 from franz-go's sasl/plain and sasl/scram packages
	// (or SASLFromStrings), OAUTHBEARER from sasl/oauth. Use it with TLS:
	// PLAIN sends the password as is. Default nil: no SASL.
	SASL sasl.Mechanism
	// KafkaOptions are extra franz-go options applied to every Kafka client
	// kstate creates (group session, admin, changelog readers and re-seed
	// producers, initial-state readers), before kstate's own. kstate always
	// sets, and so overrides: the seed brokers, TLS and SASL above (New
	// rejects a kgo.Dialer here with TLS, and a kgo.SASL here with SASL),
	// and per client the consumer group, topics, instance id, balancer,
	// transactional id and timeout, session and heartbeat timing, fetch
	// isolation level and max wait,
	// partitioner, linger, batch and write size limits, metadata min age,
	// group callbacks and logger. Meant for client id, rack, timeouts,
	// compression; New rejects options that make a client a consumer or
	// transactional (ConsumerGroup, ConsumeTopics, TransactionalID...),
	// since they would apply to every client. Default none.
	KafkaOptions []kgo.Opt
	// InstanceID identifies this instance across restarts: it is the static
	// group member id and the suffix of the transactional id
	// "<ApplicationID>-<InstanceID>". It must be unique among running
	// instances and stable across restarts of one instance: a restarted
	// instance then fences its dead predecessor's open transaction at once
	// instead of waiting for TransactionTimeout, and keeps its partitions
	// without a rebalance if it is back within the session timeout.
	// Default: "<hostname>-<8 hex digits of a hash of StateDir>", stable per
	// host and state directory (two instances on one host need two
	// StateDirs anyway). Like ApplicationID, at most 249 characters.
	InstanceID string

	// InputTopics (required) are the input topics, all decoded with
	// ValueSerde (or ValueFromRecord), unless Inputs is set instead; their
	// records' keys are the grouping keys. Several topics must be co-partitioned (see
	// Input). If InitialState is used, the topics must be partitioned by
	// Kafka's default partitioner (murmur2 of the key bytes), as every
	// standard Kafka producer does.
	InputTopics []string
	// Inputs, instead of InputTopics and ValueSerde, lists the input
	// topics each with its own value decoder (Input), so topics with
	// different formats feed one processor. Default: none (InputTopics).
	Inputs []Input[I]
	// GroupBy re-keys input topics whose grouping key is not the record
	// key, through the internal topic "<ApplicationID>-repartition" (see
	// GroupBy). Default: none (every input is grouped by its record key).
	GroupBy []GroupBy[K, I]
	// KeySerde (required) decodes record keys into grouping keys. Encoding
	// a decoded key must give back the record's key bytes (state is stored
	// under the key bytes).
	KeySerde serde.Serde[K]
	// ValueSerde (required) decodes record values, unless ValueFromRecord
	// (or Inputs) is set instead.
	ValueSerde serde.Deserializer[I]
	// ValueFromRecord, instead of ValueSerde, decodes an input value from
	// the whole record: topic, partition, offset, timestamp, key, value and
	// headers (processor.Record). A processor that needs record metadata
	// makes its input type I carry it, and keeps HandleInputRows' plain
	// iter.Seq[I]; one that does not is unaffected. Its errors and panics
	// meet OnDecodeError like ValueSerde's. Default: none (ValueSerde).
	ValueFromRecord func(rec processor.Record) (I, error)
	// OnDecodeError says what an undecodable record, or one with a nil
	// key, does. Default DecodeErrorFail: Run stops with a DecodeError
	// naming topic, partition and offset; nothing from that batch on is
	// committed. DecodeErrorSkip drops it (Warn log, Counters.Skipped);
	// DecodeErrorDeadLetter writes it to DeadLetterTopic in the batch's
	// transaction. A serde error wrapping serde.ErrUnavailable (a schema
	// registry down) stops Run under every policy.
	OnDecodeError DecodeErrorPolicy
	// OnKeyPartitionMismatch says what a record whose key does not hash
	// (murmur2, Kafka's default partitioner) to the partition it was read
	// from does. Default KeyPartitionAllow: it is processed on the
	// partition it arrived on, counted (Counters.KeyPartitionMismatches)
	// and logged at Warn once per partition.
	OnKeyPartitionMismatch KeyPartitionPolicy
	// OnProcessingError says what a failing HandleInputRows or
	// HandleExpiredTimer call (an error, a panic, an output that does not
	// serialize or is too large, a late output) does. Default
	// ProcessingErrorFail: Run stops with a UserError and nothing of the
	// batch is committed. ProcessingErrorDeadLetter discards what the call
	// did (state, timers, outputs), writes the key's rows of the batch (or,
	// for a timer, a record describing it) to DeadLetterTopic, and commits
	// every other key. Init and HandleInitialState errors always stop Run.
	OnProcessingError ProcessingErrorPolicy
	// DeadLetterTopic receives the records of the DeadLetter policies,
	// written in the batch's transaction (read it read_committed). It is
	// created with the input topic's partition count when missing; a
	// record goes to the partition numbered like its source partition
	// (modulo the topic's count). It must not be an input, the changelog
	// or the repartition topic (New refuses it, as it refuses any output
	// topic that is: a record written to an input is read again, forever).
	// Default "<ApplicationID>-dlq"; unused unless a policy is DeadLetter.
	DeadLetterTopic string

	// NewProcessor (required) returns a new processor; it is called once
	// per partition task (and, when InitialState is set, once by New to
	// check that the processor implements HandleInitialState; that
	// instance is dropped without Init or Close).
	NewProcessor func() processor.StatefulProcessor[K, I, O]
	// TimeMode is fixed per application. Default NoTime.
	TimeMode processor.TimeMode
	// OutputMode is fixed per application. Default Append.
	OutputMode processor.OutputMode

	// EventTime (EventTime mode) extracts a row's event time in ms.
	// Default: the record timestamp.
	EventTime func(value I, recordTimestampMs int64) int64
	// AllowedLateness (EventTime mode) is subtracted from the max event time
	// seen to give the watermark. Default 0.
	AllowedLateness time.Duration

	// OutputTopic receives the emitted rows. It must exist, and not be an
	// input, the changelog or the repartition topic. Required unless Sinks
	// is set. Default (with Sinks): none: the rows go to Sinks only.
	OutputTopic string
	// OutputSerde encodes emitted rows; required with OutputTopic. Default
	// (without OutputTopic): none.
	OutputSerde serde.Serializer[O]
	// OutputTopics declares further output topics, each with the
	// serializer of its values (processor.NewOutputTopic), that the
	// processor writes to with processor.EmitTo, in the batch's
	// transaction like OutputTopic. Each must exist: Run checks them at
	// start (a missing one is an error naming it). Default: none.
	OutputTopics []processor.NamedTopic
	// OutputKey gives an output record's key. Default: the grouping key's
	// bytes. Output records are partitioned by murmur2 of their key.
	OutputKey func(key K, out O) []byte
	// OutputEventTime gives an emitted row's event time in ms; it becomes
	// the output record's timestamp (so a downstream kstate application
	// keeps event time), and in EventTime mode a row older than the
	// watermark is an error. Default: none (the producer's clock).
	OutputEventTime func(out O) int64
	// Sinks receive every partition batch that emitted rows, with the
	// batch's id, before its transaction commits (foreachBatch; see Sink):
	// a batch retried after a crash, an abort or a rebalance has the same
	// id and rows. With a sink every batch is planned first, in a small
	// transaction of its own. Default: none.
	Sinks []Sink[K, O]

	// InitialState is applied through the processor's HandleInitialState
	// on the application's first run (see InitialStateFromSeq,
	// InitialStateFromTopic). Default: none.
	InitialState InitialState[K]

	// TriggerInterval (ProcessingTime mode): a batch runs at least this
	// often, measured on Clock, even without input, so that timers fire and
	// TTL is enforced. Default 1s.
	TriggerInterval time.Duration
	// MaxBatchRecords, when set, bounds the records of one micro-batch,
	// fixed. Default adaptive 5000–20000: batches start at 5000 records,
	// double while polls come back full (a backlog) and batches take under
	// 1s (or MaxBatchDuration/4), up to 20000, and halve back to 5000 once
	// caught up (a poll of less than half the limit), so a backlog moves in
	// large batches and a caught-up application keeps small ones.
	MaxBatchRecords int
	// MaxBatchWait bounds how long a poll waits for records. Default 200ms.
	MaxBatchWait time.Duration

	// StateDir holds the shards: <StateDir>/<ApplicationID>/<partition>.
	// Local state is a cache of the changelog; losing it costs a full
	// restore, never data. Default: <os.TempDir()>/kstate.
	StateDir string
	// StateMemory, when positive, bounds in bytes the RocksDB memory of
	// all of Run's shards together: one block cache of StateMemory (data,
	// index and filter blocks) shared by every partition, with the shards'
	// memtables charged to it and held to half of it (a write waits for a
	// flush when they are full). At least 1 MiB. It does not bound the Go
	// heap (batches, staged state, Kafka client buffers); see
	// docs/OPERATIONS.md. Default 0 (off): every shard has its own 64 MiB
	// cache and up to 64 MiB memtables, so memory grows with the
	// partitions; the shared budget is opt-in until it has been measured
	// on large states (docs/BENCHMARKS.md).
	StateMemory int64
	// StateCacheBytes bounds the committed-state cache of all of Run's
	// shards together: point reads of hot keys (ValueState, MapState
	// entries) are answered from memory instead of the store. It holds
	// committed values only (a batch's own writes are read from its
	// staging layer), is filled on reads and updated on commit, and a
	// shard's entries are dropped on revoke and restore. Its entries are
	// bytes, not Go objects (the garbage collector does not scan them),
	// in memory outside StateMemory. At least 64 KiB when positive;
	// negative turns the cache off. Default 16 MiB (when 0; measured in
	// docs/benchmarks/history.md: it saves store reads and GC time on repeated
	// keys, and costs little on keys read once).
	StateCacheBytes int64
	// StateWriteBehindBytes bounds, per partition, the committed batches a
	// shard keeps in memory instead of writing each to the store at its
	// local commit (write-behind: one entry per key, a later batch's write
	// replacing the earlier one; written in one store write when over this
	// bound or 256Ki changelog records, and on revoke and shutdown). Kafka holds every committed batch,
	// so a crash loses nothing: the restore replays the changelog from the
	// last write (docs/OPERATIONS.md, "Memory"). Negative: write-through,
	// every local commit writes the store. Default 4 MiB (when 0; measured
	// in docs/benchmarks/history.md, "Write-behind local commits").
	StateWriteBehindBytes int64
	// MaxStateVariableSetVersions bounds how many times the set of state
	// variables may change over the application's life, like Spark's
	// spark.sql.streaming.stateStore.stateSchemaFilesThreshold: the first
	// start that declares variables makes version 1, and each later start
	// whose Init declares a new variable or drops one (DeleteIfExists) the
	// next, however many it adds or drops. A start past the bound fails in
	// Init with state.ErrTooManyVariableSetVersions, writing nothing.
	// (Each variable's own schema versions are bounded apart:
	// state.WithMaxSchemaVersions.) Default 128
	// (state.DefaultMaxVariableSetVersions, when 0); negative: no bound.
	MaxStateVariableSetVersions int
	// StateBackend is the store of every shard: StateBackendRocksDB
	// (RocksDB through cgo, as the design names it) or StateBackendPebble
	// (Pebble, pure Go; StateMemory then shares only its block cache).
	// A shard directory keeps the backend it was created with: opening it
	// with the other one fails at start with state.ErrBackendMismatch.
	// Default "" = rocksdb (StateBackendRocksDB); in a build without cgo
	// (CGO_ENABLED=0, or the kstate_nocgo tag) RocksDB is not compiled in
	// and the default is pebble.
	StateBackend string
	// Pipelines is the number of independent pipelines Run runs in this
	// instance, like Kafka Streams' num.stream.threads: each is its own
	// member of the consumer group, with its own transactional producer
	// and its own share of the input partitions, and runs its own batch
	// loop, so one pipeline's commit overlaps another's processing. They
	// share StateDir, StateMemory, the initial state, the HTTP handler and
	// the metrics. Pipeline 0 uses InstanceID; pipeline i > 0 uses
	// "<InstanceID>-p<i>" (static member and transactional id suffix).
	// More pipelines than input partitions are not started. 1 runs one
	// pipeline, the batch loop strictly in sequence. With several, the
	// Sinks' WriteBatch is called concurrently, one call per pipeline at
	// most. Default 0: automatic, one pipeline per core the Go runtime
	// uses (GOMAXPROCS), at most 4 and at most the input's partitions, and
	// one with Sinks (docs/OPERATIONS.md, "Pipelines").
	Pipelines int
	// Clock gives the batch processing time. Default time.Now. Tests inject
	// a fake clock to drive timers and TTL without sleeping.
	Clock func() time.Time

	// TransactionTimeout is how long the broker lets a transaction of a
	// dead instance stay open: 1s to 15m (Kafka's minimum, and the
	// broker's default transaction.max.timeout.ms). Default 10s.
	TransactionTimeout time.Duration
	// SessionTimeout is how long the group waits for a silent member.
	// Default 10s.
	SessionTimeout time.Duration
	// StartupTimeout is how long Run keeps retrying, with backoff, while
	// the brokers are unreachable at start (a pod started before Kafka):
	// the topic checks and the group's first transactional request. Each
	// retry is logged at Warn. Default 60s.
	StartupTimeout time.Duration
	// MaxRecordBytes bounds one produced record (output, and changelog
	// records of state): the size of a record batch holding only it,
	// uncompressed, as Kafka measures it against a topic's
	// max.message.bytes (key + value + at most ~80 bytes). A larger output
	// fails its call at Emit (ErrOutputTooLarge), a larger state value the
	// call that wrote it (ErrStateTooLarge): OnProcessingError applies. Run
	// checks at start that it does not exceed the max.message.bytes of the
	// output and changelog topics; a changelog topic kstate creates gets a
	// max.message.bytes to match. At least 1024. Default
	// 1048576 (1 MiB, Kafka's default max.request.size), which fits Kafka's
	// default max.message.bytes.
	MaxRecordBytes int
	// ShutdownTimeout bounds the graceful shutdown after ctx is cancelled:
	// the batch in flight gets this long to commit before it is abandoned
	// (and aborted by the broker). Default 30s.
	ShutdownTimeout time.Duration
	// LeaveGroupOnShutdown makes a graceful shutdown (ctx cancelled, Run
	// returning nil) take this instance out of the consumer group at once.
	// Default false: the instance, a static member (InstanceID), stays in
	// the group until SessionTimeout, so that a restart within it (a
	// rolling deploy, a pod rescheduled) gets its partitions back without
	// a rebalance; meanwhile they are not processed, and the group is not
	// empty: kafka-consumer-groups --delete and offset resets fail with
	// NON_EMPTY_GROUP. Set it for a final stop (scale-in, decommission,
	// before deleting or resetting the group): the partitions move to the
	// other instances at once, and once the last instance has stopped the
	// group can be deleted at once. A leave that fails is logged at Warn;
	// the member then stays until SessionTimeout. Run stopping with an
	// error never leaves the group.
	LeaveGroupOnShutdown bool
	// MaxBatchDuration bounds the processor calls of one micro-batch
	// (HandleInputRows, HandleExpiredTimer, HandleInitialState and the
	// engine work between them). A batch still running after a tenth of
	// it (at most 10s) is logged at Warn, and again at that interval,
	// naming the partition, the method and the key, with the stuck
	// goroutine's stack once. Past MaxBatchDuration the instance gives its
	// partitions up: nothing of the batch is committed, and Run returns a
	// StuckError so that another instance (or a restart) takes over. The
	// stuck call itself cannot be stopped; its goroutine is left behind.
	// Default 5m, Kafka's max.poll.interval.ms: a consumer that has not
	// come back for its next records in that long is presumed dead.
	MaxBatchDuration time.Duration
	// MetadataRefresh is how often Run re-reads the input topic's
	// partition count: a change stops Run with a *PartitionsChangedError
	// before anything is processed on the new layout (an assignment of an
	// unknown partition is checked at once). Default 30s.
	MetadataRefresh time.Duration
	// OnStateChange is called with every change of the App's State (see
	// State), in order, on one goroutine of Run's: never concurrently, never
	// under the engine's locks, and not on the processing loop (a slow
	// listener delays later calls, not processing). Run returns after the
	// call of its final change (to Stopped or Failed). Default: none.
	OnStateChange func(old, new State)
	// HTTPAddr, when set, makes Run serve App.Handler (/healthz, /readyz,
	// /status, /metrics) on this address (e.g. ":8080") for as long as it runs; Run
	// fails at once if it cannot listen. Default "": no server (mount
	// App.Handler yourself). It never serves the live state queries
	// (App.QueryHandler: mount it yourself, behind your authentication).
	HTTPAddr string
	// Logger receives operational messages as structured records with the
	// attributes app, partition and batch where they apply: assignments and
	// restores at Info, aborted batches and recoveries at Warn, failures at
	// Error; the Kafka client's own messages are bridged at Warn and above
	// only. Default slog.Default().
	Logger *slog.Logger
}

// Values of Config.StateBackend.
const (
	// StateBackendRocksDB is RocksDB through cgo: the default where it is
	// compiled in (builds with cgo).
	StateBackendRocksDB = string(kv.BackendRocksDB)
	// StateBackendPebble is Pebble, a pure-Go store: the only backend, and
	// the default, of builds without cgo.
	StateBackendPebble = string(kv.BackendPebble)
)

// DecodeErrorPolicy says what an undecodable input record does.
type DecodeErrorPolicy int

const (
	// DecodeErrorFail stops Run with a DecodeError; nothing from the
	// failing batch on is committed.
	DecodeErrorFail DecodeErrorPolicy = iota
	// DecodeErrorSkip drops the record, logged at Warn with its topic,
	// partition and offset and counted in Counters.Skipped.
	DecodeErrorSkip
	// DecodeErrorDeadLetter writes the record to Config.DeadLetterTopic
	// in the batch's transaction (Counters.DeadLettered).
	DecodeErrorDeadLetter
)

// KeyPartitionPolicy says what a record whose key does not hash to its
// partition does.
type KeyPartitionPolicy int

const (
	// KeyPartitionAllow processes it where it arrived (counted, logged
	// once per partition). Its key's state is then split between
	// partitions, and initial state routed by the key does not meet it.
	KeyPartitionAllow KeyPartitionPolicy = iota
	// KeyPartitionFail stops Run with a DecodeError wrapping
	// ErrKeyPartition.
	KeyPartitionFail
	// KeyPartitionDeadLetter writes it to Config.DeadLetterTopic.
	KeyPartitionDeadLetter
)

// ProcessingErrorPolicy says what a failing handler call does.
type ProcessingErrorPolicy int

const (
	// ProcessingErrorFail stops Run with a UserError; nothing of the
	// batch is committed.
	ProcessingErrorFail ProcessingErrorPolicy = iota
	// ProcessingErrorDeadLetter discards the failing call's changes and
	// outputs and writes its key's rows to Config.DeadLetterTopic; a
	// failing timer is written as a record with the timer's key, no value,
	// the expiry as timestamp and header kstate.timer.expiry, and is
	// deleted (kept, it would fail in every batch).
	ProcessingErrorDeadLetter
)

// Headers kstate adds to a dead-letter record, after the original
// record's own headers. Values are UTF-8; numbers are decimal.
const (
	// HeaderStage is "decode" (undecodable or nil key), "partition" (key
	// hashes to another partition) or "process" (failing handler call).
	HeaderStage           = engine.HeaderStage
	HeaderError           = engine.HeaderError       // the error message
	HeaderApplication     = engine.HeaderApplication // Config.ApplicationID
	HeaderTime            = engine.HeaderTime        // batch processing time, ms since the epoch
	HeaderSourceTopic     = engine.HeaderSourceTopic
	HeaderSourcePartition = engine.HeaderSourcePartition
	HeaderSourceOffset    = engine.HeaderSourceOffset // absent for a timer
	HeaderTimerExpiry     = engine.HeaderTimerExpiry  // failing timers only
)

// Defaults of Config. The transaction and session timeouts are the Kafka
// session's own defaults, declared once in internal/kafka.
const (
	defaultTriggerInterval    = time.Second
	defaultMaxBatchRecords    = 5000
	defaultMaxBatchRecordsCap = 4 * defaultMaxBatchRecords // adaptive batches' cap
	defaultMaxBatchWait       = 200 * time.Millisecond
	defaultTransactionTimeout = kafka.DefaultTransactionTimeout
	defaultSessionTimeout     = kafka.DefaultSessionTimeout
	defaultShutdownTimeout    = 30 * time.Second
	defaultMaxBatchDuration   = 5 * time.Minute
	defaultStartupTimeout     = kafka.DefaultStartupTimeout
	defaultMaxRecordBytes     = kafka.DefaultMaxRecordBytes
	defaultMetadataRefresh    = 30 * time.Second
	minStateMemory            = 1 << 20
	minStateCacheBytes        = 64 << 10
	defaultStateCacheBytes    = 16 << 20
	// defaultStateWriteBehindBytes: see Config.StateWriteBehindBytes.
	defaultStateWriteBehindBytes = 4 << 20
)

// maxMaxRecordBytes keeps a produce request of one record under Kafka's
// default socket.request.max.bytes (100 MiB).
const maxMaxRecordBytes = 95 << 20

// withDefaults validates c (validate, config_validate.go) and fills in
// defaults.
func (c Config[K, I, O]) withDefaults() (Config[K, I, O], error) {
	if err := c.validate(); err != nil {
		return c, err
	}
	if c.DeadLetterTopic == "" {
		c.DeadLetterTopic = c.ApplicationID + "-dlq"
	}
	if c.TriggerInterval == 0 {
		c.TriggerInterval = defaultTriggerInterval
	}
	// MaxBatchRecords stays 0 (adaptive): see batchLimits.
	// Pipelines stays 0 (automatic): see App.pipelineCount.
	if c.StateCacheBytes == 0 {
		c.StateCacheBytes = defaultStateCacheBytes
	}
	if c.StateWriteBehindBytes == 0 {
		c.StateWriteBehindBytes = defaultStateWriteBehindBytes
	}
	if c.MaxBatchWait == 0 {
		c.MaxBatchWait = defaultMaxBatchWait
	}
	if c.TransactionTimeout == 0 {
		c.TransactionTimeout = defaultTransactionTimeout
	}
	if c.SessionTimeout == 0 {
		c.SessionTimeout = defaultSessionTimeout
	}
	if c.ShutdownTimeout == 0 {
		c.ShutdownTimeout = defaultShutdownTimeout
	}
	if c.MaxBatchDuration == 0 {
		c.MaxBatchDuration = defaultMaxBatchDuration
	}
	if c.StartupTimeout == 0 {
		c.StartupTimeout = defaultStartupTimeout
	}
	if c.MaxRecordBytes == 0 {
		c.MaxRecordBytes = defaultMaxRecordBytes
	}
	if c.MetadataRefresh == 0 {
		c.MetadataRefresh = defaultMetadataRefresh
	}
	if c.StateDir == "" {
		c.StateDir = filepath.Join(os.TempDir(), "kstate")
	}
	if abs, err := filepath.Abs(c.StateDir); err == nil {
		c.StateDir = abs
	}
	if c.Clock == nil {
		c.Clock = time.Now
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.InstanceID == "" {
		host, err := os.Hostname()
		if err != nil || kafka.CheckInstanceID(host+"-00000000") != nil {
			host = "kstate"
		}
		h := fnv.New32a()
		h.Write([]byte(c.StateDir))
		c.InstanceID = fmt.Sprintf("%s-%08x", host, h.Sum32())
	}
	if c.InitialState != nil {
		if err := c.InitialState.Check(c.NewProcessor()); err != nil {
			return c, fmt.Errorf("%w: %v", ErrConfig, err)
		}
	}
	return c, nil
}

// outputTopics returns the names of OutputTopics.
func (c *Config[K, I, O]) outputTopics() []string {
	out := make([]string, len(c.OutputTopics))
	for i, t := range c.OutputTopics {
		out[i] = t.Name()
	}
	return out
}

// outputTopicSet returns the names of OutputTopics as a set; nil if none.
func (c *Config[K, I, O]) outputTopicSet() map[string]bool {
	if len(c.OutputTopics) == 0 {
		return nil
	}
	m := make(map[string]bool, len(c.OutputTopics))
	for _, t := range c.OutputTopics {
		m[t.Name()] = true
	}
	return m
}

// deadLetters reports whether a policy writes to the dead-letter topic.
func (c *Config[K, I, O]) deadLetters() bool {
	return c.OnDecodeError == DecodeErrorDeadLetter || c.OnKeyPartitionMismatch == KeyPartitionDeadLetter ||
		c.OnProcessingError == ProcessingErrorDeadLetter
}

// policies maps the policies to the engine's.
func (c *Config[K, I, O]) policies() (decode, keyPart, processing engine.Policy) {
	decode = [...]engine.Policy{engine.PolicyFail, engine.PolicySkip, engine.PolicyDeadLetter}[c.OnDecodeError]
	keyPart = [...]engine.Policy{engine.PolicyAllow, engine.PolicyFail, engine.PolicyDeadLetter}[c.OnKeyPartitionMismatch]
	processing = [...]engine.Policy{engine.PolicyFail, engine.PolicyDeadLetter}[c.OnProcessingError]
	return
}

// batchLimits returns the engine's MaxBatchRecords and MaxBatchRecordsCap:
// MaxBatchRecords fixed when set, else adaptive batches from
// defaultMaxBatchRecords up to defaultMaxBatchRecordsCap. The cap is the
// largest size measured (issue #13: MaxBatchRecords 20000 moved a backlog
// 1.33× as fast as 5000); it bounds a batch's heap (polled records,
// staged changes, output) at 4× the fixed default's.
func (c *Config[K, I, O]) batchLimits() (base, cap int) {
	if c.MaxBatchRecords > 0 {
		return c.MaxBatchRecords, 0
	}
	return defaultMaxBatchRecords, defaultMaxBatchRecordsCap
}

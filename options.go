package kstate

import (
	"crypto/tls"
	"log/slog"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl"
)

// Options is how an application runs: its identity, the Kafka connection,
// the state store, batching, timeouts and observability. Only
// ApplicationID and Kafka.Brokers are required; every other zero value
// means the documented default, so a group left out entirely runs with
// its defaults. New validates it once, together with the Topology.
type Options struct {
	// ApplicationID (required) is the consumer group id, the prefix of the
	// changelog topic "<ApplicationID>-changelog" and of the transactional
	// id, and the state directory name: 1 to 237 letters, digits, '.', '_'
	// or '-' (Kafka's topic name rules for "<ApplicationID>-repartition"),
	// not "." or "..".
	ApplicationID string
	// InstanceID identifies this instance across restarts: it is the static
	// group member id and the suffix of the transactional id
	// "<ApplicationID>-<InstanceID>". It must be unique among running
	// instances and stable across restarts of one instance: a restarted
	// instance then fences its dead predecessor's open transaction at once
	// instead of waiting for Kafka.TransactionTimeout, and keeps its
	// partitions without a rebalance if it is back within the session
	// timeout. Default: "<hostname>-<8 hex digits of a hash of State.Dir>",
	// stable per host and state directory (two instances on one host need
	// two state directories anyway). Like ApplicationID, at most 249
	// characters.
	InstanceID string

	// Kafka is the connection to Kafka and its security, and the client
	// settings kstate passes to the brokers.
	Kafka KafkaOptions
	// State is the local state store and its memory.
	State StateOptions
	// Batching is the micro-batch loop: its trigger, its size and time
	// bounds, and how many pipelines run it.
	Batching BatchingOptions
	// Timeouts bound Run's start and its graceful shutdown.
	Timeouts TimeoutOptions
	// Observability is the HTTP server, the logger, the state-change
	// callback and the clock.
	Observability ObservabilityOptions
	// Group is how the instances of the application share its partitions:
	// standby replicas, warm-up before a partition moves, and the address
	// each instance advertises to the others.
	Group GroupOptions
}

// KafkaOptions is the Kafka connection and security of Options.Kafka.
type KafkaOptions struct {
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
	// ClientOptions are extra franz-go options applied to every Kafka
	// client kstate creates (group session, admin, changelog readers and
	// re-seed producers, initial-state readers), before kstate's own.
	// kstate always sets, and so overrides: the seed brokers, TLS and SASL
	// above (New rejects a kgo.Dialer here with TLS, and a kgo.SASL here
	// with SASL), and per client the consumer group, topics, instance id,
	// balancer, transactional id and timeout, session and heartbeat
	// timing, fetch isolation level and max wait, partitioner, linger,
	// batch and write size limits, metadata min age, group callbacks and
	// logger. Meant for client id, rack, timeouts, compression; New
	// rejects options that make a client a consumer or transactional
	// (ConsumerGroup, ConsumeTopics, TransactionalID...), since they would
	// apply to every client. Default none.
	ClientOptions []kgo.Opt
	// SessionTimeout is how long the group waits for a silent member
	// before it moves the member's partitions to the others. It bounds
	// failover after a crash (SIGKILL, a lost node) and after a graceful
	// stop that does not leave the group (LeaveGroupOnShutdown false), and
	// it is how long a restarted instance may take to come back and keep
	// its partitions without a rebalance (static membership, InstanceID).
	// Heartbeats go out every third of it, at most every 3s. It must lie
	// within the broker's group.min.session.timeout.ms and
	// group.max.session.timeout.ms (6s and 30m by default). Keep
	// TransactionTimeout at or below it: a crashed instance's open
	// transaction holds back the committed output of its partitions until
	// the broker aborts it, so a crash costs the longer of the two.
	// Default 10s, against Kafka's 45s: a crash pauses the instance's
	// partitions for about 10 s instead of 45 s; raise it when your
	// instances take longer than that to restart (docs/OPERATIONS.md,
	// "What bounds failover"; measured in docs/BENCHMARKS.md, "Failover
	// and the group protocol").
	SessionTimeout time.Duration
	// TransactionTimeout is how long the broker lets a transaction of a
	// dead instance stay open: 1s to 15m (Kafka's minimum, and the
	// broker's default transaction.max.timeout.ms). Default 10s.
	TransactionTimeout time.Duration
	// MaxRecordBytes bounds one produced record (output, and changelog
	// records of state): the size of a record batch holding only it,
	// uncompressed, as Kafka measures it against a topic's
	// max.message.bytes (key + value + at most ~80 bytes). A larger output
	// fails its call at Emit (ErrOutputTooLarge), a larger state value the
	// call that wrote it (ErrStateTooLarge): Topology.OnProcessingError
	// applies. Run checks at start that it does not exceed the
	// max.message.bytes of the output and changelog topics; a changelog
	// topic kstate creates gets a max.message.bytes to match. At least
	// 1024. Default 1048576 (1 MiB, Kafka's default max.request.size),
	// which fits Kafka's default max.message.bytes.
	MaxRecordBytes int
	// MetadataRefresh is how often Run re-reads the input topic's
	// partition count: a change stops Run with a *PartitionsChangedError
	// before anything is processed on the new layout (an assignment of an
	// unknown partition is checked at once). Default 30s.
	MetadataRefresh time.Duration
	// LeaveGroupOnShutdown makes a graceful shutdown (ctx cancelled, Run
	// returning nil) take this instance out of the consumer group at once.
	// Default false: the instance, a static member (Options.InstanceID),
	// stays in the group until SessionTimeout, so that a restart within it
	// (a rolling deploy, a pod rescheduled) gets its partitions back
	// without a rebalance; meanwhile they are not processed, and the group
	// is not empty: kafka-consumer-groups --delete and offset resets fail
	// with NON_EMPTY_GROUP. Set it for a final stop (scale-in,
	// decommission, before deleting or resetting the group): the
	// partitions move to the other instances at once, and once the last
	// instance has stopped the group can be deleted at once. A leave that
	// fails is logged at Warn; the member then stays until SessionTimeout.
	// Run stopping with an error never leaves the group. An instance
	// cannot tell a restart from a final stop, so choose per deployment:
	// keep it false where a stopped instance comes back with the same
	// InstanceID (a Kubernetes StatefulSet, a VM or systemd service: a
	// restart then pauses only its own partitions, for as long as it takes,
	// and moves nothing); set it where it never does (a Kubernetes
	// Deployment, whose new pods have new host names and so, by default,
	// new InstanceIDs: staying would pause each replaced pod's partitions
	// for SessionTimeout at every rollout) and for a scale-in
	// (docs/OPERATIONS.md, "What bounds failover").
	LeaveGroupOnShutdown bool
	// ReplicationFactor is the replication factor of the topics kstate
	// creates: the changelog, the repartition topic and the dead-letter
	// topic. Default 0: the broker's default.replication.factor. Give 3 for
	// a production cluster (with MinInsyncReplicas 2): a topic of one
	// replica stops the application when its broker goes down, and loses
	// its records with the broker's disk. Run fails at start, naming this
	// option, when a topic to create needs more replicas than the cluster
	// has live brokers. It is never applied to an existing topic: Run checks
	// each internal topic at start and logs at Warn, once, with the command
	// that fixes it, a replication factor below this one, or of 1 on a
	// cluster of three or more brokers (docs/OPERATIONS.md, "Internal
	// topics").
	ReplicationFactor int
	// MinInsyncReplicas is the min.insync.replicas of the topics kstate
	// creates (see ReplicationFactor): how many replicas must have a
	// write before the broker acknowledges it (kstate's producer always
	// writes with acks=all). Default 0: the broker's min.insync.replicas
	// (1 unless configured). Give 2 with ReplicationFactor 3: a write is
	// then on two brokers, and one broker may be down. At most
	// ReplicationFactor when both are set. It is never applied to an
	// existing topic: Run checks each internal topic at start and logs at
	// Warn, once, with the kafka-configs command that fixes it, a
	// min.insync.replicas below this option, or at or above a replication
	// factor above 1 (every replica must then be in sync: one broker down
	// stops every write).
	MinInsyncReplicas int
}

// StateOptions is the local state store and its memory, Options.State.
type StateOptions struct {
	// Dir holds the shards: <Dir>/<ApplicationID>/<partition>. Local state
	// is a cache of the changelog; losing it costs a full restore, never
	// data. Default: <os.TempDir()>/kstate.
	Dir string
	// Backend is the store of every shard: StateBackendRocksDB (RocksDB
	// through cgo, as the design names it) or StateBackendPebble (Pebble,
	// pure Go; Memory is then one block cache, from which Pebble also
	// reserves every shard's memtables, each a sixteenth of Memory at most
	// 32 MiB, and without Memory each shard has 16 MiB of cache beside its
	// 32 MiB memtables). A shard directory keeps the backend it was created
	// with: opening it with the other one fails at start with
	// state.ErrBackendMismatch. Default "" = rocksdb
	// (StateBackendRocksDB); in a build without cgo (CGO_ENABLED=0, or the
	// kstate_nocgo tag) RocksDB is not compiled in and the default is
	// pebble.
	Backend string
	// Memory, when positive, bounds in bytes the RocksDB memory of all of
	// Run's shards together: one block cache of Memory (data, index and
	// filter blocks) shared by every partition, with the shards' memtables
	// charged to it and held to half of it (a write waits for a flush when
	// they are full). At least 1 MiB. It does not bound the Go heap
	// (batches, staged state, Kafka client buffers); see
	// docs/OPERATIONS.md. Default 0 (off): every shard has its own 32 MiB
	// cache and 32 MiB memtables (two while one flushes), so memory grows with the
	// partitions; the shared budget is opt-in until it has been measured
	// on large states (docs/BENCHMARKS.md).
	Memory int64
	// CacheBytes bounds the committed-state cache of all of Run's shards
	// together: point reads of hot keys (ValueState, MapState entries) and
	// the reads of a hot key's small list, map or timers (up to 64 entries
	// each, kept whole) are answered from memory instead of the store. It
	// holds committed values only (a batch's own writes are read from its
	// staging layer), is filled on reads and updated on commit, and a
	// shard's entries are dropped on revoke and restore. Its entries are
	// bytes, not Go objects, in memory mapped outside the Go heap (the
	// garbage collector neither scans nor counts it; only the pages in use
	// are resident) and outside Memory. At least 64 KiB when positive;
	// negative turns the cache off. Default 64 MiB (when 0; measured in
	// docs/BENCHMARKS.md, "Group entries of the committed-state cache": it
	// saves store reads on repeated keys, and costs little on keys read
	// once).
	CacheBytes int64
	// WriteBehindBytes bounds, per partition, the committed batches a
	// shard keeps in memory instead of writing each to the store at its
	// local commit (write-behind: one entry per key, a later batch's write
	// replacing the earlier one; written in one store write when over this
	// bound or 256Ki changelog records, and on revoke and shutdown). Kafka
	// holds every committed batch, so a crash loses nothing: the restore
	// replays the changelog from the last write (docs/OPERATIONS.md,
	// "Memory"). Negative: write-through, every local commit writes the
	// store. Default 4 MiB (when 0; measured in
	// docs/benchmarks/history.md, "Write-behind local commits"). The
	// layers of all of Run's shards together are also held to 64 MiB
	// (16 partitions at 4 MiB): with more open shards each gets an even
	// share, at least 256 KiB, so that memory does not grow by 4 MiB per
	// partition (docs/OPERATIONS.md, "Memory").
	WriteBehindBytes int64
	// MaxVariableSetVersions bounds how many times the set of state
	// variables may change over the application's life, like Spark's
	// spark.sql.streaming.stateStore.stateSchemaFilesThreshold: the first
	// start that declares variables makes version 1, and each later start
	// whose Init declares a new variable or drops one (DeleteIfExists) the
	// next, however many it adds or drops. A start past the bound fails in
	// Init with state.ErrTooManyVariableSetVersions, writing nothing.
	// (Each variable's own schema versions are bounded apart:
	// state.WithMaxSchemaVersions.) Default 128
	// (state.DefaultMaxVariableSetVersions, when 0); negative: no bound.
	MaxVariableSetVersions int
}

// BatchingOptions is the micro-batch loop, Options.Batching.
type BatchingOptions struct {
	// TriggerInterval (ProcessingTime mode): a batch runs at least this
	// often, measured on Observability.Clock, even without input, so that
	// timers fire and TTL is enforced. Default 1s.
	TriggerInterval time.Duration
	// MaxRecords, when set, bounds the records of one micro-batch, fixed.
	// Default adaptive 5000–20000: batches start at 5000 records, double
	// while polls come back full (a backlog) and batches take under 1s (or
	// MaxDuration/4), up to 20000, and halve back to 5000 once caught up
	// (a poll of less than half the limit), so a backlog moves in large
	// batches and a caught-up application keeps small ones. A batch whose
	// changelog weighs more than 12 MiB (key and value bytes plus 160 bytes
	// a record) halves the limit and one over 6 MiB does not double it, so
	// a processor writing many state entries per row keeps small batches
	// (docs/OPERATIONS.md, "Batch size").
	MaxRecords int
	// MaxWait bounds how long a poll waits for records. Default 200ms.
	MaxWait time.Duration
	// MaxDuration bounds the processor calls of one micro-batch
	// (HandleInputRows, HandleExpiredTimer, HandleInitialState and the
	// engine work between them). A batch still running after a tenth of
	// it (at most 10s) is logged at Warn, and again at that interval,
	// naming the partition, the method and the key, with the stuck
	// goroutine's stack once. Past MaxDuration the instance gives its
	// partitions up: nothing of the batch is committed, and Run returns a
	// StuckError so that another instance (or a restart) takes over. The
	// stuck call itself cannot be stopped; its goroutine is left behind.
	// Default 5m, Kafka's max.poll.interval.ms: a consumer that has not
	// come back for its next records in that long is presumed dead.
	MaxDuration time.Duration
	// Pipelines is the number of independent pipelines Run runs in this
	// instance, like Kafka Streams' num.stream.threads: each is its own
	// member of the consumer group, with its own transactional producer
	// and its own share of the input partitions, and runs its own batch
	// loop, so one pipeline's commit overlaps another's processing. They
	// share the state directory and memory, the initial state, the HTTP
	// handler and the metrics. Pipeline 0 uses Options.InstanceID;
	// pipeline i > 0 uses "<InstanceID>-p<i>" (static member and
	// transactional id suffix). More pipelines than input partitions are
	// not started. 1 runs one pipeline, the batch loop strictly in
	// sequence. With several, the Sinks' WriteBatch is called
	// concurrently, one call per pipeline at most. Default 0: automatic,
	// one pipeline per core the Go runtime uses (GOMAXPROCS), at most 4
	// and at most the input's partitions, and one with Sinks
	// (docs/OPERATIONS.md, "Pipelines").
	Pipelines int
}

// TimeoutOptions bounds Run's start and shutdown, Options.Timeouts.
type TimeoutOptions struct {
	// Startup is how long Run keeps retrying, with backoff, while the
	// brokers are unreachable at start (a pod started before Kafka): the
	// topic checks and the group's first transactional request. Each retry
	// is logged at Warn. Default 60s.
	Startup time.Duration
	// Shutdown bounds the graceful shutdown after ctx is cancelled: the
	// batch in flight gets this long to commit before it is abandoned (and
	// aborted by the broker). Default 30s.
	Shutdown time.Duration
}

// ObservabilityOptions is how an application is watched and timed,
// Options.Observability.
type ObservabilityOptions struct {
	// HTTPAddr, when set, makes Run serve App.Handler (/healthz, /readyz,
	// /status, /metrics) on this address (e.g. ":8080") for as long as it
	// runs; Run fails at once if it cannot listen. Default "": no server
	// (mount App.Handler yourself). It never serves the live state queries
	// (App.QueryHandler: mount it yourself, behind your authentication).
	HTTPAddr string
	// Logger receives operational messages as structured records with the
	// attributes app, partition and batch where they apply: assignments and
	// restores at Info, aborted batches and recoveries at Warn, failures at
	// Error; the Kafka client's own messages are bridged at Warn and above
	// only. Default slog.Default().
	Logger *slog.Logger
	// OnStateChange is called with every change of the App's State (see
	// State), in order, on one goroutine of Run's: never concurrently, never
	// under the engine's locks, and not on the processing loop (a slow
	// listener delays later calls, not processing). Run returns after the
	// call of its final change (to Stopped or Failed). Default: none.
	OnStateChange func(old, new State)
	// Clock gives the batch processing time. Default time.Now. Tests inject
	// a fake clock to drive timers and TTL without sleeping.
	Clock func() time.Time
}

// GroupOptions is how the instances share the partitions, Options.Group.
type GroupOptions struct {
	// Standbys is how many other instances keep a standby copy of each
	// partition's state, current by reading its changelog in the
	// background: on failover the new owner restores only the tail.
	// Default 0 (no standbys), like Kafka Streams' num.standby.replicas.
	Standbys int
	// AcceptableLag is how many changelog records a copy of a partition's
	// state may be behind for the group to move the partition to it: a
	// partition never moves to an instance that would have to restore more,
	// while a copy within it exists; a joining instance first warms up a
	// copy and takes the partition over once it is within AcceptableLag.
	// Default 10,000.
	AcceptableLag int64
	// ProbingInterval is how often the group rebalances while a warm-up
	// copy catches up, to move the partitions whose copies are within
	// AcceptableLag. Default 1m.
	ProbingInterval time.Duration
	// StandbyCleanupDelay is how long a shard no longer assigned to this
	// instance, active or standby, stays on its disk before it is deleted
	// (it may be assigned back). Default 10m.
	StandbyCleanupDelay time.Duration
	// AdvertisedURL is this instance's address for live queries as the
	// other instances reach it (e.g. "http://pod-0.app:8080"), Kafka
	// Streams' application.server: it is sent to the group, so that
	// KeyOwner and a live query sent to the wrong instance name (or
	// forward to) the owner. Default "": not advertised.
	AdvertisedURL string
}

// newConfig flattens t and o into the config every internal path reads.
// It is the one place that knows both shapes.
func newConfig[K, I, O any](t Topology[K, I, O], o Options) config[K, I, O] {
	return config[K, I, O]{
		ApplicationID: o.ApplicationID,
		InstanceID:    o.InstanceID,

		Brokers:              o.Kafka.Brokers,
		TLS:                  o.Kafka.TLS,
		SASL:                 o.Kafka.SASL,
		KafkaOptions:         o.Kafka.ClientOptions,
		SessionTimeout:       o.Kafka.SessionTimeout,
		TransactionTimeout:   o.Kafka.TransactionTimeout,
		MaxRecordBytes:       o.Kafka.MaxRecordBytes,
		MetadataRefresh:      o.Kafka.MetadataRefresh,
		LeaveGroupOnShutdown: o.Kafka.LeaveGroupOnShutdown,
		ReplicationFactor:    o.Kafka.ReplicationFactor,
		MinInsyncReplicas:    o.Kafka.MinInsyncReplicas,

		StateDir:                    o.State.Dir,
		StateBackend:                o.State.Backend,
		StateMemory:                 o.State.Memory,
		StateCacheBytes:             o.State.CacheBytes,
		StateWriteBehindBytes:       o.State.WriteBehindBytes,
		MaxStateVariableSetVersions: o.State.MaxVariableSetVersions,

		TriggerInterval:  o.Batching.TriggerInterval,
		MaxBatchRecords:  o.Batching.MaxRecords,
		MaxBatchWait:     o.Batching.MaxWait,
		MaxBatchDuration: o.Batching.MaxDuration,
		Pipelines:        o.Batching.Pipelines,

		StartupTimeout:  o.Timeouts.Startup,
		ShutdownTimeout: o.Timeouts.Shutdown,

		HTTPAddr:      o.Observability.HTTPAddr,
		Logger:        o.Observability.Logger,
		OnStateChange: o.Observability.OnStateChange,
		Clock:         o.Observability.Clock,

		Standbys:            o.Group.Standbys,
		AcceptableLag:       o.Group.AcceptableLag,
		ProbingInterval:     o.Group.ProbingInterval,
		StandbyCleanupDelay: o.Group.StandbyCleanupDelay,
		AdvertisedURL:       o.Group.AdvertisedURL,

		Inputs:          t.Inputs,
		KeySerde:        t.KeySerde,
		GroupBy:         t.GroupBy,
		NewProcessor:    t.NewProcessor,
		TimeMode:        t.TimeMode,
		EventTime:       t.EventTime,
		AllowedLateness: t.AllowedLateness,
		OutputMode:      t.OutputMode,

		OutputTopic:     t.Output.Topic,
		OutputSerde:     t.Output.Serde,
		OutputKey:       t.Output.Key,
		OutputEventTime: t.Output.EventTime,
		Sinks:           t.Output.Sinks,
		OutputTopics:    t.Output.EmitTo,

		InitialState: t.InitialState,

		OnDecodeError:          t.OnDecodeError,
		OnKeyPartitionMismatch: t.OnKeyPartitionMismatch,
		OnProcessingError:      t.OnProcessingError,
		DeadLetterTopic:        t.DeadLetterTopic,
	}
}

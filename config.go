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

// config is the flat configuration every internal path reads: the
// Topology and the Options of New, flattened by newConfig (options.go),
// with defaults filled in by withDefaults. Each field is documented where
// the user sets it: the comment names that field.
type config[K, I, O any] struct {
	ApplicationID string         // Options.ApplicationID
	Brokers       []string       // Options.Kafka.Brokers
	TLS           *tls.Config    // Options.Kafka.TLS
	SASL          sasl.Mechanism // Options.Kafka.SASL
	KafkaOptions  []kgo.Opt      // Options.Kafka.ClientOptions
	InstanceID    string         // Options.InstanceID

	// InputTopics, ValueSerde and ValueFromRecord are never set: the
	// inputs are Inputs (Topology.Inputs, whose short forms are Topics
	// and TopicsFromRecord).
	InputTopics            []string
	Inputs                 []Input[I]                            // Topology.Inputs
	GroupBy                []GroupBy[K, I]                       // Topology.GroupBy
	KeySerde               serde.Serde[K]                        // Topology.KeySerde
	ValueSerde             serde.Deserializer[I]                 // never set
	ValueFromRecord        func(rec processor.Record) (I, error) // never set
	OnDecodeError          DecodeErrorPolicy                     // Topology.OnDecodeError
	OnKeyPartitionMismatch KeyPartitionPolicy                    // Topology.OnKeyPartitionMismatch
	OnProcessingError      ProcessingErrorPolicy                 // Topology.OnProcessingError
	DeadLetterTopic        string                                // Topology.DeadLetterTopic

	NewProcessor func() processor.StatefulProcessor[K, I, O] // Topology.NewProcessor
	TimeMode     processor.TimeMode                          // Topology.TimeMode
	OutputMode   processor.OutputMode                        // Topology.OutputMode

	EventTime       func(value I, recordTimestampMs int64) int64 // Topology.EventTime
	AllowedLateness time.Duration                                // Topology.AllowedLateness

	OutputTopic     string                    // Topology.Output.Topic
	OutputSerde     serde.Serializer[O]       // Topology.Output.Serde
	OutputTopics    []processor.NamedTopic    // Topology.Output.EmitTo
	OutputKey       func(key K, out O) []byte // Topology.Output.Key
	OutputEventTime func(out O) int64         // Topology.Output.EventTime
	Sinks           []Sink[K, O]              // Topology.Output.Sinks

	InitialState InitialState[K] // Topology.InitialState

	TriggerInterval time.Duration // Options.Batching.TriggerInterval
	MaxBatchRecords int           // Options.Batching.MaxRecords
	MaxBatchWait    time.Duration // Options.Batching.MaxWait

	StateDir                    string           // Options.State.Dir
	StateMemory                 int64            // Options.State.Memory
	StateCacheBytes             int64            // Options.State.CacheBytes
	StateWriteBehindBytes       int64            // Options.State.WriteBehindBytes
	MaxStateVariableSetVersions int              // Options.State.MaxVariableSetVersions
	StateBackend                string           // Options.State.Backend
	Pipelines                   int              // Options.Batching.Pipelines
	Clock                       func() time.Time // Options.Observability.Clock

	TransactionTimeout   time.Duration        // Options.Kafka.TransactionTimeout
	SessionTimeout       time.Duration        // Options.Kafka.SessionTimeout
	StartupTimeout       time.Duration        // Options.Timeouts.Startup
	MaxRecordBytes       int                  // Options.Kafka.MaxRecordBytes
	ShutdownTimeout      time.Duration        // Options.Timeouts.Shutdown
	LeaveGroupOnShutdown bool                 // Options.Kafka.LeaveGroupOnShutdown
	ReplicationFactor    int                  // Options.Kafka.ReplicationFactor
	MinInsyncReplicas    int                  // Options.Kafka.MinInsyncReplicas
	MaxBatchDuration     time.Duration        // Options.Batching.MaxDuration
	MetadataRefresh      time.Duration        // Options.Kafka.MetadataRefresh
	OnStateChange        func(old, new State) // Options.Observability.OnStateChange
	HTTPAddr             string               // Options.Observability.HTTPAddr
	Logger               *slog.Logger         // Options.Observability.Logger

	Standbys            int           // Options.Group.Standbys
	AcceptableLag       int64         // Options.Group.AcceptableLag
	ProbingInterval     time.Duration // Options.Group.ProbingInterval
	StandbyCleanupDelay time.Duration // Options.Group.StandbyCleanupDelay
	AdvertisedURL       string        // Options.Group.AdvertisedURL
}

// Values of Options.State.Backend.
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
	// DecodeErrorDeadLetter writes the record to Topology.DeadLetterTopic
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
	// KeyPartitionDeadLetter writes it to Topology.DeadLetterTopic.
	KeyPartitionDeadLetter
)

// ProcessingErrorPolicy says what a failing handler call does.
type ProcessingErrorPolicy int

const (
	// ProcessingErrorFail stops Run with a UserError; nothing of the
	// batch is committed.
	ProcessingErrorFail ProcessingErrorPolicy = iota
	// ProcessingErrorDeadLetter discards the failing call's changes and
	// outputs and writes its key's rows to Topology.DeadLetterTopic; a
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
	HeaderApplication     = engine.HeaderApplication // Options.ApplicationID
	HeaderTime            = engine.HeaderTime        // batch processing time, ms since the epoch
	HeaderSourceTopic     = engine.HeaderSourceTopic
	HeaderSourcePartition = engine.HeaderSourcePartition
	HeaderSourceOffset    = engine.HeaderSourceOffset // absent for a timer
	HeaderTimerExpiry     = engine.HeaderTimerExpiry  // failing timers only
)

// Defaults of Options. The transaction and session timeouts are the Kafka
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
	defaultStateCacheBytes    = 64 << 20
	// defaultStateWriteBehindBytes: see Options.State.WriteBehindBytes.
	defaultStateWriteBehindBytes = 4 << 20
	// Options.Group's (Standbys defaults to 0: no standbys).
	defaultAcceptableLag       = 10_000
	defaultProbingInterval     = time.Minute
	defaultStandbyCleanupDelay = 10 * time.Minute
)

// maxMaxRecordBytes keeps a produce request of one record under Kafka's
// default socket.request.max.bytes (100 MiB).
const maxMaxRecordBytes = 95 << 20

// withDefaults validates c (validate, config_validate.go) and fills in
// defaults.
func (c config[K, I, O]) withDefaults() (config[K, I, O], error) {
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
	if c.AcceptableLag == 0 {
		c.AcceptableLag = defaultAcceptableLag
	}
	if c.ProbingInterval == 0 {
		c.ProbingInterval = defaultProbingInterval
	}
	if c.StandbyCleanupDelay == 0 {
		c.StandbyCleanupDelay = defaultStandbyCleanupDelay
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
func (c *config[K, I, O]) outputTopics() []string {
	out := make([]string, len(c.OutputTopics))
	for i, t := range c.OutputTopics {
		out[i] = t.Name()
	}
	return out
}

// outputTopicSet returns the names of OutputTopics as a set; nil if none.
func (c *config[K, I, O]) outputTopicSet() map[string]bool {
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
func (c *config[K, I, O]) deadLetters() bool {
	return c.OnDecodeError == DecodeErrorDeadLetter || c.OnKeyPartitionMismatch == KeyPartitionDeadLetter ||
		c.OnProcessingError == ProcessingErrorDeadLetter
}

// policies maps the policies to the engine's.
func (c *config[K, I, O]) policies() (decode, keyPart, processing engine.Policy) {
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
func (c *config[K, I, O]) batchLimits() (base, cap int) {
	if c.MaxBatchRecords > 0 {
		return c.MaxBatchRecords, 0
	}
	return defaultMaxBatchRecords, defaultMaxBatchRecordsCap
}

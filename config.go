package kstate

import (
	"fmt"
	"hash/fnv"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"time"

	"github.com/kstate/kstate/internal/kafka"
	"github.com/kstate/kstate/processor"
	"github.com/kstate/kstate/serde"
)

// Config configures an App. K is the grouping key, I the input value and O
// the output value type. Required fields are marked; every other zero value
// means the documented default. New validates the whole Config once.
type Config[K, I, O any] struct {
	// ApplicationID (required) is the consumer group id, the prefix of the
	// changelog topic "<ApplicationID>-changelog" and of the transactional
	// id, and the state directory name. Letters, digits, '.', '_', '-'.
	ApplicationID string
	// Brokers (required) are the bootstrap addresses.
	Brokers []string
	// InstanceID identifies this instance across restarts: it is the static
	// group member id and the suffix of the transactional id
	// "<ApplicationID>-<InstanceID>". It must be unique among running
	// instances and stable across restarts of one instance: a restarted
	// instance then fences its dead predecessor's open transaction at once
	// instead of waiting for TransactionTimeout, and keeps its partitions
	// without a rebalance if it is back within the session timeout.
	// Default: "<hostname>-<8 hex digits of a hash of StateDir>", stable per
	// host and state directory (two instances on one host need two
	// StateDirs anyway).
	InstanceID string

	// InputTopics (required) holds exactly one input topic for now; its
	// records' keys are the grouping keys. If InitialState is used, the
	// topic must be partitioned by Kafka's default partitioner (murmur2 of
	// the key bytes), as every standard Kafka producer does.
	InputTopics []string
	// KeySerde (required) decodes record keys into grouping keys. Encoding
	// a decoded key must give back the record's key bytes (state is stored
	// under the key bytes).
	KeySerde serde.Serde[K]
	// ValueSerde (required) decodes record values.
	ValueSerde serde.Deserializer[I]
	// OnDecodeError says what an undecodable record does. Default
	// DecodeErrorFail: Run stops with a DecodeError naming topic, partition
	// and offset; nothing from that batch on is committed.
	OnDecodeError DecodeErrorPolicy

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

	// OutputTopic (required) receives the emitted rows. It must exist.
	OutputTopic string
	// OutputSerde (required) encodes emitted rows.
	OutputSerde serde.Serializer[O]
	// OutputKey gives an output record's key. Default: the grouping key's
	// bytes. Output records are partitioned by murmur2 of their key.
	OutputKey func(key K, out O) []byte
	// OutputEventTime gives an emitted row's event time in ms; it becomes
	// the output record's timestamp (so a downstream kstate application
	// keeps event time), and in EventTime mode a row older than the
	// watermark is an error. Default: none (the producer's clock).
	OutputEventTime func(out O) int64

	// InitialState is applied through the processor's HandleInitialState
	// on the application's first run (see InitialStateFromSeq,
	// InitialStateFromTopic). Default: none.
	InitialState InitialState[K]

	// TriggerInterval (ProcessingTime mode): a batch runs at least this
	// often, measured on Clock, even without input, so that timers fire and
	// TTL is enforced. Default 1s.
	TriggerInterval time.Duration
	// MaxBatchRecords bounds the records of one micro-batch. Default 5000.
	MaxBatchRecords int
	// MaxBatchWait bounds how long a poll waits for records. Default 200ms.
	MaxBatchWait time.Duration

	// StateDir holds the shards: <StateDir>/<ApplicationID>/<partition>.
	// Local state is a cache of the changelog; losing it costs a full
	// restore, never data. Default: <os.TempDir()>/kstate.
	StateDir string
	// Clock gives the batch processing time. Default time.Now. Tests inject
	// a fake clock to drive timers and TTL without sleeping.
	Clock func() time.Time

	// TransactionTimeout is how long the broker lets a transaction of a
	// dead instance stay open. Default 10s.
	TransactionTimeout time.Duration
	// SessionTimeout is how long the group waits for a silent member.
	// Default 10s.
	SessionTimeout time.Duration
	// ShutdownTimeout bounds the graceful shutdown after ctx is cancelled:
	// the batch in flight gets this long to commit before it is abandoned
	// (and aborted by the broker). Default 30s.
	ShutdownTimeout time.Duration
	// MetadataRefresh is how often Run re-reads the input topic's
	// partition count: a change stops Run with a *PartitionsChangedError
	// before anything is processed on the new layout (an assignment of an
	// unknown partition is checked at once). Default 30s.
	MetadataRefresh time.Duration
	// Logger receives operational messages as structured records with the
	// attributes app, partition and batch where they apply: assignments and
	// restores at Info, aborted batches and recoveries at Warn, failures at
	// Error; the Kafka client's own messages are bridged at Warn and above
	// only. Default slog.Default().
	Logger *slog.Logger
}

// DecodeErrorPolicy says what an undecodable input record does.
type DecodeErrorPolicy int

const (
	// DecodeErrorFail stops Run with a DecodeError; nothing from the
	// failing batch on is committed. (A dead-letter topic policy comes
	// later.)
	DecodeErrorFail DecodeErrorPolicy = iota
)

// Defaults of Config. The transaction and session timeouts are the Kafka
// session's own defaults, declared once in internal/kafka.
const (
	defaultTriggerInterval    = time.Second
	defaultMaxBatchRecords    = 5000
	defaultMaxBatchWait       = 200 * time.Millisecond
	defaultTransactionTimeout = kafka.DefaultTransactionTimeout
	defaultSessionTimeout     = kafka.DefaultSessionTimeout
	defaultShutdownTimeout    = 30 * time.Second
	defaultMetadataRefresh    = 30 * time.Second
)

var validID = regexp.MustCompile(`^[a-zA-Z0-9._-]+$`)

// withDefaults validates c and fills in defaults.
func (c Config[K, I, O]) withDefaults() (Config[K, I, O], error) {
	bad := func(format string, args ...any) (Config[K, I, O], error) {
		return c, fmt.Errorf("%w: %s", ErrConfig, fmt.Sprintf(format, args...))
	}
	switch {
	case !validID.MatchString(c.ApplicationID):
		return bad("ApplicationID %q: want letters, digits, '.', '_' or '-'", c.ApplicationID)
	case len(c.Brokers) == 0:
		return bad("Brokers is empty")
	case len(c.InputTopics) != 1 || c.InputTopics[0] == "":
		return bad("InputTopics %q: exactly one input topic is supported", c.InputTopics)
	case c.KeySerde == nil || c.ValueSerde == nil:
		return bad("KeySerde and ValueSerde are required")
	case c.NewProcessor == nil:
		return bad("NewProcessor is required")
	case c.OutputTopic == "" || c.OutputSerde == nil:
		return bad("OutputTopic and OutputSerde are required")
	case !c.TimeMode.Valid():
		return bad("unknown TimeMode %v", c.TimeMode)
	case !c.OutputMode.Valid():
		return bad("unknown OutputMode %v", c.OutputMode)
	case c.OnDecodeError != DecodeErrorFail:
		return bad("unknown OnDecodeError %d", c.OnDecodeError)
	case c.TimeMode != processor.EventTime && (c.EventTime != nil || c.AllowedLateness != 0):
		return bad("EventTime and AllowedLateness need TimeMode EventTime (have %v)", c.TimeMode)
	case c.AllowedLateness < 0:
		return bad("AllowedLateness %v is negative", c.AllowedLateness)
	case c.TriggerInterval < 0 || c.MaxBatchRecords < 0 || c.MaxBatchWait < 0 ||
		c.TransactionTimeout < 0 || c.SessionTimeout < 0 || c.ShutdownTimeout < 0 || c.MetadataRefresh < 0:
		return bad("durations and MaxBatchRecords must not be negative")
	case c.InstanceID != "" && !validID.MatchString(c.InstanceID):
		return bad("InstanceID %q: want letters, digits, '.', '_' or '-'", c.InstanceID)
	}
	if c.TriggerInterval == 0 {
		c.TriggerInterval = defaultTriggerInterval
	}
	if c.MaxBatchRecords == 0 {
		c.MaxBatchRecords = defaultMaxBatchRecords
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
		if err != nil || !validID.MatchString(host) {
			host = "kstate"
		}
		h := fnv.New32a()
		h.Write([]byte(c.StateDir))
		c.InstanceID = fmt.Sprintf("%s-%08x", host, h.Sum32())
	}
	if c.InitialState != nil {
		if err := c.InitialState.Check(c.NewProcessor()); err != nil {
			return bad("%v", err)
		}
	}
	return c, nil
}

package kstate

import (
	"fmt"
	"net"
	"time"

	"github.com/kstate/kstate/internal/kafka"
	"github.com/kstate/kstate/internal/kv"
	"github.com/kstate/kstate/processor"
)

// Bounds of Config fields that Kafka or the engine impose.
const (
	// minTransactionTimeout and maxTransactionTimeout: the broker refuses
	// a transaction.timeout.ms under 1000 and (INVALID_TRANSACTION_TIMEOUT)
	// over its transaction.max.timeout.ms, 900000 by default.
	minTransactionTimeout = time.Second
	maxTransactionTimeout = 15 * time.Minute
	// minMaxRecordBytes: a record batch's own overhead is ~70 bytes and
	// kstate's changelog metadata records (input offsets, batch ids)
	// must fit; franz-go refuses batch limits under 512 bytes.
	minMaxRecordBytes = 1 << 10
	// minMsDuration: durations sent to Kafka in milliseconds, and the
	// trigger interval, must be at least a millisecond.
	minMsDuration = time.Millisecond
)

// validate checks every field of c (before defaults: zero means the
// default). Each message names its field as Config.X.
func (c *Config[K, I, O]) validate() error {
	if msg := c.check(); msg != "" {
		return fmt.Errorf("%w: %s", ErrConfig, msg)
	}
	return nil
}

// check is validate's message; "" when valid.
func (c *Config[K, I, O]) check() string {
	if err := kafka.CheckApplicationID(c.ApplicationID); err != nil {
		return fmt.Sprintf("Config.ApplicationID %q: %v", c.ApplicationID, err)
	}
	if c.InstanceID != "" {
		if err := kafka.CheckInstanceID(c.InstanceID); err != nil {
			return fmt.Sprintf("Config.InstanceID %q: %v", c.InstanceID, err)
		}
	}
	if len(c.Brokers) == 0 {
		return "Config.Brokers is empty: give the bootstrap addresses (\"host:port\")"
	}
	for i, b := range c.Brokers {
		if err := kafka.CheckBroker(b); err != nil {
			return fmt.Sprintf("Config.Brokers[%d] %q: %v", i, b, err)
		}
	}
	if msg := c.checkInputs(); msg != "" {
		return msg
	}
	if msg := c.checkGroupBy(); msg != "" {
		return msg
	}
	switch {
	case c.KeySerde == nil:
		return "Config.KeySerde is required"
	case c.NewProcessor == nil:
		return "Config.NewProcessor is required"
	case c.OutputTopic == "" && len(c.Sinks) == 0:
		return "Config.OutputTopic is required unless Sinks is set"
	case c.OutputTopic != "" && c.OutputSerde == nil:
		return "Config.OutputSerde is required with OutputTopic"
	case !c.TimeMode.Valid():
		return fmt.Sprintf("Config.TimeMode: unknown %v: use processor.NoTime, ProcessingTime or EventTime", c.TimeMode)
	case !c.OutputMode.Valid():
		return fmt.Sprintf("Config.OutputMode: unknown %v: use processor.Append or Update", c.OutputMode)
	case c.OnDecodeError < DecodeErrorFail || c.OnDecodeError > DecodeErrorDeadLetter:
		return fmt.Sprintf("Config.OnDecodeError: unknown policy %d", c.OnDecodeError)
	case c.OnKeyPartitionMismatch < KeyPartitionAllow || c.OnKeyPartitionMismatch > KeyPartitionDeadLetter:
		return fmt.Sprintf("Config.OnKeyPartitionMismatch: unknown policy %d", c.OnKeyPartitionMismatch)
	case c.OnProcessingError < ProcessingErrorFail || c.OnProcessingError > ProcessingErrorDeadLetter:
		return fmt.Sprintf("Config.OnProcessingError: unknown policy %d", c.OnProcessingError)
	case c.TimeMode != processor.EventTime && (c.EventTime != nil || c.AllowedLateness != 0):
		return fmt.Sprintf("Config.EventTime and AllowedLateness need TimeMode EventTime (have %v)", c.TimeMode)
	case c.AllowedLateness < 0:
		return fmt.Sprintf("Config.AllowedLateness %v is negative", c.AllowedLateness)
	}
	if msg := c.checkOutputs(); msg != "" {
		return msg
	}
	if msg := c.checkTopicRoles(); msg != "" {
		return msg
	}
	if msg := c.checkNumbers(); msg != "" {
		return msg
	}
	if c.StateBackend != "" {
		if err := kv.Backend(c.StateBackend).Check(); err != nil {
			return fmt.Sprintf("Config.StateBackend: %v", err)
		}
	}
	if c.HTTPAddr != "" {
		if _, _, err := net.SplitHostPort(c.HTTPAddr); err != nil {
			return fmt.Sprintf("Config.HTTPAddr %q: want \"host:port\" or \":port\": %v", c.HTTPAddr, err)
		}
	}
	if len(c.KafkaOptions) > 0 || c.TLS != nil || c.SASL != nil {
		if err := c.clientConfig().Check(); err != nil {
			return fmt.Sprintf("Config.KafkaOptions, TLS, SASL: %v", err)
		}
	}
	return ""
}

// checkOutputs validates the names of OutputTopic, OutputTopics and
// DeadLetterTopic, and Sinks.
func (c *Config[K, I, O]) checkOutputs() string {
	if c.OutputTopic != "" {
		if err := kafka.CheckTopic(c.OutputTopic); err != nil {
			return fmt.Sprintf("Config.OutputTopic %q: %v", c.OutputTopic, err)
		}
	}
	if c.DeadLetterTopic != "" {
		if err := kafka.CheckTopic(c.DeadLetterTopic); err != nil {
			return fmt.Sprintf("Config.DeadLetterTopic %q: %v", c.DeadLetterTopic, err)
		}
	}
	seen := map[string]bool{}
	for i, t := range c.OutputTopics {
		if t == nil {
			return fmt.Sprintf("Config.OutputTopics[%d] is nil", i)
		}
		if err := kafka.CheckTopic(t.Name()); err != nil {
			return fmt.Sprintf("Config.OutputTopics[%d] %q: %v", i, t.Name(), err)
		}
		if seen[t.Name()] {
			return fmt.Sprintf("Config.OutputTopics[%d]: %q is declared twice", i, t.Name())
		}
		seen[t.Name()] = true
	}
	for i, s := range c.Sinks {
		if s == nil {
			return fmt.Sprintf("Config.Sinks[%d] is nil", i)
		}
	}
	return ""
}

// topicRole is a topic the application reads, writes or owns, with the
// field (or rule) that names it.
type topicRole struct {
	field string
	name  string
	// exclusive: the topic may not serve any other role (read by the
	// application, or owned by it); outputs and the dead-letter topic may
	// share a topic with each other.
	exclusive bool
}

// checkTopicRoles refuses a topic in two roles where one of them is read
// or owned by the application: an output or dead-letter topic that is
// also an input would feed the application its own records (one poison
// record dead-lettered into the input is read again forever), and one
// that is the changelog or the repartition topic would corrupt it.
func (c *Config[K, I, O]) checkTopicRoles() string {
	var roles []topicRole
	for i, in := range c.inputList() {
		f := fmt.Sprintf("Config.InputTopics[%d]", i)
		if len(c.Inputs) > 0 {
			f = fmt.Sprintf("Config.Inputs[%d].Topic", i)
		}
		roles = append(roles, topicRole{f, in.Topic, true})
	}
	roles = append(roles, topicRole{"the changelog topic (Config.ApplicationID + \"-changelog\")", c.ApplicationID + "-changelog", true})
	if len(c.GroupBy) > 0 {
		roles = append(roles, topicRole{"the GroupBy repartition topic (Config.ApplicationID + \"-repartition\")", c.repartitionTopic(), true})
	}
	if c.OutputTopic != "" {
		roles = append(roles, topicRole{"Config.OutputTopic", c.OutputTopic, false})
	}
	for i, t := range c.OutputTopics {
		roles = append(roles, topicRole{fmt.Sprintf("Config.OutputTopics[%d]", i), t.Name(), false})
	}
	switch {
	case c.DeadLetterTopic != "":
		roles = append(roles, topicRole{"Config.DeadLetterTopic", c.DeadLetterTopic, false})
	case c.deadLetters():
		roles = append(roles, topicRole{"the dead-letter topic (Config.DeadLetterTopic's default, Config.ApplicationID + \"-dlq\")", c.ApplicationID + "-dlq", false})
	}
	for i, a := range roles {
		for _, b := range roles[i+1:] {
			if a.name == b.name && (a.exclusive || b.exclusive) {
				return fmt.Sprintf("%s and %s are the same topic %q: an application must not write to a topic it reads or owns; use another topic", a.field, b.field, a.name)
			}
		}
	}
	return ""
}

// checkNumbers validates the durations, sizes and counts.
func (c *Config[K, I, O]) checkNumbers() string {
	for _, d := range []struct {
		field string
		v     time.Duration
		min   time.Duration // when positive; 0: any positive value
	}{
		{"TriggerInterval", c.TriggerInterval, minMsDuration},
		{"MaxBatchWait", c.MaxBatchWait, minMsDuration},
		{"TransactionTimeout", c.TransactionTimeout, minTransactionTimeout},
		{"SessionTimeout", c.SessionTimeout, minMsDuration},
		{"StartupTimeout", c.StartupTimeout, 0},
		{"ShutdownTimeout", c.ShutdownTimeout, 0},
		{"MaxBatchDuration", c.MaxBatchDuration, minMsDuration},
		{"MetadataRefresh", c.MetadataRefresh, minMsDuration},
	} {
		switch {
		case d.v < 0:
			return fmt.Sprintf("Config.%s %v is negative: 0 means the default", d.field, d.v)
		case d.v > 0 && d.v < d.min:
			return fmt.Sprintf("Config.%s %v is under the minimum %v (0 means the default)", d.field, d.v, d.min)
		}
	}
	switch {
	case c.TransactionTimeout > maxTransactionTimeout:
		return fmt.Sprintf("Config.TransactionTimeout %v is over %v, the broker's default transaction.max.timeout.ms: want 1s to 15m (0 means the default 10s)",
			c.TransactionTimeout, maxTransactionTimeout)
	case c.MaxBatchRecords < 0:
		return fmt.Sprintf("Config.MaxBatchRecords %d is negative: 0 means the default (adaptive)", c.MaxBatchRecords)
	case c.MaxRecordBytes < 0:
		return fmt.Sprintf("Config.MaxRecordBytes %d is negative: 0 means the default (1 MiB)", c.MaxRecordBytes)
	case c.MaxRecordBytes > 0 && c.MaxRecordBytes < minMaxRecordBytes:
		return fmt.Sprintf("Config.MaxRecordBytes %d is under the minimum %d bytes (a record batch's own overhead is ~70 bytes): 0 means the default (1 MiB)",
			c.MaxRecordBytes, minMaxRecordBytes)
	case c.MaxRecordBytes > maxMaxRecordBytes:
		return fmt.Sprintf("Config.MaxRecordBytes %d is over %d bytes (a produce request is at most the broker's socket.request.max.bytes, 100 MiB by default)",
			c.MaxRecordBytes, maxMaxRecordBytes)
	case c.StateMemory < 0:
		return fmt.Sprintf("Config.StateMemory %d is negative: give a budget in bytes (at least 1 MiB), or 0 for a cache per shard", c.StateMemory)
	case c.StateMemory > 0 && c.StateMemory < minStateMemory:
		return fmt.Sprintf("Config.StateMemory %d bytes is under 1 MiB (0 turns the shared budget off)", c.StateMemory)
	case c.StateCacheBytes > 0 && c.StateCacheBytes < minStateCacheBytes:
		return fmt.Sprintf("Config.StateCacheBytes %d bytes: want at least 64 KiB, 0 for the default or negative for off", c.StateCacheBytes)
	case c.Pipelines < 0:
		return fmt.Sprintf("Config.Pipelines %d is negative: 0 means automatic", c.Pipelines)
	}
	return ""
}

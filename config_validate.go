package kstate

import (
	"fmt"
	"math"
	"net"
	"net/url"
	"strconv"
	"time"

	"github.com/kstate/kstate/internal/kafka"
	"github.com/kstate/kstate/internal/kv"
	"github.com/kstate/kstate/processor"
)

// Bounds of Options fields that Kafka or the engine impose.
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
// default). Each message names its field as the user
// sets it: Topology.X or Options.Group.X.
func (c *config[K, I, O]) validate() error {
	if msg := c.check(); msg != "" {
		return fmt.Errorf("%w: %s", ErrConfig, msg)
	}
	return nil
}

// check is validate's message; "" when valid.
func (c *config[K, I, O]) check() string {
	if err := kafka.CheckApplicationID(c.ApplicationID); err != nil {
		return fmt.Sprintf("Options.ApplicationID %q: %v", c.ApplicationID, err)
	}
	if c.InstanceID != "" {
		if err := kafka.CheckInstanceID(c.InstanceID); err != nil {
			return fmt.Sprintf("Options.InstanceID %q: %v", c.InstanceID, err)
		}
	}
	if len(c.Brokers) == 0 {
		return "Options.Kafka.Brokers is empty: give the bootstrap addresses (\"host:port\")"
	}
	for i, b := range c.Brokers {
		if err := kafka.CheckBroker(b); err != nil {
			return fmt.Sprintf("Options.Kafka.Brokers[%d] %q: %v", i, b, err)
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
		return "Topology.KeySerde is required"
	case c.NewProcessor == nil:
		return "Topology.NewProcessor is required"
	case c.OutputTopic == "" && len(c.Sinks) == 0:
		return "Topology.Output.Topic is required unless Output.Sinks is set"
	case c.OutputTopic != "" && c.OutputSerde == nil:
		return "Topology.Output.Serde is required with Output.Topic"
	case !c.TimeMode.Valid():
		return fmt.Sprintf("Topology.TimeMode: unknown %v: use processor.NoTime, ProcessingTime or EventTime", c.TimeMode)
	case !c.OutputMode.Valid():
		return fmt.Sprintf("Topology.OutputMode: unknown %v: use processor.Append or Update", c.OutputMode)
	case c.OnDecodeError < DecodeErrorFail || c.OnDecodeError > DecodeErrorDeadLetter:
		return fmt.Sprintf("Topology.OnDecodeError: unknown policy %d", c.OnDecodeError)
	case c.OnKeyPartitionMismatch < KeyPartitionAllow || c.OnKeyPartitionMismatch > KeyPartitionDeadLetter:
		return fmt.Sprintf("Topology.OnKeyPartitionMismatch: unknown policy %d", c.OnKeyPartitionMismatch)
	case c.OnProcessingError < ProcessingErrorFail || c.OnProcessingError > ProcessingErrorDeadLetter:
		return fmt.Sprintf("Topology.OnProcessingError: unknown policy %d", c.OnProcessingError)
	case c.TimeMode != processor.EventTime && (c.EventTime != nil || c.AllowedLateness != 0):
		return fmt.Sprintf("Topology.EventTime and AllowedLateness need Topology.TimeMode EventTime (have %v)", c.TimeMode)
	case c.AllowedLateness < 0:
		return fmt.Sprintf("Topology.AllowedLateness %v is negative", c.AllowedLateness)
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
			return fmt.Sprintf("Options.State.Backend: %v", err)
		}
	}
	if c.HTTPAddr != "" {
		if _, _, err := net.SplitHostPort(c.HTTPAddr); err != nil {
			return fmt.Sprintf("Options.Observability.HTTPAddr %q: want \"host:port\" or \":port\": %v", c.HTTPAddr, err)
		}
	}
	if msg := checkAdvertisedURL(c.AdvertisedURL); msg != "" {
		return msg
	}
	if len(c.KafkaOptions) > 0 || c.TLS != nil || c.SASL != nil {
		if err := c.clientConfig().Check(); err != nil {
			return fmt.Sprintf("Options.Kafka.ClientOptions, TLS, SASL: %v", err)
		}
	}
	return ""
}

// checkOutputs validates the names of OutputTopic, OutputTopics and
// DeadLetterTopic, and Sinks.
func (c *config[K, I, O]) checkOutputs() string {
	if c.OutputTopic != "" {
		if err := kafka.CheckTopic(c.OutputTopic); err != nil {
			return fmt.Sprintf("Topology.Output.Topic %q: %v", c.OutputTopic, err)
		}
	}
	if c.DeadLetterTopic != "" {
		if err := kafka.CheckTopic(c.DeadLetterTopic); err != nil {
			return fmt.Sprintf("Topology.DeadLetterTopic %q: %v", c.DeadLetterTopic, err)
		}
	}
	seen := map[string]bool{}
	for i, t := range c.OutputTopics {
		if t == nil {
			return fmt.Sprintf("Topology.Output.EmitTo[%d] is nil", i)
		}
		if err := kafka.CheckTopic(t.Name()); err != nil {
			return fmt.Sprintf("Topology.Output.EmitTo[%d] %q: %v", i, t.Name(), err)
		}
		if seen[t.Name()] {
			return fmt.Sprintf("Topology.Output.EmitTo[%d]: %q is declared twice", i, t.Name())
		}
		seen[t.Name()] = true
	}
	for i, s := range c.Sinks {
		if s == nil {
			return fmt.Sprintf("Topology.Output.Sinks[%d] is nil", i)
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
func (c *config[K, I, O]) checkTopicRoles() string {
	var roles []topicRole
	for i, in := range c.inputList() {
		f := fmt.Sprintf("Topology.Inputs[%d].Topic", i)
		roles = append(roles, topicRole{f, in.Topic, true})
	}
	roles = append(roles, topicRole{"the changelog topic (Options.ApplicationID + \"-changelog\")", c.ApplicationID + "-changelog", true})
	if len(c.GroupBy) > 0 {
		roles = append(roles, topicRole{"the GroupBy repartition topic (Options.ApplicationID + \"-repartition\")", c.repartitionTopic(), true})
	}
	if c.OutputTopic != "" {
		roles = append(roles, topicRole{"Topology.Output.Topic", c.OutputTopic, false})
	}
	for i, t := range c.OutputTopics {
		roles = append(roles, topicRole{fmt.Sprintf("Topology.Output.EmitTo[%d]", i), t.Name(), false})
	}
	switch {
	case c.DeadLetterTopic != "":
		roles = append(roles, topicRole{"Topology.DeadLetterTopic", c.DeadLetterTopic, false})
	case c.deadLetters():
		roles = append(roles, topicRole{"the dead-letter topic (Topology.DeadLetterTopic's default, Options.ApplicationID + \"-dlq\")", c.ApplicationID + "-dlq", false})
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
func (c *config[K, I, O]) checkNumbers() string {
	for _, d := range []struct {
		field string
		v     time.Duration
		min   time.Duration // when positive; 0: any positive value
	}{
		{"Options.Batching.TriggerInterval", c.TriggerInterval, minMsDuration},
		{"Options.Batching.MaxWait", c.MaxBatchWait, minMsDuration},
		{"Options.Kafka.TransactionTimeout", c.TransactionTimeout, minTransactionTimeout},
		{"Options.Kafka.SessionTimeout", c.SessionTimeout, minMsDuration},
		{"Options.Timeouts.Startup", c.StartupTimeout, 0},
		{"Options.Timeouts.Shutdown", c.ShutdownTimeout, 0},
		{"Options.Batching.MaxDuration", c.MaxBatchDuration, minMsDuration},
		{"Options.Kafka.MetadataRefresh", c.MetadataRefresh, minMsDuration},
		{"Options.Group.ProbingInterval", c.ProbingInterval, minMsDuration},
		{"Options.Group.StandbyCleanupDelay", c.StandbyCleanupDelay, 0},
	} {
		switch {
		case d.v < 0:
			return fmt.Sprintf("%s %v is negative: 0 means the default", d.field, d.v)
		case d.v > 0 && d.v < d.min:
			return fmt.Sprintf("%s %v is under the minimum %v (0 means the default)", d.field, d.v, d.min)
		}
	}
	switch {
	case c.TransactionTimeout > maxTransactionTimeout:
		return fmt.Sprintf("Options.Kafka.TransactionTimeout %v is over %v, the broker's default transaction.max.timeout.ms: want 1s to 15m (0 means the default 10s)",
			c.TransactionTimeout, maxTransactionTimeout)
	case c.ReplicationFactor < 0 || c.ReplicationFactor > math.MaxInt16:
		return fmt.Sprintf("Options.Kafka.ReplicationFactor %d: want 1 to %d replicas, or 0 for the broker's default.replication.factor (3 for production)",
			c.ReplicationFactor, math.MaxInt16)
	case c.MinInsyncReplicas < 0:
		return fmt.Sprintf("Options.Kafka.MinInsyncReplicas %d is negative: want at least 1, or 0 for the broker's min.insync.replicas (2 for production, with ReplicationFactor 3)",
			c.MinInsyncReplicas)
	case c.ReplicationFactor > 0 && c.MinInsyncReplicas > c.ReplicationFactor:
		return fmt.Sprintf("Options.Kafka.MinInsyncReplicas %d is above Options.Kafka.ReplicationFactor %d: every replica would have to be in sync "+
			"(want below ReplicationFactor, so that a broker may be down: 2 with 3)", c.MinInsyncReplicas, c.ReplicationFactor)
	case c.MaxBatchRecords < 0:
		return fmt.Sprintf("Options.Batching.MaxRecords %d is negative: 0 means the default (adaptive)", c.MaxBatchRecords)
	case c.MaxRecordBytes < 0:
		return fmt.Sprintf("Options.Kafka.MaxRecordBytes %d is negative: 0 means the default (1 MiB)", c.MaxRecordBytes)
	case c.MaxRecordBytes > 0 && c.MaxRecordBytes < minMaxRecordBytes:
		return fmt.Sprintf("Options.Kafka.MaxRecordBytes %d is under the minimum %d bytes (a record batch's own overhead is ~70 bytes): 0 means the default (1 MiB)",
			c.MaxRecordBytes, minMaxRecordBytes)
	case c.MaxRecordBytes > maxMaxRecordBytes:
		return fmt.Sprintf("Options.Kafka.MaxRecordBytes %d is over %d bytes (a produce request is at most the broker's socket.request.max.bytes, 100 MiB by default)",
			c.MaxRecordBytes, maxMaxRecordBytes)
	case c.StateMemory < 0:
		return fmt.Sprintf("Options.State.Memory %d is negative: give a budget in bytes (at least 1 MiB), or 0 for a cache per shard", c.StateMemory)
	case c.StateMemory > 0 && c.StateMemory < minStateMemory:
		return fmt.Sprintf("Options.State.Memory %d bytes is under 1 MiB (0 turns the shared budget off)", c.StateMemory)
	case c.StateCacheBytes > 0 && c.StateCacheBytes < minStateCacheBytes:
		return fmt.Sprintf("Options.State.CacheBytes %d bytes: want at least 64 KiB, 0 for the default or negative for off", c.StateCacheBytes)
	case c.Standbys < 0:
		return fmt.Sprintf("Options.Group.Standbys %d is negative: want the number of standby copies of each partition's state (0: none)", c.Standbys)
	case c.AcceptableLag < 0:
		return fmt.Sprintf("Options.Group.AcceptableLag %d is negative: want a number of changelog records (0 means the default 10,000)", c.AcceptableLag)
	case c.Pipelines < 0:
		return fmt.Sprintf("Options.Batching.Pipelines %d is negative: 0 means automatic", c.Pipelines)
	}
	return ""
}

// checkAdvertisedURL validates Options.Group.AdvertisedURL: "" or an
// absolute http or https URL with a host and no path beyond "/" (the other
// instances append a request's own path to it), no query, fragment or
// user info (it is sent to every member of the group).
func checkAdvertisedURL(s string) string {
	if s == "" {
		return ""
	}
	const want = `want an absolute http or https URL of this instance, such as "http://pod-0.app:8080"`
	u, err := url.Parse(s)
	switch {
	case err != nil:
		return fmt.Sprintf("Options.Group.AdvertisedURL %q: %v: %s", s, err, want)
	case u.Scheme != "http" && u.Scheme != "https":
		return fmt.Sprintf("Options.Group.AdvertisedURL %q: scheme %q: %s", s, u.Scheme, want)
	case u.Host == "" || u.Hostname() == "":
		return fmt.Sprintf("Options.Group.AdvertisedURL %q: no host: %s", s, want)
	case u.User != nil:
		return fmt.Sprintf("Options.Group.AdvertisedURL %q: has user info: it is sent to every member of the group; %s", s, want)
	case u.Path != "" && u.Path != "/":
		return fmt.Sprintf("Options.Group.AdvertisedURL %q: has the path %q: the other instances send a live query's own path to it "+
			"(mount QueryHandler at the same path on every instance); %s", s, u.Path, want)
	case u.RawQuery != "" || u.ForceQuery || u.Fragment != "":
		return fmt.Sprintf("Options.Group.AdvertisedURL %q: has a query or fragment: %s", s, want)
	}
	if p := u.Port(); p != "" {
		if n, err := strconv.Atoi(p); err != nil || n < 1 || n > 65535 {
			return fmt.Sprintf("Options.Group.AdvertisedURL %q: port %q: %s", s, p, want)
		}
	}
	return ""
}

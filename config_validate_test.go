package kstate_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/kstate/kstate"
	"github.com/kstate/kstate/internal/testprocs"
	"github.com/kstate/kstate/processor"
	"github.com/kstate/kstate/serde"
)

type cfg = testApp

// TestConfigRefusals: every invalid field is refused by New with an
// ErrConfig whose message names the field as the user writes it
// (Topology.X, Options.Group.X) and the value.
// Issue #25: ApplicationID ".." escaped StateDir, an output or dead-letter
// topic equal to an input was accepted, Brokers [""] and "::not a host::"
// were dialled, MaxRecordBytes 1 failed inside franz-go, a negative
// StateMemory and a TransactionTimeout of 1ms were accepted, and "must not
// be negative" named no field.
func TestConfigRefusals(t *testing.T) {
	long := strings.Repeat("a", 238)
	for _, tc := range []struct {
		name string
		edit func(*cfg)
		want []string // substrings of the message
	}{
		{"app dotdot", func(c *cfg) { c.ApplicationID = ".." }, []string{`Options.ApplicationID ".."`, `"." and ".."`}},
		{"app dot", func(c *cfg) { c.ApplicationID = "." }, []string{`Options.ApplicationID "."`}},
		{"app slash", func(c *cfg) { c.ApplicationID = "../x" }, []string{`Options.ApplicationID "../x"`, "want letters"}},
		{"app empty", func(c *cfg) { c.ApplicationID = "" }, []string{`Options.ApplicationID ""`, "is empty"}},
		{"app too long", func(c *cfg) { c.ApplicationID = long }, []string{"Options.ApplicationID", "238 characters long, over the maximum of 237"}},
		{"instance dotdot", func(c *cfg) { c.InstanceID = ".." }, []string{`Options.InstanceID ".."`}},
		{"instance slash", func(c *cfg) { c.InstanceID = "a/b" }, []string{`Options.InstanceID "a/b"`}},
		{"no brokers", func(c *cfg) { c.Kafka.Brokers = nil }, []string{"Options.Kafka.Brokers is empty"}},
		{"empty broker", func(c *cfg) { c.Kafka.Brokers = []string{""} }, []string{`Options.Kafka.Brokers[0] ""`, "is empty"}},
		{"not a host", func(c *cfg) { c.Kafka.Brokers = []string{"x:1", "::not a host::"} }, []string{`Options.Kafka.Brokers[1] "::not a host::"`}},
		{"host with space", func(c *cfg) { c.Kafka.Brokers = []string{"not a host:9092"} }, []string{`Options.Kafka.Brokers[0]`, "neither a host name nor an IP"}},
		{"bad port", func(c *cfg) { c.Kafka.Brokers = []string{"kafka:http"} }, []string{`Options.Kafka.Brokers[0]`, `port "http"`}},
		{"no host", func(c *cfg) { c.Kafka.Brokers = []string{":9092"} }, []string{`Options.Kafka.Brokers[0] ":9092"`, "no host"}},
		{"input dotdot", func(c *cfg) { c.Inputs = kstate.Topics(serde.String(), "..") }, []string{`Topology.Inputs[0].Topic: input topic ".."`}},
		{"output bad", func(c *cfg) { c.Output.Topic = "a b" }, []string{`Topology.Output.Topic "a b"`}},
		{"dlq dotdot", func(c *cfg) { c.DeadLetterTopic = ".." }, []string{`Topology.DeadLetterTopic ".."`}},
		{"dlq is input", func(c *cfg) { c.DeadLetterTopic = "in" }, []string{"Topology.Inputs[0].Topic and Topology.DeadLetterTopic are the same topic \"in\""}},
		{"output is input", func(c *cfg) { c.Output.Topic = "in" }, []string{"Topology.Inputs[0].Topic and Topology.Output.Topic are the same topic \"in\""}},
		{"output topics is input", func(c *cfg) {
			c.Output.EmitTo = []processor.NamedTopic{processor.NewOutputTopic("in", serde.String())}
		}, []string{"Topology.Inputs[0].Topic and Topology.Output.EmitTo[0]"}},
		{"default dlq is input", func(c *cfg) {
			c.Inputs, c.OnDecodeError = kstate.Topics(serde.String(), "app-dlq"), kstate.DecodeErrorDeadLetter
		}, []string{"Topology.Inputs[0].Topic and the dead-letter topic (Topology.DeadLetterTopic's default"}},
		{"output is changelog", func(c *cfg) { c.Output.Topic = "app-changelog" }, []string{"the changelog topic", "Topology.Output.Topic", `"app-changelog"`}},
		{"input is changelog", func(c *cfg) { c.Inputs = kstate.Topics(serde.String(), "app-changelog") }, []string{"Topology.Inputs[0].Topic and the changelog topic"}},
		{"output is repartition", func(c *cfg) {
			c.GroupBy = []kstate.GroupBy[string, string]{{Topic: "in", Key: func(_ []byte, v string) (string, error) { return v, nil }}}
			c.Output.Topic = "app-repartition"
		}, []string{"the GroupBy repartition topic", "Topology.Output.Topic", `"app-repartition"`}},
		{"input is repartition", func(c *cfg) {
			c.Inputs = kstate.Topics(serde.String(), "in", "app-repartition")
			c.GroupBy = []kstate.GroupBy[string, string]{{Topic: "in", Key: func(_ []byte, v string) (string, error) { return v, nil }}}
		}, []string{"Topology.Inputs[1].Topic and the GroupBy repartition topic"}},
		{"max record bytes 1", func(c *cfg) { c.Kafka.MaxRecordBytes = 1 }, []string{"Options.Kafka.MaxRecordBytes 1 is under the minimum 1024 bytes"}},
		{"max record bytes negative", func(c *cfg) { c.Kafka.MaxRecordBytes = -1 }, []string{"Options.Kafka.MaxRecordBytes -1 is negative"}},
		{"state memory negative", func(c *cfg) { c.State.Memory = -1 }, []string{"Options.State.Memory -1 is negative"}},
		{"state memory tiny", func(c *cfg) { c.State.Memory = 1000 }, []string{"Options.State.Memory 1000 bytes is under 1 MiB"}},
		{"state cache tiny", func(c *cfg) { c.State.CacheBytes = 1000 }, []string{"Options.State.CacheBytes 1000 bytes"}},
		{"txn timeout 1ms", func(c *cfg) { c.Kafka.TransactionTimeout = time.Millisecond }, []string{"Options.Kafka.TransactionTimeout 1ms is under the minimum 1s"}},
		{"replication negative", func(c *cfg) { c.Kafka.ReplicationFactor = -1 }, []string{"Options.Kafka.ReplicationFactor -1: want 1 to 32767 replicas"}},
		{"replication too large", func(c *cfg) { c.Kafka.ReplicationFactor = 40000 }, []string{"Options.Kafka.ReplicationFactor 40000"}},
		{"min isr negative", func(c *cfg) { c.Kafka.MinInsyncReplicas = -2 }, []string{"Options.Kafka.MinInsyncReplicas -2 is negative"}},
		{"min isr over rf", func(c *cfg) { c.Kafka.ReplicationFactor, c.Kafka.MinInsyncReplicas = 2, 3 }, []string{"Options.Kafka.MinInsyncReplicas 3 is above Options.Kafka.ReplicationFactor 2"}},
		{"txn timeout 1h", func(c *cfg) { c.Kafka.TransactionTimeout = time.Hour }, []string{"Options.Kafka.TransactionTimeout 1h0m0s is over 15m0s", "transaction.max.timeout.ms"}},
		{"trigger negative", func(c *cfg) { c.Batching.TriggerInterval = -time.Second }, []string{"Options.Batching.TriggerInterval -1s is negative"}},
		{"trigger 1ns", func(c *cfg) { c.Batching.TriggerInterval = 1 }, []string{"Options.Batching.TriggerInterval 1ns is under the minimum 1ms"}},
		{"batch wait negative", func(c *cfg) { c.Batching.MaxWait = -1 }, []string{"Options.Batching.MaxWait -1ns is negative"}},
		{"session negative", func(c *cfg) { c.Kafka.SessionTimeout = -1 }, []string{"Options.Kafka.SessionTimeout -1ns is negative"}},
		{"startup negative", func(c *cfg) { c.Timeouts.Startup = -1 }, []string{"Options.Timeouts.Startup -1ns is negative"}},
		{"shutdown negative", func(c *cfg) { c.Timeouts.Shutdown = -1 }, []string{"Options.Timeouts.Shutdown -1ns is negative"}},
		{"batch duration negative", func(c *cfg) { c.Batching.MaxDuration = -1 }, []string{"Options.Batching.MaxDuration -1ns is negative"}},
		{"metadata negative", func(c *cfg) { c.Kafka.MetadataRefresh = -1 }, []string{"Options.Kafka.MetadataRefresh -1ns is negative"}},
		{"batch records negative", func(c *cfg) { c.Batching.MaxRecords = -1 }, []string{"Options.Batching.MaxRecords -1 is negative"}},
		{"pipelines negative", func(c *cfg) { c.Batching.Pipelines = -1 }, []string{"Options.Batching.Pipelines -1 is negative"}},
		{"standbys negative", func(c *cfg) { c.Group.Standbys = -1 }, []string{"Options.Group.Standbys -1 is negative"}},
		{"acceptable lag negative", func(c *cfg) { c.Group.AcceptableLag = -1 }, []string{"Options.Group.AcceptableLag -1 is negative"}},
		{"probing interval negative", func(c *cfg) { c.Group.ProbingInterval = -time.Second }, []string{"Options.Group.ProbingInterval -1s is negative"}},
		{"probing interval tiny", func(c *cfg) { c.Group.ProbingInterval = time.Microsecond }, []string{"Options.Group.ProbingInterval 1µs is under the minimum"}},
		{"standby cleanup negative", func(c *cfg) { c.Group.StandbyCleanupDelay = -time.Minute }, []string{"Options.Group.StandbyCleanupDelay -1m0s is negative"}},
		{"lateness negative", func(c *cfg) { c.TimeMode, c.AllowedLateness = processor.EventTime, -time.Second }, []string{"Topology.AllowedLateness -1s is negative"}},
		{"http addr", func(c *cfg) { c.Observability.HTTPAddr = "8080" }, []string{`Options.Observability.HTTPAddr "8080"`}},
		{"nil sink", func(c *cfg) { c.Output.Sinks = []kstate.Sink[string, string]{nil} }, []string{"Topology.Output.Sinks[0] is nil"}},
		{"key serde", func(c *cfg) { c.KeySerde = nil }, []string{"Topology.KeySerde is required"}},
		{"value serde", func(c *cfg) { c.Inputs = []kstate.Input[string]{{Topic: "in"}} }, []string{`Topology.Inputs[0] (topic "in") needs ValueSerde or ValueFromRecord`}},
		{"no inputs", func(c *cfg) { c.Inputs = nil }, []string{"Topology.Inputs is required"}},
		{"input twice", func(c *cfg) { c.Inputs = kstate.Topics(serde.String(), "in", "in") }, []string{`Topology.Inputs[1].Topic: input topic "in" is listed twice`}},
		{"time mode", func(c *cfg) { c.TimeMode = 7 }, []string{"Topology.TimeMode: unknown"}},
		{"decode policy", func(c *cfg) { c.OnDecodeError = 9 }, []string{"Topology.OnDecodeError: unknown policy 9"}},
		{"backend", func(c *cfg) { c.State.Backend = "leveldb" }, []string{"Options.State.Backend"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := config([]string{"x:1"}, t.TempDir(), testprocs.NewCounter)
			tc.edit(&c)
			_, err := kstate.New(c.Topology, c.Options)
			if !errors.Is(err, kstate.ErrConfig) {
				t.Fatalf("New: %v, want ErrConfig", err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("New: %q\nwant it to contain %q", err, w)
				}
			}
		})
	}
}

// TestConfigAccepts: the edges of the valid ranges are accepted.
func TestConfigAccepts(t *testing.T) {
	for _, tc := range []struct {
		name string
		edit func(*cfg)
	}{
		{"longest app id", func(c *cfg) { c.ApplicationID = strings.Repeat("a", 237) }},
		{"dots in app id", func(c *cfg) { c.ApplicationID = "a..b" }},
		{"host only", func(c *cfg) { c.Kafka.Brokers = []string{"kafka"} }},
		{"ipv4", func(c *cfg) { c.Kafka.Brokers = []string{"10.0.0.1:9092"} }},
		{"ipv6", func(c *cfg) { c.Kafka.Brokers = []string{"[::1]:9092"} }},
		{"fqdn", func(c *cfg) { c.Kafka.Brokers = []string{"b-1.kafka.example.com:9094"} }},
		{"txn timeout 1s", func(c *cfg) { c.Kafka.TransactionTimeout = time.Second }},
		{"txn timeout 15m", func(c *cfg) { c.Kafka.TransactionTimeout = 15 * time.Minute }},
		{"max record bytes 1 KiB", func(c *cfg) { c.Kafka.MaxRecordBytes = 1024 }},
		{"dlq shared with output", func(c *cfg) { c.DeadLetterTopic = "out"; c.OnDecodeError = kstate.DecodeErrorDeadLetter }},
		{"default dlq named like input, unused", func(c *cfg) { c.Inputs = kstate.Topics(serde.String(), "app-dlq") }},
		{"http addr", func(c *cfg) { c.Observability.HTTPAddr = ":8080" }},
		{"cache off", func(c *cfg) { c.State.CacheBytes = -1 }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := config([]string{"x:1"}, t.TempDir(), testprocs.NewCounter)
			tc.edit(&c)
			if _, err := kstate.New(c.Topology, c.Options); err != nil {
				t.Fatalf("New: %v", err)
			}
		})
	}
}

package kafkatest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/kstate/kstate/internal/kafka"
)

// Record is a Kafka record as a test writes and reads it.
type Record struct {
	Key   []byte
	Value []byte // nil is a tombstone
	// Timestamp is the record time; zero when producing means the
	// producer's clock.
	Timestamp time.Time
	// Partition and Offset locate a record read. Produce ignores them: it
	// partitions by key with Kafka's default murmur2 hash, as a Java
	// producer would (records with a nil key are spread).
	Partition int32
	Offset    int64
}

// Name returns base with a random suffix, for topics and application ids:
// tests sharing a cluster, and reruns against a long-lived one
// (KSTATE_KAFKA_BROKERS), then never see each other's records or state.
func Name(t testing.TB, base string) string {
	t.Helper()
	var b [6]byte
	if _, err := rand.Read(b[:]); err != nil {
		t.Fatalf("kafkatest: name %q: %v", base, err)
	}
	return base + "-" + hex.EncodeToString(b[:])
}

// CreateTopic creates a topic named Name(t, base) with the given number of
// partitions (<= 0: the broker's default) and the broker's default
// replication factor, and returns its name. It fails t on error.
func (c *Cluster) CreateTopic(t testing.TB, base string, partitions int) string {
	t.Helper()
	name := Name(t, base)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	adm, err := kafka.NewAdmin(c.brokers)
	if err != nil {
		t.Fatalf("kafkatest: create topic %q: %v", name, err)
	}
	defer adm.Close()
	if err := adm.EnsureTopic(ctx, kafka.TopicSpec{Name: name, Partitions: partitions, ReplicationFactor: -1}); err != nil {
		t.Fatalf("kafkatest: create topic %q: %v", name, err)
	}
	return name
}

// Produce writes recs to topic, outside any transaction, and returns once
// the broker has acknowledged all of them; records of one key keep their
// order. It fails t on error.
func (c *Cluster) Produce(t testing.TB, topic string, recs ...Record) {
	t.Helper()
	krs := make([]kafka.Record, len(recs))
	for i, r := range recs {
		krs[i] = kafka.Record{Topic: topic, Partition: kafka.AnyPartition, Key: r.Key, Value: r.Value, Timestamp: r.Timestamp}
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	p, err := kafka.NewProducer(c.brokers)
	if err != nil {
		t.Fatalf("kafkatest: produce to %q: %v", topic, err)
	}
	defer p.Close()
	if err := p.Produce(ctx, krs...); err != nil {
		t.Fatalf("kafkatest: produce %d records to %q: %v", len(recs), topic, err)
	}
}

// ReadCommitted waits until topic holds at least n committed records and
// returns all of them, read as a read_committed consumer would (records of
// open or aborted transactions are not returned), ordered by partition and
// then offset. An application writes asynchronously, so it polls; it fails t
// if timeout passes first, printing what it has.
func (c *Cluster) ReadCommitted(t testing.TB, topic string, n int, timeout time.Duration) []Record {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	var (
		got     []kafka.Record // the last complete read
		read    bool
		lastErr error // of the last read, if it failed before the timeout
	)
	for {
		recs, err := kafka.ReadAll(ctx, c.brokers, topic)
		switch {
		case err == nil:
			got, read, lastErr = recs, true, nil
			if len(got) >= n {
				return fromKafka(got)
			}
		case ctx.Err() == nil:
			lastErr = err
		}
		select {
		case <-ctx.Done():
			if !read && lastErr == nil {
				lastErr = ctx.Err()
			}
			if lastErr != nil {
				t.Fatalf("kafkatest: %d committed records on %q not seen within %v (last error: %v)", n, topic, timeout, lastErr)
			}
			t.Fatalf("kafkatest: %d committed records on %q not seen within %v; have %d: %v", n, topic, timeout, len(got), describe(got))
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// describe prints records readably in a failure message.
func describe(recs []kafka.Record) string {
	var b strings.Builder
	for i, r := range recs {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "p%d@%d %q=%q", r.Partition, r.Offset, r.Key, r.Value)
	}
	return b.String()
}

func fromKafka(recs []kafka.Record) []Record {
	out := make([]Record, len(recs))
	for i, r := range recs {
		out[i] = Record{Key: r.Key, Value: r.Value, Timestamp: r.Timestamp, Partition: r.Partition, Offset: r.Offset}
	}
	return out
}

package kafkatest

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	"github.com/kstate/kstate/internal/kafka"
	"github.com/twmb/franz-go/pkg/kerr"
)

// valueFor returns an incompressible value (the producer compresses, and
// the broker checks the compressed batch) that makes a record with key
// exactly size bytes by kafka.RecordBatchBytes.
func valueFor(t testing.TB, key []byte, size int) []byte {
	t.Helper()
	rnd := rand.New(rand.NewPCG(1, 2))
	noise := make([]byte, size)
	for i := range noise {
		noise[i] = byte(rnd.Uint32())
	}
	for n := size - 100; n <= size; n++ {
		if kafka.RecordBatchBytes(key, noise[:n], nil) == size {
			return noise[:n]
		}
	}
	t.Fatalf("no value length gives a record of %d bytes", size)
	return nil
}

// RecordSize checks that RecordBatchBytes is exactly the size the broker
// holds against max.message.bytes, that a MaxRecordBytes above franz-go's
// default 1,000,012 works up to the topic's limit, and that one byte more
// is a RecordTooLargeError before anything is sent (the transaction stays
// usable for an abort).
func RecordSize(t *testing.T, brokers []string) {
	const topicLimit = 3 << 20
	adm := NewAdmin(t, brokers)
	topic := Name(t, "big")
	spec := kafka.TopicSpec{Name: topic, Partitions: 1, ReplicationFactor: -1,
		Configs: map[string]string{"max.message.bytes": strconv.Itoa(topicLimit)}}
	if err := adm.EnsureTopic(Ctx(t, 60*time.Second), spec); err != nil {
		t.Fatal(err)
	}
	if got, err := adm.MaxMessageBytes(Ctx(t, 30*time.Second), topic); err != nil || got != topicLimit {
		t.Fatalf("MaxMessageBytes = %d, %v; want %d", got, err, topicLimit)
	}
	key := []byte("big-key")

	// The client lets through one byte more than the topic allows: the
	// broker's answer proves the size formula is exact.
	w := NewSession(t, kafka.SessionConfig{Brokers: brokers, GroupID: Name(t, "g"), Topics: []string{Name(t, "nothing")},
		TransactionalID: Name(t, "txn"), MaxRecordBytes: topicLimit + 1})
	ctx := Ctx(t, 60*time.Second)
	if err := w.Begin(); err != nil {
		t.Fatal(err)
	}
	_, err := w.Produce(ctx, []kafka.Record{{Topic: topic, Partition: 0, Key: key, Value: valueFor(t, key, topicLimit+1)}})
	if !errors.Is(err, kerr.MessageTooLarge) {
		t.Fatalf("a record of max.message.bytes+1 bytes: %v; want the broker's MESSAGE_TOO_LARGE", err)
	}
	if _, err := w.End(ctx, false); err != nil {
		t.Fatal(err)
	}
	if err := w.Begin(); err != nil {
		t.Fatal(err)
	}
	exact := valueFor(t, key, topicLimit)
	if _, err := w.Produce(ctx, []kafka.Record{{Topic: topic, Partition: 0, Key: key, Value: exact}}); err != nil {
		t.Fatalf("a record of exactly max.message.bytes: %v", err)
	}
	if ok, err := w.End(ctx, true); err != nil || !ok {
		t.Fatalf("commit: %v, %v", ok, err)
	}
	got := ReadAll(t, brokers, topic)
	if len(got) != 1 || !bytes.Equal(got[0].Value, exact) {
		t.Fatalf("read back %d records", len(got))
	}

	// MaxRecordBytes = 2 MiB: over it is a typed error naming the limit,
	// before anything is sent.
	const limit = 2 << 20
	w2 := NewSession(t, kafka.SessionConfig{Brokers: brokers, GroupID: Name(t, "g2"), Topics: []string{Name(t, "nothing")},
		TransactionalID: Name(t, "txn2"), MaxRecordBytes: limit})
	if err := w2.Begin(); err != nil {
		t.Fatal(err)
	}
	if _, err := w2.Produce(ctx, []kafka.Record{{Topic: topic, Partition: 0, Key: key, Value: valueFor(t, key, limit)}}); err != nil {
		t.Fatalf("a record of exactly MaxRecordBytes: %v", err)
	}
	_, err = w2.Produce(ctx, []kafka.Record{{Topic: topic, Partition: 0, Key: key, Value: valueFor(t, key, limit+1)}})
	var rt *kafka.RecordTooLargeError
	if !errors.As(err, &rt) || !errors.Is(err, kafka.ErrRecordTooLarge) {
		t.Fatalf("a record of MaxRecordBytes+1: %v; want a *RecordTooLargeError", err)
	}
	if rt.Size != limit+1 || rt.Limit != limit || rt.Topic != topic || !bytes.Equal(rt.Key, key) {
		t.Errorf("error fields %+v", *rt)
	}
	if ok, err := w2.End(ctx, false); err != nil || ok {
		t.Fatalf("abort after the error: %v, %v", ok, err)
	}
	if got := ReadAll(t, brokers, topic); len(got) != 1 {
		t.Fatalf("%d committed records after the aborted transaction, want 1", len(got))
	}
}

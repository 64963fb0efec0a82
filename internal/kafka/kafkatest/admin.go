package kafkatest

import (
	"errors"
	"testing"
	"time"

	"github.com/kstate/kstate/internal/kafka"
)

// EnsureTopic: creation with broker-default replication, idempotent
// re-validation, and typed mismatch errors for the partition count and for a
// changelog topic that is not compacted.
func EnsureTopic(t *testing.T, brokers []string) {
	adm := NewAdmin(t, brokers)
	ctx := Ctx(t, time.Minute)

	changelog := Name(t, "changelog")
	spec := kafka.TopicSpec{Name: changelog, Partitions: 3, ReplicationFactor: -1, Compacted: true}
	if err := adm.EnsureTopic(ctx, spec); err != nil {
		t.Fatalf("create: %v", err)
	}
	if err := adm.EnsureTopic(ctx, spec); err != nil {
		t.Fatalf("validate an existing matching topic: %v", err)
	}
	if n, err := adm.Partitions(ctx, changelog); err != nil || n != 3 {
		t.Fatalf("Partitions = %d, %v; want 3", n, err)
	}

	wrongCount := spec
	wrongCount.Partitions = 5
	assertMismatch(t, adm.EnsureTopic(ctx, wrongCount), kafka.TopicMismatchError{Topic: changelog, What: "partitions", Want: "5", Got: "3"})

	plain := Name(t, "plain")
	if err := adm.EnsureTopic(ctx, kafka.TopicSpec{Name: plain, Partitions: 2, ReplicationFactor: -1}); err != nil {
		t.Fatal(err)
	}
	assertMismatch(t, adm.EnsureTopic(ctx, kafka.TopicSpec{Name: plain, Partitions: 2, Compacted: true}),
		kafka.TopicMismatchError{Topic: plain, What: "cleanup.policy", Want: "compact", Got: "delete"})

	missing := Name(t, "missing")
	if _, err := adm.Partitions(ctx, missing); !errors.Is(err, kafka.ErrTopicNotFound) {
		t.Fatalf("Partitions of a missing topic: %v, want ErrTopicNotFound", err)
	}
	if _, err := adm.EndOffsets(ctx, missing); !errors.Is(err, kafka.ErrTopicNotFound) {
		t.Fatalf("EndOffsets of a missing topic: %v, want ErrTopicNotFound", err)
	}
}

func assertMismatch(t *testing.T, err error, want kafka.TopicMismatchError) {
	t.Helper()
	var got *kafka.TopicMismatchError
	if !errors.As(err, &got) {
		t.Fatalf("err = %v, want *TopicMismatchError %+v", err, want)
	}
	if *got != want {
		t.Fatalf("mismatch %+v, want %+v", *got, want)
	}
	if !errors.Is(err, kafka.ErrTopicMismatch) {
		t.Fatalf("errors.Is(%v, ErrTopicMismatch) = false", err)
	}
	t.Logf("mismatch error reads: %v", err)
}

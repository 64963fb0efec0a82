package kafka

import (
	"errors"
	"fmt"
)

var (
	// ErrTopicNotFound is returned when a topic does not exist.
	ErrTopicNotFound = errors.New("kafka: topic not found")

	// ErrTopicMismatch is wrapped by every *TopicMismatchError.
	ErrTopicMismatch = errors.New("kafka: existing topic does not match its specification")

	// ErrFenced means another producer with the same transactional id, or
	// another group member with the same instance id, took over: this
	// instance is a zombie. Its open transaction is lost (aborted by the
	// broker); the only correct reaction is to stop and close the Session.
	ErrFenced = errors.New("kafka: fenced by a newer instance with the same transactional or group instance id")

	// ErrClosed is returned by a Session used after Close.
	ErrClosed = errors.New("kafka: session closed")

	// ErrNotInTransaction is returned by Produce and End without Begin.
	ErrNotInTransaction = errors.New("kafka: no open transaction (call Begin first)")

	// ErrOffsetOutOfRange is returned when a reader's start offset is not in
	// the partition: below its log start (records were deleted) or above its
	// high watermark (the topic was recreated or truncated). A state shard
	// seeing it must be wiped and restored from the changelog start.
	ErrOffsetOutOfRange = errors.New("kafka: offset out of range")
)

// TopicMismatchError says how an existing topic differs from what kstate
// needs. Fix the topic (or delete it so kstate recreates it); kstate never
// alters a topic it did not create, because a silent change (say, of the
// partition count of a changelog) would corrupt state.
type TopicMismatchError struct {
	Topic string
	What  string // "partitions" or "cleanup.policy"
	Want  string
	Got   string
}

func (e *TopicMismatchError) Error() string {
	return fmt.Sprintf("kafka: topic %q has %s %s, want %s: fix or delete the topic", e.Topic, e.What, e.Got, e.Want)
}

// Unwrap makes errors.Is(err, ErrTopicMismatch) true.
func (e *TopicMismatchError) Unwrap() error { return ErrTopicMismatch }

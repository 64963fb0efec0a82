package kafka

import (
	"errors"
)

var (
	// ErrTopicNotFound is returned when a topic does not exist.
	ErrTopicNotFound = errors.New("kafka: topic not found")

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

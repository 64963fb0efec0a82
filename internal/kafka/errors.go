package kafka

import (
	"errors"
	"fmt"
)

var (
	// ErrTopicMismatch is wrapped by every *TopicMismatchError (the root
	// package's ErrTopicMismatch is this value).
	ErrTopicMismatch = errors.New("kafka: existing topic does not match its specification")

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

	// ErrTxnLostInOutage is wrapped by a transaction call that met
	// fencing (INVALID_PRODUCER_EPOCH, PRODUCER_FENCED) while this
	// process ran and waited on Kafka: a connection to a broker failed
	// during the transaction, or its writes were retried for half its
	// timeout or more (NOT_ENOUGH_REPLICAS while a topic has fewer
	// in-sync replicas than its min.insync.replicas; requests timing
	// out). The broker aborted the transaction for its timeout; nothing
	// of it committed. IsUnreachable reports it: close the session and
	// start a new one. A process that did not run during the transaction
	// (frozen) gets ErrFenced instead (txnwatch.go).
	ErrTxnLostInOutage = errors.New("the transaction did not complete within its timeout while the brokers refused or did not answer its writes " +
		"(NOT_ENOUGH_REPLICAS: a topic has fewer in-sync replicas than its min.insync.replicas; or a broker unreachable), and the broker aborted it")

	// ErrCommitNotMade is wrapped by WriteTransaction and
	// WriteTransactionSeq when franz-go aborted the transaction it was
	// asked to commit while reporting success (emptyabort.go): nothing of
	// it committed; write it again.
	ErrCommitNotMade = errors.New("kafka: the transaction was aborted instead of committed (the Kafka client found none of its produced partitions registered in it); nothing was committed: try again")

	// ErrOffsetOutOfRange is returned when a reader's start offset is not in
	// the partition: below its log start (records were deleted) or above its
	// high watermark (the topic was recreated or truncated). A state shard
	// seeing it must be wiped and restored from the changelog start.
	ErrOffsetOutOfRange = errors.New("kafka: offset out of range")
)

// ErrRecordTooLarge is wrapped by a *RecordTooLargeError.
var ErrRecordTooLarge = errors.New("kafka: record too large")

// RecordTooLargeError is a record that does not fit the producer's
// per-record limit (SessionConfig.MaxRecordBytes). It is found before
// anything is sent, so only the transaction it was meant for is lost.
type RecordTooLargeError struct {
	Topic     string
	Partition int32 // AnyPartition when the producer was to choose
	Key       []byte
	Size      int // RecordBatchBytes of the record
	Limit     int // the MaxRecordBytes in force
}

func (e *RecordTooLargeError) Error() string {
	return fmt.Sprintf("kafka: a record of %d bytes (key %.64q) for topic %q is over the producer's limit of %d bytes "+
		"(client side; kstate.Options.Kafka.MaxRecordBytes, which must not exceed the topic's max.message.bytes)",
		e.Size, e.Key, e.Topic, e.Limit)
}

func (e *RecordTooLargeError) Unwrap() error { return ErrRecordTooLarge }

// TopicMismatchError says how an existing topic differs from what kstate
// needs (EnsureTopic). The root package turns it into the public
// kstate.TopicMismatchError.
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

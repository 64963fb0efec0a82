package kstate

import (
	"errors"

	"github.com/kstate/kstate/internal/kafka"
)

// ErrTopicMismatch is wrapped by every *TopicMismatchError.
var ErrTopicMismatch = kafka.ErrTopicMismatch

// TopicMismatchError is returned by Run (and SetInputOffsets) when an
// existing topic kstate needs differs from what it needs: a changelog or
// repartition topic with another partition count, or a changelog that is
// not compacted. Fix the topic (or delete it so kstate recreates it);
// kstate never alters a topic it did not create, because a silent change
// (say, of the partition count of a changelog) would corrupt state. It
// matches ErrTopicMismatch. See docs/OPERATIONS.md.
type TopicMismatchError struct {
	Topic string
	What  string // "partitions" or "cleanup.policy"
	Want  string
	Got   string
	err   error // the whole error, for its message
}

func (e *TopicMismatchError) Error() string { return e.err.Error() }

// Unwrap makes errors.Is(err, ErrTopicMismatch) true.
func (e *TopicMismatchError) Unwrap() error { return ErrTopicMismatch }

// topicMismatch converts internal/kafka's *TopicMismatchError in err,
// keeping err's message (which says which topic and why kstate needs it);
// ok is false when err has none.
func topicMismatch(err error) (*TopicMismatchError, bool) {
	var tm *kafka.TopicMismatchError
	if !errors.As(err, &tm) {
		return nil, false
	}
	return &TopicMismatchError{Topic: tm.Topic, What: tm.What, Want: tm.Want, Got: tm.Got, err: err}, true
}

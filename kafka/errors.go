package kafka

import (
	"errors"
	"fmt"
)

// ErrTopicMismatch is wrapped by every *TopicMismatchError.
var ErrTopicMismatch = errors.New("kafka: existing topic does not match its specification")

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

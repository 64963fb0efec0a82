package kstate

import "github.com/kstate/kstate/internal/kafka"

// SetRetriableForTest replaces the classification of retriable Kafka
// errors (sessionErr, and the Kafka session's settling of an unconfirmed
// commit) until restore is called: a test breaks it on purpose to show that
// a fault case then fails.
func SetRetriableForTest(f func(error) bool) (restore func()) {
	old := isRetriable
	isRetriable = f
	restoreKafka := kafka.SetRetriableForTest(f)
	return func() { isRetriable = old; restoreKafka() }
}

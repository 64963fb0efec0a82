// Package kafka is the parent of kstate's Kafka tools for users; it has no
// identifiers of its own:
//
//   - kafka/embedded: an in-process Kafka cluster for demos and fast tests
//     (never linked into a production binary that does not import it);
//   - kafka/kafkatest: a real Kafka broker for integration tests, the way
//     kstate's own tests get one.
//
// The errors about a cluster kstate cannot run on as it is (such as
// kstate.TopicMismatchError) are package kstate's, with the other errors
// Run returns. The Kafka client itself (franz-go) is an implementation
// detail of the engine and does not appear in kstate's public API.
package kafka

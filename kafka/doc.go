// Package kafka holds what a kstate user configures or matches about Kafka
// itself: the errors that describe a cluster kstate cannot run on as it is.
// Connection settings (TLS, SASL) will live here too.
//
// Subpackages:
//
//   - kafka/embedded: an in-process Kafka cluster for demos and fast tests
//     (never linked into a production binary that does not import it);
//   - kafka/kafkatest: a real Kafka broker for integration tests, the way
//     kstate's own tests get one.
//
// The Kafka client itself (franz-go) is an implementation detail of the
// engine and does not appear in kstate's public API.
package kafka

// Package integration holds the tests that run against a real Apache Kafka
// broker, obtained by package kafka/kafkatest with RequireReal. They are
// part of `make test` and of CI, where a missing broker fails the run.
package integration

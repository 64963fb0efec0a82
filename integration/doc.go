// Package integration holds the tests that run against a real Apache Kafka
// broker (see package harness for how one is obtained). They are part of
// `make test` and of CI, where a missing broker fails the run.
package integration

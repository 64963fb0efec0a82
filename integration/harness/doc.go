// Package harness gives integration tests the bootstrap address of a real
// Apache Kafka broker. It tries, in order:
//
//  1. KSTATE_KAFKA_BROKERS (comma-separated): a cluster the user runs;
//  2. a healthy Docker engine: the testcontainers-go Kafka module;
//  3. Java + Maven: a real Apache Kafka broker (KRaft, one combined
//     broker+controller) run from the official jars on Maven Central, resolved
//     once into ~/.cache/kstate/kafka-<version>/ and started on free loopback
//     ports with a temporary log directory that is deleted when it stops.
//
// When none works the tests are skipped with one loud line, except when
// CI=true: then they fail, so a CI run can never pass without a real broker.
package harness

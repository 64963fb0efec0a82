// Package integrationtest shows how to test a kstate service against a real
// Kafka, the way kstate tests itself. counter.go is the service (a word
// counter and the function that builds its kstate.Topology and Options); counter_test.go
// is its integration test.
//
// To use it in your own service, copy counter_test.go next to your code and
// keep its two parts:
//
//   - TestMain calls kafkatest.Main, which stops the broker after the tests;
//   - each test calls kafkatest.Start(t), creates its topics with
//     CreateTopic (unique names, so tests and reruns never share records),
//     runs the application on Brokers() in a goroutine, produces input with
//     Produce and checks the committed output with ReadCommitted.
//
// Start uses, in order, the cluster in KSTATE_KAFKA_BROKERS, Kafka in Docker
// (testcontainers), Apache Kafka run from the Maven jars when Java and Maven
// are installed, and otherwise the in-process kafka/embedded cluster; the
// test log says which. Pass kafkatest.RequireReal() to Start for tests that
// must not run on the in-process stand-in; with CI=true they then fail
// instead of being skipped when no real broker can be had.
//
//	go test -v ./examples/integrationtest/
package integrationtest

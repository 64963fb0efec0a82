// Package kafkatest gives a test a Kafka cluster to run a kstate
// application against: the way kstate's own integration tests get one, for
// the integration tests of your services.
//
//	func TestMain(m *testing.M) { os.Exit(kafkatest.Main(m)) }
//
//	func TestMyService(t *testing.T) {
//		k := kafkatest.Start(t)
//		in := k.CreateTopic(t, "orders", 3)
//		// ... run the kstate.App on k.Brokers(), k.Produce(t, in, ...),
//		// then check k.ReadCommitted(t, out, n, time.Minute).
//	}
//
// The first Start in a test binary obtains one cluster, which every test of
// the binary then shares (hence the unique topic names of CreateTopic and
// Name). It tries, in order:
//
//  1. KSTATE_KAFKA_BROKERS (comma-separated): a cluster you run, used as is;
//  2. a healthy Docker engine: the testcontainers-go Kafka module
//     (image confluentinc/confluent-local);
//  3. Java and Maven on PATH: a real Apache Kafka broker (KRaft, one
//     combined broker+controller) run from the official jars on Maven
//     Central, resolved once into ~/.cache/kstate/ ($KSTATE_CACHE_DIR) and
//     started on free loopback ports with a temporary log directory and
//     no time retention (a broker's default, 7 days from each record's
//     own timestamp, would delete records with fixed old event times at
//     its next retention check, in the middle of a test; a cluster of
//     yours keeps its own settings);
//  4. otherwise the in-process cluster of package kafka/embedded, which
//     completes transactions synchronously and so hides timing races that a
//     real broker shows.
//
// The choice, and why earlier ones were passed over, is logged with t.Logf
// and once per test binary to stderr. A test that must not run on the
// in-process cluster asks for RequireReal: without a real broker it is then
// skipped with a loud message, or fails when the environment variable
// CI=true, so that a CI run cannot pass without a real broker.
//
// Main stops the broker after the tests. Without it the Docker container is
// removed by testcontainers' reaper and the jar broker is killed when the
// test binary exits, but its temporary directory is left behind.
//
// The records of Produce and ReadCommitted are the package's own Record:
// the Kafka client kstate uses is not part of its API.
package kafkatest

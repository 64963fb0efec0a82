package integration

import (
	"os"
	"testing"

	"github.com/kstate/kstate"
	"github.com/kstate/kstate/kafka/kafkatest"
)

func TestMain(m *testing.M) { os.Exit(kafkatest.Main(m)) }

// realKafka is the real broker every test here runs on, never the embedded
// stand-in: without one the tests are skipped, or fail when CI=true.
func realKafka(t testing.TB) *kafkatest.Cluster {
	t.Helper()
	return kafkatest.Start(t, kafkatest.RequireReal())
}

// Every test here shares one broker and names its own topics, groups and
// state directories (newSpecEnv, kafkatest.Name, t.TempDir), so most call
// t.Parallel(): their time is spent waiting on the broker, on child
// processes and on session timeouts, not on the CPU. A test that asserts a
// duration (a restart's first commit, a shutdown, a commit latency), or
// that failed beside the parallel ones because something had not caught up
// yet, is not parallel and says why: Go runs it before the parallel ones,
// alone in this package. Tests that kill or stop a broker are long tests.

// longTest skips t unless KSTATE_LONG is set: `make test` stays within its
// 10-minute budget, `make test-long` runs these too (broker outages of tens
// of seconds, soak-like runs, and the variants whose paths a shorter test
// in `make test` proves on the real broker: each says which).
func longTest(t testing.TB) {
	t.Helper()
	if os.Getenv("KSTATE_LONG") == "" {
		t.Skip("long test: run with KSTATE_LONG=1 (make test-long)")
	}
}

// testApp is a test application's kstate.Topology and kstate.Options
// together: they share no field name, so each field is promoted and a
// test edits one value (cfg.Kafka.Brokers, cfg.Output.Topic).
type testApp[K, I, O any] struct {
	kstate.Topology[K, I, O]
	kstate.Options
}

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

// longTest skips t unless KSTATE_LONG is set: `make test` stays within its
// 10-minute budget, `make test-long` runs these too (broker outages of tens
// of seconds, soak-like runs).
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

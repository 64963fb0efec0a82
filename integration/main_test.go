package integration

import (
	"os"
	"testing"

	"github.com/kstate/kstate/kafka/kafkatest"
)

func TestMain(m *testing.M) { os.Exit(kafkatest.Main(m)) }

// realKafka is the real broker every test here runs on, never the embedded
// stand-in: without one the tests are skipped, or fail when CI=true.
func realKafka(t testing.TB) *kafkatest.Cluster {
	t.Helper()
	return kafkatest.Start(t, kafkatest.RequireReal())
}

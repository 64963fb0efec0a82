package integration

import (
	"os"
	"testing"

	"github.com/kstate/kstate/internal/kafka/kafkatest"
)

// TestKafkaTxnLatency measures the exactly-once loop (Poll 1000 → Begin →
// Produce 1000 → End(commit)) on the real broker; run with KSTATE_MEASURE=1
// (numbers in the log).
func TestKafkaTxnLatency(t *testing.T) {
	if os.Getenv("KSTATE_MEASURE") == "" {
		t.Skip("set KSTATE_MEASURE=1 to measure")
	}
	k := realKafka(t)
	t.Logf("real broker (%s): %v", k.Source(), kafkatest.MeasureTxnLatency(t, k.Brokers(), 200, 1000))
}

package kafka_test

import (
	"os"
	"testing"

	"github.com/kstate/kstate/internal/kafka/kafkatest"
	"github.com/kstate/kstate/kafka/embedded"
)

// TestScenariosEmbedded runs the scenarios every Kafka must pass on the
// embedded cluster. integration/ runs the same ones on a real broker.
func TestScenariosEmbedded(t *testing.T) {
	e, err := embedded.Start(embedded.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Close)
	for _, sc := range kafkatest.Scenarios() {
		t.Run(sc.Name, func(t *testing.T) {
			t.Parallel()
			sc.Run(t, e.Brokers())
		})
	}
}

// TestTxnLatencyEmbedded measures the transaction loop on kfake; run with
// KSTATE_MEASURE=1 (numbers in the log).
func TestTxnLatencyEmbedded(t *testing.T) {
	if os.Getenv("KSTATE_MEASURE") == "" {
		t.Skip("set KSTATE_MEASURE=1 to measure")
	}
	e, err := embedded.Start(embedded.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Close)
	t.Logf("kfake: %v", kafkatest.MeasureTxnLatency(t, e.Brokers(), 200, 1000))
}

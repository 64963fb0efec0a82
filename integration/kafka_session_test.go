package integration

import (
	"testing"

	"github.com/kstate/kstate/internal/kafka/kafkatest"
)

// TestKafkaScenarios runs package kafka's scenarios (session commit, abort
// and rewind, fencing, rebalance abort, EnsureTopic, PartitionReader over
// aborted transactions and trailing markers, ReadAll) on the real broker.
// kafka's own tests run the same functions on kfake, which completes
// transactions synchronously; this is where the timing of a real
// transaction coordinator (PREPARE_COMMIT, markers written asynchronously,
// LSO lagging the high watermark) is exercised.
func TestKafkaScenarios(t *testing.T) {
	// Not parallel (main_test.go): ReaderTails compares the reader's end
	// with the high watermark right after an aborted transaction, whose
	// marker the broker writes asynchronously (it failed once beside the
	// parallel tests). Its scenarios run in parallel with each other.
	brokers := realKafka(t).Brokers()
	for _, sc := range kafkatest.Scenarios() {
		t.Run(sc.Name, func(t *testing.T) {
			t.Parallel()
			sc.Run(t, brokers)
		})
	}
}

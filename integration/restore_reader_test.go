package integration

import (
	"testing"

	"github.com/kstate/kstate/internal/kafka/kafkatest"
)

// TestReaderNextChangelogAborted: the restore reader's NextChangelog over
// several fetches with an aborted transaction in the middle, on the real
// broker (kfake's fetch leaves out that transaction's abort index; see the
// scenario's doc).
func TestReaderNextChangelogAborted(t *testing.T) {
	t.Parallel()
	kafkatest.ReaderNextChangelogAborted(t, realKafka(t).Brokers())
}

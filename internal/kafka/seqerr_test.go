package kafka_test

import (
	"slices"
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kstate/kstate/internal/kafka/kafkatest"
)

// TestTxnRedoAfterSequenceError: a transaction's produce refused with
// OUT_OF_ORDER_SEQUENCE_NUMBER (seen on kfake under make test's load, a
// transaction's first produce racing the previous one's epoch bump) is
// aborted and redone on the same session, which then goes on committing:
// the records of every transaction are in the output once, in order, and
// the aborted attempt's are not.
func TestTxnRedoAfterSequenceError(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "out"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close) // after the session's own cleanup
	brokers := c.ListenAddrs()
	w := kafkatest.TxnWriter(t, brokers, kafkatest.Name(t, "txn"))
	kafkatest.Txn(t, w, "out", 0, true, "a")
	h := c.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Produce}, Topic: "out", Err: kerr.OutOfOrderSequenceNumber})
	kafkatest.Txn(t, w, "out", 0, true, "b1", "b2")
	if n := h.Hits(); n != 1 {
		t.Fatalf("the fault answered %d produce requests, want 1", n)
	}
	kafkatest.Txn(t, w, "out", 0, true, "c")
	if got := kafkatest.Values(kafkatest.ReadAll(t, brokers, "out")); !slices.Equal(got, []string{"a", "b1", "b2", "c"}) {
		t.Fatalf("output %v, want [a b1 b2 c]", got)
	}
}

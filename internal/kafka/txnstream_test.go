package kafka

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
)

// WriteTransactionSeq writes more records than it keeps in flight, all
// visible to read_committed readers; a produce that fails in the middle
// (a partition the topic does not have) aborts the transaction: nothing of
// it is visible, the records before the failure included.
func TestWriteTransactionSeq(t *testing.T) {
	c, _ := newFakeAdmin(t, kfake.SeedTopics(2, "log"))
	cc := ClientConfig{Brokers: c.ListenAddrs()}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	const n = 20_000
	seq := func(bad int) func(func(Record) bool) {
		return func(yield func(Record) bool) {
			for i := range n {
				p := int32(i % 2)
				if i == bad {
					p = 7
				}
				if !yield(Record{Topic: "log", Partition: p, Key: fmt.Appendf(nil, "k%d", i), Value: []byte("v")}) {
					return
				}
			}
		}
	}
	committed := func() int {
		total := 0
		for p := range int32(2) {
			r, err := cc.NewPartitionReader(ctx, "log", p, 0)
			if err != nil {
				t.Fatal(err)
			}
			m, err := r.ReadView(ctx, nil)
			r.Close()
			if err != nil {
				t.Fatal(err)
			}
			total += len(m)
		}
		return total
	}
	if _, err := cc.WriteTransactionSeq(ctx, "seq-bad", time.Minute, seq(n/2)); err == nil {
		t.Fatal("a record for a missing partition was accepted")
	}
	if got := committed(); got != 0 {
		t.Fatalf("%d records visible after a failed transaction, want 0", got)
	}
	wrote, err := cc.WriteTransactionSeq(ctx, "seq-ok", time.Minute, seq(-1))
	if err != nil || wrote != n {
		t.Fatalf("WriteTransactionSeq = %d, %v; want %d", wrote, err, n)
	}
	if got := committed(); got != n {
		t.Fatalf("%d records visible, want %d", got, n)
	}
}

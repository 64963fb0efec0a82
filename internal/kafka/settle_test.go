package kafka_test

import (
	"context"
	"testing"
	"time"

	"github.com/kstate/kstate/internal/kafka"
	"github.com/kstate/kstate/kafka/embedded"
)

// A transaction's first produce waits until TxnSettle after the previous
// End returned (the coordinator's markers; see Session.settle), the
// transaction's later produces do not, nor does a first produce that comes
// later than that anyway; a negative TxnSettle never waits.
func TestSessionSettlesAfterEnd(t *testing.T) {
	// Long enough that a session's first produce, which also initialises
	// its producer id and transaction, stays under it on a loaded machine
	// (it took 648 ms once under make test's -race at 300 ms).
	const settle = time.Second
	e, err := embedded.Start(embedded.Options{Topics: map[string]int{"t": 2, "in": 1}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Close)
	newSession := func(group string, settle time.Duration) *kafka.Session {
		s, err := kafka.NewSession(kafka.SessionConfig{Brokers: e.Brokers(), GroupID: group, Topics: []string{"in"}, TxnSettle: settle})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}
	ctx := context.Background()
	recs := []kafka.Record{{Topic: "t", Partition: 0, Value: []byte("a")}, {Topic: "t", Partition: 1, Value: []byte("b")}}
	// txn runs one transaction: sleep after Begin, then a Produce and a
	// ProduceAsync. It returns how long each took, measured from the end of
	// the previous End, and ends the transaction.
	txn := func(s *kafka.Session, sleep time.Duration, ended time.Time) (first, second time.Duration, end time.Time) {
		t.Helper()
		if err := s.Begin(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(sleep)
		if _, err := s.Produce(ctx, recs); err != nil {
			t.Fatal(err)
		}
		first = time.Since(ended)
		t1 := time.Now()
		done := make(chan error, 1)
		s.ProduceAsync(ctx, recs, func(_ []int64, err error) { done <- err })
		second = time.Since(t1)
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		if _, err := s.End(ctx, true); err != nil {
			t.Fatal(err)
		}
		return first, second, time.Now()
	}

	s := newSession("g", settle)
	// The first transaction of a session follows no End: no wait.
	first, _, ended := txn(s, 0, time.Now())
	if first >= settle {
		t.Fatalf("first transaction's produce took %v: it waited for a previous End that never was", first)
	}
	// Right after an End: the first produce waits, the second does not.
	first, second, ended := txn(s, 0, ended)
	if first < settle {
		t.Fatalf("produce %v after End: want it to wait until %v after End", first, settle)
	}
	if second >= settle {
		t.Fatalf("the transaction's second produce took %v: only the first waits", second)
	}
	// A produce later than TxnSettle after End does not wait again.
	first, _, _ = txn(s, settle+50*time.Millisecond, ended)
	if first >= 2*settle {
		t.Fatalf("produce %v after End, %v after Begin: it waited although TxnSettle had passed", first, settle+50*time.Millisecond)
	}

	// TxnSettle < 0: never waits.
	off := newSession("g2", -1)
	_, _, ended = txn(off, 0, time.Now())
	if first, _, _ = txn(off, 0, ended); first >= settle {
		t.Fatalf("TxnSettle -1: produce %v after End", first)
	}
}

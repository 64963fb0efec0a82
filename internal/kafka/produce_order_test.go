package kafka_test

import (
	"context"
	"sync"
	"testing"

	"github.com/kstate/kstate/internal/kafka"
	"github.com/kstate/kstate/kafka/embedded"
)

// Regression: ProduceSync completes partition by partition; Produce must
// still return offsets in the order of its input (the engine maps each
// task's last changelog record to its shard offset).
func TestSessionProduceReturnsOffsetsInInputOrder(t *testing.T) {
	s := produceSession(t, 8)
	ctx := context.Background()
	for round := 0; round < 3; round++ {
		s.Begin()
		var recs []kafka.Record
		for i := 0; i < 64; i++ {
			recs = append(recs, kafka.Record{Topic: "t", Partition: int32(i % 8), Value: []byte("v")})
		}
		offs, err := s.Produce(ctx, recs)
		if err != nil {
			t.Fatal(err)
		}
		// Within one partition offsets must increase in input order.
		last := map[int32]int64{}
		for i, r := range recs {
			if o, ok := last[r.Partition]; ok && offs[i] != o+1 {
				t.Fatalf("round %d: record %d (partition %d) got offset %d after %d: offsets are not in input order: %v", round, i, r.Partition, offs[i], o, offs)
			}
			last[r.Partition] = offs[i]
		}
		s.End(ctx, true)
	}
}

// ProduceAsync: calls made one after the other land in call order in
// every partition they share, each call's offsets come back in its input
// order, and End commits them all.
func TestSessionProduceAsyncKeepsCallOrder(t *testing.T) {
	s := produceSession(t, 4)
	ctx := context.Background()
	if err := s.Begin(); err != nil {
		t.Fatal(err)
	}
	const calls, perCall = 5, 40
	got := make([][]int64, calls)
	errs := make([]error, calls)
	var wg sync.WaitGroup
	for c := range calls {
		var recs []kafka.Record
		for i := range perCall {
			recs = append(recs, kafka.Record{Topic: "t", Partition: int32(i % 4), Value: []byte("v")})
		}
		wg.Add(1)
		s.ProduceAsync(ctx, recs, func(offs []int64, err error) {
			got[c], errs[c] = offs, err
			wg.Done()
		})
	}
	wg.Add(1)
	s.ProduceAsync(ctx, nil, func(offs []int64, err error) {
		if offs != nil || err != nil {
			t.Errorf("empty ProduceAsync: %v, %v", offs, err)
		}
		wg.Done()
	})
	wg.Wait()
	last := map[int32]int64{}
	for c := range calls {
		if errs[c] != nil {
			t.Fatalf("call %d: %v", c, errs[c])
		}
		if len(got[c]) != perCall {
			t.Fatalf("call %d: %d offsets for %d records", c, len(got[c]), perCall)
		}
		for i, o := range got[c] {
			p := int32(i % 4)
			if l, ok := last[p]; ok && o != l+1 {
				t.Fatalf("call %d record %d (partition %d): offset %d after %d: not in call order", c, i, p, o, l)
			}
			last[p] = o
		}
	}
	if ok, err := s.End(ctx, true); !ok || err != nil {
		t.Fatalf("End: %v, %v", ok, err)
	}
	// Outside a transaction: an error, not a hang.
	wg.Add(1)
	s.ProduceAsync(ctx, []kafka.Record{{Topic: "t", Value: []byte("v")}}, func(_ []int64, err error) {
		if err == nil {
			t.Error("ProduceAsync outside a transaction succeeded")
		}
		wg.Done()
	})
	wg.Wait()
}

// produceSession is a session on an embedded cluster with topic "t" of
// partitions partitions and input topic "in", closed with the test.
func produceSession(t *testing.T, partitions int) *kafka.Session {
	t.Helper()
	e, err := embedded.Start(embedded.Options{Topics: map[string]int{"t": partitions, "in": 1}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Close)
	s, err := kafka.NewSession(kafka.SessionConfig{Brokers: e.Brokers(), GroupID: "g", Topics: []string{"in"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

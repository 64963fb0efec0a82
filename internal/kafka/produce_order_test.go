package kafka_test

import (
	"context"
	"testing"

	"github.com/kstate/kstate/internal/kafka"
	"github.com/kstate/kstate/kafka/embedded"
)

// Regression: ProduceSync completes partition by partition; Produce must
// still return offsets in the order of its input (the engine maps each
// task's last changelog record to its shard offset).
func TestSessionProduceReturnsOffsetsInInputOrder(t *testing.T) {
	e, err := embedded.Start(embedded.Options{Topics: map[string]int{"t": 8, "in": 1}})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	s, err := kafka.NewSession(kafka.SessionConfig{Brokers: e.Brokers(), GroupID: "g", Topics: []string{"in"}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
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

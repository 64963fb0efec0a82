package integration

import (
	"context"
	"testing"
	"time"

	"github.com/kstate/kstate/internal/kafka"
	"github.com/kstate/kstate/kafka/kafkatest"
)

// A group that never committed has no committed offsets: on the real
// broker as on the embedded Kafka (kfake answers GROUP_ID_NOT_FOUND, which
// Admin.CommittedOffsets turns into the same empty answer; see
// TestEmbeddedRunToEndNewApplication), so RunToEnd of a new application
// starts from nothing on both.
func TestCommittedOffsetsOfNewGroup(t *testing.T) {
	cluster := realKafka(t)
	topic := cluster.CreateTopic(t, "newgroup-in", 2)
	cluster.Produce(t, topic, kafkatest.Record{Key: []byte("k"), Value: []byte("v")})
	adm, err := kafka.NewAdmin(cluster.Brokers())
	if err != nil {
		t.Fatal(err)
	}
	defer adm.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	offs, err := adm.CommittedOffsets(ctx, kafkatest.Name(t, "never-committed"), topic)
	if err != nil || len(offs) != 0 {
		t.Fatalf("CommittedOffsets of a new group: %v, %v; want none and no error", offs, err)
	}
}

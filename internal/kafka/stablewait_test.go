package kafka

import (
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestCommittedOffsetsPromptAfterPendingCommit: a partition's new owner
// fetches the group's offsets stable (CommittedOffsets, RequireStable) while
// the previous owner's last transaction still holds an offset commit (a
// rebalance cut it; it is being aborted or committed). The answer must come
// soon after that transaction ends, not at the next step of a doubling
// backoff: with retries at 10, 30, 70, 150, 310, 630, 1130 ms a transaction
// ending at 700 ms was seen at 1.13 s, which made every partition moved in
// a join pause 0.65-0.9 s in its "restore" of a few hundred records
// (docs/BENCHMARKS.md, "The join's restore time").
func TestCommittedOffsetsPromptAfterPendingCommit(t *testing.T) {
	c, err := kfake.NewCluster(kfake.SeedTopics(1, "in", "out"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	prod, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.TransactionalID("g-i1"), kgo.DefaultProduceTopic("out"))
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	if err := prod.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	if err := prod.ProduceSync(ctx, &kgo.Record{Value: []byte("v")}).FirstErr(); err != nil {
		t.Fatal(err)
	}
	pid, epoch, err := prod.ProducerID(ctx)
	if err != nil {
		t.Fatal(err)
	}
	adm, err := NewAdmin(c.ListenAddrs())
	if err != nil {
		t.Fatal(err)
	}
	defer adm.Close()
	tds, err := adm.adm.ListTopics(ctx, "in")
	if err != nil {
		t.Fatal(err)
	}
	// The group exists with an earlier commit (a previous batch).
	var first kadm.Offsets
	first.AddOffset("in", 0, 1, -1)
	if err := adm.adm.CommitAllOffsets(ctx, "g", first); err != nil {
		t.Fatal(err)
	}
	txnID := "g-i1"
	add := kmsg.NewPtrAddOffsetsToTxnRequest()
	add.TransactionalID, add.ProducerID, add.ProducerEpoch, add.Group = txnID, pid, epoch, "g"
	if r, err := add.RequestWith(ctx, prod); err != nil || r.ErrorCode != 0 {
		t.Fatalf("AddOffsetsToTxn: %v %v", err, r)
	}
	oc := kmsg.NewPtrTxnOffsetCommitRequest()
	oc.TransactionalID, oc.Group, oc.ProducerID, oc.ProducerEpoch, oc.Generation = txnID, "g", pid, epoch, -1
	tp := kmsg.NewTxnOffsetCommitRequestTopic()
	tp.Topic, tp.TopicID = "in", tds["in"].ID
	pp := kmsg.NewTxnOffsetCommitRequestTopicPartition()
	pp.Partition, pp.Offset = 0, 42
	tp.Partitions = append(tp.Partitions, pp)
	oc.Topics = append(oc.Topics, tp)
	if r, err := oc.RequestWith(ctx, prod); err != nil || kerr.ErrorForCode(r.Topics[0].Partitions[0].ErrorCode) != nil {
		t.Fatalf("TxnOffsetCommit: %v %v", err, r)
	}

	ended := make(chan time.Time, 1)
	go func() {
		time.Sleep(700 * time.Millisecond)
		if err := prod.EndTransaction(ctx, kgo.TryCommit); err != nil {
			t.Error(err)
		}
		ended <- time.Now()
	}()
	offs, err := adm.CommittedOffsets(ctx, "g", "in")
	got := time.Now()
	if err != nil {
		t.Fatal(err)
	}
	if offs[0] != 42 {
		t.Fatalf("committed offsets %v, want partition 0 at 42", offs)
	}
	late := got.Sub(<-ended)
	t.Logf("answered %v after the transaction ended", late)
	if late > 250*time.Millisecond {
		t.Fatalf("the stable offset fetch answered %v after the pending transaction ended; want within 250ms (it polls too coarsely)", late)
	}
}

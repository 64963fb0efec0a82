package kafka

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kstate/kstate/internal/faultdial"
	"github.com/kstate/kstate/internal/testlog"
)

// TestUnconfirmedAbortOfRevokedBatch: a rebalance revokes partitions of a
// member with a batch open, so franz-go turns the member's commit into an
// abort, and that abort's EndTxn is cut off on the way (the coordinator's
// broker refuses dials for 2 s, franz-go gives the request up). No commit
// was sent: once the producer id is initialised again, the transaction is
// aborted for sure. End must say so (committed=false, no error: redo the
// batch in this session, as after any rebalance) instead of failing with
// the connection error, for which the engine rebuilt its whole session
// (closing every task, rejoining, restoring). Nothing of the batch may be
// visible, and the session goes on committing.
func TestUnconfirmedAbortOfRevokedBatch(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(2, "in", "out"),
		kfake.GroupMinSessionTimeout(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	brokers := c.ListenAddrs()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	p, err := NewProducer(brokers)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	for i := range 20 {
		if err := p.Produce(ctx, Record{Topic: "in", Partition: int32(i % 2), Key: []byte(fmt.Sprint(i)), Value: []byte("v")}); err != nil {
			t.Fatal(err)
		}
	}

	cut := &faultdial.Cutter{Mode: faultdial.LostRequest, Refuse: 2 * time.Second, Abort: true}
	log, logs := testlog.Warnings(t)
	newSession := func(id string, opts ...kgo.Opt) (*Session, *atomic.Int32) {
		var assigned atomic.Int32
		s, err := NewSession(SessionConfig{Brokers: brokers, GroupID: "g", Topics: []string{"in"}, InstanceID: id,
			SessionTimeout: 6 * time.Second, TransactionTimeout: 10 * time.Second, Logger: log,
			OnAssigned: func(_ context.Context, ps []Partition) { assigned.Add(int32(len(ps))) },
			Client:     ClientConfig{Extra: opts}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s, &assigned
	}
	// Fewer retries: franz-go gives the EndTxn up while the dials are
	// refused (its default 20 outlast 2 s of refusals).
	a, _ := newSession("a", kgo.Dialer(cut.Dial), kgo.RequestRetries(2))
	for n := 0; n == 0; {
		recs, err := a.Poll(ctx, 0)
		if err != nil {
			t.Fatal(err)
		}
		n = len(recs)
	}
	if err := a.Begin(); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Produce(ctx, []Record{{Topic: "out", Partition: 0, Value: []byte("of the revoked batch")}}); err != nil {
		t.Fatal(err)
	}

	// b joins: the rebalance revokes a partition of a's open batch
	// (a's client rejoins by itself; b's assignment comes after a's
	// revoke).
	cut.Arm()
	b, bAssigned := newSession("b")
	for bAssigned.Load() == 0 {
		pctx, pcancel := context.WithTimeout(ctx, 200*time.Millisecond)
		if _, err := b.Poll(pctx, 0); err != nil && pctx.Err() == nil {
			t.Fatal(err)
		}
		pcancel()
		if ctx.Err() != nil {
			t.Fatal("b was assigned nothing")
		}
	}

	committed, err := a.End(ctx, true)
	if err != nil {
		t.Fatalf("End after the revoke and the cut abort: %v (the abort was not settled)", err)
	}
	if committed {
		t.Fatal("End reported the revoked batch committed")
	}
	if cut.Cuts() != 1 || cut.Failed() == 0 {
		t.Fatalf("the case did not happen: %d aborts cut, %d retries failed", cut.Cuts(), cut.Failed())
	}
	if !strings.Contains(logs.String(), "settled aborted") {
		t.Errorf("the log does not say the unconfirmed abort was settled")
	}

	// The session goes on: a batch of what a still owns commits (a
	// rebalance of b's arrival may abort an attempt first: redo it).
	for attempt := 1; ; attempt++ {
		var recs []Record
		for len(recs) == 0 {
			pctx, pcancel := context.WithTimeout(ctx, 500*time.Millisecond)
			recs, err = a.Poll(pctx, 0)
			pcancel()
			if err != nil && ctx.Err() == nil && pctx.Err() == nil {
				t.Fatal(err)
			}
			if ctx.Err() != nil {
				t.Fatal("a polled nothing after the settled abort")
			}
		}
		if err := a.Begin(); err != nil {
			t.Fatal(err)
		}
		if _, err := a.Produce(ctx, []Record{{Topic: "out", Partition: 1, Value: []byte("after")}}); err != nil {
			t.Fatal(err)
		}
		committed, err := a.End(ctx, true)
		if err != nil {
			t.Fatalf("End after the settled abort: %v", err)
		}
		if committed {
			break
		}
		if attempt == 5 {
			t.Fatal("a's commit after the settled abort was aborted 5 times")
		}
	}
	got, err := ReadAll(ctx, brokers, "out")
	if err != nil {
		t.Fatal(err)
	}
	var vals []string
	for _, r := range got {
		vals = append(vals, string(r.Value))
	}
	if len(vals) != 1 || vals[0] != "after" {
		t.Fatalf("out read committed: %q; want only the later batch's record", vals)
	}
}

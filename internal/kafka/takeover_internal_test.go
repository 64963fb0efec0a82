package kafka

import (
	"bytes"
	"context"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kstate/kstate/internal/group"
)

func TestDepartedOwners(t *testing.T) {
	prev := group.View{Partitions: 4, Members: []group.Member{
		{MemberID: "m1", InstanceID: "i1", Active: []int32{0, 1}},
		{MemberID: "m2", InstanceID: "i2", Active: []int32{2}},
		{MemberID: "m3", Active: []int32{3}}, // no instance id
	}}
	next := group.View{Partitions: 4, Members: []group.Member{
		{MemberID: "m2", InstanceID: "i2", Active: []int32{0, 1, 2, 3}},
	}}
	if got := departedOwners(prev, next, []int32{0, 1, 3}); !slices.Equal(got, []string{"i1"}) {
		t.Fatalf("departed owners %v, want [i1] (i1 once; m3 has no instance id)", got)
	}
	// A member still in the group (a cooperative move, a restart with a
	// new member id) has not departed.
	back := group.View{Partitions: 4, Members: []group.Member{
		{MemberID: "m1-new", InstanceID: "i1"}, {MemberID: "m2", InstanceID: "i2", Active: []int32{0, 1, 2, 3}},
	}}
	if got := departedOwners(prev, back, []int32{0, 1}); len(got) != 0 {
		t.Fatalf("departed owners %v, want none: i1 is in the group", got)
	}
	if got := departedOwners(group.View{}, next, []int32{0}); len(got) != 0 {
		t.Fatalf("departed owners %v without a previous view", got)
	}
}

// TestAbortDeparted: the member that takes over a partition of a member that
// left the group with a transaction open aborts it at once: the records of
// the transaction become aborted (the last stable offset reaches the high
// watermark), and the departed member's producer, were it alive, can no
// longer commit. A transaction that began after the departed member left
// (its next incarnation's) is left open. Without abortDeparted the
// transaction stays open until its timeout (a minute here).
func TestAbortDeparted(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "out"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	// The departed member i1's producer, its transaction open with a record.
	zombie := func(t *testing.T) *kgo.Client {
		t.Helper()
		cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.TransactionalID("app-i1"),
			kgo.TransactionTimeout(time.Minute), kgo.DefaultProduceTopic("out"))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(cl.Close)
		if err := cl.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		if err := cl.ProduceSync(ctx, &kgo.Record{Value: []byte("open")}).FirstErr(); err != nil {
			t.Fatal(err)
		}
		return cl
	}
	survivor, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(survivor.Close)
	adm := kadm.NewClient(survivor)
	stable := func() bool {
		lso, err1 := adm.ListCommittedOffsets(ctx, "out")
		hwm, err2 := adm.ListEndOffsets(ctx, "out")
		if err1 != nil || err2 != nil {
			t.Fatal(err1, err2)
		}
		l, _ := lso.Lookup("out", 0)
		h, _ := hwm.Lookup("out", 0)
		return l.Offset >= h.Offset
	}
	var logs bytes.Buffer
	newSession := func(txnID string) *Session {
		s := &Session{cfg: SessionConfig{GroupID: "app", InstanceID: "i2", TransactionalID: txnID, SessionTimeout: 6 * time.Second},
			log: slog.New(slog.NewTextHandler(&logs, nil))}
		s.client.Store(survivor)
		s.grp.view = group.View{Partitions: 2, Members: []group.Member{
			{MemberID: "m1", InstanceID: "i1", Active: []int32{0}}, {MemberID: "m2", InstanceID: "i2", Active: []int32{1}}}}
		s.grp.active = []int32{1}
		return s
	}
	s := newSession("app-i2")
	next := func(at time.Time) group.View {
		return group.View{Partitions: 2, At: at, Members: []group.Member{{MemberID: "m2", InstanceID: "i2", Active: []int32{0, 1}}}}
	}
	assigned := []int32{0, 1}

	t.Run("new incarnation left alone", func(t *testing.T) {
		z := zombie(t)
		// The group balanced just now: a transaction of a moment ago began
		// after i1 had been silent for its session timeout, so it is not
		// the departed incarnation's.
		s.abortDeparted(assigned, next(time.Now()))
		if stable() {
			t.Fatal("the transaction of a new incarnation was aborted")
		}
		if !strings.Contains(logs.String(), "a new incarnation") {
			t.Fatalf("log:\n%s", logs.String())
		}
		if err := z.EndTransaction(ctx, kgo.TryAbort); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("departed aborted", func(t *testing.T) {
		z := zombie(t)
		if stable() {
			t.Fatal("stable with a transaction open")
		}
		s.abortDeparted(assigned, next(time.Now().Add(10*time.Second)))
		if !stable() {
			t.Fatalf("the departed member's transaction is still open; log:\n%s", logs.String())
		}
		if !strings.Contains(logs.String(), "aborted the open transaction of a member that left the group") {
			t.Fatalf("log:\n%s", logs.String())
		}
		// The departed producer, had it been alive, is fenced.
		if err := z.EndTransaction(ctx, kgo.TryCommit); err == nil {
			t.Fatal("the departed member's producer committed after the abort")
		}
	})
	t.Run("own transactional id not derived", func(t *testing.T) {
		zombie(t)
		newSession("custom").abortDeparted(assigned, next(time.Now().Add(10*time.Second)))
		if stable() {
			t.Fatal("aborted although the members' transactional ids are not derived from their instance ids")
		}
	})
}

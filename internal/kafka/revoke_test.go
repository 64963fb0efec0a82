package kafka

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/kstate/kstate/internal/testlog"
)

// ownedView is what a Session's OnAssigned/OnRevoked/OnLost told its user
// the member owns (per partition number, over every input topic).
type ownedView struct {
	mu sync.Mutex
	m  map[Partition]bool
}

func (v *ownedView) config(cfg *SessionConfig) {
	v.m = map[Partition]bool{}
	cfg.OnAssigned = func(_ context.Context, ps []Partition) {
		v.mu.Lock()
		defer v.mu.Unlock()
		for _, p := range ps {
			v.m[p] = true
		}
	}
	cfg.OnRevoked = func(_ context.Context, ps []Partition) {
		v.mu.Lock()
		defer v.mu.Unlock()
		for _, p := range ps {
			delete(v.m, p)
		}
	}
}

func (v *ownedView) partitions() []Partition {
	v.mu.Lock()
	defer v.mu.Unlock()
	return slices.SortedFunc(maps.Keys(v.m), comparePartitions)
}

func comparePartitions(a, b Partition) int {
	if a.Topic != b.Topic {
		if a.Topic < b.Topic {
			return -1
		}
		return 1
	}
	return int(a.Partition - b.Partition)
}

// TestRevokeBetweenTransactionsReported: a member that goes through two
// rebalances without ending a transaction in between (idle, restoring, or
// one batch long enough under load) is told of both revokes. franz-go's
// GroupTransactSession calls the revoke (and lost) callback only once
// until the next End, so the second revoke used to be dropped: the engine
// kept the task of a partition the group had given to another member, and
// a sibling pipeline of the same process, its new owner, waited for the
// shard's lock until its restore gave up. Eager (range, several input
// topics) and cooperative-sticky (one input topic) alike; the member's
// view must match the group's assignment (kadm) after each join.
func TestRevokeBetweenTransactionsReported(t *testing.T) {
	for _, coPartitioned := range []bool{true, false} {
		t.Run(fmt.Sprintf("copartitioned=%v", coPartitioned), func(t *testing.T) {
			topics := []string{"in"}
			if coPartitioned {
				topics = []string{"in", "in2"}
			}
			c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(3, topics...),
				kfake.GroupMinSessionTimeout(100*time.Millisecond))
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			brokers := c.ListenAddrs()
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()

			views := map[string]*ownedView{}
			sessions := map[string]*Session{}
			var order []string
			defer func() {
				for _, s := range sessions {
					s.Close()
				}
			}()
			join := func(id string) {
				v := &ownedView{}
				cfg := SessionConfig{Brokers: brokers, GroupID: "g", Topics: topics, CoPartitioned: coPartitioned,
					InstanceID: id, SessionTimeout: 3 * time.Second, Logger: testlog.New(t)}
				v.config(&cfg)
				s, err := NewSession(cfg)
				if err != nil {
					t.Fatal(err)
				}
				views[id], sessions[id] = v, s
				order = append(order, id)
			}
			// poll polls every member (the callbacks run in Poll), never
			// beginning a transaction: idle members.
			poll := func() {
				for _, id := range order {
					pctx, pcancel := context.WithTimeout(ctx, 200*time.Millisecond)
					if _, err := sessions[id].Poll(pctx, 0); err != nil && pctx.Err() == nil {
						t.Fatalf("poll %s: %v", id, err)
					}
					pcancel()
				}
			}
			adm, err := NewAdmin(brokers)
			if err != nil {
				t.Fatal(err)
			}
			defer adm.Close()
			// settled: the group's assignment covers every partition,
			// and every member's view is its share of it.
			settled := func() (bool, string) {
				truth := map[string][]Partition{}
				for _, topic := range topics {
					owners, err := adm.PartitionOwners(ctx, "g", topic)
					if err != nil || len(owners) != 3 {
						return false, fmt.Sprintf("topic %s owners %v (%v)", topic, owners, err)
					}
					for p, m := range owners {
						truth[m.InstanceID] = append(truth[m.InstanceID], Partition{Topic: topic, Partition: p})
					}
				}
				for _, id := range order {
					want := slices.SortedFunc(slices.Values(truth[id]), comparePartitions)
					if got := views[id].partitions(); !slices.Equal(got, want) {
						return false, fmt.Sprintf("member %s was told it owns %v; the group assigned it %v", id, got, want)
					}
				}
				return true, ""
			}
			waitSettled := func(what string) {
				t.Helper()
				var why string
				for end := time.Now().Add(30 * time.Second); time.Now().Before(end); {
					poll()
					var ok bool
					if ok, why = settled(); ok {
						return
					}
				}
				t.Fatalf("%s: %s", what, why)
			}

			join("a")
			waitSettled("one member")
			// Two more members, one after the other: "a" sees two
			// rebalances and ends no transaction in between.
			join("b")
			waitSettled("two members")
			join("c")
			waitSettled("three members")
			t.Logf("views: a %v, b %v, c %v", views["a"].partitions(), views["b"].partitions(), views["c"].partitions())
		})
	}
}

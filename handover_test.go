package kstate_test

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/kstate/kstate"
	"github.com/kstate/kstate/internal/testprocs"
	"github.com/kstate/kstate/kafka/embedded"
	"github.com/kstate/kstate/serde"
)

// Two rebalances without a transaction in between, over two input topics:
// an idle instance with two pipelines ("i1" and "i1-p1") sees instance
// "i2" join, then instance "i0"; each join revokes partitions of i1's
// pipelines (written for the range balancer, which revoked every
// partition at every rebalance and moved partition 1 from pipeline 1 to
// its sibling; kstate's balancer, cooperative and sticky, moves fewer and
// places them by its own rules, so the owners are no longer pinned here:
// internal/balancer's tests pin its decisions). franz-go reports only the first
// revoke to a member until its next transaction ends; before the fix the
// second was lost: pipeline 1 kept partition 1's task and its shard's
// lock, and pipeline 0, the new owner, waited for the lock until its
// restore gave up (integration's TestInputsTwoCodecsOneCounter under load).
// Every partition must end up owned by exactly one ready pipeline, and
// the counts stay exact.
func TestEmbeddedPipelinesIdleRebalanceReleasesShards(t *testing.T) {
	const parts = 3
	e, err := embedded.Start(embedded.Options{Partitions: parts, Topics: map[string]int{"in": parts, "in2": parts, "out": parts}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Close)
	brokers := e.Brokers()
	base := config(brokers, t.TempDir(), testprocs.NewCounter)
	base.Inputs = kstate.Topics(serde.String(), "in", "in2")
	base.Kafka.SessionTimeout = 4 * time.Second
	base.Batching.Pipelines = 1

	const keys = 6
	sent := 0
	round := func() {
		for _, topic := range []string{"in", "in2"} {
			var kvs []string
			for k := range keys {
				kvs = append(kvs, fmt.Sprintf("k%d=%s", k, topic))
			}
			testprocs.Produce(t, brokers, topic, kvs...)
			sent += len(kvs)
		}
	}
	type instance struct {
		id   string
		app  *kstate.App[string, string, string]
		stop func() error
	}
	var running []instance
	start := func(id string, pipelines int) {
		cfg := base
		cfg.InstanceID, cfg.Batching.Pipelines, cfg.State.Dir = id, pipelines, t.TempDir()
		app := newApp(t, cfg)
		running = append(running, instance{id, app, testprocs.Start(t, app)})
	}
	// settle waits until every partition is owned by exactly one ready
	// pipeline, members pipelines own some, and (want not nil) the owners
	// are want's.
	settle := func(what string, members int, want map[int32]string) {
		t.Helper()
		begin := time.Now()
		for {
			owners := map[int32][]string{}
			restoring, ok := false, true
			owning := 0
			for _, in := range running {
				ok = ok && in.app.State() == kstate.Running
				st := in.app.Status()
				owning += len(pipelinesOf(st))
				for _, p := range st.Partitions {
					owners[p.Partition] = append(owners[p.Partition], fmt.Sprintf("%s/p%d", in.id, p.Pipeline))
					restoring = restoring || p.Restoring
				}
			}
			ok = ok && !restoring && len(owners) == parts && owning == members
			for p, o := range owners {
				ok = ok && len(o) == 1 && (want == nil || o[0] == want[p])
			}
			if ok {
				t.Logf("%s: settled after %v: %v", what, time.Since(begin).Round(time.Millisecond), owners)
				return
			}
			if time.Since(begin) > 40*time.Second {
				t.Fatalf("%s: partitions not owned once each by a ready pipeline after %v: owners %v, restoring %v",
					what, time.Since(begin).Round(time.Second), owners, restoring)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}

	start("i1", 2)
	settle("i1's two pipelines", 2, nil)
	round()
	checkExact(t, testprocs.WaitOutputs(t, brokers, "out", sent, 30*time.Second), sent, keys)
	// No input from here on until both joins are done: i1's pipelines
	// end no transaction between the two rebalances.
	start("i2", 1)
	settle("i2 joined", 3, nil)
	start("i0", 1)
	// Four members, three partitions: one owns none.
	settle("i0 joined", 3, nil)
	round()
	round()
	checkExact(t, testprocs.WaitOutputs(t, brokers, "out", sent, 30*time.Second), sent, keys)
	for _, in := range slices.Backward(running) {
		if err := in.stop(); err != nil {
			t.Fatalf("instance %s: Run: %v", in.id, err)
		}
	}
}

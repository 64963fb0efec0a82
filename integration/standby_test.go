package integration

import (
	"fmt"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/kstate/kstate"
	"github.com/kstate/kstate/internal/testprocs"
)

// Standby replicas on the real broker (issue #27, item 2), end to end
// through the balancer, the session and the engine: two instances with
// Options.Group.Standbys 1 each keep a standby copy of the other's
// partition; when one stops (leaving the group), the survivor takes its
// partition over restoring only the changelog's tail, not the whole
// partition; the outputs stay exactly 1..n per key and the state is
// consistent (the counter checks its list against its map every batch).
func TestStandbyFailoverRealBroker(t *testing.T) {
	t.Parallel()
	e := newSpecEnv(t, 2)
	var ins []*kstate.App[string, string, string]
	var stops []func() error
	for _, id := range []string{"i1", "i2"} {
		cfg := e.config(t, testprocs.NewCounter)
		cfg.InstanceID = id
		cfg.Batching.Pipelines = 1
		cfg.Kafka.SessionTimeout = 6 * time.Second
		cfg.Kafka.LeaveGroupOnShutdown = true
		cfg.Group.Standbys = 1
		app := newSpecApp(t, cfg)
		ins = append(ins, app)
		stops = append(stops, testprocs.Start(t, app))
	}
	standbyOf := func(app *kstate.App[string, string, string]) []int32 {
		g := app.Status().Group
		if g == nil {
			return nil
		}
		for _, m := range g.Members {
			if m.Local {
				return m.Standby
			}
		}
		return nil
	}
	testprocs.Eventually(t, waitOut, "one partition each and a standby of the other's", func() bool {
		time.Sleep(50 * time.Millisecond)
		for _, app := range ins {
			st := app.Status()
			if app.State() != kstate.Running || len(st.Partitions) != 1 || len(standbyOf(app)) != 1 || standbyOf(app)[0] == st.Partitions[0].Partition {
				return false
			}
		}
		return true
	})
	c := &testprocs.KeyCycler{T: t, Brokers: e.brokers, Topic: e.in, Keys: 40}
	for range 5 {
		c.Produce(400) // several transactions: a changelog of some length
	}
	testprocs.WaitOutputs(t, e.brokers, e.out, c.Sent, waitOut)
	moved := ins[1].Status().Partitions[0].Partition
	// The standby reads the changelog in the background; give it time to
	// reach the end (it re-reads every second once caught up).
	time.Sleep(3 * time.Second)
	if err := stops[1](); err != nil {
		t.Fatal(err)
	}
	var ps kstate.PartitionStatus
	testprocs.Eventually(t, waitOut, fmt.Sprintf("i1 processing partition %d too", moved), func() bool {
		time.Sleep(50 * time.Millisecond)
		for _, p := range ins[0].Status().Partitions {
			if p.Partition == moved && !p.Restoring {
				ps = p
				return true
			}
		}
		return false
	})
	t.Logf("i1 took partition %d over restoring %d changelog records (of a changelog written by %d input records)", moved, ps.RestoredRecords, c.Sent)
	if ps.RestoredRecords > int64(c.Sent)/10 {
		t.Fatalf("i1 restored %d changelog records of partition %d: want only the tail (its standby copy was current), not the whole partition", ps.RestoredRecords, moved)
	}
	c.Produce(400)
	out := testprocs.WaitOutputs(t, e.brokers, e.out, c.Sent, waitOut)
	for k, vs := range out {
		want := make([]string, len(vs))
		for i := range vs {
			want[i] = strconv.Itoa(i + 1)
		}
		if !slices.Equal(vs, want) {
			t.Fatalf("key %s: outputs %v, want 1..%d exactly once", k, vs, len(vs))
		}
	}
	if out.Count() != c.Sent {
		t.Fatalf("%d outputs for %d inputs", out.Count(), c.Sent)
	}
}

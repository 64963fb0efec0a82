package runtime

import (
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/kstate/kstate/internal/engine"
	"github.com/kstate/kstate/internal/group"
)

// The pipelines' views merge into the newest view and one rebalance per
// generation, newest first.
func TestMergeGroupViews(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	v := func(gen int32) group.View {
		return group.View{Generation: gen, Partitions: 4, Members: []group.Member{{InstanceID: "i1", Active: []int32{0}}}}
	}
	views := []pipelineView{
		{View: v(3), OK: true, Rebalances: []group.Rebalance{
			{Generation: 3, Start: t0.Add(2 * time.Second), Duration: time.Second, Assigned: []int32{2}},
			{Generation: 1, Start: t0, Duration: 3 * time.Second, Assigned: []int32{0, 1}},
		}},
		{OK: false}, // no session yet
		{View: v(4), OK: true, Rebalances: []group.Rebalance{
			{Generation: 4, Start: t0.Add(5 * time.Second), Duration: time.Second, Leader: true, Revoked: []int32{3}},
			{Generation: 3, Start: t0.Add(time.Second), Duration: 2 * time.Second, Leader: true, Assigned: []int32{3}, Revoked: []int32{2}},
		}},
		{View: v(2), OK: true}, // behind
	}
	got, rbs, ok := mergeGroupViews(views)
	if !ok || got.Generation != 4 {
		t.Fatalf("merged view: generation %d ok %v, want the newest (4)", got.Generation, ok)
	}
	want := []group.Rebalance{
		{Generation: 4, Start: t0.Add(5 * time.Second), Duration: time.Second, Leader: true, Revoked: []int32{3}},
		{Generation: 3, Start: t0.Add(time.Second), Duration: 2 * time.Second, Leader: true, Assigned: []int32{2, 3}, Revoked: []int32{2}},
		{Generation: 1, Start: t0, Duration: 3 * time.Second, Assigned: []int32{0, 1}},
	}
	if !reflect.DeepEqual(rbs, want) {
		t.Fatalf("merged rebalances:\n got %+v\nwant %+v", rbs, want)
	}
	if views[0].Rebalances[0].Assigned[0] != 2 || len(views[0].Rebalances[0].Assigned) != 1 {
		t.Fatalf("the merge changed a pipeline's rebalance: %+v", views[0].Rebalances[0])
	}
	if _, _, ok := mergeGroupViews([]pipelineView{{}, {}}); ok {
		t.Fatal("no pipeline has a view: ok")
	}
}

// A partition two pipelines list at once (handed over: the new owner
// restores while the old one still processes it) is shown from the one
// processing it, and handover names the other. (Before: the new owner was
// not shown at all.)
func TestMergeSnapshotsHandover(t *testing.T) {
	ready := engine.PartitionStatus{Ready: true, Lag: 3}
	restoring := engine.PartitionStatus{Lag: -1}
	snaps := []engine.Snapshot{
		{Assigned: []int32{0, 1}, Status: map[int32]engine.PartitionStatus{0: ready, 1: restoring}, Partitions: map[int32]engine.Counters{0: {RowsIn: 5}}},
		{Assigned: []int32{1, 2}, Status: map[int32]engine.PartitionStatus{1: ready, 2: ready}},
		{Assigned: []int32{0}, Status: map[int32]engine.PartitionStatus{0: restoring}},
	}
	m, owner, handover := mergeSnapshots(snaps, engine.PhaseRunning)
	if fmt.Sprint(m.Assigned, m.Restoring) != "[0 1 2] []" {
		t.Fatalf("assigned %v restoring %v", m.Assigned, m.Restoring)
	}
	if fmt.Sprint(owner) != "map[0:0 1:1 2:1]" || fmt.Sprint(handover) != "map[0:2 1:0]" {
		t.Fatalf("owner %v handover %v, want map[0:0 1:1 2:1] and map[0:2 1:0]", owner, handover)
	}
	if m.Partitions[0].RowsIn != 5 || m.Status[1] != ready {
		t.Fatalf("merged %+v", m)
	}
}

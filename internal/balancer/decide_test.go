package balancer

import (
	"fmt"
	"reflect"
	"slices"
	"testing"

	"github.com/kstate/kstate/internal/group"
)

// mem is a test member: id doubles as instance id; process defaults to id.
func mem(id, process string, gen int32, owned []int32, shards map[int32]int64) Member {
	if process == "" {
		process = id
	}
	return Member{MemberID: id + "-mid", Meta: group.Meta{Version: 1, InstanceID: id, Process: process, Shards: shards}, Owned: owned, Generation: gen}
}

func ends(n int32, end int64) map[int32]int64 {
	m := map[int32]int64{}
	for p := range n {
		m[p] = end
	}
	return m
}

func span(from, to int32) []int32 {
	var out []int32
	for p := from; p < to; p++ {
		out = append(out, p)
	}
	return out
}

// byID indexes a decision by instance id.
func byID(out []group.Member) map[string]group.Member {
	m := map[string]group.Member{}
	for _, x := range out {
		m[x.InstanceID] = x
	}
	return m
}

// caughtShards is a copy of every partition in ps at the end.
func caughtShards(ps []int32, end int64) map[int32]int64 {
	m := map[int32]int64{}
	for _, p := range ps {
		m[p] = end
	}
	return m
}

// next plays the rebalance after out: every member owns what out gave it,
// at generation gen (a member that lost a partition has revoked it).
func next(in Input, out []group.Member, gen int32) Input {
	in.Members = slices.Clone(in.Members)
	for i := range in.Members {
		in.Members[i].Owned = out[i].Active
		in.Members[i].Generation = gen
	}
	return in
}

func checkActiveOnce(t *testing.T, out []group.Member, P int32) {
	t.Helper()
	seen := map[int32]string{}
	for _, m := range out {
		for _, p := range m.Active {
			if o, ok := seen[p]; ok {
				t.Fatalf("partition %d active on %s and %s", p, o, m.InstanceID)
			}
			seen[p] = m.InstanceID
		}
	}
	if len(seen) != int(P) {
		t.Fatalf("%d of %d partitions assigned: %v", len(seen), P, out)
	}
}

func TestStickyKeepsOwners(t *testing.T) {
	in := Input{Partitions: 9, EndOffsets: ends(9, 100), Members: []Member{
		mem("a", "", 5, []int32{0, 4, 8}, caughtShards([]int32{0, 4, 8}, 100)),
		mem("b", "", 5, []int32{1, 2, 6}, caughtShards([]int32{1, 2, 6}, 100)),
		mem("c", "", 5, []int32{3, 5, 7}, caughtShards([]int32{3, 5, 7}, 100)),
	}}
	out := Decide(in, Config{AcceptableLag: 10})
	got := byID(out)
	for _, m := range in.Members {
		if !slices.Equal(got[m.Meta.InstanceID].Active, m.Owned) {
			t.Errorf("%s: active %v, owned %v", m.Meta.InstanceID, got[m.Meta.InstanceID].Active, m.Owned)
		}
	}
	if !reflect.DeepEqual(out, Decide(in, Config{AcceptableLag: 10})) {
		t.Error("not deterministic")
	}
}

// TestBalancedWithoutEndOffsets: without the end offsets (unreadable), a
// newcomer gets its share at once, through the cooperative two steps.
func TestBalancedWithoutEndOffsets(t *testing.T) {
	in := Input{Partitions: 7, Members: []Member{
		mem("a", "", 3, span(0, 7), nil),
		mem("b", "", -1, nil, nil),
	}}
	out := Decide(in, Config{AcceptableLag: 10})
	got := byID(out)
	if !slices.Equal(got["a"].Active, span(0, 4)) || len(got["b"].Active) != 0 {
		t.Fatalf("first step: a %v b %v; want a [0..3], b nothing yet (a revokes first)", got["a"].Active, got["b"].Active)
	}
	if len(got["b"].Warmup) != 0 {
		t.Fatalf("warm-ups without end offsets: %v", got["b"].Warmup)
	}
	out = Decide(next(in, out, 4), Config{AcceptableLag: 10})
	checkActiveOnce(t, out, 7)
	got = byID(out)
	if !slices.Equal(got["b"].Active, span(4, 7)) {
		t.Fatalf("second step: b %v, want [4 5 6]", got["b"].Active)
	}
}

// TestCaughtUpCopyWins: a partition without an owner goes to the member
// with a caught-up copy, not to the first member or the least loaded one.
func TestCaughtUpCopyWins(t *testing.T) {
	in := Input{Partitions: 4, EndOffsets: ends(4, 1000), Members: []Member{
		mem("a", "", 7, []int32{0}, caughtShards([]int32{0}, 1000)),
		mem("b", "", 7, []int32{1}, map[int32]int64{1: 1000, 3: 995, 2: 100}),
	}}
	// c died owning 2 and 3: b has a caught-up copy of 3 (lag 5), a
	// lagging one of 2 (lag 900), a none.
	out := Decide(in, Config{AcceptableLag: 10})
	got := byID(out)
	if !slices.Contains(got["b"].Active, 3) {
		t.Fatalf("partition 3 went to %v; b has the caught-up copy", out)
	}
	if !slices.Contains(got["a"].Active, 2) {
		t.Fatalf("partition 2: a %v b %v; no caught-up copy, balance gives it to a", got["a"].Active, got["b"].Active)
	}
	checkActiveOnce(t, out, 4)
}

// TestNeverFromScratchWhileCaughtUpCopy: the member with room has no copy,
// the caught-up one is full: the partition goes to the caught-up copy
// (above its quota) and the member with room warms up.
func TestNeverFromScratchWhileCaughtUpCopy(t *testing.T) {
	in := Input{Partitions: 4, EndOffsets: ends(4, 1000), Members: []Member{
		mem("a", "", 7, []int32{0}, caughtShards([]int32{0}, 1000)),
		mem("b", "", 7, []int32{1, 2}, caughtShards([]int32{1, 2, 3}, 1000)),
	}}
	out := Decide(in, Config{AcceptableLag: 10})
	got := byID(out)
	if !slices.Equal(got["b"].Active, []int32{1, 2, 3}) || !slices.Equal(got["a"].Active, []int32{0}) {
		t.Fatalf("a %v b %v; want b [1 2 3] (its caught-up copy of 3), a [0]", got["a"].Active, got["b"].Active)
	}
	if !slices.Equal(got["a"].Warmup, []int32{3}) || got["a"].Lag[3] != 1000 {
		t.Fatalf("a's warm-ups %v lag %v; want [3] at lag 1000", got["a"].Warmup, got["a"].Lag)
	}
}

// TestWarmup: a newcomer without copies gets warm-ups, not partitions; a
// lagging warm-up does not move; a caught-up one moves (in two
// cooperative steps); then the group is balanced.
func TestWarmup(t *testing.T) {
	cfg := Config{AcceptableLag: 100}
	in := Input{Partitions: 4, EndOffsets: ends(4, 10_000), Members: []Member{
		mem("a", "", 2, span(0, 4), caughtShards(span(0, 4), 10_000)),
		mem("b", "", -1, nil, nil),
	}}
	out := Decide(in, cfg)
	got := byID(out)
	if !slices.Equal(got["a"].Active, span(0, 4)) || len(got["b"].Active) != 0 {
		t.Fatalf("join: a %v b %v; the owner must keep everything", got["a"].Active, got["b"].Active)
	}
	if !slices.Equal(got["b"].Warmup, []int32{2, 3}) {
		t.Fatalf("join: b's warm-ups %v, want [2 3]", got["b"].Warmup)
	}

	// Probing rebalance: b's copy of 2 is 5,000 behind, of 3 caught up.
	in = next(in, out, 3)
	in.Members[1].Meta.Shards = map[int32]int64{2: 5_000, 3: 9_950}
	out = Decide(in, cfg)
	got = byID(out)
	if !slices.Equal(got["a"].Active, []int32{0, 1, 2}) {
		t.Fatalf("probe: a %v; a keeps the lagging warm-up's 2 and revokes 3", got["a"].Active)
	}
	if len(got["b"].Active) != 0 || !slices.Equal(got["b"].Warmup, []int32{2}) {
		t.Fatalf("probe: b active %v warm-up %v; want none (3 moves at the next join) and [2]", got["b"].Active, got["b"].Warmup)
	}
	// a revoked 3 and rejoins: b gets it.
	out = Decide(next(in, out, 4), cfg)
	got = byID(out)
	if !slices.Equal(got["b"].Active, []int32{3}) {
		t.Fatalf("after the revoke: b %v, want [3]", got["b"].Active)
	}
	// b catches up on 2: it moves too, and the group is balanced.
	in = next(in, out, 5)
	in.Members[1].Meta.Shards = map[int32]int64{2: 9_990, 3: 10_000}
	out = Decide(in, cfg)
	out = Decide(next(in, out, 6), cfg)
	got = byID(out)
	if !slices.Equal(got["a"].Active, []int32{0, 1}) || !slices.Equal(got["b"].Active, []int32{2, 3}) || len(got["b"].Warmup) != 0 {
		t.Fatalf("end: a %v b %v (warm-ups %v); want [0 1] [2 3] none", got["a"].Active, got["b"].Active, got["b"].Warmup)
	}
}

// TestWarmupStaysWhileCopiesHover: an owner over its quota gives away the
// same partition at every probing rebalance while a standby copy at a
// member without room hovers around AcceptableLag (under input, b's lags on
// a's partitions move by tens of records from one join to the next). When
// that copy decided what a gave away, the newcomer's warm-up switched
// between 0 and 2 at every probe, and neither copy ever caught up
// (TestCrashStandbyWarmupProbing).
func TestWarmupStaysWhileCopiesHover(t *testing.T) {
	cfg := Config{AcceptableLag: 20}
	in := func(lag0, lag2 int64) Input {
		return Input{Partitions: 4, EndOffsets: ends(4, 1_000), Members: []Member{
			mem("a", "", 5, span(0, 3), caughtShards(span(0, 4), 1_000)),
			mem("b", "", 5, []int32{3}, map[int32]int64{0: 1_000 - lag0, 2: 1_000 - lag2, 3: 1_000}),
			mem("c", "", -1, nil, map[int32]int64{0: 500, 2: 500}),
		}}
	}
	var warm []int32
	for i, lags := range [][2]int64{{14, 29}, {41, 52}, {29, 14}, {10, 35}, {16, 16}} {
		got := byID(Decide(in(lags[0], lags[1]), cfg))
		if !slices.Equal(got["a"].Active, span(0, 3)) || len(got["c"].Active) != 0 {
			t.Fatalf("probe %d: a %v c %v; a keeps its partitions while c warms up", i, got["a"].Active, got["c"].Active)
		}
		if i == 0 {
			warm = got["c"].Warmup
			if len(warm) != 1 {
				t.Fatalf("probe 0: c's warm-ups %v, want one", warm)
			}
		} else if !slices.Equal(got["c"].Warmup, warm) {
			t.Fatalf("probe %d (b's lags on 0 and 2: %v): c warms up %v, at the probe before %v", i, lags, got["c"].Warmup, warm)
		}
	}
}

// TestMaxWarmups: the group holds at most MaxWarmups warm-ups; the other
// moves wait, their partitions active where they are.
func TestMaxWarmups(t *testing.T) {
	in := Input{Partitions: 8, EndOffsets: ends(8, 10_000), Members: []Member{
		mem("a", "", 2, span(0, 8), caughtShards(span(0, 8), 10_000)),
		mem("b", "", -1, nil, nil),
		mem("c", "", -1, nil, nil),
	}}
	for _, max := range []int{0, 1, 3} {
		out := Decide(in, Config{AcceptableLag: 100, MaxWarmups: max})
		want := max
		if max == 0 {
			want = DefaultMaxWarmups
		}
		n := 0
		for _, m := range out {
			n += len(m.Warmup)
		}
		if n != want {
			t.Errorf("MaxWarmups %d: %d warm-ups %v", max, n, out)
		}
		if got := byID(out); len(got["a"].Active) != 8 {
			t.Errorf("MaxWarmups %d: a keeps %v, want all 8", max, got["a"].Active)
		}
	}
}

// TestProcessCopySharedByPipelines: a process's copy counts for each of
// its pipelines: the pipeline with room takes the partition from its
// sibling's report, without a warm-up.
func TestProcessCopySharedByPipelines(t *testing.T) {
	in := Input{Partitions: 2, EndOffsets: ends(2, 500), Members: []Member{
		mem("x", "x", 4, []int32{0}, caughtShards([]int32{0, 1}, 500)),
		mem("x-p1", "x", -1, nil, nil),
		mem("y", "y", 4, []int32{1}, nil),
	}}
	// y's pipeline is the newcomer here; x-p1 has no report of its own but
	// its process holds partition 1: if y left, x-p1 takes 1 at once.
	in.Members = []Member{in.Members[0], in.Members[1]}
	out := Decide(in, Config{AcceptableLag: 10})
	got := byID(out)
	if !slices.Equal(got["x-p1"].Active, []int32{1}) || len(got["x-p1"].Warmup) != 0 {
		t.Fatalf("x-p1 active %v warm-up %v; want [1] from its process's copy", got["x-p1"].Active, got["x-p1"].Warmup)
	}
}

// TestStandbys: Standbys copies per partition, never in the active's
// process nor twice in one process, caught-up copies first, spread evenly;
// fewer processes than asked: fewer standbys.
func TestStandbys(t *testing.T) {
	in := Input{Partitions: 6, EndOffsets: ends(6, 100), Members: []Member{
		mem("p", "p", 2, []int32{0, 1}, caughtShards([]int32{0, 1}, 100)),
		mem("p-p1", "p", 2, []int32{2}, nil),
		mem("q", "q", 2, []int32{3, 4}, caughtShards([]int32{3, 4, 0}, 100)),
		mem("r", "r", 2, []int32{5}, caughtShards([]int32{5}, 100)),
	}}
	procOf := map[string]string{}
	for _, m := range in.Members {
		procOf[m.Meta.InstanceID] = m.Meta.Process
	}
	for _, standbys := range []int{1, 2, 5} {
		t.Run(fmt.Sprint(standbys), func(t *testing.T) {
			out := Decide(in, Config{Standbys: standbys, AcceptableLag: 10})
			checkActiveOnce(t, out, 6)
			count := map[int32][]string{}
			for _, m := range out {
				for _, p := range m.Standby {
					count[p] = append(count[p], m.Process)
				}
			}
			want := min(standbys, 2) // three processes: two besides the active's
			for p := range int32(6) {
				owner, _ := group.View{Members: out}.Owner(p)
				procs := count[p]
				if len(procs) != want {
					t.Errorf("partition %d: standbys in %v, want %d", p, procs, want)
				}
				if slices.Contains(procs, owner.Process) {
					t.Errorf("partition %d: standby in its active's process %s", p, owner.Process)
				}
				if len(slices.Compact(slices.Sorted(slices.Values(procs)))) != len(procs) {
					t.Errorf("partition %d: two standbys in one process: %v", p, procs)
				}
			}
			if standbys == 1 {
				got := byID(out)
				// q holds a caught-up copy of 0: the standby of 0 is q's.
				if !slices.Contains(got["q"].Standby, 0) {
					t.Errorf("standby of 0 not on q (caught-up copy): %v", out)
				}
				// Spread: 6 standbys over 4 members, none with more than 2.
				for _, m := range out {
					if len(m.Standby) > 2 {
						t.Errorf("%s holds %d standbys: %v", m.InstanceID, len(m.Standby), out)
					}
				}
			}
		})
	}
}

// TestUnknownMetadataHoldsNothing: a member whose metadata is empty or not
// kstate's (an older or foreign release) is a member holding nothing: it
// gets its balanced share, by restoring.
func TestUnknownMetadataHoldsNothing(t *testing.T) {
	in := Input{Partitions: 4, EndOffsets: ends(4, 0), Members: []Member{
		mem("a", "", 2, span(0, 4), caughtShards(span(0, 4), 0)),
		{MemberID: "old-mid"},
	}}
	out := Decide(in, Config{AcceptableLag: 10})
	out = Decide(next(in, out, 3), Config{AcceptableLag: 10})
	checkActiveOnce(t, out, 4)
	if len(out[1].Active) != 2 || out[1].Process != "old-mid" {
		t.Fatalf("old member: %+v; want 2 partitions (empty changelog: nothing to restore), its member id as process", out[1])
	}
}

// TestStaleClaim: a member claiming a partition at an older generation than
// its owner's claim does not own it: if it is planned there, the owner
// revokes first.
func TestStaleClaim(t *testing.T) {
	in := Input{Partitions: 2, Members: []Member{
		mem("a", "", 3, []int32{0, 1}, nil),
		mem("b", "", 5, []int32{1}, nil),
	}}
	out := Decide(in, Config{})
	got := byID(out)
	if !slices.Equal(got["a"].Active, []int32{0}) || !slices.Equal(got["b"].Active, []int32{1}) {
		t.Fatalf("a %v b %v; b's newer claim on 1 holds", got["a"].Active, got["b"].Active)
	}
	in.Members[1].Generation = 1
	got = byID(Decide(in, Config{}))
	if slices.Contains(got["b"].Active, 1) {
		t.Fatalf("b's stale claim on 1 counted as ownership: %v", got["b"].Active)
	}
}

package balancer

import (
	"slices"
	"testing"
)

// A partition's current owner writes its changelog: its copy is current
// whatever position it reported when it joined. Under input, the end
// offsets the leader reads are past the positions the members sent with
// their join (the owner commits meanwhile), here by more than
// AcceptableLag; the standby copy is as far behind. A newcomer without a
// copy must still not take the partition over (a restore from scratch
// while its owner is current): it warms it up and the owner keeps it.
func TestDecideOwnerUnderLoadIsCaughtUp(t *testing.T) {
	const end, behind = 5000, 300 // the owners' reported positions are 300 records behind the end
	cfg := Config{Standbys: 1, AcceptableLag: 20}
	in := Input{Partitions: 4, EndOffsets: ends(4, end), Members: []Member{
		// a owns 0 and 1 and stands by for 2 and 3; b the other way round.
		mem("a", "", 5, span(0, 2), caughtShards(span(0, 4), end-behind)),
		mem("b", "", 5, span(2, 4), caughtShards(span(0, 4), end-behind)),
		mem("c", "", 0, nil, nil),
	}}
	// Two rebalances: the join, and the follow-up that gives a revoked
	// partition to its new owner (cooperative).
	first := Decide(in, cfg)
	out := byID(Decide(next(in, first, 6), cfg))
	for _, id := range []string{"a", "b"} {
		for _, q := range in.Members[map[string]int{"a": 0, "b": 1}[id]].Owned {
			if !slices.Contains(byID(first)[id].Active, q) || !slices.Contains(out[id].Active, q) {
				t.Errorf("partition %d left its owner %s (its copy current), first %+v, then %+v", q, id, byID(first)[id], out[id])
			}
		}
	}
	if len(out["c"].Active) != 0 {
		t.Fatalf("the newcomer c got %v active, with no copy, while their owners' copies are current: want warm-ups only (a %+v, b %+v, c %+v)",
			out["c"].Active, out["a"], out["b"], out["c"])
	}
	if len(out["c"].Warmup) != 1 {
		t.Fatalf("c warms up %v: want one partition (its place in the balance)", out["c"].Warmup)
	}
	// Once the warm-up is within AcceptableLag the partition moves to c
	// (taken from its owner, then c's at the follow-up rebalance).
	p := out["c"].Warmup[0]
	in3 := next(in, Decide(next(in, first, 6), cfg), 7)
	in3.Members[2].Meta.Shards = map[int32]int64{p: end - 10}
	out3 := Decide(in3, cfg)
	out4 := byID(Decide(next(in3, out3, 8), cfg))
	if !slices.Equal(out4["c"].Active, []int32{p}) {
		t.Fatalf("c's warm-up of %d within AcceptableLag: c active %v, want [%d] (%+v)", p, out4["c"].Active, p, out4)
	}
}

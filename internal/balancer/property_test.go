package balancer

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/kstate/kstate/internal/group"
)

// randomInput is a group of 1-6 members in 1-4 processes with random
// ownership (some of it stale or lost), local copies and end offsets.
func randomInput(r *rand.Rand) Input {
	P := int32(1 + r.IntN(12))
	n := 1 + r.IntN(6)
	nproc := 1 + r.IntN(4)
	in := Input{Partitions: P, EndOffsets: map[int32]int64{}}
	for p := range P {
		in.EndOffsets[p] = int64(r.IntN(3)) * 100
	}
	if r.IntN(5) == 0 {
		in.EndOffsets = nil
	}
	for i := range n {
		proc := fmt.Sprintf("p%d", r.IntN(nproc))
		m := mem(fmt.Sprintf("%s-m%d", proc, i), proc, int32(r.IntN(3)), nil, map[int32]int64{})
		for p := range P {
			if r.IntN(3) == 0 {
				m.Owned = append(m.Owned, p)
			}
			if r.IntN(2) == 0 {
				m.Meta.Shards[p] = int64(r.IntN(201))
				if r.IntN(2) == 0 {
					m.Meta.Standby = append(m.Meta.Standby, p) // held open
				}
			}
		}
		in.Members = append(in.Members, m)
	}
	return in
}

// TestDecideProperties: over random groups, every decision assigns each
// partition at most once, never newly to a member without a caught-up copy
// while one exists, keeps standbys out of the active's process and apart,
// respects MaxWarmups; and replaying the rebalances (revokes done, warm-ups
// caught up) converges to a balanced group with every partition assigned
// and no warm-up, which is then a fixed point.
func TestDecideProperties(t *testing.T) {
	for seed := range uint64(500) {
		r := rand.New(rand.NewPCG(seed, 27))
		in := randomInput(r)
		cfg := Config{Standbys: r.IntN(3), AcceptableLag: 10}
		procs := map[string]bool{}
		for _, m := range in.Members {
			procs[m.Meta.Process] = true
		}
		d := newDecision(in, cfg) // for lag and caught
		out := Decide(in, cfg)
		ctx := fmt.Sprintf("seed %d: %+v", seed, in)
		seen := map[int32]bool{}
		warm := 0
		for i, m := range out {
			warm += len(m.Warmup)
			for _, p := range m.Active {
				if seen[p] {
					t.Fatalf("%s: partition %d active twice", ctx, p)
				}
				seen[p] = true
				if slices.Contains(in.Members[i].Owned, p) || d.caught(i, p) {
					continue
				}
				for j := range out {
					if d.caught(j, p) {
						t.Fatalf("%s: partition %d newly to %s (lag %d) while %s has a caught-up copy", ctx, p, m.InstanceID, d.lag(i, p), out[j].InstanceID)
					}
				}
			}
		}
		if warm > DefaultMaxWarmups {
			t.Fatalf("%s: %d warm-ups", ctx, warm)
		}
		checkStandbys(t, ctx, out, cfg.Standbys, len(procs))

		// Replay: owners take what they were given; warm-ups catch up.
		cur := in
		for round := 0; ; round++ {
			if round == 20 {
				t.Fatalf("%s: no convergence in 20 rebalances: %+v", ctx, out)
			}
			cur = next(cur, out, int32(10+round))
			for i, m := range out {
				sh := map[int32]int64{}
				for p, o := range cur.Members[i].Meta.Shards {
					sh[p] = o
				}
				for _, p := range append(slices.Clone(m.Warmup), m.Active...) {
					sh[p] = cur.EndOffsets[p]
				}
				cur.Members[i].Meta.Shards = sh
				cur.Members[i].Meta.Standby = append(slices.Clone(m.Standby), m.Warmup...)
			}
			prev := out
			out = Decide(cur, cfg)
			if equalActive(prev, out) && noWarmups(out) && assignedAll(out, in.Partitions) {
				break
			}
		}
		lo, hi := int(in.Partitions), 0
		for _, m := range out {
			lo, hi = min(lo, len(m.Active)), max(hi, len(m.Active))
		}
		if hi-lo > 1 {
			t.Fatalf("%s: converged unbalanced: %+v", ctx, out)
		}
	}
}

func checkStandbys(t *testing.T, ctx string, out []group.Member, standbys, nprocs int) {
	t.Helper()
	v := group.View{Members: out}
	for i, m := range out {
		for _, p := range m.Standby {
			if slices.Contains(m.Active, p) || slices.Contains(m.Warmup, p) {
				t.Fatalf("%s: %s both standby and active/warm-up of %d", ctx, m.InstanceID, p)
			}
			for j, o := range out {
				if j != i && o.Process == m.Process && (slices.Contains(o.Standby, p) || slices.Contains(o.Active, p)) {
					t.Fatalf("%s: process %s holds partition %d twice (%s, %s)", ctx, m.Process, p, m.InstanceID, o.InstanceID)
				}
			}
			if owner, ok := v.Owner(p); ok && owner.Process == m.Process {
				t.Fatalf("%s: standby of %d in its active's process", ctx, p)
			}
		}
	}
	// Each partition has Standbys copies, fewer only when the processes
	// other than its planned owner's and its warm-ups' run out.
	P := int32(0)
	for _, m := range out {
		for _, ps := range [][]int32{m.Active, m.Standby, m.Warmup} {
			for _, p := range ps {
				P = max(P, p+1)
			}
		}
	}
	for p := range P {
		sb, excluded := 0, map[string]bool{}
		for _, m := range out {
			if slices.Contains(m.Standby, p) {
				sb++
			}
			if slices.Contains(m.Warmup, p) {
				excluded[m.Process] = true
			}
		}
		avail := nprocs
		if owner, ok := v.Owner(p); ok {
			excluded[owner.Process] = true
		} else {
			avail-- // moving this generation: its planned owner's process
		}
		avail -= len(excluded)
		if sb > standbys || sb < min(standbys, avail) {
			t.Fatalf("%s: partition %d has %d standbys (asked %d, %d processes, excluded %v)", ctx, p, sb, standbys, nprocs, excluded)
		}
	}
}

func equalActive(a, b []group.Member) bool {
	for i := range a {
		if !slices.Equal(a[i].Active, b[i].Active) {
			return false
		}
	}
	return true
}

func noWarmups(out []group.Member) bool {
	for _, m := range out {
		if len(m.Warmup) > 0 {
			return false
		}
	}
	return true
}

func assignedAll(out []group.Member, P int32) bool {
	n := 0
	for _, m := range out {
		n += len(m.Active)
	}
	return n == int(P)
}

// BenchmarkDecide: a large group (100 members in 50 processes, 1,000
// partitions, one standby each, a newcomer without copies).
func BenchmarkDecide(b *testing.B) {
	in := Input{Partitions: 1000, EndOffsets: ends(1000, 1_000_000)}
	for i := range 100 {
		proc := fmt.Sprintf("p%d", i/2)
		var owned []int32
		sh := map[int32]int64{}
		for p := int32(i); p < 1000 && i < 99; p += 99 {
			owned = append(owned, p)
			sh[p] = 1_000_000
		}
		in.Members = append(in.Members, mem(fmt.Sprintf("%s-m%d", proc, i), proc, 4, owned, sh))
	}
	for b.Loop() {
		Decide(in, Config{Standbys: 1, AcceptableLag: 10_000})
	}
}

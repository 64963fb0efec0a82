package balancer

import (
	"cmp"
	"math"
	"slices"

	"github.com/kstate/kstate/internal/group"
)

// Config is what the decision depends on besides the members.
type Config struct {
	// Standbys is the number of standby copies of every partition, each on
	// a member of another process than the partition's active one (and
	// than each other): fewer when there are too few processes.
	Standbys int
	// AcceptableLag is how many changelog records behind the end a copy
	// may be and still count as caught up: an active partition goes only
	// to a caught-up copy when one exists, and a warm-up becomes active
	// once within it.
	AcceptableLag int64
	// MaxWarmups, overriding the default DefaultMaxWarmups, caps the
	// warm-ups of the whole group at one time (like Kafka Streams'
	// max.warmup.replicas): the rest of the moves wait for later
	// rebalances.
	MaxWarmups int
	// CoPartitioned: partition p of every topic is one task. kstate's unit
	// of state is the partition number (shard p), so the decision is always
	// made per partition number and the franz-go adapter gives a member
	// partition p of every topic it consumes; CoPartitioned only selects the
	// fallback protocol advertised for older releases (Protocols).
	CoPartitioned bool
}

// DefaultMaxWarmups is Config.MaxWarmups's default.
const DefaultMaxWarmups = 2

// Member is one member as it joined: its kstate metadata (zero for a
// member that sent none or an undecodable one: it holds nothing) and the
// partitions it owns now.
type Member struct {
	MemberID string
	Meta     group.Meta
	// Owned are the partition numbers the member owns (Kafka's
	// OwnedPartitions) as of Generation.
	Owned      []int32
	Generation int32
}

// Input is the group to balance.
type Input struct {
	// Members in franz-go's order (instance id, then member id).
	Members []Member
	// Partitions is the number of tasks (partition numbers 0..n-1).
	Partitions int32
	// EndOffsets are the changelog's end offsets per partition; nil when
	// they could not be read: the decision is then sticky and balanced
	// only (every copy counts as caught up, no warm-ups).
	EndOffsets map[int32]int64
}

// Decide balances in: one group.Member per input member, in input order,
// with the partitions it gets active in this generation, its standby and
// warm-up partitions and their lag. Deterministic: the same input gives the
// same output.
//
// The rules, in order (docs/ARCHITECTURE.md, "Group balancing"):
//   - balanced by process, then by member: each process's quota is its
//     share of the partitions weighted by its members (pipelines), within
//     one; its members split it evenly (quotas);
//   - sticky: an owner keeps its partitions up to its quota; an owner
//     above quota gives away first the partitions another process that
//     can take one has a caught-up copy of (a sibling pipeline always has
//     the process's copy: the pipelines of a process share its shard
//     directory, so a move between them restores nothing);
//   - state-aware: a partition to place goes to a member with room and a
//     caught-up copy (least lag, least load, member order); without one,
//     to the member with room that has the least lag (a copy restoring the
//     fewest records) — unless a caught-up copy exists on a member without
//     room: then it stays with (or goes to) that copy, and the member with
//     room gets a warm-up of it (at most MaxWarmups in the group) and takes
//     it at a later rebalance, once within AcceptableLag;
//   - cooperative: a partition whose owner changes is only taken from the
//     owner in this generation; the new owner gets it at the follow-up
//     rebalance (the owner rejoins after revoking);
//   - standbys: Standbys copies on members of other processes, caught-up
//     copies first, then the fewest standbys, then the fewest actives (the
//     pipeline with room for the partition when its process fails).
func Decide(in Input, cfg Config) []group.Member {
	if cfg.MaxWarmups <= 0 {
		cfg.MaxWarmups = DefaultMaxWarmups
	}
	d := newDecision(in, cfg)
	d.placeActives()
	d.toOpenCopies()
	d.placeStandbys()
	return d.result()
}

// noOwner marks a partition without a (valid) owner.
const noOwner = -1

type decision struct {
	in  Input
	cfg Config
	n   int
	// proc is each member's process; shards each process's copies (the
	// furthest position over its members' reports).
	proc   []string
	shards map[string]map[int32]int64
	// owner is the valid current owner of each partition (the claim of the
	// highest generation; the first member on a tie).
	owner []int
	quota []int
	// final is each partition's planned owner (after the move, if any).
	final  []int
	load   []int // planned actives per member
	warmup [][]int32
	standb [][]int32
	nWarm  int
	// owns counts each member's partitions before the decision.
	owns []int
	// lags is lag's table (built at first use).
	lags [][]int64
}

func newDecision(in Input, cfg Config) *decision {
	n := len(in.Members)
	P := int(in.Partitions)
	d := &decision{in: in, cfg: cfg, n: n, proc: make([]string, n), shards: map[string]map[int32]int64{},
		owner: make([]int, P), final: make([]int, P), quota: make([]int, n), load: make([]int, n),
		warmup: make([][]int32, n), standb: make([][]int32, n)}
	for i, m := range in.Members {
		d.proc[i] = cmp.Or(m.Meta.Process, m.Meta.InstanceID, m.MemberID)
		s := d.shards[d.proc[i]]
		if s == nil {
			s = map[int32]int64{}
			d.shards[d.proc[i]] = s
		}
		for p, pos := range m.Meta.Shards {
			if old, ok := s[p]; !ok || pos > old {
				s[p] = pos
			}
		}
	}
	gen := make([]int32, P)
	for p := range P {
		d.owner[p], d.final[p] = noOwner, noOwner
	}
	for i, m := range in.Members {
		for _, p := range m.Owned {
			if p < 0 || int(p) >= P {
				continue
			}
			if o := d.owner[p]; o == noOwner || m.Generation > gen[p] {
				d.owner[p], gen[p] = i, m.Generation
			}
		}
	}
	if n == 0 {
		return d
	}
	// Quotas (balanced counts), by process first, then among the process's
	// members (its pipelines): see quotas.
	d.owns = make([]int, n)
	for _, o := range d.owner {
		if o != noOwner {
			d.owns[o]++
		}
	}
	d.quota = quotas(P, d.proc, d.owns)
	return d
}

// quotas returns each member's balanced count of the P partitions, given
// its process and how many partitions it owns now. Each process gets its
// share of P weighted by its number of members (its pipelines: one per
// core by default, so a process's members are its capacity, as Kafka
// Streams weighs a client by its stream threads), rounded down or up: the
// P - Σ floor extra places go to processes with a fractional share:
// first those owning more than their floor now (fewest moves), then those
// with the largest fractional part, then owning most, then in member
// order. Each process then splits its count evenly among its
// members, the extra places to its members owning most (member order on a
// tie). So every process is within one of its weighted share, and every
// member within one of P/n (⌊P/n⌋ ≤ ⌊⌊Pk/n⌋/k⌋ and ⌈⌈Pk/n⌉/k⌉ ≤ ⌈P/n⌉):
// two processes of two pipelines split 6 partitions 3/3, not 4/2.
func quotas(P int, proc []string, owns []int) []int {
	n := len(proc)
	quota := make([]int, n)
	if n == 0 {
		return quota
	}
	type process struct {
		members []int // indexes, in member order
		owns    int
		floor   int
		rem     int // P*k mod n: the fractional part of P*k/n, times n
		frac    bool
		quota   int
	}
	var procs []*process
	byName := map[string]*process{}
	for i, name := range proc {
		pr := byName[name]
		if pr == nil {
			pr = &process{}
			byName[name] = pr
			procs = append(procs, pr)
		}
		pr.members = append(pr.members, i)
		pr.owns += owns[i]
	}
	extra := P
	for _, pr := range procs {
		k := len(pr.members)
		pr.floor, pr.rem = P*k/n, P*k%n
		pr.frac = pr.rem != 0
		pr.quota = pr.floor
		extra -= pr.floor
	}
	// The fractional parts sum to extra, each below 1: at least extra
	// processes have one.
	rank := slices.Clone(procs)
	slices.SortStableFunc(rank, func(a, b *process) int {
		switch {
		case a.frac != b.frac:
			return boolFirst(a.frac)
		case a.owns > a.floor != (b.owns > b.floor):
			return boolFirst(a.owns > a.floor)
		}
		return cmp.Or(cmp.Compare(b.rem, a.rem), cmp.Compare(b.owns, a.owns))
	})
	for _, pr := range rank[:extra] {
		pr.quota++
	}
	for _, pr := range procs {
		ms := slices.Clone(pr.members)
		slices.SortStableFunc(ms, func(a, b int) int { return owns[b] - owns[a] })
		k := len(ms)
		for r, i := range ms {
			quota[i] = pr.quota / k
			if r < pr.quota%k {
				quota[i]++
			}
		}
	}
	return quota
}

// boolFirst is a comparison result ordering true before false, for two
// values that differ: b is the first one.
func boolFirst(b bool) int {
	if b {
		return -1
	}
	return 1
}

// stateAware is whether the end offsets are known.
func (d *decision) stateAware() bool { return d.in.EndOffsets != nil }

// lag is how many changelog records member i's process is behind on
// partition p: from its copy's position, or from the start without one.
// 0 when the end offsets are unknown, and 0 for the process of p's current
// owner: it writes p's changelog, so its copy is current whatever position
// it reported as it joined (under input the end offsets the leader reads
// later are past it, by more than AcceptableLag at a high rate: the owner
// would count as behind, and a member without a copy would get p with a
// restore from scratch; Kafka Streams too counts a running active task as
// caught up).
func (d *decision) lag(i int, p int32) int64 {
	if !d.stateAware() {
		return 0
	}
	if d.lags == nil {
		d.lags = make([][]int64, d.n)
		for j := range d.n {
			d.lags[j] = make([]int64, len(d.owner))
			for q := range int32(len(d.owner)) {
				if o := d.owner[q]; o != noOwner && d.proc[o] == d.proc[j] {
					continue // the owner's process: current
				}
				pos := d.shards[d.proc[j]][q] // 0 without a copy: from the start
				d.lags[j][q] = max(0, d.in.EndOffsets[q]-pos)
			}
		}
	}
	return d.lags[i][p]
}

func (d *decision) caught(i int, p int32) bool { return d.lag(i, p) <= d.cfg.AcceptableLag }

// caughtElsewhere is whether a member of another process than i's that
// can take p has a caught-up copy of it (i's siblings always have i's copy:
// a process's pipelines share its shard directory). Can take: it owns fewer
// partitions than its quota now, so placeActives gives it at least one. A
// copy at a member already at its quota does not count: p could not move
// there, and counting it made the choice of what an owner gives away follow
// that copy's lag, which under input moves around AcceptableLag from one
// rebalance to the next; a newcomer's warm-up then switched partitions at
// every probing rebalance and never caught up (TestCrashStandbyWarmupProbing).
func (d *decision) caughtElsewhere(i int, p int32) bool {
	for j := range d.n {
		if d.proc[j] != d.proc[i] && d.owns[j] < d.quota[j] && d.caught(j, p) {
			return true
		}
	}
	return false
}

// best returns the member among ok ones with the least lag on p, then
// the one holding p's standby or warm-up copy open (Meta.Standby: among a
// process's pipelines, which have the same lag, the one whose standby
// reader hands the open shard to its own task), then the least load, then
// first in order; -1 if none.
func (d *decision) best(p int32, ok func(j int) bool) int {
	b, bl, bs := -1, int64(math.MaxInt64), false
	for j := range d.n {
		if !ok(j) {
			continue
		}
		l := d.lag(j, p)
		sb := slices.Contains(d.in.Members[j].Meta.Standby, p)
		if b == -1 || l < bl || (l == bl && sb && !bs) || (l == bl && sb == bs && d.load[j] < d.load[b]) {
			b, bl, bs = j, l, sb
		}
	}
	return b
}

func (d *decision) room(j int) bool { return d.load[j] < d.quota[j] }

func (d *decision) placeActives() {
	if d.n == 0 {
		return
	}
	P := int32(len(d.owner))
	// Sticky: each owner keeps up to its quota, giving away first what
	// another member with room has a caught-up copy of, then its highest
	// partitions.
	owned := make([][]int32, d.n)
	for p := range P {
		if o := d.owner[p]; o != noOwner {
			owned[o] = append(owned[o], p)
		}
	}
	var free []int32
	for i, ps := range owned {
		slices.SortStableFunc(ps, func(a, b int32) int {
			ea, eb := d.caughtElsewhere(i, a), d.caughtElsewhere(i, b)
			switch {
			case ea == eb:
				return cmp.Compare(a, b)
			case eb:
				return -1
			}
			return 1
		})
		for k, p := range ps {
			if k < d.quota[i] {
				d.final[p] = i
				d.load[i]++
			} else {
				free = append(free, p)
			}
		}
	}
	for p := range P {
		if d.owner[p] == noOwner {
			free = append(free, p)
		}
	}
	slices.Sort(free)
	// State-aware, first pass: what a member with room has caught up.
	var rest []int32
	for _, p := range free {
		j := d.best(p, func(j int) bool { return d.room(j) && d.caught(j, p) })
		if j == -1 {
			rest = append(rest, p)
			continue
		}
		d.final[p] = j
		d.load[j]++
	}
	// Second pass: the member with room and the least lag, unless a
	// caught-up copy exists elsewhere: then a warm-up first.
	for _, p := range rest {
		t := d.best(p, d.room)
		c := d.best(p, func(j int) bool { return d.caught(j, p) })
		switch {
		case t == -1: // no room anywhere: cannot happen with quotas summing to P
			t = d.best(p, func(int) bool { return true })
			d.final[p] = t
			d.load[t]++
		case c == -1:
			// No caught-up copy anywhere: the least-lag member restores.
			d.final[p] = t
			d.load[t]++
		default:
			// Stays with its owner (caught up: it holds p active) or goes
			// to the best caught-up copy; t warms up.
			keep := d.owner[p]
			if keep == noOwner || !d.caught(keep, p) {
				keep = c
			}
			d.final[p] = keep
			d.load[keep]++
			if d.nWarm < d.cfg.MaxWarmups {
				d.warmup[t] = append(d.warmup[t], p)
				d.nWarm++
				// The place is t's once the warm-up is done.
				d.load[t]++
			}
		}
	}
}

// toOpenCopies moves each partition placed on a member other than its
// owner to the sibling pipeline (a member of the same process) that holds
// its standby or warm-up copy open (Meta.Standby), when the placement put
// it on a pipeline without one: best prefers the open copy only among the
// members with room, and the first partitions placed may have filled the
// pipeline whose copies the later ones need (a join's third moved
// partition, reopened at 1.8 s at 2M keys: docs/BENCHMARKS.md). Either
// the two pipelines swap a moved partition the other holds no open copy
// of, or the process's extra place (quotas) goes to the other pipeline:
// the process's count and every member's within one of P/n stay as they
// were.
func (d *decision) toOpenCopies() {
	P := int32(len(d.final))
	open := func(j int, p int32) bool { return slices.Contains(d.in.Members[j].Meta.Standby, p) }
	moved := func(p int32) bool { return d.final[p] != noOwner && d.final[p] != d.owner[p] }
	// Each process's member quotas are lo or lo+1 (quotas).
	lo, hi := map[string]int{}, map[string]int{}
	for i, q := range d.quota {
		if l, ok := lo[d.proc[i]]; !ok || q < l {
			lo[d.proc[i]] = q
		}
		hi[d.proc[i]] = max(hi[d.proc[i]], q)
	}
	for p := range P {
		j := d.final[p]
		if !moved(p) || open(j, p) {
			continue
		}
		k := -1
		for i := range d.n {
			if i != j && d.proc[i] == d.proc[j] && open(i, p) {
				k = i
				break
			}
		}
		if k == -1 {
			continue
		}
		// A swap: a partition moving to k that k holds no open copy of.
		q := int32(-1)
		for r := range P {
			if d.final[r] == k && moved(r) && !open(k, r) && (q == -1 || open(j, r) && !open(j, q)) {
				q = r
			}
		}
		switch {
		case q != -1:
			d.final[p], d.final[q] = k, j
		case d.load[k] < hi[d.proc[k]] && d.load[j] > lo[d.proc[j]]:
			d.final[p] = k
			d.load[k]++
			d.load[j]--
		}
	}
}

func (d *decision) placeStandbys() {
	if d.cfg.Standbys <= 0 || d.n == 0 {
		return
	}
	for p := range int32(len(d.final)) {
		excluded := map[string]bool{d.proc[d.final[p]]: true}
		for i, ws := range d.warmup {
			if slices.Contains(ws, p) {
				excluded[d.proc[i]] = true
			}
		}
		for range d.cfg.Standbys {
			j := -1
			for i := range d.n {
				if excluded[d.proc[i]] {
					continue
				}
				if j == -1 || d.standbyBetter(p, i, j) {
					j = i
				}
			}
			if j == -1 {
				break // fewer processes than standbys: fewer standbys
			}
			d.standb[j] = append(d.standb[j], p)
			excluded[d.proc[j]] = true
		}
	}
}

// standbyBetter is whether member i is a better place than j for a standby
// of p: a caught-up copy first, then fewer standbys and warm-ups, then
// fewer actives (among a process's pipelines: the one with room for p when
// p's active process fails, so that it takes p over from its own open
// standby copy: best), then the least lag (then member order: i is later).
func (d *decision) standbyBetter(p int32, i, j int) bool {
	if ci, cj := d.caught(i, p), d.caught(j, p); ci != cj {
		return ci
	}
	li, lj := len(d.standb[i])+len(d.warmup[i]), len(d.standb[j])+len(d.warmup[j])
	if li != lj {
		return li < lj
	}
	if d.load[i] != d.load[j] {
		return d.load[i] < d.load[j]
	}
	return d.lag(i, p) < d.lag(j, p)
}

func (d *decision) result() []group.Member {
	out := make([]group.Member, d.n)
	for i, m := range d.in.Members {
		out[i] = group.Member{MemberID: m.MemberID, InstanceID: m.Meta.InstanceID, Process: d.proc[i], Addr: m.Meta.Addr,
			Standby: d.standb[i], Warmup: d.warmup[i]}
		if d.stateAware() {
			for _, p := range append(slices.Clone(d.standb[i]), d.warmup[i]...) {
				if out[i].Lag == nil {
					out[i].Lag = map[int32]int64{}
				}
				out[i].Lag[p] = d.lag(i, p)
			}
		}
	}
	// Cooperative: a partition changing owner goes to no one in this
	// generation.
	for p, f := range d.final {
		if o := d.owner[p]; o != noOwner && o != f {
			continue
		}
		out[f].Active = append(out[f].Active, int32(p))
	}
	return out
}

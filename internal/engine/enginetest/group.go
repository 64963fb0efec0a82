package enginetest

import (
	"fmt"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/kstate/kstate/internal/engine"
	"github.com/kstate/kstate/internal/group"
)

// Group is the leader of the in-memory group, for tests of the group view:
// it assigns the input partitions to its members in rebalances and, as
// kstate's balancer does, sends every member the view of the whole group
// (group.View) with its assignment. Join wraps a Member into the session
// to hand to the coordinator; that session is an engine.GroupViewer.
type Group struct {
	b   *Broker
	now func() time.Time

	mu      sync.Mutex
	gen     int32
	members []*GroupMember
}

// GroupMember is a Member of a Group: an engine.Session (every optional
// interface of Member included) that is also an engine.GroupViewer.
type GroupMember struct {
	*Member
	g          *Group
	process    string
	addr       string
	view       group.View        // under g.mu
	rebalances []group.Rebalance // newest first, under g.mu
}

var _ engine.GroupViewer = (*GroupMember)(nil)

// maxRebalances is how many rebalances a GroupMember remembers.
const maxRebalances = 10

// NewGroup returns the group of b's input; now stamps the rebalances
// (nil: time.Now).
func NewGroup(b *Broker, now func() time.Time) *Group {
	if now == nil {
		now = time.Now
	}
	return &Group{b: b, now: now}
}

// Join makes m a member of g, running in the application instance process
// (group.Meta.Process) and advertising addr; it gets partitions and the
// view at the next Rebalance.
func (g *Group) Join(m *Member, process, addr string) *GroupMember {
	gm := &GroupMember{Member: m, g: g, process: process, addr: addr}
	g.mu.Lock()
	g.members = append(g.members, gm)
	g.mu.Unlock()
	return gm
}

// Rebalance starts the next generation, which took took: the members named
// in assign are the group (a member left out has left it, or timed out),
// each with the active partitions, standby and warm-up shards and lags of
// its group.Member (its other fields are filled in). Each member is
// revoked the partitions it loses and assigned those it gains (as a
// cooperative rebalance: a Member left out is revoked everything), and
// every member of the new generation receives its view. The first member
// by instance id leads.
func (g *Group) Rebalance(took time.Duration, assign map[*GroupMember]group.Member) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.gen++
	start := g.now().Add(-took)
	v := group.View{Generation: g.gen, Partitions: int32(g.partitions()), At: g.now()}
	var in []*GroupMember
	for _, gm := range g.members {
		if _, ok := assign[gm]; ok {
			in = append(in, gm)
		}
	}
	sort.Slice(in, func(i, j int) bool { return in[i].name < in[j].name })
	for i, gm := range in {
		a := assign[gm]
		a.MemberID, a.InstanceID, a.Process, a.Addr = gm.memberID(), gm.name, gm.process, gm.addr
		a.Active, a.Standby, a.Warmup = sorted(a.Active), sorted(a.Standby), sorted(a.Warmup)
		if i == 0 {
			v.LeaderID = a.MemberID
		}
		v.Members = append(v.Members, a)
	}
	for _, gm := range g.members {
		var now []int32
		a, member := assign[gm]
		if member {
			now = a.Active
		}
		gained, lost := gm.move(now)
		if !member {
			continue
		}
		gm.view = v
		r := group.Rebalance{Generation: g.gen, Start: start, Duration: took, Leader: gm.memberID() == v.LeaderID, Assigned: gained, Revoked: lost}
		gm.rebalances = append([]group.Rebalance{r}, gm.rebalances...)
		if len(gm.rebalances) > maxRebalances {
			gm.rebalances = gm.rebalances[:maxRebalances]
		}
	}
}

// partitions is the input's partition count.
func (g *Group) partitions() int {
	g.b.mu.Lock()
	defer g.b.mu.Unlock()
	return len(g.b.topics[g.b.input])
}

// move revokes what gm holds beyond now and assigns what it lacks.
func (gm *GroupMember) move(now []int32) (gained, lost []int32) {
	gm.Member.mu.Lock()
	held := sortedParts(gm.Member.mu.fetchable)
	gm.Member.mu.Unlock()
	for _, p := range held {
		if !slices.Contains(now, p) {
			lost = append(lost, p)
		}
	}
	for _, p := range sorted(now) {
		if !slices.Contains(held, p) {
			gained = append(gained, p)
		}
	}
	if len(lost) > 0 {
		gm.Revoke(lost...)
	}
	if len(gained) > 0 {
		gm.Assign(false, gained...)
	}
	return gained, lost
}

func (gm *GroupMember) memberID() string { return fmt.Sprintf("%s-member", gm.name) }

// GroupView returns the view of gm's last rebalance and its rebalances,
// newest first (engine.GroupViewer).
func (gm *GroupMember) GroupView() (group.View, []group.Rebalance) {
	gm.g.mu.Lock()
	defer gm.g.mu.Unlock()
	v := gm.view
	v.Members = slices.Clone(v.Members)
	return v, slices.Clone(gm.rebalances)
}

func sorted(ps []int32) []int32 {
	out := slices.Clone(ps)
	slices.Sort(out)
	return out
}

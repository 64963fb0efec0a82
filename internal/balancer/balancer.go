package balancer

import (
	"fmt"
	"maps"
	"slices"
	"sort"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kstate/kstate/internal/group"
)

// ProtocolName is the name kstate's balancer joins the group with.
const ProtocolName = "kstate"

// Balancer is kstate's kgo.GroupBalancer (classic protocol, cooperative).
// The functions are called on franz-go's group goroutine; all but Config
// are optional.
type Balancer struct {
	Config Config
	// Meta returns what this member reports as it joins (nil: nothing).
	Meta func() group.Meta
	// EndOffsets returns the changelog's end offsets per partition, for
	// the leader (nil or an error: balance without them, sticky and
	// balanced only). It must return within a short timeout: the group
	// waits for the leader's assignment.
	EndOffsets func() (map[int32]int64, error)
	// Probing is sent to the members while warm-ups exist: how often the
	// leader forces a probing rebalance.
	Probing time.Duration
	// OnJoin is called as the member joins (before its metadata is built).
	OnJoin func()
	// OnBalance is called on the leader after it balanced generation gen
	// (err: the end offsets could not be read).
	OnBalance func(gen int32, err error)
	// OnAssignment is called with each assignment this member receives:
	// its active partitions per topic and the kstate part, ok false when the group runs a fallback
	// protocol (an older release is in the group) or the leader's part
	// could not be decoded (then a is zero: no standbys, no view).
	OnAssignment func(active map[string][]int32, a group.Assignment, ok bool)
	// Now is the clock of View.At (default time.Now).
	Now func() time.Time
}

var _ kgo.GroupBalancer = (*Balancer)(nil)

// Protocols returns the balancers a session joins with, in preference
// order: kstate's, then the protocol of the releases before it
// (cooperative-sticky; range when the topics are co-partitioned), so that
// a member of an older release still joins: the group runs the older
// protocol until every member is upgraded (the coordinator picks a
// protocol every member supports).
func Protocols(b *Balancer) []kgo.GroupBalancer {
	old := kgo.CooperativeStickyBalancer()
	if b.Config.CoPartitioned {
		old = kgo.RangeBalancer()
	}
	return []kgo.GroupBalancer{b, fallback{old, b}}
}

// fallback is an older release's balancer: it reports its assignments to
// OnAssignment as not kstate's.
type fallback struct {
	kgo.GroupBalancer
	b *Balancer
}

func (f fallback) MemberBalancer(members []kmsg.JoinGroupResponseMember) (kgo.GroupMemberBalancer, map[string]struct{}, error) {
	if f.b.OnBalance != nil {
		f.b.OnBalance(-1, nil)
	}
	return f.GroupBalancer.MemberBalancer(members)
}

func (f fallback) ParseSyncAssignment(assignment []byte) (map[string][]int32, error) {
	m, err := f.GroupBalancer.ParseSyncAssignment(assignment)
	if err == nil && f.b.OnAssignment != nil {
		f.b.OnAssignment(m, group.Assignment{}, false)
	}
	return m, err
}

func (*Balancer) ProtocolName() string { return ProtocolName }
func (*Balancer) IsCooperative() bool  { return true }

// JoinGroupMetadata is Kafka's consumer metadata (topics, owned partitions
// and generation, as the cooperative-sticky balancer sends them: Kafka's
// tools describe the group alike) with the member's group.Meta as
// UserData.
func (b *Balancer) JoinGroupMetadata(interests []string, current map[string][]int32, generation int32) []byte {
	if b.OnJoin != nil {
		b.OnJoin()
	}
	meta := kmsg.NewConsumerMemberMetadata()
	meta.Version = 3
	meta.Topics = interests
	meta.Generation = generation
	for _, topic := range slices.Sorted(maps.Keys(current)) {
		ps := current[topic]
		if len(ps) == 0 {
			continue
		}
		owned := kmsg.NewConsumerMemberMetadataOwnedPartition()
		owned.Topic = topic
		owned.Partitions = slices.Sorted(slices.Values(ps))
		meta.OwnedPartitions = append(meta.OwnedPartitions, owned)
	}
	var gm group.Meta
	if b.Meta != nil {
		gm = b.Meta()
	}
	meta.UserData = group.EncodeMeta(gm)
	return meta.AppendTo(nil)
}

// ParseSyncAssignment returns the active partitions and passes the kstate
// part to OnAssignment.
func (b *Balancer) ParseSyncAssignment(assignment []byte) (map[string][]int32, error) {
	var ka kmsg.ConsumerMemberAssignment
	if err := ka.ReadFrom(assignment); err != nil {
		return nil, fmt.Errorf("balancer: sync assignment parse failed: %v", err)
	}
	m := make(map[string][]int32, len(ka.Topics))
	for _, t := range ka.Topics {
		m[t.Topic] = t.Partitions
	}
	if b.OnAssignment != nil {
		a, err := group.DecodeAssignment(ka.UserData)
		b.OnAssignment(m, a, err == nil)
	}
	return m, nil
}

func (b *Balancer) MemberBalancer(members []kmsg.JoinGroupResponseMember) (kgo.GroupMemberBalancer, map[string]struct{}, error) {
	cb, err := kgo.NewConsumerBalancer(b, members)
	if err != nil {
		return nil, nil, err
	}
	return cb, cb.MemberTopics(), nil
}

// Balance is the leader's side: Decide over the members' metadata, then
// each member's Kafka assignment (partition p of every topic it consumes
// for each active p) with its kstate part.
func (b *Balancer) Balance(cb *kgo.ConsumerBalancer, topics map[string]int32) kgo.IntoSyncAssignment {
	info := cb.Info()
	var P int32
	for _, n := range topics {
		P = max(P, n)
	}
	var in Input
	in.Partitions = P
	var subs [][]string
	cb.EachMember(func(m *kmsg.JoinGroupResponseMember, meta *kmsg.ConsumerMemberMetadata) {
		gm, err := group.DecodeMeta(meta.UserData)
		if err != nil {
			gm = group.Meta{} // an unknown member: it holds nothing
		}
		if gm.InstanceID == "" && m.InstanceID != nil {
			gm.InstanceID = *m.InstanceID
		}
		var owned []int32
		for _, o := range meta.OwnedPartitions {
			for _, p := range o.Partitions {
				if !slices.Contains(owned, p) {
					owned = append(owned, p)
				}
			}
		}
		slices.Sort(owned)
		in.Members = append(in.Members, Member{MemberID: m.MemberID, Meta: gm, Owned: owned, Generation: meta.Generation})
		subs = append(subs, meta.Topics)
	})
	var endErr error
	if b.EndOffsets != nil {
		in.EndOffsets, endErr = b.EndOffsets()
		if endErr != nil {
			in.EndOffsets = nil
		}
	} else {
		endErr = fmt.Errorf("balancer: no end offsets reader")
	}
	out := Decide(in, b.Config)
	now := time.Now
	if b.Now != nil {
		now = b.Now
	}
	view := group.View{Generation: info.Generation, LeaderID: info.LeaderID, Partitions: P, Members: out, At: now()}
	var probing time.Duration
	for _, m := range out {
		if len(m.Warmup) > 0 {
			probing = b.Probing
		}
	}
	plan := make(syncPlan, 0, len(out))
	for i, m := range out {
		var ka kmsg.ConsumerMemberAssignment
		for _, topic := range slices.Sorted(slices.Values(subs[i])) {
			n, ok := topics[topic]
			if !ok {
				continue
			}
			at := kmsg.NewConsumerMemberAssignmentTopic()
			at.Topic = topic
			for _, p := range m.Active {
				if p < n {
					at.Partitions = append(at.Partitions, p)
				}
			}
			if len(at.Partitions) > 0 {
				ka.Topics = append(ka.Topics, at)
			}
		}
		ka.UserData = group.EncodeAssignment(group.Assignment{Standby: m.Standby, Warmup: m.Warmup, Probing: probing, View: view})
		sa := kmsg.NewSyncGroupRequestGroupAssignment()
		sa.MemberID = m.MemberID
		sa.MemberAssignment = ka.AppendTo(nil)
		plan = append(plan, sa)
	}
	sort.Slice(plan, func(i, j int) bool { return plan[i].MemberID < plan[j].MemberID })
	if b.OnBalance != nil {
		b.OnBalance(info.Generation, endErr)
	}
	return plan
}

type syncPlan []kmsg.SyncGroupRequestGroupAssignment

func (p syncPlan) IntoSyncAssignment() []kmsg.SyncGroupRequestGroupAssignment { return p }

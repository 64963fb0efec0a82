package balancer

import (
	"slices"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kstate/kstate/internal/group"
)

// joinMember is a member as the leader sees it in the JoinGroup response:
// the metadata the balancer b of that member would send.
func joinMember(id string, b kgo.GroupBalancer, topics []string, owned map[string][]int32, gen int32) kmsg.JoinGroupResponseMember {
	m := kmsg.NewJoinGroupResponseMember()
	m.MemberID = id + "-mid"
	m.InstanceID = kmsg.StringPtr(id)
	m.ProtocolMetadata = b.JoinGroupMetadata(topics, owned, gen)
	return m
}

// balance runs the leader's side of b over members and decodes the
// result per member id.
func balance(t *testing.T, b *Balancer, members []kmsg.JoinGroupResponseMember, topics map[string]int32) map[string]kmsg.ConsumerMemberAssignment {
	t.Helper()
	mb, _, err := b.MemberBalancer(members)
	if err != nil {
		t.Fatal(err)
	}
	into, err := mb.(kgo.GroupMemberBalancerOrError).BalanceOrError(topics)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]kmsg.ConsumerMemberAssignment{}
	for _, sa := range into.IntoSyncAssignment() {
		var ka kmsg.ConsumerMemberAssignment
		if err := ka.ReadFrom(sa.MemberAssignment); err != nil {
			t.Fatal(err)
		}
		out[sa.MemberID] = ka
	}
	return out
}

func parts(ka kmsg.ConsumerMemberAssignment) map[string][]int32 {
	m := map[string][]int32{}
	for _, t := range ka.Topics {
		m[t.Topic] = t.Partitions
	}
	return m
}

// TestCoPartitionedHolds: partition p of every topic goes to one member, as
// each member joins; the kstate part carries the view.
func TestCoPartitionedHolds(t *testing.T) {
	topics := []string{"in", "in2"}
	counts := map[string]int32{"in": 4, "in2": 4}
	member := func(id string) *Balancer {
		return &Balancer{Config: Config{CoPartitioned: true}, Meta: func() group.Meta {
			return group.Meta{InstanceID: id, Process: id}
		}}
	}
	leader := member("a")
	got := balance(t, leader, []kmsg.JoinGroupResponseMember{
		joinMember("a", leader, topics, map[string][]int32{"in": {0, 1, 2, 3}, "in2": {0, 1, 2, 3}}, 3),
		joinMember("b", member("b"), topics, nil, -1),
	}, counts)
	// No end offsets reader: sticky and balanced, so a gives up 2 and 3
	// (cooperative: b gets them at the next join).
	if a := parts(got["a-mid"]); !slices.Equal(a["in"], []int32{0, 1}) || !slices.Equal(a["in2"], []int32{0, 1}) {
		t.Fatalf("a: %v", a)
	}
	got = balance(t, leader, []kmsg.JoinGroupResponseMember{
		joinMember("a", leader, topics, map[string][]int32{"in": {0, 1}, "in2": {0, 1}}, 4),
		joinMember("b", member("b"), topics, nil, -1),
	}, counts)
	b := parts(got["b-mid"])
	if !slices.Equal(b["in"], []int32{2, 3}) || !slices.Equal(b["in2"], []int32{2, 3}) {
		t.Fatalf("b: %v", b)
	}
	ga, err := group.DecodeAssignment(got["b-mid"].UserData)
	if err != nil {
		t.Fatal(err)
	}
	if o, ok := ga.View.Owner(3); !ok || o.InstanceID != "b" || len(ga.View.Unowned()) != 0 {
		t.Fatalf("view %+v", ga.View)
	}
}

// TestMixedMetadata: a member whose metadata is an older release's
// (cooperative-sticky's UserData) or empty still gets its share; the
// protocols advertised keep an older release's so that it can join.
func TestMixedMetadata(t *testing.T) {
	topics := []string{"in"}
	leader := &Balancer{Meta: func() group.Meta {
		return group.Meta{InstanceID: "a", Process: "a", Shards: map[int32]int64{0: 5, 1: 5, 2: 5, 3: 5}}
	},
		EndOffsets: func() (map[int32]int64, error) { return map[int32]int64{0: 5, 1: 5, 2: 5, 3: 5}, nil }}
	old := kgo.CooperativeStickyBalancer()
	empty := kmsg.NewJoinGroupResponseMember()
	empty.MemberID = "c-mid"
	md := kmsg.NewConsumerMemberMetadata()
	md.Topics = topics
	empty.ProtocolMetadata = md.AppendTo(nil)
	got := balance(t, leader, []kmsg.JoinGroupResponseMember{
		joinMember("a", leader, topics, map[string][]int32{"in": {0, 1, 2, 3}}, 2),
		joinMember("b", old, topics, nil, -1),
		empty,
	}, map[string]int32{"in": 4})
	if len(got) != 3 {
		t.Fatalf("assignments for %d members", len(got))
	}
	// Changelog end 5, AcceptableLag 0: nobody else is caught up, so a
	// keeps all and the others warm up (MaxWarmups 2).
	warm := 0
	for _, id := range []string{"b-mid", "c-mid"} {
		ga, err := group.DecodeAssignment(got[id].UserData)
		if err != nil {
			t.Fatal(err)
		}
		warm += len(ga.Warmup)
	}
	if len(parts(got["a-mid"])["in"]) != 4 || warm != 2 {
		t.Fatalf("a %v, warm-ups %d", parts(got["a-mid"]), warm)
	}

	for _, co := range []bool{false, true} {
		var names []string
		for _, b := range Protocols(&Balancer{Config: Config{CoPartitioned: co}}) {
			names = append(names, b.ProtocolName())
		}
		want := []string{"kstate", "cooperative-sticky"}
		if co {
			want = []string{"kstate", "range"}
		}
		if !slices.Equal(names, want) {
			t.Errorf("co-partitioned %v: protocols %v, want %v", co, names, want)
		}
	}
}

// TestJoinMetadataForKafkaTools: the join metadata is Kafka's consumer
// metadata (topics, owned partitions, generation) with the member's Meta.
func TestJoinMetadataForKafkaTools(t *testing.T) {
	b := &Balancer{Meta: func() group.Meta {
		return group.Meta{InstanceID: "i", Addr: "http://x", Shards: map[int32]int64{2: 40}}
	}}
	var md kmsg.ConsumerMemberMetadata
	if err := md.ReadFrom(b.JoinGroupMetadata([]string{"in"}, map[string][]int32{"in": {2, 0}}, 7)); err != nil {
		t.Fatal(err)
	}
	if md.Generation != 7 || !slices.Equal(md.Topics, []string{"in"}) || len(md.OwnedPartitions) != 1 || !slices.Equal(md.OwnedPartitions[0].Partitions, []int32{0, 2}) {
		t.Fatalf("metadata %+v", md)
	}
	gm, err := group.DecodeMeta(md.UserData)
	if err != nil || gm.Addr != "http://x" || gm.Shards[2] != 40 {
		t.Fatalf("user data %+v %v", gm, err)
	}
}

package kafka

import (
	"context"
	"fmt"
)

// GroupMember is one member of a consumer group, as DescribeGroups shows it.
type GroupMember struct {
	MemberID   string
	InstanceID string // "" for a dynamic member
	ClientID   string
	Host       string
}

// PartitionOwners returns the member of group that each partition of topic
// is assigned to (classic consumer protocol); a partition missing from the
// map is not assigned (the group is empty or rebalancing).
func (a *Admin) PartitionOwners(ctx context.Context, group, topic string) (map[int32]GroupMember, error) {
	ds, err := a.adm.DescribeGroups(ctx, group)
	if err != nil {
		return nil, fmt.Errorf("kafka: describe group %q: %w", group, err)
	}
	d, ok := ds[group]
	if !ok {
		return nil, fmt.Errorf("kafka: describe group %q: no answer", group)
	}
	if d.Err != nil {
		return nil, fmt.Errorf("kafka: describe group %q: %w", group, d.Err)
	}
	out := make(map[int32]GroupMember)
	for _, m := range d.Members {
		ca, ok := m.Assigned.AsConsumer()
		if !ok {
			continue
		}
		gm := GroupMember{MemberID: m.MemberID, ClientID: m.ClientID, Host: m.ClientHost}
		if m.InstanceID != nil {
			gm.InstanceID = *m.InstanceID
		}
		for _, t := range ca.Topics {
			if t.Topic != topic {
				continue
			}
			for _, p := range t.Partitions {
				out[p] = gm
			}
		}
	}
	return out, nil
}

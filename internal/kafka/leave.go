package kafka

import (
	"context"
	"errors"
	"fmt"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Leave closes the session (see Close) and then takes the member out of its
// group, so that the group is empty at once when this was its last member:
// kafka-consumer-groups --delete and offset resets then work instead of
// failing with NON_EMPTY_GROUP until the session timeout.
//
// A dynamic member already leaves in Close. A static one (InstanceID) does
// not: franz-go never sends a LeaveGroup for it, so that a restart within
// SessionTimeout gets its partitions back without a rebalance. Leave
// therefore sends the KIP-345 LeaveGroup naming the instance id, from a
// short-lived client, after Close: sent while the session's own client still
// heartbeats, the next heartbeat would fail with UNKNOWN_MEMBER_ID and the
// client would join again. A member that is no longer in the group (franz-go
// left itself because a rebalance was in progress, or the group is gone)
// counts as left.
//
// Leave costs the fast restart: the partitions are rebalanced to the other
// members at once, and an instance that comes back joins as a new member.
func (s *Session) Leave(ctx context.Context) error {
	s.Close()
	if s.cfg.InstanceID == "" {
		return nil
	}
	cl, err := kgo.NewClient(s.cfg.clientConfig().toolOpts()...)
	if err != nil {
		return fmt.Errorf("kafka: leave group %q: %w", s.cfg.GroupID, err)
	}
	defer cl.Close()
	resps, err := kadm.NewClient(cl).LeaveGroup(ctx, kadm.LeaveGroup(s.cfg.GroupID).
		InstanceIDs(s.cfg.InstanceID).Reason("kstate: graceful shutdown (LeaveGroupOnShutdown)"))
	if err == nil {
		r, ok := resps[s.cfg.InstanceID]
		err = r.Err
		if !ok {
			err = fmt.Errorf("the broker's answer does not name instance %q", s.cfg.InstanceID)
		}
	}
	if err != nil && !errors.Is(err, kerr.UnknownMemberID) && !errors.Is(err, kerr.GroupIDNotFound) {
		err = access{groupOp: "Read", group: s.cfg.GroupID}.classify(err)
		return fmt.Errorf("kafka: static member %q could not leave group %q (it stays until its session times out): %w",
			s.cfg.InstanceID, s.cfg.GroupID, err)
	}
	return nil
}

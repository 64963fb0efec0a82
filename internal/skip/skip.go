// Package skip records, for a stopped application, one input record that
// its next run drops (kstate.SkipRecord and `kstate skip`): the request is
// written to the partition's changelog as an engine metadata entry
// (internal/engine/skip.go), which the restored task consumes in the same
// transaction as the batch that passes the offset. The records before the
// skipped one are processed, unlike with a committed offset moved past it.
package skip

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/kstate/kstate/internal/engine"
	"github.com/kstate/kstate/internal/kafka"
)

// Request names the record to skip.
type Request struct {
	Client kafka.ClientConfig
	App    string // the application id (group id, "<App>-changelog")
	// Inputs are the application's input topics (the repartition topic
	// included when it has one); nil: not known (the CLI), any topic is
	// taken.
	Inputs    []string
	Topic     string
	Partition int32
	Offset    int64
	// Wait: while the group has members, wait (until ctx ends) instead of
	// refusing at once.
	Wait bool
	// TxnTimeout is the changelog transaction's timeout; 0: the default.
	TxnTimeout time.Duration
}

// Result is what Run found.
type Result struct {
	// Committed is the group's committed offset of the partition, -1:
	// none (the partition's first batch never committed).
	Committed int64
	// Start and End are the partition's log start and end offsets.
	Start, End int64
}

// ErrRefused is wrapped by every refusal: the skip cannot be done safely
// as asked, and nothing was written.
var ErrRefused = errors.New("skip refused")

func refuse(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrRefused, fmt.Sprintf(format, args...))
}

// Run checks the request against the application and writes the skip to
// the changelog partition. It refuses (ErrRefused) an offset already
// processed (below the group's committed offset), an offset outside the
// partition's records, an application without a changelog of the input's
// partition count, and, unless Wait, a group with members.
func Run(ctx context.Context, r Request) (Result, error) {
	res := Result{Committed: -1}
	if r.App == "" || r.Topic == "" {
		return res, errors.New("skip: the application id and the topic are required")
	}
	if r.Inputs != nil && !slices.Contains(r.Inputs, r.Topic) {
		return res, refuse("topic %q is not an input topic of application %q (its inputs: %q)", r.Topic, r.App, r.Inputs)
	}
	adm, err := r.Client.NewAdmin()
	if err != nil {
		return res, fmt.Errorf("skip: %w", err)
	}
	defer adm.Close()
	n, err := adm.Partitions(ctx, r.Topic)
	if err != nil {
		return res, fmt.Errorf("skip: input topic %q: %w", r.Topic, err)
	}
	if r.Partition < 0 || int(r.Partition) >= n {
		return res, refuse("input topic %q has partitions 0..%d, not %d", r.Topic, n-1, r.Partition)
	}
	changelog := r.App + "-changelog"
	cn, err := adm.Partitions(ctx, changelog)
	switch {
	case errors.Is(err, kafka.ErrTopicNotFound):
		return res, refuse("application %q has no changelog topic %q: check the application id (Options.ApplicationID); the skip is recorded there, so the application must have started once", r.App, changelog)
	case err != nil:
		return res, fmt.Errorf("skip: changelog topic %q: %w", changelog, err)
	case cn != n:
		return res, refuse("the changelog %q has %d partitions and input topic %q has %d: the partition count changed, skipping a record does not help (docs/OPERATIONS.md, PartitionsChangedError)", changelog, cn, r.Topic, n)
	}
	if err := waitEmpty(ctx, adm, r.App, r.Wait); err != nil {
		return res, err
	}
	committed, err := adm.CommittedOffsets(ctx, r.App, r.Topic)
	if errors.Is(err, kerr.GroupIDNotFound) {
		// A group that never committed (some brokers, kfake, say so).
		committed, err = nil, nil
	}
	if err != nil {
		return res, fmt.Errorf("skip: %w", err)
	}
	if c, ok := committed[r.Partition]; ok {
		res.Committed = c
		if r.Offset < c {
			return res, refuse("offset %d of topic %q partition %d was processed already: the group %q committed offset %d (the next record to process); nothing to skip", r.Offset, r.Topic, r.Partition, r.App, c)
		}
	}
	starts, err := adm.Kadm().ListStartOffsets(ctx, r.Topic)
	if err == nil {
		err = starts.Error()
	}
	if err != nil {
		return res, fmt.Errorf("skip: start offsets of topic %q: %w", r.Topic, err)
	}
	ends, err := adm.EndOffsets(ctx, r.Topic)
	if err != nil {
		return res, fmt.Errorf("skip: %w", err)
	}
	if so, ok := starts.Lookup(r.Topic, r.Partition); ok {
		res.Start = so.Offset
	}
	res.End = ends[r.Partition]
	if r.Offset < res.Start || r.Offset >= res.End {
		return res, refuse("topic %q partition %d has no record at offset %d: its records are at offsets %d..%d", r.Topic, r.Partition, r.Offset, res.Start, res.End-1)
	}
	k, v := engine.SkipRecord(r.Topic, r.Offset)
	rec := kafka.Record{Topic: changelog, Partition: r.Partition, Key: k, Value: v}
	if _, err := r.Client.WriteTransaction(ctx, r.App+"-skip", r.TxnTimeout, []kafka.Record{rec}); err != nil {
		return res, fmt.Errorf("skip: record the skip in changelog %q partition %d (nothing was skipped; run it again): %w", changelog, r.Partition, err)
	}
	return res, nil
}

// waitEmpty returns once group has no members; with wait false it refuses
// at once.
func waitEmpty(ctx context.Context, adm *kafka.Admin, group string, wait bool) error {
	for {
		gs, err := adm.Kadm().DescribeGroups(ctx, group)
		if err != nil {
			return fmt.Errorf("skip: describe group %q: %w", group, err)
		}
		g, ok := gs[group]
		if !ok || errors.Is(g.Err, kerr.GroupIDNotFound) || (g.Err == nil && len(g.Members) == 0) {
			return nil
		}
		if g.Err != nil {
			return fmt.Errorf("skip: describe group %q: %w", group, g.Err)
		}
		ids := make([]string, 0, len(g.Members))
		for _, m := range g.Members {
			id := m.MemberID
			if m.InstanceID != nil {
				id = *m.InstanceID + " (static)"
			}
			ids = append(ids, id+" on "+m.ClientHost)
		}
		msg := fmt.Sprintf("group %q is %s with %d member(s): %s; stop every instance of the application first (a stopped instance stays a static member until Options.Kafka.SessionTimeout passes, unless it ran with Options.Kafka.LeaveGroupOnShutdown)",
			group, g.State, len(g.Members), strings.Join(ids, ", "))
		if !wait {
			return refuse("%s", msg)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w: %s: %w", ErrRefused, msg, ctx.Err())
		case <-time.After(500 * time.Millisecond):
		}
	}
}

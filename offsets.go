package kstate

import (
	"context"
	"fmt"
	"sort"

	"github.com/kstate/kstate/internal/engine"
	"github.com/kstate/kstate/internal/kafka"
)

// SetInputOffsets sets, for the stopped application cfg.ApplicationID,
// the input offset each given partition continues from: it commits the
// offsets for the application's consumer group and records each one as the
// partition state's input offset in the changelog (one transaction), so
// the restore's consistency check accepts them. Every instance of the
// application must be stopped; a stopped instance stays a member of the
// group until its SessionTimeout, and SetInputOffsets waits for that
// (bounded by ctx).
//
// Two uses (docs/OPERATIONS.md):
//   - Skip a record that stops Run under the Fail policy (a DecodeError
//     names its partition and offset): SetInputOffsets(ctx, cfg,
//     map[int32]int64{partition: offset + 1}), then Run again. The state is
//     kept; only that record is never processed.
//   - Start a new application id where another stopped ("Changing the
//     number of input partitions"): with Config.InitialState set, a
//     partition whose offset was set this way still gets its initial state
//     on the first run.
//
// The offsets are committed first and the changelog records written
// second: if SetInputOffsets fails in between, Run refuses to start on the
// partition (the state does not match the committed offset) until
// SetInputOffsets is run again with the same offsets.
func SetInputOffsets[K, I, O any](ctx context.Context, cfg Config[K, I, O], offsets map[int32]int64) (err error) {
	defer func() {
		if ae, ok := authError(err); ok {
			err = ae
		}
	}()
	c, err := cfg.withDefaults()
	if err != nil {
		return err
	}
	adm, err := c.clientConfig().NewAdmin()
	if err != nil {
		return fmt.Errorf("kstate: %w", err)
	}
	defer adm.Close()
	if in := c.inputTopics(); len(in) > 1 {
		return fmt.Errorf("%w: SetInputOffsets supports an application with one input topic, this one has %d (%q)", ErrConfig, len(in), in)
	}
	topic, changelog := c.inputTopics()[0], c.ApplicationID+"-changelog"
	n, err := adm.Partitions(ctx, topic)
	if err != nil {
		return fmt.Errorf("kstate: input topic %q: %w", topic, err)
	}
	parts := make([]int32, 0, len(offsets))
	for p, o := range offsets {
		if p < 0 || int(p) >= n || o < 0 {
			return fmt.Errorf("%w: SetInputOffsets: partition %d offset %d: input topic %q has partitions 0..%d", ErrConfig, p, o, topic, n-1)
		}
		parts = append(parts, p)
	}
	sort.Slice(parts, func(i, j int) bool { return parts[i] < parts[j] })
	if err := adm.EnsureTopic(ctx, kafka.TopicSpec{Name: changelog, Partitions: n, ReplicationFactor: -1, Compacted: true}); err != nil {
		return fmt.Errorf("kstate: changelog topic: %w", err)
	}
	if err := adm.CommitGroupOffsets(ctx, c.ApplicationID, topic, offsets); err != nil {
		return fmt.Errorf("kstate: %w", err)
	}
	recs := make([]kafka.Record, len(parts))
	for i, p := range parts {
		k, v := engine.InputOffsetRecord(offsets[p])
		recs[i] = kafka.Record{Topic: changelog, Partition: p, Key: k, Value: v}
	}
	if _, err := c.clientConfig().WriteTransaction(ctx, c.ApplicationID+"-set-offsets", c.TransactionTimeout, recs); err != nil {
		return fmt.Errorf("kstate: the offsets are committed but not recorded in the changelog (Run refuses those partitions): run SetInputOffsets again: %w", err)
	}
	return nil
}

package kstate

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/kstate/kstate/internal/setoffsets"
	"github.com/kstate/kstate/internal/skip"
)

// SetInputOffsets sets, for the stopped application o.ApplicationID
// running topology t, the input offset each given partition continues
// from: it commits the
// offsets for the application's consumer group and records each one as the
// partition state's input offset in the changelog (one transaction), so
// the restore's consistency check accepts them. Every instance of the
// application must be stopped; a stopped instance stays a member of the
// group until its Options.Kafka.SessionTimeout, and SetInputOffsets waits for that
// (bounded by ctx).
//
// Its use (docs/OPERATIONS.md): start a new application id where another
// stopped ("Changing the number of input partitions"): with
// Topology.InitialState set, a partition whose offset was set this way still
// gets its initial state on the first run. Moving an offset forward skips
// every record before it that was not committed yet: to skip one record
// that stops Run (a DecodeError), use SkipRecord instead.
//
// The offsets are committed first and the changelog records written
// second: if SetInputOffsets fails in between, Run refuses to start on the
// partition (the state does not match the committed offset) until
// SetInputOffsets is run again with the same offsets.
func SetInputOffsets[K, I, O any](ctx context.Context, t Topology[K, I, O], o Options, offsets map[int32]int64) (err error) {
	defer func() {
		if ae, ok := authError(err); ok {
			err = ae
		}
	}()
	c, err := newConfig(t, o).withDefaults()
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
	for p, o := range offsets {
		if p < 0 || int(p) >= n || o < 0 {
			return fmt.Errorf("%w: SetInputOffsets: partition %d offset %d: input topic %q has partitions 0..%d", ErrConfig, p, o, topic, n-1)
		}
	}
	err = setoffsets.Set(ctx, c.clientConfig(), adm, setoffsets.Request{
		Group: c.ApplicationID, Topic: topic, Offsets: offsets,
		Changelog: setoffsets.ChangelogSpec(changelog, n, nil),
		TxnID:     c.ApplicationID + "-set-offsets", TxnTimeout: c.TransactionTimeout,
	})
	switch {
	case errors.Is(err, setoffsets.ErrNotRecorded):
		return fmt.Errorf("kstate: %w; run SetInputOffsets again with the same offsets", err)
	case err != nil:
		err = fmt.Errorf("kstate: %w", err)
		if tm, ok := topicMismatch(err); ok {
			return tm
		}
		return err
	}
	return nil
}

// SkipRecord makes the next run of the stopped application
// o.ApplicationID drop the one input record at offset of topic's
// partition (an input topic of t, or the GroupBy repartition topic):
// typically the record a DecodeError names (its Topic, Partition, Offset) when
// it stops Run under the Fail policy. The next run processes the records
// before it, drops it (counted in Counters.Skipped, logged at Warn) and
// goes on with the records after it; nothing else is skipped, and the
// state is kept.
//
// The request is recorded in the partition's changelog (one transaction)
// and consumed in the transaction of the batch that passes the offset, so
// it holds through crashes and is applied exactly once. Every instance
// must be stopped: SkipRecord waits (bounded by ctx) while the group has
// members; a stopped static member stays one until its SessionTimeout.
// It refuses, writing nothing, an offset the group committed already
// (processed), an offset outside the partition's records, and an
// application whose changelog is missing or has another partition count.
// A second SkipRecord of the same partition before the next run replaces
// the first. `kstate skip` does the same from the command line.
func SkipRecord[K, I, O any](ctx context.Context, t Topology[K, I, O], o Options, topic string, partition int32, offset int64) (err error) {
	defer func() {
		if ae, ok := authError(err); ok {
			err = ae
		}
	}()
	c, err := newConfig(t, o).withDefaults()
	if err != nil {
		return err
	}
	inputs := slices.Clone(c.inputTopics())
	if rt := c.repartitionTopicOrNone(); rt != "" {
		inputs = append(inputs, rt)
	}
	_, err = skip.Run(ctx, skip.Request{
		Client: c.clientConfig(), App: c.ApplicationID, Inputs: inputs,
		Topic: topic, Partition: partition, Offset: offset,
		Wait: true, TxnTimeout: c.TransactionTimeout,
	})
	if err != nil {
		return fmt.Errorf("kstate: SkipRecord: %w", err)
	}
	return nil
}

// Package setoffsets moves the input offsets of a stopped application: the
// protocol kstate.SetInputOffsets and `kstate reset` run, and the part of
// it `kstate state rescale` shares (the changelog topic it creates).
//
// Committed input offsets need the state's input offsets in the changelog
// (engine.MetaInputOffset records), or the restore's consistency check
// refuses the partitions (a lost changelog). Set therefore commits the
// offsets for the group, then records each one in its changelog partition
// (one transaction). The order is deliberate: a failure in between leaves
// committed offsets the changelog does not confirm, which Run refuses
// (nothing is processed on them) until Set runs again with the same
// offsets. (The rescale builds a whole new application and writes in the
// other order, its changelog first: a failure leaves a changelog without
// offsets, which the next rescale refuses until it is deleted. It shares
// ChangelogSpec and KeptConfigs only.)
package setoffsets

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kstate/kstate/internal/engine"
	"github.com/kstate/kstate/internal/kafka"
)

// ErrNotRecorded is wrapped by Set's error when the offsets were committed
// but their changelog records were not written: Run refuses those
// partitions until Set runs again with the same offsets.
var ErrNotRecorded = errors.New("the offsets are committed but not recorded in the changelog (Run refuses those partitions)")

// Request is one Set.
type Request struct {
	Group string // the application id (its consumer group)
	Topic string // the input topic whose offsets move
	// Offsets maps each partition to move to the offset it continues from.
	Offsets map[int32]int64
	// Changelog is the application's changelog topic, created when missing
	// (ChangelogSpec builds it).
	Changelog kafka.TopicSpec
	// TxnID and TxnTimeout are the changelog transaction's.
	TxnID      string
	TxnTimeout time.Duration
}

// ChangelogSpec is the spec of an application's changelog topic: compacted,
// with partitions partitions (the input's) and configs (KeptConfigs of the
// changelog it replaces, or none).
func ChangelogSpec(name string, partitions int, configs map[string]string) kafka.TopicSpec {
	return kafka.TopicSpec{Name: name, Partitions: partitions, ReplicationFactor: -1, Compacted: true, Configs: configs}
}

// KeptConfigs returns the configs of changelog topic name that a changelog
// replacing it keeps: max.message.bytes when it was set on the topic (kstate
// sets it from the application's MaxRecordBytes when it creates the
// changelog). Nil when there is none or the topic cannot be described.
func KeptConfigs(ctx context.Context, cl *kadm.Client, name string) map[string]string {
	rc, err := cl.DescribeTopicConfigs(ctx, name)
	if err != nil || len(rc) != 1 || rc[0].Err != nil {
		return nil
	}
	for _, c := range rc[0].Configs {
		if c.Key == "max.message.bytes" && c.Source == kmsg.ConfigSourceDynamicTopicConfig && c.Value != nil {
			return map[string]string{c.Key: *c.Value}
		}
	}
	return nil
}

// Set ensures the changelog topic, commits r.Offsets for r.Group and then
// records them in the changelog in one transaction (see the package doc).
// The group must have no members: the commit waits (bounded by ctx) while
// it has. Its errors say which step failed; after the commit they wrap
// ErrNotRecorded.
func Set(ctx context.Context, cc kafka.ClientConfig, adm *kafka.Admin, r Request) error {
	if err := adm.EnsureTopic(ctx, r.Changelog); err != nil {
		return fmt.Errorf("changelog topic: %w", err)
	}
	if err := adm.CommitGroupOffsets(ctx, r.Group, r.Topic, r.Offsets); err != nil {
		return err
	}
	parts := make([]int32, 0, len(r.Offsets))
	for p := range r.Offsets {
		parts = append(parts, p)
	}
	slices.Sort(parts)
	recs := make([]kafka.Record, len(parts))
	for i, p := range parts {
		k, v := engine.InputOffsetRecord(r.Offsets[p])
		recs[i] = kafka.Record{Topic: r.Changelog.Name, Partition: p, Key: k, Value: v}
	}
	if _, err := cc.WriteTransaction(ctx, r.TxnID, r.TxnTimeout, recs); err != nil {
		return fmt.Errorf("%w: %w", ErrNotRecorded, err)
	}
	return nil
}

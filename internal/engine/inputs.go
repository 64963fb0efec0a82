package engine

// Several input topics into one processor (CoordinatorConfig.Topics).
//
// Partition task p consumes partition p of every input topic. The topics
// are co-partitioned: the same partition count, checked at start-up
// (InputPartitionsError) and watched like the first topic's count
// (topology.go); the session's group assignment must give partition p of
// every topic to the same member (internal/kafka uses the range balancer
// when there are several topics). A task's records of one poll are ordered
// by input (the order of Topics), then by offset, before the batch: a
// key's rows from all topics reach the same HandleInputRows call in that
// order, and a planned batch re-read after a crash (sink.go) has exactly
// the same order.
//
// Everything that is per input partition is per (topic, partition): the
// shard's recorded input offset (InputOffsetMeta), restore's consistency
// check against the group's committed offsets, a batch plan's ranges, a
// bounded run's ends and probes, the lag, pause/resume/rewind. The first
// topic keeps the one-input format (MetaInputOffset, the plan's first
// range), so a shard written with one input restores and continues.

import (
	"fmt"
	"sort"
)

// InputOffsetMeta is the shard metadata holding the input offset of input
// i (topic): MetaInputOffset for the first input — the format of a
// one-input application — and MetaInputOffset + "/" + topic for the
// others.
func InputOffsetMeta(i int, topic string) string {
	if i == 0 {
		return MetaInputOffset
	}
	return MetaInputOffset + "/" + topic
}

// InputPartitionsError is a start-up error: the input topics are not
// co-partitioned (their partition counts differ).
type InputPartitionsError struct {
	Topic           string // the first input topic
	Partitions      int
	Other           string
	OtherPartitions int
}

func (e *InputPartitionsError) Error() string {
	return fmt.Sprintf("input topics %q (%d partitions) and %q (%d partitions) are not co-partitioned: "+
		"every input topic must have the same partition count (partition p of each feeds task p); "+
		"recreate or grow %q to %d partitions, or read it through another application",
		e.Topic, e.Partitions, e.Other, e.OtherPartitions, e.Other, e.Partitions)
}

// inputIndex returns the index of topic among the input topics.
func (c *Coordinator) inputIndex(topic string) (int, bool) {
	if topic == c.cfg.Topics[0] { // the common case
		return 0, true
	}
	for i, t := range c.cfg.Topics[1:] {
		if t == topic {
			return i + 1, true
		}
	}
	return 0, false
}

// inputPartitions returns partition p of every input topic.
func (c *Coordinator) inputPartitions(p int32) []Partition {
	out := make([]Partition, len(c.cfg.Topics))
	for i, t := range c.cfg.Topics {
		out[i] = Partition{Topic: t, Partition: p}
	}
	return out
}

// orderRecords orders a task's records by input, then offset (stable:
// the records of one topic partition come in offset order from the poll).
func orderRecords(recs []Record) {
	sort.SliceStable(recs, func(i, j int) bool { return recs[i].Input < recs[j].Input })
}

// lastOffsets returns, per input, the offset after the input's last record
// in recs (-1: none).
func lastOffsets(recs []Record, inputs int) []int64 {
	out := make([]int64, inputs)
	for i := range out {
		out[i] = -1
	}
	for i := range recs {
		if r := &recs[i]; r.Input < inputs {
			out[r.Input] = max(out[r.Input], r.Offset+1)
		}
	}
	return out
}

// committedInputs is the group's committed offsets of one partition p, per
// input.
type committedInputs struct {
	off []int64
	has []bool
}

// any reports whether some input has a committed offset.
func (ci committedInputs) any() bool {
	for _, h := range ci.has {
		if h {
			return true
		}
	}
	return false
}

// storedInputs reads a task's recorded input offsets, per input.
func storedInputs(t TaskHandle, n int) (off []int64, ok []bool, err error) {
	off, ok = make([]int64, n), make([]bool, n)
	for i := range n {
		if off[i], ok[i], err = t.StoredInputOffset(i); err != nil {
			return nil, nil, err
		}
	}
	return off, ok, nil
}

func hasDuplicate(ts []string) bool {
	seen := make(map[string]bool, len(ts))
	for _, t := range ts {
		if t == "" || seen[t] {
			return true
		}
		seen[t] = true
	}
	return false
}

// putInputOffsets stages, for every input with records in recs, the offset
// after its last record.
func (t *Task[K, I, O]) putInputOffsets(recs []Record) error {
	for i, o := range lastOffsets(recs, t.inputs()) {
		if o < 0 {
			continue
		}
		if err := t.shard.PutMeta(InputOffsetMeta(i, t.topic(i)), putInt(o)); err != nil {
			return t.metaErr(err)
		}
	}
	return nil
}

func minusOnes(n int) []int64 {
	out := make([]int64, n)
	for i := range out {
		out[i] = -1
	}
	return out
}

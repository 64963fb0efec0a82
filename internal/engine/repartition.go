package engine

// GroupBy through the repartition topic (CoordinatorConfig.RepartitionTopic,
// Config.GroupKeys).
//
// An input whose grouping key is not its record key is re-keyed in two
// stages, each exactly-once on its own:
//
//  1. Forward (task p, a record of a GroupBy input's partition p): decode
//     the value with the input's decoder, compute the grouping key
//     (GroupKeys, which encodes it with the key serde), and emit a record to
//     the repartition topic: key = the encoded grouping key, partition =
//     murmur2(key) mod N (the coordinator), value, timestamp and headers of
//     the source record plus HeaderRepartitionInput naming the source
//     topic. It is produced in the batch's transaction, together with the
//     consumed source offsets (and the source's recorded input offset in
//     the shard's metadata): committed together or not at all. Decode and
//     key errors meet OnDecodeError as usual. Forwarded records touch no
//     state, fire no timers and do not move the watermark.
//  2. Process: the repartition topic is one more input of the task
//     (read_committed, partition p), decoded with the decoder of the input
//     HeaderRepartitionInput names, grouped by its record key like any
//     input.
//
// So task p handles source partition p (forward only) and repartition
// partition p (state). See docs/ARCHITECTURE.md, "GroupBy".

import (
	"context"
	"errors"
	"fmt"
)

// HeaderRepartitionInput names, on a repartition record, the input topic
// the record was read from: stage 2 decodes it with that input's decoder.
const HeaderRepartitionInput = "kstate.repartition.input"

// ErrNoRepartitionInput is wrapped by the decode error of a repartition
// record whose HeaderRepartitionInput is missing or names no GroupBy input.
var ErrNoRepartitionInput = errors.New("repartition record without a known " + HeaderRepartitionInput + " header")

// grouped reports whether input i is re-keyed through the repartition
// topic.
func (t *Task[K, I, O]) grouped(i int) bool {
	return i < len(t.cfg.GroupKeys) && t.cfg.GroupKeys[i] != nil
}

// forward runs stage 1 over the records of GroupBy inputs in recs: each
// becomes a repartition record in res (or meets OnDecodeError). It
// returns the other records.
func (t *Task[K, I, O]) forward(recs []Record, nowMs int64, res *BatchResult) ([]Record, error) {
	if len(t.cfg.GroupKeys) == 0 {
		return recs, nil
	}
	rest := recs[:0:0]
	for i := range recs {
		r := &recs[i]
		if !t.grouped(r.Input) {
			rest = append(rest, *r)
			continue
		}
		v, err := t.decodeValue(r)
		if err != nil {
			if err := t.badRecord(r, "value", err, nowMs, res); err != nil {
				return nil, err
			}
			continue
		}
		key, err := t.cfg.GroupKeys[r.Input](r.Key, v)
		if err == nil && key == nil {
			err = ErrNilKey
		}
		if err != nil {
			if err := t.badRecord(r, "group key", err, nowMs, res); err != nil {
				return nil, err
			}
			continue
		}
		hs := make([]Header, 0, len(r.Headers)+1)
		hs = append(hs, r.Headers...)
		hs = append(hs, Header{Key: HeaderRepartitionInput, Value: []byte(t.topic(r.Input))})
		res.Repartition = append(res.Repartition, Output{Key: key, Value: r.Value, TimestampMs: r.TimestampMs, Headers: hs, Seq: -1})
	}
	return rest, nil
}

// sourceInput returns the GroupBy input a repartition record came from.
func (t *Task[K, I, O]) sourceInput(r *Record) (int, error) {
	for j := len(r.Headers) - 1; j >= 0; j-- {
		if h := r.Headers[j]; h.Key == HeaderRepartitionInput {
			for i, topic := range t.cfg.Topics {
				if topic == string(h.Value) && t.grouped(i) {
					return i, nil
				}
			}
			return 0, fmt.Errorf("%w: it names %q", ErrNoRepartitionInput, h.Value)
		}
	}
	return 0, ErrNoRepartitionInput
}

// ensureRepartition creates the repartition topic with the inputs' n
// partitions when missing (delete policy, like a dead-letter topic); an
// existing one must have n partitions (the partition count check of the
// inputs covers it too).
func (c *Coordinator) ensureRepartition(ctx context.Context, n int) error {
	if c.cfg.RepartitionTopic == "" {
		return nil
	}
	got, err := c.cfg.Admin.EnsureDeadLetter(ctx, c.cfg.RepartitionTopic, n)
	if err != nil {
		return fmt.Errorf("kstate: repartition topic %q: %w", c.cfg.RepartitionTopic, err)
	}
	if got != n {
		return fmt.Errorf("kstate: %w", &InputPartitionsError{Topic: c.cfg.Topic, Partitions: n, Other: c.cfg.RepartitionTopic, OtherPartitions: got})
	}
	return nil
}

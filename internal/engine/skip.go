package engine

import (
	"encoding/binary"
	"strings"

	"github.com/kstate/kstate/internal/changelogfmt"
)

// Skipping one input record by hand (kstate.SkipRecord, `kstate skip`).
//
// A record that stops Run under the Fail policy is skipped by recording
// its offset in the partition's changelog, as metadata of the state
// (SkipMeta = offset), with the application stopped. The restore brings
// it into the shard like any other entry; the task then processes its
// input as usual, from the committed offset: the records before the
// skipped one are processed, the skipped one is dropped (counted in
// Skipped, logged), the ones after it are processed. The batch whose
// records reach the offset also overwrites the entry with noSkip, in its
// own changelog records: the skip is consumed in the same transaction as
// the batch that passes it, so a crash before that commit replays the
// batch with the skip still pending, and after it the offset is never
// read again.

// SkipMetaPrefix starts the name of every skip entry.
const SkipMetaPrefix = "engine/skip_offset/"

// SkipMeta is the name of the metadata entry holding the offset of input
// topic's record to skip in the partition (8 bytes, big-endian); a
// negative value: none pending.
func SkipMeta(topic string) string { return SkipMetaPrefix + topic }

// noSkip is the value of a consumed skip entry.
const noSkip = -1

// SkipRecord is the changelog record asking the partition's task to skip
// the record of topic at offset (its changelog partition is the input
// partition's).
func SkipRecord(topic string, offset int64) (key, value []byte) {
	return changelogfmt.MetaKey(SkipMeta(topic)), putInt(offset)
}

// SkipOffset decodes a changelog record of a skip entry: the topic and the
// offset (negative: consumed); ok is false for any other record.
func SkipOffset(key, value []byte) (topic string, offset int64, ok bool) {
	prefix := changelogfmt.MetaKey(SkipMetaPrefix)
	if !strings.HasPrefix(string(key), string(prefix)) || len(value) != 8 {
		return "", 0, false
	}
	return string(key[len(prefix):]), getInt(value), true
}

func getInt(b []byte) int64 { return int64(binary.BigEndian.Uint64(b)) }

// loadSkips reads the pending skip of every input (Start).
func (t *Task[K, I, O]) loadSkips() error {
	t.skips = make([]int64, t.inputs())
	for i := range t.skips {
		v, ok, err := t.metaInt(SkipMeta(t.topic(i)))
		if err != nil {
			return err
		}
		t.skips[i] = noSkip
		if ok && v >= 0 {
			t.skips[i] = v
			t.log.Info("a record of this partition is to be skipped (kstate.SkipRecord)", "topic", t.topic(i), "offset", v)
		}
	}
	return nil
}

// PendingSkip returns the offset of input i's record to skip, or -1.
func (t *Task[K, I, O]) PendingSkip(i int) int64 {
	if i < len(t.skips) {
		return t.skips[i]
	}
	return noSkip
}

// applySkips drops the records to skip from recs (RunBatch): for every
// input with a pending skip and a record at or past its offset, the batch
// consumes the skip (its entry becomes noSkip in the batch's changelog
// records) and the record at the offset, if present, is not processed.
// recs itself is not changed (its offsets are the batch's input offsets).
func (t *Task[K, I, O]) applySkips(recs []Record) ([]Record, error) {
	out := recs
	for i, off := range t.skips {
		if off < 0 {
			continue
		}
		passed, at := false, -1
		for j := range recs {
			r := &recs[j]
			if r.Input != i || r.Offset < off {
				continue
			}
			passed = true
			if r.Offset == off {
				at = j
			}
			break
		}
		if !passed {
			continue
		}
		if err := t.shard.PutMeta(SkipMeta(t.topic(i)), putInt(noSkip)); err != nil {
			return nil, t.metaErr(err)
		}
		if t.pend.skipped == nil {
			t.pend.skipped = make([]bool, len(t.skips))
		}
		t.pend.skipped[i] = true
		if at < 0 {
			t.log.Warn("the record to skip is not in the input (removed by retention, or the offset of a transaction marker): nothing skipped",
				"topic", t.topic(i), "offset", off)
			continue
		}
		r := &recs[at]
		// Drop it from out, copying recs the first time (recs is the
		// caller's, used for the input offsets).
		idx := -1
		for j := range out {
			if out[j].Input == r.Input && out[j].Offset == r.Offset {
				idx = j
				break
			}
		}
		dropped := make([]Record, 0, len(out)-1)
		dropped = append(append(dropped, out[:idx]...), out[idx+1:]...)
		out = dropped
		t.pend.counters.Skipped++
		t.log.Warn("skipping the input record as asked (kstate.SkipRecord); the records before and after it are processed",
			"topic", t.topic(i), "offset", off, "key_bytes", len(r.Key), "value_bytes", len(r.Value))
	}
	return out, nil
}

// commitSkips clears the skips the committed batch consumed (Commit).
func (t *Task[K, I, O]) commitSkips() {
	for i, done := range t.pend.skipped {
		if done {
			t.skips[i] = noSkip
		}
	}
}

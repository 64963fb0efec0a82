package shard

import (
	"encoding/binary"

	"github.com/kstate/kstate/changelog"
	"github.com/kstate/kstate/internal/keys"
	"github.com/kstate/kstate/internal/kv"
)

// The timer-by-key index (changelog.KindTimerKey: group key, expiry) is a
// local index: every entry of it mirrors a timer entry (changelog.KindTimer:
// expiry, group key) with the same value, so the changelog carries only the
// timer entries and a restore writes the index entry of each one. A timer
// moved by a handler (delete one, register another) is then two changelog
// records instead of four.
//
// Changelogs written before the index was local also hold its entries; a
// restore skips them and derives the index all the same, because such an
// entry may be stale: its tombstone was never written once the index
// stopped being changelogged, while the timer's own tombstone was.

// changelogged reports whether a shard key goes to the changelog.
func changelogged(key []byte) bool {
	return len(key) == 0 || key[0] != byte(changelog.KindTimerKey)
}

// applyRecord adds one changelog record to a restore's batch: the record
// itself and the local index entry it implies, or nothing for a record of
// the local index. Derived keys are appended to *arena (the batch keeps
// references to them until it is written).
func applyRecord(b *kv.Batch, arena *[]byte, key, val []byte) {
	if !changelogged(key) {
		return
	}
	if val == nil {
		b.Delete(key)
	} else {
		b.Put(key, val)
	}
	if key[0] != byte(changelog.KindTimer) || len(key) < 9 {
		return
	}
	// KindTimer: expiry u64 (flipped) | group key.
	start := len(*arena)
	a := keys.AppendTimerByKey(*arena, key[9:], keys.UnflipInt64(binary.BigEndian.Uint64(key[1:9])))
	*arena = a
	byKey := a[start:len(a):len(a)]
	if val == nil {
		b.Delete(byKey)
	} else {
		b.Put(byKey, val)
	}
}

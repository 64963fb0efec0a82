package shard

import (
	"encoding/binary"
	"math"

	"github.com/kstate/kstate/changelog"
	"github.com/kstate/kstate/internal/keys"
)

// Floors of the time-ordered index spaces (timers and the TTL index).
//
// Both spaces are consumed from the front: fired timers and expired TTL
// entries are deleted at the low end, so an LSM store (RocksDB) accumulates
// tombstones there until compaction, and a scan from the start of the space
// would step over all of them on every batch (measured: 60µs per timer op
// after 20k fired timers). The shard therefore keeps, per space, a floor:
// every entry of the committed store has expiry >= floor. Scans start at
// the floor, so they only see the tombstones of the current time window.
//
// Keeping the floor true:
//   - a staged put below the floor lowers the batch's floor (stagedMin);
//   - Commit recomputes the floor as the first live entry of the merged view
//     (seeking from the old floor, so it also skips the old tombstones), but
//     only when the batch touched the space;
//   - Abort drops stagedMin (the committed floor is still true);
//   - restore (ApplyChangelog, Wipe) and open reset it to unknown (MinInt64),
//     and the next Commit computes it.
type floor struct {
	kind      changelog.Kind
	committed int64 // lower bound of expiries in the store; MinInt64 = unknown
	stagedMin int64 // least expiry put in this batch; MaxInt64 = none
	touched   bool  // the batch put or deleted an entry of this space
}

func newFloor(k changelog.Kind) floor {
	return floor{kind: k, committed: math.MinInt64, stagedMin: math.MaxInt64}
}

// lower is the floor of the merged view (store + staging).
func (f *floor) lower() int64 { return min(f.committed, f.stagedMin) }

func (f *floor) resetBatch() { f.stagedMin, f.touched = math.MaxInt64, false }

// floorKey is the smallest key of space k with expiry e.
func floorKey(k changelog.Kind, e int64) []byte {
	b := make([]byte, 9)
	b[0] = byte(k)
	binary.BigEndian.PutUint64(b[1:], keys.FlipInt64(e))
	return b
}

// set stages key=val (val nil: tombstone; both copied) and keeps the
// floors true.
func (s *Shard) set(key, val []byte) { s.setOwned(key, s.stage.keepValue(val)) }

// setOwned is set handing val over to the staging layer (not copied; the
// caller must not modify it afterwards).
func (s *Shard) setOwned(key, val []byte) {
	s.stage.setOwned(key, val)
	s.noteWrite(key)
	if len(key) < 9 {
		return
	}
	var f *floor
	switch changelog.Kind(key[0]) {
	case changelog.KindTimer:
		f = &s.timerFloor
	case changelog.KindTTL:
		f = &s.ttlFloor
	default:
		return
	}
	f.touched = true
	if val != nil {
		f.stagedMin = min(f.stagedMin, keys.UnflipInt64(binary.BigEndian.Uint64(key[1:9])))
	}
}

// nextFloor computes the floor of the merged view: the expiry of its first
// live entry (MaxInt64 when the space is empty). An unknown floor (after
// open or a restore) is computed at the first commit even when the batch
// did not touch the space: until then every timer and TTL scan starts at
// the very front of the space and steps over all its old tombstones.
func (s *Shard) nextFloor(f *floor) (int64, error) {
	if !f.touched && f.committed != math.MinInt64 {
		return f.committed, nil
	}
	next := int64(math.MaxInt64)
	err := s.scan(floorKey(f.kind, f.lower()), []byte{byte(f.kind) + 1}, func(k, _ []byte) bool {
		if len(k) >= 9 {
			next = keys.UnflipInt64(binary.BigEndian.Uint64(k[1:9]))
		}
		return false
	})
	return next, err
}

// TimerFloor is a lower bound of the expiries of all timers (staged ones
// included): timers.Expired scans from it. math.MinInt64 when unknown.
func (s *Shard) TimerFloor() int64 { return s.timerFloor.lower() }

package shard

import (
	"bytes"

	"github.com/kstate/kstate/changelog"
	"github.com/kstate/kstate/internal/kv"
)

// Read state of the batch in progress: one reused store iterator and what
// the batch already learned about list tails and timer-space writes.
//
// Why one iterator: a state-heavy processor scans several small ranges per
// key and batch (a list, a map, a key's timers). Creating a store iterator
// per scan costs a dozen cgo crossings on RocksDB (read options, C copies of
// the bounds, the iterator, its first step, then the same again to free
// them); re-seeking an existing one costs one. The committed store does not
// change while a batch runs — only Commit, ApplyChangelog, Wipe and the
// re-seed write it, and a write-behind flush (at a commit, Close or a
// restore) — so an iterator created at the first scan of a batch
// sees exactly the committed state every scan of that batch must merge the
// staging layer over. It is dropped (closed) whenever that stops being true
// or the batch ends: resetReads runs at Begin, Commit, Abort, restore,
// re-seed and Close. The next scan creates a fresh one, which sees the
// writes.
//
// Every scan bounds the iterator to its own range (kv.Iterator.SetBounds,
// which travels with the scan's first seek on RocksDB: no extra cgo
// crossing), so the store's seek stops at the range's end. An unbounded
// iterator made every scan of an empty range (a new key's map, list or
// timers) step over every deleted entry up to the next live key in the
// whole store: after timer churn, hundreds of thousands of tombstones per
// scan, and a partition 100x slower until a compaction (issue #25). The
// scans still check the bounds in Go, for the write-behind and staging
// layers. A scan without an upper bound, or one nested inside another
// scan's callback (no caller does either today), gets an iterator of its
// own.
type readState struct {
	it   kv.Iterator // nil until the batch's first scan
	busy bool        // it is positioned by a scan in progress

	// gen changes whenever what a previous read told a caller may have
	// stopped being true: resetReads, a savepoint rollback, and (for
	// TimerGen) every staged write to the timer key spaces.
	gen uint64

	// tails maps a list's key prefix to the next sequence number to append
	// at (the greatest sequence present, expired or not, plus one; 0 for an
	// empty list), as learned by this batch's reads and writes of the list.
	// The map holds an index into nexts, so that updating a known list's
	// tail (the append after the Get) allocates no key.
	tails map[string]int
	nexts []uint64

	// mem is the iterator over a cached group that scans reuse, gkey and
	// gend scratch for a group's cache key and range end (groupcache.go).
	mem        *memIter
	gkey, gend []byte
	// filled holds the cache hashes of the group entries this batch
	// filled (filledNow).
	filled map[uint64]struct{}
}

// resetReads forgets the batch's read state: the reused iterator is closed
// (the store may be written next, or was just written) and cached tails are
// dropped. Safe to call at any time outside a scan.
func (s *Shard) resetReads() {
	r := &s.reads
	if r.it != nil {
		s.closeIter(r.it) // its error was reported by the scan that saw it
		r.it = nil
	}
	r.busy = false
	r.gen++
	clear(r.tails)
	r.nexts = r.nexts[:0]
	clear(r.filled)
	s.pre.drop() // the prefetched values are the batch's (and a flush moves them)
}

// forgetTails drops what the batch learned about list tails and timers,
// keeping the iterator (a savepoint rollback unstages writes; the store is
// unchanged).
func (s *Shard) forgetTails() {
	s.reads.gen++
	clear(s.reads.tails)
	s.reads.nexts = s.reads.nexts[:0]
}

// committedIter returns the committed state over store iterator st: st
// itself, or the write-behind layer merged over it (over the frozen one,
// while it is written).
func (s *Shard) committedIter(st kv.Iterator) kv.Iterator {
	if f := s.frozen; f != nil && !f.layer.empty() {
		st = newWBIter(st, f.layer)
	}
	if s.wb == nil || s.wb.empty() {
		return st
	}
	return newWBIter(st, s.wb)
}

// storeIter returns an iterator over the committed state for one scan;
// the scan hands it back to releaseIter with own. A scan of exactly one
// small group (a key's list, map or timers) is served from the
// committed-state cache's copy of the group (groupcache.go; own is set);
// any other is committedRange's.
func (s *Shard) storeIter(lower, upper []byte) (it kv.Iterator, own bool) {
	if s.cache != nil && isGroupRange(lower, upper) {
		if it, ok := s.groupIter(lower, upper); ok {
			return it, true
		}
	}
	return s.committedRange(lower, upper)
}

// committedRange returns an iterator over the committed state for one
// scan, for releaseIter with own: the batch's reused iterator unless a scan
// is already using it (then own is set: a fresh iterator of this scan
// alone).
func (s *Shard) committedRange(lower, upper []byte) (it kv.Iterator, own bool) {
	r := &s.reads
	if r.busy || upper == nil {
		return s.committedIter(s.store.NewIter(lower, upper)), true
	}
	if r.it == nil {
		r.it = s.committedIter(s.store.NewIter(lower, upper))
	} else {
		r.it.SetBounds(lower, upper)
	}
	r.busy = true
	return r.it, false
}

func (s *Shard) releaseIter(it kv.Iterator, own bool) {
	if own {
		s.closeIter(it)
		return
	}
	r := &s.reads
	r.busy = false
	if r.it != nil && r.it.Error() != nil {
		// Sticky: the next scan starts over with a fresh iterator.
		s.closeIter(r.it)
		r.it = nil
	}
}

// closeIter closes a scan iterator, counting the deleted entries it
// stepped over into Stats.DeletesSkipped.
func (s *Shard) closeIter(it kv.Iterator) {
	if n := it.DeletesSkipped(); n > 0 {
		s.total.deletesSkipped.Add(int64(n))
	}
	it.Close()
}

// seekGE positions it at the first key >= lower (nil: the first key) and
// reports whether that key is below upper (nil: unbounded).
func seekGE(it kv.Iterator, lower, upper []byte) bool {
	var ok bool
	if lower == nil {
		ok = it.First()
	} else {
		ok = it.SeekGE(lower)
	}
	return ok && below(it.Key(), upper)
}

// seekLT positions it at the last key < upper (nil: the last key) and
// reports whether that key is at or above lower.
func seekLT(it kv.Iterator, lower, upper []byte) bool {
	var ok bool
	if upper == nil {
		ok = it.Last()
	} else {
		ok = it.SeekLT(upper)
	}
	return ok && bytes.Compare(it.Key(), lower) >= 0
}

func below(key, upper []byte) bool { return upper == nil || bytes.Compare(key, upper) < 0 }

// listTail returns the cached next sequence of the list at prefix.
func (s *Shard) listTail(prefix []byte) (uint64, bool) {
	i, ok := s.reads.tails[string(prefix)]
	if !ok {
		return 0, false
	}
	return s.reads.nexts[i], true
}

// dropListTail forgets the list's tail: a write that may fail half-way
// calls it first, so that a partial write never leaves a stale tail.
func (s *Shard) dropListTail(prefix []byte) { delete(s.reads.tails, string(prefix)) }

// setListTail records the next sequence of the list at prefix for the rest
// of the batch (only meaningful inside one: Begin resets it).
func (s *Shard) setListTail(prefix []byte, next uint64) {
	if !s.inBatch {
		return
	}
	r := &s.reads
	if i, ok := r.tails[string(prefix)]; ok {
		r.nexts[i] = next
		return
	}
	if r.tails == nil {
		r.tails = make(map[string]int)
	}
	r.tails[string(prefix)] = len(r.nexts)
	r.nexts = append(r.nexts, next)
}

// TimerGen changes whenever a timer read made earlier may no longer
// describe the merged view: at every batch boundary, restore and savepoint
// rollback, and on every staged write to the timer key spaces. Package
// timers caches one key's timer list between its own calls and trusts it
// only while TimerGen is unchanged.
func (s *Shard) TimerGen() uint64 { return s.reads.gen }

// noteWrite keeps TimerGen current for a staged write of key.
func (s *Shard) noteWrite(key []byte) {
	if len(key) > 0 && (key[0] == byte(changelog.KindTimer) || key[0] == byte(changelog.KindTimerKey)) {
		s.reads.gen++
	}
}

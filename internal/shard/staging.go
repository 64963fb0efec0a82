package shard

import (
	"bytes"
	"unsafe"

	"github.com/kstate/kstate/changelog"

	"github.com/kstate/kstate/internal/kv"
)

// staging is the in-memory layer holding a batch's changes until Commit:
// key → new value, or a tombstone. It is an ordered skiplist (scans merge it
// with the store in key order, and a skiplist never moves nodes, so an
// insert during a walk does not invalidate it) plus a hash index for point
// lookups, which are the common case. Entries are never unlinked: a delete
// is a tombstone, and the whole layer is dropped at Commit or Abort.
//
// Why not reuse kv.NewMemory: the staging layer needs tombstones, must be
// fast without locking, and its iteration must survive inserts.
//
// Allocation: a batch stages thousands of entries, so each costs one
// allocation (the entry with its next pointers, for the usual heights);
// staged keys are copied into shared chunks (arena) instead of one string
// each, and reset keeps the index map's buckets for the next batch.
type staging struct {
	head  stagedEntry
	level int
	rnd   uint64
	index map[string]*stagedEntry
	arena []byte // the current chunk of staged keys (append-only)

	// undo logs the writes since the batch's first savepoint (see
	// savepoint.go); logUndo is set by that savepoint.
	undo    []undoEntry
	logUndo bool
}

type stagedEntry struct {
	key, val []byte
	deleted  bool
	next     []*stagedEntry
}

const stagingMaxLevel = 20

// stagingChunk is the size of a key arena chunk.
const stagingChunk = 32 << 10

func newStaging() *staging {
	return &staging{
		head:  stagedEntry{next: make([]*stagedEntry, stagingMaxLevel)},
		level: 1,
		rnd:   0x2545f4914f6cdd1d,
		index: make(map[string]*stagedEntry),
	}
}

// reset empties the layer for the next batch, keeping the index map's
// memory. Keys and values handed out before (Finish's records) stay valid
// (the committed-state cache copies what it keeps into its own rings): key chunks are never reused (the next
// key starts a new chunk), values are never modified.
func (s *staging) reset() {
	clear(s.head.next)
	s.level = 1
	clear(s.index)
	s.arena = nil
	clear(s.undo)
	s.undo, s.logUndo = s.undo[:0], false
}

// newEntry allocates an entry of height h with its next pointers in the
// same allocation (3 in 4 entries have height 1).
func newEntry(h int) *stagedEntry {
	switch h {
	case 1:
		n := &struct {
			e stagedEntry
			a [1]*stagedEntry
		}{}
		n.e.next = n.a[:]
		return &n.e
	case 2:
		n := &struct {
			e stagedEntry
			a [2]*stagedEntry
		}{}
		n.e.next = n.a[:]
		return &n.e
	case 3, 4:
		n := &struct {
			e stagedEntry
			a [4]*stagedEntry
		}{}
		n.e.next = n.a[:h]
		return &n.e
	}
	return &stagedEntry{next: make([]*stagedEntry, h)}
}

// keep copies key into the arena.
func (s *staging) keep(key []byte) []byte {
	if len(key) > cap(s.arena)-len(s.arena) {
		s.arena = make([]byte, 0, max(stagingChunk, len(key)))
	}
	off := len(s.arena)
	s.arena = append(s.arena, key...)
	return s.arena[off:len(s.arena):len(s.arena)]
}

func (s *staging) len() int { return len(s.index) }

// get returns the staged entry of key, or nil when the key is not staged.
func (s *staging) get(key []byte) *stagedEntry { return s.index[string(key)] }

// set stages a value (val != nil) or a tombstone (val == nil). It copies key
// and value.
func (s *staging) set(key, val []byte) { s.setOwned(key, cloneBytes(val)) }

// setOwned is set without copying val: the staging layer takes it over,
// and the caller must not modify it afterwards. Staged keys and values are
// never modified in place (a new value replaces the slice), so Finish and
// the store batch may keep them.
func (s *staging) setOwned(key, val []byte) {
	if e := s.index[string(key)]; e != nil {
		if s.logUndo {
			s.undo = append(s.undo, undoEntry{e: e, existed: true, val: e.val, deleted: e.deleted})
		}
		e.val, e.deleted = val, val == nil
		return
	}
	var prev [stagingMaxLevel]*stagedEntry
	s.findLT(key, &prev)
	h := 1
	s.rnd ^= s.rnd << 13
	s.rnd ^= s.rnd >> 7
	s.rnd ^= s.rnd << 17
	for r := s.rnd; h < stagingMaxLevel && r&3 == 0; r >>= 2 {
		h++
	}
	for i := s.level; i < h; i++ {
		prev[i] = &s.head
	}
	if h > s.level {
		s.level = h
	}
	// The index shares the entry's key bytes (never modified).
	e := newEntry(h)
	e.key, e.val, e.deleted = s.keep(key), val, val == nil
	ks := ""
	if len(e.key) > 0 {
		ks = unsafe.String(&e.key[0], len(e.key))
	}
	for i := 0; i < h; i++ {
		e.next[i] = prev[i].next[i]
		prev[i].next[i] = e
	}
	s.index[ks] = e
	if s.logUndo {
		s.undo = append(s.undo, undoEntry{e: e})
	}
}

func (s *staging) findLT(key []byte, prev *[stagingMaxLevel]*stagedEntry) *stagedEntry {
	x := &s.head
	for i := s.level - 1; i >= 0; i-- {
		for x.next[i] != nil && bytes.Compare(x.next[i].key, key) < 0 {
			x = x.next[i]
		}
		if prev != nil {
			prev[i] = x
		}
	}
	return x
}

// seekGE returns the first staged entry with key ≥ key (nil key: the first).
func (s *staging) seekGE(key []byte) *stagedEntry { return s.findLT(key, nil).next[0] }

// seekLT returns the last staged entry with key < key (nil key: the last).
func (s *staging) seekLT(key []byte) *stagedEntry {
	var x *stagedEntry
	if key == nil {
		x = &s.head
		for i := s.level - 1; i >= 0; i-- {
			for x.next[i] != nil {
				x = x.next[i]
			}
		}
	} else {
		x = s.findLT(key, nil)
	}
	if x == &s.head {
		return nil
	}
	return x
}

func (s *staging) first() *stagedEntry { return s.head.next[0] }

func cloneBytes(b []byte) []byte {
	if b == nil {
		return nil
	}
	return append(make([]byte, 0, len(b)), b...)
}

// view is the merged read view: staging over the committed state (the
// write-behind layer over the store).

// get returns the current value of key (aliasing staging or a store copy:
// callers must not modify it).
func (s *Shard) get(key []byte) ([]byte, bool, error) {
	if e := s.stage.get(key); e != nil {
		return e.val, !e.deleted, nil
	}
	if s.cache == nil || len(key) == 0 || key[0] > byte(changelog.KindState) {
		// Only metadata and state entries are cached: timer keys are point
		// read once (Register checks for a duplicate), never again.
		if v, ok, found := s.unflushed(key); found {
			return v, ok, nil
		}
		return s.store.Get(key)
	}
	if v, ok, hit := s.cache.lookup(key); hit {
		return v, ok, nil
	}
	v, ok, found := s.unflushed(key)
	var err error
	if !found {
		v, ok, err = s.store.Get(key)
	}
	if err == nil {
		// The store and the write-behind layer do not change during a
		// batch: this is committed state.
		s.cache.fill(key, v, ok)
	}
	return v, ok, err
}

// unflushed returns key's value in the write-behind layer (a copy: the
// layer's bytes are overwritten by later commits), and whether the layer
// has the key.
func (s *Shard) unflushed(key []byte) (val []byte, ok, found bool) {
	if s.wb == nil || s.wb.empty() {
		return nil, false, false
	}
	v, deleted, found := s.wb.get(key)
	if !found || deleted {
		return nil, false, found
	}
	return cloneBytes(v), true, true
}

// scan calls fn for every live key in [lower, upper) of the merged view, in
// ascending order, until fn returns false. key and value are only valid
// during fn. fn may stage new writes (the staging walk tolerates inserts,
// and the store does not change during a batch), but keys it stages inside
// the range may or may not be visited.
func (s *Shard) scan(lower, upper []byte, fn func(key, value []byte) bool) error {
	it, own := s.storeIter(lower, upper)
	defer s.releaseIter(it, own)
	ok := seekGE(it, lower, upper)
	e := s.stage.seekGE(lower) // nil: from the first entry
	inRange := func(e *stagedEntry) bool {
		return e != nil && below(e.key, upper)
	}
	for {
		stagedOK := inRange(e)
		if !ok && !stagedOK {
			break
		}
		var c int
		switch {
		case !ok:
			c = 1 // only staging left
		case !stagedOK:
			c = -1 // only store left
		default:
			c = bytes.Compare(it.Key(), e.key)
		}
		if c < 0 {
			if !fn(it.Key(), it.Value()) {
				return it.Error()
			}
			ok = it.Next() && below(it.Key(), upper)
			continue
		}
		// Staging shadows the store on equal keys.
		if c == 0 {
			ok = it.Next() && below(it.Key(), upper)
		}
		cur := e
		e = e.next[0]
		if !cur.deleted && !fn(cur.key, cur.val) {
			return it.Error()
		}
	}
	return it.Error()
}

// last returns the greatest key in [lower, upper) of the merged view
// (lower must not be nil), or ok=false when the range is empty. ListState
// uses it to allocate the next element sequence number.
func (s *Shard) last(lower, upper []byte) ([]byte, bool, error) {
	it, own := s.storeIter(lower, upper)
	defer s.releaseIter(it, own)
	ok := seekLT(it, lower, upper)
	e := s.stage.seekLT(upper)
	inRange := func(e *stagedEntry) bool { return e != nil && bytes.Compare(e.key, lower) >= 0 }
	for {
		stagedOK := inRange(e)
		if !ok && !stagedOK {
			return nil, false, it.Error()
		}
		var c int
		switch {
		case !ok:
			c = -1
		case !stagedOK:
			c = 1
		default:
			c = bytes.Compare(it.Key(), e.key)
		}
		if c > 0 {
			return cloneBytes(it.Key()), true, it.Error()
		}
		if !e.deleted {
			return cloneBytes(e.key), true, nil
		}
		if c == 0 {
			ok = it.Prev() && bytes.Compare(it.Key(), lower) >= 0
		}
		e = s.stage.seekLT(e.key)
	}
}

// writeTo adds the staged changes to b in key order (the batch keeps the
// slices: the staging layer is dropped after the write).
func (s *staging) writeTo(b *kv.Batch) {
	b.Grow(len(s.index) + 1) // + the offset the commit adds
	for e := s.first(); e != nil; e = e.next[0] {
		if e.deleted {
			b.Delete(e.key)
		} else {
			b.Put(e.key, e.val)
		}
	}
}

package shard

import (
	"bytes"
	"encoding/binary"
	"slices"
	"unsafe"

	"github.com/kstate/kstate/changelog"
	"github.com/kstate/kstate/internal/changelogfmt"

	"github.com/kstate/kstate/internal/kv"
)

// staging is the in-memory layer holding a batch's changes until Commit:
// key → new value, or a tombstone. A hash index serves point lookups, the
// common case. Ordered walks (scans merge staging with the store in key
// order; Finish and Commit write it in key order) are served two ways:
//
//   - Entries of a scan unit (unitLen: one grouping key's state of one
//     variable, or its timers by key) are chained per unit and not ordered
//     when staged: most units are a handful of entries, and a scan of a
//     unit sorts its own chain (cached until the unit changes). All unit
//     entries are sorted once, when the batch is finished. Inserting into
//     an ordered structure was half of a state-heavy batch's CPU.
//   - The other entries (metadata, the timer and TTL indexes by time, whose
//     scans cross grouping keys and run while the batch stages more) stay
//     in an ordered skiplist, which never moves nodes, so an insert during
//     a walk does not invalidate it.
//
// Entries are never removed but by a savepoint's rollback: a delete is a
// tombstone, and the whole layer is dropped at Commit or Abort.
//
// Why not reuse kv.NewMemory: the staging layer needs tombstones, must be
// fast without locking, and its iteration must survive inserts.
//
// Allocation: a batch stages thousands of entries. Unit entries come from
// slabs of stagingSlab; a skiplist entry is one allocation (with its next
// pointers for the usual heights); staged keys and the values the shard
// builds or copies go into shared chunks (arena, vals) instead of one
// allocation each; reset keeps the maps' buckets and the slices for the
// next batch. Slabs and chunks are never reused, only dropped.
type staging struct {
	head  stagedEntry
	level int
	rnd   uint64
	index map[string]*stagedEntry
	arena []byte // the current chunk of staged keys (append-only)
	// vals is the current chunk of staged values built by appendValue or
	// copied by set, and slab the current chunk of unit entries: both
	// append-only and never reused (an entry or value handed out stays
	// valid), so a staged write costs no allocation of its own.
	vals []byte
	slab []stagedEntry

	// units maps a scan unit to the first entry of its chain (stagedEntry.
	// unitNext); lastUnit and lastHead are the unit of the previous insert
	// (a row's writes to one map or list come together).
	units    map[string]*stagedEntry
	lastUnit string
	lastHead *stagedEntry
	// unitSorted caches a unit's entries in key order, for the units
	// scanned after they were staged (dropped when the unit changes).
	unitSorted map[string][]*stagedEntry
	// unitEntries has every unit entry: sorted by the last ordered call,
	// then the ones staged since. all is the ordered view of all entries
	// when allOK (ordered). A new view is built in a new array, as a walk
	// of the old one may be in progress (spare keeps the previous batch's
	// array for the first build).
	unitEntries []*stagedEntry
	all, spare  []*stagedEntry
	allOK       bool

	// undo logs the writes since the batch's first savepoint (see
	// savepoint.go); logUndo is set by that savepoint.
	undo    []undoEntry
	logUndo bool
}

type stagedEntry struct {
	key, val []byte
	deleted  bool
	next     []*stagedEntry // skiplist levels (entries outside units)
	unitNext *stagedEntry   // the unit's chain (unit entries)
}

const stagingMaxLevel = 20

// stagingChunk is the size of a key arena chunk.
const stagingChunk = 32 << 10

func newStaging() *staging {
	return &staging{
		head:       stagedEntry{next: make([]*stagedEntry, stagingMaxLevel)},
		level:      1,
		rnd:        0x2545f4914f6cdd1d,
		index:      make(map[string]*stagedEntry),
		units:      make(map[string]*stagedEntry),
		unitSorted: make(map[string][]*stagedEntry),
	}
}

// reset empties the layer for the next batch, keeping the maps' memory and
// the slices. Keys and values handed out before (Finish's records) stay
// valid (the committed-state cache copies what it keeps into its own
// rings): key chunks are never reused (the next key starts a new chunk),
// values are never modified.
func (s *staging) reset() {
	clear(s.head.next)
	s.level = 1
	clear(s.index)
	clear(s.units)
	clear(s.unitSorted)
	s.lastUnit, s.lastHead = "", nil
	clear(s.unitEntries)
	s.unitEntries = s.unitEntries[:0]
	if cap(s.all) > cap(s.spare) {
		s.spare = s.all
	}
	clear(s.spare[:cap(s.spare)])
	s.spare, s.all, s.allOK = s.spare[:0], nil, false
	s.arena = nil
	clear(s.undo)
	s.undo, s.logUndo = s.undo[:0], false
}

// stagingSlab is the number of unit entries allocated together.
const stagingSlab = 256

// newUnitEntry returns a zero unit entry (no skiplist levels) from the slab.
func (s *staging) newUnitEntry() *stagedEntry {
	if len(s.slab) == cap(s.slab) {
		s.slab = make([]stagedEntry, 0, stagingSlab)
	}
	s.slab = s.slab[:len(s.slab)+1]
	return &s.slab[len(s.slab)-1]
}

// maxValueHeader bounds the header changelogfmt.AppendValue writes: version,
// flags, a uvarint schema id (< 2^32: 5 bytes) and an expiry.
const maxValueHeader = 2 + 5 + 8

// appendValue returns changelogfmt.AppendValue(h, payload) in the value
// chunk, for setOwned.
func (s *staging) appendValue(h changelog.Header, payload []byte) []byte {
	s.valRoom(maxValueHeader + len(payload))
	off := len(s.vals)
	s.vals = changelogfmt.AppendValue(s.vals, h, payload)
	return s.vals[off:len(s.vals):len(s.vals)]
}

// keepValue copies val into the value chunk (nil stays nil: a tombstone;
// an empty value stays empty and not nil).
func (s *staging) keepValue(val []byte) []byte {
	switch {
	case val == nil:
		return nil
	case len(val) == 0:
		return []byte{}
	}
	s.valRoom(len(val))
	off := len(s.vals)
	s.vals = append(s.vals, val...)
	return s.vals[off:len(s.vals):len(s.vals)]
}

// valRoom makes room for n more bytes in the value chunk. A value larger
// than a chunk gets a chunk of its own.
func (s *staging) valRoom(n int) {
	if n > cap(s.vals)-len(s.vals) {
		s.vals = make([]byte, 0, max(stagingChunk, n))
	}
}

// newEntry allocates a skiplist entry of height h ≥ 1 with its next
// pointers in the same allocation (3 in 4 skiplist entries have height 1).
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
func (s *staging) set(key, val []byte) { s.setOwned(key, s.keepValue(val)) }

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
	var e *stagedEntry
	if n := unitLen(key); n > 0 {
		e = s.newUnitEntry()
		e.key = s.keep(key)
		s.addToUnit(e, unsafe.String(&e.key[0], n))
	} else {
		e = s.link(key)
	}
	e.val, e.deleted = val, val == nil
	// The index shares the entry's key bytes (never modified).
	ks := ""
	if len(e.key) > 0 {
		ks = unsafe.String(&e.key[0], len(e.key))
	}
	s.index[ks] = e
	s.allOK = false
	if s.logUndo {
		s.undo = append(s.undo, undoEntry{e: e})
	}
}

// addToUnit chains the new entry e into its unit u (a string over e's key).
func (s *staging) addToUnit(e *stagedEntry, u string) {
	s.unitEntries = append(s.unitEntries, e)
	h := s.lastHead
	if h == nil || u != s.lastUnit {
		if h = s.units[u]; h == nil {
			s.units[u] = e
			s.lastUnit, s.lastHead = u, e
			return
		}
		s.lastUnit, s.lastHead = u, h
	}
	e.unitNext, h.unitNext = h.unitNext, e
	if len(s.unitSorted) > 0 {
		delete(s.unitSorted, u)
	}
}

// link inserts a new entry for key into the skiplist.
func (s *staging) link(key []byte) *stagedEntry {
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
	e := newEntry(h)
	e.key = s.keep(key)
	for i := 0; i < h; i++ {
		e.next[i] = prev[i].next[i]
		prev[i].next[i] = e
	}
	return e
}

// unitLen returns the length of key's scan unit, the prefix shared by all
// entries of one grouping key in one key space that the state handles scan
// as a whole: kind, variable and grouping key of a state entry
// (keys.StateKeyPrefix), kind and grouping key of a by-key timer entry
// (keys.TimerByKeyPrefix). It is 0 for the other kinds (their scans cross
// grouping keys) and for a malformed key.
func unitLen(key []byte) int {
	var n int
	switch {
	case len(key) >= 9 && key[0] == byte(changelog.KindState):
		n = 9 + int(binary.BigEndian.Uint32(key[5:9]))
	case len(key) >= 5 && key[0] == byte(changelog.KindTimerKey):
		n = 5 + int(binary.BigEndian.Uint32(key[1:5]))
	default:
		return 0
	}
	if n > len(key) || n <= 0 {
		return 0
	}
	return n
}

// withinUnit reports whether upper ≤ keys.PrefixEnd(unit), that is, whether
// a range from unit up to upper stays inside the unit: upper has unit as
// its prefix, or is the unit's prefix end itself (computed in place).
func withinUnit(unit, upper []byte) bool {
	if upper == nil {
		return false
	}
	if bytes.HasPrefix(upper, unit) {
		return true
	}
	i := len(unit) - 1
	for i >= 0 && unit[i] == 0xff {
		i--
	}
	return i >= 0 && len(upper) == i+1 && upper[i] == unit[i]+1 && bytes.Equal(upper[:i], unit[:i])
}

// hasKind reports whether [lower, upper) holds keys of kind k (the kind is
// a key's first byte).
func hasKind(lower, upper []byte, k changelog.Kind) bool {
	return (len(lower) == 0 || lower[0] <= byte(k)) && (upper == nil || bytes.Compare(upper, []byte{byte(k)}) > 0)
}

// sorted returns the staged entries a walk of [lower, upper) must see, in
// key order: a slice that holds at least those in the range (the caller
// bounds the walk), or skiplist=true when the range holds no unit entry
// and the skiplist (seekGE, seekLT) has them all. The slice is never
// modified afterwards, so entries staged during the walk do not disturb
// it (they may or may not be visited, as the walks allow).
func (s *staging) sorted(lower, upper []byte) (list []*stagedEntry, skiplist bool) {
	if n := unitLen(lower); n > 0 && withinUnit(lower[:n], upper) {
		return s.unit(lower[:n]), false
	}
	if !hasKind(lower, upper, changelog.KindState) && !hasKind(lower, upper, changelog.KindTimerKey) {
		return nil, true
	}
	return s.ordered(), false
}

// unit returns the entries of unit u in key order.
func (s *staging) unit(u []byte) []*stagedEntry {
	h := s.units[string(u)]
	if h == nil {
		return nil
	}
	if h.unitNext == nil {
		return []*stagedEntry{h}
	}
	if l, ok := s.unitSorted[string(u)]; ok {
		return l
	}
	var l []*stagedEntry
	for e := h; e != nil; e = e.unitNext {
		l = append(l, e)
	}
	sortEntries(l)
	s.unitSorted[unsafe.String(&h.key[0], len(u))] = l
	return l
}

// ordered returns every staged entry in key order. The slice stays valid
// (and unchanged) after later inserts; the next call after an insert
// builds a new one.
func (s *staging) ordered() []*stagedEntry {
	if s.allOK {
		return s.all
	}
	sortEntries(s.unitEntries)
	n := len(s.index)
	out := s.spare[:0]
	if cap(out) < n {
		out = make([]*stagedEntry, 0, n+n/4)
	}
	s.spare = nil
	e := s.head.next[0]
	for _, u := range s.unitEntries {
		for e != nil && bytes.Compare(e.key, u.key) < 0 {
			out = append(out, e)
			e = e.next[0]
		}
		out = append(out, u)
	}
	for ; e != nil; e = e.next[0] {
		out = append(out, e)
	}
	s.all, s.allOK = out, true
	return out
}

func sortEntries(l []*stagedEntry) {
	slices.SortFunc(l, func(a, b *stagedEntry) int { return bytes.Compare(a.key, b.key) })
}

// searchGE returns the index of the first entry of l with key ≥ key.
func searchGE(l []*stagedEntry, key []byte) int {
	i, _ := slices.BinarySearchFunc(l, key, func(e *stagedEntry, k []byte) int { return bytes.Compare(e.key, k) })
	return i
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

// seekGE returns the first skiplist entry with key ≥ key (nil key: the
// first).
func (s *staging) seekGE(key []byte) *stagedEntry { return s.findLT(key, nil).next[0] }

// seekLT returns the last skiplist entry with key < key (nil key: the last).
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
		return s.committed(key)
	}
	if key[0] == byte(changelog.KindState) {
		// A list's or map's entry: answered from its cached group, which
		// a miss fills when the group is small (groupcache.go).
		if v, ok, done := s.groupGet(key); done {
			return v, ok, nil
		}
	}
	h := s.cache.hash(key)
	if v, ok, hit := s.cache.lookupAppend(h, key, nil, false); hit {
		return v, ok, nil
	}
	v, ok, err := s.committed(key)
	if err == nil {
		// The store and the write-behind layer do not change during a
		// batch: this is committed state.
		s.cache.fillHash(h, key, v, ok)
	}
	return v, ok, err
}

// committed reads key's committed value past the committed-state cache:
// from the write-behind layer, else the batch's prefetched values, else
// the store.
func (s *Shard) committed(key []byte) ([]byte, bool, error) {
	s.pre.missed(key)
	if v, ok, found := s.unflushed(key); found {
		return v, ok, nil
	}
	if v, ok, found := s.pre.lookup(key); found {
		return v, ok, nil
	}
	return s.store.Get(key)
}

// unflushed returns key's value in the write-behind layer, else in the
// frozen one (a copy: the layer's bytes are overwritten by later commits),
// and whether either has the key.
func (s *Shard) unflushed(key []byte) (val []byte, ok, found bool) {
	if s.wb == nil {
		return nil, false, false
	}
	v, deleted, found := s.wb.get(key)
	if !found && s.frozen != nil {
		v, deleted, found = s.frozen.layer.get(key)
	}
	if !found || deleted {
		return nil, false, found
	}
	return cloneBytes(v), true, true
}

// scan calls fn for every live key in [lower, upper) of the merged view, in
// ascending order, until fn returns false. key and value are only valid
// during fn. fn may stage new writes (a skiplist walk tolerates inserts,
// the sorted slices of units are never modified, and the store does not
// change during a batch), but keys it stages inside the range may or may
// not be visited.
func (s *Shard) scan(lower, upper []byte, fn func(key, value []byte) bool) error {
	it, own := s.storeIter(lower, upper)
	defer s.releaseIter(it, own)
	ok := seekGE(it, lower, upper)
	// The staged side: a skiplist walk (list == nil) or a sorted slice.
	var e *stagedEntry
	list, skiplist := s.stage.sorted(lower, upper)
	i := 0
	if skiplist {
		e = s.stage.seekGE(lower) // nil: from the first entry
	} else if i = searchGE(list, lower); i < len(list) {
		e = list[i]
	}
	for {
		stagedOK := e != nil && below(e.key, upper)
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
		if skiplist {
			e = e.next[0]
		} else if i++; i < len(list) {
			e = list[i]
		} else {
			e = nil
		}
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
	// The staged side, walked backwards: a skiplist (list == nil) or a
	// sorted slice.
	var e *stagedEntry
	list, skiplist := s.stage.sorted(lower, upper)
	i := len(list)
	if upper != nil {
		i = searchGE(list, upper)
	}
	if skiplist {
		e = s.stage.seekLT(upper)
	} else if i--; i >= 0 {
		e = list[i]
	}
	for {
		stagedOK := e != nil && bytes.Compare(e.key, lower) >= 0
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
		if skiplist {
			e = s.stage.seekLT(e.key)
		} else if i--; i >= 0 {
			e = list[i]
		} else {
			e = nil
		}
	}
}

// writeTo adds the staged changes to b in key order (the batch keeps the
// slices: the staging layer is dropped after the write).
func (s *staging) writeTo(b *kv.Batch) {
	b.Grow(len(s.index) + 1) // + the offset the commit adds
	for _, e := range s.ordered() {
		if e.deleted {
			b.Delete(e.key)
		} else {
			b.Put(e.key, e.val)
		}
	}
}

package shard

import (
	"bytes"
	"encoding/binary"
	"errors"

	"github.com/kstate/kstate/changelog"
	"github.com/kstate/kstate/internal/keys"
	"github.com/kstate/kstate/internal/kv"
)

// Group entries of the committed-state cache: a small range read whole.
//
// Why: a state-heavy processor scans a few small ranges per row (a key's
// list, its map, its timers), and each scan was a store seek: on RocksDB
// the seek of the memtable's skip list and of every table level, a third of
// the heavy benchmark's CPU (docs/BENCHMARKS.md, "Heavy"). The point cache
// answers ValueState reads from memory; a group entry does the same for
// the scan of one group:
//   - a list's or a map's entries under one grouping key (state key space
//     0x01: varID · len(key) · key, then the element's suffix), or
//   - one grouping key's timers (0x03: len(key) · key, then the expiry).
//
// A scan whose range is exactly one group ([prefix, PrefixEnd(prefix))) asks
// the cache for the group's committed entries. On a miss it reads them from
// the committed state (the write-behind layer over the store) in one pass,
// caches them and serves the scan from that copy, merged with the staging
// layer as before. Groups of more than groupMaxEntries entries or
// groupMaxBytes bytes are not cached: a marker entry (cached as absent)
// says so, and their scans read the store.
//
// The invariants are the point entries': a group entry holds committed
// state only (filled while the store and the write-behind layer cannot
// change, updated by Commit after the store or layer write succeeded with
// the batch's staged writes of its keys, dropped with every other entry of
// the shard by ApplyChangelog, Wipe, re-seed and Close). So a scan answered
// from it returns exactly what the store scan would.
//
// A group entry's cache key is groupKeyTag followed by the group prefix; no
// point read asks for such a key (point reads of key kinds above 0x01
// bypass the cache). Its value is the entries in key order, each
// uvarint(len(suffix)) · suffix · uvarint(len(value)) · value, the stored
// bytes (header and payload): TTL expiry and schema evolution apply on
// every read, as for a store scan.

const (
	groupKeyTag = 0xFE
	// groupMaxEntries and groupMaxBytes bound a cached group: a heavy
	// processor's list of the last few values, map of a few aggregates or
	// key's timers fit; a group that grows past them is read from the store
	// (reading it whole on a miss would cost more than the seek it saves).
	groupMaxEntries = 64
	groupMaxBytes   = 4 << 10
)

// errCorruptGroup: a cached group value does not decode (a bug: the cache
// wrote it).
var errCorruptGroup = errors.New("shard: committed-state cache: malformed group entry")

// groupPrefixLen returns the length of the group prefix of key (a state or
// timer-by-key entry, or a group prefix itself), or 0 when key is of
// another kind or too short to hold one.
func groupPrefixLen(key []byte) int {
	if len(key) == 0 {
		return 0
	}
	var at int
	switch changelog.Kind(key[0]) {
	case changelog.KindState:
		at = 5 // kind, varID
	case changelog.KindTimerKey:
		at = 1 // kind
	default:
		return 0
	}
	if len(key) < at+4 {
		return 0
	}
	n := at + 4 + int(binary.BigEndian.Uint32(key[at:]))
	if n > len(key) || n < at+4 {
		return 0
	}
	return n
}

// isGroupRange reports whether [lower, upper) is exactly one group: lower
// a group prefix and upper its PrefixEnd.
func isGroupRange(lower, upper []byte) bool {
	if upper == nil || groupPrefixLen(lower) != len(lower) {
		return false
	}
	// PrefixEnd(lower): lower up to its last byte below 0xff, that byte + 1.
	i := len(lower) - 1
	for i >= 0 && lower[i] == 0xff {
		i--
	}
	return i >= 0 && len(upper) == i+1 && upper[i] == lower[i]+1 && bytes.Equal(upper[:i], lower[:i])
}

// appendGroupEntry appends one entry to a group value.
func appendGroupEntry(dst, suffix, val []byte) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(suffix)))
	dst = append(dst, suffix...)
	dst = binary.AppendUvarint(dst, uint64(len(val)))
	return append(dst, val...)
}

// nextGroupEntry decodes the entry at the start of g: its suffix and value
// (aliasing g) and the rest of g; ok=false when g is malformed.
func nextGroupEntry(g []byte) (suffix, val, rest []byte, ok bool) {
	n, w := binary.Uvarint(g)
	if w <= 0 || uint64(len(g)-w) < n {
		return nil, nil, nil, false
	}
	suffix, g = g[w:w+int(n)], g[w+int(n):]
	n, w = binary.Uvarint(g)
	if w <= 0 || uint64(len(g)-w) < n {
		return nil, nil, nil, false
	}
	return suffix, g[w : w+int(n)], g[w+int(n):], true
}

// groupBit returns the bit of shardCache.groups for the group at prefix:
// one per state variable (its ID modulo 63: variables may share a bit) and
// one for the other kinds (timers by key).
func groupBit(prefix []byte) uint64 {
	if len(prefix) >= 5 && changelog.Kind(prefix[0]) == changelog.KindState {
		return 2 << (binary.BigEndian.Uint32(prefix[1:5]) % 63)
	}
	return 1
}

// groupCacheKey returns the cache key of the group at prefix in dst.
func groupCacheKey(dst, prefix []byte) []byte {
	return append(append(dst[:0], groupKeyTag), prefix...)
}

// groupGet answers a point read of key, when it is an entry of a group (a
// list's or a map's), from the group's cache entry; on a miss it reads the
// group whole and caches it, so that the key's other entries and its scans
// are answered from memory next. done=false when key is not a group's entry
// or its group is too large to cache (then the point cache answers).
func (s *Shard) groupGet(key []byte) (val []byte, present, done bool) {
	n := groupPrefixLen(key)
	if n == 0 || n == len(key) {
		return nil, false, false // not an entry of a group: a value's key
	}
	r := &s.reads
	r.gkey = groupCacheKey(r.gkey, key[:n])
	h := s.cache.hash(r.gkey)
	val, present, found := s.cache.lookupGroupEntry(h, r.gkey, key[n:], r.filledNow(h))
	switch found {
	case groupCached:
		return val, present, true
	case groupTooLarge:
		return nil, false, false
	}
	if !s.cache.admits(h) {
		return nil, false, false // sparse: the point read, as without groups
	}
	r.gend, _ = keys.AppendPrefixEnd(r.gend[:0], key[:n])
	blob, ok := s.fillGroup(key[:n], r.gend, nil, h)
	if !ok {
		return nil, false, false
	}
	v, present, ok := groupEntry(blob, key[n:])
	if !ok {
		return nil, false, false
	}
	return append([]byte(nil), v...), present, true
}

// groupEntry returns the value of the entry with suffix in the group value
// g (aliasing g) and whether g holds it; ok=false when g is malformed.
func groupEntry(g, suffix []byte) (val []byte, present, ok bool) {
	for len(g) > 0 {
		sfx, v, rest, ok := nextGroupEntry(g)
		if !ok {
			return nil, false, false
		}
		if c := bytes.Compare(sfx, suffix); c >= 0 {
			return v, c == 0, true
		}
		g = rest
	}
	return nil, false, true
}

// fillGroup reads the committed entries of the group [lower, upper) whole,
// appending its cache value to dst, and caches it under r.gkey (the
// group's cache key, set by the caller) of hash h; ok=false when it is too
// large to cache (a marker then says so) or the read failed.
func (s *Shard) fillGroup(lower, upper, dst []byte, h uint64) (blob []byte, ok bool) {
	st, own := s.committedRange(lower, upper)
	blob = dst
	n, big := 0, false
	for ok := seekGE(st, lower, upper); ok; ok = st.Next() && below(st.Key(), upper) {
		if n == groupMaxEntries || len(blob) > groupMaxBytes {
			big = true
			break
		}
		blob = appendGroupEntry(blob, st.Key()[len(lower):], st.Value())
		n++
	}
	err := st.Error()
	s.releaseIter(st, own)
	if err != nil {
		return nil, false // the caller's own read meets the error
	}
	r := &s.reads
	if big {
		s.cache.fillGroup(h, r.gkey, nil, false)
		return nil, false
	}
	s.cache.fillGroup(h, r.gkey, blob, true)
	if s.inBatch {
		if r.filled == nil {
			r.filled = make(map[uint64]struct{})
		}
		r.filled[h] = struct{}{}
	}
	return blob, true
}

// filledNow reports whether this batch filled the group entry of hash h
// (reads of it are then "fresh": see lookupAppend). A hash collision only
// leaves a read uncounted.
func (r *readState) filledNow(h uint64) bool {
	_, ok := r.filled[h]
	return ok
}

// groupIter returns an iterator over the committed entries of the group
// [lower, upper) from the cache, filling it on a miss; ok=false when the
// group is not cached (too large, sparse admission, a read error): the
// caller then reads the store.
func (s *Shard) groupIter(lower, upper []byte) (it kv.Iterator, ok bool) {
	r := &s.reads
	r.gkey = groupCacheKey(r.gkey, lower)
	m := r.mem
	if m == nil || m.busy {
		m = &memIter{}
		if r.mem == nil {
			r.mem = m
		}
	}
	h := s.cache.hash(r.gkey)
	blob, present, hit := s.cache.lookupAppend(h, r.gkey, m.blob[:0], r.filledNow(h))
	if hit {
		if !present {
			return nil, false // too large to cache
		}
		return m.reset(lower, blob), true
	}
	if !s.cache.admits(h) {
		return nil, false // sparse: the store scan, as without groups
	}
	blob, ok = s.fillGroup(lower, upper, m.blob[:0], h)
	if !ok {
		return nil, false
	}
	return m.reset(lower, blob), true
}

// memIter is a kv.Iterator over a group's entries held in memory: the
// committed state of one group, from the cache. Scans bound themselves, and
// the entries are exactly the group's range, so bounds are not rechecked.
type memIter struct {
	busy  bool
	blob  []byte   // the group value (owned)
	keys  []byte   // full keys back to back
	ends  []uint32 // ends[i]: end of key i in keys
	vals  [][]byte // values, aliasing blob
	i     int
	valid bool
	err   error
}

// reset points m at the group at prefix whose value is blob (m takes it).
func (m *memIter) reset(prefix, blob []byte) *memIter {
	m.busy, m.blob, m.valid, m.err = true, blob, false, nil
	m.keys, m.ends, m.vals = m.keys[:0], m.ends[:0], m.vals[:0]
	for g := blob; len(g) > 0; {
		suffix, val, rest, ok := nextGroupEntry(g)
		if !ok {
			m.err = errCorruptGroup
			break
		}
		m.keys = append(append(m.keys, prefix...), suffix...)
		m.ends = append(m.ends, uint32(len(m.keys)))
		m.vals = append(m.vals, val)
		g = rest
	}
	return m
}

func (m *memIter) key(i int) []byte {
	start := uint32(0)
	if i > 0 {
		start = m.ends[i-1]
	}
	return m.keys[start:m.ends[i]:m.ends[i]]
}

func (m *memIter) at(i int) bool {
	m.i = i
	m.valid = m.err == nil && i >= 0 && i < len(m.ends)
	return m.valid
}

// search returns the index of the first key >= k.
func (m *memIter) search(k []byte) int {
	lo, hi := 0, len(m.ends)
	for lo < hi {
		h := int(uint(lo+hi) >> 1)
		if bytes.Compare(m.key(h), k) < 0 {
			lo = h + 1
		} else {
			hi = h
		}
	}
	return lo
}

func (m *memIter) First() bool            { return m.at(0) }
func (m *memIter) Last() bool             { return m.at(len(m.ends) - 1) }
func (m *memIter) Next() bool             { return m.valid && m.at(m.i+1) }
func (m *memIter) Prev() bool             { return m.valid && m.at(m.i-1) }
func (m *memIter) SeekGE(k []byte) bool   { return m.at(m.search(k)) }
func (m *memIter) SeekLT(k []byte) bool   { return m.at(m.search(k) - 1) }
func (m *memIter) Valid() bool            { return m.valid }
func (m *memIter) Key() []byte            { return m.key(m.i) }
func (m *memIter) Value() []byte          { return m.vals[m.i] }
func (m *memIter) Error() error           { return m.err }
func (m *memIter) SetBounds(_, _ []byte)  { m.valid = false }
func (m *memIter) DeletesSkipped() uint64 { return 0 }

// Close frees m for the next scan (the shard keeps one).
func (m *memIter) Close() error {
	m.busy, m.valid = false, false
	return nil
}

// What lookupGroupEntry found.
const (
	groupMissing  = iota // the group is not cached
	groupCached          // the group is cached: the answer is the entry's
	groupTooLarge        // the group is marked too large to cache
)

// lookupGroupEntry returns the value of the entry with suffix in the
// cached group gkey of hash h (a copy), and whether the group held it;
// fresh as for lookupAppend.
func (sc *shardCache) lookupGroupEntry(h uint64, gkey, suffix []byte, fresh bool) (val []byte, present bool, found int) {
	if sc.skips(h) {
		sc.c.misses.Add(1)
		sc.count(false)
		return nil, false, groupMissing
	}
	g := sc.segment(h)
	g.mu.Lock()
	_, off := g.findLive(h, sc.owner, gkey)
	if off < 0 {
		g.mu.Unlock()
		sc.c.misses.Add(1)
		sc.count(false)
		return nil, false, groupMissing
	}
	e := g.entry(uint32(off))
	if e.flags()&flagPresent == 0 {
		g.mu.Unlock()
		return nil, false, groupTooLarge // not a lookup of the cache: the point cache answers
	}
	if !fresh {
		e.setFlags(flagAccessed)
	}
	v, present, ok := groupEntry(e.val(), suffix)
	if !ok {
		g.mu.Unlock()
		return nil, false, groupTooLarge // malformed (a bug): the store answers
	}
	if present {
		val = append(make([]byte, 0, len(v)), v...)
	}
	g.mu.Unlock()
	sc.c.hits.Add(1)
	if !fresh {
		sc.count(true)
	}
	return val, present, groupCached
}

// commitGroups brings the cached groups of the keys staged in ord (key
// order) up to date with the committed batch.
func (sc *shardCache) commitGroups(ord []*stagedEntry, bits uint64) {
	var gkey, merged []byte
	for i := 0; i < len(ord); {
		k := ord[i].key
		n := groupPrefixLen(k)
		if n == 0 {
			i++
			continue
		}
		prefix := k[:n]
		j := i + 1
		for j < len(ord) && bytes.HasPrefix(ord[j].key, prefix) {
			j++
		}
		if bits&groupBit(prefix) == 0 {
			i = j // no group of this kind or variable was ever cached
			continue
		}
		gkey = groupCacheKey(gkey, prefix)
		h := sc.hash(gkey)
		if sc.skips(h) {
			i = j // bypassed: not cached
			continue
		}
		g := sc.segment(h)
		g.mu.Lock()
		if slot, off := g.findLive(h, sc.owner, gkey); off >= 0 {
			if e := g.entry(uint32(off)); e.flags()&flagPresent != 0 {
				var ok bool
				merged, ok = mergeGroup(merged[:0], e.val(), n, ord[i:j])
				if ok {
					sc.putFound(g, h, slot, off, gkey, merged, true, true)
				} else {
					sc.putFound(g, h, slot, off, gkey, nil, false, true) // too large now, or unreadable
				}
			}
		}
		g.mu.Unlock()
		i = j
	}
}

// mergeGroup appends to dst the group value old with the staged writes of
// run applied (their keys start with the group prefix of length plen, in
// key order; a staged entry replaces or deletes the entry of its suffix).
// ok=false when the result is over the group bounds or old is malformed.
func mergeGroup(dst, old []byte, plen int, run []*stagedEntry) (_ []byte, ok bool) {
	n := 0
	add := func(suffix, val []byte) {
		dst = appendGroupEntry(dst, suffix, val)
		n++
	}
	j := 0
	for g := old; len(g) > 0; {
		suffix, val, rest, ok := nextGroupEntry(g)
		if !ok {
			return dst, false
		}
		g = rest
		for j < len(run) && bytes.Compare(run[j].key[plen:], suffix) < 0 {
			if !run[j].deleted {
				add(run[j].key[plen:], run[j].val)
			}
			j++
		}
		if j < len(run) && bytes.Equal(run[j].key[plen:], suffix) {
			if !run[j].deleted {
				add(suffix, run[j].val)
			}
			j++
			continue
		}
		add(suffix, val)
	}
	for ; j < len(run); j++ {
		if !run[j].deleted {
			add(run[j].key[plen:], run[j].val)
		}
	}
	// Half again the fill's byte bound: a group near the bound that grows
	// and shrinks by an entry stays cached.
	return dst, n <= groupMaxEntries && len(dst) <= groupMaxBytes+groupMaxBytes/2
}

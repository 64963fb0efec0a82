package shard

import (
	"bytes"
	"encoding/binary"
	"hash/maphash"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/kstate/kstate/changelog"
)

// Cache is the committed-state cache: point reads of the store (Shard.get
// when the key is not staged) are answered from memory for hot keys, so
// they do not cross cgo into RocksDB. One Cache is shared by the shards of
// a Run and bounded in bytes.
//
// Only metadata and state entries (key kinds 0x00 and 0x01) are cached
// for point reads: timer keys are point read once, by Register, never
// again. Group entries (groupcache.go) cache the scans of small groups of
// entries: a key's list, map or timers.
//
// It holds committed data only, so the batch protocol is unchanged:
//   - it is filled on a read miss with the store's value (or its absence):
//     the store does not change during a batch, so that is committed state.
//     Once a segment is full, a key is filled only on a miss that follows
//     a recent refusal of it (the doorkeeper: cacheSegment.admit), and a
//     shard whose reads have almost stopped hitting fills it for a sample
//     of its keys only (count, cacheSparseHits) and, from its next commit,
//     reads and updates no entry of the other keys (shardCache.bypass);
//   - Commit updates the entries of the keys the batch wrote that are
//     already cached, after the store write succeeded (a key written but
//     never read is not inserted: write-only keys such as timer and TTL
//     index entries would only evict useful ones);
//   - staged (uncommitted) writes never reach it: reads consult the staging
//     layer first, and Abort drops the staging layer only;
//   - every other store write (ApplyChangelog, Wipe, re-seed) and Close
//     drop the shard's entries.
//
// It holds the stored bytes (value header and payload), not decoded values:
// TTL expiry and schema evolution are applied on every read, as for a
// store read.
//
// Layout: nothing in it is a pointer the garbage collector must follow per
// entry. The cache is split into segments (by key hash, each with its own
// lock); a segment is a ring of bytes holding entries back to back
// (header, key, value) and an index, an open-addressing table of uint64
// slots (32 bits of the entry's hash, its offset in the ring) with linear
// probing. Both are plain byte and integer arrays, so GC marking does not
// grow with the number of entries (the earlier layout, one Go object per
// entry, cost in GC what it saved in store reads: docs/benchmarks/history.md).
// A new entry is appended at the ring's tail; room is made by dropping the
// oldest entries at its head, except that an entry read since it was
// written gets a second chance (it is moved to the tail, a CLOCK
// approximation of LRU). An update of a cached key overwrites the value in
// place when it fits, else appends a new entry and marks the old one dead.
// The index only narrows the search: the stored owner and key are compared
// on every lookup, so keys whose hashes collide are told apart.
//
// Reads return a copy of the cached value: the ring is reused, so a value
// handed to a reader must not alias it.
type Cache struct {
	segs     []cacheSegment
	segShift uint // hash >> segShift selects the segment
	seed     maphash.Seed
	owners   atomic.Uint32 // the last owner id given to a shard

	hits, misses atomic.Int64
	mem          *cacheMem // the segments' rings and indexes (cachemem.go)

	weakHash bool // tests: few distinct hashes, so that keys collide
}

const (
	// cacheHeader is the bytes of an entry's header: entry size, owner,
	// key length with the flags in its top byte, value length.
	cacheHeader = 16
	// cacheIndexShare is the share of a segment's budget that is its
	// index (8 bytes a slot, at most 3/4 of the slots used).
	cacheIndexShare = 4
	// cacheIndexMin is the slots a segment's index starts with. It doubles
	// (up to all of its share) once more than half of them are used (a
	// miss probes ~2.5 slots at that load, ~8.5 at 3/4), so that a cache
	// holding few keys probes a small table: a probe's slot load was most
	// of a lookup's time while 100,000 keys' slots were spread over all
	// 16 MiB of a 64 MiB cache's index (docs/BENCHMARKS.md, "The cache's
	// index sized to its entries").
	cacheIndexMin = 256
	// cacheMaxMoves bounds the second chances given while making room for
	// one entry, so an insert does a bounded amount of work.
	cacheMaxMoves = 8
	// cacheSegmentMin is the smallest budget of a segment when there are
	// several; cacheSegmentsMax bounds their number.
	cacheSegmentMin  = 256 << 10
	cacheSegmentsMax = 64
	cacheMaxKey      = 1<<24 - 1
	// cacheAbsentRoom is the value room of an entry caching an absence.
	cacheAbsentRoom = 16

	flagPresent  = 1 << 24 // the key exists (else: known absent)
	flagDead     = 2 << 24 // replaced, deleted or dropped: skipped, not indexed
	flagAccessed = 4 << 24 // read since written or last moved
	flagPad      = 8 << 24 // filler up to the ring's end
	keyLenMask   = 1<<24 - 1
)

// cacheSegment is one lock's share of a Cache.
type cacheSegment struct {
	mu         sync.Mutex
	ring       []byte   // allocated at the first insert
	ringCap    int      // len(ring) once allocated
	head, tail uint64   // absolute positions: tail-head bytes in use
	slots      []uint64 // index: hash<<32 | offset+1, 0 = free; allocated with ring
	slotsCap   uint32   // len(slots)
	mask       uint32   // the slots in use (a power of two) - 1: slots[:mask+1] is the table
	n          int      // used slots: the live entries
	maxEntries int      // 3/4 of slotsCap
	scratch    []byte   // a moved entry, while it is re-appended
	// full is set once making room dropped a live entry (and cleared when
	// a shard's entries are dropped): a miss is then admitted only past
	// the doorkeeper (admit).
	full bool
	// door is the doorkeeper: two generations of a bit set (the current
	// one at door[gen*len/2:]) of the hashes of keys refused since the
	// older one was cleared; doorAdded counts the current one's hashes.
	door      []uint64
	gen       int
	doorAdded int
	_         [64]byte
}

// NewCache returns a cache bounded by maxBytes, or nil (no cache) when
// maxBytes ≤ 0. A nil *Cache is valid in ShardOptions.
func NewCache(maxBytes int64) *Cache {
	if maxBytes <= 0 {
		return nil
	}
	n := 1
	for n < cacheSegmentsMax && maxBytes/int64(2*n) >= cacheSegmentMin {
		n *= 2
	}
	per := maxBytes / int64(n)
	// A quarter of each segment's budget is for its index (a power of two
	// of slots), the rest is its ring.
	c := &Cache{segs: make([]cacheSegment, n), seed: maphash.MakeSeed(), segShift: 64}
	c.mem = newCacheMem(c)
	for b := n; b > 1; b /= 2 {
		c.segShift--
	}
	for i := range c.segs {
		slots := uint32(4)
		for int64(slots)*2*8 <= per/cacheIndexShare {
			slots *= 2
		}
		c.segs[i].ringCap = int(per - int64(slots)*8 - int64(doorWords(slots))*8)
		c.segs[i].slotsCap = slots
		c.segs[i].mask = min(slots, cacheIndexMin) - 1
		c.segs[i].maxEntries = int(slots) * 3 / 4
	}
	return c
}

// CacheStats are a Cache's counters.
type CacheStats struct {
	Hits, Misses int64 // point reads answered from the cache, or from the store
	Bytes        int64 // charged bytes held (ring bytes in use, index slots)
	Entries      int
}

// Stats returns the cache's counters (zero for a nil cache).
func (c *Cache) Stats() CacheStats {
	if c == nil {
		return CacheStats{}
	}
	st := CacheStats{Hits: c.hits.Load(), Misses: c.misses.Load()}
	for i := range c.segs {
		g := &c.segs[i]
		g.mu.Lock()
		st.Bytes += int64(g.tail-g.head) + int64(len(g.slots))*8
		st.Entries += g.n
		g.mu.Unlock()
	}
	return st
}

// shardCache is one shard's part of a Cache: its entries carry the
// shard's owner id.
type shardCache struct {
	c     *Cache
	owner uint32
	// inserted counts the entries this shard inserted since its last clear
	// (at least its live entries): commit and clear skip the cache at 0.
	// Only the shard's goroutine changes it.
	inserted atomic.Int64
	// groups has the groupBit of every group the shard filled an entry of
	// (groupcache.go) since its last clear: commit updates the cached
	// groups whose bit is set, and skips the lookups of the others (a
	// packed variable's or a value's key, which no scan reads as a group).
	groups atomic.Uint64
	// looked and hit count the shard's lookups in the current window of
	// cacheWindow; sparse is the last full window's verdict (admission).
	looked, hit atomic.Int64
	sparse      atomic.Bool
	// bypass is the sparse verdict as applied at the last commit (a point
	// where no read of the shard is in flight): while it is set, the
	// shard has no entry of a key outside the sample (inSample), so its
	// reads and commits of such keys skip the cache altogether. Entering
	// it drops those entries (dropOwner), which later commits no longer
	// update; leaving it lets them in again.
	bypass atomic.Bool
}

const (
	// cacheWindow is the lookups over which a shard's hit ratio is
	// judged.
	cacheWindow = 1 << 14
	// cacheSparseHits: a window with fewer than 1 hit in cacheSparseHits
	// lookups makes the shard's cache sparse: a miss is then admitted for
	// 1 key in cacheSparseAdmit (by hash, so always the same keys), until
	// a window's hits say the keys come back. The reads of a state far
	// larger than the cache (a new or long-unseen key on nearly every
	// read) fill and evict an entry per read, and update it at the commit,
	// for nothing: ~8 % of the CPU of the 10M-key big workload
	// (docs/BENCHMARKS.md, "State larger than memory"). Hot keys among
	// cold ones still enter through the sample, and their hits end the
	// sparse mode. While sparse, the keys outside the sample skip the
	// cache (bypass): their lookups, the index probes of a commit's update
	// of them and their admission checks cost ~4 % of that workload's CPU
	// for no hit.
	cacheSparseHits  = 64
	cacheSparseAdmit = 16
)

func (c *Cache) forShard() *shardCache {
	if c == nil {
		return nil
	}
	return &shardCache{c: c, owner: c.owners.Add(1)}
}

func (sc *shardCache) hash(key []byte) uint64 { return sc.c.hashOf(sc.owner, key) }

func (c *Cache) hashOf(owner uint32, key []byte) uint64 {
	h := maphash.Bytes(c.seed, key) ^ uint64(owner)*0x9e3779b97f4a7c15
	if c.weakHash {
		h &= 15<<60 | 3
	}
	return h
}

func (sc *shardCache) segment(h uint64) *cacheSegment {
	c := sc.c
	if c.segShift == 64 {
		return &c.segs[0]
	}
	return &c.segs[h>>c.segShift]
}

// lookupAppend returns the cached committed value of key with hash h,
// appended to dst (nil: a new slice of the value's size): hit reports
// whether the cache knows it, present whether the key exists. fresh marks
// a read of a group entry the same batch filled (groupcache.go): it
// neither counts toward the hit ratio that decides sparse admission nor
// gives the entry a second chance, since such reads say nothing about the
// entry being read again in later batches.
func (sc *shardCache) lookupAppend(h uint64, key, dst []byte, fresh bool) (val []byte, present, hit bool) {
	if sc.skips(h) {
		sc.c.misses.Add(1)
		sc.count(false)
		return nil, false, false
	}
	g := sc.segment(h)
	g.mu.Lock()
	if g.n > 0 {
		if _, off := g.find(h, sc.owner, key); off >= 0 {
			e := g.entry(uint32(off))
			present = e.flags()&flagPresent != 0
			if present {
				v := e.val()
				if dst == nil {
					dst = make([]byte, 0, len(v))
				}
				val = append(dst, v...)
			}
			if fresh {
				g.mu.Unlock()
				sc.c.hits.Add(1)
				return val, present, true
			}
			e.setFlags(flagAccessed)
			g.mu.Unlock()
			sc.c.hits.Add(1)
			sc.count(true)
			return val, present, true
		}
	}
	g.mu.Unlock()
	sc.c.misses.Add(1)
	sc.count(false)
	return nil, false, false
}

// count records a lookup in the shard's window and, at the window's end,
// decides whether the cache is sparse for the next one.
func (sc *shardCache) count(hit bool) {
	if hit {
		sc.hit.Add(1)
	}
	if sc.looked.Add(1) < cacheWindow {
		return
	}
	sc.sparse.Store(sc.hit.Load()*cacheSparseHits < cacheWindow)
	sc.looked.Store(0)
	sc.hit.Store(0)
}

// admits reports whether a miss of the key with hash h is filled (see
// sampled and cacheSegment.admit); a refusal is recorded by the
// doorkeeper, so the key's next miss may be admitted.
func (sc *shardCache) admits(h uint64) bool {
	if !sc.sampled(h) {
		return false
	}
	g := sc.segment(h)
	g.mu.Lock()
	ok := g.admit(h)
	g.mu.Unlock()
	return ok
}

// sampled reports whether the key with hash h may be admitted by the
// shard's sparse rule: always, except in sparse mode, where 1 key in
// cacheSparseAdmit is.
//
// The sample is taken on bits 40 and up of the hash: the index's tag (the
// low 32 bits, whose low bits are an entry's home slot) and the segment
// (the top bits) use none of them. On bits 8–11, as before, every sampled
// key's home slot had those bits zero, so in sparse mode a segment's
// entries crowded into a sixteenth of its slots' homes, in long runs: with
// the index sized to its entries (cacheIndexMin), a lookup at 10M uniform
// keys probed ~370 slots.
func (sc *shardCache) sampled(h uint64) bool {
	return !(sc.sparse.Load() || sc.bypass.Load()) || inSample(h)
}

// inSample reports whether the key with hash h is in the sparse mode's
// sample (see sampled).
func inSample(h uint64) bool { return (h>>40)%cacheSparseAdmit == 0 }

// skips reports whether the key with hash h has no entry because the
// shard bypasses the cache for it (see shardCache.bypass).
func (sc *shardCache) skips(h uint64) bool { return sc.bypass.Load() && !inSample(h) }

// applySparse brings bypass to the sparse verdict; the shard's goroutine
// calls it where none of the shard's reads is in flight (commit). Entering
// bypass drops the shard's entries outside the sample: later commits do
// not update them, so they would be stale once bypass ends.
func (sc *shardCache) applySparse() {
	sparse := sc.sparse.Load()
	if sparse == sc.bypass.Load() {
		return
	}
	sc.bypass.Store(sparse) // first: no fill admits a key outside the sample from here on
	if sparse && sc.inserted.Load() != 0 {
		sc.drop(false)
	}
}

// drop drops the shard's entries from every segment: all of them, or those
// outside the sparse sample (dropOwner).
func (sc *shardCache) drop(all bool) {
	for i := range sc.c.segs {
		g := &sc.c.segs[i]
		g.mu.Lock()
		g.dropOwner(sc, all)
		g.mu.Unlock()
	}
}

// doorMinWindow is the fewest refused keys a doorkeeper generation holds
// before it is cleared.
const doorMinWindow = 64

// doorWords is the size in words of the doorkeeper of a segment of slots
// index slots: two bit sets of 4 bits a slot (so that a generation of as
// many keys as the segment can hold, two bits each, sets at most 3/8 of
// its bits), taken from the segment's budget.
func doorWords(slots uint32) int { return 2 * max(int(slots)/16, 1) }

// admit reports whether a miss of the key with hash h is filled (g
// locked). While the ring has room nothing is evicted, and every miss is.
// Once it is full, a fill evicts an entry, and a key is admitted only on
// a miss that follows a recent refusal of it: the doorkeeper (TinyLFU's
// name for it) remembers the hashes of the keys it refused, in two
// generations of a bit set, the older one cleared once the current one
// holds as many keys as the segment has entries. So a key comes in when
// it is read again before the cache could have evicted it, which is when
// caching it can pay. A key read once (a backlog over more keys than the
// cache holds, each seen about once) or again only after more distinct
// keys than the cache holds (uniform reads of a state several times the
// cache) is never filled: such fills cost a ring write, an eviction and an
// update at the commit for hits on a few per cent of the reads
// (BenchmarkCacheReads; docs/BENCHMARKS.md, "The cache's
// doorkeeper"). A false positive
// of the bit set (two bits a key) admits a key early, as without it.
func (g *cacheSegment) admit(h uint64) bool {
	if !g.full {
		return true
	}
	w := len(g.door) / 2
	mask := uint64(w*64 - 1)
	x := (h ^ h>>29) * 0xbf58476d1ce4e5b9
	b1, b2 := x&mask, (x>>32)&mask
	cur, prev := g.door[g.gen*w:][:w], g.door[(1-g.gen)*w:][:w]
	if bitsSet(cur, b1, b2) || bitsSet(prev, b1, b2) {
		return true
	}
	cur[b1/64] |= 1 << (b1 % 64)
	cur[b2/64] |= 1 << (b2 % 64)
	if g.doorAdded++; g.doorAdded >= max(g.n, doorMinWindow) {
		g.gen ^= 1
		clear(g.door[g.gen*w:][:w])
		g.doorAdded = 0
	}
	return false
}

func bitsSet(set []uint64, b1, b2 uint64) bool {
	return set[b1/64]&(1<<(b1%64)) != 0 && set[b2/64]&(1<<(b2%64)) != 0
}

// fillHash caches the committed value of key with hash h read from the
// store, if the admission rules let it in (sampled, cacheSegment.admit).
func (sc *shardCache) fillHash(h uint64, key, val []byte, present bool) {
	if !sc.sampled(h) {
		return
	}
	g := sc.segment(h)
	g.mu.Lock()
	if g.admit(h) {
		sc.put(g, h, key, val, present, false)
	}
	g.mu.Unlock()
}

// fillGroup caches the committed entries of a group (groupcache.go) under
// its cache key gkey of hash h; present=false records that the group is
// too large to cache.
func (sc *shardCache) fillGroup(h uint64, gkey, val []byte, present bool) {
	sc.groups.Or(groupBit(gkey[1:]))
	sc.fillHash(h, gkey, val, present)
}

// commit brings the cached entries of the keys staged in st up to date
// with the committed batch (called after the store write succeeded).
func (sc *shardCache) commit(st *staging) {
	sc.applySparse()
	if sc.inserted.Load() == 0 {
		return
	}
	ord := st.ordered()
	if bits := sc.groups.Load(); bits != 0 {
		sc.commitGroups(ord, bits)
	}
	for _, e := range ord {
		if e.key[0] > byte(changelog.KindState) {
			break // staged keys are sorted: timer and TTL keys are never point cached
		}
		h := sc.hash(e.key)
		if sc.skips(h) {
			continue
		}
		g := sc.segment(h)
		g.mu.Lock()
		sc.put(g, h, e.key, e.val, !e.deleted, true)
		g.mu.Unlock()
	}
}

// put stores key's committed value in g (locked). With onlyCached, a key
// that is not cached stays so.
func (sc *shardCache) put(g *cacheSegment, h uint64, key, val []byte, present, onlyCached bool) {
	i, off := -1, -1
	if g.n > 0 {
		i, off = g.find(h, sc.owner, key)
	}
	sc.putFound(g, h, i, off, key, val, present, onlyCached)
}

// putFound is put with key's place in g already looked up under the same
// lock: slot i and entry offset off from find, or off -1 when g has no live
// entry of key.
func (sc *shardCache) putFound(g *cacheSegment, h uint64, i, off int, key, val []byte, present, onlyCached bool) {
	if !present {
		val = nil
	}
	room := len(val)
	if !present {
		// Room for a small value: a key read as absent is often written
		// next (a count's first record), and then fits in place.
		room = cacheAbsentRoom
	}
	size := cacheHeader + len(key) + len(val)
	if off >= 0 {
		if e := g.entry(uint32(off)); size <= e.size() {
			// In place: the value fits in the entry's room.
			e.setVal(val, present)
			return
		}
		g.kill(i, uint32(off))
	} else if onlyCached {
		return
	}
	size = cacheHeader + len(key) + room
	if len(key) > cacheMaxKey || size > g.ringCap/4 {
		return // one entry may not take a large part of the budget
	}
	if g.ring == nil {
		g.ring = sc.c.mem.bytes(g.ringCap)
		g.slots = sc.c.mem.words(int(g.slotsCap))
		g.door = sc.c.mem.words(doorWords(g.slotsCap))
	}
	at := g.makeRoom(sc.c, size)
	e := cacheEntry(g.ring[at : int(at)+size : int(at)+size])
	binary.LittleEndian.PutUint32(e[0:], uint32(size))
	binary.LittleEndian.PutUint32(e[4:], sc.owner)
	binary.LittleEndian.PutUint32(e[8:], uint32(len(key)))
	copy(e[cacheHeader:], key)
	e.setVal(val, present)
	g.insertSlot(h, at)
	sc.inserted.Add(1)
}

// clear drops every entry of the shard.
func (sc *shardCache) clear() {
	if sc == nil || sc.inserted.Load() == 0 {
		return
	}
	sc.drop(true)
	sc.inserted.Store(0)
	sc.groups.Store(0)
}

// cacheEntry is an entry in a ring: a header (size, owner, key length and
// flags, value length), the key, the value and unused room up to size.
type cacheEntry []byte

func (e cacheEntry) size() int     { return int(binary.LittleEndian.Uint32(e[0:])) }
func (e cacheEntry) owner() uint32 { return binary.LittleEndian.Uint32(e[4:]) }
func (e cacheEntry) flags() uint32 { return binary.LittleEndian.Uint32(e[8:]) &^ keyLenMask }
func (e cacheEntry) keyLen() int   { return int(binary.LittleEndian.Uint32(e[8:]) & keyLenMask) }
func (e cacheEntry) key() []byte   { return e[cacheHeader : cacheHeader+e.keyLen()] }
func (e cacheEntry) setFlags(f uint32) {
	binary.LittleEndian.PutUint32(e[8:], binary.LittleEndian.Uint32(e[8:])|f)
}
func (e cacheEntry) clearFlags(f uint32) {
	binary.LittleEndian.PutUint32(e[8:], binary.LittleEndian.Uint32(e[8:])&^f)
}

func (e cacheEntry) val() []byte {
	k := cacheHeader + e.keyLen()
	return e[k : k+int(binary.LittleEndian.Uint32(e[12:]))]
}

func (e cacheEntry) matches(owner uint32, key []byte) bool {
	return e.flags()&flagDead == 0 && e.owner() == owner && bytes.Equal(e.key(), key)
}

// setVal writes the value (it fits: the caller checked the entry's size).
func (e cacheEntry) setVal(val []byte, present bool) {
	copy(e[cacheHeader+e.keyLen():], val)
	binary.LittleEndian.PutUint32(e[12:], uint32(len(val)))
	if present {
		e.setFlags(flagPresent)
	} else {
		e.clearFlags(flagPresent)
	}
}

// entry returns the entry at off, up to the ring's end (its size bounds it).
func (g *cacheSegment) entry(off uint32) cacheEntry {
	e := cacheEntry(g.ring[off:])
	if len(e) >= cacheHeader {
		if n := e.size(); n >= cacheHeader && n <= len(e) {
			return e[:n:n]
		}
	}
	return e
}

// kill marks the live entry at off, indexed in slot i, dead.
func (g *cacheSegment) kill(i int, off uint32) {
	g.entry(off).setFlags(flagDead)
	g.removeSlot(i)
}

// The index. A slot holds the low 32 bits of an entry's hash (its tag;
// the slot it belongs in is tag&mask) and the entry's offset plus one. It
// is never full (at most 3/4 used), so a probe ends at a free slot.

func cacheSlot(h uint64, off uint32) uint64 { return uint64(uint32(h))<<32 | uint64(off+1) }

// find returns the slot and offset of the live entry of (owner, key) with
// hash h, or off -1.
func (g *cacheSegment) find(h uint64, owner uint32, key []byte) (slot int, off int) {
	tag := uint32(h)
	for i := tag & g.mask; ; i = (i + 1) & g.mask {
		s := g.slots[i]
		if s == 0 {
			return -1, -1
		}
		if uint32(s>>32) == tag && g.entry(uint32(s)-1).matches(owner, key) {
			return int(i), int(uint32(s) - 1)
		}
	}
}

// findLive is find on a segment that may hold nothing yet (no index).
func (g *cacheSegment) findLive(h uint64, owner uint32, key []byte) (slot int, off int) {
	if g.n == 0 {
		return -1, -1
	}
	return g.find(h, owner, key)
}

// findOff returns the slot of the entry at off with hash h (it is indexed).
func (g *cacheSegment) findOff(h uint64, off uint32) int {
	want := cacheSlot(h, off)
	for i := uint32(h) & g.mask; ; i = (i + 1) & g.mask {
		switch g.slots[i] {
		case want:
			return int(i)
		case 0:
			panic("shard: committed-state cache entry missing from its index")
		}
	}
}

func (g *cacheSegment) insertSlot(h uint64, off uint32) {
	if size := g.mask + 1; (g.n+1)*2 > int(size) && size < g.slotsCap {
		g.growIndex()
	}
	i := uint32(h) & g.mask
	for g.slots[i] != 0 {
		i = (i + 1) & g.mask
	}
	g.slots[i] = cacheSlot(h, off)
	g.n++
}

// growIndex doubles the slots of the index in use and moves every slot to
// its place in the larger table. The slots past the old table are still
// zero: the table only grows (a segment emptied by a shard's clear keeps
// its size).
func (g *cacheSegment) growIndex() {
	old := slices.Clone(g.slots[:g.mask+1])
	clear(g.slots[:g.mask+1])
	g.mask = g.mask*2 + 1
	for _, s := range old {
		if s == 0 {
			continue
		}
		i := uint32(s>>32) & g.mask
		for g.slots[i] != 0 {
			i = (i + 1) & g.mask
		}
		g.slots[i] = s
	}
}

// removeSlot frees slot i and moves back the slots after it whose probe
// would otherwise pass the freed one (backward-shift deletion: no
// tombstones).
func (g *cacheSegment) removeSlot(i int) {
	g.n--
	free := uint32(i)
	for j := (free + 1) & g.mask; g.slots[j] != 0; j = (j + 1) & g.mask {
		home := uint32(g.slots[j]>>32) & g.mask
		// The slot at j stays when its home is cyclically in (free, j].
		if (free < j && free < home && home <= j) || (free > j && (free < home || home <= j)) {
			continue
		}
		g.slots[free] = g.slots[j]
		free = j
	}
	g.slots[free] = 0
}

// makeRoom returns the offset where an entry of size bytes (at most a
// quarter of the ring) is written, at the ring's tail, after dropping (or
// moving) the oldest entries until it fits and the index has a free slot.
// Entries never wrap around the ring's end: the rest of the ring is padded.
func (g *cacheSegment) makeRoom(c *Cache, size int) uint32 {
	moves := 0
	for {
		p := int(g.tail % uint64(g.ringCap))
		need := size
		if g.ringCap-p < size {
			need += g.ringCap - p // padding up to the end, then from 0
		}
		if int(g.tail-g.head)+need <= g.ringCap && g.n < g.maxEntries {
			break
		}
		g.evictHead(c, &moves)
	}
	return g.place(size)
}

// place advances the tail over size bytes (padding first if they do not
// fit before the ring's end) and returns their offset. The caller made
// room.
func (g *cacheSegment) place(size int) uint32 {
	if g.head == g.tail {
		g.head, g.tail = 0, 0 // empty: start over at the ring's start
	}
	p := int(g.tail % uint64(g.ringCap))
	if rest := g.ringCap - p; rest < size {
		if rest >= cacheHeader {
			e := cacheEntry(g.ring[p:])
			binary.LittleEndian.PutUint32(e[0:], uint32(rest))
			binary.LittleEndian.PutUint32(e[8:], flagPad)
		}
		g.tail += uint64(rest)
		p = 0
	}
	g.tail += uint64(size)
	return uint32(p)
}

// evictHead removes the entry at the ring's head: padding and dead entries
// are skipped; a live entry read since it was written is moved to the tail
// (up to cacheMaxMoves times per makeRoom), else dropped.
func (g *cacheSegment) evictHead(c *Cache, moves *int) {
	p := int(g.head % uint64(g.ringCap))
	if g.ringCap-p < cacheHeader {
		g.head += uint64(g.ringCap - p) // implicit padding
		return
	}
	e := g.entry(uint32(p))
	size := e.size()
	f := e.flags()
	switch {
	case f&flagPad != 0:
		g.head += uint64(size)
		return
	case f&flagDead != 0:
		g.head += uint64(size)
		return
	}
	h := c.hashOf(e.owner(), e.key())
	i := g.findOff(h, uint32(p))
	if f&flagAccessed != 0 && *moves < cacheMaxMoves {
		// Second chance: the freed bytes at the head always make room for
		// the same entry at the tail (see place).
		*moves++
		g.scratch = append(g.scratch[:0], e...)
		g.head += uint64(size)
		off := g.place(size)
		copy(g.ring[off:], g.scratch)
		cacheEntry(g.ring[off:]).clearFlags(flagAccessed)
		g.slots[i] = cacheSlot(h, off) // same hash: same home slot
		return
	}
	g.removeSlot(i)
	g.head += uint64(size)
	g.full = true
}

// dropOwner marks every live entry of sc dead (g locked), or with all
// false only those of keys outside the sparse sample (inSample).
func (g *cacheSegment) dropOwner(sc *shardCache, all bool) {
	if g.ring == nil {
		return
	}
	for pos := g.head; pos < g.tail; {
		p := int(pos % uint64(g.ringCap))
		if g.ringCap-p < cacheHeader {
			pos += uint64(g.ringCap - p)
			continue
		}
		e := g.entry(uint32(p))
		if f := e.flags(); f&(flagPad|flagDead) == 0 && e.owner() == sc.owner {
			if h := sc.c.hashOf(sc.owner, e.key()); all || !inSample(h) {
				g.kill(g.findOff(h, uint32(p)), uint32(p))
				g.full = false // the dead entries make room: admit again until it is used
			}
		}
		pos += uint64(e.size())
	}
}

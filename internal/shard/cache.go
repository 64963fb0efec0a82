package shard

import (
	"sync"
	"sync/atomic"

	"github.com/kstate/kstate/changelog"
)

// Cache is the committed-state cache: point reads of the store (Shard.get
// when the key is not staged) are answered from memory for hot keys, so
// they do not cross cgo into RocksDB. One Cache is shared by the shards of
// a Run and bounded in bytes; eviction is least recently used over all of
// them.
//
// Only metadata and state entries (key kinds 0x00 and 0x01) are cached:
// timer keys are point read once, by Register, never again.
//
// It holds committed data only, so the batch protocol is unchanged:
//   - it is filled on a read miss with the store's value (or its absence):
//     the store does not change during a batch, so that is committed state;
//   - Commit updates the entries of the keys the batch wrote that are
//     already cached, after the store write succeeded (a key written but
//     never read is not inserted: write-only keys such as timer and TTL
//     index entries would only evict useful ones);
//   - staged (uncommitted) writes never reach it: reads consult the staging
//     layer first, and Abort drops the staging layer only;
//   - every other store write (ApplyChangelog, Wipe, re-seed) and Close
//     drop the shard's entries.
//
// Cached values are never modified in place (a commit replaces the slice),
// so a value handed to a reader stays valid, like a staged one.
type Cache struct {
	mu   sync.Mutex
	max  int64
	used int64
	n    int
	lru  cacheEntry // sentinel of the ring: lru.next is the most recent

	hits, misses atomic.Int64
}

// cacheEntryOverhead approximates the bytes of an entry besides its key
// and value (the struct, the map slot and the key string header).
const cacheEntryOverhead = 112

type cacheEntry struct {
	key        string
	val        []byte
	present    bool // false: the key is known to be absent
	owner      *shardCache
	prev, next *cacheEntry
}

func (e *cacheEntry) charge() int64 { return int64(len(e.key)+cap(e.val)) + cacheEntryOverhead }

// NewCache returns a cache bounded by maxBytes, or nil (no cache) when
// maxBytes ≤ 0. A nil *Cache is valid in ShardOptions.
func NewCache(maxBytes int64) *Cache {
	if maxBytes <= 0 {
		return nil
	}
	c := &Cache{max: maxBytes}
	c.lru.next, c.lru.prev = &c.lru, &c.lru
	return c
}

// CacheStats are a Cache's counters.
type CacheStats struct {
	Hits, Misses int64 // point reads answered from the cache, or from the store
	Bytes        int64 // charged bytes held (keys, values, overhead)
	Entries      int
}

// Stats returns the cache's counters (zero for a nil cache).
func (c *Cache) Stats() CacheStats {
	if c == nil {
		return CacheStats{}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return CacheStats{Hits: c.hits.Load(), Misses: c.misses.Load(), Bytes: c.used, Entries: c.n}
}

// shardCache is one shard's part of a Cache.
type shardCache struct {
	c *Cache
	m map[string]*cacheEntry
}

func (c *Cache) forShard() *shardCache {
	if c == nil {
		return nil
	}
	return &shardCache{c: c, m: make(map[string]*cacheEntry)}
}

func (c *Cache) unlink(e *cacheEntry) {
	e.prev.next, e.next.prev = e.next, e.prev
	e.prev, e.next = nil, nil
}

func (c *Cache) pushFront(e *cacheEntry) {
	e.prev, e.next = &c.lru, c.lru.next
	c.lru.next.prev = e
	c.lru.next = e
}

func (c *Cache) remove(e *cacheEntry) {
	c.unlink(e)
	delete(e.owner.m, e.key)
	c.used -= e.charge()
	c.n--
}

func (c *Cache) evict() {
	for c.used > c.max && c.lru.prev != &c.lru {
		c.remove(c.lru.prev)
	}
}

// lookup returns the cached committed value of key: hit reports whether
// the cache knows it, present whether the key exists.
func (sc *shardCache) lookup(key []byte) (val []byte, present, hit bool) {
	c := sc.c
	c.mu.Lock()
	e := sc.m[string(key)]
	if e == nil {
		c.mu.Unlock()
		c.misses.Add(1)
		return nil, false, false
	}
	if c.lru.next != e {
		c.unlink(e)
		c.pushFront(e)
	}
	val, present = e.val, e.present
	c.mu.Unlock()
	c.hits.Add(1)
	return val, present, true
}

// fill caches the committed value of key read from the store (val is kept,
// not copied: the store returned a copy).
func (sc *shardCache) fill(key, val []byte, present bool) {
	c := sc.c
	if int64(len(key)+cap(val))+cacheEntryOverhead > c.max/4 {
		return // one entry may not take a large part of the budget
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if e := sc.m[string(key)]; e != nil {
		c.used -= e.charge()
		e.val, e.present = val, present
		c.used += e.charge()
	} else {
		e = &cacheEntry{key: string(key), val: val, present: present, owner: sc}
		sc.m[e.key] = e
		c.pushFront(e)
		c.used += e.charge()
		c.n++
	}
	c.evict()
}

// commit brings the cached entries of the keys staged in st up to date
// with the committed batch (called after the store write succeeded). The
// staged value slices are kept: the staging layer is dropped after Commit.
func (sc *shardCache) commit(st *staging) {
	c := sc.c
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(sc.m) == 0 {
		return
	}
	for e := st.first(); e != nil; e = e.next[0] {
		if e.key[0] > byte(changelog.KindState) {
			break // staged keys are sorted: timer and TTL keys are never cached
		}
		ce := sc.m[string(e.key)]
		if ce == nil {
			continue
		}
		if !e.deleted && int64(len(e.key)+cap(e.val))+cacheEntryOverhead > c.max/4 {
			c.remove(ce)
			continue
		}
		c.used -= ce.charge()
		ce.val, ce.present = e.val, !e.deleted
		if e.deleted {
			ce.val = nil
		}
		c.used += ce.charge()
	}
	c.evict()
}

// clear drops every entry of the shard.
func (sc *shardCache) clear() {
	if sc == nil {
		return
	}
	c := sc.c
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, e := range sc.m {
		c.unlink(e)
		c.used -= e.charge()
		c.n--
	}
	clear(sc.m)
}

package shard

import (
	"bytes"
	"encoding/binary"
	"hash/maphash"
	"slices"

	"github.com/kstate/kstate/changelog"
	"github.com/kstate/kstate/internal/kv"
)

// Prefetching a batch's reads of values (docs/BENCHMARKS.md, "State larger
// than memory"). When a shard's state is much larger than its caches, nearly
// every ValueState read (and every read of a packed list or map) misses the
// committed-state cache and becomes a RocksDB Get of a key in a block not
// cached: the biggest cost of such a workload. RocksDB's batched MultiGet
// reads the same keys in key order for about a quarter less CPU each.
// Before a batch's handlers run, the engine passes the batch's grouping
// keys to Prefetch, which reads, for every variable whose entries nearly
// every key of the last batch read past the cache, the entries of all those
// keys with one MultiGet. A read that then misses the cache and the
// write-behind layer takes its value from the prefetched ones instead of a
// Get. The prefetched values are committed state as of the batch's start,
// which does not change during a batch (a commit or a flush comes after
// it), so a read returns what a Get would have; staged writes still shadow
// them. A variable read for only some keys is not prefetched, and a state
// that fits the cache never is: its reads hit the cache.

const (
	// prefetchMinKeys is the fewest grouping keys worth a MultiGet.
	prefetchMinKeys = 32
	// prefetchMaxBytes bounds the values a shard prefetches for a batch
	// (large values: the rest are read one at a time, as before).
	prefetchMaxBytes = 4 << 20
	// prefetchChunk is how many keys one MultiGet reads.
	prefetchChunk = 1024
)

// prefetcher is a shard's prefetch state: what the current batch read past
// the cache (to choose the variables of the next), and the values read for
// the current one.
type prefetcher struct {
	// misses counts, by variable id, the reads of whole-key entries
	// (a value's, a packed list's or map's) that went past the
	// committed-state cache in the batch since the last Prefetch; keys
	// is the number of grouping keys that Prefetch was given.
	misses []varCount
	keys   int

	// The batch's prefetched entries, in key order: entry i's key is
	// keyBuf[ents[i-1].kend:ents[i].kend]. bytes is the size of their
	// values.
	keyBuf []byte
	ents   []prefetched
	bytes  int
	// index finds an entry by key: an open-addressing table (linear
	// probing, a power of two of slots, at most half used) of entry
	// numbers + 1 at their key's hash (0: free). A binary search of ents
	// cost 2 % of the CPU of a 10M-key workload, most of it comparing
	// keys (docs/BENCHMARKS.md, "State larger than memory").
	index []int32
	seed  maphash.Seed

	// served counts the reads answered from prefetched values (tests).
	served int
	// force prefetches every variable read past the cache since the shard
	// opened, for any number of keys (tests: PrefetchAllForTest).
	force bool
	known []uint32

	hot   []uint32 // scratch: the variables to prefetch
	order [][]byte // scratch: the grouping keys in state-key order
	chunk [][]byte // scratch: the keys of one MultiGet
}

type varCount struct {
	id uint32
	n  int
}

// prefetched is one entry read ahead: its value (its own allocation,
// given to the first read of it: a later read of the key goes to the
// store), or the key's absence, or that it was not read (over
// prefetchMaxBytes).
type prefetched struct {
	kend  int
	val   []byte
	state uint8
}

const (
	entNotRead  uint8 = iota // or its value given to a read already
	entFound                 // val is the value
	entNotFound              // the key has no committed entry
)

// wholeKeyVar returns the variable id of key when key is a state entry
// without a suffix (a ValueState's, a packed list's or map's entry).
func wholeKeyVar(key []byte) (uint32, bool) {
	if len(key) < 9 || changelog.Kind(key[0]) != changelog.KindState {
		return 0, false
	}
	if uint64(len(key)-9) != uint64(binary.BigEndian.Uint32(key[5:9])) {
		return 0, false
	}
	return binary.BigEndian.Uint32(key[1:5]), true
}

// missed counts a read of key that went past the committed-state cache.
func (p *prefetcher) missed(key []byte) {
	id, ok := wholeKeyVar(key)
	if !ok {
		return
	}
	for i := range p.misses {
		if p.misses[i].id == id {
			p.misses[i].n++
			return
		}
	}
	p.misses = append(p.misses, varCount{id: id, n: 1})
	if p.force && !slices.Contains(p.known, id) {
		p.known = append(p.known, id)
	}
}

// drop forgets the prefetched values (at a batch's start and end).
func (p *prefetcher) drop() {
	clear(p.ents) // no value kept
	p.keyBuf, p.ents, p.bytes, p.index = p.keyBuf[:0], p.ents[:0], 0, p.index[:0]
}

// buildIndex indexes the entries by key (index).
func (p *prefetcher) buildIndex() {
	n := 16
	for n < 2*len(p.ents) {
		n *= 2
	}
	if cap(p.index) < n {
		p.index = make([]int32, n)
		if p.seed == (maphash.Seed{}) {
			p.seed = maphash.MakeSeed()
		}
	}
	p.index = p.index[:n]
	clear(p.index)
	mask := uint64(n - 1)
	for i := range p.ents {
		for j := maphash.Bytes(p.seed, p.key(i)) & mask; ; j = (j + 1) & mask {
			if p.index[j] == 0 {
				p.index[j] = int32(i + 1)
				break
			}
		}
	}
}

// find returns the number of the entry of key, or -1.
func (p *prefetcher) find(key []byte) int {
	if len(p.index) == 0 {
		return -1
	}
	mask := uint64(len(p.index) - 1)
	for j := maphash.Bytes(p.seed, key) & mask; ; j = (j + 1) & mask {
		i := int(p.index[j]) - 1
		if i < 0 {
			return -1
		}
		if bytes.Equal(p.key(i), key) {
			return i
		}
	}
}

// lookup returns the prefetched committed value of key (the caller's to
// keep, as a store Get's), and whether key was prefetched (found=false:
// read it from the store).
func (p *prefetcher) lookup(key []byte) (val []byte, ok, found bool) {
	i := p.find(key)
	if i < 0 {
		return nil, false, false
	}
	p.served++
	e := &p.ents[i]
	switch e.state {
	case entNotRead:
		p.served--
		return nil, false, false
	case entNotFound:
		return nil, false, true
	}
	v := e.val // the reader owns it now, as a Get's copy
	e.val, e.state = nil, entNotRead
	return v, true, true
}

// key returns entry i's key.
func (p *prefetcher) key(i int) []byte {
	start := 0
	if i > 0 {
		start = p.ents[i-1].kend
	}
	return p.keyBuf[start:p.ents[i].kend]
}

// Prefetch reads, with one batched lookup per chunk of keys, the committed
// entries under groupKeys (the batch's grouping keys, each once) of every
// variable nearly every key of the last batch read past the cache, so that
// the handlers' reads of them need no store read of their own. Call it in a
// batch, before the handlers run; a store that cannot read many keys at
// once (kv.MultiGetter) makes it a no-op. An error is the store's.
func (s *Shard) Prefetch(groupKeys [][]byte) error {
	p := &s.pre
	p.drop()
	hot := p.hot[:0]
	if p.keys >= prefetchMinKeys {
		for _, c := range p.misses {
			if 4*c.n >= 3*p.keys {
				hot = append(hot, c.id)
			}
		}
	}
	p.misses, p.keys = p.misses[:0], len(groupKeys)
	if p.force {
		hot = append(hot[:0], p.known...)
	}
	p.hot = hot
	mg, ok := s.store.(kv.MultiGetter)
	if !ok || !s.inBatch || len(hot) == 0 || len(groupKeys) < prefetchMinKeys && !p.force {
		// Not reading ahead: free what an earlier batch's keys grew (a
		// backlog's first batches are read ahead until the cache is warm).
		p.keyBuf, p.ents, p.order, p.index = nil, nil, nil, nil
		return nil
	}
	slices.Sort(hot)
	// A variable's entries are ordered by the grouping key's length, then
	// its bytes (appendHead).
	order := append(p.order[:0], groupKeys...)
	slices.SortFunc(order, func(a, b []byte) int {
		if len(a) != len(b) {
			return len(a) - len(b)
		}
		return bytes.Compare(a, b)
	})
	order = slices.CompactFunc(order, bytes.Equal)
	defer func() {
		clear(order) // keep no reference to the batch's keys
		p.order = order[:0]
	}()
	for _, id := range hot {
		for _, gk := range order {
			p.keyBuf = append(p.keyBuf, byte(changelog.KindState))
			p.keyBuf = binary.BigEndian.AppendUint32(p.keyBuf, id)
			p.keyBuf = binary.BigEndian.AppendUint32(p.keyBuf, uint32(len(gk)))
			p.keyBuf = append(p.keyBuf, gk...)
			p.ents = append(p.ents, prefetched{kend: len(p.keyBuf)})
		}
	}
	p.buildIndex()
	// Read in chunks while the values are within their bound; the entries
	// not read are read from the store when the handlers need them.
	done := 0
	for done < len(p.ents) && p.bytes < prefetchMaxBytes {
		n := min(prefetchChunk, len(p.ents)-done)
		chunk := p.chunk[:0]
		for i := done; i < done+n; i++ {
			chunk = append(chunk, p.key(i))
		}
		p.chunk = chunk
		err := mg.GetSorted(chunk, prefetchMaxBytes-p.bytes, func(i int, v []byte, ok bool) {
			e := &p.ents[done+i]
			if !ok {
				e.state = entNotFound
				return
			}
			e.val, e.state = append(make([]byte, 0, len(v)), v...), entFound
			p.bytes += len(v)
		})
		clear(p.chunk) // no reference to keyBuf kept
		if err != nil {
			p.drop()
			return shardErr("Prefetch", err)
		}
		done += n
	}
	return nil
}

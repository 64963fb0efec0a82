package shard

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"runtime"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/kstate/kstate/internal/keys"
)

// lookup is lookupAppend of key, into a new slice.
func (sc *shardCache) lookup(key []byte) (val []byte, present, hit bool) {
	return sc.lookupAppend(sc.hash(key), key, nil, false)
}

// fill is fillHash of key.
func (sc *shardCache) fill(key, val []byte, present bool) {
	sc.fillHash(sc.hash(key), key, val, present)
}

// checkCache verifies a cache's invariants: every live entry of a ring is
// indexed under its hash at its offset, nothing else is indexed, the bytes
// in use stay within the ring and the charged bytes within the budget.
func checkCache(t *testing.T, c *Cache, budget int64) {
	t.Helper()
	for i := range c.segs {
		g := &c.segs[i]
		if g.tail-g.head > uint64(g.ringCap) {
			t.Fatalf("segment %d: %d bytes in use, ring of %d", i, g.tail-g.head, g.ringCap)
		}
		if g.n > g.maxEntries {
			t.Fatalf("segment %d: %d entries, at most %d", i, g.n, g.maxEntries)
		}
		used := 0
		for j, s := range g.slots {
			if s == 0 {
				continue
			}
			used++
			// Every slot between its home and j is used (linear probing).
			for k := uint32(s>>32) & g.mask; k != uint32(j); k = (k + 1) & g.mask {
				if g.slots[k] == 0 {
					t.Fatalf("segment %d: slot %d is past a free slot %d", i, j, k)
				}
			}
		}
		if used != g.n {
			t.Fatalf("segment %d: %d slots used, n = %d", i, used, g.n)
		}
		live := 0
		for pos := g.head; pos < g.tail; {
			p := int(pos % uint64(g.ringCap))
			if g.ringCap-p < cacheHeader {
				pos += uint64(g.ringCap - p)
				continue
			}
			e := g.entry(uint32(p))
			if e.size() < cacheHeader || p+e.size() > g.ringCap {
				t.Fatalf("segment %d: entry at %d has size %d", i, p, e.size())
			}
			if f := e.flags(); f&(flagPad|flagDead) == 0 {
				live++
				if _, off := g.find(c.hashOf(e.owner(), e.key()), e.owner(), e.key()); off != p {
					t.Fatalf("segment %d: live entry %q at %d indexed at %d", i, e.key(), p, off)
				}
			}
			pos += uint64(e.size())
		}
		if live != g.n {
			t.Fatalf("segment %d: %d live entries, %d indexed", i, live, g.n)
		}
	}
	if b := c.Stats().Bytes; b > budget {
		t.Fatalf("cache charges %d bytes, over its budget %d", b, budget)
	}
}

// A randomized run of fills, lookups, commits (updates, deletes) and
// clears over several owners against a model of the committed values: a
// hit must return the committed value, and the invariants hold throughout.
// Hashes are drawn from a small set so that keys collide often.
func TestCacheModel(t *testing.T) {
	for _, budget := range []int64{2 << 10, 64 << 10, 1 << 20} {
		for seed := uint64(1); seed <= 3; seed++ {
			t.Run(fmt.Sprintf("budget%d/seed%d", budget, seed), func(t *testing.T) {
				rnd := rand.New(rand.NewPCG(seed, uint64(budget)))
				c := NewCache(budget)
				c.weakHash = seed == 3
				type val struct {
					v       []byte
					present bool
				}
				owners := []*shardCache{c.forShard(), c.forShard(), c.forShard()}
				committed := make([]map[string]val, len(owners))
				for i := range committed {
					committed[i] = map[string]val{}
				}
				key := func() []byte { return fmt.Appendf(nil, "\x01k%d", rnd.IntN(300)) }
				hits := 0
				for op := 0; op < 20000; op++ {
					o := rnd.IntN(len(owners))
					sc, m := owners[o], committed[o]
					k := key()
					h := sc.hash(k)
					switch r := rnd.IntN(100); {
					case r < 50: // a read: from the cache, else the "store"
						v, ok, hit := sc.lookup(k)
						if hit {
							hits++
							want := m[string(k)]
							if ok != want.present || !bytes.Equal(v, want.v) {
								t.Fatalf("op %d: cached %q %v, committed %q %v", op, v, ok, want.v, want.present)
							}
							if ok && v == nil {
								t.Fatalf("op %d: present value is nil", op)
							}
							continue
						}
						want := m[string(k)]
						sc.fill(k, bytes.Clone(want.v), want.present)
					case r < 90: // a committed write: update or delete
						var v val
						if rnd.IntN(4) > 0 {
							v = val{bytes.Repeat([]byte{byte(op)}, rnd.IntN(40)), true}
							if rnd.IntN(50) == 0 {
								v.v = make([]byte, 2000) // too large for small budgets
							}
						}
						m[string(k)] = v
						g := sc.segment(h)
						g.mu.Lock()
						sc.put(g, h, k, v.v, v.present, true)
						g.mu.Unlock()
					case r < 90 || rnd.IntN(100) > 0:
						continue
					case true: // a restore or close
						sc.clear()
						for kk, v := range m {
							if _, _, hit := sc.lookup([]byte(kk)); hit {
								t.Fatalf("cleared key %q (%v) still cached", kk, v)
							}
						}
					}
					if op%97 == 0 {
						checkCache(t, c, budget)
					}
				}
				checkCache(t, c, budget)
				if hits == 0 {
					t.Fatal("no hit")
				}
				t.Logf("hits %d, %+v", hits, c.Stats())
			})
		}
	}
}

// Two keys with one hash are both cached, told apart by their keys, and
// a commit of one leaves the other alone.
func TestCacheCollision(t *testing.T) {
	c := NewCache(1 << 20)
	c.weakHash = true
	sc := c.forShard()
	a := []byte("\x01a")
	var b []byte // a key with a's hash
	for i := 0; b == nil; i++ {
		if k := fmt.Appendf(nil, "\x01b%d", i); sc.hash(k) == sc.hash(a) {
			b = k
		}
	}
	sc.fill(a, []byte("A"), true)
	if v, _, hit := sc.lookup(a); !hit || string(v) != "A" {
		t.Fatalf("a: %q %v", v, hit)
	}
	sc.fill(b, []byte("B"), true)
	if v, _, hit := sc.lookup(a); !hit || string(v) != "A" {
		t.Fatalf("a after b: %q %v", v, hit)
	}
	h := sc.hash(a)
	g := sc.segment(h)
	sc.put(g, h, a, []byte("A2 longer"), true, true) // commit of a, appended anew
	if v, _, hit := sc.lookup(b); !hit || string(v) != "B" {
		t.Fatalf("b: %q %v", v, hit)
	}
	if v, _, hit := sc.lookup(a); !hit || string(v) != "A2 longer" {
		t.Fatalf("a: %q %v", v, hit)
	}
	g.mu.Lock()
	g.dropOwner(sc, true)
	g.mu.Unlock()
	// Another owner, same key: distinct.
	sc2 := c.forShard()
	if _, _, hit := sc2.lookup(b); hit {
		t.Fatal("another shard's entry answered")
	}
	checkCache(t, c, 1<<20)
}

// Eviction keeps a budget and gives entries read since written a second
// chance: a hot key survives a flood of cold ones.
func TestCacheEvictionSecondChance(t *testing.T) {
	const budget = 64 << 10
	c := NewCache(budget)
	sc := c.forShard()
	hot := []byte("\x01hot")
	sc.fill(hot, []byte("v"), true)
	for i := range 100000 {
		sc.fill(fmt.Appendf(nil, "\x01cold%d", i), []byte("xxxxxxxxxxxxxxxx"), true)
		if _, _, hit := sc.lookup(hot); !hit {
			t.Fatalf("hot key evicted after %d cold ones", i)
		}
	}
	checkCache(t, c, budget)
	if _, _, hit := sc.lookup([]byte("\x01cold0")); hit {
		t.Fatal("the first cold key is still cached")
	}
	st := c.Stats()
	if st.Entries < 500 {
		t.Fatalf("only %d entries in %d bytes", st.Entries, budget)
	}
	t.Logf("%+v", st)
}

// An update that grows a value appends a new entry and kills the old one;
// one that fits is written in place; a delete caches "absent".
func TestCacheUpdateInPlaceAndGrow(t *testing.T) {
	c := NewCache(1 << 20)
	sc := c.forShard()
	k := []byte("\x01k")
	sc.fill(k, []byte("12345678"), true)
	g := sc.segment(sc.hash(k))
	tail := g.tail
	sc.put(g, sc.hash(k), k, []byte("abc"), true, true)
	if g.tail != tail {
		t.Fatal("a smaller value was appended, not written in place")
	}
	if v, ok, hit := sc.lookup(k); !hit || !ok || string(v) != "abc" {
		t.Fatalf("%q %v %v", v, ok, hit)
	}
	sc.put(g, sc.hash(k), k, bytes.Repeat([]byte("z"), 100), true, true)
	if g.tail == tail {
		t.Fatal("a larger value was not appended")
	}
	if v, ok, hit := sc.lookup(k); !hit || !ok || len(v) != 100 {
		t.Fatalf("%q %v %v", v, ok, hit)
	}
	sc.put(g, sc.hash(k), k, nil, false, true)
	if v, ok, hit := sc.lookup(k); !hit || ok || v != nil {
		t.Fatalf("deleted: %q %v %v", v, ok, hit)
	}
	if st := c.Stats(); st.Entries != 1 {
		t.Fatalf("%d entries, want 1", st.Entries)
	}
	checkCache(t, c, 1<<20)
}

// Shards of several tasks use one cache at once (tasks run in parallel, and
// pipelines share the cache): each goroutine checks its own committed
// values while the others evict and clear theirs.
func TestCacheConcurrentShards(t *testing.T) {
	const budget = 64 << 10
	c := NewCache(budget)
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for w := range 4 {
		wg.Go(func() {
			rnd := rand.New(rand.NewPCG(uint64(w), 7))
			sc := c.forShard()
			m := map[string][]byte{}
			for op := range 20000 {
				k := fmt.Appendf(nil, "\x01k%d", rnd.IntN(200))
				switch r := rnd.IntN(100); {
				case r < 60:
					v, ok, hit := sc.lookup(k)
					want, present := m[string(k)]
					if hit && (ok != present || !bytes.Equal(v, want)) {
						errs <- fmt.Errorf("worker %d op %d: cached %q %v, committed %q %v", w, op, v, ok, want, present)
						return
					}
					if !hit {
						sc.fill(k, bytes.Clone(want), present)
					}
				case r < 99:
					v := fmt.Appendf(nil, "%d-%d", w, op)
					m[string(k)] = v
					h := sc.hash(k)
					g := sc.segment(h)
					g.mu.Lock()
					sc.put(g, h, k, v, true, true)
					g.mu.Unlock()
				default:
					sc.clear()
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	checkCache(t, c, budget)
}

// A shard whose reads almost never hit (each key new: a state far larger
// than the cache) stops filling the cache on a miss, but for a sample of
// keys; once keys come back, the sample's hits end that, and every hot key
// is cached again.
func TestCacheSparseAdmission(t *testing.T) {
	const budget = 4 << 20
	c := NewCache(budget)
	sc := c.forShard()
	read := func(key []byte) bool {
		if _, _, hit := sc.lookup(key); hit {
			return true
		}
		sc.fill(key, []byte("0123456789abcdef"), true)
		return false
	}
	for i := range cacheWindow {
		read(fmt.Appendf(nil, "\x01cold%d", i))
	}
	if !sc.sparse.Load() {
		t.Fatal("not sparse after a window of reads that all missed")
	}
	before := sc.inserted.Load()
	const cold = 3 * cacheWindow
	for i := range cold {
		read(fmt.Appendf(nil, "\x01colder%d", i))
	}
	if n := sc.inserted.Load() - before; n > cold/cacheSparseAdmit*3/2 || n == 0 {
		t.Fatalf("sparse: %d of %d missed keys inserted, want about 1 in %d", n, cold, cacheSparseAdmit)
	}
	checkCache(t, c, budget)

	// 512 hot keys, read over and over.
	hits := 0
	for round := range 6 * cacheWindow / 512 {
		hits = 0
		for k := range 512 {
			if read(fmt.Appendf(nil, "\x01hot%d", k)) {
				hits++
			}
		}
		if round > 4*cacheWindow/512 && hits < 512 {
			t.Fatalf("round %d: %d of 512 hot keys hit (sparse %v)", round, hits, sc.sparse.Load())
		}
	}
	if sc.sparse.Load() {
		t.Fatal("still sparse while hot keys hit")
	}
	checkCache(t, c, budget)
}

// The segments' memory is mapped outside the Go heap on Unix, and unmapped
// once the Cache is unreachable.
func TestCacheMemoryOutsideHeapFreed(t *testing.T) {
	c := NewCache(4 << 20)
	sc := c.forShard()
	for i := range 10_000 {
		k := []byte(fmt.Sprint("key-", i))
		sc.fill(k, k, true)
	}
	if v, ok, hit := sc.lookup([]byte("key-9999")); !hit || !ok || string(v) != "key-9999" {
		t.Fatalf("lookup: %q %v %v", v, ok, hit)
	}
	m := c.mem
	m.mu.Lock()
	n := len(m.regions)
	m.mu.Unlock()
	if osMapped && n == 0 {
		t.Fatal("no segment memory was mapped")
	}
	c, sc = nil, nil //nolint:ineffassign // drop the last references
	for range 100 {
		runtime.GC()
		m.mu.Lock()
		n = len(m.regions)
		m.mu.Unlock()
		if n == 0 {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("%d mapped regions still held after the Cache became unreachable", n)
}

// Once a segment is full, a missed key is admitted only on a miss that
// follows a recent refusal of it (the doorkeeper): keys read once do not
// replace the cached ones, a key read again soon comes in, and a key whose
// refusal is older than two generations of refusals is refused again.
func TestCacheDoorkeeper(t *testing.T) {
	const budget = 64 << 10 // one segment
	c := NewCache(budget)
	g := &c.segs[0]
	sc := c.forShard()
	val := []byte("0123456789abcdef")
	cached := func(key []byte) bool {
		_, _, hit := sc.lookupAppend(sc.hash(key), key, nil, true) // fresh: no second chance
		return hit
	}
	// Until the ring is full every miss is filled.
	i := 0
	for ; !g.full; i++ {
		key := fmt.Appendf(nil, "\x01warm%d", i)
		sc.fill(key, val, true)
		if !g.full && !cached(key) {
			t.Fatalf("key %d not filled before the ring is full", i)
		}
	}
	t.Logf("full after %d keys, %d entries", i, g.n)

	// A new key: refused on its first miss, admitted on its second.
	k := []byte("\x01again")
	sc.fill(k, val, true)
	if cached(k) {
		t.Fatal("a key's first miss filled it in a full cache")
	}
	sc.fill(k, val, true)
	if !cached(k) {
		t.Fatal("a key's second miss did not fill it")
	}

	// Keys read once: few come in (the bit set's false positives only).
	before := sc.inserted.Load()
	const once = 5000
	for j := range once {
		sc.fill(fmt.Appendf(nil, "\x01once%d", j), val, true)
	}
	if n := sc.inserted.Load() - before; n > once/4 {
		t.Fatalf("%d of %d keys read once were filled", n, once)
	}

	// Keys refused long ago are forgotten: after more refusals than two
	// generations hold, their second miss is refused too (but for false
	// positives), while keys refused just before are admitted.
	const probe = 200
	for j := range probe {
		sc.fill(fmt.Appendf(nil, "\x01old%d", j), val, true)
	}
	for j := range 4*g.n + 4*doorMinWindow {
		sc.fill(fmt.Appendf(nil, "\x01between%d", j), val, true)
	}
	for j := range probe {
		sc.fill(fmt.Appendf(nil, "\x01new%d", j), val, true)
	}
	oldIn, newIn := 0, 0
	for j := range probe {
		long, recent := fmt.Appendf(nil, "\x01old%d", j), fmt.Appendf(nil, "\x01new%d", j)
		sc.fill(long, val, true)
		sc.fill(recent, val, true)
		if cached(long) {
			oldIn++
		}
		if cached(recent) {
			newIn++
		}
	}
	if oldIn > probe/2 || newIn < probe*3/4 {
		t.Fatalf("second misses admitted: %d of %d keys refused long ago, %d of %d refused just before", oldIn, probe, newIn, probe)
	}
	checkCache(t, c, budget)

	// Dropping a shard's entries makes room: misses are filled again.
	sc.clear()
	if g.full {
		t.Fatal("still full after the shard's entries were dropped")
	}
	k = []byte("\x01after-clear")
	sc.fill(k, val, true)
	if !cached(k) {
		t.Fatal("a miss after the clear was not filled")
	}
	checkCache(t, c, budget)
}

// BenchmarkCacheReads is the cache's share of a read-modify-write of a
// 200-byte value per record (the big workload) over keys drawn from keys,
// uniformly or by a Zipf law (s=1.05: a few hot keys, a long tail read
// about once): a lookup, a fill on a miss, the update at the commit, with
// the 64 MiB default. Uniform at 3M keys the cache holds ~6 % of them (at
// 10M, ~2 %): every policy hits about that share of the reads, and what
// differs is the work spent on the rest. Zipf: the admission decides the
// hit ratio too, as the tail's keys would evict the hot ones.
func BenchmarkCacheReads(b *testing.B) {
	for _, dist := range []string{"uniform", "zipf"} {
		for _, keys := range []int{100_000, 3_000_000, 10_000_000} {
			b.Run(fmt.Sprintf("%s/keys=%d", dist, keys), func(b *testing.B) {
				c := NewCache(64 << 20)
				sc := c.forShard()
				rng := rand.New(rand.NewPCG(1, 2))
				next := func() uint64 { return uint64(rng.IntN(keys)) }
				if dist == "zipf" {
					next = rand.NewZipf(rng, 1.05, 1, uint64(keys-1)).Uint64
				}
				val := make([]byte, 200)
				key := make([]byte, 0, 16)
				for b.Loop() {
					key = strconv.AppendUint(append(key[:0], "\x01key-"...), next(), 10)
					if _, _, hit := sc.lookup(key); !hit {
						sc.fill(key, nil, false)
					}
					h := sc.hash(key)
					g := sc.segment(h)
					g.mu.Lock()
					sc.put(g, h, key, val, true, true)
					g.mu.Unlock()
				}
				st := c.Stats()
				b.ReportMetric(float64(st.Hits)/float64(st.Hits+st.Misses), "hit-ratio")
			})
		}
	}
}

// TestCacheIndexGrows: a segment's index starts at cacheIndexMin slots and
// doubles as entries come, keeping at most half of the slots in use, so a
// cache holding few keys probes a small table; every entry stays findable
// across the growths, also when hashes collide, and after a shard's clear
// the grown table serves new entries.
func TestCacheIndexGrows(t *testing.T) {
	for _, weak := range []bool{false, true} {
		t.Run(fmt.Sprintf("weakHash=%v", weak), func(t *testing.T) {
			c := NewCache(1 << 20)
			c.weakHash = weak
			sc := c.forShard()
			for i := range c.segs {
				if got := c.segs[i].mask + 1; got != cacheIndexMin {
					t.Fatalf("segment %d starts with %d slots, want %d", i, got, cacheIndexMin)
				}
			}
			val := []byte("01234567")
			const n = 3000
			key := func(i int) []byte { return fmt.Appendf(nil, "\x01key%d", i) }
			for i := range n {
				sc.fill(key(i), val, true)
			}
			for i := range c.segs {
				g := &c.segs[i]
				if g.full {
					t.Fatalf("segment %d dropped entries: the test needs room for all %d keys", i, n)
				}
				size := int(g.mask + 1)
				if g.n*2 > size || size > cacheIndexMin && g.n*2*2 <= size || size > int(g.slotsCap) {
					t.Fatalf("segment %d: %d entries in %d slots (at most %d): not the smallest table holding them at half", i, g.n, size, g.slotsCap)
				}
			}
			for i := range n {
				if v, present, hit := sc.lookupAppend(sc.hash(key(i)), key(i), nil, true); !hit || !present || string(v) != string(val) {
					t.Fatalf("key %d after the index grew: hit=%v present=%v value %q", i, hit, present, v)
				}
			}
			sizes := make([]uint32, len(c.segs))
			for i := range c.segs {
				sizes[i] = c.segs[i].mask
			}
			sc.clear()
			for i := range n {
				if _, _, hit := sc.lookupAppend(sc.hash(key(i)), key(i), nil, true); hit {
					t.Fatalf("key %d cached after the shard's clear", i)
				}
			}
			for i := range n / 2 {
				sc.fill(key(n+i), val, true)
			}
			for i := range n / 2 {
				if _, _, hit := sc.lookupAppend(sc.hash(key(n+i)), key(n+i), nil, true); !hit {
					t.Fatalf("new key %d not cached after the clear", i)
				}
			}
			for i := range c.segs {
				if c.segs[i].mask != sizes[i] {
					t.Fatalf("segment %d's index changed size from %d to %d slots after the clear", i, sizes[i]+1, c.segs[i].mask+1)
				}
			}
		})
	}
}

// TestGroupBit checks the bits by which a commit skips the group lookups of
// variables whose groups were never cached: one per state variable (IDs
// 63 apart share one), another for timers, none zero.
func TestGroupBit(t *testing.T) {
	state := func(id uint32, gk string) []byte { return keys.StateKeyPrefix(id, []byte(gk)) }
	timer := keys.TimerByKeyPrefix([]byte("k"))
	if groupBit(timer) != 1 {
		t.Errorf("timers' bit = %#x, want 1", groupBit(timer))
	}
	seen := map[uint64]uint32{}
	for id := uint32(0); id < 63; id++ {
		b := groupBit(state(id, "k"))
		if b == 0 || b == 1 || b&(b-1) != 0 {
			t.Fatalf("variable %d: bit %#x, want one bit other than the timers'", id, b)
		}
		if other, ok := seen[b]; ok {
			t.Fatalf("variables %d and %d share bit %#x", other, id, b)
		}
		seen[b] = id
		if groupBit(state(id, "another key")) != b || groupBit(state(id+63, "k")) != b {
			t.Fatalf("variable %d: the bit depends on more than the ID modulo 63", id)
		}
	}
}

package shard_test

import (
	"errors"
	"fmt"
	"path/filepath"
	"sync/atomic"
	"testing"

	"github.com/kstate/kstate/internal/kv"
	"github.com/kstate/kstate/internal/shard"
	"github.com/kstate/kstate/state"
)

// The model test with the committed-state cache on: one cache shared by
// every shard of the run (a restart closes the old shard, which must drop
// its entries), tiny (constant eviction) and large (everything cached).
func TestModelMemoryCached(t *testing.T) {
	batches := 1500
	if testing.Short() {
		batches = 300
	}
	for _, size := range []int64{2 << 10, 64 << 20} {
		for _, seed := range []uint64{1, 2, 3} {
			t.Run(fmt.Sprintf("cache%d/seed%d", size, seed), func(t *testing.T) {
				cache := shard.NewCache(size)
				var store kv.Store
				fresh := func(wb int64) (*shard.Shard, error) {
					store = kv.NewMemory()
					return shard.OpenShard(shard.ShardOptions{Backend: noClose{store}, AllowTTL: true, Cache: cache, WriteBehindBytes: wb})
				}
				reopen := func(wb int64) (*shard.Shard, error) {
					return shard.OpenShard(shard.ShardOptions{Backend: noClose{store}, AllowTTL: true, Cache: cache, WriteBehindBytes: wb})
				}
				runModel(t, seed, batches, fresh, reopen, func() {})
				st := cache.Stats()
				t.Logf("cache: %+v", st)
				if st.Hits == 0 {
					t.Fatal("the cache never answered a read")
				}
				if st.Bytes > size {
					t.Fatalf("cache holds %d bytes, over its bound %d", st.Bytes, size)
				}
			})
		}
	}
}

func TestModelRocksDBCached(t *testing.T) {
	if testing.Short() {
		t.Skip("RocksDB model run skipped in -short mode")
	}
	root := t.TempDir()
	cache := shard.NewCache(1 << 20)
	n := 0
	var dir string
	fresh := func(wb int64) (*shard.Shard, error) {
		n++
		dir = filepath.Join(root, fmt.Sprint("shard", n))
		return shard.OpenShard(shard.ShardOptions{Dir: dir, AllowTTL: true, Cache: cache, WriteBehindBytes: wb})
	}
	reopen := func(wb int64) (*shard.Shard, error) {
		return shard.OpenShard(shard.ShardOptions{Dir: dir, AllowTTL: true, Cache: cache, WriteBehindBytes: wb})
	}
	runModel(t, 7, 400, fresh, reopen, func() {})
	if cache.Stats().Hits == 0 {
		t.Fatal("the cache never answered a read")
	}
}

// countingStore counts point reads and can fail writes.
type countingStore struct {
	kv.Store
	gets      atomic.Int64
	failWrite atomic.Bool
}

var errWrite = errors.New("injected write failure")

func (s *countingStore) Get(k []byte) ([]byte, bool, error) {
	s.gets.Add(1)
	return s.Store.Get(k)
}

func (s *countingStore) Write(b *kv.Batch, o kv.WriteOptions) error {
	if s.failWrite.Load() {
		return errWrite
	}
	return s.Store.Write(b, o)
}

func openCached(t *testing.T, cache *shard.Cache) (*shard.Shard, *countingStore, state.ValueState[int64]) {
	t.Helper()
	st := &countingStore{Store: kv.NewMemory()}
	s, err := shard.OpenShard(shard.ShardOptions{Backend: st, Cache: cache})
	noErr(t, err)
	t.Cleanup(func() { s.Close() })
	var v state.ValueState[int64]
	declare(t, s, func() { v = must[state.ValueState[int64]](t)(shard.NewValueState(s, "count", state.Int64())) })
	return s, st, v
}

func getValue(t *testing.T, s *shard.Shard, v state.ValueState[int64], key string) (int64, bool) {
	t.Helper()
	s.SetCurrentKey([]byte(key))
	x, ok, err := v.Get()
	noErr(t, err)
	return x, ok
}

// A committed batch updates the cached values (read again without a store
// read); an aborted one, and one whose store write failed, never reach the
// cache: the next batch reads the committed value, from the cache.
func TestCacheCommitAbortAndFailedWrite(t *testing.T) {
	cache := shard.NewCache(1 << 20)
	s, st, v := openCached(t, cache)
	var l log

	commit(t, s, &l, 1, func() {
		if _, ok := getValue(t, s, v, "k"); ok {
			t.Fatal("new key has a value")
		}
		noErr(t, v.Update(1))
	})
	gets := st.gets.Load()
	commit(t, s, &l, 2, func() {
		if x, ok := getValue(t, s, v, "k"); !ok || x != 1 {
			t.Fatalf("after commit: %d %v, want 1", x, ok)
		}
		noErr(t, v.Update(2))
	})
	if n := st.gets.Load() - gets; n != 0 {
		t.Fatalf("a read of a committed, cached key went to the store %d times", n)
	}

	// Aborted batch: staged 100, read back inside the batch, then dropped.
	s.Begin(3)
	s.SetCurrentKey([]byte("k"))
	noErr(t, v.Update(100))
	if x, _ := getValue(t, s, v, "k"); x != 100 {
		t.Fatalf("read-your-writes inside the batch: %d", x)
	}
	_, err := s.Finish()
	noErr(t, err)
	s.Abort()

	// Failed store write at Commit: the batch stays open, the engine aborts it.
	s.Begin(4)
	s.SetCurrentKey([]byte("k"))
	noErr(t, v.Update(200))
	s.SetCurrentKey([]byte("new"))
	noErr(t, v.Update(7))
	_, err = s.Finish()
	noErr(t, err)
	st.failWrite.Store(true)
	if err := s.Commit(l.next() + 2); !errors.Is(err, errWrite) {
		t.Fatalf("Commit with a failing store: %v", err)
	}
	s.Abort()
	st.failWrite.Store(false)

	gets = st.gets.Load()
	commit(t, s, &l, 5, func() {
		if x, ok := getValue(t, s, v, "k"); !ok || x != 2 {
			t.Fatalf("after abort and failed commit: %d %v, want the committed 2", x, ok)
		}
	})
	if n := st.gets.Load() - gets; n != 0 {
		t.Fatalf("the committed value was not served from the cache (%d store reads)", n)
	}
	commit(t, s, &l, 6, func() {
		if x, ok := getValue(t, s, v, "new"); ok {
			t.Fatalf("a key of the failed batch is visible: %d", x)
		}
		// Clear: the committed tombstone reaches the cache as "absent".
		s.SetCurrentKey([]byte("k"))
		noErr(t, v.Clear())
	})
	gets = st.gets.Load()
	commit(t, s, &l, 7, func() {
		if x, ok := getValue(t, s, v, "k"); ok {
			t.Fatalf("cleared key still has %d", x)
		}
	})
	if n := st.gets.Load() - gets; n != 0 {
		t.Fatalf("a cleared, cached key went to the store %d times", n)
	}
}

// A shard whose reads stopped hitting bypasses the cache for the keys
// outside its sample, and a cached key outside the sample that is written
// meanwhile is read correctly once the reads hit again: entering the
// bypass dropped its entry, which the bypassed commits did not update.
func TestCacheSparseBypassKeepsCommittedValues(t *testing.T) {
	cache := shard.NewCache(1 << 20)
	s, st, v := openCached(t, cache)
	var l log
	const keys = 64
	key := func(i int) string { return fmt.Sprint("k", i) }
	setAll := func(now, x int64) {
		commit(t, s, &l, now, func() {
			for i := range keys {
				getValue(t, s, v, key(i)) // cached (the cache has room)
				s.SetCurrentKey([]byte(key(i)))
				noErr(t, v.Update(x))
			}
		})
	}
	setAll(1, 1)

	// A window of reads of keys never seen: the shard turns sparse, and
	// its commit applies the bypass.
	commit(t, s, &l, 2, func() {
		for i := range shard.CacheWindowForTest {
			getValue(t, s, v, fmt.Sprint("cold", i))
		}
	})
	if sparse, bypass := shard.CacheModeForTest(s); !sparse || !bypass {
		t.Fatalf("after a window of misses: sparse %v, bypass %v", sparse, bypass)
	}
	setAll(3, 2)
	gets := st.gets.Load()
	commit(t, s, &l, 4, func() {
		for i := range keys {
			getValue(t, s, v, key(i))
		}
	})
	if n := st.gets.Load() - gets; n < keys/2 {
		t.Fatalf("bypassed: %d of %d reads went to the store, want most", n, keys)
	}

	// Hot keys come back: the sample's hits end the sparse mode, and the
	// commit ends the bypass.
	for now := int64(5); ; now++ {
		commit(t, s, &l, now, func() {
			for range 16 {
				for i := range 1024 {
					getValue(t, s, v, fmt.Sprint("hot", i))
				}
			}
		})
		if _, bypass := shard.CacheModeForTest(s); !bypass {
			break
		}
		if now > 20 {
			t.Fatal("still bypassing the cache while hot keys hit")
		}
	}
	for now := range int64(2) { // cached again: the doorkeeper admits a second miss
		commit(t, s, &l, 30+now, func() {
			for i := range keys {
				getValue(t, s, v, key(i))
			}
		})
	}
	gets = st.gets.Load()
	commit(t, s, &l, 32, func() {
		for i := range keys {
			if x, ok := getValue(t, s, v, key(i)); !ok || x != 2 {
				t.Fatalf("%s after the bypass: %d %v, want the committed 2", key(i), x, ok)
			}
		}
	})
	if n := st.gets.Load() - gets; n != 0 {
		t.Fatalf("%d reads went to the store once the bypass ended, want 0", n)
	}
}

// A restore (ApplyChangelog, Wipe) writes the store under the cache: the
// shard's entries are dropped, and Close drops them from the shared cache.
func TestCacheRestoreAndClose(t *testing.T) {
	cache := shard.NewCache(1 << 20)
	var l log
	src, _, v := openCached(t, cache)
	commit(t, src, &l, 1, func() { getValue(t, src, v, "k"); noErr(t, v.Update(5)) })
	commit(t, src, &l, 2, func() { getValue(t, src, v, "k") })
	if cache.Stats().Entries == 0 {
		t.Fatal("nothing cached")
	}
	noErr(t, src.Close())
	if n := cache.Stats().Entries; n != 0 {
		t.Fatalf("Close left %d entries in the shared cache", n)
	}

	// A shard that read "k" as absent, then restored the changelog.
	st := &countingStore{Store: kv.NewMemory()}
	s, err := shard.OpenShard(shard.ShardOptions{Backend: st, Cache: cache})
	noErr(t, err)
	defer s.Close()
	if _, ok, err := s.GetMeta("x"); err != nil || ok {
		t.Fatalf("GetMeta: %v %v", ok, err)
	}
	noErr(t, s.ApplyChangelog(l.recs, l.next()))
	var v2 state.ValueState[int64]
	declare(t, s, func() { v2 = must[state.ValueState[int64]](t)(shard.NewValueState(s, "count", state.Int64())) })
	commit(t, s, &l, 3, func() {
		if x, ok := getValue(t, s, v2, "k"); !ok || x != 5 {
			t.Fatalf("after restore: %d %v, want 5", x, ok)
		}
	})
}

package shard_test

import (
	"slices"
	"testing"
	"time"

	"github.com/kstate/kstate/changelog"
	"github.com/kstate/kstate/internal/kv"
	"github.com/kstate/kstate/internal/shard"
	"github.com/kstate/kstate/state"
)

// stateRecs counts a batch's changelog records of state entries (kind
// 0x01), put and deleted, leaving out metadata, timers and TTL indexes.
func stateRecs(recs []changelog.Record) (puts, dels int) {
	for _, r := range recs {
		if len(r.Key) == 0 || r.Key[0] != byte(changelog.KindState) {
			continue
		}
		if r.Tombstone() {
			dels++
		} else {
			puts++
		}
	}
	return puts, dels
}

// items is a list's Get, collected.
func items[T any](t *testing.T, l state.ListState[T]) []T {
	t.Helper()
	seq, err := l.Get()
	return collect(t, seq, err)
}

// restored is a fresh shard that applied the whole changelog l.
func restored(t *testing.T, l *log, allowTTL bool, decl func(s *shard.Shard)) *shard.Shard {
	t.Helper()
	s := openMem(t, allowTTL)
	noErr(t, s.ApplyChangelog(l.recs, l.next()))
	declare(t, s, func() { decl(s) })
	return s
}

// TestListPutSlidingWindow: the read-modify-Put of a window of the last
// five values (bench's heavy processor) stages one delete and one put per
// moved element instead of rewriting all five, and the list reads back the
// same, in the live shard, after a restore from the changelog and on every
// store. Before: 5 puts per Put.
func TestListPutSlidingWindow(t *testing.T) {
	for _, backend := range []kv.Backend{"memory", kv.BackendPebble, kv.BackendRocksDB} {
		t.Run(string(backend), func(t *testing.T) {
			if backend == kv.BackendRocksDB && !kv.RocksDBAvailable {
				t.Skip("RocksDB is not compiled in")
			}
			var s *shard.Shard
			if backend == "memory" {
				s = openMem(t, false)
			} else {
				var err error
				s, err = shard.OpenShard(shard.ShardOptions{Dir: t.TempDir(), StoreBackend: backend, WriteBehindBytes: shard.DefaultWriteBehindBytes})
				noErr(t, err)
				t.Cleanup(func() { s.Close() })
			}
			var lst state.ListState[int64]
			decl := func(s *shard.Shard) {
				lst = must[state.ListState[int64]](t)(shard.NewListState(s, "recent", state.Int64()))
			}
			declare(t, s, func() { decl(s) })
			var cl log
			var want []int64
			for i := range int64(12) {
				recs := commit(t, s, &cl, 1000+i, func() {
					s.SetCurrentKey([]byte("k"))
					cur := items(t, lst)
					if !slices.Equal(cur, want) {
						t.Fatalf("batch %d: Get = %v, want %v", i, cur, want)
					}
					next := append(slices.Clone(cur), 100+i)
					if len(next) > 5 {
						next = next[len(next)-5:]
						noErr(t, lst.Put(next))
					} else {
						noErr(t, lst.AppendValue(100+i))
					}
					want = next
				})
				puts, dels := stateRecs(recs)
				if i >= 5 && (puts != 1 || dels != 1) {
					t.Fatalf("batch %d: %d puts and %d deletes of state entries, want 1 and 1 (a window moved by one)", i, puts, dels)
				}
			}
			s.Begin(2000)
			s.SetCurrentKey([]byte("k"))
			if got := items(t, lst); !slices.Equal(got, want) {
				t.Fatalf("after the batches: Get = %v, want %v", got, want)
			}
			s.Abort()

			r := restored(t, &cl, false, decl)
			r.Begin(2000)
			r.SetCurrentKey([]byte("k"))
			if got := items(t, lst); !slices.Equal(got, want) {
				t.Fatalf("restored: Get = %v, want %v", got, want)
			}
			noErr(t, lst.AppendValue(7)) // appends after the moved tail
			if got := items(t, lst); !slices.Equal(got, append(slices.Clone(want), 7)) {
				t.Fatalf("restored, appended: Get = %v, want %v + 7", got, want)
			}
			r.Abort()
		})
	}
}

// TestListPutKeepsRewriteWhenCheaper: Puts that keep no run (or whose
// rewrite is no dearer) rewrite the list in place as before, a Put with
// no Get before it still reads the list, and a Put after an append in
// the same batch does not reuse the Get's view from before the append.
func TestListPutKeepsRewriteWhenCheaper(t *testing.T) {
	s := openMem(t, false)
	var lst state.ListState[string]
	decl := func(s *shard.Shard) {
		lst = must[state.ListState[string]](t)(shard.NewListState(s, "l", state.String()))
	}
	declare(t, s, func() { decl(s) })
	var cl log
	key := []byte("k")
	commit(t, s, &cl, 1, func() {
		s.SetCurrentKey(key)
		noErr(t, lst.Put([]string{"a", "b", "c"}))
	})
	recs := commit(t, s, &cl, 2, func() {
		s.SetCurrentKey(key)
		items(t, lst)
		noErr(t, lst.Put([]string{"x", "y", "z"})) // nothing kept: 3 overwrites
	})
	if puts, dels := stateRecs(recs); puts != 3 || dels != 0 {
		t.Fatalf("unrelated Put: %d puts, %d deletes; want 3, 0", puts, dels)
	}
	recs = commit(t, s, &cl, 3, func() {
		s.SetCurrentKey(key)
		items(t, lst)
		noErr(t, lst.AppendValue("w")) // x y z w
		// Without the append the memo would say x y z: a shift by one
		// would then lose w. Put must see x y z w.
		noErr(t, lst.Put([]string{"z", "w", "v"}))
		if got := items(t, lst); !slices.Equal(got, []string{"z", "w", "v"}) {
			t.Fatalf("Put after an append: Get = %q, want [z w v]", got)
		}
	})
	commit(t, s, &cl, 4, func() {
		s.SetCurrentKey(key)
		noErr(t, lst.Put([]string{"w", "v", "u"})) // no Get in this batch
	})
	want := []string{"w", "v", "u"}
	for i := range 2 {
		sh := s
		if i == 1 {
			sh = restored(t, &cl, false, decl)
		}
		sh.Begin(10)
		sh.SetCurrentKey(key)
		if got := items(t, lst); !slices.Equal(got, want) {
			t.Fatalf("Get = %q, want %q", got, want)
		}
		sh.Abort()
	}
	// z w v over x y z w: the shift (x, y deleted; v appended after w)
	// is 3 writes against the rewrite's 4; w's append stays staged.
	if puts, dels := stateRecs(recs); puts != 2 || dels != 2 {
		t.Fatalf("shift after an append: %d puts, %d deletes; want 2, 2", puts, dels)
	}
}

// TestListPutTTLRewrites: under a TTL every element of a Put gets the
// fresh expiry, so no run is kept: the window is rewritten (and its TTL
// index moved) as before.
func TestListPutTTLRewrites(t *testing.T) {
	s := openMem(t, true)
	var lst state.ListState[int64]
	declare(t, s, func() {
		lst = must[state.ListState[int64]](t)(shard.NewListState(s, "l", state.Int64(), state.WithTTL(time.Hour)))
	})
	commit(t, s, nil, 1000, func() {
		s.SetCurrentKey([]byte("k"))
		noErr(t, lst.Put([]int64{1, 2, 3}))
	})
	recs := commit(t, s, nil, 2000, func() {
		s.SetCurrentKey([]byte("k"))
		items(t, lst)
		noErr(t, lst.Put([]int64{2, 3, 4}))
	})
	if puts, dels := stateRecs(recs); puts != 3 || dels != 0 {
		t.Fatalf("Put under a TTL: %d puts, %d deletes of state entries; want 3, 0 (every element's expiry is new)", puts, dels)
	}
}

// TestMapUpdateUnchangedNotWritten: an UpdateValue that writes back the
// value a GetValue of the same batch read stages nothing (no changelog
// record); any other value, an entry not read, a read before a RemoveKey
// and, under a TTL, a value with an older expiry are written as before.
// The map reads back the same live and after a restore.
func TestMapUpdateUnchangedNotWritten(t *testing.T) {
	s := openMem(t, true)
	var m state.MapState[string, int64]
	var mt state.MapState[string, int64]
	decl := func(s *shard.Shard) {
		m = must[state.MapState[string, int64]](t)(shard.NewMapState(s, "agg", state.String(), state.Int64()))
		mt = must[state.MapState[string, int64]](t)(shard.NewMapState(s, "ttl", state.String(), state.Int64(), state.WithTTL(time.Hour)))
	}
	declare(t, s, func() { decl(s) })
	var cl log
	key := []byte("k")
	commit(t, s, &cl, 1000, func() {
		s.SetCurrentKey(key)
		for _, f := range []string{"count", "min", "max"} {
			noErr(t, m.UpdateValue(f, 5))
			noErr(t, mt.UpdateValue(f, 5))
		}
	})
	recs := commit(t, s, &cl, 2000, func() {
		s.SetCurrentKey(key)
		for _, f := range []string{"count", "min", "max"} {
			if _, ok, err := m.GetValue(f); err != nil || !ok {
				t.Fatalf("GetValue(%s) = %v, %v", f, ok, err)
			}
			if _, ok, err := mt.GetValue(f); err != nil || !ok {
				t.Fatalf("ttl GetValue(%s) = %v, %v", f, ok, err)
			}
		}
		noErr(t, m.UpdateValue("count", 6)) // changed: written
		noErr(t, m.UpdateValue("min", 5))   // unchanged: not written
		noErr(t, m.RemoveKey("max"))        // removed: the read is stale
		noErr(t, m.UpdateValue("max", 5))   // so written again
		noErr(t, m.UpdateValue("sum", 5))   // never read: written
		noErr(t, mt.UpdateValue("min", 5))  // unchanged value, older expiry: written (fresh TTL)
	})
	var got []string
	for _, r := range recs {
		if len(r.Key) > 0 && r.Key[0] == byte(changelog.KindState) {
			k, err := changelog.DecodeKey(r.Key)
			noErr(t, err)
			got = append(got, string(k.Suffix)+map[bool]string{true: "-", false: "+"}[r.Tombstone()])
		}
	}
	slices.Sort(got)
	// agg: count, max (removed then written back: one record, the put), sum;
	// ttl: min.
	if want := []string{"count+", "max+", "min+", "sum+"}; !slices.Equal(got, want) {
		t.Fatalf("state records %q, want %q", got, want)
	}
	want := map[string]int64{"count": 6, "min": 5, "max": 5, "sum": 5}
	for i := range 2 {
		sh := s
		if i == 1 {
			sh = restored(t, &cl, true, decl)
		}
		sh.Begin(3000)
		sh.SetCurrentKey(key)
		for f, w := range want {
			if v, ok, err := m.GetValue(f); err != nil || !ok || v != w {
				t.Fatalf("GetValue(%s) = %d, %v, %v; want %d", f, v, ok, err, w)
			}
		}
		sh.Abort()
	}
}

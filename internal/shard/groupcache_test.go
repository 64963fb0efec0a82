package shard_test

import (
	"fmt"
	"slices"
	"sync/atomic"
	"testing"

	"github.com/kstate/kstate/changelog"
	"github.com/kstate/kstate/internal/kv"
	"github.com/kstate/kstate/internal/shard"
	"github.com/kstate/kstate/internal/timers"
	"github.com/kstate/kstate/state"
)

// iterStore counts the store iterators over state and a key's timers, and
// the point reads, a shard asks for.
type iterStore struct {
	kv.Store
	iters, gets atomic.Int64
}

func (s *iterStore) NewIter(lower, upper []byte) kv.Iterator {
	if len(lower) > 0 && (lower[0] == byte(changelog.KindState) || lower[0] == byte(changelog.KindTimerKey)) {
		s.iters.Add(1) // not the timer or TTL cleanup's scans, which every batch runs
	}
	return s.Store.NewIter(lower, upper)
}

func (s *iterStore) Get(k []byte) ([]byte, bool, error) {
	s.gets.Add(1)
	return s.Store.Get(k)
}

// A key's list, map and timers, once scanned, are read from the
// committed-state cache's group entries: no store iterator and no store
// read in later batches, and each commit (not an abort) brings the cached
// groups up to date, so every read gives what the store holds. A list too
// large to cache keeps reading the store. Write-behind on and off.
func TestGroupCacheServesScans(t *testing.T) {
	for _, wb := range []int64{0, shard.DefaultWriteBehindBytes} {
		t.Run(fmt.Sprint("writebehind", wb), func(t *testing.T) {
			st := &iterStore{Store: kv.NewMemory()}
			cache := shard.NewCache(1 << 20)
			s, err := shard.OpenShard(shard.ShardOptions{Backend: st, Cache: cache, WriteBehindBytes: wb})
			noErr(t, err)
			defer s.Close()
			var l, big state.ListState[int64]
			var m state.MapState[string, int64]
			declare(t, s, func() {
				l = must[state.ListState[int64]](t)(shard.NewListState(s, "recent", state.Int64()))
				big = must[state.ListState[int64]](t)(shard.NewListState(s, "big", state.Int64()))
				m = must[state.MapState[string, int64]](t)(shard.NewMapState(s, "agg", state.String(), state.Int64()))
			})
			tm := timers.New(s)
			key := []byte("k1")
			var lg log
			read := func() (list []int64, agg map[string]int64, ts []int64) {
				t.Helper()
				s.SetCurrentKey(key)
				seq, err := l.Get()
				list = collect(t, seq, err)
				agg = map[string]int64{}
				for _, f := range []string{"count", "sum"} {
					v, ok, err := m.GetValue(f)
					noErr(t, err)
					if ok {
						agg[f] = v
					}
				}
				ts, err = tm.List(key)
				noErr(t, err)
				return list, agg, ts
			}
			check := func(batch string, wantList []int64, wantAgg map[string]int64, wantTimers []int64, wantIters int64) {
				t.Helper()
				i0, g0 := st.iters.Load(), st.gets.Load()
				var list []int64
				var agg map[string]int64
				var ts []int64
				commit(t, s, &lg, 100, func() { list, agg, ts = read() })
				if !slices.Equal(list, wantList) || fmt.Sprint(agg) != fmt.Sprint(wantAgg) || !slices.Equal(ts, wantTimers) {
					t.Fatalf("%s: list %v, map %v, timers %v; want %v, %v, %v", batch, list, agg, ts, wantList, wantAgg, wantTimers)
				}
				if n := st.iters.Load() - i0; n != wantIters {
					t.Fatalf("%s: %d store iterators, want %d", batch, n, wantIters)
				}
				if wantIters == 0 {
					if n := st.gets.Load() - g0; n != 0 {
						t.Fatalf("%s: %d store point reads, want 0", batch, n)
					}
				}
			}
			write := func(vals []int64, count, sum, oldTimer, newTimer int64) {
				s.SetCurrentKey(key)
				noErr(t, l.Put(vals))
				noErr(t, m.UpdateValue("count", count))
				noErr(t, m.UpdateValue("sum", sum))
				if oldTimer != 0 {
					noErr(t, tm.Delete(key, oldTimer))
				}
				noErr(t, tm.Register(key, newTimer))
			}
			commit(t, s, &lg, 100, func() { write([]int64{1, 2, 3}, 3, 6, 0, 1000) })
			// The first read fills the groups (one batch iterator); the next
			// reads hit.
			check("first read", []int64{1, 2, 3}, map[string]int64{"count": 3, "sum": 6}, []int64{1000}, 1)
			check("cached", []int64{1, 2, 3}, map[string]int64{"count": 3, "sum": 6}, []int64{1000}, 0)

			// A committed batch patches the cached groups: a sliding window
			// (a delete and an append), map updates, a moved timer.
			commit(t, s, &lg, 100, func() { write([]int64{2, 3, 4}, 4, 10, 1000, 2000) })
			check("after commit", []int64{2, 3, 4}, map[string]int64{"count": 4, "sum": 10}, []int64{2000}, 0)

			// An aborted batch never reaches the cache.
			s.Begin(100)
			write([]int64{9}, 99, 99, 2000, 3000)
			s.Abort()
			check("after abort", []int64{2, 3, 4}, map[string]int64{"count": 4, "sum": 10}, []int64{2000}, 0)

			// Emptied groups stay cached as empty.
			commit(t, s, &lg, 100, func() {
				s.SetCurrentKey(key)
				noErr(t, l.Clear())
				noErr(t, m.Clear())
				noErr(t, tm.Delete(key, 2000))
			})
			check("cleared", nil, map[string]int64{}, nil, 0)

			// A list of more than the group bound is not cached: its scans
			// read the store, and stay right.
			vals := make([]int64, 100)
			for i := range vals {
				vals[i] = int64(i)
			}
			commit(t, s, &lg, 100, func() { s.SetCurrentKey(key); noErr(t, big.Put(vals)) })
			for i := range 3 {
				i0 := st.iters.Load()
				var got []int64
				commit(t, s, &lg, 100, func() {
					s.SetCurrentKey(key)
					seq, err := big.Get()
					got = collect(t, seq, err)
				})
				if !slices.Equal(got, vals) {
					t.Fatalf("large list read %d: %v", i, got)
				}
				if st.iters.Load() == i0 {
					t.Fatalf("large list read %d came from the cache", i)
				}
			}
			// Close drops the groups with the rest of the shard's entries
			// (as restore does: the same clear).
			if cache.Stats().Entries == 0 {
				t.Fatal("nothing cached")
			}
			noErr(t, s.Close())
			if n := cache.Stats().Entries; n != 0 {
				t.Fatalf("%d entries cached after Close", n)
			}
		})
	}
}

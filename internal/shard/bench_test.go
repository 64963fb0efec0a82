package shard_test

import (
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/kstate/kstate/internal/kv"
	"github.com/kstate/kstate/internal/shard"
	"github.com/kstate/kstate/internal/timers"
	"github.com/kstate/kstate/state"
)

// Benchmarks run every hot path on both backends (RocksDB also with the
// committed-state cache, and with the cache and write-behind local commits
// as the engine runs it). Batches commit every
// 1,000 operations (Finish + Commit included in the time), over 1,000
// grouping keys, so reads hit both staging and the store.

func benchBackends(b *testing.B, fn func(b *testing.B, s *shard.Shard)) {
	for _, backend := range []string{"memory", "rocksdb", "rocksdb-cache", "rocksdb-cache-wb"} {
		b.Run(backend, func(b *testing.B) {
			o := shard.ShardOptions{AllowTTL: true}
			if backend != "memory" && backend != "rocksdb" { // the committed-state cache at its default size
				o.Cache = shard.NewCache(16 << 20)
			}
			if backend == "rocksdb-cache-wb" {
				o.WriteBehindBytes = shard.DefaultWriteBehindBytes
			}
			if backend == "memory" {
				o.Backend = kv.NewMemory()
			} else {
				o.Dir = filepath.Join(b.TempDir(), "shard")
			}
			s, err := shard.OpenShard(o)
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			fn(b, s)
		})
	}
}

var benchKeys = func() [][]byte {
	ks := make([][]byte, 1000)
	for i := range ks {
		ks[i] = []byte("user-" + strconv.Itoa(i))
	}
	return ks
}()

// batched runs op b.N times in batches of 1,000 and commits them.
func batched(b *testing.B, s *shard.Shard, op func(i int) error) {
	b.Helper()
	s.Begin(0)
	for i := 0; b.Loop(); i++ {
		if i%1000 == 999 {
			if _, err := s.Finish(); err != nil {
				b.Fatal(err)
			}
			if err := s.Commit(int64(i)); err != nil {
				b.Fatal(err)
			}
			s.Begin(int64(i))
		}
		s.SetCurrentKey(benchKeys[i%len(benchKeys)])
		if err := op(i); err != nil {
			b.Fatal(err)
		}
	}
	s.Abort()
}

func BenchmarkValueUpdateGet(b *testing.B) {
	benchBackends(b, func(b *testing.B, s *shard.Shard) {
		var v state.ValueState[int64]
		declare(b, s, func() { v = must[state.ValueState[int64]](b)(shard.NewValueState(s, "count", state.Int64())) })
		batched(b, s, func(i int) error {
			n, _, err := v.Get()
			if err != nil {
				return err
			}
			return v.Update(n + 1)
		})
	})
}

func BenchmarkListAppend(b *testing.B) {
	benchBackends(b, func(b *testing.B, s *shard.Shard) {
		var l state.ListState[string]
		declare(b, s, func() { l = must[state.ListState[string]](b)(shard.NewListState(s, "events", state.String())) })
		batched(b, s, func(i int) error { return l.AppendValue("event-payload") })
	})
}

func BenchmarkMapUpdate(b *testing.B) {
	benchBackends(b, func(b *testing.B, s *shard.Shard) {
		var m state.MapState[int64, string]
		declare(b, s, func() {
			m = must[state.MapState[int64, string]](b)(shard.NewMapState(s, "m", state.Int64(), state.String()))
		})
		batched(b, s, func(i int) error { return m.UpdateValue(int64(i%64), "value") })
	})
}

// BenchmarkTimerRegisterExpired registers one timer per op; every 100 ops
// the engine's firing step runs: Expired(now) and Delete of each fired one.
func BenchmarkTimerRegisterExpired(b *testing.B) {
	benchBackends(b, func(b *testing.B, s *shard.Shard) {
		tm := timers.New(s)
		batched(b, s, func(i int) error {
			key := benchKeys[i%len(benchKeys)]
			if err := tm.Register(key, int64(i+50)); err != nil {
				return err
			}
			if i%100 != 0 {
				return nil
			}
			fired, err := tm.Expired(int64(i))
			if err != nil {
				return err
			}
			for _, f := range fired {
				if err := tm.Delete(f.Key, f.Expiry); err != nil {
					return err
				}
			}
			return nil
		})
	})
}

// BenchmarkCommit measures whole batches of n ValueState updates over
// distinct keys: staging, Finish (records) and the atomic Commit.
func BenchmarkCommit(b *testing.B) {
	for _, n := range []int{1_000, 10_000} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			benchBackends(b, func(b *testing.B, s *shard.Shard) {
				var v state.ValueState[string]
				declare(b, s, func() { v = must[state.ValueState[string]](b)(shard.NewValueState(s, "v", state.String())) })
				keys := make([][]byte, n)
				for i := range keys {
					keys[i] = []byte(fmt.Sprintf("key-%08d", i*7919%n))
				}
				off := int64(0)
				for b.Loop() {
					s.Begin(0)
					for _, k := range keys {
						s.SetCurrentKey(k)
						if err := v.Update("a value of about thirty bytes."); err != nil {
							b.Fatal(err)
						}
					}
					off = finishCommit(b, s, off)
				}
				b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds(), "mutations/s")
			})
		})
	}
}

// BenchmarkHeavyCall is one call of `kstate bench`'s heavy processor per
// op (cmd/kstate/bench_procs.go), on RocksDB and Pebble: four map reads,
// the list read, an append (a Put of the last 5 once longer), four map
// writes, and the key's timer listed, deleted and registered again. Keys
// cycle over 10,000 (a key comes back every 10 batches of 1,000 calls, so
// its state is read from the store); Finish and Commit are included. The
// -big variant has the batches of `kstate bench` on a backlog: 15,000 calls
// over 100,000 keys, so most keys of a batch are new to it. The -cache
// variants have the engine's default committed-state cache (64 MiB): the
// state of 10,000 and 100,000 keys fits in it. -smallcache has 16 MiB,
// which holds a quarter of the 100,000 keys' state: the keys come back in a
// cycle, so every read misses and evicts (the cache's worst case).
// -live is one of 4 shards of the harness's heavy at 20,000 rows/s: keys at
// random over 25,000, batches of 40, a 16 MiB cache, layers written in the
// background; -backlog the same keys in batches of 5,000 with the layers
// written by the commits, as in a backlog.
func BenchmarkHeavyCall(b *testing.B) {
	for _, variant := range []string{"rocksdb", "rocksdb-wb", "rocksdb-wb-big", "rocksdb-cache-wb", "rocksdb-cache-wb-big", "rocksdb-smallcache-wb-big", "rocksdb-cache-wb-live", "rocksdb-cache-wb-backlog", "pebble"} {
		backend := kv.Backend(strings.Split(variant, "-")[0])
		batch, nkeys := 1000, 10_000
		live := strings.HasSuffix(variant, "-live")
		random := live || strings.HasSuffix(variant, "-backlog") // keys at random over 25,000
		switch {
		case strings.HasSuffix(variant, "-big"):
			batch, nkeys = 15_000, 100_000
		case live:
			batch, nkeys = 40, 25_000 // docs/BENCHMARKS.md, "Session 44"
		case random:
			batch, nkeys = 5_000, 25_000
		}
		b.Run(variant, func(b *testing.B) {
			if backend == kv.BackendRocksDB && !kv.RocksDBAvailable {
				b.Skip("RocksDB is not compiled in")
			}
			o := shard.ShardOptions{Dir: filepath.Join(b.TempDir(), "shard"), StoreBackend: backend}
			if strings.Contains(variant, "-wb") {
				o.WriteBehindBytes = shard.DefaultWriteBehindBytes
			}
			switch {
			case random:
				o.Cache = shard.NewCache(16 << 20) // a quarter of the engine's default
			case strings.Contains(variant, "-cache"):
				o.Cache = shard.NewCache(64 << 20) // the engine's default
			case strings.Contains(variant, "-smallcache"):
				o.Cache = shard.NewCache(16 << 20) // a quarter of the state: reads of a cycle of keys always miss
			}
			s, err := shard.OpenShard(o)
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			s.SetBackgroundFlush(live)
			var l state.ListState[int64]
			var m state.MapState[string, int64]
			declare(b, s, func() {
				l = must[state.ListState[int64]](b)(shard.NewListState(s, "recent", state.Int64()))
				m = must[state.MapState[string, int64]](b)(shard.NewMapState(s, "agg", state.String(), state.Int64()))
			})
			tm := timers.New(s)
			names := [4]string{"count", "sum", "min", "max"}
			keys := make([][]byte, nkeys)
			for i := range keys {
				keys[i] = []byte(fmt.Sprintf("key-%06d", i*7919%len(keys)))
			}
			// Keys in a cycle, or at random as the harness sends them
			// (-live: a cycle longer than the cache would never hit it).
			var order []int32
			if random {
				order = make([]int32, 1<<20)
				rng := rand.New(rand.NewPCG(1, 2))
				for i := range order {
					order[i] = int32(rng.IntN(len(keys)))
				}
			}
			off, now := int64(0), int64(1_000)
			s.Begin(now)
			for i := 0; b.Loop(); i++ {
				if i%batch == batch-1 {
					off = finishCommit(b, s, off)
					now += 10
					s.Begin(now)
				}
				key := keys[i%len(keys)]
				if order != nil {
					key = keys[order[i%len(order)]]
				}
				s.SetCurrentKey(key)
				if err := heavyCall(l, m, tm, names, key, now, int64(i)); err != nil {
					b.Fatal(err)
				}
			}
			s.Abort()
			if st := o.Cache.Stats(); st.Hits+st.Misses > 0 {
				b.ReportMetric(float64(st.Hits)/float64(st.Hits+st.Misses), "cache-hit-ratio")
			}
		})
	}
}

func heavyCall(l state.ListState[int64], m state.MapState[string, int64], tm *timers.Timers, names [4]string, key []byte, now, v int64) error {
	var agg [4]int64
	for i, name := range names {
		x, _, err := m.GetValue(name)
		if err != nil {
			return err
		}
		agg[i] = x
	}
	old, err := l.Get()
	if err != nil {
		return err
	}
	var list []int64
	for x := range old {
		list = append(list, x)
	}
	agg[0]++
	agg[1] += v
	agg[2], agg[3] = min(agg[2], v), max(agg[3], v)
	if len(list) < 5 {
		err = l.AppendValue(v)
	} else {
		err = l.Put(append(list[len(list)-4:], v))
	}
	if err != nil {
		return err
	}
	for i, name := range names {
		if err := m.UpdateValue(name, agg[i]); err != nil {
			return err
		}
	}
	ts, err := tm.List(key)
	if err != nil {
		return err
	}
	for _, e := range ts {
		if err := tm.Delete(key, e); err != nil {
			return err
		}
	}
	return tm.Register(key, now+3_600_000)
}

// BenchmarkCommitCaughtUp measures the batches of a caught-up input: 10
// ValueState updates of keys new to the write-behind layer per batch, with
// the engine's write-behind budget, so the layer fills (about 25,000 of
// these keys) and is flushed over and over, as in a long run. One op is one
// batch: staging, Finish and Commit (and every few thousand batches a
// flush).
func BenchmarkCommitCaughtUp(b *testing.B) {
	s, err := shard.OpenShard(shard.ShardOptions{
		Dir: filepath.Join(b.TempDir(), "shard"), Cache: shard.NewCache(16 << 20),
		WriteBehindBytes: shard.DefaultWriteBehindBytes,
	})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	var v state.ValueState[int64]
	declare(b, s, func() { v = must[state.ValueState[int64]](b)(shard.NewValueState(s, "count", state.Int64())) })
	off, n := int64(0), 0
	for b.Loop() {
		s.Begin(0)
		for range 10 {
			s.SetCurrentKey(fmt.Appendf(nil, "key-%09d", n*7919%1_000_000_007))
			n++
			if err := v.Update(int64(n)); err != nil {
				b.Fatal(err)
			}
		}
		off = finishCommit(b, s, off)
	}
}

// finishCommit finishes the shard's batch and commits it locally with the
// changelog offset after its records, given the offset before them, and
// returns that new offset.
func finishCommit(b *testing.B, s *shard.Shard, off int64) int64 {
	b.Helper()
	recs, err := s.Finish()
	if err != nil {
		b.Fatal(err)
	}
	off += int64(len(recs))
	if err := s.Commit(off); err != nil {
		b.Fatal(err)
	}
	return off
}

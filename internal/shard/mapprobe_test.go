package shard_test

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"path/filepath"
	"testing"

	"github.com/kstate/kstate/internal/kv"
	"github.com/kstate/kstate/internal/shard"
	"github.com/kstate/kstate/internal/timers"
	"github.com/kstate/kstate/state"
)

// GetValue's empty-map probe (map.go, getLive) must never answer "absent"
// for an entry that exists: random batches of map reads and writes over a
// few keys, with savepoint rollbacks, aborts, timer writes (they move the
// shard's read generation) and commits, checked against a plain Go model
// on every read, on every backend.
func TestMapGetValueProbeMatchesModel(t *testing.T) {
	for _, backend := range []kv.Backend{"memory", kv.BackendRocksDB, kv.BackendPebble} {
		t.Run(string(backend), func(t *testing.T) {
			if backend == kv.BackendRocksDB && !kv.RocksDBAvailable {
				t.Skip("RocksDB is not compiled in")
			}
			opts := shard.ShardOptions{Dir: filepath.Join(t.TempDir(), "shard"), StoreBackend: backend}
			if backend == "memory" {
				opts = shard.ShardOptions{Backend: kv.NewMemory()}
			}
			s, err := shard.OpenShard(opts)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			var m state.MapState[string, int64]
			declare(t, s, func() {
				m = must[state.MapState[string, int64]](t)(shard.NewMapState(s, "agg", state.String(), state.Int64()))
			})
			tm := timers.New(s)
			testMapProbe(t, s, m, tm, rand.New(rand.NewPCG(7, 8)))
		})
	}
}

func testMapProbe(t *testing.T, s *shard.Shard, m state.MapState[string, int64], tm *timers.Timers, rng *rand.Rand) {
	keys := []string{"a", "b", "c", "d"}
	names := []string{"count", "sum", "min", "max", "x"}
	committed := map[string]map[string]int64{}
	clone := func(db map[string]map[string]int64) map[string]map[string]int64 {
		out := make(map[string]map[string]int64, len(db))
		for k, v := range db {
			out[k] = maps.Clone(v)
		}
		return out
	}
	now, off, reads, absent := int64(1000), int64(0), 0, 0
	for batch := range 300 {
		s.Begin(now)
		staged := clone(committed)
		type sp struct {
			sp    shard.Savepoint
			model map[string]map[string]int64
		}
		var sps []sp
		for range 1 + rng.IntN(40) {
			key := keys[rng.IntN(len(keys))]
			s.SetCurrentKey([]byte(key))
			for range 1 + rng.IntN(6) {
				name := names[rng.IntN(len(names))]
				switch r := rng.IntN(20); {
				case r < 11:
					v, ok, err := m.GetValue(name)
					noErr(t, err)
					wv, wok := staged[key][name]
					if ok != wok || v != wv {
						t.Fatalf("batch %d key %s: GetValue(%s) = %d, %v; want %d, %v", batch, key, name, v, ok, wv, wok)
					}
					reads++
					if !ok {
						absent++
					}
				case r < 12:
					ok, err := m.ContainsKey(name)
					noErr(t, err)
					if _, wok := staged[key][name]; ok != wok {
						t.Fatalf("batch %d key %s: ContainsKey(%s) = %v, want %v", batch, key, name, ok, wok)
					}
				case r < 15:
					v := rng.Int64N(1000)
					noErr(t, m.UpdateValue(name, v))
					if staged[key] == nil {
						staged[key] = map[string]int64{}
					}
					staged[key][name] = v
				case r < 16:
					noErr(t, m.RemoveKey(name))
					delete(staged[key], name)
				case r < 17:
					noErr(t, m.Clear())
					delete(staged, key)
				case r < 18:
					p, err := s.Savepoint()
					noErr(t, err)
					sps = append(sps, sp{p, clone(staged)})
				case r < 19:
					if len(sps) > 0 {
						i := rng.IntN(len(sps))
						noErr(t, s.RollbackTo(sps[i].sp))
						staged = clone(sps[i].model)
						sps = sps[:i+1]
					}
				default:
					noErr(t, tm.Register([]byte(key), now+int64(rng.IntN(5))))
				}
			}
		}
		if rng.IntN(6) == 0 {
			s.Abort()
		} else {
			recs, err := s.Finish()
			noErr(t, err)
			off += int64(len(recs))
			noErr(t, s.Commit(off))
			committed = staged
		}
		now += 10
	}
	if absent < reads/5 || absent > reads*4/5 {
		t.Fatalf("%d of %d reads absent: the test does not exercise both answers", absent, reads)
	}
	t.Logf("%d reads, %d absent", reads, absent)
}

// The reads of a small map's fields (the heavy processor's count, sum, min
// and max) cost one store point read per key and batch, not one per field:
// the second read scans the key's map once and answers the rest (map.go,
// getLive, "complete"). Values, absent fields, writes in between and a map
// of more than maxMapRead (16) entries, which keeps its point reads, are
// checked too.
func TestMapGetValueSmallMapOneRead(t *testing.T) {
	st := &countingStore{Store: kv.NewMemory()}
	s, err := shard.OpenShard(shard.ShardOptions{Backend: st})
	noErr(t, err)
	defer s.Close()
	var m state.MapState[string, int64]
	declare(t, s, func() {
		m = must[state.MapState[string, int64]](t)(shard.NewMapState(s, "agg", state.String(), state.Int64()))
	})
	names := []string{"count", "sum", "min", "max"}
	big := make([]string, 20)
	for i := range big {
		big[i] = fmt.Sprintf("f%02d", i)
	}
	off := int64(0)
	batch := func(now int64, fn func()) {
		s.Begin(now)
		fn()
		recs, err := s.Finish()
		noErr(t, err)
		off += int64(len(recs))
		noErr(t, s.Commit(off))
	}
	get := func(key, name string) (int64, bool) {
		t.Helper()
		s.SetCurrentKey([]byte(key))
		x, ok, err := m.GetValue(name)
		noErr(t, err)
		return x, ok
	}
	batch(1000, func() {
		s.SetCurrentKey([]byte("small"))
		for i, n := range names {
			noErr(t, m.UpdateValue(n, int64(10+i)))
		}
		s.SetCurrentKey([]byte("big"))
		for i, n := range big {
			noErr(t, m.UpdateValue(n, int64(100+i)))
		}
	})
	batch(1010, func() {
		before := st.gets.Load()
		for i, n := range names {
			if x, ok := get("small", n); !ok || x != int64(10+i) {
				t.Fatalf("GetValue(%q) = %d %v, want %d", n, x, ok, 10+i)
			}
		}
		if _, ok := get("small", "absent"); ok {
			t.Fatal("GetValue(absent) found an entry")
		}
		if n := st.gets.Load() - before; n > 1 {
			t.Fatalf("%d store point reads for 5 reads of a 4-entry map, want at most 1", n)
		}
		s.SetCurrentKey([]byte("small"))
		noErr(t, m.UpdateValue("sum", 99))
		noErr(t, m.UpdateValue("new", 7))
		if x, ok := get("small", "sum"); !ok || x != 99 {
			t.Fatalf("after UpdateValue: sum = %d %v, want 99", x, ok)
		}
		if x, ok := get("small", "new"); !ok || x != 7 {
			t.Fatalf("after UpdateValue: new = %d %v, want 7", x, ok)
		}
		s.SetCurrentKey([]byte("small"))
		noErr(t, m.RemoveKey("count"))
		if _, ok := get("small", "count"); ok {
			t.Fatal("count found after Remove")
		}
		for i, n := range big {
			if x, ok := get("big", n); !ok || x != int64(100+i) {
				t.Fatalf("big: GetValue(%q) = %d %v, want %d", n, x, ok, 100+i)
			}
		}
		if _, ok := get("big", "absent"); ok {
			t.Fatal("big: GetValue(absent) found an entry")
		}
	})
}

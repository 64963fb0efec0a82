package shard_test

import (
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

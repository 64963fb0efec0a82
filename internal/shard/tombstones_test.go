package shard_test

import (
	"fmt"
	"path/filepath"
	"testing"

	"github.com/kstate/kstate/internal/kv"
	"github.com/kstate/kstate/internal/shard"
	"github.com/kstate/kstate/internal/timers"
)

// TestScansStopAtTheirRange is the regression test of issue #25's timer
// churn: after many deleted timers, map and list entries, a new key's
// scans (its map, its list, its timers) must not step over the other keys'
// tombstones. With the shard's reused iterator unbounded, each such scan
// stepped over every deleted entry up to the next live key (here about
// 20,000 per scan, millions for the probe; on a real partition the 100x
// slowdown). It counts what the store reports (Stats.DeletesSkipped), so it
// does not depend on timing. The tombstones stay in the memtable (no
// flush, so no compaction can remove them first).
func TestScansStopAtTheirRange(t *testing.T) {
	for _, backend := range []kv.Backend{kv.BackendRocksDB, kv.BackendPebble} {
		t.Run(string(backend), func(t *testing.T) {
			if backend == kv.BackendRocksDB && !kv.RocksDBAvailable {
				t.Skip("RocksDB is not compiled in")
			}
			s, err := shard.OpenShard(shard.ShardOptions{Dir: filepath.Join(t.TempDir(), "shard"), StoreBackend: backend})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			v := declareSession(t, s)
			const users, events, probes = 500, 20, 200
			off, now := churn(t, s, v, users, events, 0, 1_000)

			before := s.Stats().DeletesSkipped
			s.Begin(now)
			for p := range probes {
				// New keys sort among the old ones ("user-000123x"), so
				// every scan's range lies inside the tombstones.
				k := []byte(fmt.Sprintf("user-%06dx", p*(users/probes)))
				s.SetCurrentKey(k)
				if err := v.newSession(k, now, 3_000); err != nil {
					t.Fatal(err)
				}
			}
			finishCommitTB(t, s, off)
			skipped := s.Stats().DeletesSkipped - before
			// A bounded scan of an empty range skips nothing; allow one
			// entry per scan for the floors' and lists' own ranges.
			// Unbounded, this is in the millions.
			if limit := int64(4 * probes); skipped > limit {
				t.Fatalf("%d new keys' scans stepped over %d deleted entries (limit %d): the scans are not bounded in the store", probes, skipped, limit)
			}
			t.Logf("%d deleted entries skipped by %d new keys' scans", skipped, probes)
		})
	}
}

// TestTimerFloorKnownAfterReopen: the timer floor, unknown after an open,
// is computed by the next commit even when that batch touches no timer;
// until then every timers.Expired scan starts at the front of the timer
// space and steps over all the fired timers' tombstones (on a restarted
// partition that fires nothing for a while: on every batch).
func TestTimerFloorKnownAfterReopen(t *testing.T) {
	for _, backend := range []kv.Backend{kv.BackendRocksDB, kv.BackendPebble} {
		t.Run(string(backend), func(t *testing.T) {
			if backend == kv.BackendRocksDB && !kv.RocksDBAvailable {
				t.Skip("RocksDB is not compiled in")
			}
			o := shard.ShardOptions{Dir: filepath.Join(t.TempDir(), "shard"), StoreBackend: backend}
			s, err := shard.OpenShard(o)
			if err != nil {
				t.Fatal(err)
			}
			tm := timers.New(s)
			s.Begin(0)
			for e := int64(100); e < 200; e++ {
				noErr(t, tm.Register([]byte("k"), e))
			}
			off := finishCommitTB(t, s, 0)
			s.Begin(0)
			fired, err := tm.Expired(149)
			noErr(t, err)
			for _, f := range fired {
				noErr(t, tm.Delete(f.Key, f.Expiry))
			}
			off = finishCommitTB(t, s, off)
			noErr(t, s.Close())

			s, err = shard.OpenShard(o)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			s.Begin(0)
			finishCommitTB(t, s, off)
			if f := s.TimerFloor(); f != 150 {
				t.Fatalf("TimerFloor after reopen and a commit = %d, want 150", f)
			}
		})
	}
}

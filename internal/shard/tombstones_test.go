package shard_test

import (
	"fmt"
	"path/filepath"
	"testing"

	"github.com/kstate/kstate/internal/kv"
	"github.com/kstate/kstate/internal/shard"
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

package shard_test

import (
	"fmt"
	"path/filepath"
	"testing"

	"github.com/kstate/kstate/internal/kv"
	"github.com/kstate/kstate/internal/shard"
	"github.com/kstate/kstate/internal/timers"
	"github.com/kstate/kstate/state"
)

// sessionVars are the heartbeat processor's state: a session map and a
// list of recent values per key, and the key's processing-time timer.
type sessionVars struct {
	m  state.MapState[string, int64]
	l  state.ListState[int64]
	tm *timers.Timers
}

func declareSession(tb testing.TB, s *shard.Shard) sessionVars {
	tb.Helper()
	var v sessionVars
	declare(tb, s, func() {
		v.m = must[state.MapState[string, int64]](tb)(shard.NewMapState(s, "session", state.String(), state.Int64()))
		v.l = must[state.ListState[int64]](tb)(shard.NewListState(s, "recent", state.Int64()))
	})
	v.tm = timers.New(s)
	return v
}

// event is one heartbeat event of the current key at now: the session map
// and list read and updated, the key's timer moved to now+gap (listed,
// deleted, registered again: the README's heartbeat pattern).
func (v sessionVars) event(key []byte, now, gap int64) error {
	n, _, err := v.m.GetValue("events")
	if err != nil {
		return err
	}
	if err := v.m.UpdateValue("events", n+1); err != nil {
		return err
	}
	if err := v.m.UpdateValue("last", now); err != nil {
		return err
	}
	if err := v.l.AppendValue(now); err != nil {
		return err
	}
	ts, err := v.tm.List(key)
	if err != nil {
		return err
	}
	for _, e := range ts {
		if err := v.tm.Delete(key, e); err != nil {
			return err
		}
	}
	return v.tm.Register(key, now+gap)
}

// close ends the current key's session: its timer deleted, its map and
// list cleared.
func (v sessionVars) close(key []byte) error {
	ts, err := v.tm.List(key)
	if err != nil {
		return err
	}
	for _, e := range ts {
		if err := v.tm.Delete(key, e); err != nil {
			return err
		}
	}
	if err := v.m.Clear(); err != nil {
		return err
	}
	return v.l.Clear()
}

// newSession is a new key's first event, as the processor sees it: the
// session map iterated (a scan of an empty range), the list read, the
// key's timers listed, then the event.
func (v sessionVars) newSession(key []byte, now, gap int64) error {
	entries, err := v.m.Iterator()
	if err != nil {
		return err
	}
	for range entries {
	}
	if _, err := v.l.Get(); err != nil {
		return err
	}
	return v.event(key, now, gap)
}

// churn runs the heartbeat pattern: users keys get events events each, one
// per key and batch, each moving the key's timer; then every session closes.
// It leaves users*events deleted timers (two index entries each) and every
// key's map and list entries deleted: the tombstones of issue #25. It
// returns the changelog offset and the time reached.
func churn(tb testing.TB, s *shard.Shard, v sessionVars, users, events int, off, now int64) (int64, int64) {
	tb.Helper()
	for e := 0; e < events; e++ {
		s.Begin(now)
		for u := range users {
			k := []byte(fmt.Sprintf("user-%06d", u))
			s.SetCurrentKey(k)
			if err := v.event(k, now, 3_000); err != nil {
				tb.Fatal(err)
			}
		}
		off = finishCommitTB(tb, s, off)
		now += 100
	}
	s.Begin(now)
	for u := range users {
		k := []byte(fmt.Sprintf("user-%06d", u))
		s.SetCurrentKey(k)
		if err := v.close(k); err != nil {
			tb.Fatal(err)
		}
	}
	return finishCommitTB(tb, s, off), now + 100
}

func finishCommitTB(tb testing.TB, s *shard.Shard, off int64) int64 {
	tb.Helper()
	recs, err := s.Finish()
	if err != nil {
		tb.Fatal(err)
	}
	off += int64(len(recs))
	if err := s.Commit(off); err != nil {
		tb.Fatal(err)
	}
	return off
}

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

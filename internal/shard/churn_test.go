package shard_test

import (
	"fmt"
	"path/filepath"
	"strings"
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

// BenchmarkChurnNewKeys reproduces issue #25's slowdown at the shard: the
// heartbeat pattern over 2,000 keys with 50 events each (100,000 timer
// moves, then every session closed), the shard closed and opened again
// (a restart), then one op is a new key's first event (its map iterated,
// its list read, its timers listed, the event's writes), in batches of
// 1,000 with Finish and Commit. The -fresh variants run the same ops on a
// shard that never saw the churn: the two should be close.
func BenchmarkChurnNewKeys(b *testing.B) {
	for _, variant := range []string{"rocksdb", "rocksdb-fresh", "pebble", "pebble-fresh"} {
		backend := kv.Backend(strings.TrimSuffix(variant, "-fresh"))
		b.Run(variant, func(b *testing.B) {
			if backend == kv.BackendRocksDB && !kv.RocksDBAvailable {
				b.Skip("RocksDB is not compiled in")
			}
			o := shard.ShardOptions{Dir: filepath.Join(b.TempDir(), "shard"), StoreBackend: backend}
			s, err := shard.OpenShard(o)
			if err != nil {
				b.Fatal(err)
			}
			v := declareSession(b, s)
			off, now := int64(0), int64(1_000)
			if !strings.HasSuffix(variant, "-fresh") {
				off, now = churn(b, s, v, 2_000, 50, off, now)
			}
			if err := s.Close(); err != nil {
				b.Fatal(err)
			}
			if s, err = shard.OpenShard(o); err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			v = declareSession(b, s)
			const batch = 1000
			s.Begin(now)
			for i := 0; b.Loop(); i++ {
				if i%batch == batch-1 {
					off = finishCommitTB(b, s, off)
					now += 100
					s.Begin(now)
				}
				k := []byte(fmt.Sprintf("new-%08d", i))
				s.SetCurrentKey(k)
				if err := v.newSession(k, now, 3_000); err != nil {
					b.Fatal(err)
				}
			}
			s.Abort()
		})
	}
}

package shard_test

import (
	"encoding/binary"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/kstate/kstate/changelog"
	"github.com/kstate/kstate/internal/keys"
	"github.com/kstate/kstate/internal/kv"
	"github.com/kstate/kstate/internal/shard"
	"github.com/kstate/kstate/state"
)

// eachBackend runs fn with a fresh shard directory opener per store
// backend compiled in (the memory store has no directory: it is given as
// a Backend, kept open across Close).
func eachBackend(t *testing.T, fn func(t *testing.T, open func() *shard.Shard)) {
	backends := []kv.Backend{"memory", kv.BackendPebble}
	if kv.RocksDBAvailable {
		backends = append(backends, kv.BackendRocksDB)
	}
	for _, b := range backends {
		t.Run(string(b), func(t *testing.T) {
			root := t.TempDir()
			n := 0
			fn(t, func() *shard.Shard {
				t.Helper()
				n++
				o := shard.ShardOptions{AllowTTL: true}
				if b == "memory" {
					o.Backend = kv.NewMemory()
				} else {
					o.Dir, o.StoreBackend = filepath.Join(root, fmt.Sprint("shard", n)), b
				}
				s, err := shard.OpenShard(o)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { s.Close() })
				return s
			})
		})
	}
}

// listSeqs returns the sequence numbers of the stored elements of the
// shard's lists (the last 8 bytes of every state key), ascending.
func listSeqs(t *testing.T, s *shard.Shard) []uint64 {
	t.Helper()
	var out []uint64
	p := keys.KindPrefix(changelog.KindState)
	noErr(t, s.Scan(p, keys.PrefixEnd(p), func(k, _ []byte) bool {
		out = append(out, binary.BigEndian.Uint64(k[len(k)-8:]))
		return true
	}))
	return out
}

// TestListTailKeepsStoredSequences pins the list element keys (a prefix
// plus a big-endian sequence: what lists written before the per-batch tail
// have in their stores and changelogs) through every way the tail is
// learned: a Get in the same batch, an append with no Get (a store read),
// Put and Clear, expired elements still present, and a store rebuilt from
// the changelog.
func TestListTailKeepsStoredSequences(t *testing.T) {
	eachBackend(t, func(t *testing.T, open func() *shard.Shard) {
		var cl log
		s := open()
		var l state.ListState[string]
		decl := func(s *shard.Shard) {
			declare(t, s, func() {
				l = must[state.ListState[string]](t)(shard.NewListState(s, "l", state.String(), state.WithTTL(10*time.Millisecond)))
			})
		}
		decl(s)
		key := func() { s.SetCurrentKey([]byte("k")) }
		get := func(want ...string) {
			t.Helper()
			seq, err := l.Get()
			if got := collect(t, seq, err); !slices.Equal(got, want) {
				t.Fatalf("Get = %q, want %q", got, want)
			}
		}
		seqs := func(want ...uint64) {
			t.Helper()
			if got := listSeqs(t, s); !slices.Equal(got, want) {
				t.Fatalf("stored element sequences %v, want %v", got, want)
			}
		}
		commit(t, s, &cl, 0, func() { key(); noErr(t, l.AppendValue("x")); noErr(t, l.AppendValue("y")) })
		commit(t, s, &cl, 5, func() { key(); noErr(t, l.AppendValue("z")) })
		seqs(0, 1, 2)
		// At 10, x and y are expired but still stored: the tail the Get
		// learns counts them (appends go after the greatest sequence
		// present, expired or not), and Finish removes them.
		commit(t, s, &cl, 10, func() { key(); get("z"); noErr(t, l.AppendValue("w")) })
		seqs(2, 3)
		commit(t, s, &cl, 11, func() { key(); noErr(t, l.AppendList([]string{"v", "u"})) }) // no Get: read from the store
		seqs(2, 3, 4, 5)

		// A store rebuilt from the changelog appends where the old one would.
		s.Close()
		s = open()
		noErr(t, s.ApplyChangelog(cl.recs, cl.next()))
		decl(s)
		seqs(2, 3, 4, 5)
		commit(t, s, &cl, 12, func() {
			key()
			get("z", "w", "v", "u")
			noErr(t, l.AppendValue("s"))
			get("z", "w", "v", "u", "s")
			noErr(t, l.AppendValue("r"))
		})
		seqs(2, 3, 4, 5, 6, 7)
		commit(t, s, &cl, 13, func() {
			key()
			noErr(t, l.Put([]string{"a", "b"}))
			noErr(t, l.AppendValue("c"))
			get("a", "b", "c")
		})
		seqs(0, 1, 2)
		commit(t, s, &cl, 14, func() {
			key()
			noErr(t, l.Clear())
			noErr(t, l.AppendValue("d"))
			get("d")
		})
		seqs(0)
		// A rollback forgets the tail its writes taught the batch.
		commit(t, s, &cl, 15, func() {
			key()
			get("d")
			sp, err := s.Savepoint()
			noErr(t, err)
			noErr(t, l.AppendList([]string{"e", "f"}))
			noErr(t, s.RollbackTo(sp))
			noErr(t, l.AppendValue("g"))
			get("d", "g")
		})
		seqs(0, 1)
		// An aborted batch's tail is not carried into the next.
		s.Begin(16)
		key()
		get("d", "g")
		noErr(t, l.AppendList([]string{"h", "i"}))
		s.Abort()
		commit(t, s, &cl, 16, func() { key(); noErr(t, l.AppendValue("j")); get("d", "g", "j") })
		seqs(0, 1, 2)
		// All expired: Get sees nothing live, but the append still goes
		// after the greatest stored sequence.
		commit(t, s, &cl, 30, func() { key(); get(); noErr(t, l.AppendValue("q")); get("q") })
		seqs(3)
	})
}

// TestScanIteratorReuse checks that the batch's reused store iterator
// reads the right committed state across commits, aborts and a restore,
// and that a scan nested in another scan's callback is correct.
func TestScanIteratorReuse(t *testing.T) {
	eachBackend(t, func(t *testing.T, open func() *shard.Shard) {
		var cl log
		s := open()
		var m state.MapState[string, int64]
		decl := func(s *shard.Shard) {
			declare(t, s, func() {
				m = must[state.MapState[string, int64]](t)(shard.NewMapState(s, "m", state.String(), state.Int64()))
			})
		}
		decl(s)
		entries := func(want map[string]int64) {
			t.Helper()
			it, err := m.Iterator()
			noErr(t, err)
			got := maps.Collect(it)
			if !maps.Equal(got, want) {
				t.Fatalf("map %v, want %v", got, want)
			}
		}
		key := func() { s.SetCurrentKey([]byte("k")) }
		commit(t, s, &cl, 0, func() { key(); noErr(t, m.UpdateValue("a", 1)) })
		s.Begin(1)
		key()
		entries(map[string]int64{"a": 1})
		noErr(t, m.UpdateValue("b", 2))
		entries(map[string]int64{"a": 1, "b": 2})
		s.Abort()
		commit(t, s, &cl, 2, func() {
			key()
			entries(map[string]int64{"a": 1}) // the abort's staging is gone
			noErr(t, m.UpdateValue("c", 3))
			noErr(t, m.RemoveKey("a"))
		})
		commit(t, s, &cl, 3, func() {
			key()
			entries(map[string]int64{"c": 3}) // the iterator is recreated after a commit
			// A scan inside another scan's callback (reads only).
			p := keys.KindPrefix(changelog.KindState)
			var outer, inner int
			noErr(t, s.Scan(p, keys.PrefixEnd(p), func(k, _ []byte) bool {
				outer++
				noErr(t, s.Scan(p, keys.PrefixEnd(p), func(k2, _ []byte) bool { inner++; return true }))
				return true
			}))
			if outer != 1 || inner != 1 {
				t.Fatalf("nested scans saw %d and %d entries, want 1 and 1", outer, inner)
			}
			noErr(t, m.UpdateValue("d", 4))
		})
		commit(t, s, &cl, 4, func() { key(); entries(map[string]int64{"c": 3, "d": 4}) })

		// Restore into a fresh store, then the same reads.
		s.Close()
		s = open()
		noErr(t, s.ApplyChangelog(cl.recs[:len(cl.recs)-1], cl.next()-1)) // without the last record ("d")
		noErr(t, s.ApplyChangelog(cl.recs[len(cl.recs)-1:], cl.next()))
		decl(s)
		commit(t, s, &cl, 5, func() { key(); entries(map[string]int64{"c": 3, "d": 4}) })
	})
}

// TestMapTTLThroughReusedIterator checks expiry on map scans on every
// backend: expired entries are hidden from the batch's scans (store and
// staging), removed by Finish, and gone from the next batch's iterator.
func TestMapTTLThroughReusedIterator(t *testing.T) {
	eachBackend(t, func(t *testing.T, open func() *shard.Shard) {
		s := open()
		var m state.MapState[string, int64]
		declare(t, s, func() {
			m = must[state.MapState[string, int64]](t)(shard.NewMapState(s, "m", state.String(), state.Int64(), state.WithTTL(10*time.Millisecond)))
		})
		keysAt := func() []string {
			t.Helper()
			ks, err := m.Keys()
			return collect(t, ks, err)
		}
		key := func() { s.SetCurrentKey([]byte("k")) }
		commit(t, s, nil, 0, func() { key(); noErr(t, m.UpdateValue("a", 1)) })
		commit(t, s, nil, 5, func() { key(); noErr(t, m.UpdateValue("b", 2)) })
		commit(t, s, nil, 10, func() {
			key()
			if got := keysAt(); !slices.Equal(got, []string{"b"}) { // a expired at 10
				t.Fatalf("keys at 10: %q", got)
			}
			noErr(t, m.UpdateValue("c", 3))
			if got := keysAt(); !slices.Equal(got, []string{"b", "c"}) {
				t.Fatalf("keys at 10 after a write: %q", got)
			}
		})
		if n := countKind(t, s, changelog.KindState); n != 2 {
			t.Fatalf("%d entries stored after the expiry of a, want 2", n)
		}
		commit(t, s, nil, 15, func() {
			key()
			if got := keysAt(); !slices.Equal(got, []string{"c"}) {
				t.Fatalf("keys at 15: %q", got)
			}
		})
	})
}

// TestFinishRecordsSurviveReset checks that the records of a committed
// batch keep their bytes while later batches reuse the staging layer
// (keys live in chunks that are never reused).
func TestFinishRecordsSurviveReset(t *testing.T) {
	s := openMem(t, false)
	var v state.ValueState[string]
	declare(t, s, func() { v = must[state.ValueState[string]](t)(shard.NewValueState(s, "v", state.String())) })
	var kept []changelog.Record
	var want []string
	for b := range 3 {
		recs := commit(t, s, nil, int64(b), func() {
			for i := range 3000 { // more than one key chunk
				s.SetCurrentKey(fmt.Appendf(nil, "key-%d-%05d", b, i))
				noErr(t, v.Update(fmt.Sprintf("value %d %d", b, i)))
			}
		})
		for _, r := range recs {
			kept = append(kept, r)
			want = append(want, fmt.Sprintf("%x=%x", r.Key, r.Value))
		}
	}
	s.Begin(9)
	s.SetCurrentKey([]byte("after"))
	noErr(t, v.Update("x"))
	s.Abort()
	for i, r := range kept {
		if got := fmt.Sprintf("%x=%x", r.Key, r.Value); got != want[i] {
			t.Fatalf("record %d changed after later batches: %s, was %s", i, got, want[i])
		}
	}
}

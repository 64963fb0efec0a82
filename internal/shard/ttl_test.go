package shard_test

import (
	"bytes"
	"slices"
	"testing"
	"time"

	"github.com/kstate/kstate/changelog"
	"github.com/kstate/kstate/internal/changelogfmt"
	"github.com/kstate/kstate/internal/keys"
	"github.com/kstate/kstate/internal/shard"
	"github.com/kstate/kstate/state"
)

// countKind counts live keys of one kind in the shard's merged view.
func countKind(t *testing.T, s *shard.Shard, k changelog.Kind) int {
	t.Helper()
	n := 0
	noErr(t, s.Scan(keys.KindPrefix(k), keys.PrefixEnd(keys.KindPrefix(k)), func(_, _ []byte) bool { n++; return true }))
	return n
}

func TestValueTTLBoundary(t *testing.T) {
	// Written at 1000 with TTL 100ms: expiry 1100. Visible at 1099, gone at
	// exactly 1100 (expiry <= batch time is expired).
	for _, tc := range []struct {
		at     int64
		wantOK bool
	}{{1000, true}, {1099, true}, {1100, false}, {5000, false}} {
		s := openMem(t, true)
		var v state.ValueState[string]
		declare(t, s, func() {
			v = must[state.ValueState[string]](t)(shard.NewValueState(s, "v", state.String(), state.WithTTL(100*time.Millisecond)))
		})
		commit(t, s, nil, 1000, func() { s.SetCurrentKey([]byte("k")); noErr(t, v.Update("x")) })
		if n := countKind(t, s, changelog.KindTTL); n != 1 {
			t.Fatalf("TTL index entries = %d, want 1", n)
		}
		s.Begin(tc.at)
		s.SetCurrentKey([]byte("k"))
		got, ok, err := v.Get()
		noErr(t, err)
		ex, _ := v.Exists()
		if ok != tc.wantOK || ex != tc.wantOK || (ok && got != "x") {
			t.Fatalf("at %d: Get = %q, %v, Exists = %v; want ok=%v", tc.at, got, ok, ex, tc.wantOK)
		}
		recs, err := s.Finish()
		noErr(t, err)
		if tc.wantOK && len(recs) != 0 {
			t.Fatalf("at %d: Finish emitted %d records for a live value", tc.at, len(recs))
		}
		if !tc.wantOK {
			// Tombstones for the value and its index entry.
			if len(recs) != 2 || !recs[0].Tombstone() || !recs[1].Tombstone() {
				t.Fatalf("at %d: Finish records = %+v, want 2 tombstones", tc.at, recs)
			}
			noErr(t, s.Commit(1))
			if st := s.Stats(); st.TTLRemovals != 1 {
				t.Fatalf("TTLRemovals = %d, want 1", st.TTLRemovals)
			}
			if n := countKind(t, s, changelog.KindState) + countKind(t, s, changelog.KindTTL); n != 0 {
				t.Fatalf("%d state/TTL entries left after expiry", n)
			}
		}
	}
}

func TestValueTTLResetByUpdate(t *testing.T) {
	s := openMem(t, true)
	var v state.ValueState[int]
	declare(t, s, func() {
		v = must[state.ValueState[int]](t)(shard.NewValueState(s, "v", state.Int(), state.WithTTL(time.Second)))
	})
	commit(t, s, nil, 0, func() { s.SetCurrentKey([]byte("k")); noErr(t, v.Update(1)) })
	commit(t, s, nil, 900, func() { s.SetCurrentKey([]byte("k")); noErr(t, v.Update(2)) }) // expiry 1900
	if n := countKind(t, s, changelog.KindTTL); n != 1 {
		t.Fatalf("TTL index entries after re-Update = %d, want 1 (old one removed)", n)
	}
	s.Begin(1899)
	s.SetCurrentKey([]byte("k"))
	if got, ok, _ := v.Get(); !ok || got != 2 {
		t.Fatalf("at 1899 Get = %d, %v", got, ok)
	}
	s.Abort()
	s.Begin(1900)
	s.SetCurrentKey([]byte("k"))
	if _, ok, _ := v.Get(); ok {
		t.Fatal("at 1900 value still visible")
	}
	noErr(t, v.Clear()) // clearing an expired value is fine and removes the index entry
	_, err := s.Finish()
	noErr(t, err)
	noErr(t, s.Commit(5))
	if n := countKind(t, s, changelog.KindTTL) + countKind(t, s, changelog.KindState); n != 0 {
		t.Fatalf("%d entries left", n)
	}
}

func TestListTTLPerElement(t *testing.T) {
	// Elements appended at different times expire independently, wherever
	// they sit in the list; Put resets all of them.
	for _, tc := range []struct {
		name   string
		writes []struct {
			at int64
			vs []string
		}
		readAt int64
		want   []string
	}{
		{"start expires", []struct {
			at int64
			vs []string
		}{{0, []string{"a"}}, {50, []string{"b", "c"}}}, 100, []string{"b", "c"}},
		{"end expires", []struct {
			at int64
			vs []string
		}{{50, []string{"a"}}, {0, []string{"b"}}}, 100, []string{"a"}},
		{"middle expires", []struct {
			at int64
			vs []string
		}{{50, []string{"a"}}, {0, []string{"b"}}, {60, []string{"c"}}}, 100, []string{"a", "c"}},
		{"all expire", []struct {
			at int64
			vs []string
		}{{0, []string{"a"}}, {10, []string{"b"}}}, 110, nil},
		{"just before", []struct {
			at int64
			vs []string
		}{{0, []string{"a"}}, {10, []string{"b"}}}, 99, []string{"a", "b"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := openMem(t, true)
			var l state.ListState[string]
			declare(t, s, func() {
				l = must[state.ListState[string]](t)(shard.NewListState(s, "l", state.String(), state.WithTTL(100*time.Millisecond)))
			})
			// Writes are applied in the given order but at the given batch time,
			// which lets an earlier-positioned element expire later.
			for _, w := range tc.writes {
				commit(t, s, nil, w.at, func() { s.SetCurrentKey([]byte("k")); noErr(t, l.AppendList(w.vs)) })
			}
			s.Begin(tc.readAt)
			s.SetCurrentKey([]byte("k"))
			seq, err := l.Get()
			if got := collect(t, seq, err); !slices.Equal(got, tc.want) {
				t.Fatalf("Get at %d = %q, want %q", tc.readAt, got, tc.want)
			}
			_, err = s.Finish()
			noErr(t, err)
			noErr(t, s.Commit(100))
			if n := countKind(t, s, changelog.KindState); n != len(tc.want) {
				t.Fatalf("%d element entries after cleanup, want %d", n, len(tc.want))
			}
			if n := countKind(t, s, changelog.KindTTL); n != len(tc.want) {
				t.Fatalf("%d TTL index entries after cleanup, want %d", n, len(tc.want))
			}
			// Appending after cleanup keeps insertion order.
			commit(t, s, nil, tc.readAt, func() { s.SetCurrentKey([]byte("k")); noErr(t, l.AppendValue("z")) })
			s.Begin(tc.readAt)
			s.SetCurrentKey([]byte("k"))
			seq, err = l.Get()
			if got := collect(t, seq, err); !slices.Equal(got, append(slices.Clone(tc.want), "z")) {
				t.Fatalf("after append: %q", got)
			}
			s.Abort()
		})
	}
}

func TestListTTLPutResetsAll(t *testing.T) {
	s := openMem(t, true)
	var l state.ListState[string]
	declare(t, s, func() {
		l = must[state.ListState[string]](t)(shard.NewListState(s, "l", state.String(), state.WithTTL(100*time.Millisecond)))
	})
	commit(t, s, nil, 0, func() { s.SetCurrentKey([]byte("k")); noErr(t, l.AppendList([]string{"a", "b", "c"})) })
	commit(t, s, nil, 90, func() { s.SetCurrentKey([]byte("k")); noErr(t, l.Put([]string{"x", "y"})) })
	if n := countKind(t, s, changelog.KindTTL); n != 2 {
		t.Fatalf("TTL index entries after Put = %d, want 2", n)
	}
	s.Begin(150)
	s.SetCurrentKey([]byte("k"))
	seq, err := l.Get()
	if got := collect(t, seq, err); !slices.Equal(got, []string{"x", "y"}) {
		t.Fatalf("Get = %q", got)
	}
	s.Abort()
}

func TestMapTTLPerEntry(t *testing.T) {
	s := openMem(t, true)
	var m state.MapState[string, int]
	declare(t, s, func() {
		m = must[state.MapState[string, int]](t)(shard.NewMapState(s, "m", state.String(), state.Int(), state.WithTTL(100*time.Millisecond)))
	})
	commit(t, s, nil, 0, func() {
		s.SetCurrentKey([]byte("k"))
		noErr(t, m.UpdateValue("a", 1))
		noErr(t, m.UpdateValue("b", 2))
		noErr(t, m.UpdateValue("c", 3))
	})
	commit(t, s, nil, 60, func() { s.SetCurrentKey([]byte("k")); noErr(t, m.UpdateValue("b", 20)) })
	s.Begin(100)
	s.SetCurrentKey([]byte("k"))
	it, err := m.Iterator()
	noErr(t, err)
	var got []string
	for k, v := range it {
		got = append(got, k+"="+string(rune('0'+v%10)))
	}
	if !slices.Equal(got, []string{"b=0"}) {
		t.Fatalf("entries at 100 = %q", got)
	}
	if ok, _ := m.ContainsKey("a"); ok {
		t.Fatal("expired entry a visible")
	}
	recs, err := s.Finish()
	noErr(t, err)
	if len(recs) != 4 { // a, c and their index entries
		t.Fatalf("Finish records = %d, want 4", len(recs))
	}
	noErr(t, s.Commit(1))
	if st := s.Stats(); st.TTLRemovals != 2 {
		t.Fatalf("TTLRemovals = %d, want 2", st.TTLRemovals)
	}
}

func TestTTLCleanupUsesIndexOnly(t *testing.T) {
	// Entries without an index entry are never touched by cleanup, and
	// index entries pointing at entries with a later expiry do not delete.
	s := openMem(t, true)
	var v state.ValueState[int]
	declare(t, s, func() {
		v = must[state.ValueState[int]](t)(shard.NewValueState(s, "v", state.Int(), state.WithTTL(time.Second)))
	})
	commit(t, s, nil, 0, func() { s.SetCurrentKey([]byte("k")); noErr(t, v.Update(1)) })
	// Plant a stale index entry at 10 pointing at the live value (expiry 1000).
	var stateKey []byte
	noErr(t, s.Scan(keys.KindPrefix(changelog.KindState), keys.PrefixEnd(keys.KindPrefix(changelog.KindState)), func(k, _ []byte) bool {
		stateKey = bytes.Clone(k)
		return false
	}))
	recs := commit(t, s, nil, 0, func() { noErr(t, s.Put(changelogfmt.TTLKey(10, stateKey), []byte{1, 0, 0})) })
	if len(recs) != 1 {
		t.Fatal(recs)
	}
	recs = commit(t, s, nil, 500, func() {})
	if len(recs) != 1 || !recs[0].Tombstone() || !bytes.Equal(recs[0].Key, changelogfmt.TTLKey(10, stateKey)) {
		t.Fatalf("cleanup records = %+v, want only the stale index tombstone", recs)
	}
	s.Begin(999)
	s.SetCurrentKey([]byte("k"))
	if _, ok, _ := v.Get(); !ok {
		t.Fatal("stale index entry deleted a live value")
	}
	s.Abort()
}

func TestTTLMisuse(t *testing.T) {
	s := openMem(t, false)
	declare(t, s, func() {
		_, err := shard.NewValueState(s, "v", state.Int(), state.WithTTL(time.Minute))
		wantErr(t, err, state.ErrTTLNotAllowed, `ValueState "v"`, "NewValueState", "ProcessingTime")
	})
	s2 := openMem(t, true)
	declare(t, s2, func() {
		for _, d := range []time.Duration{0, -time.Second, time.Microsecond} {
			_, err := shard.NewListState(s2, "l", state.Int(), state.WithTTL(d))
			wantErr(t, err, state.ErrBadTTL, `ListState "l"`, "NewListState")
		}
	})
	var v state.ValueState[int]
	declare(t, s2, func() {
		v = must[state.ValueState[int]](t)(shard.NewValueState(s2, "v", state.Int(), state.WithTTL(time.Second)))
	})
	s2.Begin(-1)
	s2.SetCurrentKey([]byte("k"))
	wantErr(t, v.Update(1), shard.ErrNoBatchTime, `ValueState "v"`, "Update")
	s2.Abort()
}

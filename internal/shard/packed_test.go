package shard_test

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/kstate/kstate/internal/kv"
	"github.com/kstate/kstate/internal/shard"
	"github.com/kstate/kstate/state"
)

// packedVars are one shard's variables: a packed list and map, and the
// same two unpacked, which every operation also runs on.
type packedVars struct {
	pl, ul state.ListState[string]
	pm, um state.MapState[int64, string]
}

func declarePacked(t testing.TB, s *shard.Shard) *packedVars {
	var v packedVars
	declare(t, s, func() {
		v.pl = must[state.ListState[string]](t)(shard.NewListState(s, "pl", state.String(), state.Packed()))
		v.ul = must[state.ListState[string]](t)(shard.NewListState(s, "ul", state.String()))
		v.pm = must[state.MapState[int64, string]](t)(shard.NewMapState(s, "pm", state.Int64(), state.String(), state.Packed()))
		v.um = must[state.MapState[int64, string]](t)(shard.NewMapState(s, "um", state.Int64(), state.String()))
	})
	return &v
}

// TestPackedModel runs random list and map operations on packed variables
// and on the same variables unpacked, over batches that commit or abort,
// and restarts (the changelog replayed into a fresh shard, or the old
// store reopened with its tail): after every operation and restart both
// layouts, and a plain Go model of the committed state, read the same.
func TestPackedModel(t *testing.T) {
	for _, backend := range []string{"memory", "rocksdb"} {
		t.Run(backend, func(t *testing.T) {
			if backend == "rocksdb" && !kv.RocksDBAvailable {
				t.Skip("built without RocksDB")
			}
			for seed := range uint64(8) {
				t.Run(fmt.Sprint(seed), func(t *testing.T) { packedModel(t, backend, seed) })
			}
		})
	}
}

func packedModel(t *testing.T, backend string, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 29))
	dir := t.TempDir()
	mem := kv.NewMemory()
	open := func(fresh bool) *shard.Shard {
		var st kv.Store
		var err error
		switch {
		case backend == "memory" && fresh:
			mem = kv.NewMemory()
			st = noClose{mem}
		case backend == "memory":
			st = noClose{mem}
		default:
			if fresh {
				dir = t.TempDir()
			}
			st, err = kv.OpenRocksDB(dir, kv.RocksOptions{})
			noErr(t, err)
		}
		wb := int64(0)
		if rng.IntN(2) == 0 {
			wb = 1 << 10 // small: flushes often
		}
		s, err := shard.OpenShard(shard.ShardOptions{Backend: st, WriteBehindBytes: wb})
		noErr(t, err)
		return s
	}
	var l log
	s := open(true)
	v := declarePacked(t, s)
	keys := []string{"a", "b", "c"}
	// The committed model, and the batch's.
	lists, maps_ := map[string][]string{}, map[string]map[int64]string{}
	var bl map[string][]string
	var bm map[string]map[int64]string
	check := func(when string, key string) {
		t.Helper()
		s.SetCurrentKey([]byte(key))
		want := bl[key]
		for name, ls := range map[string]state.ListState[string]{"packed": v.pl, "unpacked": v.ul} {
			seq, err := ls.Get()
			got := collect(t, seq, err)
			if !slices.Equal(got, want) {
				t.Fatalf("seed %d %s: %s list of %q = %q, want %q", seed, when, name, key, got, want)
			}
			ex, err := ls.Exists()
			noErr(t, err)
			if ex != (len(want) > 0) {
				t.Fatalf("seed %d %s: %s list of %q: Exists %v, want %v", seed, when, name, key, ex, len(want) > 0)
			}
		}
		wm := bm[key]
		for name, ms := range map[string]state.MapState[int64, string]{"packed": v.pm, "unpacked": v.um} {
			it, err := ms.Iterator()
			noErr(t, err)
			got := map[int64]string{}
			var order []int64
			for k, x := range it {
				got[k] = x
				order = append(order, k)
			}
			if !maps.Equal(got, wm) && len(got)+len(wm) > 0 {
				t.Fatalf("seed %d %s: %s map of %q = %v, want %v", seed, when, name, key, got, wm)
			}
			if !slices.IsSorted(order) {
				t.Fatalf("seed %d %s: %s map of %q iterated %v, not in key order", seed, when, name, key, order)
			}
			kseq, err := ms.Keys()
			ks := collect(t, kseq, err)
			vseq, err := ms.Values()
			vs := collect(t, vseq, err)
			if !slices.Equal(ks, order) || len(vs) != len(order) {
				t.Fatalf("seed %d %s: %s map of %q: Keys %v, Values %v, Iterator's keys %v", seed, when, name, key, ks, vs, order)
			}
			for _, k := range []int64{-1, 0, 1, 2, 7} {
				x, ok, err := ms.GetValue(k)
				noErr(t, err)
				wx, wok := wm[k]
				c, err := ms.ContainsKey(k)
				noErr(t, err)
				if x != wx || ok != wok || c != wok {
					t.Fatalf("seed %d %s: %s map of %q: GetValue(%d) = %q, %v (ContainsKey %v), want %q, %v", seed, when, name, key, k, x, ok, c, wx, wok)
				}
			}
			ex, err := ms.Exists()
			noErr(t, err)
			if ex != (len(wm) > 0) {
				t.Fatalf("seed %d %s: %s map of %q: Exists %v, want %v", seed, when, name, key, ex, len(wm) > 0)
			}
		}
	}
	str := func() string { return fmt.Sprint(rng.IntN(1000)) }
	for batch := range 120 {
		bl, bm = map[string][]string{}, map[string]map[int64]string{}
		for k, x := range lists {
			bl[k] = slices.Clone(x)
		}
		for k, x := range maps_ {
			bm[k] = maps.Clone(x)
		}
		s.Begin(int64(1000 + batch))
		for range 1 + rng.IntN(12) {
			key := keys[rng.IntN(len(keys))]
			s.SetCurrentKey([]byte(key))
			switch op := rng.IntN(9); op {
			case 0, 1:
				x := str()
				noErr(t, v.pl.AppendValue(x))
				noErr(t, v.ul.AppendValue(x))
				bl[key] = append(bl[key], x)
			case 2:
				xs := []string{str(), str()}
				noErr(t, v.pl.AppendList(xs))
				noErr(t, v.ul.AppendList(xs))
				bl[key] = append(bl[key], xs...)
			case 3:
				xs := append(slices.Clone(bl[key]), str())
				if len(xs) > 3 {
					xs = xs[len(xs)-3:] // a sliding window
				}
				noErr(t, v.pl.Put(xs))
				noErr(t, v.ul.Put(xs))
				bl[key] = xs
			case 4:
				noErr(t, v.pl.Clear())
				noErr(t, v.ul.Clear())
				delete(bl, key)
			case 5, 6:
				k, x := int64(rng.IntN(4)), str()
				if rng.IntN(3) == 0 {
					x = bm[key][k] // often unchanged
				}
				noErr(t, v.pm.UpdateValue(k, x))
				noErr(t, v.um.UpdateValue(k, x))
				if bm[key] == nil {
					bm[key] = map[int64]string{}
				}
				bm[key][k] = x
			case 7:
				k := int64(rng.IntN(4))
				noErr(t, v.pm.RemoveKey(k))
				noErr(t, v.um.RemoveKey(k))
				delete(bm[key], k)
				if len(bm[key]) == 0 {
					delete(bm, key)
				}
			case 8:
				noErr(t, v.pm.Clear())
				noErr(t, v.um.Clear())
				delete(bm, key)
			}
			check(fmt.Sprintf("batch %d", batch), key)
		}
		if rng.IntN(5) == 0 {
			s.Abort()
			bl, bm = lists, maps_
		} else {
			recs, err := s.Finish()
			noErr(t, err)
			l.append(recs)
			s.SetBackgroundFlush(rng.IntN(2) == 0) // as the engine: both ways
			noErr(t, s.Commit(l.next()))
			lists, maps_ = bl, bm
		}
		if rng.IntN(10) == 0 {
			fresh := rng.IntN(2) == 0
			if fresh {
				noErr(t, s.Close())
			} else {
				noErr(t, shard.CrashForTest(s))
			}
			s = open(fresh)
			from := s.ChangelogOffset()
			noErr(t, s.ApplyChangelog(l.recs[from:], l.next()))
			v = declarePacked(t, s)
		}
		bl, bm = lists, maps_
		s.Begin(int64(1000 + batch))
		for _, key := range keys {
			check(fmt.Sprintf("after batch %d", batch), key)
		}
		s.Abort()
	}
	noErr(t, s.Close())
}

// TestPackedWritesOneEntry checks what the layout is for: a key's list and
// map changes are one changelog record each, however many elements or
// entries change.
func TestPackedWritesOneEntry(t *testing.T) {
	s := openMem(t, false)
	v := declarePacked(t, s)
	var l log
	commit(t, s, &l, 1000, func() {}) // the registry
	recs := commit(t, s, &l, 1000, func() {
		s.SetCurrentKey([]byte("k"))
		noErr(t, v.pl.AppendList([]string{"x", "y", "z"}))
		noErr(t, v.pl.AppendValue("w"))
		for i := range int64(4) {
			noErr(t, v.pm.UpdateValue(i, "v"))
		}
	})
	if len(recs) != 2 {
		t.Fatalf("a batch changing a packed list and map wrote %d changelog records, want 2: %v", len(recs), recs)
	}
	// An update to the same bytes writes nothing.
	recs = commit(t, s, &l, 1000, func() {
		s.SetCurrentKey([]byte("k"))
		noErr(t, v.pm.UpdateValue(2, "v"))
		noErr(t, v.pm.RemoveKey(9))
	})
	if len(recs) != 0 {
		t.Fatalf("an unchanged packed map wrote %d changelog records, want 0", len(recs))
	}
	// Removing the last entry removes the value.
	recs = commit(t, s, &l, 1000, func() {
		s.SetCurrentKey([]byte("k"))
		for i := range int64(4) {
			noErr(t, v.pm.RemoveKey(i))
		}
	})
	if len(recs) != 1 || recs[0].Value != nil {
		t.Fatalf("emptying a packed map wrote %v, want one tombstone", recs)
	}
}

// TestPackedDeclarationErrors: Packed with a TTL, Packed on a ValueState,
// and a layout changed across restarts are refused with the variable's
// name and both sides.
func TestPackedDeclarationErrors(t *testing.T) {
	s := openMem(t, true)
	s.SetDeclaring(true)
	_, err := shard.NewListState(s, "l", state.Int64(), state.Packed(), state.WithTTL(time.Second))
	wantErr(t, err, nil, `"l"`, "Packed and WithTTL")
	_, err = shard.NewValueState(s, "v", state.Int64(), state.Packed())
	wantErr(t, err, nil, `"v"`, "ListState and MapState only")
	s.SetDeclaring(false)

	mem := kv.NewMemory()
	s1, err := shard.OpenShard(shard.ShardOptions{Backend: noClose{mem}})
	noErr(t, err)
	declare(t, s1, func() {
		must[state.ListState[int64]](t)(shard.NewListState(s1, "l", state.Int64()))
		must[state.MapState[string, int64]](t)(shard.NewMapState(s1, "m", state.String(), state.Int64(), state.Packed()))
	})
	commit(t, s1, nil, 1000, func() {})
	noErr(t, s1.Close())
	s2, err := shard.OpenShard(shard.ShardOptions{Backend: noClose{mem}})
	noErr(t, err)
	defer s2.Close()
	s2.SetDeclaring(true)
	defer s2.SetDeclaring(false)
	_, err = shard.NewListState(s2, "l", state.Int64(), state.Packed())
	wantErr(t, err, state.ErrKindChanged, `"l" was a list state, now declared as a packed list state`)
	_, err = shard.NewMapState(s2, "m", state.String(), state.Int64())
	wantErr(t, err, state.ErrKindChanged, `"m" was a packed map state, now declared as a map state`)
}

// TestPackedRollback: a savepoint's rollback (a key's rows sent to the
// dead-letter topic) undoes a packed write, and the variable reads the
// value from before it, not the one it wrote.
func TestPackedRollback(t *testing.T) {
	s := openMem(t, false)
	v := declarePacked(t, s)
	commit(t, s, nil, 1000, func() {
		s.SetCurrentKey([]byte("k"))
		noErr(t, v.pl.AppendValue("kept"))
		noErr(t, v.pm.UpdateValue(1, "kept"))
	})
	s.Begin(1000)
	defer s.Abort()
	s.SetCurrentKey([]byte("k"))
	sp, err := s.Savepoint()
	noErr(t, err)
	noErr(t, v.pl.AppendValue("dropped"))
	noErr(t, v.pm.UpdateValue(1, "dropped"))
	noErr(t, s.RollbackTo(sp))
	seq, err := v.pl.Get()
	if got := collect(t, seq, err); !slices.Equal(got, []string{"kept"}) {
		t.Fatalf("packed list after the rollback: %q, want [kept]", got)
	}
	if got, _, err := v.pm.GetValue(1); err != nil || got != "kept" {
		t.Fatalf("packed map after the rollback: %q (%v), want kept", got, err)
	}
}

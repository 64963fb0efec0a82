package shard_test

import (
	"bytes"
	"errors"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/kstate/kstate/changelog"
	"github.com/kstate/kstate/internal/changelogfmt"
	"github.com/kstate/kstate/internal/kv"
	"github.com/kstate/kstate/internal/shard"
	"github.com/kstate/kstate/state"
)

func TestShardDirLock(t *testing.T) {
	dir := t.TempDir()
	s, err := shard.OpenShard(shard.ShardOptions{Dir: dir, Backend: kv.NewMemory()})
	noErr(t, err)
	_, err = shard.OpenShard(shard.ShardOptions{Dir: dir, Backend: kv.NewMemory()})
	wantErr(t, err, state.ErrLocked, dir, "another process")
	noErr(t, s.Close())
	noErr(t, s.Close()) // idempotent
	s, err = shard.OpenShard(shard.ShardOptions{Dir: dir, Backend: kv.NewMemory()})
	noErr(t, err) // the lock was released
	noErr(t, s.Close())
	_, err = shard.OpenShard(shard.ShardOptions{})
	if err == nil {
		t.Fatal("OpenShard without Dir and Backend succeeded")
	}
}

func TestShardStagingNotInStoreBeforeCommit(t *testing.T) {
	store := kv.NewMemory()
	s, err := shard.OpenShard(shard.ShardOptions{Backend: noClose{store}})
	noErr(t, err)
	defer s.Close()
	var v state.ValueState[string]
	declare(t, s, func() { v = must[state.ValueState[string]](t)(shard.NewValueState(s, "v", state.String())) })
	storeKeys := func() int {
		it := store.NewIter(nil, nil)
		defer it.Close()
		n := 0
		for ok := it.First(); ok; ok = it.Next() {
			n++
		}
		return n
	}
	s.Begin(0)
	s.SetCurrentKey([]byte("k"))
	noErr(t, v.Update("x"))
	if got, ok, _ := v.Get(); !ok || got != "x" {
		t.Fatal("staged write not visible to reads")
	}
	if n := storeKeys(); n != 0 {
		t.Fatalf("store has %d keys before Commit", n)
	}
	recs, err := s.Finish()
	noErr(t, err)
	// The layout entry (a fresh shard's first batch), registry entry, id
	// counter, variable set version, the value.
	if len(recs) != 5 || !slices.IsSortedFunc(recs, func(a, b changelog.Record) int { return bytes.Compare(a.Key, b.Key) }) {
		t.Fatalf("Finish records = %d, sorted=%v", len(recs), slices.IsSortedFunc(recs, func(a, b changelog.Record) int { return bytes.Compare(a.Key, b.Key) }))
	}
	// Records share the staging layer's slices (no copies): the staging
	// layer never modifies a staged value in place, so they stay intact
	// whatever the batch does until Commit.
	want := string(recs[2].Value)
	if n := storeKeys(); n != 0 {
		t.Fatalf("store has %d keys after Finish", n)
	}
	if got, _, _ := v.Get(); got != "x" || string(recs[2].Value) != want {
		t.Fatalf("after Finish: Get %q, record %q", got, recs[2].Value)
	}
	noErr(t, s.Commit(42))
	if n := storeKeys(); n != 7 { // + the local offset and its time
		t.Fatalf("store has %d keys after Commit, want 7", n)
	}
	if s.ChangelogOffset() != 42 {
		t.Fatalf("ChangelogOffset = %d", s.ChangelogOffset())
	}
	s.Begin(0)
	s.SetCurrentKey([]byte("k"))
	if got, _, _ := v.Get(); got != "x" {
		t.Fatalf("Get after commit = %q", got)
	}
	noErr(t, v.Update("y"))
	s.Abort()
	s.Begin(0)
	s.SetCurrentKey([]byte("k"))
	if got, _, _ := v.Get(); got != "x" {
		t.Fatalf("Get after Abort = %q, want x", got)
	}
	s.Abort()
	if st := s.Stats(); st.RowsUpdated != 1 || st.Batches != 1 || st.Aborts != 2 {
		t.Fatalf("Stats = %+v", st)
	}
}

func TestShardBatchMisuse(t *testing.T) {
	s := openMem(t, false)
	var v state.ValueState[int]
	var m state.MapState[int, int]
	declare(t, s, func() {
		v = must[state.ValueState[int]](t)(shard.NewValueState(s, "count", state.Int()))
		m = must[state.MapState[int, int]](t)(shard.NewMapState(s, "seen", state.Int(), state.Int()))
	})
	wantErr(t, v.Update(1), state.ErrNoBatch, `ValueState "count"`, "Update")
	_, _, err := m.GetValue(1)
	wantErr(t, err, state.ErrNoBatch, `MapState "seen"`, "GetValue")
	_, err = s.Finish()
	wantErr(t, err, state.ErrNoBatch, "Finish")
	wantErr(t, s.Commit(1), state.ErrNoBatch, "Commit")
	s.Begin(0)
	wantErr(t, v.Update(1), state.ErrNoKey, `ValueState "count"`, "Update")
	s.SetCurrentKey([]byte("k"))
	wantErr(t, s.Commit(1), shard.ErrNotFinished, "Commit")
	_, err = s.Finish()
	noErr(t, err)
	wantErr(t, v.Update(1), shard.ErrFinished, `ValueState "count"`, "Update")
	wantErr(t, s.Put(changelogfmt.TimerKey(1, []byte("k")), []byte{1}), shard.ErrFinished, "Put")
	if _, _, err := v.Get(); err != nil { // reads after Finish are fine
		t.Fatal(err)
	}
	wantErr(t, s.ApplyChangelog(nil, 0), shard.ErrInBatch, "ApplyChangelog")
	noErr(t, s.Commit(1))
	s.Begin(0)
	s.Begin(0) // Begin inside a batch poisons the batch
	_, err = s.Finish()
	wantErr(t, err, shard.ErrInBatch, "Begin")
	s.Abort()
	s.Begin(0)
	s.SetCurrentKey([]byte("k"))
	wantErr(t, s.Put([]byte{0xff, 'x'}, []byte{1}), nil, "outside the shard key spaces")
	wantErr(t, s.Put(changelogfmt.MetaKey("x"), nil), shard.ErrEmptyValue, "Put")
	wantErr(t, s.PutMeta("x", []byte{}), shard.ErrEmptyValue, "PutMeta")
	s.Abort()
	noErr(t, s.Close())
	wantErr(t, v.Update(1), state.ErrClosed, `ValueState "count"`, "Update")
	_, err = m.Keys()
	wantErr(t, err, state.ErrClosed, `MapState "seen"`, "Keys")
	_, _, err = s.GetMeta("x")
	wantErr(t, err, state.ErrClosed, "GetMeta")
}

func TestDeclarationMisuse(t *testing.T) {
	s := openMem(t, true)
	_, err := shard.NewValueState(s, "late", state.Int())
	wantErr(t, err, state.ErrNotDeclaring, `ValueState "late"`, "NewValueState", "Init")
	wantErr(t, s.DeleteIfExists("late"), state.ErrNotDeclaring, `"late"`, "DeleteIfExists")
	declare(t, s, func() {
		_, err := shard.NewValueState(s, "x", state.Int())
		noErr(t, err)
		_, err = shard.NewListState(s, "x", state.Int())
		wantErr(t, err, state.ErrDuplicate, `ListState "x"`, "NewListState")
		_, err = shard.NewValueState[int](s, "nilcodec", nil)
		wantErr(t, err, nil, `ValueState "nilcodec"`, "nil codec")
		_, err = shard.NewValueState(s, "", state.Int())
		wantErr(t, err, nil, "empty state variable name")
		wantErr(t, s.DeleteIfExists("x"), nil, `"x"`, "declared in this Init")
	})
	// A new Init (e.g. after a restart in the same process) may declare x again.
	declare(t, s, func() {
		_, err := shard.NewValueState(s, "x", state.Int())
		noErr(t, err)
	})
}

func TestKindChangeAcrossRestart(t *testing.T) {
	dir := t.TempDir()
	store := kv.NewMemory()
	open := func() *shard.Shard {
		s, err := shard.OpenShard(shard.ShardOptions{Dir: dir, Backend: noClose{store}})
		noErr(t, err)
		return s
	}
	s := open()
	var v state.ValueState[int]
	declare(t, s, func() { v = must[state.ValueState[int]](t)(shard.NewValueState(s, "total", state.Int())) })
	commit(t, s, nil, 0, func() { s.SetCurrentKey([]byte("a")); noErr(t, v.Update(7)) })
	noErr(t, s.Close())

	s = open()
	declare(t, s, func() {
		_, err := shard.NewListState(s, "total", state.Int())
		wantErr(t, err, state.ErrKindChanged, `ListState "total"`, "NewListState", "was a value state", "now declared as a list state", "DeleteIfExists")
	})
	noErr(t, s.Close())

	// The same declaration keeps the id and the data.
	s = open()
	declare(t, s, func() { v = must[state.ValueState[int]](t)(shard.NewValueState(s, "total", state.Int())) })
	s.Begin(0)
	s.SetCurrentKey([]byte("a"))
	if got, ok, _ := v.Get(); !ok || got != 7 {
		t.Fatalf("after restart Get = %d, %v", got, ok)
	}
	s.Abort()
	noErr(t, s.Close())

	// Dropping it and re-declaring with another kind works, and the old data
	// is gone (tombstoned, new id).
	s = open()
	var l state.ListState[int]
	declare(t, s, func() {
		noErr(t, s.DeleteIfExists("total"))
		noErr(t, s.DeleteIfExists("never-existed"))
		l = must[state.ListState[int]](t)(shard.NewListState(s, "total", state.Int()))
	})
	recs := commit(t, s, nil, 0, func() {})
	tomb := 0
	for _, r := range recs {
		if r.Tombstone() {
			tomb++
		}
	}
	if tomb != 1 { // the value of key "a" (the registry entry is overwritten, not deleted)
		t.Fatalf("DeleteIfExists tombstones = %d in %d records", tomb, len(recs))
	}
	s.Begin(0)
	s.SetCurrentKey([]byte("a"))
	seq, err := l.Get()
	if got := collect(t, seq, err); len(got) != 0 {
		t.Fatalf("re-declared list sees %v", got)
	}
	s.Abort()
	vars, err := s.Variables()
	noErr(t, err)
	if len(vars) != 1 || vars[0].Name != "total" || vars[0].Kind != "list" || vars[0].ID != 2 || vars[0].Schema != "int" {
		t.Fatalf("Variables = %+v", vars)
	}
	noErr(t, s.Close())
}

func TestDeleteIfExistsRemovesTTLIndex(t *testing.T) {
	s := openMem(t, true)
	var m state.MapState[string, string]
	declare(t, s, func() {
		m = must[state.MapState[string, string]](t)(shard.NewMapState(s, "m", state.String(), state.String(), state.WithTTL(time.Hour)))
	})
	commit(t, s, nil, 0, func() {
		for _, k := range []string{"a", "b", "c"} {
			s.SetCurrentKey([]byte(k))
			noErr(t, m.UpdateValue("x", "1"))
			noErr(t, m.UpdateValue("y", "2"))
		}
	})
	declare(t, s, func() { noErr(t, s.DeleteIfExists("m")) })
	commit(t, s, nil, 0, func() {})
	for _, k := range []changelog.Kind{changelog.KindState, changelog.KindTTL} {
		if n := countKind(t, s, k); n != 0 {
			t.Fatalf("%d %v entries left after DeleteIfExists", n, k)
		}
	}
	vars, _ := s.Variables()
	if len(vars) != 0 {
		t.Fatalf("registry after DeleteIfExists: %+v", vars)
	}
}

func TestDeclarationsSurviveAbort(t *testing.T) {
	// Declarations are staged until a Commit: an aborted first batch must
	// not lose the registry entry the variable's id depends on.
	s := openMem(t, false)
	var v state.ValueState[int]
	declare(t, s, func() { v = must[state.ValueState[int]](t)(shard.NewValueState(s, "v", state.Int())) })
	s.Begin(0)
	s.SetCurrentKey([]byte("k"))
	noErr(t, v.Update(1))
	s.Abort()
	recs := commit(t, s, nil, 0, func() {})
	if len(recs) != 4 {
		t.Fatalf("first committed batch has %d records, want the layout entry + registry + id counter + variable set version", len(recs))
	}
	vars, _ := s.Variables()
	if len(vars) != 1 || vars[0].Name != "v" {
		t.Fatalf("Variables = %+v", vars)
	}
	// Restore after declaring is refused: it could change the ids under the
	// declared variables.
	wantErr(t, s.ApplyChangelog(nil, 0), shard.ErrRestoreAfterDeclare, "ApplyChangelog", "before Init")
	wantErr(t, s.Wipe(), shard.ErrRestoreAfterDeclare, "Wipe")
}

func TestMetaStaging(t *testing.T) {
	s := openMem(t, false)
	noErr(t, s.PutMeta("mode", []byte("processing"))) // outside a batch: kept until Commit
	s.Begin(0)
	noErr(t, s.PutMeta("batch", []byte("1")))
	s.Abort()
	if v, ok, _ := s.GetMeta("mode"); !ok || string(v) != "processing" {
		t.Fatalf("meta mode after Abort = %q, %v", v, ok)
	}
	if _, ok, _ := s.GetMeta("batch"); ok {
		t.Fatal("meta written in an aborted batch survived")
	}
	// Staged metadata does not block a restore (declarations do) and stays
	// staged over the restored store.
	noErr(t, s.ApplyChangelog([]changelog.Record{{Key: changelogfmt.MetaKey("mode"), Value: []byte("old")}}, 1))
	if v, _, _ := s.GetMeta("mode"); string(v) != "processing" {
		t.Fatalf("meta mode after restore = %q", v)
	}
	recs := commit(t, s, nil, 0, func() {})
	if len(recs) != 2 || !bytes.Equal(recs[0].Key, changelogfmt.MetaKey(changelog.LayoutMeta)) || !bytes.Equal(recs[1].Key, changelogfmt.MetaKey("mode")) {
		t.Fatalf("records = %+v, want the layout entry and mode", recs)
	}
}

func TestApplyChangelogAndWipe(t *testing.T) {
	// Build a changelog with a source shard, restore it into a fresh one
	// (twice: idempotent), compare, then Wipe.
	src := openMem(t, true)
	var l log
	var v state.ValueState[string]
	var li state.ListState[int]
	declare(t, src, func() {
		v = must[state.ValueState[string]](t)(shard.NewValueState(src, "v", state.String(), state.WithTTL(time.Hour)))
		li = must[state.ListState[int]](t)(shard.NewListState(src, "l", state.Int()))
	})
	commit(t, src, &l, 0, func() {
		src.SetCurrentKey([]byte("a"))
		noErr(t, v.Update("1"))
		noErr(t, li.AppendList([]int{1, 2, 3}))
	})
	commit(t, src, &l, 10, func() {
		src.SetCurrentKey([]byte("a"))
		noErr(t, v.Update("2"))
		noErr(t, li.Put([]int{9}))
	})
	dump := func(s *shard.Shard) []string {
		var out []string
		noErr(t, s.Scan(nil, nil, func(k, val []byte) bool { out = append(out, string(k)+"="+string(val)); return true }))
		return out
	}
	dst := openMem(t, true)
	noErr(t, dst.ApplyChangelog(l.recs, l.next()))
	noErr(t, dst.ApplyChangelog(l.recs, l.next()))
	noErr(t, dst.ApplyChangelog(l.recs[3:], l.next())) // a tail again
	if a, b := dump(src), dump(dst); !slices.Equal(a, b) {
		t.Fatalf("restored shard differs:\n%q\n%q", a, b)
	}
	if dst.ChangelogOffset() != l.next() {
		t.Fatalf("offset = %d, want %d", dst.ChangelogOffset(), l.next())
	}
	if st := dst.Stats(); st.RestoredRecords != int64(2*len(l.recs)+len(l.recs)-3) {
		t.Fatalf("RestoredRecords = %d", st.RestoredRecords)
	}
	noErr(t, dst.Wipe())
	if got := dump(dst); len(got) != 0 || dst.ChangelogOffset() != 0 {
		t.Fatalf("after Wipe: %q, offset %d", got, dst.ChangelogOffset())
	}
	bad := []changelog.Record{{Key: []byte("\xffoffset"), Value: []byte{1}}}
	wantErr(t, dst.ApplyChangelog(bad, 1), state.ErrCorrupt, "ApplyChangelog", "outside the shard key spaces")
}

func TestShardOnRocksDB(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "shard")
	s, err := shard.OpenShard(shard.ShardOptions{Dir: dir})
	noErr(t, err)
	_, err = shard.OpenShard(shard.ShardOptions{Dir: dir})
	wantErr(t, err, state.ErrLocked, dir)
	var m state.MapState[int64, string]
	declare(t, s, func() {
		m = must[state.MapState[int64, string]](t)(shard.NewMapState(s, "m", state.Int64(), state.String()))
	})
	commit(t, s, nil, 0, func() {
		s.SetCurrentKey([]byte("k"))
		for _, k := range []int64{3, -1, 2} {
			noErr(t, m.UpdateValue(k, "v"))
		}
	})
	off := s.ChangelogOffset()
	noErr(t, s.Close())
	s, err = shard.OpenShard(shard.ShardOptions{Dir: dir})
	noErr(t, err)
	defer s.Close()
	if s.ChangelogOffset() != off || off == 0 {
		t.Fatalf("offset after reopen = %d, want %d", s.ChangelogOffset(), off)
	}
	declare(t, s, func() {
		m = must[state.MapState[int64, string]](t)(shard.NewMapState(s, "m", state.Int64(), state.String()))
	})
	s.Begin(0)
	s.SetCurrentKey([]byte("k"))
	keys, err := m.Keys()
	if got := collect(t, keys, err); !slices.Equal(got, []int64{-1, 2, 3}) {
		t.Fatalf("keys after reopen = %v", got)
	}
	s.Abort()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil && !errors.Is(err, state.ErrClosed) {
		t.Fatal(err)
	}
}

// Shards opened with one kv.SharedMemory charge their RocksDB memtables to
// that one budget, and the budget may be closed after them.
func TestShardsShareMemory(t *testing.T) {
	if !kv.RocksDBAvailable {
		t.Skip("RocksDB is not compiled into this build; the memtable budget is RocksDB's")
	}
	mem, err := kv.NewSharedMemory(8 << 20)
	noErr(t, err)
	var shards []*shard.Shard
	var usage []int64
	for range 2 {
		s, err := shard.OpenShard(shard.ShardOptions{Dir: filepath.Join(t.TempDir(), "shard"), Memory: mem, StoreBackend: kv.BackendRocksDB})
		noErr(t, err)
		shards = append(shards, s)
		noErr(t, s.PutMeta("m", []byte("v")))
		s.Begin(0)
		_, err = s.Finish()
		noErr(t, err)
		noErr(t, s.Commit(1))
		usage = append(usage, mem.MemtableUsage())
	}
	if usage[0] <= 0 || usage[1] <= usage[0] {
		t.Errorf("shared memtable usage after each shard's commit = %v, want > 0 and growing", usage)
	}
	for _, s := range shards {
		noErr(t, s.Close())
	}
	mem.Close()
}

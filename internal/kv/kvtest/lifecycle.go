package kvtest

import (
	"errors"
	"path/filepath"
	"slices"
	"testing"

	"github.com/kstate/kstate/internal/kv"
)

func testClosed(t *testing.T, open Opener) {
	s := open(t, t.TempDir())
	put(t, s, "a", "1", "b", "2")
	it := s.NewIter(nil, nil)
	if !it.First() {
		t.Fatal("First on non-empty store")
	}
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	// An iterator left open across Close must fail cleanly, not crash.
	if it.Next() || it.Valid() {
		t.Fatal("iterator still moves after its store closed")
	}
	if err := it.Error(); !errors.Is(err, kv.ErrClosed) {
		t.Fatalf("iterator Error after store Close = %v, want kv.ErrClosed", err)
	}
	_ = it.Close()
	_ = it.Close()

	if _, _, err := s.Get(b("a")); !errors.Is(err, kv.ErrClosed) {
		t.Fatalf("Get after Close: %v, want kv.ErrClosed", err)
	}
	var bt kv.Batch
	bt.Put(b("c"), b("3"))
	if err := s.Write(&bt, kv.WriteOptions{}); !errors.Is(err, kv.ErrClosed) {
		t.Fatalf("Write after Close: %v, want kv.ErrClosed", err)
	}
	if err := s.Checkpoint(filepath.Join(t.TempDir(), "cp")); !errors.Is(err, kv.ErrClosed) {
		t.Fatalf("Checkpoint after Close: %v, want kv.ErrClosed", err)
	}
	it = s.NewIter(nil, nil)
	if it.First() || it.SeekGE(b("a")) {
		t.Fatal("iterator created after Close moved")
	}
	if err := it.Error(); !errors.Is(err, kv.ErrClosed) {
		t.Fatalf("Error of iterator created after Close = %v, want kv.ErrClosed", err)
	}
	_ = it.Close()
}

func testReopen(t *testing.T, open Opener) {
	dir := t.TempDir()
	s := open(t, dir)
	m := model{}
	apply := func(o kv.WriteOptions, fill func(*kv.Batch)) {
		var bt kv.Batch
		fill(&bt)
		if err := s.Write(&bt, o); err != nil {
			t.Fatalf("Write: %v", err)
		}
		m.apply(&bt)
	}
	apply(kv.WriteOptions{}, func(bt *kv.Batch) { bt.Put(b("a"), b("1")); bt.Put(b("b"), b("2")) })
	apply(kv.WriteOptions{Sync: true}, func(bt *kv.Batch) { bt.Put(b("c"), b("3")); bt.Delete(b("a")) })
	apply(kv.WriteOptions{DisableWAL: true}, func(bt *kv.Batch) { bt.Put(b("d"), b("4")); bt.Put(b("e"), []byte{}) })
	apply(kv.WriteOptions{DisableWAL: true}, func(bt *kv.Batch) { bt.DeleteRange(b("b"), b("c")) })
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	for round := range 2 {
		s = open(t, dir)
		m.check(t, s)
		apply(kv.WriteOptions{}, func(bt *kv.Batch) { bt.Put([]byte{'r', byte(round)}, b("x")) })
		if err := s.Close(); err != nil {
			t.Fatalf("Close: %v", err)
		}
	}
	s = open(t, dir)
	defer s.Close()
	m.check(t, s)
}

func testCheckpoint(t *testing.T, open Opener) {
	s := open(t, t.TempDir())
	defer s.Close()
	put(t, s, "a", "1", "b", "2")
	// WAL-less writes (restore) must be in the checkpoint too.
	write(t, s, kv.WriteOptions{DisableWAL: true}, func(bt *kv.Batch) { bt.Put(b("c"), b("3")); bt.Delete(b("b")) })
	cp := filepath.Join(t.TempDir(), "cp")
	if err := s.Checkpoint(cp); err != nil {
		t.Fatalf("Checkpoint: %v", err)
	}
	// Changes after the checkpoint must not leak into it.
	put(t, s, "a", "changed", "z", "late")
	if err := s.Checkpoint(cp); err == nil {
		t.Fatal("Checkpoint into an existing directory succeeded; it must refuse to clobber")
	}
	c := open(t, cp)
	defer c.Close()
	want := []pair{{"a", "1"}, {"c", "3"}}
	if got := scan(t, c, nil, nil); !slices.Equal(got, want) {
		t.Fatalf("checkpoint holds %q, want %q", got, want)
	}
	wantGet(t, s, "a", "changed", true) // the source is untouched by reading the checkpoint
	// The checkpoint is an independent store.
	put(t, c, "only-in-checkpoint", "1")
	wantGet(t, s, "only-in-checkpoint", "", false)
}

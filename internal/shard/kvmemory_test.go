package shard_test

import (
	"bytes"
	"path/filepath"
	"testing"

	"github.com/kstate/kstate/internal/kv"
	"github.com/kstate/kstate/internal/kv/kvtest"
)

// The memory backend lives in internal/kv (memory.go) but its tests live here,
// next to the code that relies on it, so internal/kv's own tests stay with the
// RocksDB backend's owner.
func TestMemoryConformance(t *testing.T) {
	kvtest.RunConformance(t, func(t *testing.T, dir string) kv.Store { return kv.NewMemory() })
}

func TestMemoryCheckpointRoundTrip(t *testing.T) {
	s := kv.NewMemory()
	defer s.Close()
	var b kv.Batch
	b.Put([]byte("a"), []byte("1"))
	b.Put([]byte{0xff, 0}, []byte{})
	b.Put([]byte("b"), bytes.Repeat([]byte{7}, 300))
	if err := s.Write(&b, kv.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "cp")
	if err := s.Checkpoint(dir); err != nil {
		t.Fatal(err)
	}
	if err := s.Checkpoint(dir); err == nil {
		t.Fatal("Checkpoint into an existing directory succeeded")
	}
	c, err := kv.LoadMemoryCheckpoint(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	it := c.NewIter(nil, nil)
	defer it.Close()
	var got []string
	for ok := it.First(); ok; ok = it.Next() {
		got = append(got, string(it.Key())+"="+string(it.Value()))
	}
	want := []string{"a=1", "b=" + string(bytes.Repeat([]byte{7}, 300)), "\xff\x00="}
	if len(got) != len(want) {
		t.Fatalf("checkpoint holds %q, want %q", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("entry %d = %q, want %q", i, got[i], want[i])
		}
	}
	if _, err := kv.LoadMemoryCheckpoint(t.TempDir()); err == nil {
		t.Fatal("LoadMemoryCheckpoint of an empty directory succeeded")
	}
}

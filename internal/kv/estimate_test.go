package kv

import (
	"errors"
	"testing"
)

func TestEstimate(t *testing.T) {
	rocks, err := OpenRocksDB(t.TempDir(), RocksOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for name, s := range map[string]Store{"memory": NewMemory(), "rocksdb": rocks} {
		var b Batch
		for _, k := range []string{"a", "b", "c"} {
			b.Put([]byte(k), []byte("value"))
		}
		if err := s.Write(&b, WriteOptions{}); err != nil {
			t.Fatal(err)
		}
		e, err := s.Estimate()
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		// RocksDB estimates the memtable's keys, not its bytes.
		if e.Keys != 3 || (name == "memory" && e.LiveDataBytes != 18) {
			t.Errorf("%s: estimate %+v, want 3 keys", name, e)
		}
		s.Close()
		if _, err := s.Estimate(); err == nil || (name == "rocksdb" && !errors.Is(err, ErrClosed)) {
			t.Errorf("%s: estimate after Close: %v", name, err)
		}
	}
}

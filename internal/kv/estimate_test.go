package kv

import (
	"encoding/binary"
	"errors"
	"math/rand/v2"
	"path/filepath"
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
		if e.Entries != 3 || (name == "memory" && e.Bytes != 18) {
			t.Errorf("%s: estimate %+v, want 3 keys", name, e)
		}
		s.Close()
		if _, err := s.Estimate(); err == nil || (name == "rocksdb" && !errors.Is(err, ErrClosed)) {
			t.Errorf("%s: estimate after Close: %v", name, err)
		}
	}
}

// TestEstimateBytesBeforeCompaction: the size estimate counts the data
// wherever it is, memtable or tables, before any compaction. RocksDB's
// estimate-live-data-size, used before, said 0 for a store whose data was
// all in the memtable (and 1,175 bytes for 375k entries, issue #25).
func TestEstimateBytesBeforeCompaction(t *testing.T) {
	rocks, err := OpenRocksDB(t.TempDir(), RocksOptions{})
	if err != nil {
		t.Fatal(err)
	}
	peb, err := OpenPebble(t.TempDir(), PebbleOptions{})
	if err != nil {
		t.Fatal(err)
	}
	const n, valueLen = 20_000, 100
	raw := int64(n * (8 + valueLen))
	rng := rand.New(rand.NewPCG(1, 2)) // random values: compression cannot shrink them
	for name, s := range map[string]Store{"rocksdb": rocks, "pebble": peb} {
		var b Batch
		for i := range n {
			v := make([]byte, valueLen)
			for j := range v {
				v[j] = byte(rng.Uint32())
			}
			b.Put(binary.BigEndian.AppendUint64(nil, uint64(i)), v)
		}
		if err := s.Write(&b, WriteOptions{}); err != nil {
			t.Fatal(err)
		}
		check := func(when string) {
			e, err := s.Estimate()
			if err != nil {
				t.Fatalf("%s %s: %v", name, when, err)
			}
			// Pebble counts the memory its memtables allocated, which is
			// more than the data they hold.
			if e.Bytes < raw/2 || (name == "rocksdb" && e.Bytes > 4*raw) {
				t.Errorf("%s %s: %d bytes estimated for %d bytes of entries", name, when, e.Bytes, raw)
			}
			if name == "rocksdb" && (e.Entries < n/2 || e.Entries > 2*n) {
				t.Errorf("%s %s: %d entries estimated for %d", name, when, e.Entries, n)
			}
		}
		check("in the memtable")
		// A RocksDB checkpoint flushes the memtable into a table (not
		// compacted).
		if err := s.Checkpoint(filepath.Join(t.TempDir(), "cp")); err != nil {
			t.Fatal(err)
		}
		check("flushed")
		s.Close()
	}
}

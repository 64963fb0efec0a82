package kv_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/kstate/kstate/internal/kv"
)

// TestTombstoneDenseFilesCompacted: a file that holds nothing but the
// deletions of the entries of an older file (a key space emptied: fired
// timers, closed sessions) is compacted with it by itself, so scans stop
// stepping over the deletions. Without deletion-triggered compaction the
// two files stay until enough other files pile up, and every scan over
// their range pays for it.
func TestTombstoneDenseFilesCompacted(t *testing.T) {
	for _, backend := range []kv.Backend{kv.BackendRocksDB, kv.BackendPebble} {
		t.Run(string(backend), func(t *testing.T) {
			if backend == kv.BackendRocksDB && !kv.RocksDBAvailable {
				t.Skip("RocksDB is not compiled in")
			}
			dir := t.TempDir()
			s, err := kv.OpenBackend(backend, dir, nil, false)
			if err != nil {
				t.Fatal(err)
			}
			const n = 20_000
			var b kv.Batch
			for i := range n {
				b.Put([]byte(fmt.Sprintf("t%06d", i)), []byte("a timer index entry"))
			}
			if err := s.Write(&b, kv.WriteOptions{}); err != nil {
				t.Fatal(err)
			}
			// Reopening flushes the memtable: the entries are in a file.
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			if s, err = kv.OpenBackend(backend, dir, nil, false); err != nil {
				t.Fatal(err)
			}
			b.Reset()
			for i := range n {
				b.Delete([]byte(fmt.Sprintf("t%06d", i)))
			}
			b.Put([]byte("z"), []byte("the next live key"))
			if err := s.Write(&b, kv.WriteOptions{}); err != nil {
				t.Fatal(err)
			}
			// Reopening flushes the deletions (and the key z) into a
			// second file, over the first.
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			if s, err = kv.OpenBackend(backend, dir, nil, false); err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			skipped := func() uint64 {
				it := s.NewIter(nil, nil)
				defer it.Close()
				if !it.First() || string(it.Key()) != "z" {
					t.Fatalf("First = %q, %v; want z", it.Key(), it.Error())
				}
				return it.DeletesSkipped()
			}
			first := skipped()
			deadline := time.Now().Add(20 * time.Second)
			for {
				got := skipped()
				if got < n/100 {
					t.Logf("a scan stepped over %d deleted entries right after the reopen, %d now", first, got)
					return
				}
				if time.Now().After(deadline) {
					t.Fatalf("a scan still steps over %d deleted entries 20 s after the reopen (first %d): the tombstone-dense file was not compacted", got, first)
				}
				time.Sleep(50 * time.Millisecond)
			}
		})
	}
}

//go:build cgo && !kstate_nocgo

package kv

import "fmt"

// FlushForTest writes a RocksDB store's memtable to a table file.
func FlushForTest(s Store) error {
	r, ok := s.(*rocksStore)
	if !ok {
		return fmt.Errorf("FlushForTest: %T is not a RocksDB store", s)
	}
	return r.db.Flush(r.fo)
}

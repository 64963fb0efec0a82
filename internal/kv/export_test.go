package kv

import (
	"context"
	"fmt"
)

// MaxMemtableFilters is maxMemtableFilters, for package kv_test.
const MaxMemtableFilters = maxMemtableFilters

// PebbleCompactForTest writes a Pebble store's memtable to a table and
// compacts every table to the bottom level.
func PebbleCompactForTest(s Store) error {
	p, ok := s.(*pebbleStore)
	if !ok {
		return fmt.Errorf("PebbleCompactForTest: %T is not a Pebble store", s)
	}
	if err := p.db.Flush(); err != nil {
		return err
	}
	return p.db.Compact(context.Background(), []byte{0}, []byte{0xff}, true)
}

// PebbleBlockCacheForTest returns a Pebble store's block cache metrics:
// bytes held, hits and misses.
func PebbleBlockCacheForTest(s Store) (size, hits, misses int64, err error) {
	p, ok := s.(*pebbleStore)
	if !ok {
		return 0, 0, 0, fmt.Errorf("PebbleBlockCacheForTest: %T is not a Pebble store", s)
	}
	m := p.db.Metrics().BlockCache
	return m.Size, m.Hits, m.Misses, nil
}

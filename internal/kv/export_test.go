package kv

import (
	"context"
	"fmt"

	"github.com/cockroachdb/pebble/v2"
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

// PebbleFlushCompressionForTest writes a Pebble store's memtable to a
// table and returns the compression of the newest table.
func PebbleFlushCompressionForTest(s Store) (string, error) {
	p, ok := s.(*pebbleStore)
	if !ok {
		return "", fmt.Errorf("PebbleFlushCompressionForTest: %T is not a Pebble store", s)
	}
	if err := p.db.Flush(); err != nil {
		return "", err
	}
	levels, err := p.db.SSTables(pebble.WithProperties())
	if err != nil {
		return "", err
	}
	var newest *pebble.SSTableInfo
	for _, l := range levels {
		for i := range l {
			if newest == nil || l[i].FileNum > newest.FileNum {
				newest = &l[i]
			}
		}
	}
	if newest == nil || newest.Properties == nil {
		return "", fmt.Errorf("PebbleFlushCompressionForTest: no table")
	}
	return newest.Properties.CompressionName, nil
}

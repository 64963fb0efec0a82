//go:build cgo && !kstate_nocgo

package kv_test

import (
	"testing"

	"github.com/kstate/kstate/internal/kv"
)

// TestRocksGetSorted checks MultiGetter against Get on one store: keys
// present, absent and deleted, in the memtable and in tables, an empty
// value and values larger than the first buffer (the retry).
func TestRocksGetSorted(t *testing.T) {
	s := rocksOpener(kv.RocksOptions{})(t, t.TempDir())
	const n = 3000
	fillForGetSorted(t, s, n, func() error { return kv.FlushForTest(s) })
	checkGetSorted(t, s, n)
}

//go:build cgo && !kstate_nocgo

package kv

// #include <rocksdb/c.h>
// void kstate_rocksdb_set_insert_hints(rocksdb_options_t* opts);
import "C"

import (
	"fmt"

	"github.com/linxGnu/grocksdb"
)

// setInsertHints makes the store's memtables keep, per first key byte, the
// place of the last insert of a key with that byte, and start the next such
// insert from there (RocksDB's memtable_insert_with_hint_prefix_extractor,
// with the prefix of inserthint.cc). See RocksOptions.InsertHints.
//
// Why: the shard writes its keys in key order (a write-behind flush, a
// restore batch, a commit: rocksdb_sort.go sorts every batch without a
// range deletion), so each key's place in the memtable's skip list is
// usually a few nodes after the previous key's. RocksDB's own sequential
// insert shortcut helps only when no node lies in between; otherwise every
// insert searches the skip list from its top, and on the heavy benchmark
// those searches' key comparisons were a quarter of the process's CPU
// (docs/BENCHMARKS.md, "The memtable insert hint"). With the hint an
// insert costs O(log d) comparisons for d nodes between it and the hinted
// place. RocksDB keeps a hint of ~250 bytes per prefix and memtable, and
// ignores hints in concurrent memtable writes, which a store never makes
// (its writers are serialised by rocksStore.w).
func setInsertHints(o *grocksdb.Options) {
	C.kstate_rocksdb_set_insert_hints(optionsHandle(o))
}

// checkHintedRange refuses a range deletion a store with insert hints must
// not write: one whose start key has a hint (not empty and not starting
// with 0x00). RocksDB 7.8 shares a memtable's hints between its point and
// range-deletion skip lists, and a hint used on the wrong list corrupts it.
func checkHintedRange(start []byte) error {
	if len(start) > 0 && start[0] != 0 {
		return fmt.Errorf("%w: DeleteRange from %x on a store with InsertHints (the start must be empty or begin with 0x00)", ErrInvalidOptions, start)
	}
	return nil
}

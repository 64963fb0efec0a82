//go:build cgo && !kstate_nocgo

package kv

import (
	"bytes"
	"cmp"
	"slices"
)

// Why sort: RocksDB inserts a batch into the memtable, a skip list, one
// key at a time, and most of a write's CPU is the search for each key's
// place (InlineSkipList::FindSpliceForLevel: ~60% of a restore's CPU, in
// cache misses). The skip list keeps the place of the previous insert and
// only searches again from the level where the next key leaves it, so keys
// inserted in order cost a fraction of keys in random order. A batch is
// applied atomically and a later operation on a key replaces an earlier
// one, so writing only each key's last operation, in key order, leaves
// exactly the same store (and the same state after a crash: the batch is
// one WAL record either way). Fewer operations also means fewer memtable
// entries: restore batches repeat hot keys.

// maxKeptOrder bounds the order slice a store keeps between writes.
const maxKeptOrder = 16 << 10

// inKeyOrder reports whether ops are puts and deletes in strictly
// increasing key order: written as they are.
func inKeyOrder(ops []Op) bool {
	for i, op := range ops {
		if op.Kind != OpPut && op.Kind != OpDelete {
			return false
		}
		if i > 0 && bytes.Compare(ops[i-1].Key, op.Key) >= 0 {
			return false
		}
	}
	return true
}

// sortedLast returns the indices of the operations of ops to write, in key
// order, keeping only the last operation on each key. It returns false when
// the batch cannot be reordered: a DeleteRange (its effect depends on the
// puts before and after it) or an unknown kind (the ordered path reports
// it). order is reused as the result's storage.
func sortedLast(ops []Op, order []int32) ([]int32, bool) {
	order = order[:0]
	inOrder := true // strictly increasing keys already: nothing to sort or drop
	for i, op := range ops {
		if op.Kind != OpPut && op.Kind != OpDelete {
			return order, false
		}
		if i > 0 && inOrder && bytes.Compare(ops[i-1].Key, op.Key) >= 0 {
			inOrder = false
		}
		order = append(order, int32(i))
	}
	if inOrder {
		return order, true
	}
	// Ties broken by position make the order total: the last operation on
	// a key comes last among its equals.
	slices.SortFunc(order, func(a, b int32) int {
		if c := bytes.Compare(ops[a].Key, ops[b].Key); c != 0 {
			return c
		}
		return cmp.Compare(a, b)
	})
	out := order[:0]
	for j, i := range order {
		if j+1 < len(order) && bytes.Equal(ops[i].Key, ops[order[j+1]].Key) {
			continue // a later operation on the same key follows
		}
		out = append(out, i)
	}
	return out, true
}

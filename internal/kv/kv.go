// Package kv is the ordered key-value store interface behind a state shard,
// with a RocksDB backend and an in-memory backend. State variables never
// talk to a backend directly: they go through the shard's staging layer,
// so a new backend only has to pass the conformance suite in kvtest.
package kv

import (
	"fmt"
	"slices"
)

// Store is an ordered byte-key store. Implementations must be safe for one
// writer and concurrent readers.
type Store interface {
	// Get returns a copy of the value of key, and whether it exists.
	Get(key []byte) (value []byte, ok bool, err error)
	// NewIter returns an iterator over keys in [lower, upper); a nil bound is unbounded.
	NewIter(lower, upper []byte) Iterator
	// Write applies the batch atomically: after a crash either all or none of it is visible.
	Write(b *Batch, o WriteOptions) error
	// Checkpoint writes a consistent, openable copy of the store into dir (which must not exist).
	Checkpoint(dir string) error
	// Estimate returns the store's estimated size, for metrics (cheap,
	// approximate; see Estimate); the memory store counts exactly (O(n):
	// tests only).
	Estimate() (Estimate, error)
	// Close releases the store; it is idempotent.
	Close() error
}

// OrderedWriter is implemented by stores that can write a batch of puts
// and deletes given by a walk instead of a Batch: a write-behind flush
// writes thousands of entries it already holds in key order, and a Batch
// of them held 80 bytes of operation per entry on the Go heap for the
// write (docs/BENCHMARKS.md, "Flushes without a Batch").
type OrderedWriter interface {
	// WriteOrdered applies the operations walk passes to add, in one atomic
	// write as Write does. walk is called twice (to size the write, then to
	// fill it) and must pass the same operations both times, in strictly
	// increasing key order; otherwise nothing is written and the error
	// wraps ErrInvalidOptions. value is ignored for a delete.
	WriteOrdered(walk func(add func(key, value []byte, deleted bool)), o WriteOptions) error
}

// MultiGetter is implemented by stores that look many keys up at once for
// less than a Get each: RocksDB's batched MultiGet shares the work of keys
// that meet in the same memtable, filter, index or data block.
type MultiGetter interface {
	// GetSorted looks keys up (in strictly increasing order) and calls fn
	// for each, in order, with its value and whether it exists; value is
	// only valid during the call. It skips (does not call fn for) the keys
	// whose values would take the values passed past limit bytes in all:
	// read those with Get.
	GetSorted(keys [][]byte, limit int, fn func(i int, value []byte, ok bool)) error
}

// WriteOptions tune one Write.
type WriteOptions struct {
	// Sync fsyncs the write-ahead log before returning.
	Sync bool
	// DisableWAL skips the write-ahead log (safe for restore: the changelog is the log).
	DisableWAL bool
}

// check rejects contradictory options.
func (o WriteOptions) check() error {
	if o.Sync && o.DisableWAL {
		return fmt.Errorf("%w: Sync with DisableWAL (nothing to sync)", ErrInvalidOptions)
	}
	return nil
}

// Iterator walks keys in ascending order. Key and Value are valid until the
// next positioning call.
type Iterator interface {
	First() bool
	Last() bool
	Next() bool
	Prev() bool
	SeekGE(key []byte) bool
	SeekLT(key []byte) bool
	Valid() bool
	Key() []byte
	Value() []byte
	Error() error
	Close() error
	// SetBounds changes the iterator's range to [lower, upper) (a nil
	// bound is open; the slices are copied) and unpositions it: the next
	// call must be a seek (First, Last, SeekGE, SeekLT). It is how one
	// iterator serves many small scans: the store seeks within the bounds,
	// so a scan of an empty range stops at its upper bound instead of
	// stepping over every deleted entry up to the next live key. Changing
	// a bound's value keeps the iterator's view of the store; on RocksDB,
	// adding or removing the upper bound (nil to non-nil or back) reads the
	// store as it is then.
	SetBounds(lower, upper []byte)
	// DeletesSkipped is how many deleted entries the store stepped over
	// for this iterator since it was created: RocksDB's point tombstones
	// (its perf context's internal_delete_skipped_count); on Pebble every
	// internal entry it visited without returning it (tombstones and
	// superseded versions); 0 for the memory store, which keeps none.
	DeletesSkipped() uint64
}

// OpKind is the kind of one batch operation.
type OpKind uint8

const (
	OpPut OpKind = iota
	OpDelete
	OpDeleteRange // deletes [Key, End)
)

// Op is one batch operation.
type Op struct {
	Kind  OpKind
	Key   []byte
	Value []byte
	End   []byte
}

// Batch collects operations applied atomically by Store.Write, in order.
type Batch struct{ ops []Op }

// Put sets key to value. The batch keeps the slices: do not modify them afterwards.
func (b *Batch) Put(key, value []byte) {
	b.ops = append(b.ops, Op{Kind: OpPut, Key: key, Value: value})
}

// Delete removes key.
func (b *Batch) Delete(key []byte) { b.ops = append(b.ops, Op{Kind: OpDelete, Key: key}) }

// DeleteRange removes every key in [start, end).
func (b *Batch) DeleteRange(start, end []byte) {
	b.ops = append(b.ops, Op{Kind: OpDeleteRange, Key: start, End: end})
}

// Grow makes room for n more operations without reallocating.
func (b *Batch) Grow(n int) { b.ops = slices.Grow(b.ops, n) }

// Len is the number of operations.
func (b *Batch) Len() int { return len(b.ops) }

// Ops returns the operations in order.
func (b *Batch) Ops() []Op { return b.ops }

// Reset empties the batch for reuse.
func (b *Batch) Reset() { b.ops = b.ops[:0] }

// Estimate is a store's estimated size (Store.Estimate).
//
// Bytes is the size of the store's tables plus its memtables: RocksDB's
// live-sst-files-size + cur-size-all-mem-tables; Pebble's tables + the
// memory its memtables allocated (more than the data they hold). It counts overwritten and deleted entries until compaction drops
// them, and the tables compressed. (RocksDB's estimate-live-data-size, used
// before, ignores the memtables and most of the data before compaction:
// 1,175 bytes for 375k entries, issue #25.)
//
// Entries is the number of store entries (every state variable's values,
// list and map elements, timers, TTL index entries and kstate's own
// metadata: not grouping keys): RocksDB's estimate-num-keys, which also
// counts overwrites and deletions not compacted yet; -1: unknown (Pebble
// keeps no estimate).
type Estimate struct {
	Bytes   int64
	Entries int64
}

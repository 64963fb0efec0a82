//go:build cgo && !kstate_nocgo

package kv

// #include <stdlib.h>
import "C"

import (
	"bytes"
	"fmt"
	"unsafe"

	"github.com/linxGnu/grocksdb"
)

// NewIter returns an iterator over [lower, upper). The bounds are copied, so
// the caller may reuse its slices at once.
func (s *rocksStore) NewIter(lower, upper []byte) Iterator {
	it := &rocksIter{s: s}
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.mu.closed {
		it.err = fmt.Errorf("%w: new iterator on %s", ErrClosed, s.dir)
		it.closed = true
		return it
	}
	if upper != nil && (len(upper) == 0 || bytes.Compare(lower, upper) >= 0) {
		// Empty range. Worth special-casing: RocksDB treats a zero-length
		// bound as no bound at all.
		it.empty = true
		return it
	}
	it.ro = grocksdb.NewDefaultReadOptions()
	// RocksDB keeps raw pointers to the bound bytes (inside the read options,
	// which the iterator also points at) for the iterator's whole life, so
	// both the bounds and it.ro live until the iterator is destroyed. The
	// bounds are copied into C memory: the caller may reuse its slices, the
	// cgo rules forbid C keeping Go pointers, and a runtime.Pinner would
	// panic at GC if a store were dropped without Close.
	if len(lower) > 0 {
		it.lower = cBytes(lower)
		it.ro.SetIterateLowerBound(it.lower)
	}
	if upper != nil {
		it.upper = cBytes(upper)
		it.ro.SetIterateUpperBound(it.upper)
	}
	it.it = s.db.NewIterator(it.ro)
	s.iters.Lock()
	s.iters.m[it] = struct{}{}
	s.iters.Unlock()
	return it
}

// rocksIter wraps a grocksdb iterator. It is not safe for concurrent use by
// several goroutines (like every iterator), but it is safe against a
// concurrent Close of its store.
type rocksIter struct {
	s            *rocksStore
	it           *grocksdb.Iterator // nil for an empty range, or once destroyed
	ro           *grocksdb.ReadOptions
	lower, upper []byte // in C memory (cBytes), freed by destroy

	empty bool
	iterState
}

// destroy frees the C objects; callers hold s.mu (shared or exclusive).
// The C iterator goes before the read options it points into. It touches
// only fields that step reads under s.mu, because the store's Close calls it
// from another goroutine than the iterator's user.
func (i *rocksIter) destroy() {
	if i.it != nil {
		i.it.Close()
		i.it = nil
		i.ro.Destroy()
		i.ro = nil
		freeCBytes(i.lower)
		freeCBytes(i.upper)
		i.lower, i.upper = nil, nil
	}
}

// cBytes copies b into C memory, returned as a slice over it.
func cBytes(b []byte) []byte {
	p := C.malloc(C.size_t(len(b)))
	c := unsafe.Slice((*byte)(p), len(b))
	copy(c, b)
	return c
}

func freeCBytes(c []byte) {
	if len(c) > 0 {
		C.free(unsafe.Pointer(&c[0]))
	}
}

// step runs one positioning call under the store's read lock and records
// the outcome. Key and value are copied into Go memory at once: callers
// (the shard's merged scan, user callbacks) may keep them, and a copy can
// never point into a freed C iterator.
func (i *rocksIter) step(move func(it *grocksdb.Iterator) bool) bool {
	i.valid, i.key, i.value = false, nil, nil
	if i.closed || i.err != nil {
		return false
	}
	i.s.mu.RLock()
	defer i.s.mu.RUnlock()
	if i.s.mu.closed { // the store's Close destroyed the C iterator
		i.err = fmt.Errorf("%w: iterator used after close of %s", ErrClosed, i.s.dir)
		return false
	}
	if i.empty {
		return false
	}
	if !move(i.it) || !i.it.Valid() {
		if err := i.it.Err(); err != nil {
			i.err = fmt.Errorf("kv: rocksdb iterator: %w", err)
		}
		return false
	}
	k, v := i.it.Key().Data(), i.it.Value().Data()
	buf := make([]byte, len(k)+len(v))
	copy(buf, k)
	copy(buf[len(k):], v)
	i.key, i.value = buf[:len(k):len(k)], buf[len(k):]
	i.valid = true
	return true
}

func (i *rocksIter) First() bool {
	return i.step(func(it *grocksdb.Iterator) bool { it.SeekToFirst(); return true })
}

func (i *rocksIter) Last() bool {
	return i.step(func(it *grocksdb.Iterator) bool { it.SeekToLast(); return true })
}

// Next and Prev on an invalid iterator return false without calling into
// RocksDB, which asserts (or worse, in release builds) on that misuse.
func (i *rocksIter) Next() bool {
	if !i.valid {
		return false
	}
	return i.step(func(it *grocksdb.Iterator) bool { it.Next(); return true })
}

func (i *rocksIter) Prev() bool {
	if !i.valid {
		return false
	}
	return i.step(func(it *grocksdb.Iterator) bool { it.Prev(); return true })
}

func (i *rocksIter) SeekGE(key []byte) bool {
	return i.step(func(it *grocksdb.Iterator) bool {
		if i.upper != nil && bytes.Compare(key, i.upper) >= 0 {
			return false
		}
		if bytes.Compare(key, i.lower) < 0 {
			key = i.lower
		}
		it.Seek(key)
		return true
	})
}

func (i *rocksIter) SeekLT(key []byte) bool {
	return i.step(func(it *grocksdb.Iterator) bool {
		if bytes.Compare(key, i.lower) <= 0 {
			return false
		}
		if i.upper != nil && bytes.Compare(key, i.upper) > 0 {
			key = i.upper
		}
		// SeekForPrev lands on the last key <= key; step back once if it is key itself.
		it.SeekForPrev(key)
		if it.Valid() && bytes.Equal(it.Key().Data(), key) {
			it.Prev()
		}
		return true
	})
}

// Close is idempotent and safe after the store's Close.
func (i *rocksIter) Close() error {
	if i.closed {
		return nil
	}
	i.closed = true
	i.s.mu.RLock()
	defer i.s.mu.RUnlock()
	i.s.iters.Lock()
	delete(i.s.iters.m, i)
	i.s.iters.Unlock()
	i.destroy()
	return i.closeResult()
}

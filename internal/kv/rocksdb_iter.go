//go:build cgo && !kstate_nocgo

package kv

// #include <stdlib.h>
// #include "rocksdb_iter.h"
import "C"

import (
	"bytes"
	"fmt"
	"sync"
	"unsafe"
)

// Why this file has its own C++ (rocksdb_iter.cc): a state-heavy processor
// scans several small ranges per row, and through grocksdb every iterator
// step is four or five cgo crossings (the move, Valid, Key, Value, and Err
// at the end) plus two allocations for the Slice wrappers, and creating an
// iterator with bounds is about eight (read options, C copies of the
// bounds, the iterator). Here creating is one crossing and every step is
// one: the move, and a copy of the key and value into a reused Go buffer.

// iterScratch is the size of an iterator's reused buffer, which the C side
// copies the current key and value into; an entry larger than that takes a
// second crossing into a buffer of its size.
const iterScratch = 4 << 10

// iterBufs recycles the iterators' buffers: short-lived iterators (one
// scan each) would otherwise allocate and clear 4 KiB apiece.
var iterBufs = sync.Pool{New: func() any { return new([iterScratch]byte) }}

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
	// The C side copies the bounds (RocksDB keeps pointers to them for the
	// iterator's life); the Go copies are for the seek clamps below.
	var hasLower, hasUpper C.int
	if len(lower) > 0 {
		it.lower, hasLower = bytes.Clone(lower), 1
	}
	if upper != nil {
		it.upper, hasUpper = bytes.Clone(upper), 1
	}
	it.c = C.kstate_iter_new(dbHandle(s.db), cPtr(lower), C.size_t(len(lower)), hasLower,
		cPtr(upper), C.size_t(len(upper)), hasUpper)
	s.iters.Lock()
	s.iters.m[it] = struct{}{}
	s.iters.Unlock()
	return it
}

// rocksIter is an iterator of rocksdb_iter.cc. It is not safe for
// concurrent use by several goroutines (like every iterator), but it is safe
// against a concurrent Close of its store.
type rocksIter struct {
	s            *rocksStore
	c            *C.kstate_iter     // nil for an empty range, or once destroyed
	lower, upper []byte             // Go copies of the bounds (nil: none)
	buf          *[iterScratch]byte // the C side's copy of the current entry (from iterBufs)

	// Out-parameters of kstate_iter_step, kept here so that passing their
	// address does not allocate on every step.
	klen, vlen C.size_t
	cErr       *C.char

	empty bool
	iterState
}

// destroy frees the C iterator; callers hold s.mu (shared or exclusive).
// It touches only fields that step reads under s.mu, because the store's
// Close calls it from another goroutine than the iterator's user.
func (i *rocksIter) destroy() {
	if i.c != nil {
		C.kstate_iter_free(i.c)
		i.c = nil
	}
}

// step runs one positioning call (op, with key for the seeks) under the
// store's read lock and records the outcome. Key and value are copied into
// one fresh Go slice: callers (the shard's merged scan, user callbacks) may
// keep them, and a copy can never point into a freed C iterator.
func (i *rocksIter) step(op C.int, key []byte) bool {
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
	if i.buf == nil {
		i.buf = iterBufs.Get().(*[iterScratch]byte)
	}
	buf := i.buf[:]
	i.cErr = nil
	r := C.kstate_iter_step(i.c, op, cPtr(key), C.size_t(len(key)),
		(*C.char)(unsafe.Pointer(&buf[0])), C.size_t(len(buf)), &i.klen, &i.vlen, &i.cErr)
	if r == 2 {
		// Larger than the scratch buffer: copy the same entry (no move)
		// into one of its size (+1 so that it is never empty).
		buf = make([]byte, int(i.klen+i.vlen)+1)
		r = C.kstate_iter_step(i.c, C.KSTATE_ITER_CURRENT, nil, 0,
			(*C.char)(unsafe.Pointer(&buf[0])), C.size_t(len(buf)), &i.klen, &i.vlen, &i.cErr)
	}
	if r != 1 {
		if i.cErr != nil {
			i.err = fmt.Errorf("kv: rocksdb iterator: %w", cError(i.cErr))
			i.cErr = nil
		}
		return false
	}
	kl, n := int(i.klen), int(i.klen+i.vlen)
	out := make([]byte, n)
	copy(out, buf[:n])
	i.key, i.value = out[:kl:kl], out[kl:]
	i.valid = true
	return true
}

func (i *rocksIter) First() bool { return i.step(C.KSTATE_ITER_FIRST, nil) }

func (i *rocksIter) Last() bool { return i.step(C.KSTATE_ITER_LAST, nil) }

// Next and Prev on an invalid iterator return false without calling into
// RocksDB, which asserts (or worse, in release builds) on that misuse.
func (i *rocksIter) Next() bool {
	if !i.valid {
		return false
	}
	return i.step(C.KSTATE_ITER_NEXT, nil)
}

func (i *rocksIter) Prev() bool {
	if !i.valid {
		return false
	}
	return i.step(C.KSTATE_ITER_PREV, nil)
}

func (i *rocksIter) SeekGE(key []byte) bool {
	if i.upper != nil && bytes.Compare(key, i.upper) >= 0 {
		i.valid, i.key, i.value = false, nil, nil
		return false
	}
	if bytes.Compare(key, i.lower) < 0 {
		key = i.lower
	}
	return i.step(C.KSTATE_ITER_SEEK_GE, key)
}

func (i *rocksIter) SeekLT(key []byte) bool {
	if bytes.Compare(key, i.lower) <= 0 {
		i.valid, i.key, i.value = false, nil, nil
		return false
	}
	if i.upper != nil && bytes.Compare(key, i.upper) > 0 {
		key = i.upper
	}
	return i.step(C.KSTATE_ITER_SEEK_LT, key)
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
	if i.buf != nil {
		iterBufs.Put(i.buf) // only Close returns it: step runs on the caller's goroutine
		i.buf = nil
	}
	return i.closeResult()
}

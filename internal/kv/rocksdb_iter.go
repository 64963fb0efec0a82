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
// the caller may reuse its slices at once. Both reach RocksDB (its
// iterate_lower_bound and iterate_upper_bound): a seek stops at the bound
// instead of stepping over every deleted entry up to the next live key.
func (s *rocksStore) NewIter(lower, upper []byte) Iterator {
	it := &rocksIter{s: s}
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.mu.closed {
		it.err = fmt.Errorf("%w: new iterator on %s", ErrClosed, s.dir)
		it.closed = true
		return it
	}
	// An empty range is answered in Go (RocksDB treats a zero-length bound
	// as no bound at all), but the C iterator is created all the same: a
	// SetBounds to a non-empty range must see the store as of NewIter.
	it.setBounds(lower, upper)
	it.c = C.kstate_iter_new(dbHandle(s.db), cPtr(it.lower), C.size_t(len(it.lower)),
		cPtr(it.upper), C.size_t(len(it.upper)), cBool(it.hasUpper))
	it.rebound = false
	s.iters.Lock()
	s.iters.m[it] = struct{}{}
	s.iters.Unlock()
	return it
}

func cBool(b bool) C.int {
	if b {
		return 1
	}
	return 0
}

// setBounds records [lower, upper) in the Go copies (reusing their
// buffers), which the C side copies at the next step.
func (i *rocksIter) setBounds(lower, upper []byte) {
	i.lower = append(i.lower[:0], lower...)
	i.hasUpper = upper != nil
	i.upper = append(i.upper[:0], upper...)
	i.rebound = true
	i.empty = upper != nil && (len(upper) == 0 || bytes.Compare(lower, upper) >= 0)
}

// SetBounds changes the range to [lower, upper) and unpositions the
// iterator. The new bounds reach RocksDB with the next seek, in the same cgo
// crossing. Changing a bound keeps the iterator's view of the store; adding
// or removing the upper bound creates a new RocksDB iterator, which reads
// the store as it is then.
func (i *rocksIter) SetBounds(lower, upper []byte) {
	i.valid, i.key, i.value = false, nil, nil
	if i.closed {
		return
	}
	i.setBounds(lower, upper)
}

// DeletesSkipped is the number of deleted entries (point tombstones) the
// iterator stepped over, per RocksDB's perf context.
func (i *rocksIter) DeletesSkipped() uint64 { return uint64(i.skipped) }

// rocksIter is an iterator of rocksdb_iter.cc. It is not safe for
// concurrent use by several goroutines (like every iterator), but it is safe
// against a concurrent Close of its store.
type rocksIter struct {
	s            *rocksStore
	c            *C.kstate_iter     // nil once destroyed
	lower, upper []byte             // Go copies of the bounds (empty lower: none)
	hasUpper     bool               // upper is a bound (else the range is open above)
	rebound      bool               // the bounds changed since the C side last saw them
	buf          *[iterScratch]byte // the C side's copy of the current entry (from iterBufs)

	// Out-parameters of kstate_iter_step, kept here so that passing their
	// address does not allocate on every step.
	klen, vlen C.size_t
	skipped    C.uint64_t
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
	var rebound C.int
	if i.rebound {
		rebound, i.rebound = 1, false
	}
	r := C.kstate_iter_step(i.c, rebound, cPtr(i.lower), C.size_t(len(i.lower)),
		cPtr(i.upper), C.size_t(len(i.upper)), cBool(i.hasUpper),
		op, cPtr(key), C.size_t(len(key)),
		(*C.char)(unsafe.Pointer(&buf[0])), C.size_t(len(buf)), &i.klen, &i.vlen, &i.skipped, &i.cErr)
	if r == 2 {
		// Larger than the scratch buffer: copy the same entry (no move)
		// into one of its size (+1 so that it is never empty).
		buf = make([]byte, int(i.klen+i.vlen)+1)
		r = C.kstate_iter_step(i.c, 0, nil, 0, nil, 0, 0, C.KSTATE_ITER_CURRENT, nil, 0,
			(*C.char)(unsafe.Pointer(&buf[0])), C.size_t(len(buf)), &i.klen, &i.vlen, &i.skipped, &i.cErr)
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
	if i.hasUpper && bytes.Compare(key, i.upper) >= 0 {
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
	if i.hasUpper && bytes.Compare(key, i.upper) > 0 {
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

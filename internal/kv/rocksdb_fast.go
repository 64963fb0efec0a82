//go:build cgo && !kstate_nocgo

package kv

// #include <stdlib.h>
// #include <rocksdb/c.h>
// int kstate_rocksdb_get(rocksdb_t* db, const rocksdb_readoptions_t* ro, const char* key, size_t klen, char* buf, size_t cap, size_t* vlen, char** err);
// void kstate_rocksdb_write(rocksdb_t* db, const rocksdb_writeoptions_t* wo, const char* rep, size_t len, char** err);
// long long kstate_rocksdb_multi_get(rocksdb_t* db, const rocksdb_readoptions_t* ro, size_t n, const char* keys, const size_t* kends, char* buf, size_t cap, size_t limit, long long* vends, char** err);
import "C"

import (
	"encoding/binary"
	"errors"
	"sync"
	"unsafe"

	"github.com/linxGnu/grocksdb"
)

// Why this file: a cgo call costs far more than a Go call, and grocksdb
// spends one per operation. A Get through grocksdb is four crossings
// (GetPinned, Exists, Data, Destroy) and a C malloc; a batch of n puts is
// n+1 crossings. In the count benchmark those crossings were about half of
// the CPU spent in RocksDB. Here a Get is one crossing that copies the value
// into a Go buffer, and a Write is one crossing that hands RocksDB the batch
// already serialized in Go.

// dbHandle, readOptionsHandle and writeOptionsHandle return the C handles
// of grocksdb objects, which keep them in their first field and export no
// accessor (as optionsHandle in infolog.go). TestRocksHandleLayout fails if
// grocksdb's layout changes.
func dbHandle(db *grocksdb.DB) *C.rocksdb_t {
	return *(**C.rocksdb_t)(unsafe.Pointer(db))
}

func readOptionsHandle(o *grocksdb.ReadOptions) *C.rocksdb_readoptions_t {
	return *(**C.rocksdb_readoptions_t)(unsafe.Pointer(o))
}

func writeOptionsHandle(o *grocksdb.WriteOptions) *C.rocksdb_writeoptions_t {
	return *(**C.rocksdb_writeoptions_t)(unsafe.Pointer(o))
}

// cPtr points C at b's bytes (Go memory without Go pointers, which cgo
// lets C read during the call). An empty slice is a null pointer with
// length 0.
func cPtr(b []byte) *C.char {
	if len(b) == 0 {
		return nil
	}
	return (*C.char)(unsafe.Pointer(&b[0]))
}

func cError(cErr *C.char) error {
	err := errors.New(C.GoString(cErr))
	C.free(unsafe.Pointer(cErr))
	return err
}

// getScratch holds what a Get passes to C: the buffer it copies the value
// into before the exact-size copy it returns (4 KiB fits nearly every state
// value; a larger one takes a second lookup into a buffer of its size), and
// the out-parameters, kept here so that taking their address does not
// allocate on every call.
type getScratch struct {
	buf  []byte
	vlen C.size_t
	err  *C.char
}

var getScratchPool = sync.Pool{New: func() any { return &getScratch{buf: make([]byte, 4<<10)} }}

// rocksGet looks key up in one cgo crossing and returns a copy of its value.
func rocksGet(db *grocksdb.DB, ro *grocksdb.ReadOptions, key []byte) ([]byte, bool, error) {
	g := getScratchPool.Get().(*getScratch)
	defer getScratchPool.Put(g)
	buf := g.buf
	for {
		g.err = nil
		r := C.kstate_rocksdb_get(dbHandle(db), readOptionsHandle(ro), cPtr(key), C.size_t(len(key)),
			(*C.char)(unsafe.Pointer(&buf[0])), C.size_t(len(buf)), &g.vlen, &g.err)
		switch r {
		case 0:
			return nil, false, nil
		case 1:
			return append(make([]byte, 0, int(g.vlen)), buf[:g.vlen]...), true, nil
		case 2:
			// Too large for the scratch buffer: read again into one of the
			// value's size (+1 so that it is never empty). A concurrent
			// write may change the value in between; loop until it fits.
			buf = make([]byte, int(g.vlen)+1)
			if len(buf) <= 64<<10 {
				g.buf = buf // keep moderately larger buffers for the next Get
			}
		default:
			return nil, false, cError(g.err)
		}
	}
}

// rocksWrite applies a serialized batch (appendBatchRep) in one cgo crossing.
func rocksWrite(db *grocksdb.DB, wo *grocksdb.WriteOptions, rep []byte) error {
	var cErr *C.char
	C.kstate_rocksdb_write(dbHandle(db), writeOptionsHandle(wo), cPtr(rep), C.size_t(len(rep)), &cErr)
	if cErr != nil {
		return cError(cErr)
	}
	return nil
}

// RocksDB's WriteBatch wire format (db/write_batch.cc, RocksDB 7.8), the
// bytes RocksDB itself builds with WriteBatch::Put/Delete/DeleteRange on the
// default column family:
//
//	rep    := sequence fixed64 | count fixed32 | record*
//	record := kTypeValue varstring(key) varstring(value)
//	        | kTypeDeletion varstring(key)
//	        | kTypeRangeDeletion varstring(begin) varstring(end)
//	varstring := len varint32 | bytes
//
// with the value types of db/dbformat.h. The sequence is 0: the DB assigns
// it at write time. TestRocksBatchRepMatchesRocksDB checks byte equality
// with grocksdb's WriteBatch.Data.
const (
	batchRepHeader         = 12
	batchTypeDeletion      = 0x0
	batchTypeValue         = 0x1
	batchTypeRangeDeletion = 0xF
)

// batchRep builds a WriteBatch rep: in a reused buffer when small, else
// in memory mapped outside the Go heap (repMaps), returned after the write.
//
// Why not a reused Go buffer for every size: a store kept its largest
// rep's buffer between writes (a write-behind flush's, several MiB), and
// the garbage collector lets the heap grow to twice its live bytes, so
// those idle buffers counted twice in the process's peak RSS: 17 MiB of
// the heavy benchmark's ~180 MiB of live heap at 4 shards, 23 MiB at 64
// (docs/BENCHMARKS.md, "Write batches outside the Go heap").
type batchRep struct {
	buf    []byte
	small  []byte // the reused buffer (at most repKeepBytes)
	mapped []byte // the mapping buf was built in, until release
	count  uint32
}

// repKeepBytes is the largest rep built in the reused buffer.
const repKeepBytes = 256 << 10

// reset starts a rep of size bytes (repSize; a guess is fine: a rep that
// outgrows its buffer moves to the Go heap). Call release after the write.
func (r *batchRep) reset(size int) {
	r.count = 0
	if size > repKeepBytes {
		if r.mapped = repMaps.get(size); r.mapped != nil {
			r.buf = append(r.mapped[:0], make([]byte, batchRepHeader)...)
			return
		}
	}
	r.buf = append(r.small[:0], make([]byte, batchRepHeader)...)
}

// release returns the rep's mapping, if it had one, and keeps a small
// buffer for the next rep. The rep's bytes are invalid afterwards.
func (r *batchRep) release() {
	if r.mapped != nil {
		repMaps.put(r.mapped)
		r.mapped = nil
	} else if r.buf != nil && cap(r.buf) <= repKeepBytes {
		r.small = r.buf[:0] // (nil: the write failed before its reset)
	}
	r.buf = nil
}

// buildOrdered starts the rep and adds the puts and deletes of ops at the
// indices order, in that order (nil: all of ops as they are).
func (r *batchRep) buildOrdered(ops []Op, order []int32) {
	n := len(ops)
	if order != nil {
		n = len(order)
	}
	at := func(j int) *Op {
		if order == nil {
			return &ops[j]
		}
		return &ops[order[j]]
	}
	size := batchRepHeader
	for j := range n {
		size += repSize(*at(j), nil)
	}
	r.reset(size)
	for j := range n {
		if op := at(j); op.Kind == OpPut {
			r.put(op.Key, op.Value)
		} else {
			r.delete(op.Key)
		}
	}
}

// repMaps keeps a few of the process's rep mappings for the next large
// reps instead of unmapping each after its write: a new mapping's pages
// are faulted in (and zeroed) as the rep is built, which cost 3–10 % of
// a 10,000-operation batch's write (BenchmarkStoreWriteBatch). Writes of
// one store are serialised and a process writes from a few goroutines at
// once, so a few mappings serve every store; repPoolBytes bounds what
// they keep resident between writes.
var repMaps repPool

// repPoolBytes bounds the bytes of the mappings repMaps keeps.
const repPoolBytes = 16 << 20

type repPool struct {
	mu    sync.Mutex
	free  [][]byte // mappings of power-of-two sizes
	bytes int
}

// get returns a mapping of at least n bytes (nil when mapping fails).
func (p *repPool) get(n int) []byte {
	size := repKeepBytes
	for size < n {
		size *= 2
	}
	p.mu.Lock()
	best := -1
	for i, m := range p.free {
		if len(m) >= size && (best < 0 || len(m) < len(p.free[best])) {
			best = i
		}
	}
	if best >= 0 {
		m := p.free[best]
		p.free = append(p.free[:best], p.free[best+1:]...)
		p.bytes -= len(m)
		p.mu.Unlock()
		return m
	}
	p.mu.Unlock()
	return mapRep(size)
}

// put keeps m for a later get, or unmaps it (and smaller kept ones) when
// keeping it would pass repPoolBytes.
func (p *repPool) put(m []byte) {
	if len(m) > repPoolBytes {
		unmapRep(m)
		return
	}
	p.mu.Lock()
	var drop [][]byte
	for p.bytes+len(m) > repPoolBytes && len(p.free) > 0 {
		// Drop the smallest kept mapping first: larger ones serve more.
		i := 0
		for j := range p.free {
			if len(p.free[j]) < len(p.free[i]) {
				i = j
			}
		}
		if len(p.free[i]) >= len(m) {
			break
		}
		drop = append(drop, p.free[i])
		p.bytes -= len(p.free[i])
		p.free = append(p.free[:i], p.free[i+1:]...)
	}
	keep := p.bytes+len(m) <= repPoolBytes
	if keep {
		p.free = append(p.free, m)
		p.bytes += len(m)
	}
	p.mu.Unlock()
	for _, d := range drop {
		unmapRep(d)
	}
	if !keep {
		unmapRep(m)
	}
}

// repSize returns the bytes of op in a rep (end: a DeleteRange's end).
func repSize(op Op, end []byte) int {
	switch op.Kind {
	case OpPut:
		return 1 + varstringSize(op.Key) + varstringSize(op.Value)
	case OpDelete:
		return 1 + varstringSize(op.Key)
	}
	return 1 + varstringSize(op.Key) + varstringSize(end)
}

func varstringSize(b []byte) int {
	n := 1
	for x := len(b); x >= 0x80; x >>= 7 {
		n++
	}
	return n + len(b)
}

func (r *batchRep) put(key, value []byte) {
	r.buf = append(r.buf, batchTypeValue)
	r.buf = appendVarstring(r.buf, key)
	r.buf = appendVarstring(r.buf, value)
	r.count++
}

func (r *batchRep) delete(key []byte) {
	r.buf = append(r.buf, batchTypeDeletion)
	r.buf = appendVarstring(r.buf, key)
	r.count++
}

func (r *batchRep) deleteRange(start, end []byte) {
	r.buf = append(r.buf, batchTypeRangeDeletion)
	r.buf = appendVarstring(r.buf, start)
	r.buf = appendVarstring(r.buf, end)
	r.count++
}

// bytes returns the finished rep (valid until the next reset).
func (r *batchRep) bytes() []byte {
	binary.LittleEndian.PutUint32(r.buf[8:batchRepHeader], r.count)
	return r.buf
}

func appendVarstring(dst, b []byte) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(b)))
	return append(dst, b...)
}

// multiGetScratch holds what a MultiGet passes to C, reused between calls:
// the keys packed into one buffer, their ends, the values' buffer and ends.
type multiGetScratch struct {
	keys  []byte
	kends []C.size_t
	vals  []byte
	vends []C.longlong
}

var multiGetPool = sync.Pool{New: func() any { return new(multiGetScratch) }}

// rocksMultiGet looks keys up (strictly increasing) with RocksDB's batched
// MultiGet in one cgo crossing, and calls fn for each key in order with its
// value, which aliases a buffer reused after fn returns; it skips the keys
// whose values would take the values past limit bytes in all.
func rocksMultiGet(db *grocksdb.DB, ro *grocksdb.ReadOptions, keys [][]byte, limit int, fn func(i int, value []byte, ok bool)) error {
	if len(keys) == 0 {
		return nil
	}
	g := multiGetPool.Get().(*multiGetScratch)
	defer multiGetPool.Put(g)
	g.keys, g.kends = g.keys[:0], g.kends[:0]
	for _, k := range keys {
		g.keys = append(g.keys, k...)
		g.kends = append(g.kends, C.size_t(len(g.keys)))
	}
	if len(g.keys) == 0 {
		g.keys = append(g.keys, 0) // never a nil pointer (all keys empty)
	}
	if cap(g.vends) < len(keys) {
		g.vends = make([]C.longlong, len(keys))
	}
	g.vends = g.vends[:len(keys)]
	if len(g.vals) == 0 {
		g.vals = make([]byte, 64<<10)
	}
	for {
		var cErr *C.char
		r := C.kstate_rocksdb_multi_get(dbHandle(db), readOptionsHandle(ro), C.size_t(len(keys)),
			cPtr(g.keys), &g.kends[0], cPtr(g.vals), C.size_t(len(g.vals)), C.size_t(max(limit, 0)), &g.vends[0], &cErr)
		if r < 0 {
			return cError(cErr)
		}
		if r == 0 {
			break
		}
		g.vals = make([]byte, int(r)) // the values within limit need r bytes
	}
	start := 0
	for i, end := range g.vends {
		switch {
		case end == -1:
			fn(i, nil, false)
		case end >= 0:
			fn(i, g.vals[start:int(end):int(end)], true)
			start = int(end)
		}
	}
	if len(g.vals) > 1<<20 {
		g.vals = nil // keep no large buffer in the pool
	}
	return nil
}

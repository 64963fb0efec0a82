//go:build cgo && !kstate_nocgo

package kv

// #include <stdlib.h>
// #include <rocksdb/c.h>
// int kstate_rocksdb_get(rocksdb_t* db, const rocksdb_readoptions_t* ro, const char* key, size_t klen, char* buf, size_t cap, size_t* vlen, char** err);
// void kstate_rocksdb_write(rocksdb_t* db, const rocksdb_writeoptions_t* wo, const char* rep, size_t len, char** err);
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

// batchRep builds a WriteBatch rep in a reused buffer.
type batchRep struct {
	buf   []byte
	count uint32
}

func (r *batchRep) reset() {
	if cap(r.buf) > 16<<20 {
		r.buf = nil // do not keep one huge batch's buffer for ever
	}
	r.buf = append(r.buf[:0], make([]byte, batchRepHeader)...)
	r.count = 0
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

//go:build cgo && !kstate_nocgo

package kv

// #include <stdlib.h>
// #include <rocksdb/c.h>
// typedef struct kstate_wbm_t kstate_wbm_t;
// #include <stdbool.h>
// kstate_wbm_t* kstate_wbm_create(size_t buffer_size, rocksdb_cache_t* cache, bool allow_stall);
// void kstate_wbm_destroy(kstate_wbm_t* wbm);
// size_t kstate_wbm_memory_usage(kstate_wbm_t* wbm);
// void kstate_options_set_wbm(rocksdb_options_t* opts, kstate_wbm_t* wbm);
import "C"

import (
	"fmt"
	"sync"
	"unsafe"

	"github.com/cockroachdb/pebble/v2"
	"github.com/linxGnu/grocksdb"
)

// RocksDBAvailable reports whether the RocksDB backend is compiled in: false
// in builds without cgo or with the kstate_nocgo tag.
const RocksDBAvailable = true

// SharedMemory is one memory budget for many RocksDB stores (all the shards
// of a process): one LRU block cache of Bytes, and one write-buffer manager
// that bounds the stores' memtables together to half of Bytes and charges
// them to that cache. Block cache plus memtables therefore stay near Bytes
// however many stores are open, instead of growing by a cache and a
// memtable per store. A write that finds the memtables over their half
// waits (RocksDB's write stall) until a flush frees memory: without the
// stall, fast writers outrun the background flushes and the memtables
// reached twice their budget in TestSharedMemory.
//
// Index and filter blocks are cached (charged to the cache) by every store.
// Not bounded: iterators' pinned blocks beyond the cache, table-reader
// metadata outside the cache, and the cache may exceed its capacity while
// entries are pinned (strict capacity is off, so reads never fail).
//
// The write-buffer manager is created by a C++ shim (sharedmem.cc) because
// RocksDB 7.8's C API has no call for it.
type SharedMemory struct {
	bytes int64
	mu    struct {
		sync.Mutex
		closed bool
		cache  *grocksdb.Cache
		wbm    *C.kstate_wbm_t
		// pebble is the block cache of Pebble stores opened with this
		// budget (PebbleOptions.Memory), created on first use; Pebble
		// reserves the stores' memtables from it (sharedPebbleMemtable).
		pebble *pebble.Cache
	}
}

// NewSharedMemory returns a budget of bytes (at least 1 MiB) for RocksDB
// stores opened with RocksOptions.Memory. Close it after the stores.
func NewSharedMemory(bytes int64) (*SharedMemory, error) {
	if bytes < 1<<20 {
		return nil, fmt.Errorf("%w: shared RocksDB memory of %d bytes, want at least 1 MiB", ErrInvalidOptions, bytes)
	}
	m := &SharedMemory{bytes: bytes}
	m.mu.cache = grocksdb.NewLRUCache(uint64(bytes))
	m.mu.wbm = C.kstate_wbm_create(C.size_t(bytes/2), cacheHandle(m.mu.cache), C.bool(true))
	return m, nil
}

// cacheHandle returns the C handle of a grocksdb cache. grocksdb.Cache keeps
// it in its first field and exports no accessor; TestSharedMemory fails if
// that ever changes (memtables would not be charged to the cache).
func cacheHandle(c *grocksdb.Cache) *C.rocksdb_cache_t {
	return *(**C.rocksdb_cache_t)(unsafe.Pointer(c))
}

// Bytes is the budget.
func (m *SharedMemory) Bytes() int64 { return m.bytes }

// Usage is the bytes held in the shared cache: cached blocks plus the
// memtable memory charged to it. 0 after Close.
func (m *SharedMemory) Usage() int64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.mu.closed {
		return 0
	}
	u := int64(m.mu.cache.GetUsage())
	if m.mu.pebble != nil {
		u += m.mu.pebble.Size()
	}
	return u
}

// pebbleCache returns the shared Pebble cache, creating it on first use.
// The store's Open takes its own reference.
func (m *SharedMemory) pebbleCache() (*pebble.Cache, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.mu.closed {
		return nil, fmt.Errorf("%w: shared store memory", ErrClosed)
	}
	if m.mu.pebble == nil {
		m.mu.pebble = pebble.NewCache(m.bytes)
	}
	return m.mu.pebble, nil
}

// MemtableUsage is the bytes of all the stores' memtables. 0 after Close.
func (m *SharedMemory) MemtableUsage() int64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.mu.closed {
		return 0
	}
	return int64(C.kstate_wbm_memory_usage(m.mu.wbm))
}

// apply makes a store's options use the shared cache and write-buffer
// manager. RocksDB holds its own references to both, so a store stays valid
// if Close runs first.
func (m *SharedMemory) apply(bbto *grocksdb.BlockBasedTableOptions, opts *grocksdb.Options) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.mu.closed {
		return fmt.Errorf("%w: shared RocksDB memory", ErrClosed)
	}
	bbto.SetBlockCache(m.mu.cache)
	C.kstate_options_set_wbm(optionsHandle(opts), m.mu.wbm)
	return nil
}

// Close releases this handle's references to the cache and the write-buffer
// manager. RocksDB reference-counts both: stores still open keep them alive
// until they close, so Close is safe at any time; it is idempotent.
func (m *SharedMemory) Close() {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.mu.closed {
		return
	}
	m.mu.closed = true
	C.kstate_wbm_destroy(m.mu.wbm)
	m.mu.cache.Destroy()
	m.mu.wbm, m.mu.cache = nil, nil
	if m.mu.pebble != nil {
		m.mu.pebble.Unref()
		m.mu.pebble = nil
	}
}

//go:build !cgo || kstate_nocgo

package kv

import (
	"fmt"
	"sync"

	"github.com/cockroachdb/pebble/v2"
)

// RocksDBAvailable reports whether the RocksDB backend is compiled in: false
// in builds without cgo or with the kstate_nocgo tag.
const RocksDBAvailable = false

// OpenRocksDB fails with ErrBackendUnavailable: this binary was built
// without cgo (or with the kstate_nocgo tag), so RocksDB is not compiled in.
func OpenRocksDB(dir string, o RocksOptions) (Store, error) {
	return nil, fmt.Errorf("%w: open rocksdb %s: RocksDB needs cgo; this binary was built without it (use the pebble backend)", ErrBackendUnavailable, dir)
}

// SharedMemory is one memory budget for many stores. In a build without
// RocksDB it is one Pebble block cache of Bytes shared by the Pebble
// stores opened with PebbleOptions.Memory; Pebble reserves the stores'
// memtables from it (sharedPebbleMemtable sizes them).
type SharedMemory struct {
	bytes int64
	mu    struct {
		sync.Mutex
		closed bool
		pebble *pebble.Cache
	}
}

// NewSharedMemory returns a budget of bytes (at least 1 MiB). Close it
// after the stores.
func NewSharedMemory(bytes int64) (*SharedMemory, error) {
	if bytes < 1<<20 {
		return nil, fmt.Errorf("%w: shared store memory of %d bytes, want at least 1 MiB", ErrInvalidOptions, bytes)
	}
	return &SharedMemory{bytes: bytes}, nil
}

// Bytes is the budget.
func (m *SharedMemory) Bytes() int64 { return m.bytes }

// Usage is the bytes held in the shared block cache. 0 after Close.
func (m *SharedMemory) Usage() int64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.mu.closed || m.mu.pebble == nil {
		return 0
	}
	return m.mu.pebble.Size()
}

// MemtableUsage is 0: it counts RocksDB's memtables, and Pebble's
// reservations for its memtables are not told apart from its blocks.
func (m *SharedMemory) MemtableUsage() int64 { return 0 }

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

// Close drops this handle's reference to the cache; open stores keep
// theirs. It is idempotent.
func (m *SharedMemory) Close() {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.mu.closed {
		return
	}
	m.mu.closed = true
	if m.mu.pebble != nil {
		m.mu.pebble.Unref()
		m.mu.pebble = nil
	}
}

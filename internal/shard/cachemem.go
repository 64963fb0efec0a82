package shard

import (
	"runtime"
	"sync"
	"unsafe"
)

// The committed-state cache's rings and indexes live outside the Go heap
// (anonymous memory maps on Unix; cachemem_unix.go).
//
// Why: they are plain bytes and integers, which the garbage collector never
// needs to see, and a segment's ring is allocated whole at its first
// insert. On the heap the whole budget counted as live memory, so the
// collector let the rest of the heap grow by as much again before its next
// cycle: a 64 MiB cache raised the count backlog's peak RSS from 284 to
// 351 MB while its entries used ~6 MB (docs/BENCHMARKS.md, issue #29,
// "group entries"). Outside the heap the budget costs only the pages the
// entries touch, and the collector paces on the heap alone.

// cacheMem holds the memory of one Cache's segments, freed when the Cache
// is no longer reachable (every shard using it is closed and gone).
type cacheMem struct {
	mu      sync.Mutex
	regions [][]byte
}

func newCacheMem(c *Cache) *cacheMem {
	m := &cacheMem{}
	runtime.AddCleanup(c, func(m *cacheMem) { m.free() }, m)
	return m
}

// bytes returns n zeroed bytes.
func (m *cacheMem) bytes(n int) []byte {
	if n == 0 {
		return nil
	}
	b := allocCacheMem(n)
	if osMapped {
		m.mu.Lock()
		m.regions = append(m.regions, b)
		m.mu.Unlock()
	}
	return b
}

// words returns n zeroed uint64s.
func (m *cacheMem) words(n int) []uint64 {
	b := m.bytes(n * 8)
	if b == nil {
		return nil
	}
	return unsafe.Slice((*uint64)(unsafe.Pointer(unsafe.SliceData(b))), n)
}

func (m *cacheMem) free() {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, b := range m.regions {
		freeCacheMem(b)
	}
	m.regions = nil
}

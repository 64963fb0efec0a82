//go:build cgo && !kstate_nocgo

package kv_test

import (
	"errors"
	"fmt"
	"path/filepath"
	"testing"

	"github.com/kstate/kstate/internal/kv"
	"github.com/kstate/kstate/internal/kv/kvtest"
)

func TestRocksDBConformanceSharedMemory(t *testing.T) {
	m, err := kv.NewSharedMemory(8 << 20)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Close) // after every store's Cleanup (LIFO)
	kvtest.RunConformance(t, rocksOpener(kv.RocksOptions{Memory: m}))
}

func fill(t *testing.T, s kv.Store, prefix string, n, valueBytes int) {
	t.Helper()
	v := make([]byte, valueBytes)
	for i := 0; i < n; i += 1000 {
		var b kv.Batch
		for j := i; j < i+1000 && j < n; j++ {
			b.Put([]byte(fmt.Sprintf("%s%08d", prefix, j)), v)
		}
		if err := s.Write(&b, kv.WriteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
}

// Two stores on one SharedMemory charge their memtables to one cache, and
// together stay within the write-buffer half of the budget.
func TestSharedMemory(t *testing.T) {
	const budget = 8 << 20
	m, err := kv.NewSharedMemory(budget)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if m.Usage() != 0 || m.MemtableUsage() != 0 {
		t.Fatalf("fresh budget: usage %d, memtables %d, want 0", m.Usage(), m.MemtableUsage())
	}
	a, err := kv.OpenRocksDB(t.TempDir(), kv.RocksOptions{Memory: m})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := kv.OpenRocksDB(t.TempDir(), kv.RocksOptions{Memory: m})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()

	fill(t, a, "a", 1000, 100)
	ua, mta := m.Usage(), m.MemtableUsage()
	if mta <= 0 || ua < mta {
		t.Fatalf("after writing store a: cache usage %d, memtables %d; want memtables > 0 charged to the cache", ua, mta)
	}
	fill(t, b, "b", 1000, 100)
	ub, mtb := m.Usage(), m.MemtableUsage()
	if mtb <= mta || ub <= ua {
		t.Fatalf("after writing store b: cache usage %d → %d, memtables %d → %d; want both to grow (one shared budget)", ua, ub, mta, mtb)
	}

	// 2 × 20 MiB written with 32 MiB memtables: without the shared
	// write-buffer manager the memtables would hold it all.
	var peak int64
	for i := range 20 {
		fill(t, a, fmt.Sprintf("a%02d", i), 1000, 1000)
		fill(t, b, fmt.Sprintf("b%02d", i), 1000, 1000)
		peak = max(peak, m.MemtableUsage())
	}
	if limit := int64(budget); peak > limit {
		t.Errorf("memtables peaked at %d bytes, want at most %d (write buffers are half of an %d budget, plus flush slack)", peak, limit, budget)
	}
	if v, ok, err := a.Get([]byte("a1900000999")); err != nil || !ok || len(v) != 1000 {
		t.Errorf("Get after flushes = %d bytes, %v, %v", len(v), ok, err)
	}
}

// Closing the budget before its stores only drops its reference: the stores
// keep working and close cleanly; a store cannot be opened on it afterwards.
func TestSharedMemoryClosedFirst(t *testing.T) {
	m, err := kv.NewSharedMemory(4 << 20)
	if err != nil {
		t.Fatal(err)
	}
	s, err := kv.OpenRocksDB(t.TempDir(), kv.RocksOptions{Memory: m})
	if err != nil {
		t.Fatal(err)
	}
	m.Close()
	m.Close() // idempotent
	if m.Usage() != 0 || m.MemtableUsage() != 0 {
		t.Errorf("closed budget reports usage %d, memtables %d, want 0", m.Usage(), m.MemtableUsage())
	}
	fill(t, s, "k", 5000, 1000)
	if _, ok, err := s.Get([]byte("k00004999")); err != nil || !ok {
		t.Errorf("Get after the budget closed = %v, %v", ok, err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := kv.OpenRocksDB(t.TempDir(), kv.RocksOptions{Memory: m}); !errors.Is(err, kv.ErrClosed) {
		t.Errorf("open on a closed budget = %v, want ErrClosed", err)
	}
	if _, err := kv.NewSharedMemory(1000); !errors.Is(err, kv.ErrInvalidOptions) {
		t.Errorf("NewSharedMemory(1000) = %v, want ErrInvalidOptions", err)
	}
}

// Many stores on a budget whose write half is a few arena blocks: each
// store's memtable must not cost a whole 1 MiB block, or every write
// flushes a near-empty memtable (one SST file per write, ~100x slower).
func TestSharedMemoryManyStoresNoFlushStorm(t *testing.T) {
	m, err := kv.NewSharedMemory(8 << 20) // 4 MiB of write buffers for 16 stores
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	const stores, writes = 16, 20
	var dirs []string
	for i := range stores {
		dir := t.TempDir()
		dirs = append(dirs, dir)
		s, err := kv.OpenRocksDB(dir, kv.RocksOptions{Memory: m})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		for w := range writes {
			fill(t, s, fmt.Sprintf("s%02dw%02d", i, w), 100, 16)
		}
	}
	ssts := 0
	for _, dir := range dirs {
		files, _ := filepath.Glob(filepath.Join(dir, "*.sst"))
		ssts += len(files)
	}
	if ssts > stores {
		t.Errorf("%d SST files after %d small writes to each of %d stores (~%d KiB each): memtables were flushed near-empty", ssts, writes, stores, writes*100*30>>10)
	}
}

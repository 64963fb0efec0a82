//go:build cgo && !kstate_nocgo

package kv_test

import (
	"fmt"
	"regexp"
	"runtime"
	"strconv"
	"testing"

	"github.com/linxGnu/grocksdb"

	"github.com/kstate/kstate/internal/kv"
)

// TestRocksMemtableBloomSkipsAbsentKeys: a point read of a key the
// memtable does not hold is answered by the memtable's whole-key bloom
// filter, without a search of its skip list (RocksDB's perf context counts
// bloom_memtable_miss_count only when such a filter said no). Without the
// filter the count stays 0.
func TestRocksMemtableBloomSkipsAbsentKeys(t *testing.T) {
	s, err := kv.OpenRocksDB(t.TempDir(), kv.RocksOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	// A 10-bit bloom filter lets ~1 % of absent keys through.
	if n := memtableMisses(t, s); n < absentReads*9/10 {
		t.Fatalf("bloom_memtable_miss_count = %d for %d reads of absent keys, want ≥ %d: the memtable has no whole-key bloom filter", n, absentReads, absentReads*9/10)
	}
}

// TestRocksMemtableFiltersBounded: only maxMemtableFilters open stores of
// the process have the memtable filter (each costs 1.3 MiB of resident
// memory however little the store holds); the next store opened has none,
// and a slot freed by a Close goes to the next store opened.
func TestRocksMemtableFiltersBounded(t *testing.T) {
	var stores []kv.Store
	defer func() {
		for _, s := range stores {
			s.Close()
		}
	}()
	open := func() kv.Store {
		s, err := kv.OpenRocksDB(t.TempDir(), kv.RocksOptions{})
		if err != nil {
			t.Fatal(err)
		}
		stores = append(stores, s)
		return s
	}
	filtered := 0
	for range kv.MaxMemtableFilters + 1 {
		if memtableMisses(t, open()) == 0 {
			break
		}
		filtered++
	}
	// Stores another test left open can hold slots, so fewer than
	// MaxMemtableFilters may have had one here; none more.
	if filtered > kv.MaxMemtableFilters || filtered == len(stores) {
		t.Fatalf("%d of %d stores opened have a memtable filter, want at most %d and the last without", filtered, len(stores), kv.MaxMemtableFilters)
	}
	if filtered == 0 {
		t.Fatalf("no store got a memtable filter: %d slots held by stores left open elsewhere?", kv.MaxMemtableFilters)
	}
	if err := stores[0].Close(); err != nil {
		t.Fatal(err)
	}
	if n := memtableMisses(t, open()); n == 0 {
		t.Fatal("the slot of a closed store did not go to the next store opened: it has no memtable filter")
	}
	if n := memtableMisses(t, open()); n != 0 {
		t.Fatalf("bloom_memtable_miss_count = %d on a store opened with every slot taken: it has a filter", n)
	}
}

const absentReads = 1000

// memtableMisses writes 1000 keys to s, reads absentReads keys it does not
// hold and returns RocksDB's bloom_memtable_miss_count for those reads: the
// ones the memtable's whole-key filter answered without searching its skip
// list (0 without the filter).
func memtableMisses(t *testing.T, s kv.Store) int {
	t.Helper()
	var b kv.Batch
	for i := range 1000 {
		b.Put(fmt.Appendf(nil, "present-%04d", i), []byte("v"))
	}
	if err := s.Write(&b, kv.WriteOptions{}); err != nil {
		t.Fatal(err)
	}

	// The perf context is per OS thread.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	grocksdb.SetPerfLevel(grocksdb.KEnableCount)
	defer grocksdb.SetPerfLevel(grocksdb.KDisable)
	pc := grocksdb.NewPerfContext()
	defer pc.Destroy()
	pc.Reset()
	for i := range absentReads {
		if _, ok, err := s.Get(fmt.Appendf(nil, "absent-%04d", i)); err != nil || ok {
			t.Fatalf("Get of an absent key: ok=%v err=%v", ok, err)
		}
	}
	// Present keys still read from the memtable.
	for i := range 10 {
		if v, ok, err := s.Get(fmt.Appendf(nil, "present-%04d", i)); err != nil || !ok || string(v) != "v" {
			t.Fatalf("Get of a present key: %q ok=%v err=%v", v, ok, err)
		}
	}
	m := regexp.MustCompile(`bloom_memtable_miss_count = (\d+)`).FindStringSubmatch(pc.Report(false))
	if m == nil {
		t.Fatalf("no bloom_memtable_miss_count in the perf context: %s", pc.Report(true))
	}
	n, _ := strconv.Atoi(m[1])
	return n
}

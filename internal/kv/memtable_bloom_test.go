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
	const absent = 1000
	for i := range absent {
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
	// A 10-bit bloom filter lets ~1 % of absent keys through.
	if n < absent*9/10 {
		t.Fatalf("bloom_memtable_miss_count = %d for %d reads of absent keys, want ≥ %d: the memtable has no whole-key bloom filter", n, absent, absent*9/10)
	}
}

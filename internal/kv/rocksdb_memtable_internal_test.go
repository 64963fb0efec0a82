//go:build cgo && !kstate_nocgo

package kv

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// TestRocksDefaultMemtableBounded: at the default options a store's
// memtables (the one filling and the one flushing) hold at most about
// 2 × 16 MiB. With the 64 MiB default before issue #29 the 48 MiB written
// here all sat in one memtable: two shards held ~190 MiB of memtables on
// the big-state run, which put kstate's peak RSS above Kafka Streams'.
func TestRocksDefaultMemtableBounded(t *testing.T) {
	st, err := OpenRocksDB(t.TempDir(), RocksOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	s := st.(*rocksStore)
	rng := rand.New(rand.NewPCG(1, 2))
	val := make([]byte, 1000)
	var peak uint64
	for i := range 48 { // 48 batches of 1,000 × 1 KB of incompressible values
		var b Batch
		for j := range 1000 {
			for k := range val {
				val[k] = byte(rng.Uint32())
			}
			b.Put(fmt.Appendf(nil, "k%02d-%04d", i, j), val)
		}
		if err := s.Write(&b, WriteOptions{}); err != nil {
			t.Fatal(err)
		}
		mem, _ := s.db.GetIntProperty("rocksdb.cur-size-all-mem-tables")
		peak = max(peak, mem)
	}
	if limit := uint64(40 << 20); peak > limit {
		t.Fatalf("memtables peaked at %d MiB after 48 MiB written at the default options, want at most %d MiB (two 16 MiB memtables and slack)", peak>>20, limit>>20)
	}
	t.Logf("memtables peaked at %d MiB", peak>>20)
}

//go:build cgo && !kstate_nocgo

package kv_test

import (
	"fmt"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/kstate/kstate/internal/kv"
)

// TestRocksWALPreallocationBounded: a store's first logged write must not
// reserve tens of MB of disk for its write-ahead log. Before the bound,
// RocksDB reserved 1.1 × the 64 MiB memtable (70 MiB) per store: 256
// partitions' shards took 18 GB of disk for a few MB of log (issue #29).
// On a file system without fallocate nothing is reserved and the test
// passes either way.
func TestRocksWALPreallocationBounded(t *testing.T) {
	dir := t.TempDir()
	for _, mem := range []bool{false, true} {
		t.Run(fmt.Sprintf("shared=%v", mem), func(t *testing.T) {
			o := kv.RocksOptions{}
			if mem {
				m, err := kv.NewSharedMemory(512 << 20)
				if err != nil {
					t.Fatal(err)
				}
				defer m.Close()
				o.Memory = m
			}
			d := filepath.Join(dir, fmt.Sprint(mem))
			s, err := kv.OpenRocksDB(d, o)
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			var b kv.Batch
			b.Put([]byte("k"), []byte("v"))
			if err := s.Write(&b, kv.WriteOptions{}); err != nil {
				t.Fatal(err)
			}
			logs, _ := filepath.Glob(filepath.Join(d, "*.log"))
			if len(logs) == 0 {
				t.Fatalf("no write-ahead log in %s", d)
			}
			for _, l := range logs {
				var st syscall.Stat_t
				if err := syscall.Stat(l, &st); err != nil {
					t.Fatal(err)
				}
				if reserved := st.Blocks * 512; reserved > 8<<20 {
					t.Errorf("%s: %d bytes of disk reserved after one small write, want at most 8 MiB", filepath.Base(l), reserved)
				}
			}
		})
	}
}

//go:build cgo && !kstate_nocgo && linux

package kv

import (
	"os"
	"strings"
	"testing"
)

// The build mode of link_static.go / link_shared.go must be what the
// process runs: a default Linux build has no librocksdb.so mapped (a
// change in the order of the linker's flags would load the shared library
// and silently give back the 15–25 % of CPU the static link saves), and a
// kstate_rocksdb_shared build has it. A write and a read through the store
// prove RocksDB's code is in the binary either way.
func TestRocksDBLinkMode(t *testing.T) {
	s, err := OpenRocksDB(t.TempDir(), RocksOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var b Batch
	b.Put([]byte("k"), []byte("v"))
	if err := s.Write(&b, WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	if v, ok, err := s.Get([]byte("k")); err != nil || !ok || string(v) != "v" {
		t.Fatalf("Get(k) = %q, %v, %v; want v", v, ok, err)
	}

	maps, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		t.Skipf("no /proc/self/maps: %v", err)
	}
	var shared []string
	for _, line := range strings.Split(string(maps), "\n") {
		if strings.Contains(line, "librocksdb.so") {
			shared = append(shared, line)
		}
	}
	switch {
	case rocksDBLinkedStatically && len(shared) > 0:
		t.Errorf("built to link librocksdb.a, but the process mapped the shared library:\n%s", strings.Join(shared, "\n"))
	case !rocksDBLinkedStatically && len(shared) == 0:
		t.Errorf("built with kstate_rocksdb_shared, but no librocksdb.so is mapped")
	}
}

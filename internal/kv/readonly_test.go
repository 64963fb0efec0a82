//go:build cgo && !kstate_nocgo

package kv

import (
	"path/filepath"
	"testing"
)

// ReadOnly opens a store another handle keeps open for writing (the state
// reader beside a running application), sees what was written before the
// open, refuses writes, and never creates a missing database.
func TestRocksReadOnly(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "db")
	rw, err := OpenRocksDB(dir, RocksOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer rw.Close()
	var b Batch
	b.Put([]byte("a"), []byte("1"))
	if err := rw.Write(&b, WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	ro, err := OpenRocksDB(dir, RocksOptions{ReadOnly: true})
	if err != nil {
		t.Fatalf("read-only open beside a writer: %v", err)
	}
	defer ro.Close()
	if v, ok, err := ro.Get([]byte("a")); err != nil || !ok || string(v) != "1" {
		t.Fatalf("Get: %q %v %v", v, ok, err)
	}
	var w Batch
	w.Put([]byte("b"), []byte("2"))
	if err := ro.Write(&w, WriteOptions{}); err == nil {
		t.Fatal("a read-only store accepted a write")
	}
	if _, err := OpenRocksDB(filepath.Join(t.TempDir(), "missing"), RocksOptions{ReadOnly: true}); err == nil {
		t.Fatal("read-only open of a missing database succeeded")
	}
}

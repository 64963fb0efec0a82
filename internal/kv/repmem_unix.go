//go:build cgo && !kstate_nocgo && unix

package kv

import "syscall"

// mapRep maps n bytes of anonymous memory for a large write batch's rep
// (rocksdb_fast.go, batchRep.reset); nil when the mapping fails (the rep
// then grows on the Go heap).
func mapRep(n int) []byte {
	b, err := syscall.Mmap(-1, 0, n, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
	if err != nil {
		return nil
	}
	return b
}

// unmapRep returns a mapping of mapRep to the system.
func unmapRep(b []byte) { _ = syscall.Munmap(b) }

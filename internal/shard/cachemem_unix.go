//go:build unix

package shard

import "syscall"

const osMapped = true

// allocCacheMem maps n bytes of anonymous memory (zero pages, resident
// only once touched); on failure it falls back to the heap.
func allocCacheMem(n int) []byte {
	b, err := syscall.Mmap(-1, 0, n, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
	if err != nil {
		return make([]byte, n) // never freed by freeCacheMem: see its check
	}
	return b
}

func freeCacheMem(b []byte) {
	_ = syscall.Munmap(b) // a heap slice (the fallback) is refused: EINVAL
}

//go:build cgo && !kstate_nocgo && (!linux || kstate_rocksdb_shared)

package kv

// The shared librocksdb: every platform but Linux, and Linux with
// -tags kstate_rocksdb_shared (see link_static.go).

// #cgo LDFLAGS: -lrocksdb -lstdc++
import "C"

const rocksDBLinkedStatically = false

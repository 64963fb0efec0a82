//go:build cgo && !kstate_nocgo && linux && !kstate_rocksdb_shared

package kv

// RocksDB is linked statically on Linux, from librocksdb.a (Debian's and
// Ubuntu's librocksdb-dev ship it beside the shared library). The shared
// library costs the engine 15–25 % more CPU per state call: every access to
// RocksDB's thread-local perf and I/O contexts goes through __tls_get_addr
// (the archive's objects use the initial-exec model instead), and calls
// into the library go through its PLT. docs/benchmarks/history.md
// ("RocksDB linked statically") has the numbers.
//
// --as-needed comes first so that the -lrocksdb which grocksdb adds after
// these flags does not load the shared library beside the static copy.
// Build with -tags kstate_rocksdb_shared to link the shared library
// (a system without librocksdb.a, or a RocksDB built with other
// dependencies; see docs/OPERATIONS.md).

// #cgo LDFLAGS: -Wl,--as-needed -l:librocksdb.a -lsnappy -lz -lbz2 -llz4 -lzstd -lstdc++ -lm -ldl -lpthread
import "C"

// rocksDBLinkedStatically is what TestRocksDBLinkMode checks against the
// libraries the running process mapped.
const rocksDBLinkedStatically = true

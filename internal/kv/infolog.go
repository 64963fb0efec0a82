//go:build cgo && !kstate_nocgo

package kv

// #cgo CXXFLAGS: -std=c++17
// #include <rocksdb/c.h>
// void kstate_rocksdb_discard_info_log(rocksdb_options_t* opts);
import "C"

import (
	"unsafe"

	"github.com/linxGnu/grocksdb"
)

// discardInfoLog replaces RocksDB's info LOG file with a logger that
// discards everything.
//
// Why: RocksDB 7.8's file logger (EnvLogger) ignores the status of a failed
// write to the LOG file, and its WritableFileWriter asserts on the next one
// ("writable_file_writer.h:312: ... Assertion `sync_without_flush_called_'
// failed"; Debian builds with assertions on). On a full disk the first flush
// that fails logs an error, fails to write it, and the next log line aborts
// the process (SIGABRT) from a background flush thread — instead of the
// write error RocksDB would otherwise return to us. Fixed upstream in later
// RocksDB versions, which grocksdb 1.7 cannot use. Every error that matters
// reaches us as a returned Status; the LOG only held diagnostics.
func discardInfoLog(o *grocksdb.Options) {
	C.kstate_rocksdb_discard_info_log(optionsHandle(o))
}

// optionsHandle returns the C handle of grocksdb options. grocksdb.Options
// keeps it in its first field and exports no accessor;
// TestRocksDBNoInfoLogFile fails if that ever changes.
func optionsHandle(o *grocksdb.Options) *C.rocksdb_options_t {
	return *(**C.rocksdb_options_t)(unsafe.Pointer(o))
}

//go:build cgo && !kstate_nocgo

// A RocksDB WriteBufferManager shared by many databases, whose memtable
// memory is charged to a shared block cache. RocksDB 7.8's C API cannot
// create one (see SharedMemory in sharedmem.go).

#include <memory>

#include <rocksdb/cache.h>
#include <rocksdb/options.h>
#include <rocksdb/write_buffer_manager.h>

// The C API's handles, laid out as in RocksDB's db/c.cc.
struct rocksdb_options_t {
  rocksdb::Options rep;
};
struct rocksdb_cache_t {
  std::shared_ptr<rocksdb::Cache> rep;
};

struct kstate_wbm_t {
  std::shared_ptr<rocksdb::WriteBufferManager> rep;
};

extern "C" kstate_wbm_t* kstate_wbm_create(size_t buffer_size, rocksdb_cache_t* cache, bool allow_stall) {
  return new kstate_wbm_t{std::make_shared<rocksdb::WriteBufferManager>(buffer_size, cache->rep, allow_stall)};
}

// Drops this handle's reference only: a database still open keeps the
// manager (and through it the cache) alive until it closes.
extern "C" void kstate_wbm_destroy(kstate_wbm_t* wbm) { delete wbm; }

extern "C" size_t kstate_wbm_memory_usage(kstate_wbm_t* wbm) { return wbm->rep->memory_usage(); }

extern "C" void kstate_options_set_wbm(rocksdb_options_t* opts, kstate_wbm_t* wbm) {
  opts->rep.write_buffer_manager = wbm->rep;
}

//go:build cgo && !kstate_nocgo

// Get and Write in one cgo crossing each (see rocksdb_fast.go for why).
//
// The C API's handles are opaque in rocksdb/c.h; RocksDB's db/c.cc defines
// each as a struct whose FIRST member is the C++ object (or, for rocksdb_t,
// the DB pointer):
//
//   struct rocksdb_t              { DB* rep; };
//   struct rocksdb_readoptions_t  { ReadOptions rep; Slice upper_bound; ... };
//   struct rocksdb_writeoptions_t { WriteOptions rep; };
//
// so a handle points at its C++ object. Only that first member is read here.

#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <rocksdb/c.h>
#include <rocksdb/db.h>
#include <rocksdb/slice.h>
#include <rocksdb/status.h>
#include <rocksdb/write_batch.h>

namespace {

rocksdb::DB* db_of(rocksdb_t* db) {
  return *reinterpret_cast<rocksdb::DB**>(db);
}

// error_of returns a malloc'd copy of the status text, as the C API does
// (the caller frees it).
char* error_of(const rocksdb::Status& s) { return strdup(s.ToString().c_str()); }

// A per-thread buffer for values RocksDB cannot pin (memtable hits are
// copied): after warm-up a Get allocates nothing on the C side.
thread_local std::string get_scratch;
constexpr size_t kMaxScratch = 1 << 20;

}  // namespace

// kstate_rocksdb_get looks key up. It returns 0 when the key is absent, and
// otherwise stores the value's size in *vlen and copies the value into buf
// when it fits in cap bytes (returning 1), or returns 2 without copying when
// it does not (the caller retries with a buffer of *vlen bytes). On an error
// it returns -1 with *err set.
extern "C" int kstate_rocksdb_get(rocksdb_t* db, const rocksdb_readoptions_t* ro,
                                  const char* key, size_t klen, char* buf,
                                  size_t cap, size_t* vlen, char** err) {
  rocksdb::DB* d = db_of(db);
  const auto* opts = reinterpret_cast<const rocksdb::ReadOptions*>(ro);
  rocksdb::PinnableSlice v(&get_scratch);
  rocksdb::Status s = d->Get(*opts, d->DefaultColumnFamily(),
                             rocksdb::Slice(key, klen), &v);
  if (s.IsNotFound()) {
    return 0;
  }
  if (!s.ok()) {
    *err = error_of(s);
    return -1;
  }
  *vlen = v.size();
  int found = 2;
  if (v.size() <= cap) {
    if (v.size() > 0) {
      memcpy(buf, v.data(), v.size());
    }
    found = 1;
  }
  v.Reset();
  if (get_scratch.capacity() > kMaxScratch) {
    std::string().swap(get_scratch);  // keep no huge value's buffer per thread
  }
  return found;
}

// kstate_rocksdb_write applies the serialized write batch rep[0:len) (the
// WriteBatch wire format: see appendBatchRep in rocksdb_fast.go). RocksDB
// takes its own copy of the bytes.
extern "C" void kstate_rocksdb_write(rocksdb_t* db,
                                     const rocksdb_writeoptions_t* wo,
                                     const char* rep, size_t len, char** err) {
  rocksdb::WriteBatch wb(std::string(rep, len));
  const auto* opts = reinterpret_cast<const rocksdb::WriteOptions*>(wo);
  rocksdb::Status s = db_of(db)->Write(*opts, &wb);
  if (!s.ok()) {
    *err = error_of(s);
  }
}

// kstate_rocksdb_multi_get looks up n keys, given as one buffer keys with
// key i at [kends[i-1], kends[i]) (kends[-1] being 0), in strictly
// increasing order, with RocksDB's batched MultiGet. It writes the values
// found one after another into buf and sets vends[i] to the end of key i's
// value in buf, to -1 when key i is absent, or to -2 when its value was
// not copied because it would have taken the values past limit bytes. It
// returns 0, or -1 with *err set on an error, or, when the values within
// limit do not fit in cap bytes, the bytes they need (nothing then is
// written: the caller retries with a larger buf).
extern "C" long long kstate_rocksdb_multi_get(
    rocksdb_t* db, const rocksdb_readoptions_t* ro, size_t n, const char* keys,
    const size_t* kends, char* buf, size_t cap, size_t limit, long long* vends,
    char** err) {
  rocksdb::DB* d = db_of(db);
  const auto* opts = reinterpret_cast<const rocksdb::ReadOptions*>(ro);
  std::vector<rocksdb::Slice> ks(n);
  size_t start = 0;
  for (size_t i = 0; i < n; i++) {
    ks[i] = rocksdb::Slice(keys + start, kends[i] - start);
    start = kends[i];
  }
  std::vector<rocksdb::PinnableSlice> vs(n);
  std::vector<rocksdb::Status> ss(n);
  d->MultiGet(*opts, d->DefaultColumnFamily(), n, ks.data(), vs.data(),
              ss.data(), /*sorted_input=*/true);
  size_t need = 0;
  for (size_t i = 0; i < n; i++) {
    if (ss[i].IsNotFound()) {
      vends[i] = -1;
    } else if (!ss[i].ok()) {
      *err = error_of(ss[i]);
      return -1;
    } else if (need + vs[i].size() > limit) {
      vends[i] = -2;
    } else {
      need += vs[i].size();
      vends[i] = static_cast<long long>(need);
    }
  }
  if (need > cap) {
    return static_cast<long long>(need);
  }
  size_t at = 0;
  for (size_t i = 0; i < n; i++) {
    if (vends[i] >= 0 && vs[i].size() > 0) {
      memcpy(buf + at, vs[i].data(), vs[i].size());
      at += vs[i].size();
    }
  }
  return 0;
}

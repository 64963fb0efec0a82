//go:build cgo && !kstate_nocgo

// A RocksDB iterator driven in one cgo crossing per step (see
// rocksdb_iter.go for why). Through grocksdb a step is four or five
// crossings: the move, Valid, Key, Value (and Err when invalid), plus a Go
// allocation for each of the key and value Slice wrappers.
//
// The iterator, its read options and copies of its bounds live in one heap
// object that never moves: RocksDB keeps raw pointers to the read options'
// bound Slices for the iterator's whole life.

#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>

#include <rocksdb/c.h>
#include <rocksdb/db.h>
#include <rocksdb/iterator.h>
#include <rocksdb/options.h>
#include <rocksdb/perf_context.h>
#include <rocksdb/slice.h>
#include <rocksdb/status.h>

#include "rocksdb_iter.h"

namespace {

rocksdb::DB* iter_db_of(rocksdb_t* db) {
  return *reinterpret_cast<rocksdb::DB**>(db);
}

}  // namespace

// Members are destroyed in reverse order: the iterator first, then the
// read options and the bound bytes it points into.
//
// The bounds can change between seeks (kstate_iter_step's rebound): RocksDB
// reads *iterate_lower_bound and *iterate_upper_bound at every positioning
// call, so rewriting the Slices they point to and seeking again bounds the
// next scan (MyRocks and LogDevice rely on this; RocksDB tests it since 6.5).
// The lower bound is always set (an empty one bounds nothing). Only adding
// or removing the upper bound needs a new iterator, because RocksDB copies
// the pointer, not the Slice.
struct kstate_iter {
  rocksdb::DB* db;
  std::string lower, upper;
  rocksdb::Slice lower_slice, upper_slice;
  rocksdb::ReadOptions ro;
  std::unique_ptr<rocksdb::Iterator> it;
  uint64_t deletes_skipped;  // tombstones stepped over by this iterator
};

namespace {

void iter_set_bounds(kstate_iter* i, const char* lower, size_t llen,
                     const char* upper, size_t ulen, int has_upper) {
  i->lower.assign(lower == nullptr ? "" : lower, llen);
  i->lower_slice = rocksdb::Slice(i->lower);
  i->ro.iterate_lower_bound = &i->lower_slice;
  bool had_upper = i->ro.iterate_upper_bound != nullptr;
  if (has_upper) {
    i->upper.assign(upper == nullptr ? "" : upper, ulen);
    i->upper_slice = rocksdb::Slice(i->upper);
    i->ro.iterate_upper_bound = &i->upper_slice;
  } else {
    i->upper.clear();
    i->ro.iterate_upper_bound = nullptr;
  }
  if (!i->it || had_upper != (has_upper != 0)) {
    i->it.reset();
    i->it.reset(i->db->NewIterator(i->ro, i->db->DefaultColumnFamily()));
  }
}

}  // namespace

extern "C" kstate_iter* kstate_iter_new(rocksdb_t* db, const char* lower,
                                        size_t llen, const char* upper,
                                        size_t ulen, int has_upper) {
  auto* i = new kstate_iter;
  i->db = iter_db_of(db);
  i->deletes_skipped = 0;
  iter_set_bounds(i, lower, llen, upper, ulen, has_upper);
  return i;
}

extern "C" void kstate_iter_free(kstate_iter* i) { delete i; }

// kstate_iter_step moves the iterator (op is one of the KSTATE_ITER_*
// values; key/klen is the target of the seeks) and reports where it landed:
//
//   0  not positioned (past either end, or an error: *err is then set);
//   1  positioned; *kout and *vout are the key's and value's sizes, and the
//      key followed by the value is copied into buf;
//   2  positioned, but key and value do not fit in cap bytes: nothing is
//      copied; the caller calls again with KSTATE_ITER_CURRENT and a buffer
//      of *kout + *vout bytes.
//
// rebound, when not 0, first changes the iterator's bounds to [lower,
// upper), or [lower, ∞) when has_upper is 0 (op must then be a positioning
// call, not KSTATE_ITER_CURRENT). *skipped is set to the number
// of deleted entries (point tombstones) the iterator has stepped over since
// its creation, from RocksDB's thread-local perf context (counted at its
// default perf level, kEnableCount).
extern "C" int kstate_iter_step(kstate_iter* i, int rebound,
                                const char* lower, size_t llen,
                                const char* upper, size_t ulen, int has_upper,
                                int op, const char* key, size_t klen,
                                char* buf, size_t cap, size_t* kout,
                                size_t* vout, uint64_t* skipped, char** err) {
  if (rebound) {
    iter_set_bounds(i, lower, llen, upper, ulen, has_upper);
  }
  rocksdb::Iterator* it = i->it.get();
  rocksdb::PerfContext* pc = rocksdb::get_perf_context();
  uint64_t dels = pc->internal_delete_skipped_count;
  switch (op) {
    case KSTATE_ITER_FIRST:
      it->SeekToFirst();
      break;
    case KSTATE_ITER_LAST:
      it->SeekToLast();
      break;
    case KSTATE_ITER_NEXT:
      it->Next();
      break;
    case KSTATE_ITER_PREV:
      it->Prev();
      break;
    case KSTATE_ITER_SEEK_GE:
      it->Seek(rocksdb::Slice(key, klen));
      break;
    case KSTATE_ITER_SEEK_LT: {
      // SeekForPrev lands on the last key <= key; step back once if it is
      // key itself.
      rocksdb::Slice k(key, klen);
      it->SeekForPrev(k);
      if (it->Valid() && it->key() == k) {
        it->Prev();
      }
      break;
    }
    case KSTATE_ITER_CURRENT:
      break;
  }
  // The counter is the thread's, and only this call ran on the thread
  // since it was read: the difference is this move's.
  i->deletes_skipped += pc->internal_delete_skipped_count - dels;
  *skipped = i->deletes_skipped;
  if (!it->Valid()) {
    rocksdb::Status s = it->status();
    if (!s.ok()) {
      *err = strdup(s.ToString().c_str());
    }
    return 0;
  }
  rocksdb::Slice k = it->key(), v = it->value();
  *kout = k.size();
  *vout = v.size();
  if (k.size() + v.size() > cap) {
    return 2;
  }
  if (k.size() > 0) {
    memcpy(buf, k.data(), k.size());
  }
  if (v.size() > 0) {
    memcpy(buf + k.size(), v.data(), v.size());
  }
  return 1;
}

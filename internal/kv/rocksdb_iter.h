// The one-crossing RocksDB iterator of rocksdb_iter.cc, for cgo.

#ifndef KSTATE_ROCKSDB_ITER_H
#define KSTATE_ROCKSDB_ITER_H

#include <stddef.h>
#include <stdint.h>

#include <rocksdb/c.h>

#ifdef __cplusplus
extern "C" {
#endif

enum {
  KSTATE_ITER_FIRST = 0,
  KSTATE_ITER_LAST = 1,
  KSTATE_ITER_NEXT = 2,
  KSTATE_ITER_PREV = 3,
  KSTATE_ITER_SEEK_GE = 4,
  KSTATE_ITER_SEEK_LT = 5,
  KSTATE_ITER_CURRENT = 6
};

typedef struct kstate_iter kstate_iter;

kstate_iter* kstate_iter_new(rocksdb_t* db, const char* lower, size_t llen,
                             const char* upper, size_t ulen, int has_upper);
void kstate_iter_free(kstate_iter* i);
int kstate_iter_step(kstate_iter* i, int rebound, const char* lower,
                     size_t llen, const char* upper, size_t ulen,
                     int has_upper, int op, const char* key, size_t klen,
                     char* buf, size_t cap, size_t* kout, size_t* vout,
                     uint64_t* skipped, char** err);

#ifdef __cplusplus
}
#endif

#endif

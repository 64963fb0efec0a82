//go:build cgo && !kstate_nocgo

// The memtable insert hints of RocksOptions.InsertHints (see setInsertHints
// in inserthint.go for why).

#include <memory>

#include <rocksdb/options.h>
#include <rocksdb/slice.h>
#include <rocksdb/slice_transform.h>

// The C API's options handle, laid out as in RocksDB's db/c.cc (the C API
// has no call to set memtable_insert_with_hint_prefix_extractor).
struct rocksdb_options_t {
  rocksdb::Options rep;
};

namespace {

// FirstByte gives every key that does not start with 0x00 its first byte
// as the hint prefix; keys starting with 0x00, and the empty key, get no
// hint (out of the domain). Range deletions must start out of the domain:
// RocksDB 7.8 keeps one hint per prefix for both of a memtable's skip
// lists (point keys and range deletions), and a hint used on the other
// list corrupts it (an assertion in InlineSkipList::Insert fails; later
// RocksDB versions give range deletions no hint).
class FirstByte : public rocksdb::SliceTransform {
 public:
  const char* Name() const override { return "kstate.FirstByte"; }
  rocksdb::Slice Transform(const rocksdb::Slice& key) const override {
    return rocksdb::Slice(key.data(), 1);
  }
  bool InDomain(const rocksdb::Slice& key) const override {
    return key.size() > 0 && key[0] != 0;
  }
};

}  // namespace

extern "C" void kstate_rocksdb_set_insert_hints(rocksdb_options_t* opts) {
  opts->rep.memtable_insert_with_hint_prefix_extractor =
      std::make_shared<FirstByte>();
}

//go:build cgo && !kstate_nocgo

// A RocksDB info logger that discards every message, installed instead of
// RocksDB's own file logger (see discardInfoLog in infolog.go for why).

#include <cstdarg>
#include <memory>

#include <rocksdb/env.h>
#include <rocksdb/options.h>

// The C API's options handle, laid out as in RocksDB's db/c.cc (the C API
// has no call to install a logger it did not create).
struct rocksdb_options_t {
  rocksdb::Options rep;
};

namespace {

class DiscardLogger : public rocksdb::Logger {
 public:
  DiscardLogger() : rocksdb::Logger(rocksdb::InfoLogLevel::HEADER_LEVEL) {}
  void Logv(const char*, va_list) override {}
  void Logv(const rocksdb::InfoLogLevel, const char*, va_list) override {}
  void LogHeader(const char*, va_list) override {}
  size_t GetLogFileSize() const override { return 0; }
};

}  // namespace

extern "C" void kstate_rocksdb_discard_info_log(rocksdb_options_t* opts) {
  opts->rep.info_log = std::make_shared<DiscardLogger>();
}

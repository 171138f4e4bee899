// Internal to io/ (not part of the public API): byte sources and sinks shared by the .npy and
// safetensors readers and writers, and the read-only file mappings of the IDX and text readers.
#pragma once

#include <cstdint>
#include <cstring>
#include <fstream>
#include <istream>
#include <ostream>
#include <stdexcept>
#include <string>

#include "loom/core/allocator.h"
#include "loom/core/array.h"

namespace loom::io::detail {

inline bool host_is_little_endian() {
  const uint16_t one = 1;
  unsigned char first;
  std::memcpy(&first, &one, 1);
  return first == 1;
}

/// Reverses the bytes of each of the `count` elements of `itemsize` bytes at `data`.
void byteswap_inplace(void* data, size_t count, size_t itemsize);

/// Rewrites every byte of a bool buffer as 0 or 1 (files may hold any non-zero byte for true).
void normalize_bools(void* data, size_t count);

/// a * b, or false on overflow.
inline bool checked_mul(uint64_t a, uint64_t b, uint64_t* out) { return !__builtin_mul_overflow(a, b, out); }

/// Whether Loom can describe `shape`: the product of its dimensions (zeros counted as 1, as the
/// row-major strides are computed) must fit in int64.
inline bool strides_fit(const Shape& shape) {
  int64_t p = 1;
  for (int d : shape) {
    if (__builtin_mul_overflow(p, static_cast<int64_t>(d > 1 ? d : 1), &p)) return false;
  }
  return true;
}

/// An allocator buffer freed on scope exit unless released.
class BufferGuard {
 public:
  explicit BufferGuard(allocator::Buffer b) : buf_(b) {}
  ~BufferGuard() {
    if (buf_.ptr) allocator::free(buf_);
  }
  BufferGuard(const BufferGuard&) = delete;
  BufferGuard& operator=(const BufferGuard&) = delete;
  allocator::Buffer get() const { return buf_; }
  allocator::Buffer release() {
    allocator::Buffer b = buf_;
    buf_ = {};
    return b;
  }

 private:
  allocator::Buffer buf_;
};

/// Reads from an istream, knowing how many bytes remain when the stream is seekable, and turns
/// every short read into a std::runtime_error "[op] 'label': ...".
class Reader {
 public:
  Reader(std::istream& in, std::string op, std::string label);

  [[noreturn]] void fail(const std::string& problem) const;
  const std::string& label() const { return label_; }
  bool size_known() const { return size_known_; }
  /// Bytes left in the stream (only when size_known()).
  uint64_t remaining() const { return remaining_; }
  uint64_t position() const { return consumed_; }

  /// Reads exactly n bytes; `what` names them in the error ("the header", "tensor 'w'").
  void read_exact(void* dst, size_t n, const std::string& what);
  /// Reads n bytes into a new allocator buffer. When the size is unknown, large reads go through
  /// bounded chunks so that a lying header cannot make us allocate more than the stream holds.
  allocator::Buffer read_buffer(uint64_t n, const std::string& what);
  /// Reads n bytes into a string, growing it as read_buffer does when the size is unknown.
  std::string read_string(uint64_t n, const std::string& what);

 private:
  // Fails when n bytes cannot be there (more than remain) or cannot be held.
  void check_claim(uint64_t n, const std::string& what) const;
  // Reads n bytes into `out` in growing chunks, for streams of unknown length.
  void read_growing(std::string& out, uint64_t n, const std::string& what);
  std::istream& in_;
  std::string op_, label_;
  bool size_known_ = false;
  uint64_t remaining_ = 0;
  uint64_t consumed_ = 0;
};

/// Where a writer puts bytes.
class Sink {
 public:
  virtual ~Sink() = default;
  virtual void write(const void* data, size_t n) = 0;
};

class OstreamSink : public Sink {
 public:
  OstreamSink(std::ostream& os, std::string op) : os_(os), op_(std::move(op)) {}
  void write(const void* data, size_t n) override;

 private:
  std::ostream& os_;
  std::string op_;
};

/// Writes `<path>.tmp`; commit() syncs it to disk and renames it to `path`. Destroying an
/// uncommitted file removes the temporary.
class AtomicFileSink : public Sink {
 public:
  AtomicFileSink(std::string path, std::string op);
  ~AtomicFileSink() override;
  AtomicFileSink(const AtomicFileSink&) = delete;
  AtomicFileSink& operator=(const AtomicFileSink&) = delete;
  void write(const void* data, size_t n) override;
  void commit();

 private:
  [[noreturn]] void fail(const std::string& what, int err);
  std::string path_, tmp_, op_;
  int fd_ = -1;
};

/// Writes the row-major bytes of evaluated row-contiguous `a`, little-endian.
void write_little_endian(Sink& sink, const array& a);

/// zlib's CRC-32 of n bytes (crc32_z: any length, beyond 4 GiB too).
uint32_t crc32(const void* data, uint64_t n);
/// The CRC-32 of the bytes write_little_endian writes for evaluated row-contiguous `a`.
uint32_t crc32_little_endian(const array& a);

/// Opens `path` for reading; throws "[op] cannot open 'path': reason".
class InputFile {
 public:
  InputFile(const std::string& path, const std::string& op);
  std::istream& stream() { return in_; }

 private:
  std::ifstream in_;
};

/// A read-only, shared memory map of a whole file. An empty file maps nothing (data() is null).
/// Throws std::runtime_error "[op] '<label>': ..." when the file cannot be opened or mapped.
class MappedFile {
 public:
  MappedFile(const std::string& path, const std::string& op, const std::string& label);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const uint8_t* data() const { return data_; }
  uint64_t size() const { return size_; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  const uint8_t* data_ = nullptr;
  uint64_t size_ = 0;
};

/// strerror(err) as a string.
std::string errno_message(int err);

}  // namespace loom::io::detail

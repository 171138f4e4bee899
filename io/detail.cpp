#include "loom/io/detail.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <limits>
#include <vector>

#include "loom/core/eval.h"
#include "loom/core/copy.h"
#include "loom/core/loops.h"

namespace loom::io::detail {

namespace {
// Reads of unknown-length streams above this size go through bounded chunks.
constexpr uint64_t kChunk = uint64_t(64) << 20;
}  // namespace

void byteswap_inplace(void* data, size_t count, size_t itemsize) {
  switch (itemsize) {
    case 2: {
      auto* p = static_cast<uint16_t*>(data);
      for (size_t i = 0; i < count; ++i) p[i] = __builtin_bswap16(p[i]);
      break;
    }
    case 4: {
      auto* p = static_cast<uint32_t*>(data);
      for (size_t i = 0; i < count; ++i) p[i] = __builtin_bswap32(p[i]);
      break;
    }
    case 8: {
      auto* p = static_cast<uint64_t*>(data);
      for (size_t i = 0; i < count; ++i) p[i] = __builtin_bswap64(p[i]);
      break;
    }
    default:
      break;  // one-byte types have no byte order
  }
}

void normalize_bools(void* data, size_t count) {
  auto* p = static_cast<unsigned char*>(data);
  for (size_t i = 0; i < count; ++i) p[i] = p[i] != 0;
}

// ---- Reader ----

Reader::Reader(std::istream& in, std::string op, std::string label)
    : in_(in), op_(std::move(op)), label_(std::move(label)) {
  if (!in_) fail("the stream is not readable (it is in a failed state)");
  const std::streampos pos = in_.tellg();
  if (pos == std::streampos(-1)) {
    in_.clear(in_.rdstate() & ~std::ios::failbit);
    return;  // not seekable: sizes are checked as the bytes arrive
  }
  in_.seekg(0, std::ios::end);
  const std::streampos end = in_.tellg();
  in_.clear();
  in_.seekg(pos);
  if (!in_) fail("cannot seek back to the start of the data");
  if (end != std::streampos(-1) && end >= pos) {
    size_known_ = true;
    remaining_ = static_cast<uint64_t>(end - pos);
  }
}

void Reader::fail(const std::string& problem) const {
  throw std::runtime_error("[" + op_ + "] '" + label_ + "': " + problem);
}

void Reader::read_exact(void* dst, size_t n, const std::string& what) {
  if (n == 0) return;
  if (size_known_ && n > remaining_) {
    fail("truncated file: " + what + " needs " + std::to_string(n) + " bytes but only " + std::to_string(remaining_) +
         " remain");
  }
  in_.read(static_cast<char*>(dst), static_cast<std::streamsize>(n));
  const auto got = static_cast<uint64_t>(in_.gcount());
  if (got != n) {
    fail("truncated file: " + what + " needs " + std::to_string(n) + " bytes but only " + std::to_string(got) +
         " could be read");
  }
  consumed_ += n;
  if (size_known_) remaining_ -= n;
}

void Reader::check_claim(uint64_t n, const std::string& what) const {
  if (size_known_ && n > remaining_) {
    fail("truncated file: " + what + " needs " + std::to_string(n) + " bytes but only " + std::to_string(remaining_) +
         " remain");
  }
  if (n > static_cast<uint64_t>(std::numeric_limits<std::streamsize>::max()) || n > SIZE_MAX) {
    fail(what + " is too large (" + std::to_string(n) + " bytes)");
  }
}

void Reader::read_growing(std::string& out, uint64_t n, const std::string& what) {
  out.clear();
  while (out.size() < n) {
    const size_t old = out.size();
    // Grow geometrically (1 MiB, 1 MiB, 2 MiB, ... up to kChunk) so that a short stream costs little.
    const uint64_t step = std::min<uint64_t>(std::max<uint64_t>(old, uint64_t(1) << 20), kChunk);
    const size_t chunk = static_cast<size_t>(std::min<uint64_t>(n - old, step));
    out.resize(old + chunk);
    in_.read(out.data() + old, static_cast<std::streamsize>(chunk));
    const auto got = static_cast<size_t>(in_.gcount());
    if (got != chunk) {
      fail("truncated file: " + what + " needs " + std::to_string(n) + " bytes but only " + std::to_string(old + got) +
           " could be read");
    }
  }
  consumed_ += n;
}

allocator::Buffer Reader::read_buffer(uint64_t n, const std::string& what) {
  check_claim(n, what);
  if (size_known_ || n <= kChunk) {
    BufferGuard buf(allocator::malloc(static_cast<size_t>(n)));
    read_exact(buf.get().ptr, static_cast<size_t>(n), what);
    return buf.release();
  }
  // Unknown length and a large claim: only grow as far as the stream really goes.
  std::string staged;
  read_growing(staged, n, what);
  BufferGuard buf(allocator::malloc(static_cast<size_t>(n)));
  std::memcpy(buf.get().ptr, staged.data(), static_cast<size_t>(n));
  return buf.release();
}

std::string Reader::read_string(uint64_t n, const std::string& what) {
  check_claim(n, what);
  std::string out;
  if (size_known_) {
    out.resize(static_cast<size_t>(n));
    read_exact(out.data(), out.size(), what);
  } else {
    read_growing(out, n, what);  // a pipe claiming a 100 MB header costs what it really holds
  }
  return out;
}

// ---- sinks ----

void OstreamSink::write(const void* data, size_t n) {
  if (n == 0) return;
  os_.write(static_cast<const char*>(data), static_cast<std::streamsize>(n));
  if (!os_) throw std::runtime_error("[" + op_ + "] writing " + std::to_string(n) + " bytes to the stream failed");
}

AtomicFileSink::AtomicFileSink(std::string path, std::string op)
    : path_(std::move(path)), tmp_(path_ + ".tmp"), op_(std::move(op)) {
  fd_ = ::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd_ < 0) {
    throw std::runtime_error("[" + op_ + "] cannot create '" + tmp_ + "' (to be renamed to '" + path_ +
                             "'): " + errno_message(errno));
  }
}

AtomicFileSink::~AtomicFileSink() {
  if (fd_ >= 0) {
    ::close(fd_);
    ::unlink(tmp_.c_str());
  }
}

void AtomicFileSink::fail(const std::string& what, int err) {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  ::unlink(tmp_.c_str());
  throw std::runtime_error("[" + op_ + "] " + what + ": " + errno_message(err));
}

void AtomicFileSink::write(const void* data, size_t n) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    const ssize_t w = ::write(fd_, p, std::min<size_t>(n, size_t(1) << 30));
    if (w < 0) {
      if (errno == EINTR) continue;
      fail("writing '" + tmp_ + "' failed", errno);
    }
    p += w;
    n -= static_cast<size_t>(w);
  }
}

void AtomicFileSink::commit() {
  if (::fsync(fd_) != 0) fail("flushing '" + tmp_ + "' to disk failed", errno);
  const int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0) {
    const int err = errno;
    ::unlink(tmp_.c_str());
    throw std::runtime_error("[" + op_ + "] closing '" + tmp_ + "' failed: " + errno_message(err));
  }
  if (std::rename(tmp_.c_str(), path_.c_str()) != 0) {
    const int err = errno;
    ::unlink(tmp_.c_str());
    throw std::runtime_error("[" + op_ + "] renaming '" + tmp_ + "' to '" + path_ + "' failed: " + errno_message(err));
  }
  // Make the rename itself durable (best effort: some file systems refuse fsync on directories).
  std::string dir = std::filesystem::path(path_).parent_path().string();
  if (dir.empty()) dir = ".";
  const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    (void)::fsync(dfd);
    ::close(dfd);
  }
}

// ---- arrays ----

namespace {
// Calls f(bytes, n) on the little-endian bytes of evaluated row-contiguous `a`, in order: its own
// buffer on a little-endian host, byte-swapped copies of 1 MiB at a time elsewhere.
template <typename F>
void little_endian_pieces(const array& a, F f) {
  const size_t nbytes = a.nbytes();
  if (nbytes == 0) return;
  const char* src = static_cast<const char*>(a.raw_data());
  if (host_is_little_endian() || a.itemsize() == 1) {
    f(src, nbytes);
    return;
  }
  std::vector<char> chunk;
  const size_t step = (size_t(1) << 20) / 8 * 8;
  for (size_t off = 0; off < nbytes; off += step) {
    const size_t n = std::min(step, nbytes - off);
    chunk.assign(src + off, src + off + n);
    byteswap_inplace(chunk.data(), n / a.itemsize(), a.itemsize());
    f(chunk.data(), n);
  }
}
}  // namespace

void write_little_endian(Sink& sink, const array& a) {
  little_endian_pieces(a, [&](const char* p, size_t n) { sink.write(p, n); });
}

uint32_t crc32(const void* data, uint64_t n) {
  // Pieces of 1 MiB on Loom's threads, joined with crc32_combine: a 100 MB checkpoint's checksums
  // cost half as long on 2 threads (zlib alone does ~3 GB/s on one core).
  constexpr uint64_t kPiece = uint64_t(1) << 20;
  const auto* p = static_cast<const Bytef*>(data);
  const size_t pieces = static_cast<size_t>((n + kPiece - 1) / kPiece);
  if (pieces <= 1) return static_cast<uint32_t>(::crc32_z(0, p, static_cast<z_size_t>(n)));
  std::vector<uLong> part(pieces);
  auto len = [&](size_t i) { return static_cast<z_size_t>(std::min(kPiece, n - i * kPiece)); };
  kernels::parallel_for(
      pieces, [&](size_t b, size_t e) {
        for (size_t i = b; i < e; ++i) part[i] = ::crc32_z(0, p + i * kPiece, len(i));
      },
      2);
  uLong crc = part[0];
  for (size_t i = 1; i < pieces; ++i) crc = ::crc32_combine(crc, part[i], static_cast<z_off_t>(len(i)));
  return static_cast<uint32_t>(crc);
}

uint32_t crc32_little_endian(const array& a) {
  // One piece on a little-endian host: the threaded crc32 above.
  uLong crc = 0;
  bool first = true;
  little_endian_pieces(a, [&](const char* p, size_t n) {
    crc = first ? crc32(p, n) : ::crc32_z(crc, reinterpret_cast<const Bytef*>(p), static_cast<z_size_t>(n));
    first = false;
  });
  return static_cast<uint32_t>(crc);
}

InputFile::InputFile(const std::string& path, const std::string& op) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) {
    throw std::runtime_error("[" + op + "] cannot open '" + path + "': it is a directory");
  }
  errno = 0;
  in_.open(path, std::ios::binary);
  if (!in_) {
    const int err = errno;
    throw std::runtime_error("[" + op + "] cannot open '" + path +
                             "': " + (err ? errno_message(err) : std::string("unknown error")));
  }
}

std::string errno_message(int err) { return std::strerror(err); }

MappedFile::MappedFile(const std::string& path, const std::string& op, const std::string& label) : path_(path) {
  auto fail = [&](const std::string& problem) { throw std::runtime_error("[" + op + "] '" + label + "': " + problem); };
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail("cannot open: " + errno_message(errno));
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    fail("cannot stat: " + errno_message(err));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    fail(S_ISDIR(st.st_mode) ? "it is a directory" : "it is not a regular file");
  }
  size_ = static_cast<uint64_t>(st.st_size);
  if (size_ > 0) {
    void* p = ::mmap(nullptr, size_, PROT_READ, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) {
      const int err = errno;
      ::close(fd);
      fail("cannot map " + std::to_string(size_) + " bytes: " + errno_message(err));
    }
    data_ = static_cast<const uint8_t*>(p);
  }
  ::close(fd);
}

MappedFile::~MappedFile() {
  if (data_) ::munmap(const_cast<uint8_t*>(data_), size_);
}

}  // namespace loom::io::detail

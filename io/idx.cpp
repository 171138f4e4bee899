// IDX files (http://yann.lecun.com/exdb/mnist/): a 4-byte magic (two zero bytes, a type code, the
// number of dimensions), one big-endian uint32 per dimension, then the values, big-endian, C order.
//
// A raw file is memory-mapped as it is. A gzip file cannot be seeked, so it is decompressed once to
// a cache file (validated while it streams, written to a unique temporary and renamed into place)
// and that file is mapped. Reading rows is then a memcpy (uint8) or a byte-swapping copy per row.
#include <fcntl.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <stdexcept>
#include <vector>

#include "loom/io/idx.h"
#include "loom/io/detail.h"

namespace loom::io {

namespace fs = std::filesystem;

namespace detail {

// ---- IDX ----

struct IdxType {
  uint8_t code;
  const char* name;
  size_t size;  // bytes per value in the file
  Dtype dtype;  // what the values are read as
};

namespace {

constexpr IdxType kTypes[] = {
    {0x08, "uint8", 1, uint8}, {0x09, "int8", 1, int32},      {0x0B, "int16", 2, int32},
    {0x0C, "int32", 4, int32}, {0x0D, "float32", 4, float32}, {0x0E, "float64", 8, float64},
};

constexpr uint64_t kMaxHeader = 4 + 4 * 255;

std::string hex(uint64_t v, int digits) {
  static const char* d = "0123456789abcdef";
  std::string s(digits, '0');
  for (int i = digits - 1; i >= 0; --i, v >>= 4) s[i] = d[v & 15];
  return "0x" + s;
}

[[noreturn]] void fail(const std::string& label, const std::string& problem) {
  throw std::runtime_error("[IdxFile] " + label + ": " + problem);
}

struct Header {
  const IdxType* type = nullptr;
  Shape shape;
  uint64_t header_bytes = 0;
  uint64_t data_bytes = 0;
};

uint32_t be32(const uint8_t* p) {
  return (uint32_t(p[0]) << 24) | (uint32_t(p[1]) << 16) | (uint32_t(p[2]) << 8) | uint32_t(p[3]);
}

// Parses the header from the first `avail` bytes. With `final` false, returns false when more bytes
// are needed (while streaming); with `final` true, a short header is a truncation error.
bool parse_header(const uint8_t* p, uint64_t avail, bool final, const std::string& label, Header* out) {
  if (avail < 4) {
    if (!final) return false;
    fail(label, "truncated file: the 4-byte magic number needs 4 bytes but the file has " + std::to_string(avail));
  }
  if (p[0] != 0 || p[1] != 0) {
    fail(label, "bad magic number " + hex(be32(p), 8) +
                    ": an IDX file starts with two zero bytes, a type code and the number of dimensions");
  }
  const IdxType* type = nullptr;
  for (const auto& t : kTypes) {
    if (t.code == p[2]) type = &t;
  }
  if (!type) {
    fail(label, "unknown data type code " + hex(p[2], 2) +
                    " (known: 0x08 uint8, 0x09 int8, 0x0b int16, 0x0c int32, 0x0d float32, 0x0e float64)");
  }
  const int ndim = p[3];
  if (ndim == 0) fail(label, "the header declares 0 dimensions; a dataset needs at least one (the rows)");
  const uint64_t header_bytes = 4 + 4 * uint64_t(ndim);
  if (avail < header_bytes) {
    if (!final) return false;
    fail(label, "truncated file: the header of " + std::to_string(ndim) + " dimensions needs " +
                    std::to_string(header_bytes) + " bytes but the file has " + std::to_string(avail));
  }
  Shape shape(ndim);
  uint64_t count = 1;
  bool overflow = false;
  for (int i = 0; i < ndim; ++i) {
    const uint32_t d = be32(p + 4 + 4 * i);
    if (d > uint32_t(INT_MAX)) {
      fail(label, "dimension " + std::to_string(i) + " is " + std::to_string(d) + ", above Loom's limit of " +
                      std::to_string(INT_MAX));
    }
    shape[i] = static_cast<int>(d);
    overflow |= !detail::checked_mul(count, d, &count);
  }
  uint64_t data_bytes = 0;
  if (overflow || !detail::checked_mul(count, type->size, &data_bytes) || !detail::strides_fit(shape)) {
    fail(label, "shape " + loom::detail::shape_str(shape) + " is too large");
  }
  out->type = type;
  out->shape = std::move(shape);
  out->header_bytes = header_bytes;
  out->data_bytes = data_bytes;
  return true;
}

void check_size(const Header& h, uint64_t file_size, const std::string& label) {
  const uint64_t want = h.header_bytes + h.data_bytes;
  if (file_size == want) return;
  std::string what = "size mismatch: shape " + loom::detail::shape_str(h.shape) + " of " + h.type->name + " needs " +
                     std::to_string(h.data_bytes) + " data bytes after the " + std::to_string(h.header_bytes) +
                     "-byte header (" + std::to_string(want) + " in all) but the file has " + std::to_string(file_size);
  what += file_size < want ? " (truncated)" : " (" + std::to_string(file_size - want) + " bytes too many)";
  fail(label, what);
}

// ---- the cache for .gz files ----

uint64_t fnv1a(const void* data, size_t n, uint64_t h = 0xcbf29ce484222325ull) {
  const auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < n; ++i) {
    h ^= p[i];
    h *= 0x100000001b3ull;
  }
  return h;
}

std::string cache_name(const std::string& path, const struct stat& st) {
  std::error_code ec;
  fs::path abs = fs::absolute(path, ec);
  const std::string key = (ec ? fs::path(path) : abs).lexically_normal().string();
  uint64_t h = fnv1a(key.data(), key.size());
  const int64_t meta[3] = {static_cast<int64_t>(st.st_size), static_cast<int64_t>(st.st_mtim.tv_sec),
                           static_cast<int64_t>(st.st_mtim.tv_nsec)};
  h = fnv1a(meta, sizeof(meta), h);
  std::string stem = fs::path(path).filename().string();
  if (stem.size() > 3 && stem.compare(stem.size() - 3, 3, ".gz") == 0) stem.resize(stem.size() - 3);
  return stem + "-" + hex(h, 16).substr(2) + ".idx";
}

// Holds an exclusive flock on `<path>` while alive (best effort: without the lock, ranks racing on
// first use each decompress to their own temporary and the renames still leave one whole file).
class FileLock {
 public:
  explicit FileLock(const std::string& path) {
    fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd_ >= 0) {
      while (::flock(fd_, LOCK_EX) != 0 && errno == EINTR) {
      }
    }
  }
  ~FileLock() {
    if (fd_ >= 0) ::close(fd_);  // releases the lock
  }
  FileLock(const FileLock&) = delete;
  FileLock& operator=(const FileLock&) = delete;

 private:
  int fd_ = -1;
};

// A temporary file created next to its destination; removed unless committed.
class TempFile {
 public:
  TempFile(const std::string& dst, const std::string& label) : dst_(dst) {
    std::string tmpl = dst + ".tmp.XXXXXX";
    std::vector<char> name(tmpl.begin(), tmpl.end());
    name.push_back('\0');
    fd_ = ::mkstemp(name.data());
    if (fd_ < 0) {
      fail(label, "cannot create a cache file next to '" + dst + "': " + errno_message(errno) +
                      " (set LOOM_CACHE_DIR to a writable directory)");
    }
    tmp_ = name.data();
    ::fchmod(fd_, 0644);
  }
  ~TempFile() {
    if (fd_ >= 0) ::close(fd_);
    if (!tmp_.empty()) ::unlink(tmp_.c_str());
  }
  TempFile(const TempFile&) = delete;
  TempFile& operator=(const TempFile&) = delete;

  void write(const void* data, size_t n, const std::string& label) {
    const char* p = static_cast<const char*>(data);
    while (n > 0) {
      const ssize_t w = ::write(fd_, p, n);
      if (w < 0) {
        if (errno == EINTR) continue;
        fail(label, "writing the cache file '" + tmp_ + "' failed: " + errno_message(errno));
      }
      p += w;
      n -= static_cast<size_t>(w);
    }
  }

  void commit(const std::string& label) {
    if (::fsync(fd_) != 0) fail(label, "flushing the cache file '" + tmp_ + "' failed: " + errno_message(errno));
    const int fd = fd_;
    fd_ = -1;
    if (::close(fd) != 0) fail(label, "closing the cache file '" + tmp_ + "' failed: " + errno_message(errno));
    if (std::rename(tmp_.c_str(), dst_.c_str()) != 0) {
      fail(label, "renaming '" + tmp_ + "' to '" + dst_ + "' failed: " + errno_message(errno));
    }
    tmp_.clear();
  }

 private:
  std::string dst_, tmp_;
  int fd_ = -1;
};

class GzReader {
 public:
  GzReader(const std::string& path, const std::string& label) {
    errno = 0;
    gz_ = ::gzopen(path.c_str(), "rb");
    if (!gz_) fail(label, "cannot open: " + (errno ? errno_message(errno) : std::string("out of memory")));
    ::gzbuffer(gz_, 1 << 18);
  }
  ~GzReader() { ::gzclose_r(gz_); }
  GzReader(const GzReader&) = delete;
  GzReader& operator=(const GzReader&) = delete;

  // Reads up to n bytes; 0 at the end of the data. A damaged or truncated stream throws.
  size_t read(void* dst, unsigned n, const std::string& label) {
    const int got = ::gzread(gz_, dst, n);
    int err = Z_OK;
    const char* msg = ::gzerror(gz_, &err);
    if (got < 0 || (err != Z_OK && err != Z_BUF_ERROR)) {
      fail(label, std::string("cannot decompress: ") + (err == Z_ERRNO ? errno_message(errno) : msg));
    }
    if (err == Z_BUF_ERROR) fail(label, "truncated gzip stream: it ends before its end-of-data marker");
    return static_cast<size_t>(got);
  }

 private:
  gzFile gz_ = nullptr;
};

// Decompresses `src` into `dst`, checking the IDX header as the bytes arrive so that a damaged or
// hostile file is refused before it fills the disk.
void decompress_to(const std::string& src, const std::string& dst, const std::string& label) {
  GzReader gz(src, label);
  TempFile out(dst, label);
  std::vector<uint8_t> buf(size_t(1) << 20);
  std::vector<uint8_t> head;
  Header h;
  bool have_header = false;
  uint64_t total = 0;
  for (;;) {
    const size_t n = gz.read(buf.data(), static_cast<unsigned>(buf.size()), label);
    if (n == 0) break;
    total += n;
    if (!have_header) {
      head.insert(head.end(), buf.begin(), buf.begin() + std::min<size_t>(n, kMaxHeader - head.size()));
      have_header = parse_header(head.data(), head.size(), false, label, &h);
    }
    if (have_header && total > h.header_bytes + h.data_bytes) {
      fail(label, "size mismatch: shape " + loom::detail::shape_str(h.shape) + " of " + h.type->name + " needs " +
                      std::to_string(h.header_bytes + h.data_bytes) +
                      " bytes in all but the decompressed data is longer");
    }
    out.write(buf.data(), n, label);
  }
  if (!have_header) parse_header(head.data(), head.size(), true, label, &h);
  check_size(h, total, label);
  out.commit(label);
}

}  // namespace

struct IdxImpl {
  std::string path;
  std::unique_ptr<MappedFile> map;
  const IdxType* type = nullptr;
  Shape shape;
  Dtype dtype = uint8;
  int64_t rows = 0;
  size_t row_elems = 0;
  const uint8_t* data = nullptr;  // the first value

  // Decodes `elems` consecutive values starting at `src` into `dst` (of `dtype`).
  void decode(const uint8_t* src, size_t elems, uint8_t* dst) const {
    // Rows of a shape with a 0 in it hold nothing, and their buffers are null: memcpy must not see
    // a null pointer even for 0 bytes (UBSan's nonnull check, which the fuzzer hit).
    if (elems == 0) return;
    const bool swap = detail::host_is_little_endian();
    switch (type->code) {
      case 0x08:
        std::memcpy(dst, src, elems);
        break;
      case 0x09: {
        auto* o = reinterpret_cast<int32_t*>(dst);
        for (size_t k = 0; k < elems; ++k) o[k] = static_cast<int8_t>(src[k]);
        break;
      }
      case 0x0B: {
        auto* o = reinterpret_cast<int32_t*>(dst);
        for (size_t k = 0; k < elems; ++k) o[k] = static_cast<int16_t>((src[2 * k] << 8) | src[2 * k + 1]);
        break;
      }
      default:  // 4- and 8-byte values: copy, then fix the byte order
        std::memcpy(dst, src, elems * type->size);
        if (swap) detail::byteswap_inplace(dst, elems, type->size);
        break;
    }
  }
};

}  // namespace detail

namespace {

std::shared_ptr<detail::IdxImpl> make_impl(const std::string& path, std::unique_ptr<detail::MappedFile> map,
                                           const std::string& label) {
  detail::Header h;
  detail::parse_header(map->data(), map->size(), true, label, &h);
  detail::check_size(h, map->size(), label);
  auto impl = std::make_shared<detail::IdxImpl>();
  impl->path = path;
  impl->type = h.type;
  impl->shape = h.shape;
  impl->dtype = h.type->dtype;
  impl->rows = h.shape[0];
  impl->row_elems = 1;
  for (size_t i = 1; i < h.shape.size(); ++i) impl->row_elems *= static_cast<size_t>(h.shape[i]);
  impl->data = map->data() ? map->data() + h.header_bytes : nullptr;
  impl->map = std::move(map);
  return impl;
}

// The cache file if it exists and is a whole IDX file; null otherwise.
std::shared_ptr<detail::IdxImpl> try_cached(const std::string& path, const std::string& cache,
                                            const std::string& label) {
  std::error_code ec;
  if (!fs::is_regular_file(cache, ec)) return nullptr;
  try {
    return make_impl(path, std::make_unique<detail::MappedFile>(cache, "IdxFile", cache), label);
  } catch (const std::runtime_error&) {
    return nullptr;  // damaged (e.g. by a crash): decompress again
  }
}

}  // namespace

std::string default_cache_dir() {
  auto env = [](const char* name) -> std::string {
    const char* v = std::getenv(name);
    return v ? v : "";
  };
  if (!env("LOOM_CACHE_DIR").empty()) return env("LOOM_CACHE_DIR");
  if (!env("XDG_CACHE_HOME").empty()) return (fs::path(env("XDG_CACHE_HOME")) / "loom").string();
  if (!env("HOME").empty()) return (fs::path(env("HOME")) / ".cache" / "loom").string();
  std::error_code ec;
  fs::path tmp = fs::temp_directory_path(ec);
  if (ec) tmp = "/tmp";
  return (tmp / ("loom-cache-" + std::to_string(::getuid()))).string();
}

IdxFile IdxFile::open(const std::string& path, const std::string& cache_dir) {
  const std::string label = "'" + path + "'";
  // Look at the first two bytes: gzip streams start with 1f 8b.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) detail::fail(label, "cannot open: " + detail::errno_message(errno));
  struct stat st {};
  unsigned char magic[2] = {0, 0};
  std::string problem;
  if (::fstat(fd, &st) != 0) {
    problem = "cannot stat: " + detail::errno_message(errno);
  } else if (S_ISDIR(st.st_mode)) {
    problem = "it is a directory";
  } else if (!S_ISREG(st.st_mode)) {
    problem = "it is not a regular file";
  }
  ssize_t got = 0;
  if (problem.empty()) {
    got = ::pread(fd, magic, 2, 0);
    if (got < 0) problem = "cannot read: " + detail::errno_message(errno);
  }
  ::close(fd);
  if (!problem.empty()) detail::fail(label, problem);
  const bool gz = got == 2 && magic[0] == 0x1f && magic[1] == 0x8b;
  if (!gz) return IdxFile(make_impl(path, std::make_unique<detail::MappedFile>(path, "IdxFile", path), label));

  const std::string dir = cache_dir.empty() ? default_cache_dir() : cache_dir;
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) {
    detail::fail(label, "cannot create the cache directory '" + dir + "' for its decompressed copy: " + ec.message() +
                            " (set LOOM_CACHE_DIR to a writable directory)");
  }
  const std::string cache = (fs::path(dir) / detail::cache_name(path, st)).string();
  const std::string cache_label = label + " (decompressed to '" + cache + "')";
  auto impl = try_cached(path, cache, cache_label);
  if (!impl) {
    detail::FileLock lock(cache + ".lock");
    impl = try_cached(path, cache, cache_label);  // another process may have finished meanwhile
    if (!impl) {
      detail::decompress_to(path, cache, label);
      impl = make_impl(path, std::make_unique<detail::MappedFile>(cache, "IdxFile", cache), cache_label);
    }
  }
  return IdxFile(std::move(impl));
}

const Shape& IdxFile::shape() const { return impl_->shape; }
Dtype IdxFile::dtype() const { return impl_->dtype; }
int64_t IdxFile::rows() const { return impl_->rows; }
const std::string& IdxFile::path() const { return impl_->path; }
const std::string& IdxFile::mapped_path() const { return impl_->map->path(); }

array IdxFile::read_rows(const std::vector<int64_t>& rows) const { return read_rows(rows.data(), rows.size()); }

array IdxFile::read_rows(const int64_t* rows, size_t count) const {
  const auto& f = *impl_;
  for (size_t i = 0; i < count; ++i) {
    if (rows[i] < 0 || rows[i] >= f.rows) {
      throw std::out_of_range("[IdxFile::read_rows] row " + std::to_string(rows[i]) + " is out of range for '" +
                              f.path + "' with " + std::to_string(f.rows) + " rows");
    }
  }
  if (count > size_t(INT_MAX)) {
    throw std::invalid_argument("[IdxFile::read_rows] " + std::to_string(count) + " rows exceed Loom's shape limit");
  }
  Shape shape = f.shape;
  shape[0] = static_cast<int>(count);
  if (!detail::strides_fit(shape)) {
    // More rows than the file has (repeats) can take a shape past what Loom describes, when a 0
    // in it makes the file itself small (found by fuzz_idx: 2 rows of (1, 0, 23551, 982784, ...)).
    throw std::invalid_argument("[IdxFile::read_rows] " + std::to_string(count) + " rows of '" + f.path +
                                "' make shape " + loom::detail::shape_str(shape) +
                                ", too large for Loom (its strides overflow int64)");
  }
  const size_t in_row = f.row_elems * f.type->size, out_row = f.row_elems * f.dtype.size;
  detail::BufferGuard buf(allocator::malloc(count * out_row));
  auto* out = static_cast<uint8_t*>(buf.get().ptr);
  for (size_t i = 0; i < count; ++i)
    f.decode(f.data + static_cast<size_t>(rows[i]) * in_row, f.row_elems, out + i * out_row);
  return array(buf.release(), std::move(shape), f.dtype);
}

namespace {

template <typename In>
void convert_values(const In* src, size_t n, Dtype out_dtype, void* dst) {
  LOOM_DISPATCH_REAL(out_dtype, Out, {
    auto* o = static_cast<Out*>(dst);
    for (size_t i = 0; i < n; ++i) o[i] = cast_value<Out>(src[i]);
  });
}

}  // namespace

array IdxFile::read_rows(const std::vector<int64_t>& rows, Dtype dtype) const {
  array a = read_rows(rows);
  if (a.dtype() == dtype) return a;
  detail::BufferGuard buf(allocator::malloc(a.size() * dtype.size));
  switch (a.dtype().val) {  // the dtypes IDX values are read as
    case Dtype::Val::uint8:
      convert_values(a.data<uint8_t>(), a.size(), dtype, buf.get().ptr);
      break;
    case Dtype::Val::int32:
      convert_values(a.data<int32_t>(), a.size(), dtype, buf.get().ptr);
      break;
    case Dtype::Val::float32:
      convert_values(a.data<float>(), a.size(), dtype, buf.get().ptr);
      break;
    default:
      convert_values(a.data<double>(), a.size(), dtype, buf.get().ptr);
      break;
  }
  return array(buf.release(), a.shape(), dtype);
}

array IdxFile::read_range(int64_t start, int64_t stop) const {
  const auto& f = *impl_;
  if (start < 0 || stop < start || stop > f.rows) {
    throw std::out_of_range("[IdxFile::read_range] rows [" + std::to_string(start) + ", " + std::to_string(stop) +
                            ") are out of range for '" + f.path + "' with " + std::to_string(f.rows) + " rows");
  }
  Shape shape = f.shape;
  shape[0] = static_cast<int>(stop - start);
  const size_t elems = static_cast<size_t>(stop - start) * f.row_elems;
  detail::BufferGuard buf(allocator::malloc(elems * f.dtype.size));
  if (elems > 0) {
    f.decode(f.data + static_cast<size_t>(start) * f.row_elems * f.type->size, elems,
             static_cast<uint8_t*>(buf.get().ptr));
  }
  return array(buf.release(), std::move(shape), f.dtype);
}

array IdxFile::read_all() const { return read_range(0, impl_->rows); }

}  // namespace loom::io

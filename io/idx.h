// IDX files, the format of MNIST and Fashion-MNIST: a memory-mapped reader of rows.
//
// A raw file is memory-mapped as it is; a .gz is decompressed once to a cache file, which is then
// mapped. Reading rows is a memcpy (or a byte-swapping copy) of the rows asked for. The datasets
// built on these files (data::IdxDataset, data::fashion_mnist) are in loom/data/dataset.h.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "loom/core/array.h"

namespace loom::io {

namespace detail {
struct IdxImpl;
}  // namespace detail

/// The directory where decompressed copies of .gz files are cached: $LOOM_CACHE_DIR, else
/// $XDG_CACHE_HOME/loom, else $HOME/.cache/loom, else <tmp>/loom-cache-<uid>.
std::string default_cache_dir();

/// An IDX file (the format of MNIST and Fashion-MNIST), memory-mapped. Data types: 0x08 uint8,
/// 0x09 int8 (read as int32), 0x0B int16 (read as int32), 0x0C int32, 0x0D float32, 0x0E float64;
/// values are big-endian in the file. Axis 0 indexes the rows. Copies share the mapping.
class IdxFile {
 public:
  /// Opens a raw or gzip-compressed (detected by its magic bytes) IDX file. A .gz is decompressed
  /// once into `cache_dir` (default_cache_dir() when empty), keyed by the source's path, size and
  /// mtime and written to a unique temporary then renamed, so ranks racing on first use are safe.
  /// Missing, truncated or malformed files throw std::runtime_error "[IdxFile] '<path>': ...".
  static IdxFile open(const std::string& path, const std::string& cache_dir = "");

  /// The full shape, rows first.
  const Shape& shape() const;
  /// The dtype arrays are read as (see the class comment).
  Dtype dtype() const;
  int64_t rows() const;
  /// The path given to open().
  const std::string& path() const;
  /// The file actually mapped (the cache file for a .gz).
  const std::string& mapped_path() const;

  /// The given rows in the given order (repeats allowed), shape [rows.size(), shape()[1:]...].
  /// A row outside [0, rows()) throws std::out_of_range; a result shape Loom cannot describe (more
  /// than INT_MAX rows, or strides beyond int64) throws std::invalid_argument.
  array read_rows(const std::vector<int64_t>& rows) const;
  array read_rows(const int64_t* rows, size_t count) const;
  /// The rows converted to `dtype` (e.g. uint8 labels to int32) by a plain loop, with no graph.
  array read_rows(const std::vector<int64_t>& rows, Dtype dtype) const;
  /// Rows [start, stop).
  array read_range(int64_t start, int64_t stop) const;
  array read_all() const;

 private:
  explicit IdxFile(std::shared_ptr<const detail::IdxImpl> impl) : impl_(std::move(impl)) {}
  std::shared_ptr<const detail::IdxImpl> impl_;
};

}  // namespace loom::io

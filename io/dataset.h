// Datasets for (data-parallel) training: IDX files (MNIST / Fashion-MNIST), byte-level text, and a
// loader that cuts each epoch's shuffled global batches into one shard per rank.
//
// Every rank of a job computes the same permutation of the samples from (seed, epoch) and reads
// only the rows of its own shard: IDX files are memory-mapped (a .gz is decompressed once to a
// cache file), text files too, and a batch is a memcpy (or a widening copy) of the rows it needs.
#pragma once

#include <cstdint>
#include <iterator>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "loom/core/array.h"
#include "loom/distributed/distributed.h"

namespace loom::io {

namespace detail {
struct IdxImpl;
struct TextImpl;
}  // namespace detail

/// A batch: inputs and targets, evaluated.
using Batch = std::pair<array, array>;

// ---- IDX files ----

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
  /// A row outside [0, rows()) throws std::out_of_range.
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

// ---- datasets ----

/// A random-access source of samples. get() is called once per batch, never per element.
class Dataset {
 public:
  virtual ~Dataset() = default;
  /// The number of samples.
  virtual int64_t size() const = 0;
  /// The samples at `indices` (each in [0, size()), in that order) stacked along a new axis 0.
  virtual Batch get(const std::vector<int64_t>& indices) const = 0;
};

/// Inputs and targets from two IDX files with the same number of rows. `x_dtype` / `y_dtype`, when
/// given, convert the rows read (e.g. labels to int32 for a loss).
class IdxDataset : public Dataset {
 public:
  IdxDataset(IdxFile x, IdxFile y, std::optional<Dtype> x_dtype = std::nullopt,
             std::optional<Dtype> y_dtype = std::nullopt);
  int64_t size() const override { return x_.rows(); }
  Batch get(const std::vector<int64_t>& indices) const override;
  const IdxFile& x() const { return x_; }
  const IdxFile& y() const { return y_; }

 private:
  IdxFile x_, y_;
  std::optional<Dtype> x_dtype_, y_dtype_;
};

/// Fashion-MNIST (or MNIST: same file names) from `dir`: split "train" (60000 samples) or "test"
/// (10000). Each of `<prefix>-images-idx3-ubyte` and `<prefix>-labels-idx1-ubyte` is taken raw, or
/// else with ".gz". x: uint8 [n, 28, 28] (pixels 0..255); y: int32 [n] (classes 0..9).
IdxDataset fashion_mnist(const std::string& dir = "/usr/share/datasets/fashion-mnist",
                         const std::string& split = "train", const std::string& cache_dir = "");

/// Rows of two in-memory arrays with the same first dimension (evaluated once, at construction).
class ArrayDataset : public Dataset {
 public:
  ArrayDataset(const array& x, const array& y);
  int64_t size() const override;
  Batch get(const std::vector<int64_t>& indices) const override;

 private:
  array x_, y_;
};

/// Byte-level language-model samples from text files, memory-mapped and read as one concatenated
/// stream of bytes. Sample i is the window starting at byte s = i * stride: x = bytes[s, s+context)
/// and y = bytes[s+1, s+context+1), both int32 [context]. The default stride (0 means `context`)
/// makes the x windows tile the text, so every byte after the first is a target exactly once.
class TextDataset : public Dataset {
 public:
  explicit TextDataset(const std::vector<std::string>& files, int context = 128, int64_t stride = 0);
  int64_t size() const override;
  Batch get(const std::vector<int64_t>& indices) const override;
  int context() const;
  int64_t stride() const;
  /// Total bytes of all files.
  int64_t num_bytes() const;

 private:
  std::shared_ptr<const detail::TextImpl> impl_;
};

/// The fortune(6) text files of `dir`: regular files whose names do not end in ".dat" or ".u8",
/// sorted by name (so every rank and machine lists them in the same order).
std::vector<std::string> fortune_files(const std::string& dir = "/usr/share/games/fortunes");

// ---- sharded batches ----

/// A deterministic permutation of 0..n-1 for (seed, epoch): a splitmix64 stream seeded from both,
/// driving a Fisher-Yates shuffle with unbiased bounded draws. Identical on every platform.
std::vector<int64_t> permutation(int64_t n, uint64_t seed, int64_t epoch);

/// What to do with the last N % batch_size samples of an epoch.
enum class Remainder {
  drop,  ///< skip them (every batch is full)
  pad,   ///< fill the last batch by wrapping around to the start of the epoch's order
};

struct LoaderOptions {
  bool shuffle = true;
  uint64_t seed = 0;
  Remainder remainder = Remainder::drop;
};

/// Which part of each global batch this process reads.
struct Shard {
  int rank = 0;
  int size = 1;
  Shard() = default;
  Shard(int rank, int size);
  Shard(const distributed::Group& group);  // NOLINT: implicit, a Group is a shard
  /// This process in distributed::init()'s world (rank 0 of 1 when not started by mpirun).
  static Shard world();
};

/// Global batches of `batch_size` samples, each split evenly across the shard's ranks:
///   order   = shuffle ? permutation(N, seed, epoch) : 0..N-1
///   batch i = order[i*B, (i+1)*B)   (positions past N wrap to order[p % N] with Remainder::pad)
///   rank r of S reads positions [i*B + r*B/S, i*B + (r+1)*B/S) of it, and only those samples.
/// So one rank with batch B sees exactly the union of what S ranks see, and every rank yields the
/// same number of batches. Use as `for (auto& [x, y] : loader)`; call set_epoch(e) before each
/// epoch for a new order.
class DataLoader {
 public:
  DataLoader(std::shared_ptr<const Dataset> dataset, int64_t batch_size, LoaderOptions options = {},
             Shard shard = Shard::world());
  /// Takes a copy of a concrete dataset (the library's datasets are cheap handles).
  template <typename D, typename = std::enable_if_t<std::is_base_of_v<Dataset, std::decay_t<D>>>>
  DataLoader(D&& dataset, int64_t batch_size, LoaderOptions options = {}, Shard shard = Shard::world())
      : DataLoader(std::make_shared<const std::decay_t<D>>(std::forward<D>(dataset)), batch_size, options, shard) {}

  /// Selects the epoch's order and restarts iteration at batch 0.
  void set_epoch(int64_t epoch);
  int64_t epoch() const { return epoch_; }
  /// Iteration (begin()) starts at batch k of the current epoch, to resume a run; 0 <= k <=
  /// num_batches(). set_epoch resets it to 0.
  void set_start_batch(int64_t k);
  int64_t start_batch() const { return start_; }

  /// Batches per epoch, the same on every rank.
  int64_t num_batches() const;
  int64_t batch_size() const { return batch_size_; }
  /// batch_size() / shard().size: the rows this rank reads per batch.
  int64_t local_batch_size() const { return batch_size_ / shard_.size; }
  const Shard& shard() const { return shard_; }
  const Dataset& dataset() const { return *dataset_; }

  /// The sample indices of global batch i of the current epoch.
  std::vector<int64_t> global_indices(int64_t i) const;
  /// The sample indices this rank reads for batch i.
  std::vector<int64_t> indices(int64_t i) const;
  /// This rank's part of batch i.
  Batch batch(int64_t i) const;

  class iterator {
   public:
    using iterator_category = std::input_iterator_tag;
    using value_type = Batch;
    using difference_type = std::ptrdiff_t;
    using pointer = Batch*;
    using reference = Batch&;
    iterator(const DataLoader* loader, int64_t i) : loader_(loader), i_(i) {}
    /// Reads the batch on first access.
    Batch& operator*();
    Batch* operator->() { return &**this; }
    iterator& operator++();
    bool operator==(const iterator& o) const { return i_ == o.i_; }
    bool operator!=(const iterator& o) const { return i_ != o.i_; }
    int64_t index() const { return i_; }

   private:
    const DataLoader* loader_;
    int64_t i_;
    std::optional<Batch> batch_;
  };
  iterator begin() const { return iterator(this, start_); }
  iterator end() const { return iterator(this, num_batches()); }

 private:
  int64_t position_to_sample(int64_t p) const;

  std::shared_ptr<const Dataset> dataset_;
  int64_t batch_size_;
  LoaderOptions options_;
  Shard shard_;
  int64_t epoch_ = 0, start_ = 0;
  int64_t n_ = 0;
  std::vector<int64_t> order_;  // empty without shuffle
};

}  // namespace loom::io

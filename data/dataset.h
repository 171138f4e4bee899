// Datasets for training: samples from IDX files (MNIST / Fashion-MNIST), from in-memory arrays and
// from byte-level text. The sharded loader that batches them is in loom/data/loader.h.
//
// A dataset reads only the samples it is asked for: IDX and text files are memory-mapped (see
// loom/io/idx.h and loom/io/text.h), and a batch is a memcpy (or a widening copy) of the rows it
// needs.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "loom/core/array.h"
#include "loom/io/idx.h"
#include "loom/io/text.h"

namespace loom::data {

/// A batch: inputs and targets, evaluated.
using Batch = std::pair<array, array>;

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
  IdxDataset(io::IdxFile x, io::IdxFile y, std::optional<Dtype> x_dtype = std::nullopt,
             std::optional<Dtype> y_dtype = std::nullopt);
  int64_t size() const override { return x_.rows(); }
  Batch get(const std::vector<int64_t>& indices) const override;
  const io::IdxFile& x() const { return x_; }
  const io::IdxFile& y() const { return y_; }

 private:
  io::IdxFile x_, y_;
  std::optional<Dtype> x_dtype_, y_dtype_;
};

/// Fashion-MNIST (or MNIST: same file names) from `dir`: split "train" (60000 samples) or "test"
/// (10000). Each of `<prefix>-images-idx3-ubyte` and `<prefix>-labels-idx1-ubyte` is taken raw, or
/// else with ".gz" (decompressed once into `cache_dir`, see io::IdxFile::open). x: uint8
/// [n, 28, 28] (pixels 0..255); y: int32 [n] (classes 0..9).
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

/// The samples [begin, end) of another dataset (a train / held-out split): sample i is base's
/// begin + i. Throws std::invalid_argument unless 0 <= begin <= end <= base->size(), and
/// std::out_of_range from get() for an index outside [0, size()).
class Subset : public Dataset {
 public:
  Subset(std::shared_ptr<const Dataset> base, int64_t begin, int64_t end);
  int64_t size() const override { return end_ - begin_; }
  Batch get(const std::vector<int64_t>& indices) const override;

 private:
  std::shared_ptr<const Dataset> base_;
  int64_t begin_, end_;
};

/// Byte-level language-model samples from text files, memory-mapped and read as one concatenated
/// stream of bytes (io::TextFiles). Sample i is the window starting at byte s = i * stride:
/// x = bytes[s, s+context) and y = bytes[s+1, s+context+1), both int32 [context]. The default
/// stride (0 means `context`) makes the x windows tile the text, so every byte after the first is
/// a target exactly once.
class TextDataset : public Dataset {
 public:
  explicit TextDataset(const std::vector<std::string>& files, int context = 128, int64_t stride = 0);
  int64_t size() const override { return windows_; }
  Batch get(const std::vector<int64_t>& indices) const override;
  int context() const { return context_; }
  int64_t stride() const { return stride_; }
  /// Total bytes of all files.
  int64_t num_bytes() const { return static_cast<int64_t>(text_.size()); }

 private:
  io::TextFiles text_;
  int context_;
  int64_t stride_;
  int64_t windows_ = 0;
};

/// The fortune(6) text files of `dir`: regular files whose names do not end in ".dat" or ".u8",
/// sorted by name (so every rank and machine lists them in the same order).
std::vector<std::string> fortune_files(const std::string& dir = "/usr/share/games/fortunes");

}  // namespace loom::data

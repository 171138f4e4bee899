// The datasets built on IDX files (Fashion-MNIST among them) and on in-memory arrays.
#include <climits>
#include <cstring>
#include <filesystem>
#include <stdexcept>

#include "loom/core/copy.h"
#include "loom/data/dataset.h"

namespace loom::data {

namespace {

// Rows `indices` of row-contiguous evaluated `a`, by memcpy.
array gather_rows(const array& a, const std::vector<int64_t>& indices, const char* op) {
  const int64_t n = a.shape(0);
  for (int64_t i : indices) {
    if (i < 0 || i >= n) {
      throw std::out_of_range(std::string("[") + op + "] sample " + std::to_string(i) + " is out of range for " +
                              std::to_string(n) + " samples");
    }
  }
  if (indices.size() > size_t(INT_MAX)) throw std::invalid_argument(std::string("[") + op + "] too many indices");
  Shape shape = a.shape();
  shape[0] = static_cast<int>(indices.size());
  const size_t row = n == 0 ? 0 : a.nbytes() / static_cast<size_t>(n);
  array out(allocator::malloc(row * indices.size()), std::move(shape), a.dtype());
  auto* dst = static_cast<char*>(out.raw_data());
  const auto* src = static_cast<const char*>(a.raw_data());
  for (size_t r = 0; r < indices.size(); ++r) std::memcpy(dst + r * row, src + indices[r] * row, row);
  return out;
}

}  // namespace

// ---- datasets ----

IdxDataset::IdxDataset(io::IdxFile x, io::IdxFile y, std::optional<Dtype> x_dtype, std::optional<Dtype> y_dtype)
    : x_(std::move(x)), y_(std::move(y)), x_dtype_(x_dtype), y_dtype_(y_dtype) {
  if (x_.rows() != y_.rows()) {
    throw std::invalid_argument("[IdxDataset] '" + x_.path() + "' has " + std::to_string(x_.rows()) + " rows but '" +
                                y_.path() + "' has " + std::to_string(y_.rows()));
  }
}

Batch IdxDataset::get(const std::vector<int64_t>& indices) const {
  return {x_dtype_ ? x_.read_rows(indices, *x_dtype_) : x_.read_rows(indices),
          y_dtype_ ? y_.read_rows(indices, *y_dtype_) : y_.read_rows(indices)};
}

IdxDataset fashion_mnist(const std::string& dir, const std::string& split, const std::string& cache_dir) {
  std::string prefix;
  if (split == "train") {
    prefix = "train";
  } else if (split == "test" || split == "t10k") {
    prefix = "t10k";
  } else {
    throw std::invalid_argument("[fashion_mnist] split must be \"train\" or \"test\", got \"" + split + "\"");
  }
  auto find = [&](const std::string& name) {
    const std::filesystem::path raw = std::filesystem::path(dir) / name;
    std::error_code ec;
    if (std::filesystem::exists(raw, ec)) return raw.string();
    const std::string gz = raw.string() + ".gz";
    if (std::filesystem::exists(gz, ec)) return gz;
    throw std::runtime_error("[fashion_mnist] neither '" + raw.string() + "' nor '" + gz + "' exists");
  };
  io::IdxFile images = io::IdxFile::open(find(prefix + "-images-idx3-ubyte"), cache_dir);
  io::IdxFile labels = io::IdxFile::open(find(prefix + "-labels-idx1-ubyte"), cache_dir);
  if (images.dtype() != uint8 || images.shape().size() != 3) {
    throw std::runtime_error("[fashion_mnist] '" + images.path() + "' holds " + to_string(images.dtype()) + " " +
                             loom::detail::shape_str(images.shape()) + ", expected uint8 images [n, rows, cols]");
  }
  if (labels.dtype() != uint8 || labels.shape().size() != 1) {
    throw std::runtime_error("[fashion_mnist] '" + labels.path() + "' holds " + to_string(labels.dtype()) + " " +
                             loom::detail::shape_str(labels.shape()) + ", expected uint8 labels [n]");
  }
  return IdxDataset(std::move(images), std::move(labels), std::nullopt, int32);
}

ArrayDataset::ArrayDataset(const array& x, const array& y) : x_(x), y_(y) {
  if (x.ndim() == 0 || y.ndim() == 0 || x.shape(0) != y.shape(0)) {
    throw std::invalid_argument("[ArrayDataset] x and y need the same first dimension, got " +
                                loom::detail::shape_str(x.shape()) + " and " + loom::detail::shape_str(y.shape()));
  }
  x_ = kernels::evaluated_row_contiguous(x);
  y_ = kernels::evaluated_row_contiguous(y);
}

int64_t ArrayDataset::size() const { return x_.shape(0); }

Subset::Subset(std::shared_ptr<const Dataset> base, int64_t begin, int64_t end)
    : base_(std::move(base)), begin_(begin), end_(end) {
  if (!base_) throw std::invalid_argument("[Subset] needs a dataset, got none");
  if (begin < 0 || begin > end || end > base_->size()) {
    throw std::invalid_argument("[Subset] the range [" + std::to_string(begin) + ", " + std::to_string(end) +
                                ") is not within a dataset of " + std::to_string(base_->size()) + " samples");
  }
}

Batch Subset::get(const std::vector<int64_t>& indices) const {
  std::vector<int64_t> shifted(indices);
  for (auto& i : shifted) {
    if (i < 0 || i >= size()) {
      throw std::out_of_range("[Subset] index " + std::to_string(i) + " is out of range for " +
                              std::to_string(size()) + " samples");
    }
    i += begin_;
  }
  return base_->get(shifted);
}

Batch ArrayDataset::get(const std::vector<int64_t>& indices) const {
  return {gather_rows(x_, indices, "ArrayDataset::get"), gather_rows(y_, indices, "ArrayDataset::get")};
}

}  // namespace loom::data

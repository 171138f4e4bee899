// The dataset types built on IDX files and arrays, the epoch permutation, and the sharded loader.
#include <climits>
#include <cstring>
#include <filesystem>
#include <numeric>
#include <stdexcept>

#include "loom/io/dataset.h"
#include "loom/io/detail.h"

namespace loom::io {

namespace {

// splitmix64 (Vigna): a 64-bit counter passed through a bijective finalizer.
struct SplitMix64 {
  uint64_t state;
  uint64_t next() {
    uint64_t z = (state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
};

uint64_t mix(uint64_t x) { return SplitMix64{x}.next(); }

// Uniform in [0, bound) without modulo bias: draws below 2^64 mod bound are rejected.
uint64_t uniform_below(SplitMix64& g, uint64_t bound) {
  const uint64_t threshold = (0 - bound) % bound;
  for (;;) {
    const uint64_t r = g.next();
    if (r >= threshold) return r % bound;
  }
}

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
  detail::BufferGuard buf(allocator::malloc(row * indices.size()));
  auto* out = static_cast<char*>(buf.get().ptr);
  const auto* src = static_cast<const char*>(a.raw_data());
  for (size_t r = 0; r < indices.size(); ++r) std::memcpy(out + r * row, src + indices[r] * row, row);
  return array(buf.release(), std::move(shape), a.dtype());
}

}  // namespace

// ---- permutation ----

std::vector<int64_t> permutation(int64_t n, uint64_t seed, int64_t epoch) {
  if (n < 0) throw std::invalid_argument("[permutation] n must be >= 0, got " + std::to_string(n));
  std::vector<int64_t> p(static_cast<size_t>(n));
  std::iota(p.begin(), p.end(), int64_t(0));
  SplitMix64 g{mix(mix(seed) ^ static_cast<uint64_t>(epoch))};
  for (int64_t i = n - 1; i > 0; --i) {
    const auto j = static_cast<int64_t>(uniform_below(g, static_cast<uint64_t>(i) + 1));
    std::swap(p[i], p[j]);
  }
  return p;
}

// ---- datasets ----

IdxDataset::IdxDataset(IdxFile x, IdxFile y, std::optional<Dtype> x_dtype, std::optional<Dtype> y_dtype)
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
  IdxFile images = IdxFile::open(find(prefix + "-images-idx3-ubyte"), cache_dir);
  IdxFile labels = IdxFile::open(find(prefix + "-labels-idx1-ubyte"), cache_dir);
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
  x_ = detail::row_major(x);
  y_ = detail::row_major(y);
}

int64_t ArrayDataset::size() const { return x_.shape(0); }

Batch ArrayDataset::get(const std::vector<int64_t>& indices) const {
  return {gather_rows(x_, indices, "ArrayDataset::get"), gather_rows(y_, indices, "ArrayDataset::get")};
}

// ---- sharding ----

Shard::Shard(int r, int s) : rank(r), size(s) {
  if (s < 1) throw std::invalid_argument("[Shard] size must be at least 1, got " + std::to_string(s));
  if (r < 0 || r >= s) {
    throw std::invalid_argument("[Shard] rank " + std::to_string(r) + " is outside a group of size " +
                                std::to_string(s));
  }
}

Shard::Shard(const distributed::Group& group) : Shard(group.rank(), group.size()) {}

Shard Shard::world() { return Shard(distributed::init()); }

DataLoader::DataLoader(std::shared_ptr<const Dataset> dataset, int64_t batch_size, LoaderOptions options, Shard shard)
    : dataset_(std::move(dataset)), batch_size_(batch_size), options_(options), shard_(shard) {
  if (!dataset_) throw std::invalid_argument("[DataLoader] the dataset is null");
  if (batch_size_ < 1) {
    throw std::invalid_argument("[DataLoader] batch_size must be at least 1, got " + std::to_string(batch_size_));
  }
  if (batch_size_ % shard_.size != 0) {
    throw std::invalid_argument("[DataLoader] the global batch size " + std::to_string(batch_size_) +
                                " is not divisible by the number of ranks " + std::to_string(shard_.size) +
                                ": every rank must read the same number of rows");
  }
  n_ = dataset_->size();
  set_epoch(0);
}

void DataLoader::set_epoch(int64_t epoch) {
  if (epoch < 0) throw std::invalid_argument("[DataLoader] epoch must be >= 0, got " + std::to_string(epoch));
  epoch_ = epoch;
  start_ = 0;
  if (options_.shuffle) order_ = permutation(n_, options_.seed, epoch);
}

void DataLoader::set_start_batch(int64_t k) {
  if (k < 0 || k > num_batches()) {
    throw std::out_of_range("[DataLoader] start batch " + std::to_string(k) + " is outside [0, " +
                            std::to_string(num_batches()) + "]");
  }
  start_ = k;
}

int64_t DataLoader::num_batches() const {
  if (options_.remainder == Remainder::drop) return n_ / batch_size_;
  return (n_ + batch_size_ - 1) / batch_size_;
}

int64_t DataLoader::position_to_sample(int64_t p) const {
  const int64_t q = p % n_;  // positions past the end exist only with Remainder::pad
  return options_.shuffle ? order_[static_cast<size_t>(q)] : q;
}

std::vector<int64_t> DataLoader::global_indices(int64_t i) const {
  if (i < 0 || i >= num_batches()) {
    throw std::out_of_range("[DataLoader] batch " + std::to_string(i) + " is out of range for " +
                            std::to_string(num_batches()) + " batches per epoch");
  }
  std::vector<int64_t> out(static_cast<size_t>(batch_size_));
  for (int64_t k = 0; k < batch_size_; ++k) out[k] = position_to_sample(i * batch_size_ + k);
  return out;
}

std::vector<int64_t> DataLoader::indices(int64_t i) const {
  if (i < 0 || i >= num_batches()) {
    throw std::out_of_range("[DataLoader] batch " + std::to_string(i) + " is out of range for " +
                            std::to_string(num_batches()) + " batches per epoch");
  }
  const int64_t local = local_batch_size();
  const int64_t first = i * batch_size_ + shard_.rank * local;
  std::vector<int64_t> out(static_cast<size_t>(local));
  for (int64_t k = 0; k < local; ++k) out[k] = position_to_sample(first + k);
  return out;
}

Batch DataLoader::batch(int64_t i) const { return dataset_->get(indices(i)); }

Batch& DataLoader::iterator::operator*() {
  if (!batch_) batch_ = loader_->batch(i_);
  return *batch_;
}

DataLoader::iterator& DataLoader::iterator::operator++() {
  ++i_;
  batch_.reset();
  return *this;
}

}  // namespace loom::io

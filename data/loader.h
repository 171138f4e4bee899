// The loader for (data-parallel) training: it cuts each epoch's shuffled global batches of a
// dataset into one shard per rank.
//
// Every rank of a job computes the same permutation of the samples from (seed, epoch) and reads
// only the rows of its own shard.
#pragma once

#include <cstddef>
#include <cstdint>
#include <iterator>
#include <memory>
#include <optional>
#include <type_traits>
#include <utility>
#include <vector>

#include "loom/data/dataset.h"
#include "loom/distributed/distributed.h"

namespace loom::data {

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
  /// While a loop over the loader runs, a background thread reads up to this many batches ahead of
  /// it, so reading overlaps the training step; the batches and their order do not change. 0: each
  /// batch is read when the loop reaches it.
  int prefetch = 2;
};

class DataLoader;
namespace detail {
class Prefetcher;
}

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
/// epoch for a new order. A loop (begin()) works on a copy of the loader taken when it began, so
/// set_epoch inside it affects the next loop only, and reads ahead of the loop on a background
/// thread (LoaderOptions::prefetch).
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
    iterator(const DataLoader* loader, int64_t i, std::shared_ptr<detail::Prefetcher> prefetcher = nullptr)
        : loader_(loader), i_(i), prefetcher_(std::move(prefetcher)) {}
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
    std::shared_ptr<detail::Prefetcher> prefetcher_;  // shared by copies of the loop's iterator
    std::optional<Batch> batch_;
  };
  iterator begin() const;
  iterator end() const { return iterator(this, num_batches()); }

 private:
  int64_t position_to_sample(int64_t p) const;

  std::shared_ptr<const Dataset> dataset_;
  int64_t batch_size_;
  LoaderOptions options_;
  Shard shard_;
  int64_t epoch_ = 0, start_ = 0;
  int64_t n_ = 0;
  std::shared_ptr<const std::vector<int64_t>> order_;  // null without shuffle; shared with running loops
};

}  // namespace loom::data

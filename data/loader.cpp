// The epoch permutation and the sharded loader.
#include "loom/data/loader.h"

#include <condition_variable>
#include <deque>
#include <exception>
#include <mutex>
#include <numeric>
#include <stdexcept>
#include <string>
#include <thread>

#include "loom/core/parallel.h"

namespace loom::data {

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
  if (options_.prefetch < 0) {
    throw std::invalid_argument("[DataLoader] prefetch must be >= 0 batches, got " + std::to_string(options_.prefetch));
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
  if (options_.shuffle) order_ = std::make_shared<const std::vector<int64_t>>(permutation(n_, options_.seed, epoch));
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
  return options_.shuffle ? (*order_)[static_cast<size_t>(q)] : q;
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

namespace detail {

// A loop's copy of the loader. With depth > 0 it reads batches [first, end) in order on a thread
// of its own, keeping at most `depth` of them ready; a batch that fails to read fails where the loop
// takes it.
class Prefetcher {
 public:
  Prefetcher(const DataLoader& loader, int64_t first, int64_t end, int depth)
      : loader_(loader), next_(first), end_(end), depth_(depth) {
    if (depth > 0) thread_ = std::thread([this] { run(); });
  }

  ~Prefetcher() {
    if (!thread_.joinable()) return;
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }

  // Batch i: the next one of the loop (earlier ones not taken are dropped). A batch outside what
  // this thread reads (an iterator moved back) is read here.
  Batch take(int64_t i) {
    if (depth_ == 0) return loader_.batch(i);
    std::unique_lock<std::mutex> lock(mu_);
    while (!ready_.empty() && ready_.front().first < i) ready_.pop_front();
    cv_.wait(lock, [&] { return !ready_.empty() || failed_at_ >= 0 || next_ >= end_ || next_ > i; });
    if (!ready_.empty() && ready_.front().first == i) {
      Batch b = std::move(ready_.front().second);
      ready_.pop_front();
      lock.unlock();
      cv_.notify_all();
      return b;
    }
    if (failed_at_ == i) std::rethrow_exception(error_);
    lock.unlock();
    return loader_.batch(i);
  }

 private:
  void run() {
    // Converting a batch must not take Loom's thread pool from the training step.
    loom::detail::keep_work_on_this_thread();
    for (;;) {
      int64_t i;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [&] { return stop_ || static_cast<int>(ready_.size()) < depth_; });
        if (stop_ || next_ >= end_) return;
        i = next_;
      }
      std::optional<Batch> b;
      std::exception_ptr error;
      try {
        b = loader_.batch(i);
      } catch (...) {
        error = std::current_exception();
      }
      {
        std::lock_guard<std::mutex> lock(mu_);
        ++next_;
        if (error) {
          error_ = error;
          failed_at_ = i;
          next_ = end_;
        } else {
          ready_.emplace_back(i, std::move(*b));
        }
      }
      cv_.notify_all();
    }
  }

  const DataLoader loader_;  // a copy: the loop's epoch and order, whatever the original does next
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::pair<int64_t, Batch>> ready_;
  std::exception_ptr error_;
  int64_t failed_at_ = -1;
  int64_t next_, end_;
  int depth_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace detail

DataLoader::iterator DataLoader::begin() const {
  if (start_ >= num_batches()) return iterator(this, start_);
  return iterator(this, start_, std::make_shared<detail::Prefetcher>(*this, start_, num_batches(), options_.prefetch));
}

Batch& DataLoader::iterator::operator*() {
  if (!batch_) batch_ = prefetcher_ ? prefetcher_->take(i_) : loader_->batch(i_);
  return *batch_;
}

DataLoader::iterator& DataLoader::iterator::operator++() {
  ++i_;
  batch_.reset();
  return *this;
}

}  // namespace loom::data

#include "loom/core/allocator.h"

#include "loom/core/stream.h"

#include <sys/mman.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <map>
#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

namespace loom {
namespace {

// Blocks are rounded to a size class so that freed blocks are found again: 64-byte steps below 4 KiB,
// then quarter steps between powers of two (at most 25% waste). The cache is keyed by size class.
size_t size_class(size_t n) {
  if (n <= 4096) return ((n + 63) / 64) * 64;
  if (n > (size_t(1) << 62)) throw out_of_memory("[malloc] cannot allocate " + std::to_string(n) + " bytes");
  size_t p = 4096;
  while (p * 2 < n) p *= 2;
  size_t step = p / 4;
  return ((n + step - 1) / step) * step;
}

// Blocks of 2 MiB and more start on a 2 MiB boundary and ask for transparent huge pages over their
// whole 2 MiB pages: one TLB entry instead of 512 for the kernels that stream through them, and far
// fewer pages for the kernel to pin when MPI copies between processes (a 4 MB allreduce of two
// ranks on one machine takes half the time). The tail past the last whole huge page keeps small
// pages, so a block never adds more than its own size to the resident set.
constexpr size_t kHugePage = size_t(2) << 20;
constexpr size_t kPage = 4096;

size_t block_bytes(const allocator::Buffer& b) { return b.block ? b.block : size_class(b.size); }

void* system_alloc(size_t cls) {
  if (cls < kHugePage) return std::aligned_alloc(64, cls);
  void* p = std::aligned_alloc(kHugePage, (cls + kHugePage - 1) / kHugePage * kHugePage);
  if (p) madvise(p, cls / kHugePage * kHugePage, MADV_HUGEPAGE);  // advice only: failure changes nothing
  return p;
}

struct Allocator {
  std::mutex mu;
  // Size class -> its free blocks. The lists keep their capacity, so caching and reusing a block
  // allocate nothing (a multimap allocated a node per cached block: two more malloc calls per
  // array, which lock once the process has a second thread).
  std::map<size_t, std::vector<void*>> cache;
  size_t active = 0, peak = 0, cached = 0;
  size_t window_peak = 0;                           // the profiler's (detail::alloc_counters)
  uint64_t allocations = 0, allocated_bytes = 0;  // running totals, for the profiler
  size_t limit = 0;
  size_t cache_limit = 0;  // 0: no cap beyond the memory limit

  void release_cache_locked(size_t target) {
    for (auto it = cache.rbegin(); it != cache.rend() && cached > target; ++it) {  // largest first
      auto& blocks = it->second;
      while (!blocks.empty() && cached > target) {
        std::free(blocks.back());
        blocks.pop_back();
        cached -= it->first;
      }
    }
  }

  allocator::Buffer malloc(size_t size) {
    if (size == 0) return {nullptr, 0};
    size_t cls = size_class(size);
    std::lock_guard<std::mutex> lock(mu);
    void* p = nullptr;
    // The smallest cached block that fits and wastes less than half of itself and at most two pages.
    const size_t reuse_below = std::min(2 * cls, cls + 2 * kPage);
    for (auto it = cache.lower_bound(cls); it != cache.end() && it->first < reuse_below; ++it) {
      if (it->second.empty()) continue;
      p = it->second.back();
      it->second.pop_back();
      cls = it->first;
      cached -= cls;
      break;
    }
    if (!p) {
      if (limit && active + cached + cls > limit) release_cache_locked(0);
      if (limit && active + cls > limit) {
        throw out_of_memory("[malloc] allocating " + std::to_string(size) +
                                 " bytes would exceed the memory limit of " + std::to_string(limit) +
                                 " bytes (" + std::to_string(active) + " bytes active)");
      }
      p = system_alloc(cls);
      if (!p) {
        release_cache_locked(0);
        p = system_alloc(cls);
      }
      if (!p) {
        throw out_of_memory("[malloc] the system cannot provide " + std::to_string(size) + " bytes (" +
                            std::to_string(active) + " bytes in use by arrays)");
      }
    }
    active += cls;
    if (active > peak) peak = active;
    if (active > window_peak) window_peak = active;
    ++allocations;
    allocated_bytes += cls;
    return {p, size, cls};
  }

  void free(allocator::Buffer buf) {
    if (!buf.ptr) return;
    std::lock_guard<std::mutex> lock(mu);
    size_t cls = block_bytes(buf);
    active -= cls;
    cache[cls].push_back(buf.ptr);
    cached += cls;
    if (cache_limit && cached > cache_limit) release_cache_locked(cache_limit);
    if (limit && active + cached > limit) release_cache_locked(limit > active ? limit - active : 0);
  }
};

Allocator& the_allocator() {
  // Never destroyed: arrays with static storage may free their buffers after main returns.
  static Allocator* a = new Allocator();
  return *a;
}

}  // namespace

namespace allocator {
Buffer malloc(size_t size) { return the_allocator().malloc(size); }
void free(Buffer buf) { the_allocator().free(buf); }
size_t Allocator::size(Buffer buf) const { return buf.ptr ? block_bytes(buf) : 0; }
Allocator& allocator() {
  static Allocator a;
  return a;
}
}  // namespace allocator

detail::AllocCounters detail::alloc_counters(bool restart_window) {
  auto& a = the_allocator();
  std::lock_guard<std::mutex> lock(a.mu);
  AllocCounters c{a.allocations, a.allocated_bytes, a.active, a.window_peak};
  if (restart_window) a.window_peak = a.active;
  return c;
}

size_t get_active_memory() {
  auto& a = the_allocator();
  std::lock_guard<std::mutex> lock(a.mu);
  return a.active;
}
size_t get_peak_memory() {
  auto& a = the_allocator();
  std::lock_guard<std::mutex> lock(a.mu);
  return a.peak;
}
void reset_peak_memory() {
  auto& a = the_allocator();
  std::lock_guard<std::mutex> lock(a.mu);
  a.peak = a.active;
}
size_t get_cache_memory() {
  auto& a = the_allocator();
  std::lock_guard<std::mutex> lock(a.mu);
  return a.cached;
}
void clear_cache() {
  detail::synchronize_all_streams();
  auto& a = the_allocator();
  std::lock_guard<std::mutex> lock(a.mu);
  a.release_cache_locked(0);
}
size_t set_memory_limit(size_t limit) {
  auto& a = the_allocator();
  std::lock_guard<std::mutex> lock(a.mu);
  size_t old = a.limit;
  a.limit = limit;
  return old;
}
size_t get_memory_limit() {
  auto& a = the_allocator();
  std::lock_guard<std::mutex> lock(a.mu);
  return a.limit;
}
size_t set_cache_limit(size_t limit) {
  auto& a = the_allocator();
  std::lock_guard<std::mutex> lock(a.mu);
  size_t old = a.cache_limit;
  a.cache_limit = limit;
  a.release_cache_locked(limit ? limit : a.cached);
  return old;
}

size_t set_wired_limit(size_t limit) {
  static std::atomic<size_t> wired{0};
  return wired.exchange(limit);
}

}  // namespace loom

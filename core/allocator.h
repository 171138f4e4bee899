// Buffers and the caching allocator behind every array, with memory statistics.
#pragma once

#include <cstddef>
#include <stdexcept>

namespace loom {

/// Thrown when memory runs out or the memory limit would be exceeded. Its message says how many
/// bytes were asked for and, when eval was running a kernel, by which op for which shape and dtype.
class out_of_memory : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

namespace allocator {

struct Buffer {
  void* ptr = nullptr;
  size_t size = 0;   // bytes requested
  size_t block = 0;  // bytes of the block behind ptr (malloc sets it; 0: the size class of `size`)
  void* raw_ptr() const { return ptr; }  // MLX's name for the pointer
};

/// Returns a 64-byte aligned block from the cache or the system. A cached block a little larger than
/// asked for (less than twice the size and at most 8 KiB more, MLX's rule) is reused as it is, so
/// sizes that vary from step to step find their blocks again. Throws out_of_memory when the system
/// has no block that large or the memory limit would be exceeded even after the cache is emptied.
Buffer malloc(size_t size);
/// Returns a block to the cache.
void free(Buffer buf);

/// MLX's handle on the allocator (`allocator::allocator().size(buf)`): the same cache as malloc/free.
class Allocator {
 public:
  Buffer malloc(size_t size) { return allocator::malloc(size); }
  void free(Buffer buf) { allocator::free(buf); }
  /// Bytes of the block behind `buf`: at least what was asked for.
  size_t size(Buffer buf) const;
};
Allocator& allocator();

}  // namespace allocator

namespace detail {
/// The allocator's running totals, for the profiler (core/profile.h): allocations and their bytes
/// so far, bytes active now, and the highest active since the last call that restarted the window.
struct AllocCounters {
  uint64_t allocations = 0, allocated_bytes = 0;
  size_t active = 0, window_peak = 0;
};
AllocCounters alloc_counters(bool restart_window);
}  // namespace detail

/// Bytes held by live arrays.
size_t get_active_memory();
/// Highest active memory since start or the last reset_peak_memory().
size_t get_peak_memory();
void reset_peak_memory();
/// Bytes held in the cache for reuse (not by any array).
size_t get_cache_memory();
/// Returns every cached block to the system, after the work queued on every stream so far has run
/// (that work frees blocks into the cache).
void clear_cache();
/// Caps active + cached memory; returns the previous limit. 0 means no limit.
size_t set_memory_limit(size_t limit);
size_t get_memory_limit();
/// Caps the cache alone; returns the previous cap.
size_t set_cache_limit(size_t limit);
/// MLX's wired (kept-resident) limit, for Metal. On a CPU it only records the value and returns the
/// previous one (0 at start): it pins no memory.
size_t set_wired_limit(size_t limit);

}  // namespace loom

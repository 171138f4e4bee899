// operator new and delete for the test_io binary: plain malloc and free, with the largest request
// recorded while largest_allocation() watches.
#include "largest_allocation.h"

#include <atomic>
#include <cstdlib>
#include <new>

namespace {
std::atomic<bool> watching{false};
std::atomic<size_t> largest{0};
}  // namespace

void* operator new(size_t n) {
  if (watching.load(std::memory_order_relaxed)) {
    size_t cur = largest.load(std::memory_order_relaxed);
    while (n > cur && !largest.compare_exchange_weak(cur, n)) {
    }
  }
  if (void* p = std::malloc(n ? n : 1)) return p;
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, size_t) noexcept { std::free(p); }

namespace loom::iotest {

size_t largest_allocation(const std::function<void()>& run) {
  largest = 0;
  watching = true;
  try {
    run();
  } catch (...) {
    watching = false;
    throw;
  }
  watching = false;
  return largest;
}

}  // namespace loom::iotest

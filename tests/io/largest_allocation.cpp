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

namespace {
void* allocate(size_t n) noexcept {
  if (watching.load(std::memory_order_relaxed)) {
    size_t cur = largest.load(std::memory_order_relaxed);
    while (n > cur && !largest.compare_exchange_weak(cur, n)) {
    }
  }
  return std::malloc(n ? n : 1);
}
void* allocate_or_throw(size_t n) {
  if (void* p = allocate(n)) return p;
  throw std::bad_alloc();
}
}  // namespace

// Every form that pairs with free (the library's std::get_temporary_buffer uses the nothrow one);
// the aligned forms are left to the runtime, whose deletes match them.
void* operator new(size_t n) { return allocate_or_throw(n); }
void* operator new[](size_t n) { return allocate_or_throw(n); }
void* operator new(size_t n, const std::nothrow_t&) noexcept { return allocate(n); }
void* operator new[](size_t n, const std::nothrow_t&) noexcept { return allocate(n); }
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, size_t) noexcept { std::free(p); }
void operator delete[](void* p, size_t) noexcept { std::free(p); }
void operator delete(void* p, const std::nothrow_t&) noexcept { std::free(p); }
void operator delete[](void* p, const std::nothrow_t&) noexcept { std::free(p); }

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

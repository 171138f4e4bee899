// The largest single operator new request made while a function runs (tests/io replaces
// operator new to see it): proof that a reader allocates what a stream really holds, not what its
// header claims. The library's array buffers are seen by get_peak_memory() instead.
#pragma once

#include <cstddef>
#include <functional>

namespace loom::iotest {

size_t largest_allocation(const std::function<void()>& run);

}  // namespace loom::iotest

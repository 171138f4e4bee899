// Shapes too large to address and allocations that cannot be met: clear errors naming the op, the
// shape and the byte count, when the op is built where the size is known then (never a wrapped size,
// a hang in the allocator or undefined behaviour in the strides).
#include <climits>

#include "../test_utils.h"

using namespace loom;

TEST(Sizes, ShapesWhoseBytesOverflowAreRejectedWhenBuilt) {
  // 2^64 elements: the product wraps to 0 in 64 bits.
  EXPECT_THROW_MSG(zeros({65536, 65536, 65536, 65536}), std::overflow_error,
                   "an array of shape (65536,65536,65536,65536) would have strides past 2^63 elements");
  // 2^62 elements fit in 64 bits, but not as float32 bytes.
  EXPECT_THROW_MSG(zeros({1 << 30, 1 << 30, 4}, float32), std::overflow_error, "more than 2^63 bytes");
  // An empty axis makes the size 0, but the strides of the others would still overflow; an empty
  // array whose strides fit is fine even where its bytes would not (it allocates none).
  EXPECT_THROW_MSG(zeros({0, 1 << 30, 1 << 30, 1 << 30}), std::overflow_error,
                   "an array of shape (0,1073741824,1073741824,1073741824) would have strides past 2^63 elements");
  EXPECT_EQ(zeros({0, 1 << 30, 1 << 30, 1 << 2}, float64).size(), 0u);
  // The op is named: a broadcast to an impossible shape.
  EXPECT_THROW_MSG(broadcast_to(array(1.0f), {INT_MAX, INT_MAX, INT_MAX}), std::overflow_error, "[Broadcast");
  // Large but addressable shapes are fine while nothing is evaluated, and empty ones are fine too.
  array big = zeros({1 << 30, 1 << 30});
  EXPECT_EQ(big.size(), size_t(1) << 60);
  EXPECT_EQ(zeros({0, 1 << 30, 1 << 20}).size(), 0u);
}

TEST(Sizes, AxisLengthsThatOverflowAreRejected) {
  array a = zeros({4});
  EXPECT_THROW_MSG(pad(a, INT_MAX), std::overflow_error,
                   "[pad] axis 0 would have 4294967298 elements; an axis holds at most 2147483647");
  EXPECT_THROW_MSG(repeat(zeros({1 << 20}), 1 << 20, 0), std::overflow_error,
                   "[repeat] axis 0 would have 1099511627776 elements");
  EXPECT_THROW_MSG(tile(zeros({1 << 16, 3}), {1 << 16, 1}), std::overflow_error, "[tile] axis 0 would have 4294967296");
  EXPECT_THROW_MSG(concatenate({zeros({1 << 30}), zeros({1 << 30})}, 0), std::overflow_error,
                   "[concatenate] axis 0 would have 2147483648 elements");
  // At the limit itself they still build.
  EXPECT_EQ(pad(zeros({1}), {{0, INT_MAX - 1}}).shape(0), INT_MAX);
}

TEST(Sizes, AnAllocationThatFailsNamesTheOpTheShapeAndTheBytes) {
  // 2^60 float32 elements (4 EiB): no machine has them. Padding a broadcast zero (a view, which
  // allocates nothing) needs all of them. (exp of the broadcast would compute its one element.)
  array x = pad(broadcast_to(array(0.0f), {1 << 30, (1 << 30) - 1}), std::vector<int>{1}, {0}, {1});
  try {
    x.eval();
    ADD_FAILURE() << "allocating 4 EiB did not throw";
  } catch (const out_of_memory& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("[eval] Pad could not allocate memory for float32 (1073741824,1073741824) "
                        "(4611686018427387904 bytes)"),
              std::string::npos)
        << what;
  }
  // Nothing is left half-done: the same graph fails again the same way, and memory is as before.
  EXPECT_THROW(x.eval(), out_of_memory);
  array y = exp(zeros({4}));
  EXPECT_FLOAT_EQ(y.to_vector<float>()[3], 1.0f);
}

TEST(Sizes, TheMemoryLimitIsAnOutOfMemoryError) {
  size_t old = set_memory_limit(get_active_memory() + (1 << 20));
  array big = pad(broadcast_to(array(0.0f), {(1 << 22) - 1}), std::vector<int>{0}, {0}, {1});
  EXPECT_THROW_MSG(big.eval(), out_of_memory, "[eval] Pad could not allocate memory for float32 (4194304)");
  set_memory_limit(old);
}

TEST(Sizes, TheAllocatorRefusesImpossibleRequestsAtOnce) {
  // Its size classes doubled a 64-bit counter until it passed the request: past 2^63 it wrapped to 0
  // and looped for ever.
  const size_t before = get_active_memory();
  for (size_t n : {SIZE_MAX, (size_t(1) << 63) + 1, size_t(1) << 62}) {
    EXPECT_THROW_MSG(allocator::malloc(n), out_of_memory, std::to_string(n) + " bytes");
  }
  EXPECT_EQ(get_active_memory(), before);  // nothing was counted as taken
  allocator::Buffer b = allocator::malloc(100);
  EXPECT_NE(b.ptr, nullptr);
  allocator::free(b);
}

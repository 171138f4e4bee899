// The array constructors and memory API under MLX's names and signatures (mlx/array.h, mlx/memory.h,
// mlx/allocator.h), which MLX's own tests use (scripts/mlx_compat.py).
#include <list>
#include <sstream>

#include "../test_utils.h"

using namespace loom;
using loom::testing::expect_array;

TEST(MlxCompatArray, IteratorConstructorConvertsToTheDtype) {
  std::vector<double> v{1.5, -2.25, 3.0, 4.75};
  array a(v.begin(), {2, 2});  // the value type decides the dtype as for scalars: double -> float32 (MLX)
  EXPECT_EQ(a.dtype(), float32);
  EXPECT_EQ(a.shape(), (Shape{2, 2}));
  EXPECT_EQ(a.to_vector<double>(), v);  // these values are exact in float32
  EXPECT_EQ(array(v.begin(), {4}, float64).to_vector<double>(), v);
  std::vector<int64_t> big{int64_t(1) << 40, -3};
  EXPECT_EQ(array(big.begin(), {2}).dtype(), int64);
  array b(v.begin(), {3}, int32);  // reads only as many values as the shape holds, converted
  EXPECT_EQ(b.to_vector<int>(), (std::vector<int>{1, -2, 3}));
  std::list<int> l{1, 0, 2};  // any input iterator, not only pointers
  array c(l.begin(), {3}, bool_);
  EXPECT_EQ(c.dtype(), bool_);
  EXPECT_EQ(c.to_vector<bool>(), (std::vector<bool>{true, false, true}));
  std::vector<bool> bits{true, false};
  array d(bits.begin(), {1, 2}, float16);
  EXPECT_EQ(d.dtype(), float16);
  expect_array(d, {1, 2}, {1, 0});
  float raw[3] = {0.5f, 1.5f, 2.5f};
  array e(raw, {3});  // a plain pointer is an iterator too
  EXPECT_EQ(e.dtype(), float32);
  EXPECT_EQ(e.to_vector<float>(), (std::vector<float>{0.5f, 1.5f, 2.5f}));
  array empty(v.begin(), {0, 3});
  EXPECT_EQ(empty.size(), 0u);
  EXPECT_THROW_MSG(array(v.begin(), {2, -1}), std::invalid_argument, "[array] negative dimension in shape (2,-1)");
}

TEST(MlxCompatArray, EmptyListsAsMlx) {
  array a({});  // MLX: an empty list is an empty float32 array
  EXPECT_EQ(a.dtype(), float32);
  EXPECT_EQ(a.shape(), (Shape{0}));
  array b({}, int32);  // and array({}, dtype) one of that dtype
  EXPECT_EQ(b.dtype(), int32);
  EXPECT_EQ(b.size(), 0u);
  EXPECT_EQ(reshape(a, {0, 0, 0}).shape(), (Shape{0, 0, 0}));
  // The listed forms keep their meaning: the element type decides, a dtype converts.
  EXPECT_EQ(array({1, 2}).dtype(), int32);
  EXPECT_EQ(array({1.5f}).dtype(), float32);
  EXPECT_EQ(array({true, false}).dtype(), bool_);
  array c({1, 2}, float32);
  EXPECT_EQ(c.dtype(), float32);
  expect_array(c, {2}, {1, 2});
  EXPECT_EQ(array({1, 2, 3, 4}, {2, 2}).shape(), (Shape{2, 2}));
}

TEST(MlxCompatArray, IsAvailableAfterEval) {
  array a = array(1.0f) + array(2.0f);
  EXPECT_FALSE(a.is_available());
  eval(a);
  EXPECT_TRUE(a.is_available());
  EXPECT_TRUE(array(3).is_available());
}

TEST(MlxCompatMemory, AllocatorObjectAndBufferPointer) {
  auto buf = allocator::malloc(sizeof(float));
  ASSERT_NE(buf.raw_ptr(), nullptr);
  EXPECT_EQ(buf.raw_ptr(), buf.ptr);
  *static_cast<float*>(buf.raw_ptr()) = 0.5f;
  EXPECT_EQ(*static_cast<float*>(buf.raw_ptr()), 0.5f);
  // The block is the size class: 64-byte steps below 4 KiB, quarter steps of a power of two above.
  EXPECT_EQ(allocator::allocator().size(buf), 64u);
  allocator::allocator().free(buf);
  auto big = allocator::allocator().malloc(6000);
  EXPECT_EQ(allocator::allocator().size(big), 6144u);
  allocator::free(big);
  EXPECT_EQ(allocator::allocator().size(allocator::malloc(0)), 0u);
}

TEST(MlxCompatMemory, LimitsReturnThePreviousValue) {
  // Each setter returns the value it replaces, as MLX's memory.h says.
  const size_t mem = get_memory_limit();
  EXPECT_EQ(set_memory_limit(size_t(1) << 40), mem);
  EXPECT_EQ(get_memory_limit(), size_t(1) << 40);
  EXPECT_EQ(set_memory_limit(mem), size_t(1) << 40);
  const size_t cache = set_cache_limit(size_t(1) << 30);
  EXPECT_EQ(set_cache_limit(cache), size_t(1) << 30);
  // The wired limit pins nothing on a CPU: it is only recorded.
  const size_t wired = set_wired_limit(12345);
  EXPECT_EQ(set_wired_limit(wired), 12345u);

  // A freed block goes to the cache; clear_cache empties it; reset_peak_memory restarts the peak.
  clear_cache();
  EXPECT_EQ(get_cache_memory(), 0u);
  auto b = allocator::malloc(8192);
  const size_t active = get_active_memory();
  EXPECT_GE(active, 8192u);
  EXPECT_GE(get_peak_memory(), active);
  allocator::free(b);
  EXPECT_GE(get_cache_memory(), 8192u);
  EXPECT_EQ(get_active_memory(), active - 8192);
  reset_peak_memory();
  EXPECT_LE(get_peak_memory(), active);
  clear_cache();
  EXPECT_EQ(get_cache_memory(), 0u);
}

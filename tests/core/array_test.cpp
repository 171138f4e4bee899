#include <sstream>

#include "../test_utils.h"

using namespace loom;
using loom::testing::expect_array;

TEST(Array, ScalarAndListConstructors) {
  array s(3.5f);
  EXPECT_EQ(s.ndim(), 0u);
  EXPECT_EQ(s.size(), 1u);
  EXPECT_EQ(s.dtype(), float32);
  EXPECT_FLOAT_EQ(s.item<float>(), 3.5f);

  array a({1, 2, 3, 4, 5, 6}, {2, 3});
  EXPECT_EQ(a.shape(), (Shape{2, 3}));
  EXPECT_EQ(a.dtype(), int32);
  EXPECT_EQ(a.shape(-1), 3);
  EXPECT_EQ(a.nbytes(), 24u);
  EXPECT_EQ(a.to_vector<int>(), (std::vector<int>{1, 2, 3, 4, 5, 6}));

  std::vector<float> v{1.5f, 2.5f};
  array b(v, {2, 1});
  EXPECT_EQ(b.shape(), (Shape{2, 1}));
  EXPECT_FLOAT_EQ(b.to_vector<float>()[1], 2.5f);

  array c({1.0, 2.0}, float16);
  EXPECT_EQ(c.dtype(), float16);
  EXPECT_EQ(c.itemsize(), 2u);
  EXPECT_FLOAT_EQ(c.to_vector<float>()[1], 2.0f);
}

TEST(Array, BadConstruction) {
  EXPECT_THROW_MSG(array({1, 2, 3}, {2, 2}), std::invalid_argument, "cannot fill shape (2,2)");
  EXPECT_THROW_MSG(array(std::vector<float>{1.f}, {-1}), std::invalid_argument, "negative");
  array a({1, 2}, {2});
  EXPECT_THROW_MSG(a.item<float>(), std::invalid_argument, "one element");
  EXPECT_THROW_MSG(a.shape(3), std::out_of_range, "axis 3");
  array lazy = add(a, a);
  EXPECT_THROW_MSG(lazy.data<int>(), std::logic_error, "not evaluated");
  lazy.eval();
  EXPECT_THROW_MSG(lazy.data<double>(), std::invalid_argument, "does not match dtype int32");
}

TEST(Array, LazyUntilEval) {
  array a({1.f, 2.f, 3.f});
  array b = exp(a) + a;
  EXPECT_FALSE(b.is_evaluated());
  EXPECT_TRUE(b.has_primitive());
  eval(b);
  EXPECT_TRUE(b.is_evaluated());
  EXPECT_FALSE(b.has_primitive());  // detached after eval
  expect_array(b, {3}, {std::exp(1.0) + 1, std::exp(2.0) + 2, std::exp(3.0) + 3}, 1e-6);
}

TEST(Array, HalfConversionsRoundTrip) {
  // Exactly representable values, rounding to nearest even, overflow, subnormals and NaN.
  EXPECT_EQ(float(float16_t(1.0f)), 1.0f);
  EXPECT_EQ(float(float16_t(65504.0f)), 65504.0f);
  EXPECT_TRUE(std::isinf(float(float16_t(65536.0f))));
  EXPECT_EQ(float(float16_t(1.0f + 1.0f / 2048)), 1.0f);          // tie rounds to even
  EXPECT_EQ(float(float16_t(1.0f + 3.0f / 2048)), 1.0f + 2.0f / 1024);  // tie rounds up to even
  EXPECT_EQ(float(float16_t(5.960464477539063e-08f)), 5.960464477539063e-08f);  // smallest subnormal
  EXPECT_EQ(float16_t(0.0f).bits, 0u);
  EXPECT_EQ(float16_t(-0.0f).bits, 0x8000u);
  EXPECT_TRUE(std::isnan(float(float16_t(NAN))));
  EXPECT_EQ(float(bfloat16_t(1.0f)), 1.0f);
  EXPECT_EQ(float(bfloat16_t(3.0f)), 3.0f);
  EXPECT_EQ(float(bfloat16_t(1.0f + 1.0f / 256)), 1.0f);  // tie to even
  EXPECT_TRUE(std::isnan(float(bfloat16_t(NAN))));
  // Every float16 bit pattern survives float32 and back.
  for (uint32_t bits = 0; bits < 0x10000; ++bits) {
    float16_t h;
    h.bits = static_cast<uint16_t>(bits);
    float f = h;
    if (std::isnan(f)) continue;
    ASSERT_EQ(float16_t(f).bits, h.bits) << bits;
  }
}

TEST(Array, PromotionTable) {
  EXPECT_EQ(promote_types(bool_, uint8), uint8);
  EXPECT_EQ(promote_types(uint8, int32), int32);
  EXPECT_EQ(promote_types(int32, int64), int64);
  EXPECT_EQ(promote_types(int64, float16), float16);
  EXPECT_EQ(promote_types(float16, bfloat16), float32);
  EXPECT_EQ(promote_types(float16, float32), float32);
  EXPECT_EQ(promote_types(float32, float64), float64);
  EXPECT_EQ(promote_types(bfloat16, int32), bfloat16);
  EXPECT_EQ((array(1) + array(2.0f)).dtype(), float32);
  EXPECT_EQ((array(1.0f, float16) * 2.0).dtype(), float16);  // the scalar adopts the array's dtype
  EXPECT_EQ((array(3) * 2.5).dtype(), float32);
}

TEST(Array, Printing) {
  std::ostringstream os;
  os << array({1, 2, 3, 4}, {2, 2});
  EXPECT_EQ(os.str(), "array([[1, 2],\n       [3, 4]], shape=(2,2), dtype=int32)");
  std::ostringstream big;
  big << arange(2000);
  EXPECT_NE(big.str().find("0, 1, 2, ..., 1997, 1998, 1999"), std::string::npos) << big.str();
  std::ostringstream b;
  b << array({true, false});
  EXPECT_EQ(b.str(), "array([true, false], shape=(2), dtype=bool)");
}

TEST(Array, LayoutFlagsOfFreshAndViewedBuffers) {
  auto expect_flags = [](const array& x, bool row, bool col, bool contiguous) {
    EXPECT_EQ(x.flags().row_contiguous, row) << detail::shape_str(x.shape());
    EXPECT_EQ(x.flags().col_contiguous, col) << detail::shape_str(x.shape());
    EXPECT_EQ(x.flags().contiguous, contiguous) << detail::shape_str(x.shape());
  };
  array m({1.0f, 2.0f, 3.0f, 4.0f, 5.0f, 6.0f}, {2, 3});  // from data
  expect_flags(m, true, false, true);
  array k = m * 2.0f;  // a kernel's fresh buffer
  k.eval();
  expect_flags(k, true, false, true);
  array d = exp(m * 1.0f);  // a donated buffer (exp takes its input's)
  d.eval();
  expect_flags(d, true, false, true);
  array t = transpose(m);
  t.eval();
  expect_flags(t, false, true, true);
  array row = ones({1, 5}) + 0.0f, col = ones({5, 1, 1}) + 0.0f, s = array(2.0f) + 1.0f;
  eval(row, col, s);
  expect_flags(row, true, true, true);
  expect_flags(col, true, true, true);
  expect_flags(s, true, true, true);
  array c = slice(m, {0, 0}, {2, 3}, {1, 2});
  c.eval();
  expect_flags(c, false, false, false);
}

// The flags and data sizes MLX reports for the same arrays (MLX's array metadata test, in our words):
// "contiguous" leaves broadcast axes aside, and every empty array is contiguous in every sense.
TEST(Array, FlagsAndDataSizeAsMlxReportsThem) {
  auto expect_meta = [](array x, size_t data_size, bool contiguous, bool row, bool col) {
    x.eval();
    EXPECT_EQ(x.data_size(), data_size) << detail::shape_str(x.shape());
    EXPECT_EQ(x.flags().contiguous, contiguous) << detail::shape_str(x.shape());
    EXPECT_EQ(x.flags().row_contiguous, row) << detail::shape_str(x.shape());
    EXPECT_EQ(x.flags().col_contiguous, col) << detail::shape_str(x.shape());
  };
  expect_meta(array(1.0f), 1, true, true, true);
  expect_meta(array({1.0f}, {1, 1, 1}), 1, true, true, true);
  expect_meta(array({1.0f, 1.0f}, {1, 2}), 2, true, true, true);
  expect_meta(zeros({1, 1, 4}), 4, true, true, true);
  expect_meta(zeros({2, 4}), 8, true, true, false);
  const array one(1.0f);
  expect_meta(broadcast_to(one, {1, 1, 1}), 1, true, true, true);
  expect_meta(broadcast_to(one, {2, 8, 10}), 1, true, false, false);
  expect_meta(broadcast_to(one, {1, 0}), 0, true, true, true);
  expect_meta(broadcast_to(zeros({4, 2, 1}), {4, 2, 0}), 0, true, true, true);
  expect_meta(transpose(one), 1, true, true, true);
  expect_meta(transpose(ones({1, 1, 1}), {1, 2, 0}), 1, true, true, true);
  expect_meta(transpose(ones({4, 1})), 4, true, true, true);
  const array x = ones({2, 3, 4});
  expect_meta(transpose(x), 24, true, false, true);
  expect_meta(transpose(x, {0, 2, 1}), 24, true, false, false);
  expect_meta(transpose(transpose(x, {0, 2, 1}), {0, 2, 1}), 24, true, true, false);
  expect_meta(reshape(one, {1, 1, 1}), 1, true, true, true);
  expect_meta(reshape(ones({2, 4}), {8}), 8, true, true, true);
  // A 1x1 slice of a bigger matrix is one element: contiguous in every sense.
  expect_meta(slice(ones({3, 3}), {1, 1}, {2, 2}), 1, true, true, true);
  // A broadcast row: its three elements are dense, the broadcast axis aside.
  expect_meta(broadcast_to(ones({1, 3}), {4, 3}), 3, true, false, false);
  // Overlapping windows are not contiguous, whatever their span.
  expect_meta(as_strided(arange(9.0f, float32), {3, 3}, {2, 2}, 0), 9, false, false, false);
  // An elementwise op over a broadcast computes the distinct elements once and keeps the broadcast.
  array e = exp(broadcast_to(array({0.0f, 1.0f, 2.0f}, {1, 3}), {4, 3}));
  expect_meta(e, 3, true, false, false);
  expect_array(e, {4, 3}, {1, std::exp(1.0), std::exp(2.0), 1, std::exp(1.0), std::exp(2.0), 1, std::exp(1.0),
                           std::exp(2.0), 1, std::exp(1.0), std::exp(2.0)});
}

// 300,000 nodes: a recursive walk would need tens of MB of stack (the default is 8 MB), so this finds
// one as surely as a million nodes did, at a third of the time (which the sanitized build multiplies).
TEST(Eval, DeepChainNeitherOverflowsNorLeaks) {
  const int n = 300000;
  size_t before = get_active_memory();
  {
    array x = array(0.0f);
    for (int i = 0; i < n; ++i) x = x + 1.0f;
    EXPECT_FLOAT_EQ(x.item<float>(), float(n));
  }
  {
    // Dropping an unevaluated chain is iterative too.
    array y = array(1.0f);
    for (int i = 0; i < n; ++i) y = y * 1.0f;
  }
  EXPECT_EQ(get_active_memory(), before);
}

TEST(Eval, EachNodeRunsOnceAndIntermediatesAreFreed) {
  clear_cache();
  const int n = 1 << 20;  // 4 MiB of float32
  array x = ones({n});
  x.eval();
  size_t base = get_active_memory();
  reset_peak_memory();
  // A long chain of elementwise ops: with freeing and donation the peak stays at a few buffers.
  array y = x;
  for (int i = 0; i < 50; ++i) y = y * 1.0001f + 0.5f;
  y.eval();
  EXPECT_LE(get_peak_memory() - base, size_t(3) * n * 4) << "intermediates were not freed";
  // A diamond: the shared node is computed once and both branches agree.
  array s = exp(x);
  array d = s + s * 2.0f;
  expect_array(slice(d, {0}, {2}), {2}, {3 * std::exp(1.0), 3 * std::exp(1.0)}, 1e-5);
}

TEST(Eval, DonationReusesUniqueBuffers) {
  array x = ones({1 << 16});
  x.eval();
  const void* before = x.raw_data();
  array y = exp(x);
  x = array(0.0f);  // now only the graph holds the input: its buffer is reused
  y.eval();
  EXPECT_EQ(y.raw_data(), before);
  array z = ones({1 << 16});
  z.eval();
  array w = exp(z);  // z is still held: no donation
  w.eval();
  EXPECT_NE(w.raw_data(), z.raw_data());
  EXPECT_FLOAT_EQ(z.to_vector<float>()[0], 1.0f);
}

TEST(Memory, CacheLimitReleasesTheLargestBlocksFirstAndCachedBlocksAreReused) {
  clear_cache();
  {
    array a = full({1 << 20}, 1.0f) * 2.0f, b = full({1 << 14}, 1.0f) * 2.0f, c = full({1 << 10}, 1.0f) * 2.0f;
    eval(a, b, c);
  }
  const size_t small = (1 << 14) * 4 + (1 << 10) * 4;
  const size_t cached = get_cache_memory();
  ASSERT_GE(cached, (1 << 20) * 4 + small);
  // One byte under: the 4 MB block goes, the small ones stay.
  const size_t old = set_cache_limit(cached - 1);
  EXPECT_LT(get_cache_memory(), size_t(1) << 20);
  EXPECT_GE(get_cache_memory(), small);
  // A request of a cached size takes the cached block: nothing new is active beyond it.
  const size_t before = get_cache_memory();
  {
    array d = full({1 << 14}, 1.0f) * 3.0f;
    d.eval();
    EXPECT_EQ(get_cache_memory(), before - (1 << 14) * 4);
  }
  set_cache_limit(old);
  clear_cache();
  EXPECT_EQ(get_cache_memory(), 0u);
}

TEST(Memory, CacheAndLimit) {
  clear_cache();
  EXPECT_EQ(get_cache_memory(), 0u);
  {
    array a = zeros({1024});
    a.eval();
    EXPECT_GE(get_active_memory(), 4096u);
  }
  EXPECT_GE(get_cache_memory(), 4096u);
  clear_cache();
  EXPECT_EQ(get_cache_memory(), 0u);
  size_t old = set_memory_limit(get_active_memory() + (1 << 20));
  array big = zeros({1 << 22});
  EXPECT_THROW_MSG(big.eval(), std::runtime_error, "memory limit");
  set_memory_limit(old);
  big.eval();
  EXPECT_EQ(big.size(), size_t(1) << 22);
}

TEST(Memory, LargeBlocksStartOnAHugePageBoundary) {
  // Blocks of 2 MiB and more are aligned for transparent huge pages; smaller ones to 64 bytes.
  array big = arange(0.0, double(1 << 20), 1.0, float32) + 1.0f;
  array small = arange(0.0, 1000.0, 1.0, float32) + 1.0f;
  eval(big, small);
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(big.raw_data()) % (2u << 20), 0u);
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(small.raw_data()) % 64, 0u);
  EXPECT_FLOAT_EQ(big.to_vector<float>()[(1 << 20) - 1], float(1 << 20));
}

TEST(Threads, SetAndGet) {
  int old = get_num_threads();
  set_num_threads(1);
  EXPECT_EQ(get_num_threads(), 1);
  EXPECT_THROW_MSG(set_num_threads(0), std::invalid_argument, "n >= 1");
  set_num_threads(old);
}

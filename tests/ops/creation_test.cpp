// Creation ops and astype: shapes, dtypes and values, float->int truncation and saturation, bool
// conversions, float16/bfloat16 rounding, and bad inputs.
#include <cmath>
#include <cstdint>
#include <limits>

#include "../test_utils.h"

using namespace loom;
using loom::testing::kInf;
using loom::testing::kNaN;
using loom::testing::expect_array;

namespace {
const std::vector<Dtype> kAllDtypes(std::begin(all_dtypes), std::end(all_dtypes));
}  // namespace

TEST(Creation, ZerosOnesFull) {
  for (Dtype d : kAllDtypes) {
    SCOPED_TRACE(to_string(d));
    array z = zeros({2, 3}, d);
    EXPECT_EQ(z.dtype(), d);
    expect_array(z, {2, 3}, std::vector<double>(6, 0.0));
    array o = ones({3}, d);
    EXPECT_EQ(o.dtype(), d);
    expect_array(o, {3}, {1, 1, 1});
    expect_array(zeros({}, d), {}, {0});
    expect_array(ones({0, 4}, d), {0, 4}, {});
    EXPECT_EQ(zeros_like(o).dtype(), d);
    expect_array(ones_like(z), {2, 3}, std::vector<double>(6, 1.0));
  }
  EXPECT_EQ(zeros({2}).dtype(), float32);
  EXPECT_EQ(ones({2}).dtype(), float32);
  // full with a scalar value, converted to the dtype
  array f = full({2, 2}, 2.5f);
  EXPECT_EQ(f.dtype(), float32);
  expect_array(f, {2, 2}, {2.5, 2.5, 2.5, 2.5});
  EXPECT_EQ(full({2}, 3).dtype(), int32);
  EXPECT_EQ(full({2}, 2.7, int32).to_vector<int>(), (std::vector<int>{2, 2}));
  EXPECT_EQ(full({2}, -2.7, uint8).to_vector<int>(), (std::vector<int>{0, 0}));  // saturates
  expect_array(full({3}, 0.1, float16), {3}, {0.0999755859375, 0.0999755859375, 0.0999755859375}, 1e-12);
  expect_array(full({2}, 5, bool_), {2}, {1, 1});
  expect_array(full({2}, array(7.0, float64), int64), {2}, {7, 7});
  EXPECT_EQ(full({2}, array(7.0, float64)).dtype(), float64);
  // a one-element array of any rank is a scalar value
  expect_array(full({3}, array({4.0f}, {1, 1})), {3}, {4, 4, 4});
  expect_array(full({}, array(4.0f)), {}, {4});
  // a value with more elements broadcasts
  expect_array(full({2, 3}, array({1.0f, 2.0f, 3.0f})), {2, 3}, {1, 2, 3, 1, 2, 3});
  expect_array(full({2, 2}, array({1.0f, 2.0f}, {2, 1}), int32), {2, 2}, {1, 1, 2, 2});
  expect_array(full({2, 2}, transpose(array({1, 2, 3, 4}, {2, 2}))), {2, 2}, {1, 3, 2, 4});
  // like-ops follow the shape of views
  array t = transpose(zeros({2, 3}, int64));
  EXPECT_EQ(ones_like(t).shape(), (Shape{3, 2}));
  EXPECT_EQ(ones_like(t).dtype(), int64);
}

TEST(Creation, FullErrors) {
  EXPECT_THROW_MSG(zeros({2, -1}), std::invalid_argument, "[full] negative dimension in shape (2,-1)");
  EXPECT_THROW_MSG(ones({-3}), std::invalid_argument, "negative dimension");
  EXPECT_THROW_MSG(full({3}, array({1.0f, 2.0f})), std::invalid_argument, "[full] value of shape (2)");
  EXPECT_THROW_MSG(full({2}, array({1.0f, 2.0f}, {2, 1})), std::invalid_argument, "[full]");
  EXPECT_THROW_MSG(full({3}, zeros({0})), std::invalid_argument, "[full]");
}

TEST(Creation, Arange) {
  array a = arange(5);
  EXPECT_EQ(a.dtype(), int32);
  EXPECT_EQ(a.to_vector<int>(), (std::vector<int>{0, 1, 2, 3, 4}));
  EXPECT_EQ(arange(1, 10, 3).to_vector<int>(), (std::vector<int>{1, 4, 7}));
  EXPECT_EQ(arange(5, 0, -2).to_vector<int>(), (std::vector<int>{5, 3, 1}));
  EXPECT_EQ(arange(3, 1).shape(), (Shape{0}));
  EXPECT_EQ(arange(-3).shape(), (Shape{0}));
  EXPECT_EQ(arange(5.0).dtype(), float32);
  expect_array(arange(0.0, 1.0, 0.25), {4}, {0, 0.25, 0.5, 0.75});
  expect_array(arange(0.0, 1.0, 0.1, float64), {10}, {0, 0.1, 0.2, 0.30000000000000004, 0.4, 0.5,
                                                     0.6000000000000001, 0.7000000000000001, 0.8, 0.9}, 1e-15);
  EXPECT_EQ(arange(0.0, 0.3, 0.1, float64).size(), 3u);  // ceil(2.9999999999999996)
  expect_array(arange(1.0, -1.0, -0.5, float16), {4}, {1, 0.5, 0, -0.5});
  EXPECT_EQ(arange(2.0, 5.0, 1.0, int64).to_vector<int64_t>(), (std::vector<int64_t>{2, 3, 4}));
  EXPECT_EQ(arange(0.0, 4.0, 1.0, uint8).dtype(), uint8);
  EXPECT_THROW_MSG(arange(0.0, 1.0, 0.0), std::invalid_argument, "[arange]");
  EXPECT_THROW_MSG(arange(0, 4, 0), std::invalid_argument, "[arange]");
  EXPECT_THROW_MSG(arange(0.0, std::nan(""), 1.0), std::invalid_argument, "[arange]");
  EXPECT_THROW_MSG(arange(0.0, 4.0, 1.0, bool_), std::invalid_argument, "[arange] cannot produce bool");
  EXPECT_THROW_MSG(arange(0.0, 1e12, 1.0), std::invalid_argument, "[arange]");
}

TEST(Creation, Linspace) {
  array l = linspace(0.0, 1.0, 5);
  EXPECT_EQ(l.dtype(), float32);
  expect_array(l, {5}, {0, 0.25, 0.5, 0.75, 1});
  expect_array(linspace(1.0, 0.0, 3), {3}, {1, 0.5, 0});
  expect_array(linspace(2.0, 3.0, 1), {1}, {2});
  EXPECT_EQ(linspace(2.0, 3.0, 0).shape(), (Shape{0}));
  // the end point is exactly `stop`
  auto v = linspace(0.1, 0.7, 7, float64).to_vector<double>();
  ASSERT_EQ(v.size(), 7u);
  EXPECT_EQ(v[6], 0.7);
  EXPECT_NEAR(v[3], 0.4, 1e-15);
  EXPECT_EQ(linspace(0.0, 10.0, 5, int32).to_vector<int>(), (std::vector<int>{0, 2, 5, 7, 10}));
  EXPECT_EQ(linspace(0.0, 1.0, 3, float16).dtype(), float16);
  EXPECT_EQ(linspace(0.0, 1.0, 50).size(), 50u);
  EXPECT_THROW_MSG(linspace(0.0, 1.0, -1), std::invalid_argument, "[linspace]");
}

TEST(Creation, EyeIdentity) {
  expect_array(eye(3), {3, 3}, {1, 0, 0, 0, 1, 0, 0, 0, 1});
  expect_array(eye(2, 3, 1), {2, 3}, {0, 1, 0, 0, 0, 1});
  expect_array(eye(3, 2, -1), {3, 2}, {0, 0, 1, 0, 0, 1});
  expect_array(eye(2, 2, 5), {2, 2}, {0, 0, 0, 0});
  EXPECT_EQ(eye(2, int32).dtype(), int32);
  EXPECT_EQ(eye(2, int32).to_vector<int>(), (std::vector<int>{1, 0, 0, 1}));
  EXPECT_EQ(eye(2, 2, 0, bool_).dtype(), bool_);
  array id = identity(2, float64);
  EXPECT_EQ(id.dtype(), float64);
  expect_array(id, {2, 2}, {1, 0, 0, 1});
  EXPECT_EQ(eye(0).shape(), (Shape{0, 0}));
  EXPECT_EQ(eye(0, 3).shape(), (Shape{0, 3}));
  EXPECT_THROW_MSG(eye(-1), std::invalid_argument, "[eye]");
  EXPECT_THROW_MSG(eye(2, -3), std::invalid_argument, "[eye]");
}

TEST(AsType, FloatToIntTruncatesAndSaturates) {
  array f({1.7f, -1.7f, 2.5f, -0.5f, 0.0f});
  EXPECT_EQ(astype(f, int32).to_vector<int>(), (std::vector<int>{1, -1, 2, 0, 0}));
  EXPECT_EQ(astype(f, int64).to_vector<int64_t>(), (std::vector<int64_t>{1, -1, 2, 0, 0}));
  EXPECT_EQ(astype(f, uint8).to_vector<int>(), (std::vector<int>{1, 0, 2, 0, 0}));
  constexpr int kMax = std::numeric_limits<int>::max(), kMin = std::numeric_limits<int>::min();
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  array big({1e10f, -1e10f, inf, -inf, nan, 2147483647.0f, -2147483648.0f});
  EXPECT_EQ(astype(big, int32).to_vector<int>(), (std::vector<int>{kMax, kMin, kMax, kMin, 0, kMax, kMin}));
  EXPECT_EQ(astype(big, uint8).to_vector<int>(), (std::vector<int>{255, 0, 255, 0, 0, 255, 0}));
  constexpr int64_t kMax64 = std::numeric_limits<int64_t>::max(), kMin64 = std::numeric_limits<int64_t>::min();
  EXPECT_EQ(astype(big, int64).to_vector<int64_t>(),
            (std::vector<int64_t>{10000000000, -10000000000, kMax64, kMin64, 0, 2147483648, -2147483648}));
  array d({1e30, -1e30, 9.3e18, 2147483647.9, -2147483648.9, -2147483647.9, 255.9, 256.0, kNaN}, float64);
  EXPECT_EQ(astype(d, int64).to_vector<int64_t>(),
            (std::vector<int64_t>{kMax64, kMin64, kMax64, 2147483647, -2147483648, -2147483647, 255, 256, 0}));
  EXPECT_EQ(astype(d, int32).to_vector<int>(),
            (std::vector<int>{kMax, kMin, kMax, kMax, kMin, -2147483647, 255, 256, 0}));
  EXPECT_EQ(astype(d, uint8).to_vector<int>(), (std::vector<int>{255, 0, 255, 255, 0, 0, 255, 255, 0}));
  // half inputs
  array h({65504.0f, -65504.0f, inf, nan, 300.0f, -1.5f}, float16);
  EXPECT_EQ(astype(h, int32).to_vector<int>(), (std::vector<int>{65504, -65504, kMax, 0, 300, -1}));
  EXPECT_EQ(astype(h, uint8).to_vector<int>(), (std::vector<int>{255, 0, 255, 0, 255, 0}));
  array bf({1e30f, -3.0f, nan}, bfloat16);
  EXPECT_EQ(astype(bf, int64).to_vector<int64_t>(), (std::vector<int64_t>{kMax64, -3, 0}));
}

TEST(AsType, IntegerConversions) {
  // narrowing integer conversions wrap (as in C++ and numpy)
  array i({300, -1, 255, 256});
  EXPECT_EQ(astype(i, uint8).to_vector<int>(), (std::vector<int>{44, 255, 255, 0}));
  array i64(std::vector<int64_t>{(int64_t(1) << 32) + 5, -1}, {2});
  EXPECT_EQ(astype(i64, int32).to_vector<int>(), (std::vector<int>{5, -1}));
  EXPECT_EQ(astype(array({200, 7}, uint8), int32).to_vector<int>(), (std::vector<int>{200, 7}));
  // integer to float rounds to nearest even
  array big({16777217, 16777219, -16777217});
  EXPECT_EQ(astype(big, float32).to_vector<float>(), (std::vector<float>{16777216.0f, 16777220.0f, -16777216.0f}));
  array b53(std::vector<int64_t>{(int64_t(1) << 53) + 1}, {1});
  EXPECT_EQ(astype(b53, float64).item<double>(), 9007199254740992.0);
  EXPECT_EQ(astype(array({2049, 2051, 70000}), float16).to_vector<float>(),
            (std::vector<float>{2048.0f, 2052.0f, std::numeric_limits<float>::infinity()}));
  EXPECT_EQ(astype(array({257, 259}), bfloat16).to_vector<float>(), (std::vector<float>{256.0f, 260.0f}));
}

TEST(AsType, BoolConversions) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  array f({0.0f, -0.0f, 0.5f, nan, -std::numeric_limits<float>::infinity(), 1e-30f});
  array b = astype(f, bool_);
  EXPECT_EQ(b.dtype(), bool_);
  expect_array(b, {6}, {0, 0, 1, 1, 1, 1});
  expect_array(astype(array({0, 2, -1}), bool_), {3}, {0, 1, 1});
  expect_array(astype(array({0, 255}, uint8), bool_), {2}, {0, 1});
  expect_array(astype(array(std::vector<int64_t>{int64_t(1) << 40, 0}, {2}), bool_), {2}, {1, 0});
  // a float16 subnormal and a bfloat16 tiny value are still true
  expect_array(astype(array({1e-7f, 0.0f}, float16), bool_), {2}, {1, 0});
  expect_array(astype(array({1e-30f, -0.0f}, bfloat16), bool_), {2}, {1, 0});
  expect_array(astype(array({1e-300, 0.0}, float64), bool_), {2}, {1, 0});
  array t({true, false});
  for (Dtype d : kAllDtypes) {
    SCOPED_TRACE(to_string(d));
    array c = astype(t, d);
    EXPECT_EQ(c.dtype(), d);
    expect_array(c, {2}, {1, 0});
  }
  EXPECT_EQ(astype(t, int32).to_vector<int>(), (std::vector<int>{1, 0}));
}

TEST(AsType, HalfRounding) {
  // float32 -> float16: round to nearest even, overflow to inf, subnormals, NaN, signed zero
  array f({1.0f + 0x1p-11f, 1.0f + 3 * 0x1p-11f, 65504.0f, 65519.0f, 65520.0f, -65520.0f, 1e-8f, 0x1p-24f,
           0.75f * 0x1p-24f, 0x1p-25f, 0.1f, -0.0f});
  auto h = astype(f, float16).to_vector<double>();
  std::vector<double> want{1.0, 1.001953125, 65504, 65504, kInf, -kInf, 0, 5.960464477539063e-08,
                           5.960464477539063e-08, 0, 0.0999755859375, 0};
  ASSERT_EQ(h.size(), want.size());
  for (size_t i = 0; i < h.size(); ++i) EXPECT_EQ(h[i], want[i]) << "at " << i;
  EXPECT_TRUE(std::signbit(h[11]));
  EXPECT_TRUE(std::isnan(astype(array(std::nanf("")), float16).item<float>()));
  // float32 -> bfloat16
  array g({1.0f + 0x1p-8f, 1.0f + 3 * 0x1p-8f, 0.1f, 3.4e38f, -0.0f, 1e-40f});
  auto b = astype(g, bfloat16).to_vector<double>();
  std::vector<double> bwant{1.0, 1.015625, 0.10009765625, kInf, 0, 9.183549615799121e-41};  // 2^-133
  ASSERT_EQ(b.size(), bwant.size());
  for (size_t i = 0; i < b.size(); ++i) EXPECT_EQ(b[i], bwant[i]) << "at " << i;
  EXPECT_TRUE(std::signbit(b[4]));
  EXPECT_TRUE(std::isnan(astype(array(std::nanf("")), bfloat16).item<float>()));
  // between the half types
  EXPECT_EQ(astype(astype(array(0.1f), float16), bfloat16).item<double>(), 0.10009765625);
  EXPECT_EQ(astype(array(1.0f + 0x1p-10f, float16), bfloat16).item<double>(), 1.0);
  EXPECT_EQ(astype(array(100000.0f, bfloat16), float16).item<float>(), std::numeric_limits<float>::infinity());
  // widening is exact
  EXPECT_EQ(astype(array(0.1f, float16), float64).item<double>(), 0.0999755859375);
  EXPECT_EQ(astype(array(0.1f, bfloat16), float32).item<double>(), 0.10009765625);
}

TEST(AsType, Float64ToHalfRoundsOnce) {
  // A float64 just above a float16 (bfloat16) rounding midpoint must round up. Going through
  // float32 first lands exactly on the midpoint, and ties-to-even then rounds down.
  array d({1.0 + 0x1p-11 + 0x1p-40, 1.0 + 0x1p-11 - 0x1p-40, 1.0 + 0x1p-11}, float64);
  EXPECT_EQ(astype(d, float16).to_vector<double>(), (std::vector<double>{1.0009765625, 1.0, 1.0}));
  array e({1.0 + 0x1p-8 + 0x1p-30, 1.0 + 0x1p-8 - 0x1p-30, 1.0 + 0x1p-8}, float64);
  EXPECT_EQ(astype(e, bfloat16).to_vector<double>(), (std::vector<double>{1.0078125, 1.0, 1.0}));
  // the same through array construction and full
  EXPECT_EQ(array(1.0 + 0x1p-11 + 0x1p-40, float16).item<double>(), 1.0009765625);
  EXPECT_EQ(full({1}, 1.0 + 0x1p-11 + 0x1p-40, float16).item<double>(), 1.0009765625);
  // 65519.99 is below the overflow threshold 65520 (float32 would round it to 65520 and overflow)
  EXPECT_EQ(astype(array({65519.999}, float64), float16).item<double>(), 65504.0);
}

TEST(AsType, ViewsEmptyAndIdentity) {
  array x({1.5f, 2.5f, 3.5f, 4.5f, 5.5f, 6.5f}, {2, 3});
  array t = astype(transpose(x), int32);
  EXPECT_EQ(t.shape(), (Shape{3, 2}));
  EXPECT_EQ(t.to_vector<int>(), (std::vector<int>{1, 4, 2, 5, 3, 6}));
  EXPECT_EQ(astype(slice(x, {1, 2}, {-3, -4}, {-1, -2}), float64).to_vector<double>(),
            (std::vector<double>{6.5, 4.5, 3.5, 1.5}));
  expect_array(astype(broadcast_to(array(2.5, float64), {2, 2}), float16), {2, 2}, {2.5, 2.5, 2.5, 2.5});
  EXPECT_EQ(astype(zeros({0, 3}), int64).shape(), (Shape{0, 3}));
  expect_array(astype(array(-3.9f), int32), {}, {-3});
  EXPECT_EQ(astype(x, float32).id(), x.id());
  // every pair of dtypes on a small value that all of them hold
  for (Dtype from : kAllDtypes) {
    for (Dtype to : kAllDtypes) {
      SCOPED_TRACE(to_string(from) + " -> " + to_string(to));
      array v = astype(array({0, 1}, from), to);
      EXPECT_EQ(v.dtype(), to);
      expect_array(v, {2}, {0, 1});
    }
  }
}

TEST(Creation, CopyAndStopGradient) {
  array x({1.0f, 2.0f, 3.0f, 4.0f}, {2, 2});
  array c = copy(x);
  EXPECT_NE(c.id(), x.id());
  EXPECT_EQ(c.dtype(), float32);
  expect_array(c, {2, 2}, {1, 2, 3, 4});
  expect_array(copy(transpose(x)), {2, 2}, {1, 3, 2, 4});
  array s = stop_gradient(x * 2.0f);
  expect_array(s, {2, 2}, {2, 4, 6, 8});
  EXPECT_EQ(stop_gradient(array({1}, uint8)).dtype(), uint8);
  // an update of a copy leaves the original alone
  array u = slice_update(copy(x), array(9.0f), {0, 0}, {1, 1});
  expect_array(u, {2, 2}, {9, 2, 3, 4});
  expect_array(x, {2, 2}, {1, 2, 3, 4});
}

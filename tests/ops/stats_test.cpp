// median, count_nonzero, number_of_elements and positive (MLX's semantics): values against numpy
// (computed once with /usr/bin/python3, noted at each case), dtypes, NaN, keepdims, negative axes,
// views, bad arguments, and finite-difference checks of median's gradient.
#include <cmath>
#include <limits>

#include "../test_utils.h"

using namespace loom;
using loom::testing::kInf;
using loom::testing::kNaN;
using loom::testing::expect_array;

namespace {


// np.array([[[3,1,2,7],[5,4,9,8],[0,-1,6,2]],[[1,1,1,1],[2,3,5,4],[9,8,7,6]]], float)
array sample() {
  return array({3.0f, 1.0f, 2.0f, 7.0f, 5.0f, 4.0f, 9.0f, 8.0f, 0.0f, -1.0f, 6.0f, 2.0f,
                1.0f, 1.0f, 1.0f, 1.0f, 2.0f, 3.0f, 5.0f, 4.0f, 9.0f, 8.0f, 7.0f, 6.0f},
               {2, 3, 4});
}

}  // namespace

TEST(Median, Values) {
  array a = sample();
  // numpy: np.median(a) and with axis=0, (0, 2), -1, (1, 2).
  expect_array(median(a), {}, {3.5});
  expect_array(median(a, 0), {3, 4}, {2.0, 1.0, 1.5, 4.0, 3.5, 3.5, 7.0, 6.0, 4.5, 3.5, 6.5, 4.0});
  expect_array(median(a, std::vector<int>{0, 2}), {3}, {1.0, 4.5, 6.0});
  expect_array(median(a, std::vector<int>{2, 0}), {3}, {1.0, 4.5, 6.0});  // order does not matter
  expect_array(median(a, -1), {2, 3}, {2.5, 6.5, 1.0, 1.0, 3.5, 7.5});
  expect_array(median(a, std::vector<int>{1, -1}), {2}, {3.5, 3.5});
  // keepdims keeps the reduced axes as 1s.
  expect_array(median(a, true), {1, 1, 1}, {3.5});
  expect_array(median(a, std::vector<int>{0, 2}, true), {1, 3, 1}, {1.0, 4.5, 6.0});
  expect_array(median(a, 1, true), {2, 1, 4}, {3, 1, 6, 7, 2, 3, 5, 4});
  // Odd counts take the middle value; a view (transposed) gives the same as a copy.
  expect_array(median(array({5.0f, -1.0f, 3.0f})), {}, {3});
  expect_array(median(transpose(a, {2, 0, 1}), 0), {2, 3}, {2.5, 6.5, 1.0, 1.0, 3.5, 7.5});
  // No axes: every element is its own median (as a float).
  expect_array(median(a, std::vector<int>{}), {2, 3, 4}, a.to_vector<double>());
  expect_array(median(array(4), false), {}, {4});
}

TEST(Median, DtypesAndSpecialValues) {
  // Integers and bool give float32 (MLX's at_least_float); np.median([1, 2, 3, 4]) = 2.5.
  array i({4, 1, 3, 2}, int32);
  EXPECT_EQ(median(i).dtype(), float32);
  expect_array(median(i), {}, {2.5});
  EXPECT_EQ(median(array({true, false, true})).dtype(), float32);
  expect_array(median(array({true, false, true})), {}, {1});
  expect_array(median(array({200, 100}, uint8)), {}, {150});
  EXPECT_EQ(median(array({int64_t(1), int64_t(2)}, int64)).dtype(), float32);
  // Floating dtypes are kept. float16 averages in float32: np.median(np.float16([60000, 65000])) is
  // 62496 (65000 is 64992 in float16; a float16 sum would overflow to inf).
  array h({60000.0f, 65000.0f}, float16);
  EXPECT_EQ(median(h).dtype(), float16);
  expect_array(median(h), {}, {62496}, 0);
  EXPECT_EQ(median(array({1.0f, 2.0f}, bfloat16)).dtype(), bfloat16);
  EXPECT_EQ(median(array({1.0, 2.0}, float64)).dtype(), float64);
  // The largest float32 values average without overflow.
  const float big = std::numeric_limits<float>::max();
  expect_array(median(array({big, big})), {}, {big});
  // A NaN anywhere in the values makes that median NaN (numpy, MLX's CPU backend).
  array n({1.0, kNaN, 3.0, 4.0, 5.0, 6.0}, {2, 3}, float64);
  expect_array(median(n, 1), {2}, {kNaN, 5});
  expect_array(median(n, 0), {3}, {2.5, kNaN, 4.5});
  expect_array(median(n), {}, {kNaN});
  // Infinities are ordinary values; inf and -inf average to NaN (numpy).
  expect_array(median(array({-kInf, 1.0, kInf}, float64)), {}, {1});
  expect_array(median(array({-kInf, kInf})), {}, {kNaN});
  expect_array(median(array({kInf, kInf, 1.0, 2.0}, float64)), {}, {kInf});
}

TEST(Median, BadArguments) {
  array a = zeros({2, 3});
  EXPECT_THROW_MSG(median(a, 2), std::out_of_range, "[median]");
  EXPECT_THROW_MSG(median(a, std::vector<int>{0, -2}), std::invalid_argument, "[median]");
  EXPECT_THROW_MSG(median(zeros({0})), std::invalid_argument, "[median]");
  EXPECT_THROW_MSG(median(zeros({3, 0}), 1), std::invalid_argument, "[median]");
  // Over a non-empty axis of an array with another empty axis: an empty result, no error.
  expect_array(median(zeros({0, 3}), 1), {0}, {});
}

TEST(Median, Gradient) {
  // The gradient goes to the middle value, or half to each of the two middle ones:
  // torch.quantile(x, 0.5) of [3, 1, 2, 7] gives [0.5, 0, 0.5, 0].
  auto g = grad([](const array& x) { return median(x); })(array({3.0, 1.0, 2.0, 7.0}, float64));
  expect_array(g, {4}, {0.5, 0, 0.5, 0});
  array x = loom::testing::lcg_uniform({3, 4, 5}, -1, 1, 9);
  for (bool keep : {false, true}) {
    auto r = check_grads([&](const std::vector<array>& p) { return std::vector<array>{median(p[0], 1, keep)}; }, {x});
    EXPECT_TRUE(r.ok) << r.report;
    r = check_grads([&](const std::vector<array>& p) { return std::vector<array>{median(p[0], {0, 2}, keep)}; }, {x});
    EXPECT_TRUE(r.ok) << r.report;
  }
  auto r = check_grads([&](const std::vector<array>& p) { return std::vector<array>{median(transpose(p[0]))}; }, {x});
  EXPECT_TRUE(r.ok) << r.report;
}

TEST(CountNonzero, Values) {
  // np.count_nonzero of [[0, 1, nan], [0, 0, -2]]: axis 0 -> [0, 1, 2], axis 1 -> [2, 1], all -> 3.
  array a({0.0, 1.0, kNaN, 0.0, 0.0, -2.0}, {2, 3}, float64);
  EXPECT_EQ(count_nonzero(a).dtype(), int32);
  expect_array(count_nonzero(a), {}, {3});
  expect_array(count_nonzero(a, true), {1, 1}, {3});
  expect_array(count_nonzero(a, 0), {3}, {0, 1, 2});
  expect_array(count_nonzero(a, -1, true), {2, 1}, {2, 1});
  expect_array(count_nonzero(a, std::vector<int>{0, 1}), {}, {3});
  expect_array(count_nonzero(a, std::vector<int>{}), {2, 3}, {0, 1, 1, 0, 0, 1});
  expect_array(count_nonzero(transpose(a), 1), {3}, {0, 1, 2});
  // Every dtype; -0.0 is zero.
  expect_array(count_nonzero(array({true, false, true})), {}, {2});
  expect_array(count_nonzero(array({0, 7, 255}, uint8)), {}, {2});
  expect_array(count_nonzero(array({int64_t(0), int64_t(1) << 40}, int64)), {}, {1});
  expect_array(count_nonzero(array({-0.0f, 0.5f}, float16)), {}, {1});
  expect_array(count_nonzero(array({-0.0, 0.0}, float64)), {}, {0});
  // Empty and 0-d.
  expect_array(count_nonzero(zeros({0, 2}), 0), {2}, {0, 0});
  expect_array(count_nonzero(array(3.0f)), {}, {1});
  EXPECT_THROW_MSG(count_nonzero(a, 2), std::out_of_range, "[count_nonzero]");
  EXPECT_THROW_MSG(count_nonzero(a, std::vector<int>{1, 1}), std::invalid_argument, "[count_nonzero]");
}

TEST(NumberOfElements, Values) {
  array a = zeros({2, 3, 4});
  array n = number_of_elements(a, {0, 2}, false);
  EXPECT_EQ(n.ndim(), 0u);
  EXPECT_EQ(n.dtype(), int32);
  expect_array(n, {}, {8});
  expect_array(number_of_elements(a, {-1}, false), {}, {4});
  expect_array(number_of_elements(a, {}, false), {}, {1});
  expect_array(number_of_elements(a, {0, 1, 2}, false, float32), {}, {24});
  // inverted: the reciprocal (MLX's mean multiplies by it).
  array inv = number_of_elements(a, {1, 2}, true, float32);
  EXPECT_EQ(inv.dtype(), float32);
  expect_array(inv, {}, {1.0 / 12});
  expect_array(number_of_elements(a, {0}, true, float64), {}, {0.5});
  // An empty axis: 0 elements; inverted, 1/0 = inf.
  expect_array(number_of_elements(zeros({3, 0}), {1}, false), {}, {0});
  expect_array(number_of_elements(zeros({3, 0}), {1}, true, float32), {}, {kInf});
  // Axes are checked (MLX wraps an out-of-range axis around).
  EXPECT_THROW_MSG(number_of_elements(a, {3}, false), std::out_of_range, "[number_of_elements]");
  EXPECT_THROW_MSG(number_of_elements(array(1.0f), {0}, false), std::out_of_range, "[number_of_elements]");
  // A constant: no gradient reaches a.
  auto g = grad([](const array& x) { return multiply(sum(x), number_of_elements(x, {0}, true, float32)); })(
      array({1.0f, 2.0f, 3.0f, 4.0f}));
  expect_array(g, {4}, {0.25, 0.25, 0.25, 0.25});
}

TEST(Positive, IsTheIdentity) {
  array a({1.0f, -2.0f, 3.0f}, {3});
  expect_array(positive(a), {3}, {1, -2, 3});
  EXPECT_EQ(positive(array({true, false})).dtype(), bool_);
  expect_array(positive(array({5, -7}, int32)), {2}, {5, -7});
  expect_array(positive(transpose(array({1, 2, 3, 4}, {2, 2}))), {2, 2}, {1, 3, 2, 4});
  auto g = grad([](const array& x) { return sum(positive(x) * x); })(array({1.0f, -2.0f}));
  expect_array(g, {2}, {2, -4});
}

// searchsorted against numpy's np.searchsorted (computed once with /usr/bin/python3): sides, ties,
// NaN, promotion, shapes, views, dtypes and bad arguments.
#include <cmath>
#include <limits>

#include "../test_utils.h"

using namespace loom;
using loom::testing::kInf;
using loom::testing::kNaN;
using loom::testing::expect_array;

namespace {
}  // namespace

TEST(SearchSorted, SidesTiesAndNaN) {
  // np.searchsorted([1, 2, 2, 3, nan], [0, 2, 2.5, nan, 4], side=...): left [0 1 3 4 4], right [0 3 3 5 4].
  array s({1.0, 2.0, 2.0, 3.0, kNaN});
  array v({0.0, 2.0, 2.5, kNaN, 4.0});
  array l = searchsorted(s, v);
  EXPECT_EQ(l.dtype(), int32);
  expect_array(l, {5}, {0, 1, 3, 4, 4});
  expect_array(searchsorted(s, v, "left"), {5}, {0, 1, 3, 4, 4});
  expect_array(searchsorted(s, v, "right"), {5}, {0, 3, 3, 5, 4});
  // Without NaN in the sequence a NaN goes last: np.searchsorted([1, 2, 3], nan) = 3.
  expect_array(searchsorted(array({1.0f, 2.0f, 3.0f}), array({kNaN, -kInf, kInf}, float32)), {3}, {3, 0, 3});
  expect_array(searchsorted(array({-kInf, 0.0, kInf}), array({-kInf, kInf}), "right"), {2}, {1, 3});
}

TEST(SearchSorted, ShapesAndViews) {
  array s({10, 20, 30, 40}, int32);
  // values of any shape, the result has their shape; 0-d values give a 0-d result.
  array v({5, 20, 35, 45, 10, 40}, {2, 3}, int32);
  expect_array(searchsorted(s, v), {2, 3}, {0, 1, 3, 4, 0, 3});
  expect_array(searchsorted(s, v, "right"), {2, 3}, {0, 2, 3, 4, 1, 4});
  expect_array(searchsorted(s, transpose(v)), {3, 2}, {0, 4, 1, 0, 3, 3});
  expect_array(searchsorted(s, array(25)), {}, {2});
  // A strided sorted sequence (every other element of a reversed array).
  array desc({9, 8, 7, 6, 5, 4, 3, 2}, int32);
  array asc = slice(desc, {7}, {-9}, {-2});  // [2, 4, 6, 8]
  expect_array(asc, {4}, {2, 4, 6, 8});
  expect_array(searchsorted(asc, array({1, 4, 5, 9}, int32)), {4}, {0, 1, 2, 4});
  // Empty sequence or values.
  expect_array(searchsorted(zeros({0}), array({1.0f, 2.0f})), {2}, {0, 0});
  expect_array(searchsorted(s, zeros({2, 0}, int32)), {2, 0}, {});
  // A broadcast view as values.
  expect_array(searchsorted(s, broadcast_to(array({25}, int32), {2, 2})), {2, 2}, {2, 2, 2, 2});
}

TEST(SearchSorted, DtypesPromote) {
  // Compared in the promoted dtype: np.searchsorted(np.int32([1, 2, 3]), [2.5]) = 2.
  expect_array(searchsorted(array({1, 2, 3}, int32), array({2.5f})), {1}, {2});
  expect_array(searchsorted(array({1.5f, 2.5f}), array({2}, int32)), {1}, {1});
  expect_array(searchsorted(array({false, true}), array({true}), "left"), {1}, {1});
  expect_array(searchsorted(array({false, true}), array({true}), "right"), {1}, {2});
  expect_array(searchsorted(array({0, 100, 200}, uint8), array({150}, uint8)), {1}, {2});
  expect_array(searchsorted(array({int64_t(1) << 40, int64_t(1) << 41}, int64), array({int64_t(3) << 39}, int64)), {1}, {1});
  expect_array(searchsorted(array({0.5f, 1.5f, 2.5f}, float16), array({1.5f}, float16), "right"), {1}, {2});
  expect_array(searchsorted(array({0.5f, 1.5f, 2.5f}, bfloat16), array({2.0f}, bfloat16)), {1}, {2});
}

TEST(SearchSorted, BadArguments) {
  EXPECT_THROW_MSG(searchsorted(zeros({2, 2}), zeros({1})), std::invalid_argument, "[searchsorted]");
  EXPECT_THROW_MSG(searchsorted(array(1.0f), zeros({1})), std::invalid_argument, "[searchsorted]");
  EXPECT_THROW_MSG(searchsorted(zeros({2}), zeros({1}), "middle"), std::invalid_argument, "[searchsorted]");
  EXPECT_THROW_MSG(searchsorted(zeros({2}), zeros({1}), "Left"), std::invalid_argument, "[searchsorted]");
  // No gradient flows through the indices: d/dx of sum(x) * sum(searchsorted(x, [0.5, 2.5])) is
  // (1 + 3) per element.
  auto g = grad([](const array& x) {
    return multiply(sum(x), sum(astype(searchsorted(x, array({0.5f, 2.5f})), float32)));
  })(array({0.0f, 1.0f, 2.0f}));
  expect_array(g, {3}, {4, 4, 4});
}

// Binary elementwise ops, where, clip and the operators: hand-computed values in every dtype and
// layout, numpy promotion and broadcasting, Python-style integer division, and bad inputs.
#include <cmath>
#include <functional>
#include <tuple>
#include <utility>
#include <limits>

#include "../test_utils.h"

using namespace loom;
using loom::testing::kInf;
using loom::testing::kNaN;
using loom::testing::kPi;
using loom::testing::expect_array;

namespace {


using BinaryFn = std::function<array(const array&, const array&)>;

struct BinaryCase {
  const char* name;
  BinaryFn fn;
  std::vector<double> a, b;      // exactly 6 values each
  std::vector<double> expected;  // f(a, b)
  bool predicate;                // result is bool
};

double tol_for(Dtype d) {
  if (d == float16) return 4e-3;
  if (d == bfloat16) return 2e-2;
  if (d == float32) return 2e-6;
  return 1e-12;
}

std::vector<double> transpose23(const std::vector<double>& v) { return {v[0], v[3], v[1], v[4], v[2], v[5]}; }

array as_transposed(const std::vector<double>& v, Dtype d) { return transpose(array(transpose23(v), {3, 2}, d)); }
// (2,3) with strides (6,2): every other column of a (2,6) buffer
array as_strided(const std::vector<double>& v, Dtype d) {
  std::vector<double> buf;
  for (double x : v) {
    buf.push_back(-999.0);
    buf.push_back(x);
  }
  return slice(array(buf, {2, 6}, d), {0, 1}, {2, 6}, {1, 2});
}
array as_reversed(const std::vector<double>& v, Dtype d) {
  std::vector<double> rev(v.rbegin(), v.rend());
  return slice(array(rev, {6}, d), {-1}, {-100}, {-1});
}

void check_binary_layouts(const BinaryCase& c, Dtype d) {
  SCOPED_TRACE(std::string(c.name) + " " + to_string(d));
  const double tol = c.predicate ? 0 : tol_for(d);
  const Dtype out = c.predicate ? bool_ : d;
  const auto& e = c.expected;
  auto rep = [](const std::vector<double>& v, int n) {
    std::vector<double> r;
    for (int i = 0; i < n; ++i) r.insert(r.end(), v.begin(), v.end());
    return r;
  };
  {
    array r = c.fn(array(c.a, {2, 3}, d), array(c.b, {2, 3}, d));
    EXPECT_EQ(r.dtype(), out);
    expect_array(r, {2, 3}, e, tol);
  }
  // both transposed (same strides: the flat path keeps the column-major layout)
  expect_array(c.fn(as_transposed(c.a, d), as_transposed(c.b, d)), {2, 3}, e, tol);
  // mixed layouts: the strided path
  expect_array(c.fn(as_transposed(c.a, d), array(c.b, {2, 3}, d)), {2, 3}, e, tol);
  expect_array(c.fn(array(c.a, {2, 3}, d), as_transposed(c.b, d)), {2, 3}, e, tol);
  expect_array(c.fn(as_reversed(c.a, d), slice(array(c.b, {6}, d), {0}, {6}, {1})), {6}, e, tol);
  {
    std::vector<double> buf;
    for (double x : c.b) {
      buf.push_back(x);
      buf.push_back(5.0);
      buf.push_back(6.0);
    }
    array bs = slice(array(buf, {18}, d), {0}, {18}, {3});
    expect_array(c.fn(as_reversed(c.a, d), bs), {6}, e, tol);
    expect_array(c.fn(as_strided(c.a, d), as_transposed(c.b, d)), {2, 3}, e, tol);
  }
  // broadcasting along a new leading axis (stride 0 in both operands)
  {
    array a = broadcast_to(array(c.a, {1, 6}, d), {3, 6});
    array b = array(c.b, {6}, d);
    expect_array(c.fn(a, b), {3, 6}, rep(e, 3), tol);
    expect_array(c.fn(array(c.a, {6}, d), broadcast_to(array(c.b, {1, 6}, d), {3, 6})), {3, 6}, rep(e, 3), tol);
    array at = as_transposed(c.a, d);  // (2,3), broadcast to (4,2,3)
    expect_array(c.fn(broadcast_to(at, {4, 2, 3}), array(c.b, {2, 3}, d)), {4, 2, 3}, rep(e, 4), tol);
  }
  // scalar operands, each entry on its own (both the 0-d and the broadcast forms)
  for (int k = 0; k < 6; ++k) {
    array a0(std::vector<double>{c.a[k]}, {}, d), b0(std::vector<double>{c.b[k]}, {}, d);
    expect_array(c.fn(a0, b0), {}, {e[k]}, tol);
    expect_array(c.fn(full({5}, a0), b0), {5}, std::vector<double>(5, e[k]), tol);
    expect_array(c.fn(a0, full({2, 3}, b0)), {2, 3}, std::vector<double>(6, e[k]), tol);
    expect_array(c.fn(transpose(full({3, 2}, a0)), b0), {2, 3}, std::vector<double>(6, e[k]), tol);
  }
  // empty
  {
    array r = c.fn(zeros({0, 3}, d), zeros({3}, d));
    EXPECT_EQ(r.dtype(), out);
    EXPECT_EQ(r.shape(), (Shape{0, 3}));
    expect_array(r, {0, 3}, {});
    EXPECT_EQ(c.fn(zeros({2, 1}, d), zeros({0}, d)).shape(), (Shape{2, 0}));
  }
}

std::vector<BinaryCase> float_cases() {
  return {
      {"add", [](const array& a, const array& b) { return add(a, b); }, {1, 2.5, -3, 0, 100, -0.5},
       {2, -2.5, -4, 0, 1, 0.25}, {3, 0, -7, 0, 101, -0.25}, false},
      {"operator+", [](const array& a, const array& b) { return a + b; }, {1, 2.5, -3, 0, 100, -0.5},
       {2, -2.5, -4, 0, 1, 0.25}, {3, 0, -7, 0, 101, -0.25}, false},
      {"subtract", [](const array& a, const array& b) { return subtract(a, b); }, {1, 2.5, -3, 0, 100, -0.5},
       {2, -2.5, -4, 0, 1, 0.25}, {-1, 5, 1, 0, 99, -0.75}, false},
      {"operator-", [](const array& a, const array& b) { return a - b; }, {1, 2.5, -3, 0, 100, -0.5},
       {2, -2.5, -4, 0, 1, 0.25}, {-1, 5, 1, 0, 99, -0.75}, false},
      {"multiply", [](const array& a, const array& b) { return multiply(a, b); }, {1, 2.5, -3, 0, 100, -0.5},
       {2, -2.5, -4, kInf, 1, 0.25}, {2, -6.25, 12, kNaN, 100, -0.125}, false},
      {"operator*", [](const array& a, const array& b) { return a * b; }, {1, 2.5, -3, 0, 100, -0.5},
       {2, -2.5, -4, 7, 1, 0.25}, {2, -6.25, 12, 0, 100, -0.125}, false},
      {"divide", [](const array& a, const array& b) { return divide(a, b); }, {1, 7, -3, 1, 0, -1},
       {2, -2, 4, 0, 0, 0}, {0.5, -3.5, -0.75, kInf, kNaN, -kInf}, false},
      {"operator/", [](const array& a, const array& b) { return a / b; }, {1, 7, -3, 1, 0, -1},
       {2, -2, 4, 0, 0, 0}, {0.5, -3.5, -0.75, kInf, kNaN, -kInf}, false},
      // Python: -7 // 2 = -4, 7 // -2 = -4, -0.5 // 3 = -1
      {"floor_divide", [](const array& a, const array& b) { return floor_divide(a, b); }, {7, -7, 7, -7, 7.5, -0.5},
       {2, 2, -2, -2, 2, 3}, {3, -4, -4, 3, 3, -1}, false},
      // Python: -7 % 2 = 1, 7 % -2 = -1, -0.5 % 3 = 2.5
      {"remainder", [](const array& a, const array& b) { return remainder(a, b); }, {7, -7, 7, -7, 7.5, -0.5},
       {2, 2, -2, -2, 2, 3}, {1, 1, -1, -1, 1.5, 2.5}, false},
      {"operator%", [](const array& a, const array& b) { return a % b; }, {7, -7, 7, -7, 7.5, -0.5},
       {2, 2, -2, -2, 2, 3}, {1, 1, -1, -1, 1.5, 2.5}, false},
      {"power", [](const array& a, const array& b) { return power(a, b); }, {2, 3, -2, 4, 9, 0}, {3, 0, 3, 0.5, -0.5, 0},
       {8, 1, -8, 2, 1.0 / 3.0, 1}, false},
      {"maximum", [](const array& a, const array& b) { return maximum(a, b); }, {1, kNaN, 3, -1, 0, 5},
       {2, 1, kNaN, -2, -0.0, 5}, {2, kNaN, kNaN, -1, 0, 5}, false},
      {"minimum", [](const array& a, const array& b) { return minimum(a, b); }, {1, kNaN, 3, -1, 0, 5},
       {2, 1, kNaN, -2, -0.0, 5}, {1, kNaN, kNaN, -2, 0, 5}, false},
      {"arctan2", [](const array& a, const array& b) { return arctan2(a, b); }, {1, 1, -1, 0, 0, 1},
       {1, -1, -1, 1, -1, 0}, {kPi / 4, 3 * kPi / 4, -3 * kPi / 4, 0, kPi, kPi / 2}, false},
      {"equal", [](const array& a, const array& b) { return equal(a, b); }, {1, 2, kNaN, 0, -0.0, 3},
       {1, 3, kNaN, -0.0, 0, 2}, {1, 0, 0, 1, 1, 0}, true},
      {"operator==", [](const array& a, const array& b) { return a == b; }, {1, 2, kNaN, 0, -0.0, 3},
       {1, 3, kNaN, -0.0, 0, 2}, {1, 0, 0, 1, 1, 0}, true},
      {"not_equal", [](const array& a, const array& b) { return not_equal(a, b); }, {1, 2, kNaN, 0, -0.0, 3},
       {1, 3, kNaN, -0.0, 0, 2}, {0, 1, 1, 0, 0, 1}, true},
      {"operator!=", [](const array& a, const array& b) { return a != b; }, {1, 2, kNaN, 0, -0.0, 3},
       {1, 3, kNaN, -0.0, 0, 2}, {0, 1, 1, 0, 0, 1}, true},
      {"less", [](const array& a, const array& b) { return less(a, b); }, {1, 2, kNaN, 0, -0.0, 3},
       {1, 3, kNaN, -0.0, 0, 2}, {0, 1, 0, 0, 0, 0}, true},
      {"operator<", [](const array& a, const array& b) { return a < b; }, {1, 2, kNaN, 0, -0.0, 3},
       {1, 3, kNaN, -0.0, 0, 2}, {0, 1, 0, 0, 0, 0}, true},
      {"less_equal", [](const array& a, const array& b) { return less_equal(a, b); }, {1, 2, kNaN, 0, -0.0, 3},
       {1, 3, kNaN, -0.0, 0, 2}, {1, 1, 0, 1, 1, 0}, true},
      {"operator<=", [](const array& a, const array& b) { return a <= b; }, {1, 2, kNaN, 0, -0.0, 3},
       {1, 3, kNaN, -0.0, 0, 2}, {1, 1, 0, 1, 1, 0}, true},
      {"greater", [](const array& a, const array& b) { return greater(a, b); }, {1, 2, kNaN, 0, -0.0, 3},
       {1, 3, kNaN, -0.0, 0, 2}, {0, 0, 0, 0, 0, 1}, true},
      {"operator>", [](const array& a, const array& b) { return a > b; }, {1, 2, kNaN, 0, -0.0, 3},
       {1, 3, kNaN, -0.0, 0, 2}, {0, 0, 0, 0, 0, 1}, true},
      {"greater_equal", [](const array& a, const array& b) { return greater_equal(a, b); }, {1, 2, kNaN, 0, -0.0, 3},
       {1, 3, kNaN, -0.0, 0, 2}, {1, 0, 0, 1, 1, 1}, true},
      {"operator>=", [](const array& a, const array& b) { return a >= b; }, {1, 2, kNaN, 0, -0.0, 3},
       {1, 3, kNaN, -0.0, 0, 2}, {1, 0, 0, 1, 1, 1}, true},
      {"logical_and", [](const array& a, const array& b) { return logical_and(a, b); }, {0, 1, 2, 0, -1, kNaN},
       {0, 0, 3, 5, 0.5, 1}, {0, 0, 1, 0, 1, 1}, true},
      {"operator&&", [](const array& a, const array& b) { return a && b; }, {0, 1, 2, 0, -1, kNaN},
       {0, 0, 3, 5, 0.5, 1}, {0, 0, 1, 0, 1, 1}, true},
      {"logical_or", [](const array& a, const array& b) { return logical_or(a, b); }, {0, 1, 2, 0, -1, kNaN},
       {0, 0, 3, 5, 0.5, 1}, {0, 1, 1, 1, 1, 1}, true},
      {"operator||", [](const array& a, const array& b) { return a || b; }, {0, 1, 2, 0, -1, kNaN},
       {0, 0, 3, 5, 0.5, 1}, {0, 1, 1, 1, 1, 1}, true},
  };
}

}  // namespace

TEST(Binary, FloatOpsEveryDtypeAndLayout) {
  for (const auto& c : float_cases()) {
    for (Dtype d : {float32, float64, float16, bfloat16}) check_binary_layouts(c, d);
  }
}

TEST(Binary, ExplicitBroadcasting) {
  // (2,1) against (1,3): an outer operation
  array col({1.0f, 2.0f}, {2, 1});
  array row({10.0f, 20.0f, 30.0f}, {1, 3});
  expect_array(add(col, row), {2, 3}, {11, 21, 31, 12, 22, 32});
  expect_array(subtract(row, col), {2, 3}, {9, 19, 29, 8, 18, 28});
  expect_array(divide(col, row), {2, 3}, {0.1, 0.05, 1.0 / 30, 0.2, 0.1, 2.0 / 30});
  expect_array(less(col * 15.0f, row), {2, 3}, {0, 1, 1, 0, 0, 0});
  // a transposed (3,2) view against a (2,) row: the row broadcasts along axis 0
  array t = transpose(array({1.0f, 2.0f, 3.0f, 4.0f, 5.0f, 6.0f}, {2, 3}));  // [[1,4],[2,5],[3,6]]
  expect_array(multiply(t, array({1.0f, -1.0f})), {3, 2}, {1, -4, 2, -5, 3, -6});
  expect_array(power(t, array({2.0f, 0.5f})), {3, 2}, {1, 2, 4, 2.23606797749979, 9, 2.449489742783178});
  expect_array(remainder(t, array({-3.0f}, {1, 1})), {3, 2}, {-2, -2, -1, -1, 0, 0});
  // (2,1,3) + (4,1): (2,4,3)
  array a = reshape(arange(0.0, 6.0, 1.0, float64), {2, 1, 3});
  array b = reshape(array({0.0, 10.0, 20.0, 30.0}), {4, 1});
  array r = add(a, b);
  EXPECT_EQ(r.dtype(), float64);
  std::vector<double> want;
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 4; ++j)
      for (int k = 0; k < 3; ++k) want.push_back(3 * i + k + 10 * j);
  expect_array(r, {2, 4, 3}, want);
  // 0-d with 0-d gives 0-d
  EXPECT_EQ(add(array(1.0f), array(2.0f)).shape(), Shape{});
  // size-1 dims broadcast against size 0
  EXPECT_EQ(add(zeros({1, 3}), zeros({0, 1})).shape(), (Shape{0, 3}));
}

TEST(Binary, IntegerDivisionFollowsPython) {
  array a({-7, 7, -7, 7, 0, 5, std::numeric_limits<int>::min(), 6});
  array b({2, -2, -2, 2, 3, 0, -1, -3});
  array q = floor_divide(a, b);
  EXPECT_EQ(q.dtype(), int32);
  EXPECT_EQ(q.to_vector<int>(), (std::vector<int>{-4, -4, 3, 3, 0, 0, std::numeric_limits<int>::min(), -2}));
  array r = remainder(a, b);
  EXPECT_EQ(r.dtype(), int32);
  EXPECT_EQ(r.to_vector<int>(), (std::vector<int>{1, -1, -1, 1, 0, 0, 0, 0}));
  EXPECT_EQ((a % b).to_vector<int>(), r.to_vector<int>());
  // a // b * b + a % b == a wherever b != 0 (checked by hand above; here on a strided view)
  array as = slice(a, {0}, {8}, {2}), bs = slice(b, {1}, {8}, {2});  // a: -7,-7,0,INT_MIN  b: -2,2,0,-3
  EXPECT_EQ(floor_divide(as, bs).to_vector<int>(), (std::vector<int>{3, -4, 0, 715827882}));
  EXPECT_EQ(remainder(as, bs).to_vector<int>(), (std::vector<int>{-1, 1, 0, -2}));
  // int64 and uint8
  array a64(std::vector<int64_t>{-7, int64_t(1) << 40, 9, 1}, {4});
  array b64(std::vector<int64_t>{2, 3, 0, -1}, {4});
  EXPECT_EQ(floor_divide(a64, b64).to_vector<int64_t>(), (std::vector<int64_t>{-4, 366503875925, 0, -1}));
  EXPECT_EQ(remainder(a64, b64).to_vector<int64_t>(), (std::vector<int64_t>{1, 1, 0, 0}));
  array u({200, 7, 0, 255}, uint8), v({7, 0, 3, 16}, uint8);
  EXPECT_EQ(floor_divide(u, v).dtype(), uint8);
  EXPECT_EQ(floor_divide(u, v).to_vector<int>(), (std::vector<int>{28, 0, 0, 15}));
  EXPECT_EQ(remainder(u, v).to_vector<int>(), (std::vector<int>{4, 0, 0, 15}));
  // scalar forms
  EXPECT_EQ((array({-7, 7}) % 2).to_vector<int>(), (std::vector<int>{1, 1}));
  EXPECT_EQ((7 % array({-2, 2})).to_vector<int>(), (std::vector<int>{-1, 1}));
  // float division by zero is IEEE; float modulo by zero is NaN
  expect_array(floor_divide(array({1.0f, -1.0f, 0.0f}), array({0.0f, 0.0f, 0.0f})), {3}, {kInf, -kInf, kNaN});
  expect_array(remainder(array({1.0f}), array({0.0f})), {1}, {kNaN});
}

TEST(Binary, IntegerArithmetic) {
  // uint8 wraps like numpy
  array u({250, 3, 16}, uint8), w({10, 5, 16}, uint8);
  EXPECT_EQ(add(u, w).dtype(), uint8);
  EXPECT_EQ(add(u, w).to_vector<int>(), (std::vector<int>{4, 8, 32}));
  EXPECT_EQ(subtract(u, w).to_vector<int>(), (std::vector<int>{240, 254, 0}));
  EXPECT_EQ(multiply(u, w).to_vector<int>(), (std::vector<int>{196, 15, 0}));
  // int32 and int64
  EXPECT_EQ((array({1, 2}) + array({3, 4})).to_vector<int>(), (std::vector<int>{4, 6}));
  array big(std::vector<int64_t>{(int64_t(1) << 53) + 1, 5}, {2});
  array big2(std::vector<int64_t>{int64_t(1) << 53, 5}, {2});
  EXPECT_EQ(equal(big, big2).to_vector<int>(), (std::vector<int>{0, 1}));  // no trip through double
  EXPECT_EQ(subtract(big, big2).to_vector<int64_t>(), (std::vector<int64_t>{1, 0}));
  EXPECT_EQ(maximum(array({3, -9}), array({-1, 4})).to_vector<int>(), (std::vector<int>{3, 4}));
  EXPECT_EQ(minimum(array({3, 9}, uint8), array({1, 4}, uint8)).to_vector<int>(), (std::vector<int>{1, 4}));
  // integer power, including negative exponents (0 unless the base is +-1) and 0^0 = 1
  array base(std::vector<int64_t>{3, 2, -1, 1, -2, 0, 5, -1}, {8});
  array ex(std::vector<int64_t>{20, -1, -3, -5, 3, 0, 1, 4}, {8});
  array p = power(base, ex);
  EXPECT_EQ(p.dtype(), int64);
  EXPECT_EQ(p.to_vector<int64_t>(), (std::vector<int64_t>{3486784401, 0, -1, 1, -8, 1, 5, 1}));
  EXPECT_EQ(power(array({2, 3}, uint8), array({7, 5}, uint8)).to_vector<int>(), (std::vector<int>{128, 243}));
  // divide and arctan2 give float32 for integers
  array q = divide(array({7, -7, 1}), array({2, 2, 0}));
  EXPECT_EQ(q.dtype(), float32);
  expect_array(q, {3}, {3.5, -3.5, kInf});
  array i64(std::vector<int64_t>{1, 2}, {2});
  EXPECT_EQ(divide(i64, i64).dtype(), float32);
  expect_array(divide(i64, i64), {2}, {1, 1});
  EXPECT_EQ(arctan2(array({1}), array({1})).dtype(), float32);
  expect_array(arctan2(array({1}), array({1})), {1}, {kPi / 4});
  // integer comparisons on transposed views
  array t = transpose(array({1, 2, 3, 4, 5, 6}, {2, 3}));  // [[1,4],[2,5],[3,6]]
  expect_array(greater(t, array({2, 4})), {3, 2}, {0, 0, 0, 1, 1, 1});
}

TEST(Binary, BoolArithmetic) {
  array a({true, true, false, false}), b({true, false, true, false});
  array s = add(a, b);
  EXPECT_EQ(s.dtype(), bool_);
  EXPECT_EQ(s.to_vector<int>(), (std::vector<int>{1, 1, 1, 0}));  // or
  EXPECT_EQ(multiply(a, b).to_vector<int>(), (std::vector<int>{1, 0, 0, 0}));  // and
  EXPECT_EQ(maximum(a, b).to_vector<int>(), (std::vector<int>{1, 1, 1, 0}));
  EXPECT_EQ(minimum(a, b).to_vector<int>(), (std::vector<int>{1, 0, 0, 0}));
  EXPECT_EQ(equal(a, b).to_vector<int>(), (std::vector<int>{1, 0, 0, 1}));
  EXPECT_EQ(logical_and(a, b).dtype(), bool_);
  array q = divide(a, b);
  EXPECT_EQ(q.dtype(), float32);
  expect_array(q, {4}, {1, kInf, 0, kNaN});
  EXPECT_THROW_MSG(subtract(a, b), std::invalid_argument, "[subtract]");
  EXPECT_THROW_MSG(a - b, std::invalid_argument, "bool");
  EXPECT_THROW_MSG(floor_divide(a, b), std::invalid_argument, "[floor_divide]");
  EXPECT_THROW_MSG(remainder(a, b), std::invalid_argument, "[remainder]");
  // MLX's bool power: a or not b.
  EXPECT_EQ(power(a, b).dtype(), bool_);
  EXPECT_EQ(power(a, b).to_vector<int>(), (std::vector<int>{1, 1, 0, 1}));
}

TEST(Binary, TypePromotion) {
  struct P {
    Dtype a, b, out;
  };
  for (P p : {P{int32, float16, float16}, P{uint8, int32, int32}, P{float16, bfloat16, float32}, P{bool_, uint8, uint8},
              P{int64, float32, float32}, P{float32, float64, float64}, P{bool_, float16, float16},
              P{int32, int64, int64}, P{bfloat16, float64, float64}, P{uint8, bfloat16, bfloat16}}) {
    SCOPED_TRACE(to_string(p.a) + " + " + to_string(p.b));
    array x = add(ones({2}, p.a), ones({2}, p.b));
    EXPECT_EQ(x.dtype(), p.out);
    EXPECT_EQ(add(ones({2}, p.b), ones({2}, p.a)).dtype(), p.out);
    EXPECT_EQ(less(ones({2}, p.a), ones({2}, p.b)).dtype(), bool_);
    expect_array(x, {2}, {p.out == bool_ ? 1.0 : 2.0, p.out == bool_ ? 1.0 : 2.0});
  }
  // mixed-dtype values
  expect_array(add(array({1, 2}), array({0.5f, 0.25f})), {2}, {1.5, 2.25});
  expect_array(less(array({1, 2, 3}), array({1.5f})), {3}, {1, 0, 0});
  expect_array(multiply(array({3}, uint8), array({-2})), {1}, {-6});
}

TEST(Binary, ScalarOperatorsKeepTheArrayDtype) {
  array h({1.0f, 2.0f}, float16);
  EXPECT_EQ((h * 2.0f).dtype(), float16);
  EXPECT_EQ((h + 2.0).dtype(), float16);
  EXPECT_EQ((2 * h).dtype(), float16);
  EXPECT_EQ((h + 1).dtype(), float16);
  expect_array(h * 2.0f, {2}, {2, 4});
  array bf({1.5f}, bfloat16);
  EXPECT_EQ((bf - 1.0).dtype(), bfloat16);
  expect_array(1.0 - bf, {1}, {-0.5});

  array i({1, 2});
  EXPECT_EQ((i + 1).dtype(), int32);
  EXPECT_EQ((i + 1).to_vector<int>(), (std::vector<int>{2, 3}));
  EXPECT_EQ((i * 2.5).dtype(), float32);
  expect_array(i * 2.5, {2}, {2.5, 5});
  EXPECT_EQ((10 - i).to_vector<int>(), (std::vector<int>{9, 8}));
  EXPECT_EQ((1.0 / i).dtype(), float32);
  expect_array(1.0 / i, {2}, {1, 0.5});
  expect_array(i / 2, {2}, {0.5, 1});  // true division
  EXPECT_EQ((i > 1.5).dtype(), bool_);
  expect_array(i > 1.5, {2}, {0, 1});
  expect_array(i == 2, {2}, {0, 1});
  expect_array(2 <= i, {2}, {0, 1});
  expect_array(i != 2, {2}, {1, 0});

  array u({5, 250}, uint8);
  EXPECT_EQ((u + 1).dtype(), uint8);
  EXPECT_EQ((u + 10).to_vector<int>(), (std::vector<int>{15, 4}));
  array i64(std::vector<int64_t>{int64_t(1) << 40}, {1});
  EXPECT_EQ((i64 + 1).dtype(), int64);
  EXPECT_EQ((i64 + 1).item<int64_t>(), (int64_t(1) << 40) + 1);

  array b({true, false});
  EXPECT_EQ((b + 1).dtype(), int32);
  EXPECT_EQ((b + 1).to_vector<int>(), (std::vector<int>{2, 1}));
  EXPECT_EQ((b * 2.0).dtype(), float32);
  expect_array(b * 2.0, {2}, {2, 0});
  EXPECT_EQ((b && true).dtype(), bool_);
  expect_array(b && true, {2}, {1, 0});
  expect_array(b || false, {2}, {1, 0});
  expect_array(false || b, {2}, {1, 0});

  array d({1.0, 2.0}, float64);
  EXPECT_EQ((d + 1.0f).dtype(), float64);
  EXPECT_EQ(array({1.0, 2.0}).dtype(), float32);  // a C++ double makes float32, as in MLX
  array f({1.0f});
  EXPECT_EQ((f + 1.0).dtype(), float32);
  EXPECT_EQ((f + 1).dtype(), float32);
  expect_array(f + 0.5, {1}, {1.5});
  expect_array(-7 % array({2.0f}), {1}, {1});
}

TEST(Binary, BroadcastErrorsNameTheOp) {
  array a = zeros({2, 3}), b = zeros({4});
  EXPECT_THROW_MSG(add(a, b), std::invalid_argument, "[add]");
  EXPECT_THROW_MSG(add(a, b), std::invalid_argument, "(2,3)");
  EXPECT_THROW_MSG(a * b, std::invalid_argument, "[multiply]");
  EXPECT_THROW_MSG(subtract(a, b), std::invalid_argument, "[subtract]");
  EXPECT_THROW_MSG(divide(a, b), std::invalid_argument, "[divide]");
  EXPECT_THROW_MSG(power(a, b), std::invalid_argument, "[power]");
  EXPECT_THROW_MSG(maximum(a, b), std::invalid_argument, "[maximum]");
  EXPECT_THROW_MSG(arctan2(a, b), std::invalid_argument, "[arctan2]");
  EXPECT_THROW_MSG(equal(a, b), std::invalid_argument, "[equal]");
  EXPECT_THROW_MSG(less_equal(a, b), std::invalid_argument, "[less_equal]");
  EXPECT_THROW_MSG(logical_or(a, b), std::invalid_argument, "[logical_or]");
  EXPECT_THROW_MSG(remainder(zeros({3, 2}), zeros({3})), std::invalid_argument, "(3)");
}

TEST(Where, ValuesDtypesAndBroadcasting) {
  array c({true, false, true, false, false, true}, {2, 3});
  for (Dtype d : all_dtypes) {
    SCOPED_TRACE(to_string(d));
    array x(std::vector<double>{1, 0, 1, 1, 1, 0}, {2, 3}, d);
    array y(std::vector<double>{0, 1, 0, 0, 0, 1}, {2, 3}, d);
    array r = where(c, x, y);
    EXPECT_EQ(r.dtype(), d);
    expect_array(r, {2, 3}, {1, 1, 1, 0, 0, 0});
    // transposed condition and reversed x
    array ct = transpose(array({true, false, false, false, true, true}, {3, 2}));  // [[1,0,1],[0,0,1]]
    array xr = slice(array(std::vector<double>{0, 1, 0, 1, 1, 0}, {2, 3}, d), {1, 2}, {-3, -4}, {-1, -1});
    // xr = [[0,1,1],[0,1,0]] ... reversed both axes of [[0,1,0],[1,1,0]]
    expect_array(where(ct, xr, y), {2, 3}, {0, 1, 1, 0, 0, 0});
  }
  // broadcast all three: cond (2,1), x (1,3), y ()
  array cond({true, false}, {2, 1});
  array x({1.0f, 2.0f, 3.0f}, {1, 3});
  array r = where(cond, x, array(-1.0f));
  expect_array(r, {2, 3}, {1, 2, 3, -1, -1, -1});
  // promotion: int32 with float32 -> float32, int32 with int64 -> int64, int32 with uint8 -> int32
  EXPECT_EQ(where(cond, array({1, 2, 3}), array(0.5f)).dtype(), float32);
  expect_array(where(cond, array({1, 2, 3}), array(0.5f)), {2, 3}, {1, 2, 3, 0.5, 0.5, 0.5});
  EXPECT_EQ(where(cond, array({1}), array(std::vector<int64_t>{7}, {})).dtype(), int64);
  EXPECT_EQ(where(cond, array({1}), array({7}, uint8)).dtype(), int32);
  // non-bool conditions: nonzero (and NaN) is true
  expect_array(where(array({0.0f, 2.0f, std::nanf("")}), array(1.0f), array(0.0f)), {3}, {0, 1, 1});
  expect_array(where(array({0, -3}), array({10, 20}), array({30, 40})), {2}, {30, 20});
  // NaN values pass through
  expect_array(where(array({true, false}), array({kNaN, 1.0}), array(2.0)), {2}, {kNaN, 2});
  // a scalar-only select and an empty one
  expect_array(where(array(true), array(1), array(2)), {}, {1});
  EXPECT_EQ(where(zeros({0}, bool_), zeros({3, 1}), zeros({1})).shape(), (Shape{3, 0}));
  // shape mismatch
  EXPECT_THROW_MSG(where(array({true, false}), zeros({3}), zeros({3})), std::invalid_argument, "[where]");
}

TEST(Clip, Bounds) {
  array x({-2.0f, 0.5f, 3.0f, std::nanf(""), 1.0f, 0.0f});
  expect_array(clip(x, array(0.0f), array(1.0f)), {6}, {0, 0.5, 1, kNaN, 1, 0});
  expect_array(clip(x, array(0.0f), std::nullopt), {6}, {0, 0.5, 3, kNaN, 1, 0});
  expect_array(clip(x, std::nullopt, array(0.75f)), {6}, {-2, 0.5, 0.75, kNaN, 0.75, 0});
  // lo > hi gives hi (numpy)
  expect_array(clip(array({-1.0f, 5.0f}), array(3.0f), array(1.0f)), {2}, {1, 1});
  // array bounds broadcast
  array m = reshape(arange(0.0, 6.0, 1.0, float32), {2, 3});
  expect_array(clip(m, array({1.0f, 4.0f}, {2, 1}), array({2.0f, 10.0f, 4.5f})), {2, 3}, {1, 1, 2, 2, 4, 4.5});
  // transposed input
  expect_array(clip(transpose(m), array(1.0f), array(4.0f)), {3, 2}, {1, 3, 1, 4, 2, 4});
  // dtypes: int array with int bounds stays int; with float bounds it promotes
  array i({-5, 3, 9});
  EXPECT_EQ(clip(i, array(0), array(5)).dtype(), int32);
  EXPECT_EQ(clip(i, array(0), array(5)).to_vector<int>(), (std::vector<int>{0, 3, 5}));
  EXPECT_EQ(clip(i, array(0.5f), std::nullopt).dtype(), float32);
  expect_array(clip(i, array(0.5f), array(8.5f)), {3}, {0.5, 3, 8.5});
  array h({-1.0f, 2.0f}, float16);
  EXPECT_EQ(clip(h, array(0.0f, float16), array(1.0f, float16)).dtype(), float16);
  expect_array(clip(h, array(0.0f, float16), array(1.0f, float16)), {2}, {0, 1});
  EXPECT_EQ(clip(zeros({0}), array(1.0f), array(2.0f)).shape(), (Shape{0}));
  // errors
  EXPECT_THROW_MSG(clip(x, std::nullopt, std::nullopt), std::invalid_argument, "[clip]");
  EXPECT_THROW_MSG(clip(x, zeros({4}), std::nullopt), std::invalid_argument, "[clip]");
  EXPECT_THROW_MSG(clip(x, std::nullopt, zeros({2, 5})), std::invalid_argument, "[clip]");
}

TEST(Binary, PermutedLayoutsAndTemporaries) {
  // A 3-D permutation is contiguous without being row- or column-major: the flat path keeps the layout.
  array x = reshape(arange(0.0, 24.0, 1.0, float32), {2, 3, 4});
  array p = transpose(x, {1, 0, 2});  // (3,2,4): p[j][i][k] = 12 i + 4 j + k
  std::vector<double> pv, twice, e;
  for (int j = 0; j < 3; ++j)
    for (int i = 0; i < 2; ++i)
      for (int k = 0; k < 4; ++k) {
        double v = 12 * i + 4 * j + k;
        pv.push_back(v);
        twice.push_back(2 * v + 1);
        e.push_back(std::sqrt(v));
      }
  expect_array(p + p + 1.0f, {3, 2, 4}, twice);
  expect_array(reshape(sqrt(p), {-1}), {24}, e, 1e-6);  // the result's layout is permuted; reshape copies
  expect_array(multiply(p, transpose(x, {1, 0, 2})), {3, 2, 4}, [&] {
    std::vector<double> sq;
    for (double v : pv) sq.push_back(v * v);
    return sq;
  }());
  // p against a row-major array of the same shape (different strides)
  expect_array(subtract(p, reshape(arange(0.0, 24.0, 1.0, float32), {3, 2, 4})), {3, 2, 4}, [&] {
    std::vector<double> d;
    for (int n = 0; n < 24; ++n) d.push_back(pv[n] - n);
    return d;
  }());
  // Chains of temporaries (inputs only the graph holds may lend their buffers to outputs).
  expect_array(((reshape(arange(0.0, 6.0, 1.0, float32), {2, 3}) + 1.0f) * 2.0f - 3.0f) / 4.0f, {2, 3},
               {-0.25, 0.25, 0.75, 1.25, 1.75, 2.25});
  expect_array(exp(transpose(reshape(arange(0.0, 4.0, 1.0, float64), {2, 2}))), {2, 2},
               {1, 7.38905609893065, 2.718281828459045, 20.085536923187668}, 1e-12);
  array halves = [] {
    array t = arange(0.0, 8.0, 1.0, float32);
    return add(slice(t, {0}, {4}), slice(t, {4}, {8}));
  }();
  expect_array(halves, {4}, {4, 6, 8, 10});
  // one temporary with two consumers, evaluated together
  auto [r1, r2] = [] {
    array t = exp(array({0.0f, 1.0f}));
    return std::make_pair(t + 1.0f, t * 2.0f);
  }();
  eval(r1, r2);
  expect_array(r1, {2}, {2, 3.718281828459045}, 1e-6);
  expect_array(r2, {2}, {2, 5.43656365691809}, 1e-6);
  // an input used twice by one op, and an op on its own output's input later
  array s = array({1.0f, 2.0f, 3.0f});
  array sq = s * s;
  array cube = sq * s;
  expect_array(cube, {3}, {1, 8, 27});
  expect_array(sq, {3}, {1, 4, 9});
  expect_array(s, {3}, {1, 2, 3});
}

TEST(Binary, LogicalOnIntegers) {
  array a({0, 3, -1, 0}), b({0, 0, 7, 2}, uint8);
  array r = logical_and(a, b);
  EXPECT_EQ(r.dtype(), bool_);
  expect_array(r, {4}, {0, 0, 1, 0});
  expect_array(logical_or(a, b), {4}, {0, 1, 1, 1});
  expect_array(logical_or(transpose(reshape(a, {2, 2})), array(false)), {2, 2}, {0, 1, 1, 0});
  expect_array(logical_and(array(std::vector<int64_t>{5, 0}, {2}), array({1.5f, 1.5f}, bfloat16)), {2}, {1, 0});
}

TEST(Binary, FloatFloorDivideAgreesWithRemainderAsNumpyDivmod) {
  // numpy: 1 // 0.1 == 9.0 and 1 % 0.1 == 0.09999999999999995, so q * b + r == a.
  array a({1.0, -1.0, 7.5, -7.5, 0.0, -0.0, 5.0, 3.0});
  array b({0.1, 0.1, 2.0, 2.0, 3.0, 3.0, -2.0, 0.0});
  auto q = floor_divide(a, b).to_vector<double>();
  auto r = remainder(a, b).to_vector<double>();
  std::vector<double> want_q{9, -10, 3, -4, 0, -0.0, -3, INFINITY};
  for (size_t i = 0; i < want_q.size(); ++i) {
    EXPECT_EQ(q[i], want_q[i]) << i;
    if (i < 7) EXPECT_NEAR(q[i] * b.to_vector<double>()[i] + r[i], a.to_vector<double>()[i], 1e-12) << i;
  }
  EXPECT_TRUE(std::signbit(q[5]));
  EXPECT_EQ(floor_divide(array(1.0f), array(0.1f)).item<float>(), 9.0f);
}

TEST(Binary, IntegerScalarsMustFitTheArrayDtype) {
  array u({1, 2}, uint8);
  expect_array(u + 254, {2}, {255, 0});  // in range: the array's dtype, wrapping arithmetic as numpy
  EXPECT_EQ((u + 254).dtype(), uint8);
  EXPECT_THROW_MSG(u + 300, std::invalid_argument, "the scalar 300 is out of range for uint8 [0, 255]");
  EXPECT_THROW_MSG(u * -1, std::invalid_argument, "out of range for uint8");
  EXPECT_THROW_MSG(array({1, 2}) + 3000000000LL, std::invalid_argument, "out of range for int32");
  expect_array(array({1, 2}, int64) + 3000000000LL, {2}, {3000000001.0, 3000000002.0});
  expect_array(u + 0.5f, {2}, {1.5, 2.5});  // a float scalar promotes to float32 instead
}

// The vectorized loops (long arrays; a broadcast scalar; an input's buffer reused in place) give
// what the scalar rule gives: NaN from either side, and where picks by its mask.
TEST(Binary, MaximumMinimumWhereOnLongArraysFollowTheElementRule) {
  const int n = 1003;  // not a multiple of any vector width
  std::vector<float> a(n), b(n);
  std::vector<uint8_t> m(n);
  for (int i = 0; i < n; ++i) {
    a[i] = float((i * 37) % 101) - 50.0f;
    b[i] = float((i * 53) % 97) - 48.0f;
    if (i % 17 == 3) a[i] = std::nanf("");
    if (i % 19 == 5) b[i] = std::nanf("");
    m[i] = ((i * 7919) >> 3) & 1;
  }
  auto rule = [](float x, float y, bool mx) {
    if (std::isnan(x) || std::isnan(y)) return std::nanf("");
    return mx ? std::max(x, y) : std::min(x, y);
  };
  auto expect_rule = [&](array got, const std::vector<float>& x, const std::vector<float>& y, bool mx) {
    std::vector<float> g = got.to_vector<float>();
    ASSERT_EQ(g.size(), size_t(n));
    for (int i = 0; i < n; ++i) {
      const float want = rule(x[i], y[i], mx);
      if (std::isnan(want)) {
        EXPECT_TRUE(std::isnan(g[i])) << i;
      } else {
        EXPECT_EQ(g[i], want) << i;
      }
    }
  };
  array A(a, {n}), B(b, {n});
  expect_rule(maximum(A, B), a, b, true);
  expect_rule(minimum(A, B), a, b, false);
  expect_rule(maximum(A * 1.0f, array(0.0f)), a, std::vector<float>(n, 0.0f), true);  // in place, broadcast scalar
  expect_rule(minimum(array(2.0f), B), std::vector<float>(n, 2.0f), b, false);
  expect_rule(maximum(A, array(std::nanf(""))), a, std::vector<float>(n, std::nanf("")), true);
  array M = array(std::vector<int>(m.begin(), m.end()), {n}) > 0;
  for (Dtype d : {float32, float64, int32, float16}) {
    std::vector<double> w = astype(where(M, astype(A, d), astype(B, d)), float64).to_vector<double>();
    for (int i = 0; i < n; ++i) {
      const float want = m[i] ? a[i] : b[i];
      if (std::isnan(want)) {
        if (d == float32 || d == float64 || d == float16) EXPECT_TRUE(std::isnan(w[i])) << d << " " << i;
      } else {
        EXPECT_EQ(w[i], double(want)) << d << " " << i;
      }
    }
  }
}

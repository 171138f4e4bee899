// Unary elementwise ops: hand-computed values in every float dtype and every memory layout
// (contiguous, transposed, strided, reversed, broadcast, 0-d, empty), integer and bool behaviour,
// and dtype rules.
#include <cmath>
#include <functional>
#include <limits>

#include "../test_utils.h"

using namespace loom;
using loom::testing::kInf;
using loom::testing::kNaN;
using loom::testing::kPi;
using loom::testing::expect_array;

namespace {

constexpr double kE = 2.718281828459045;

using UnaryFn = std::function<array(const array&)>;

struct UnaryCase {
  const char* name;
  UnaryFn fn;
  std::vector<double> in;        // exactly 6 values
  std::vector<double> expected;  // f(in), hand-computed
};

double unary_tol_for(Dtype d) {
  if (d == float16) return 4e-3;
  if (d == bfloat16) return 2e-2;
  if (d == float32) return 2e-6;
  return 1e-12;
}

// Runs `c` on inputs of dtype `d` laid out in every way a kernel can see them.
void check_unary_layouts(const UnaryCase& c, Dtype d) {
  SCOPED_TRACE(std::string(c.name) + " " + to_string(d));
  ASSERT_EQ(c.in.size(), 6u);
  const double tol = unary_tol_for(d);
  const auto& v = c.in;
  const auto& e = c.expected;
  const Dtype out_dtype = is_floating_point(d) ? d : float32;

  // contiguous 1-D and 2-D
  {
    array r = c.fn(array(v, {6}, d));
    EXPECT_EQ(r.dtype(), out_dtype);
    expect_array(r, {6}, e, tol);
    expect_array(c.fn(array(v, {2, 3}, d)), {2, 3}, e, tol);
  }
  // transposed view: logical (2,3) stored column-major
  {
    std::vector<double> t{v[0], v[3], v[1], v[4], v[2], v[5]};
    array x = transpose(array(t, {3, 2}, d));
    expect_array(c.fn(x), {2, 3}, e, tol);
  }
  // every other element of a buffer (stride 2), junk in between
  {
    std::vector<double> buf;
    for (double x : v) {
      buf.push_back(x);
      buf.push_back(12345.0);
    }
    array x = slice(array(buf, {12}, d), {0}, {12}, {2});
    expect_array(c.fn(x), {6}, e, tol);
  }
  // negative stride
  {
    std::vector<double> rev(v.rbegin(), v.rend());
    array x = slice(array(rev, {6}, d), {-1}, {-7}, {-1});
    expect_array(c.fn(x), {6}, e, tol);
  }
  // 2-D slice with steps in both axes, one negative: rows 2,0 of a (3,6) buffer, columns 0,2,4
  {
    std::vector<double> buf(18, 777.0);
    for (int j = 0; j < 3; ++j) {
      buf[2 * 6 + 2 * j] = v[j];      // row 2 -> output row 0
      buf[0 * 6 + 2 * j] = v[3 + j];  // row 0 -> output row 1
    }
    array x = slice(array(buf, {3, 6}, d), {2, 0}, {-4, 6}, {-2, 2});
    ASSERT_EQ(x.shape(), (Shape{2, 3}));
    expect_array(c.fn(x), {2, 3}, e, tol);
  }
  // broadcast row (stride 0 on the first axis)
  {
    array x = broadcast_to(array(std::vector<double>(v.begin(), v.begin() + 3), {1, 3}, d), {2, 3});
    expect_array(c.fn(x), {2, 3}, {e[0], e[1], e[2], e[0], e[1], e[2]}, tol);
  }
  // broadcast scalar
  {
    array x = broadcast_to(array(std::vector<double>{v[4]}, {}, d), {2, 2});
    expect_array(c.fn(x), {2, 2}, {e[4], e[4], e[4], e[4]}, tol);
  }
  // 0-d
  {
    array r = c.fn(array(std::vector<double>{v[1]}, {}, d));
    EXPECT_EQ(r.dtype(), out_dtype);
    expect_array(r, {}, {e[1]}, tol);
  }
  // empty
  {
    array r = c.fn(zeros({0}, d));
    EXPECT_EQ(r.dtype(), out_dtype);
    expect_array(r, {0}, {}, tol);
    expect_array(c.fn(zeros({2, 0, 3}, d)), {2, 0, 3}, {}, tol);
  }
}

std::vector<UnaryCase> unary_float_cases() {
  return {
      {"negative", [](const array& x) { return negative(x); }, {1.5, -2, 0, 3, -0.25, 7}, {-1.5, 2, 0, -3, 0.25, -7}},
      {"operator-", [](const array& x) { return -x; }, {1.5, -2, 0, 3, -0.25, 7}, {-1.5, 2, 0, -3, 0.25, -7}},
      {"abs", [](const array& x) { return abs(x); }, {-1.5, 2, -0.0, -3, 0.25, -kInf}, {1.5, 2, 0, 3, 0.25, kInf}},
      {"sign", [](const array& x) { return sign(x); }, {-2, 0, 3.5, -0.125, kInf, kNaN}, {-1, 0, 1, -1, 1, kNaN}},
      {"square", [](const array& x) { return square(x); }, {1.5, -2, 0, 3, -0.5, 10}, {2.25, 4, 0, 9, 0.25, 100}},
      {"sqrt", [](const array& x) { return sqrt(x); }, {0, 1, 4, 2, 0.25, -1}, {0, 1, 2, 1.4142135623730951, 0.5, kNaN}},
      {"rsqrt", [](const array& x) { return rsqrt(x); }, {1, 4, 0.25, 2, 100, 0}, {1, 0.5, 2, 0.7071067811865476, 0.1, kInf}},
      {"reciprocal", [](const array& x) { return reciprocal(x); }, {1, 2, -4, 0.5, 8, 0}, {1, 0.5, -0.25, 2, 0.125, kInf}},
      {"exp", [](const array& x) { return exp(x); }, {0, 1, -1, 2, 0.6931471805599453, -kInf},
       {1, kE, 0.36787944117144233, 7.38905609893065, 2, 0}},
      {"expm1", [](const array& x) { return expm1(x); }, {0, 1e-10, 1, -1, 0.5, -kInf},
       {0, 1.00000000005e-10, 1.718281828459045, -0.6321205588285577, 0.6487212707001282, -1}},
      {"log", [](const array& x) { return log(x); }, {1, kE, 0.5, 10, 0, -1},
       {0, 1, -0.6931471805599453, 2.302585092994046, -kInf, kNaN}},
      {"log1p", [](const array& x) { return log1p(x); }, {0, 1e-10, 1, -0.5, -1, kE - 1},
       {0, 9.9999999995e-11, 0.6931471805599453, -0.6931471805599453, -kInf, 1}},
      {"log2", [](const array& x) { return log2(x); }, {1, 2, 8, 0.5, 1024, 3}, {0, 1, 3, -1, 10, 1.584962500721156}},
      {"log10", [](const array& x) { return log10(x); }, {1, 10, 1000, 0.1, 2, 1e-5}, {0, 1, 3, -1, 0.3010299956639812, -5}},
      {"sin", [](const array& x) { return sin(x); }, {0, kPi / 2, kPi / 6, -kPi / 2, 1, -kPi / 6},
       {0, 1, 0.5, -1, 0.8414709848078965, -0.5}},
      {"cos", [](const array& x) { return cos(x); }, {0, kPi / 3, kPi, -kPi / 3, 1, -kPi},
       {1, 0.5, -1, 0.5, 0.5403023058681398, -1}},
      {"tan", [](const array& x) { return tan(x); }, {0, kPi / 4, -kPi / 4, 1, 0.5, kPi / 3},
       {0, 1, -1, 1.5574077246549023, 0.5463024898437905, 1.7320508075688767}},
      {"tanh", [](const array& x) { return tanh(x); }, {0, 1, -1, 20, -20, 0.5},
       {0, 0.7615941559557649, -0.7615941559557649, 1, -1, 0.46211715726000974}},
      // inverse trigonometric and hyperbolic (numpy's values); NaN outside the domain
      {"arcsin", [](const array& x) { return arcsin(x); }, {0, 0.5, -0.5, 1, -1, 2},
       {0, 0.5235987755982989, -0.5235987755982989, 1.5707963267948966, -1.5707963267948966, kNaN}},
      {"arccos", [](const array& x) { return arccos(x); }, {1, 0.5, -0.5, 0, -1, 2},
       {0, 1.0471975511965979, 2.0943951023931957, 1.5707963267948966, 3.141592653589793, kNaN}},
      {"arctan", [](const array& x) { return arctan(x); }, {0, 1, -1, 100, -kInf, 0.5},
       {0, 0.7853981633974483, -0.7853981633974483, 1.5607966601082315, -1.5707963267948966, 0.4636476090008061}},
      {"sinh", [](const array& x) { return sinh(x); }, {0, 1, -1, 0.5, 800, -2},
       {0, 1.1752011936438014, -1.1752011936438014, 0.5210953054937474, kInf, -3.626860407847019}},
      {"cosh", [](const array& x) { return cosh(x); }, {0, 1, -1, 0.5, -800, 2},
       {1, 1.5430806348152437, 1.5430806348152437, 1.1276259652063807, kInf, 3.7621956910836314}},
      {"arcsinh", [](const array& x) { return arcsinh(x); }, {0, 1, -1, 0.5, 100, -kInf},
       {0, 0.881373587019543, -0.881373587019543, 0.48121182505960347, 5.298342365610589, -kInf}},
      {"arccosh", [](const array& x) { return arccosh(x); }, {1, 2, 10, 1.5, 0.5, kInf},
       {0, 1.3169578969248166, 2.993222846126381, 0.9624236501192069, kNaN, kInf}},
      {"arctanh", [](const array& x) { return arctanh(x); }, {0, 0.5, -0.5, 1, -1, 2},
       {0, 0.5493061443340548, -0.5493061443340548, kInf, -kInf, kNaN}},
      // large |x| must not overflow into NaN
      {"sigmoid", [](const array& x) { return sigmoid(x); }, {0, 1, -1, 800, -800, 2},
       {0.5, 0.7310585786300049, 0.2689414213699951, 1, 0, 0.8807970779778823}},
      {"erf", [](const array& x) { return erf(x); }, {0, 0.5, -0.5, 1, 3, -kInf},
       {0, 0.5204998778130465, -0.5204998778130465, 0.8427007929497149, 0.9999779095030014, -1}},
      {"erfinv", [](const array& x) { return erfinv(x); }, {0, 0.5204998778130465, -0.8427007929497149, 1, -1, 2},
       {0, 0.5, -1, kInf, -kInf, kNaN}},
      {"floor", [](const array& x) { return floor(x); }, {1.5, -1.5, 2, 0.25, 2.75, -kInf}, {1, -2, 2, 0, 2, -kInf}},
      {"ceil", [](const array& x) { return ceil(x); }, {1.5, -1.5, 2, 0.25, 2.75, -2.75}, {2, -1, 2, 1, 3, -2}},
      // half to even
      {"round", [](const array& x) { return round(x); }, {2.5, -0.5, 0.5, 1.5, -2.5, 2.75}, {2, -0.0, 0, 2, -2, 3}},
  };
}

std::vector<UnaryCase> predicate_cases() {
  return {
      {"logical_not", [](const array& x) { return logical_not(x); }, {0, 1, -2, 0.5, kNaN, -0.0}, {1, 0, 0, 0, 0, 1}},
      {"operator!", [](const array& x) { return !x; }, {0, 1, -2, 0.5, kNaN, -0.0}, {1, 0, 0, 0, 0, 1}},
      {"isnan", [](const array& x) { return isnan(x); }, {0, kNaN, kInf, -kInf, 1, -kNaN}, {0, 1, 0, 0, 0, 1}},
      {"isinf", [](const array& x) { return isinf(x); }, {0, kNaN, kInf, -kInf, 1, -kNaN}, {0, 0, 1, 1, 0, 0}},
      {"isfinite", [](const array& x) { return isfinite(x); }, {0, kNaN, kInf, -kInf, 1, -kNaN}, {1, 0, 0, 0, 1, 0}},
  };
}

}  // namespace

TEST(Unary, FloatOpsEveryDtypeAndLayout) {
  for (const auto& c : unary_float_cases()) {
    for (Dtype d : {float32, float64, float16, bfloat16}) check_unary_layouts(c, d);
  }
}

TEST(Unary, PredicatesEveryDtypeAndLayout) {
  for (const auto& c : predicate_cases()) {
    for (Dtype d : {float32, float64, float16, bfloat16}) {
      SCOPED_TRACE(std::string(c.name) + " " + to_string(d));
      array x(c.in, {2, 3}, d);
      array r = c.fn(x);
      EXPECT_EQ(r.dtype(), bool_);
      expect_array(r, {2, 3}, c.expected);
      std::vector<double> t{c.in[0], c.in[3], c.in[1], c.in[4], c.in[2], c.in[5]};
      expect_array(c.fn(transpose(array(t, {3, 2}, d))), {2, 3}, c.expected);
      std::vector<double> rev(c.in.rbegin(), c.in.rend());
      expect_array(c.fn(slice(array(rev, {6}, d), {5}, {-7}, {-1})), {6}, c.expected);
      expect_array(c.fn(broadcast_to(array(std::vector<double>{c.in[1]}, {}, d), {3})), {3},
                   {c.expected[1], c.expected[1], c.expected[1]});
      expect_array(c.fn(array(std::vector<double>{c.in[2]}, {}, d)), {}, {c.expected[2]});
      EXPECT_EQ(c.fn(zeros({0, 2}, d)).shape(), (Shape{0, 2}));
    }
  }
}

TEST(Unary, RoundHalfToEvenKeepsNegativeZero) {
  for (Dtype d : {float32, float64, float16, bfloat16}) {
    SCOPED_TRACE(to_string(d));
    auto r = round(array({-0.5, 0.5, -2.5, 3.5, -3.5, 1e6 + 0.5}, d)).to_vector<double>();
    EXPECT_EQ(r[0], 0.0);
    EXPECT_TRUE(std::signbit(r[0]));
    EXPECT_EQ(r[1], 0.0);
    EXPECT_FALSE(std::signbit(r[1]));
    EXPECT_EQ(r[2], -2.0);
    EXPECT_EQ(r[3], 4.0);
    EXPECT_EQ(r[4], -4.0);
  }
  // 1e6 + 0.5 is exact in float64 and float32 (not in the half types)
  EXPECT_EQ(round(array(1000000.5)).item<double>(), 1000000.0);
  EXPECT_EQ(round(array(1000001.5f)).item<float>(), 1000002.0f);
}

TEST(Unary, ErfinvInvertsErf) {
  std::vector<double> xs;
  for (int i = -30; i <= 30; ++i) xs.push_back(i * 0.1);  // |x| <= 3
  array x64(xs, {61}, float64);
  expect_array(erfinv(erf(x64)), {61}, xs, 1e-9);
  array x32(xs, {61}, float32);
  // erf(3) is 1 - 2.2e-5 in float32 (resolution 6e-8), so invert only where erf is well conditioned
  array small = slice(x32, {10}, {51});  // |x| <= 2
  std::vector<double> xs_small(xs.begin() + 10, xs.begin() + 51);
  expect_array(erfinv(erf(small)), {41}, xs_small, 2e-5);
  // and erf(erfinv(y)) = y across (-1, 1)
  std::vector<double> ys;
  for (int i = -99; i <= 99; i += 3) ys.push_back(i / 100.0);
  array y64(ys, {static_cast<int>(ys.size())}, float64);
  expect_array(erf(erfinv(y64)), {static_cast<int>(ys.size())}, ys, 1e-12);
}

TEST(Unary, SigmoidAndExpExtremes) {
  expect_array(sigmoid(array({-1000.0, 1000.0, -40.0})), {3}, {0, 1, 4.248354255291589e-18}, 1e-12);
  expect_array(exp(array({1000.0f, -1000.0f, 88.0f})), {3}, {kInf, 0, 1.6516362549940018e+38}, 1e-6);
  expect_array(tanh(array({kInf, -kInf, kNaN}, float32)), {3}, {1, -1, kNaN});
  expect_array(log(array({kInf, 0.0}, float16)), {2}, {kInf, -kInf});
}

TEST(Unary, IntegerInputs) {
  // numeric ops keep integer dtypes
  array i32({1, -2, 0, 2147483647});
  array n = negative(i32);
  EXPECT_EQ(n.dtype(), int32);
  expect_array(n, {4}, {-1, 2, 0, -2147483647});
  array u8({3, 0, 255}, uint8);
  EXPECT_EQ(negative(u8).dtype(), uint8);
  EXPECT_EQ(negative(u8).to_vector<int>(), (std::vector<int>{253, 0, 1}));  // modular, as numpy
  array i64(std::vector<int64_t>{-(int64_t(1) << 40), 5, 0}, {3});
  EXPECT_EQ(negative(i64).to_vector<int64_t>(), (std::vector<int64_t>{int64_t(1) << 40, -5, 0}));
  EXPECT_EQ(abs(array({-3, 4, 0})).to_vector<int>(), (std::vector<int>{3, 4, 0}));
  EXPECT_EQ(abs(i64).to_vector<int64_t>(), (std::vector<int64_t>{int64_t(1) << 40, 5, 0}));
  EXPECT_EQ(abs(u8).to_vector<int>(), (std::vector<int>{3, 0, 255}));
  EXPECT_EQ(sign(array({-5, 0, 7})).to_vector<int>(), (std::vector<int>{-1, 0, 1}));
  EXPECT_EQ(sign(array({0, 5}, uint8)).to_vector<int>(), (std::vector<int>{0, 1}));
  EXPECT_EQ(sign(i64).to_vector<int64_t>(), (std::vector<int64_t>{-1, 1, 0}));
  EXPECT_EQ(square(array({-3, 4, 46340})).to_vector<int>(), (std::vector<int>{9, 16, 2147395600}));
  EXPECT_EQ(square(array({16, 3}, uint8)).to_vector<int>(), (std::vector<int>{0, 9}));  // 256 wraps to 0
  for (auto fn : {+[](const array& x) { return floor(x); }, +[](const array& x) { return ceil(x); },
                  +[](const array& x) { return round(x); }}) {
    array r = fn(array({-3, 4, 7}));
    EXPECT_EQ(r.dtype(), int32);
    EXPECT_EQ(r.to_vector<int>(), (std::vector<int>{-3, 4, 7}));
    EXPECT_EQ(fn(i64).dtype(), int64);
    EXPECT_EQ(fn(u8).dtype(), uint8);
  }
  // floating ops compute integer and bool inputs in float32
  array s = sqrt(array({4, 9, 2}));
  EXPECT_EQ(s.dtype(), float32);
  expect_array(s, {3}, {2, 3, 1.4142135623730951});
  array e = exp(array({true, false}));
  EXPECT_EQ(e.dtype(), float32);
  expect_array(e, {2}, {kE, 1});
  EXPECT_EQ(log(array({1, 100}, uint8)).dtype(), float32);
  expect_array(log10(i64), {3}, {kNaN, 0.69897000433601886, -kInf});
  EXPECT_EQ(sigmoid(array(0)).dtype(), float32);
  // predicates on integers
  expect_array(isnan(array({0, 1})), {2}, {0, 0});
  expect_array(isinf(i64), {3}, {0, 0, 0});
  expect_array(isfinite(u8), {3}, {1, 1, 1});
  expect_array(logical_not(array({0, 3, -1})), {3}, {1, 0, 0});
  EXPECT_EQ(logical_not(u8).dtype(), bool_);
  // integer ops on a transposed int view
  array t = transpose(array({1, -2, 3, -4, 5, -6}, {2, 3}));
  EXPECT_EQ(abs(t).to_vector<int>(), (std::vector<int>{1, 4, 2, 5, 3, 6}));
  EXPECT_EQ(negative(slice(i32, {3}, {-5}, {-2})).to_vector<int>(), (std::vector<int>{-2147483647, 2}));
}

TEST(Unary, BoolInputs) {
  array b({true, false, true});
  EXPECT_EQ(abs(b).dtype(), bool_);
  EXPECT_EQ(abs(b).to_vector<int>(), (std::vector<int>{1, 0, 1}));
  EXPECT_EQ(sign(b).dtype(), bool_);
  EXPECT_EQ(sign(b).to_vector<int>(), (std::vector<int>{1, 0, 1}));
  EXPECT_EQ(logical_not(b).to_vector<int>(), (std::vector<int>{0, 1, 0}));
  EXPECT_EQ(isnan(b).to_vector<int>(), (std::vector<int>{0, 0, 0}));
}

TEST(Unary, BoolRejectedByNumericOps) {
  array b({true, false});
  EXPECT_THROW_MSG(negative(b), std::invalid_argument, "[negative]");
  EXPECT_THROW_MSG(-b, std::invalid_argument, "bool");
  EXPECT_THROW_MSG(square(b), std::invalid_argument, "[square]");
  EXPECT_THROW_MSG(floor(b), std::invalid_argument, "[floor]");
  EXPECT_THROW_MSG(ceil(b), std::invalid_argument, "[ceil]");
  EXPECT_THROW_MSG(round(b), std::invalid_argument, "[round]");
}

TEST(Unary, HalfResultsAreRoundedToTheirType) {
  // exp(1) in float16 is 2.71875 (the nearest half), in bfloat16 2.71875 as well
  EXPECT_EQ(exp(array(1.0, float16)).item<float>(), 2.71875f);
  EXPECT_EQ(exp(array(1.0, bfloat16)).item<float>(), 2.71875f);
  // sqrt(2): 1.4140625 (float16), 1.4140625 (bfloat16)
  EXPECT_EQ(sqrt(array(2.0, float16)).item<float>(), 1.4140625f);
  EXPECT_EQ(sqrt(array(2.0, bfloat16)).item<float>(), 1.4140625f);
  EXPECT_EQ(exp(array(12.0, float16)).item<float>(), std::numeric_limits<float>::infinity());  // > 65504
}

TEST(Unary, LazyChainsOnViews) {
  // An elementwise chain over a transposed, sliced input; intermediates may donate buffers.
  array base = reshape(arange(0.0, 24.0, 1.0, float32), {4, 6});
  array v = slice(transpose(base), {1, 0}, {6, 4}, {2, 2});  // rows 1,3,5 of the transpose, cols 0,2
  ASSERT_EQ(v.shape(), (Shape{3, 2}));
  // v = [[1,13],[3,15],[5,17]]
  array r = sqrt(square(negative(v)) + 0.0f);
  expect_array(r, {3, 2}, {1, 13, 3, 15, 5, 17});
  expect_array(base, {4, 6}, {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23});
}

// Ops MLX's ops.h has and Loom gained for parity: logaddexp, trunc, degrees / radians, isposinf /
// isneginf, nan_to_num, isclose / allclose / array_equal. Expected values are numpy's.
#include <cmath>
#include <limits>

#include "../test_utils.h"

using namespace loom;
using loom::testing::kInf;
using loom::testing::kNaN;
using loom::testing::expect_array;

namespace {

std::vector<int> bools(array a) {
  EXPECT_EQ(a.dtype(), bool_);
  std::vector<int> out;
  for (bool b : a.to_vector<bool>()) out.push_back(b);
  return out;
}
}  // namespace

TEST(MlxParity, LogAddExpIsStableAtTheExtremes) {
  const std::vector<double> a{0, 1, -kInf, kInf, kInf, -kInf, kNaN, 800, -800, 1000};
  const std::vector<double> b{0, 2, -kInf, kInf, -kInf, 5, 1, 800, -799, -1000};
  const std::vector<double> want{0.6931471805599453, 2.313261687518223, -kInf, kInf, kInf, 5.0, kNaN,
                                 800.6931471805599, -798.6867383124818, 1000.0};
  expect_array(logaddexp(array(a, {10}, float64), array(b, {10}, float64)), {10}, want, 1e-12);
  expect_array(logaddexp(array(a, {10}, float32), array(b, {10}, float32)), {10}, want, 1e-6);
  // Broadcasting, integer promotion (to float32, as every floating op), and the gradient's split:
  // d/da = exp(a - y), the share of exp(a) in the sum.
  array r = logaddexp(array({0, 1}, {2, 1}, int32), array({0.0f, 1.0f, 2.0f}, {3}));
  EXPECT_EQ(r.dtype(), float32);
  expect_array(r, {2, 3},
               {0.6931471805599453, 1.3132616875182228, 2.1269280110429727, 1.3132616875182228, 1.6931471805599454,
                2.3132616875182228},
               1e-6);
  auto g = grad([](const std::vector<array>& p) { return sum(logaddexp(p[0], p[1])); }, std::vector<int>{0, 1})(
      {array(std::vector<double>{0.0, 3.0}, {2}, float64), array(std::vector<double>{0.0, 1.0}, {2}, float64)});
  expect_array(g[0], {2}, {0.5, 0.8807970779778823}, 1e-12);
  expect_array(g[1], {2}, {0.5, 0.11920292202211755}, 1e-12);
  // At an infinite input the share is 1 (torch.logaddexp's backward and MLX's test); -inf gets 0.
  auto gi = grad([](const std::vector<array>& p) { return sum(logaddexp(p[0], p[1])); }, std::vector<int>{0, 1})(
      {array(std::vector<double>{kInf, -kInf, 2.0}, {3}, float32), array(std::vector<double>{2.0, 1.0, -kInf}, {3}, float32)});
  expect_array(gi[0], {3}, {1, 0, 1});
  expect_array(gi[1], {3}, {0, 1, 0});
  EXPECT_THROW_MSG(logaddexp(ones({2, 3}), ones({4})), std::invalid_argument, "[logaddexp] shapes (2,3) and (4)");
}

TEST(MlxParity, TruncDegreesRadians) {
  for (Dtype d : {float32, float64, float16, bfloat16}) {
    SCOPED_TRACE(to_string(d));
    array t = trunc(array(std::vector<double>{-2.75, -0.5, 0.5, 2.75, -0.0, kInf}, {6}, d));
    EXPECT_EQ(t.dtype(), d);
    expect_array(t, {6}, {-2, -0.0, 0, 2, -0.0, kInf});
    EXPECT_TRUE(std::signbit(t.to_vector<double>()[1]));  // -0.5 truncates to -0.0, as numpy
  }
  array ti = trunc(array({-3, 4}, {2}, int32));
  EXPECT_EQ(ti.dtype(), int32);
  expect_array(ti, {2}, {-3, 4});
  expect_array(degrees(array(std::vector<double>{0, M_PI, -M_PI / 2, 1}, {4}, float64)), {4},
               {0, 180, -90, 57.29577951308232}, 1e-12);
  expect_array(radians(array(std::vector<double>{0, 180, -90, 1}, {4}, float64)), {4},
               {0, 3.141592653589793, -1.5707963267948966, 0.017453292519943295}, 1e-12);
  array di = degrees(array({1, 2}, {2}, int32));  // integers become float32
  EXPECT_EQ(di.dtype(), float32);
  expect_array(di, {2}, {57.29577951308232, 114.59155902616465}, 1e-6);
  // Gradients through the compositions: d trunc = 0, d degrees = 180 / pi.
  auto g = grad([](const std::vector<array>& p) { return sum(degrees(p[0]) + trunc(p[0])); }, std::vector<int>{0})(
      {array(std::vector<double>{0.3, -1.7}, {2}, float64)});
  expect_array(g[0], {2}, {57.29577951308232, 57.29577951308232}, 1e-12);
}

TEST(MlxParity, InfinityPredicatesAndNanToNum) {
  const std::vector<double> v{kNaN, kInf, -kInf, 1.5, -0.0, -3};
  for (Dtype d : {float32, float64, float16, bfloat16}) {
    SCOPED_TRACE(to_string(d));
    array x(v, {6}, d);
    EXPECT_EQ(bools(isposinf(x)), (std::vector<int>{0, 1, 0, 0, 0, 0}));
    EXPECT_EQ(bools(isneginf(x)), (std::vector<int>{0, 0, 1, 0, 0, 0}));
  }
  EXPECT_EQ(bools(isposinf(array({1, 2}, {2}, int32))), (std::vector<int>{0, 0}));
  EXPECT_EQ(bools(isneginf(array({true}, {1}))), (std::vector<int>{0}));
  // The dtype's largest finite value by default (numpy's; MLX raises for float64, Loom does not).
  expect_array(nan_to_num(array(v, {6}, float32)), {6}, {0, 3.4028234663852886e+38, -3.4028234663852886e+38, 1.5, 0, -3});
  expect_array(nan_to_num(array(v, {6}, float16)), {6}, {0, 65504, -65504, 1.5, 0, -3});
  expect_array(nan_to_num(array(v, {6}, bfloat16)), {6}, {0, 3.3895313892515355e38, -3.3895313892515355e38, 1.5, 0, -3});
  expect_array(nan_to_num(array(v, {6}, float64)), {6},
               {0, 1.7976931348623157e+308, -1.7976931348623157e+308, 1.5, 0, -3});
  expect_array(nan_to_num(array(v, {6}, float32), -1.0f, 9.0f, -9.0f), {6}, {-1, 9, -9, 1.5, 0, -3});
  array ints = array({1, -2}, {2}, int32);
  expect_array(nan_to_num(ints), {2}, {1, -2});
  EXPECT_EQ(nan_to_num(ints).dtype(), int32);
}

TEST(MlxParity, IscloseAllcloseArrayEqual) {
  const std::vector<double> a{1.0, 1.0, kInf, kInf, -kInf, kNaN, 0.0, 1e-9, 100.0};
  const std::vector<double> b{1.0 + 1e-6, 1.1, kInf, -kInf, -kInf, kNaN, 1e-9, 0.0, 100.001};
  array x(a, {9}, float64), y(b, {9}, float64);
  EXPECT_EQ(bools(isclose(x, y)), (std::vector<int>{1, 0, 1, 0, 1, 0, 1, 1, 1}));
  EXPECT_EQ(bools(isclose(x, y, 1e-5, 1e-8, true)), (std::vector<int>{1, 0, 1, 0, 1, 1, 1, 1, 1}));
  // An infinity is not close to a finite value however loose the tolerance.
  EXPECT_EQ(bools(isclose(array({kInf}, {1}), array({1.0}, {1}), 1e30, 1e30)), (std::vector<int>{0}));
  EXPECT_TRUE(isclose(array(1.0f), array(1.1f), 0.1, 0.0).item<bool>());
  EXPECT_FALSE(isclose(array(1.0f), array(1.1f), 0.05, 0.0).item<bool>());
  // Broadcasting, and allclose is their all().
  EXPECT_EQ(isclose(ones({2, 1}), ones({3})).shape(), (Shape{2, 3}));
  EXPECT_TRUE(allclose(ones({2, 3}), ones({3}) + 1e-7f).item<bool>());
  EXPECT_FALSE(allclose(x, y).item<bool>());
  EXPECT_TRUE(allclose(slice(x, {2}, {3}), slice(y, {2}, {3})).item<bool>());
  EXPECT_EQ(allclose(x, y).shape(), Shape{});
  EXPECT_THROW_MSG(isclose(ones({2}), ones({3})), std::invalid_argument, "[isclose] shapes (2) and (3)");

  // array_equal: shapes must match (no broadcasting: false, not an error); dtypes are promoted.
  EXPECT_TRUE(array_equal(array({1, 2, 3}, {3}, int32), array({1.0f, 2.0f, 3.0f}, {3})).item<bool>());
  EXPECT_FALSE(array_equal(array({1, 2, 3}, {3}, int32), array({1.0f, 2.0f, 3.5f}, {3})).item<bool>());
  EXPECT_FALSE(array_equal(ones({3}), ones({1, 3})).item<bool>());
  EXPECT_FALSE(array_equal(ones({3}), ones({1})).item<bool>());
  EXPECT_TRUE(array_equal(zeros({0, 2}), zeros({0, 2}, int32)).item<bool>());
  array n(std::vector<double>{1, kNaN}, {2}, float32);
  EXPECT_FALSE(array_equal(n, n).item<bool>());
  EXPECT_TRUE(array_equal(n, n, true).item<bool>());
  EXPECT_TRUE(array_equal(transpose(reshape(arange(0, 6), {2, 3})), reshape(array({0, 3, 1, 4, 2, 5}, {6}), {3, 2}))
                  .item<bool>());
}

// MLX's semantics at the edges that MLX's own tests pin down (scripts/mlx_compat.py).
TEST(MlxParity, MaximumAndMinimumSendATieToTheSecondInput) {
  auto vjp2 = [](array (*f)(const array&, const array&, StreamOrDevice), float a, float b) {
    auto fun = [f](const std::vector<array>& x) { return std::vector<array>{f(x[0], x[1], {})}; };
    auto g = vjp(fun, {array(a), array(b)}, {array(1.0f)}).second;
    return std::make_pair(g[0].item<float>(), g[1].item<float>());
  };
  EXPECT_EQ(vjp2(maximum, 5, 2), std::make_pair(1.0f, 0.0f));
  EXPECT_EQ(vjp2(maximum, 2, 2), std::make_pair(0.0f, 1.0f));
  EXPECT_EQ(vjp2(minimum, 4, 2), std::make_pair(0.0f, 1.0f));
  EXPECT_EQ(vjp2(minimum, 2, 2), std::make_pair(0.0f, 1.0f));
  // A NaN operand gets the gradient (the output is its NaN), whichever side it is on.
  EXPECT_EQ(vjp2(maximum, NAN, 2), std::make_pair(1.0f, 0.0f));
  EXPECT_EQ(vjp2(maximum, 2, NAN), std::make_pair(0.0f, 1.0f));
  EXPECT_EQ(vjp2(minimum, NAN, 2), std::make_pair(1.0f, 0.0f));
  // relu written as maximum(x, 0) has derivative 0 at 0, as PyTorch's relu.
  EXPECT_EQ(grad([](const array& x) { return sum(maximum(x, array(0.0f))); })(array(0.0f)).item<float>(), 0.0f);
}

TEST(MlxParity, BoolPowerAndIntegerArange) {
  // a^b of bools: x^0 = 1, 0^1 = 0, 1^1 = 1.
  EXPECT_EQ(bools(power(array({true, false, true, false}), array({false, false, true, true}))),
            (std::vector<int>{1, 1, 1, 0}));
  // numpy and MLX: the step of an integer arange is the difference of its first two values in the
  // dtype (numpy.arange(0, 5, 0.5, dtype=np.int32) is ten zeros; with 1.5, 0 1 2 3).
  expect_array(arange(0.0, 5.0, 0.5, int32), {10}, std::vector<double>(10, 0.0));
  expect_array(arange(0.0, 5.0, 1.5, int32), {4}, {0, 1, 2, 3});
  expect_array(arange(-1.5, 4.0, 2.0, int64), {3}, {-1, 0, 1});  // int(-1.5) = -1, int(0.5) = 0
  expect_array(arange(0.0, 5.0, 1.5, float32), {4}, {0, 1.5, 3, 4.5});
}

TEST(MlxParity, BroadcastGivesEverySizeOneAxisStrideZero) {
  array x = broadcast_to(full({1, 1}, 2.3f), {5, 1});
  eval(x);
  EXPECT_EQ(x.strides(), (Strides{0, 0}));
  array y = broadcast_to(zeros({2, 1, 2}), {4, 2, 1, 2});
  eval(y);
  EXPECT_EQ(y.strides(), (Strides{0, 2, 0, 1}));
  EXPECT_FALSE(y.flags().row_contiguous);
  array z = broadcast_to(arange(3.0f), {1, 3});
  eval(z);
  EXPECT_TRUE(z.flags().row_contiguous);
  expect_array(z + 1.0f, {1, 3}, {1, 2, 3});
}

TEST(MlxParity, IteratorsSiblingsBracedAxesAndDevices) {
  array m = array({1, 2, 3, 4, 5, 6}, {3, 2});
  static_assert(std::is_const_v<decltype(*m.begin())>, "slices are read only, as MLX's");
  expect_array(*(m.begin() + 2), {2}, {5, 6});
  EXPECT_TRUE(m.begin() + 3 == m.end());
  auto it = m.begin();
  it += 1;
  expect_array(*it, {2}, {3, 4});
  // divmod's parts are separate ops here: no siblings, before or after eval.
  auto qr = divmod(array({7, 8}), array({2, 3}));
  EXPECT_TRUE(qr[0].siblings().empty());
  eval(qr);
  EXPECT_TRUE(qr[1].siblings().empty());
  // `{}` and `{1, 0}` are axes, not a stream.
  EXPECT_THROW(transpose(m, {}), std::invalid_argument);
  expect_array(transpose(m, {1, 0}), {2, 3}, {1, 3, 5, 2, 4, 6});
  expect_array(slice(m, {1, 0}, {3, 2}, {1, 1}), {2, 2}, {3, 4, 5, 6});
  EXPECT_FALSE(gpu::is_available());
  EXPECT_FALSE(metal::is_available());
  EXPECT_THROW(add(m, m, Device::gpu), std::invalid_argument);
}

TEST(MlxParity, HalfScalarsCompareAndAdd) {
  const float16_t a(1.5f), b(2.5f);
  EXPECT_TRUE(a < b);
  EXPECT_TRUE(a == float16_t(1.5f));
  EXPECT_TRUE(a != b);
  EXPECT_TRUE(a == 1.5);
  EXPECT_TRUE(2 > a);
  const float16_t c = a + b;
  EXPECT_EQ(static_cast<float>(c), 4.0f);
  const bfloat16_t d = bfloat16_t(3.0f) * bfloat16_t(0.5f);
  EXPECT_EQ(static_cast<float>(d), 1.5f);
  EXPECT_TRUE(bfloat16_t(1.0f) >= float16_t(1.0f));
}

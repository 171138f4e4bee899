// Finite-difference checks (autograd/check.h) of the conv and pooling gradients, first and second order.
#include <algorithm>

#include "../test_utils.h"
#include "conv_ref.h"
#include "loom/autograd/check.h"
#include "loom/autograd/transforms.h"
#include "loom/ops/conv.h"

using namespace loom;

namespace {
array rand_arr(const Shape& s, uint64_t seed) {
  size_t n = 1;
  for (int d : s) n *= d;
  return array(convref::random_values(n, seed), s, float64);
}
// Distinct values well apart (so no window of a max pool has a near-tie within the FD step).
array distinct_arr(const Shape& s, uint64_t seed) {
  size_t n = 1;
  for (int d : s) n *= d;
  auto r = convref::random_values(n, seed);
  std::vector<size_t> order(n);
  for (size_t i = 0; i < n; ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return r[a] < r[b]; });
  std::vector<double> v(n);
  for (size_t k = 0; k < n; ++k) v[order[k]] = -1.0 + 2.0 * double(k) / double(n);
  return array(v, s, float64);
}
}  // namespace

TEST(ConvGrad, Conv2dInputAndWeight) {
  struct P {
    Shape x, w;
    std::pair<int, int> stride, pad, dil;
    int groups;
  };
  std::vector<P> cases = {
      {{2, 5, 6, 3}, {4, 3, 3, 3}, {1, 1}, {0, 0}, {1, 1}, 1},
      {{2, 6, 5, 4}, {6, 3, 2, 2}, {2, 1}, {1, 2}, {1, 2}, 2},
      {{1, 7, 7, 4}, {4, 3, 3, 1}, {2, 2}, {1, 1}, {2, 2}, 4},
      {{3, 4, 4, 6}, {3, 1, 1, 2}, {1, 1}, {0, 0}, {1, 1}, 3},
  };
  uint64_t seed = 500;
  for (const P& p : cases) {
    auto f = [&](const std::vector<array>& v) {
      return std::vector<array>{conv2d(v[0], v[1], p.stride, p.pad, p.dil, p.groups)};
    };
    auto r = check_grads(f, {rand_arr(p.x, seed++), rand_arr(p.w, seed++)});
    EXPECT_TRUE(r.ok) << r.report;
  }
}

TEST(ConvGrad, Conv1dAndGeneral) {
  auto f1 = [](const std::vector<array>& v) { return std::vector<array>{conv1d(v[0], v[1], 2, 1, 2, 2)}; };
  auto r1 = check_grads(f1, {rand_arr({2, 9, 4}, 1), rand_arr({4, 3, 2}, 2)});
  EXPECT_TRUE(r1.ok) << r1.report;
  // Asymmetric padding, input dilation and flip in 2-d; a 3-d convolution.
  auto f2 = [](const std::vector<array>& v) {
    return std::vector<array>{conv_general(v[0], v[1], {1, 2}, {2, 0}, {0, 1}, {1, 2}, {2, 3}, 1, true)};
  };
  auto r2 = check_grads(f2, {rand_arr({2, 4, 5, 2}, 3), rand_arr({3, 3, 2, 2}, 4)});
  EXPECT_TRUE(r2.ok) << r2.report;
  auto f3 = [](const std::vector<array>& v) {
    return std::vector<array>{conv_general(v[0], v[1], {1, 2, 1}, {1}, {0})};
  };
  auto r3 = check_grads(f3, {rand_arr({1, 3, 4, 3, 2}, 5), rand_arr({2, 2, 2, 2, 2}, 6)});
  EXPECT_TRUE(r3.ok) << r3.report;
}

TEST(ConvGrad, SecondOrder) {
  // The gradient of sum(conv(x, w)^2) with respect to x and w, differentiated again: this goes
  // through the vjp of the input-gradient and weight-gradient nodes.
  for (int groups : {1, 2}) {
    auto loss = [groups](const std::vector<array>& v) {
      return sum(square(conv2d(v[0], v[1], {2, 1}, {1, 1}, {1, 2}, groups)));
    };
    auto g = grad(loss, {0, 1});
    auto f = [&](const std::vector<array>& v) { return g(v); };
    auto r = check_grads(f, {rand_arr({2, 5, 5, 4}, 10 + groups), rand_arr({2, 3, 2, 4 / groups}, 20 + groups)});
    EXPECT_TRUE(r.ok) << r.report;
  }
  // Flipped kernel with input dilation and asymmetric padding.
  auto loss = [](const std::vector<array>& v) {
    return sum(square(conv_general(v[0], v[1], {1, 2}, {2, 0}, {0, 1}, {1, 2}, {2, 1}, 1, true)));
  };
  auto g = grad(loss, {0, 1});
  auto r = check_grads([&](const std::vector<array>& v) { return g(v); }, {rand_arr({2, 4, 5, 2}, 13), rand_arr({3, 3, 2, 2}, 14)});
  EXPECT_TRUE(r.ok) << r.report;
}

TEST(ConvGrad, Pooling) {
  auto fm = [](const std::vector<array>& v) {
    return std::vector<array>{max_pool2d(v[0], {2, 2}), max_pool2d(v[0], {3, 2}, {2, 1}, {1, 1})};
  };
  auto rm = check_grads(fm, {distinct_arr({2, 5, 6, 3}, 30)}, {}, 1e-6, 1e-5, 1e-6);
  EXPECT_TRUE(rm.ok) << rm.report;
  auto fa = [](const std::vector<array>& v) {
    return std::vector<array>{avg_pool2d(v[0], {2, 2}), avg_pool2d(v[0], {3, 3}, {2, 1}, {1, 1}),
                              avg_pool1d(reshape(v[0], {2, 30, 3}), 4, 3, 2)};
  };
  auto ra = check_grads(fa, {rand_arr({2, 5, 6, 3}, 31)});
  EXPECT_TRUE(ra.ok) << ra.report;
  auto f1 = [](const std::vector<array>& v) { return std::vector<array>{max_pool1d(v[0], 3, 2, 1)}; };
  auto r1 = check_grads(f1, {distinct_arr({3, 8, 2}, 32)});
  EXPECT_TRUE(r1.ok) << r1.report;
}

TEST(ConvGrad, PoolingSecondOrder) {
  auto lossm = [](const std::vector<array>& v) { return sum(square(max_pool2d(v[0], {2, 2}, {1, 1}))); };
  auto gm = grad(lossm, 0);
  auto rm = check_grads([&](const std::vector<array>& v) { return gm(v); }, {distinct_arr({1, 4, 4, 2}, 40)});
  EXPECT_TRUE(rm.ok) << rm.report;
  auto lossa = [](const std::vector<array>& v) { return sum(square(avg_pool2d(v[0], {2, 2}, {1, 1}, {1, 1}))); };
  auto ga = grad(lossa, 0);
  auto ra = check_grads([&](const std::vector<array>& v) { return ga(v); }, {rand_arr({1, 4, 4, 2}, 41)});
  EXPECT_TRUE(ra.ok) << ra.report;
}

TEST(ConvGrad, SmallCnn) {
  // conv 3x3 -> relu -> max pool -> conv 3x3 -> avg pool -> sum, as the Fashion-MNIST example stacks them.
  auto f = [](const std::vector<array>& v) {
    array h = maximum(conv2d(v[0], v[1], {1, 1}, {1, 1}), array(0.0, float64));
    h = max_pool2d(h, {2, 2});
    h = conv2d(h, v[2]);
    return std::vector<array>{sum(avg_pool2d(h, {2, 2}), {1, 2})};
  };
  auto r = check_grads(f, {rand_arr({2, 8, 8, 1}, 50), rand_arr({4, 3, 3, 1}, 51), rand_arr({3, 3, 3, 4}, 52)});
  EXPECT_TRUE(r.ok) << r.report;
}

TEST(ConvGrad, ValueAndGradFloat32) {
  // grad through the public transforms in float32 agrees with the direct-loop references.
  convref::Case2d c;
  c.N = 2; c.H = 6; c.W = 5; c.Cin = 2; c.Cout = 3; c.KH = 3; c.KW = 2; c.sh = 2; c.plh = c.phh = 1; c.plw = c.phw = 1;
  auto xv = convref::random_values(c.N * c.H * c.W * c.Cin, 60);
  auto wv = convref::random_values(c.Cout * c.KH * c.KW * c.Cin, 61);
  auto dyv = convref::random_values(c.N * c.OH() * c.OW() * c.Cout, 62);
  array dy(dyv, c.yshape(), float32);
  auto loss = [&](const std::vector<array>& v) { return sum(multiply(conv2d(v[0], v[1], {2, 1}, {1, 1}), dy)); };
  auto [value, grads] = value_and_grad(loss, {0, 1})({array(xv, c.xshape(), float32), array(wv, c.wshape(), float32)});
  auto y = convref::forward(c, xv, wv);
  double expect = 0;
  for (size_t i = 0; i < y.size(); ++i) expect += y[i] * dyv[i];
  EXPECT_NEAR(value.item<double>(), expect, 1e-4);
  EXPECT_EQ(grads[0].dtype(), float32);
  loom::testing::expect_array(grads[0], c.xshape(), convref::input_grad(c, dyv, wv), 1e-5);
  loom::testing::expect_array(grads[1], c.wshape(), convref::weight_grad(c, xv, dyv), 1e-5);
}

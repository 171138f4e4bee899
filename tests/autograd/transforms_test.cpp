#include "../test_utils.h"
#include "loom/core/primitive.h"

using namespace loom;
using loom::testing::expect_array;

TEST(Grad, SumOfSquaresClosedForm) {
  auto f = [](const array& x) { return sum(x * x); };
  array x({1.0f, -2.0f, 3.0f});
  auto [v, g] = value_and_grad(f)(x);
  EXPECT_FALSE(g.is_evaluated());  // building the backward graph evaluates nothing
  eval(v, g);
  EXPECT_FLOAT_EQ(v.item<float>(), 14.0f);
  expect_array(g, {3}, {2, -4, 6});
}

TEST(Grad, LogSumExpIsSoftmax) {
  array x({0.5f, -1.0f, 2.0f, 1000.0f});
  auto g = grad([](const array& a) { return logsumexp(a); })(x);
  expect_array(g, {4}, {0, 0, 0, 1}, 1e-6);
  array y({0.5f, -1.0f, 2.0f});
  auto gy = grad([](const array& a) { return logsumexp(a); })(y);
  double z = std::exp(0.5) + std::exp(-1.0) + std::exp(2.0);
  expect_array(gy, {3}, {std::exp(0.5) / z, std::exp(-1.0) / z, std::exp(2.0) / z}, 1e-6);
}

TEST(Grad, TwoLayerMlpAgainstHandDerivation) {
  // loss = sum((relu(x W1) W2 - t)^2) / 2, with relu written as maximum(h, 0).
  array x({1.0, 2.0}, {1, 2});
  array w1({0.5, -1.0, 0.25, 1.0}, {2, 2});
  array w2({2.0, -3.0}, {2, 1});
  array t({1.0}, {1, 1});
  auto loss = [&](const std::vector<array>& p) {
    array h = maximum(matmul(x, p[0]), array(0.0));
    array y = matmul(h, p[1]);
    return sum(square(y - t)) * 0.5;
  };
  auto grads = grad(loss, {0, 1})({w1, w2});
  // Forward: xW1 = [1, 1], h = [1, 1], y = -1, r = y - t = -2.
  // dW2 = h^T r = [-2, -2]; dh = r W2^T = [-4, 6]; dW1 = x^T dh = [[-4, 6], [-8, 12]].
  expect_array(grads[0], {2, 2}, {-4, 6, -8, 12});
  expect_array(grads[1], {2, 1}, {-2, -2});
}

TEST(Grad, SecondDerivatives) {
  auto f = [](const array& x) { return sum(x * x * x); };  // f'' = 6x
  auto g2 = grad([&](const array& x) { return sum(grad(f)(x)); });
  expect_array(g2(array({1.0f, -2.0f})), {2}, {6, -12}, 1e-5);
  auto s = [](const array& x) { return sum(sin(x)); };  // second derivative -sin
  auto s2 = grad([&](const array& x) { return sum(grad(s)(x)); });
  expect_array(s2(array({0.3, 1.2})), {2}, {-std::sin(0.3), -std::sin(1.2)}, 1e-9);
}

TEST(Grad, JvpOfVjp) {
  // f(x) = x^3 elementwise; vjp with cotangent 1 is 3x^2; its jvp with tangent t is 6x t.
  auto vjp_fn = [](const std::vector<array>& x) {
    return vjp([](const array& a) { return a * a * a; }, x[0], ones_like(x[0])).second;
  };
  auto [outs, tans] = jvp([&](const std::vector<array>& x) { return std::vector<array>{vjp_fn(x)}; },
                          {array({1.0, 2.0})}, {array({1.0, 0.5})});
  expect_array(outs[0], {2}, {3, 12});
  expect_array(tans[0], {2}, {6, 6});
}

TEST(Grad, OnlyRequestedBranchesRecordWork) {
  array x({1.0f, 2.0f});
  array y({3.0f, 4.0f});
  auto [vals, grads] = vjp(
      [](const std::vector<array>& p) { return std::vector<array>{sum(p[0] * 2.0f)}; }, {x, y}, {array(1.0f)});
  // y does not reach the output: its cotangent is a plain zeros node, no backward graph.
  ASSERT_TRUE(grads[1].has_primitive());
  EXPECT_STREQ(grads[1].primitive().name(), "Full");
  expect_array(grads[0], {2}, {2, 2});
  expect_array(grads[1], {2}, {0, 0});
}

TEST(Grad, IntegerOutputsAndInputs) {
  // argmax (int) feeds nothing back: zero gradient, no error.
  auto f = [](const array& x) { return sum(astype(argmax(x), float32) * x); };
  expect_array(grad(f)(array({1.0f, 5.0f, 2.0f})), {3}, {1, 1, 1});
  EXPECT_THROW_MSG(grad([](const array& x) { return sum(x); })(array({1, 2})), std::invalid_argument,
                   "dtype int32");
  EXPECT_THROW_MSG(grad([](const array& x) { return x * 2.0f; })(array({1.0f, 2.0f})), std::invalid_argument,
                   "scalar first output");
  EXPECT_THROW_MSG(grad([](const std::vector<array>& x) { return sum(x[0]); }, {3})({array(1.0f)}),
                   std::out_of_range, "argnum 3");
}

TEST(Grad, StopGradientBlocks) {
  auto f = [](const array& x) { return sum(x * stop_gradient(x)); };
  expect_array(grad(f)(array({2.0f, 3.0f})), {2}, {2, 3});
}

TEST(Grad, EvaluatedIntermediateInsideTransformStillDifferentiates) {
  auto f = [](const array& x) {
    array h = exp(x);
    h.eval();  // a user peeking at an intermediate must not cut the graph
    return sum(h);
  };
  expect_array(grad(f)(array({0.0f, 1.0f})), {2}, {1, std::exp(1.0)}, 1e-6);
}

TEST(Grad, TrainingStepsDoNotChainGraphs) {
  // Parameters updated from gradients are plain arrays once eval'd: no graph grows across steps.
  array w({1.0f, 2.0f});
  auto vg = value_and_grad([](const array& p) { return sum(p * p); });
  for (int i = 0; i < 5; ++i) {
    auto [loss, g] = vg(w);
    w = w - g * 0.1f;
    eval(loss, w);
    EXPECT_FALSE(w.has_primitive());
  }
  expect_array(w, {2}, {std::pow(0.8, 5), 2 * std::pow(0.8, 5)}, 1e-6);
}

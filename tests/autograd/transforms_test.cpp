#include "../test_utils.h"
#include "loom/core/graph_utils.h"
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
  array x({1.0, 2.0}, {1, 2}, float64);
  array w1({0.5, -1.0, 0.25, 1.0}, {2, 2}, float64);
  array w2({2.0, -3.0}, {2, 1}, float64);
  array t({1.0}, {1, 1}, float64);
  auto loss = [&](const std::vector<array>& p) {
    array h = maximum(matmul(x, p[0]), array(0.0, float64));
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
  expect_array(s2(array({0.3, 1.2}, float64)), {2}, {-std::sin(0.3), -std::sin(1.2)}, 1e-9);
}

TEST(Grad, JvpOfVjp) {
  // f(x) = x^3 elementwise; vjp with cotangent 1 is 3x^2; its jvp with tangent t is 6x t.
  auto vjp_fn = [](const std::vector<array>& x) {
    return vjp([](const array& a) { return a * a * a; }, x[0], ones_like(x[0])).second;
  };
  auto [outs, tans] = jvp([&](const std::vector<array>& x) { return std::vector<array>{vjp_fn(x)}; },
                          {array({1.0, 2.0}, float64)}, {array({1.0, 0.5}, float64)});
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
  EXPECT_THROW_MSG(grad([](const std::vector<array>& x) { return sum(x[0]); }, 3)({array(1.0f)}),
                   std::invalid_argument, "argnum 3");
}

// MLX's argnums: an int or a list, negative numbers from the end, gradients in increasing input
// order, and an empty list, a repeat or an input out of range is an error.
TEST(Grad, ArgnumsAsMLX) {
  auto f = [](const std::vector<array>& x) { return sum(x[0] * x[1] * x[1]); };  // d0 = b^2, d1 = 2ab
  std::vector<array> in{array(2.0f), array(3.0f)};
  EXPECT_EQ(grad(f)(in)[0].item<float>(), 9.0f);
  EXPECT_EQ(grad(f, 1)(in)[0].item<float>(), 12.0f);
  EXPECT_EQ(grad(f, -1)(in)[0].item<float>(), 12.0f);
  auto both = grad(f, {1, 0})(in);
  EXPECT_EQ(both[0].item<float>(), 9.0f);
  EXPECT_EQ(both[1].item<float>(), 12.0f);
  auto [v, g] = value_and_grad(f, -2)(in);
  EXPECT_EQ(v.item<float>(), 18.0f);
  EXPECT_EQ(g[0].item<float>(), 9.0f);
  EXPECT_THROW_MSG(grad(f, std::vector<int>{})(in), std::invalid_argument, "argnums is empty");
  EXPECT_THROW_MSG(grad(f, {0, 0})(in), std::invalid_argument, "names input 0 twice");
  EXPECT_THROW_MSG(grad(f, {1, -1})(in), std::invalid_argument, "names input 1 twice");
  EXPECT_THROW_MSG(grad(f, -3)(in), std::invalid_argument, "argnum -3 is out of range for 2 inputs");
  EXPECT_THROW_MSG(grad(f, {0, 1, 2})(in), std::invalid_argument, "argnum 2");
}

// A loop that keeps the traced input and passes it back in traces from the array under the earlier
// tracer's copy: one copy in the graph after five calls, not a chain of five.
TEST(Grad, ReusedTracerDoesNotChainCopies) {
  auto copies = [](const array& x) {
    std::ostringstream os;
    print_graph(os, {x});
    const std::string g = os.str();
    int n = 0;
    for (size_t pos = g.find("Copy"); pos != std::string::npos; pos = g.find("Copy", pos + 4)) ++n;
    return n;
  };
  array x = ones({8});
  std::vector<array> kept{array(1.0f)};
  auto g = grad([&kept](const std::vector<array>& in) {
    kept[0] = in[0];
    return sum(in[1]) * in[0];
  });
  for (int i = 0; i < 5; ++i) {
    auto grads = g({kept[0], x});
    eval(grads);
    EXPECT_EQ(grads[0].item<float>(), 8.0f);
  }
  EXPECT_EQ(copies(kept[0]), 1);
  for (int i = 0; i < 5; ++i) {
    auto [outs, tans] = jvp(
        [&kept](const std::vector<array>& in) {
          kept[0] = in[0];
          return std::vector<array>{sum(in[1]) * in[0]};
        },
        {kept[0], x}, {array(1.0f), zeros({8})});
    EXPECT_EQ(tans[0].item<float>(), 8.0f);  // evaluates kept[0] too: it keeps no graph
  }
  EXPECT_LE(copies(kept[0]), 1);
}

TEST(Grad, StopGradientBlocks) {
  auto f = [](const array& x) { return sum(x * stop_gradient(x)); };
  expect_array(grad(f)(array({2.0f, 3.0f})), {2}, {2, 3});
}

namespace {
// A copy whose outputs carry no derivative; its rules throw, so a transform that called them fails.
class NoDerivative : public UnaryPrimitive {
 public:
  void eval_cpu(const std::vector<array>& in, array& out) override { out.copy_shared_buffer(in[0]); }
  std::vector<array> vjp(const std::vector<array>&, const std::vector<array>&, const std::vector<int>&,
                         const std::vector<array>&) override {
    throw std::logic_error("vjp of a primitive without derivatives was called");
  }
  std::vector<array> jvp(const std::vector<array>&, const std::vector<array>&, const std::vector<int>&) override {
    throw std::logic_error("jvp of a primitive without derivatives was called");
  }
  const char* name() const override { return "NoDerivative"; }
  bool is_differentiable() const override { return false; }
};
}  // namespace

// Transforms treat the outputs of a primitive that says it is not differentiable as constants: its
// rules are never called, and only the other paths contribute.
TEST(Grad, NonDifferentiablePrimitivesAreConstants) {
  auto constant = [](const array& x) { return array(x.shape(), x.dtype(), std::make_shared<NoDerivative>(), {x}); };
  auto f = [&](const array& x) { return sum(x * constant(x * 2.0f)); };
  expect_array(grad(f)(array({2.0f, 3.0f})), {2}, {4, 6});
  auto [y, t] = jvp([&](const array& x) { return x * constant(x); }, array({2.0f, 3.0f}), array({1.0f, 1.0f}));
  expect_array(t, {2}, {2, 3});
  EXPECT_FALSE(stop_gradient(array(1.0f)).primitive().is_differentiable());
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

TEST(Grad, SoftmaxCrossEntropyMlpAgainstHandDerivation) {
  // loss = -sum(onehot * log_softmax(tanh(x W1 + b1) W2)); one sample, 2 -> 2 -> 3.
  // dlogits = softmax(z) - onehot, dW2 = h^T dlogits, dh = dlogits W2^T, da = dh (1 - h^2),
  // dW1 = x^T da, db1 = da.
  std::vector<double> x = {0.5, -1.0}, w1 = {0.3, -0.2, 0.8, 0.1}, b1 = {0.05, -0.1},
                      w2 = {1.0, -0.5, 0.2, 0.4, 0.3, -0.7};
  const int label = 2;
  auto loss = [&](const std::vector<array>& p) {
    array h = tanh(matmul(array(x, {1, 2}, float64), p[0]) + p[1]);
    array z = matmul(h, p[2]);
    return -sum(log_softmax(z, -1) * array({0.0, 0.0, 1.0}, {1, 3}, float64));
  };
  auto [value, grads] = value_and_grad(loss, {0, 1, 2})(
      {array(w1, {2, 2}, float64), array(b1, {2}, float64), array(w2, {2, 3}, float64)});
  // The same computation by hand.
  double a[2], h[2], z[3];
  for (int j = 0; j < 2; ++j) {
    a[j] = x[0] * w1[j] + x[1] * w1[2 + j] + b1[j];
    h[j] = std::tanh(a[j]);
  }
  double zmax = -1e300, se = 0;
  for (int k = 0; k < 3; ++k) {
    z[k] = h[0] * w2[k] + h[1] * w2[3 + k];
    zmax = std::max(zmax, z[k]);
  }
  for (int k = 0; k < 3; ++k) se += std::exp(z[k] - zmax);
  double dz[3];
  for (int k = 0; k < 3; ++k) dz[k] = std::exp(z[k] - zmax) / se - (k == label ? 1.0 : 0.0);
  EXPECT_NEAR(value.item<double>(), -(z[label] - zmax - std::log(se)), 1e-12);
  std::vector<double> dw2(6), da(2), dw1(4);
  for (int j = 0; j < 2; ++j) {
    double dh = 0;
    for (int k = 0; k < 3; ++k) {
      dw2[j * 3 + k] = h[j] * dz[k];
      dh += dz[k] * w2[j * 3 + k];
    }
    da[j] = dh * (1 - h[j] * h[j]);
  }
  for (int i = 0; i < 2; ++i) {
    for (int j = 0; j < 2; ++j) dw1[i * 2 + j] = x[i] * da[j];
  }
  expect_array(grads[0], {2, 2}, dw1, 1e-12);
  expect_array(grads[1], {2}, da, 1e-12);
  expect_array(grads[2], {2, 3}, dw2, 1e-12);
}

TEST(Grad, HessianVectorProductIsJvpOfGrad) {
  // f(x, y) = sum(x^2 y): grad_x = 2 x y, so the Hessian-vector product along (v, w) in x is
  // 2 (v y + x w); along w alone it is 2 x w.
  auto gx = [](const std::vector<array>& p) { return grad([](const std::vector<array>& q) { return sum(q[0] * q[0] * q[1]); }, 0)(p); };
  array x({1.0, -2.0}, float64), y({3.0, 0.5}), v({1.0, 1.0}), w({0.5, -1.0});
  auto [g, hv] = jvp(gx, {x, y}, {v, w});
  expect_array(g[0], {2}, {6, -2});
  expect_array(hv[0], {2}, {2 * (1 * 3 + 1 * 0.5), 2 * (1 * 0.5 + -2 * -1.0)});
  // Third derivative: d3/dx3 sum(x^4) = 24 x.
  auto d1 = [](const array& a) { return grad([](const array& b) { return sum(b * b * b * b); })(a); };
  auto d2 = [&](const array& a) { return grad([&](const array& b) { return sum(d1(b)); })(a); };
  auto d3 = grad([&](const array& b) { return sum(d2(b)); });
  expect_array(d3(array({0.5, -1.0}, float64)), {2}, {12, -24}, 1e-12);
}

TEST(Grad, HalfAndSinglePrecisionGradientsKeepTheirDtype) {
  // d/dx sum(sin(x) * x) = cos(x) x + sin(x), in each floating dtype at its own precision.
  std::vector<double> xs = {0.25, -1.5, 2.0};
  for (auto [dt, tol] : {std::pair<Dtype, double>{float16, 1e-2}, {bfloat16, 5e-2}, {float32, 1e-6}, {float64, 1e-12}}) {
    array x(xs, {3}, dt);
    auto [v, g] = value_and_grad([](const array& a) { return sum(sin(a) * a); })(x);
    EXPECT_EQ(g.dtype(), dt);
    std::vector<double> want;
    double total = 0;
    for (double a : xs) {
      want.push_back(std::cos(a) * a + std::sin(a));
      total += std::sin(a) * a;
    }
    expect_array(g, {3}, want, tol);
    EXPECT_NEAR(v.item<double>(), total, 4 * tol * (1 + std::abs(total)));
  }
}

TEST(Transforms, GradientOfATransposedMatmulOperandIsComputedRowContiguous) {
  // d/dW sum((x @ W^T) * g) = g^T x; Transpose's vjp turns the transposed product into one matmul,
  // so the gradient needs no copy before the optimizer reads it.
  array x = array({1.0f, 2.0f, 3.0f, 4.0f, 5.0f, 6.0f}, {2, 3});
  array g = array({1.0f, -1.0f, 0.5f, 2.0f}, {2, 2});
  array w = array({0.1f, 0.2f, 0.3f, 0.4f, 0.5f, 0.6f}, {2, 3});
  array dw = grad([&](const array& w) { return sum(matmul(x, transpose(w)) * g); })(w);
  dw.eval();
  EXPECT_TRUE(dw.flags().row_contiguous);
  // g^T x = [[1*1 + 0.5*4, 1*2 + 0.5*5, 1*3 + 0.5*6], [-1*1 + 2*4, -1*2 + 2*5, -1*3 + 2*6]]
  loom::testing::expect_array(dw, {2, 3}, {3, 4.5, 6, 7, 8, 9});
}

// vjp in two halves: the forward now, the backward later with cotangents built in between (from the
// forward's own outputs here); the same products as the one-call vjp, for each call of the pullback,
// with missing cotangents counted as zero.
TEST(Grad, VjpInTwoHalvesEqualsTheOneCallVjp) {
  array x({0.5, -1.0, 2.0}, {3}, float64), w({1.5, 0.25, -0.5}, {3}, float64);
  VectorFn f = [](const std::vector<array>& p) {
    return std::vector<array>{sin(p[0] * p[1]), sum(exp(p[0]))};
  };
  auto [outs, pullback] = vjp(f, {x, w});
  ASSERT_EQ(outs.size(), 2u);
  EXPECT_FALSE(outs[0].is_evaluated());
  const array c0 = outs[0] * 2.0, c1 = array(3.0, float64);  // built after the forward, from it
  const std::vector<array> later = pullback({c0, c1});
  // A second call, with only the first output's cotangent (the second's counts as zero), before
  // anything is evaluated: evaluating the forward detaches it from the graph, as every eval does.
  const std::vector<array> first_only = pullback({ones({3}, float64)});
  const auto [o_once, once] = vjp(f, {x, w}, {c0, c1});
  ASSERT_EQ(later.size(), 2u);
  for (int i = 0; i < 2; ++i) EXPECT_TRUE(allclose(later[i], once[i], 0, 0).item<bool>()) << i;
  // d/dx = cos(xw) w c0 + exp(x) c1, d/dw = cos(xw) x c0, by hand.
  std::vector<double> dx, dw;
  const double xs[3] = {0.5, -1.0, 2.0}, ws[3] = {1.5, 0.25, -0.5};
  for (int i = 0; i < 3; ++i) {
    const double c = 2 * std::sin(xs[i] * ws[i]);
    dx.push_back(std::cos(xs[i] * ws[i]) * ws[i] * c + std::exp(xs[i]) * 3);
    dw.push_back(std::cos(xs[i] * ws[i]) * xs[i] * c);
  }
  expect_array(later[0], {3}, dx, 1e-12);
  expect_array(later[1], {3}, dw, 1e-12);
  for (int i = 0; i < 3; ++i) dw[i] = std::cos(xs[i] * ws[i]) * xs[i];
  expect_array(first_only[1], {3}, dw, 1e-12);
  EXPECT_THROW_MSG(pullback({c0, c1, c1}), std::invalid_argument, "[vjp] 3 cotangents for 2 outputs");
}

// custom_vjp, custom_function, checkpoint and depends.
#include "../test_utils.h"
#include "loom/autograd/check.h"
#include "loom/autograd/transforms.h"
#include "loom/core/allocator.h"
#include "loom/core/primitive.h"

using namespace loom;
using loom::testing::expect_array;

namespace {

array vec(std::initializer_list<double> v) { return array(std::vector<double>(v), {int(v.size())}, float64); }

// softplus(x) = log(1 + exp(x)) with the vjp sigmoid(x) * cot and the jvp sigmoid(x) * t.
VectorFn softplus_fn() {
  return custom_function(
      [](const std::vector<array>& x) { return std::vector<array>{log1p(exp(x[0]))}; },
      CustomVjpFn([](const std::vector<array>& p, const std::vector<array>& cot, const std::vector<array>&) {
        return std::vector<array>{multiply(cot[0], sigmoid(p[0]))};
      }),
      CustomJvpFn([](const std::vector<array>& p, const std::vector<array>& t, const std::vector<int>&) {
        return std::vector<array>{multiply(t[0], sigmoid(p[0]))};
      }));
}

}  // namespace

TEST(CustomVjp, TheRuleReplacesTheDerivative) {
  // Forward is sin(x); the (deliberately different) rule says the derivative is 2 * x.
  auto f = custom_vjp([](const std::vector<array>& x) { return std::vector<array>{sin(x[0])}; },
                      [](const std::vector<array>& p, const std::vector<array>& cot, const std::vector<array>& out) {
                        EXPECT_EQ(out.size(), 1u);
                        EXPECT_EQ(out[0].shape(), p[0].shape());
                        return std::vector<array>{cot[0] * p[0] * 2.0};
                      });
  array x = vec({0.5, -1.0, 2.0});
  auto [v, g] = value_and_grad([&](const array& a) { return sum(f({a})[0]); })(x);
  EXPECT_FALSE(g.is_evaluated());
  EXPECT_NEAR(v.item<double>(), std::sin(0.5) + std::sin(-1.0) + std::sin(2.0), 1e-12);
  expect_array(g, {3}, {1.0, -2.0, 4.0});
  // Called outside any transform it is just the forward.
  expect_array(f({x})[0], {3}, {std::sin(0.5), std::sin(-1.0), std::sin(2.0)}, 1e-12);
  // Forward mode has no rule: it differentiates the forward (cos(x) * t).
  auto [o, t] = jvp([&](const array& a) { return f({a})[0]; }, x, vec({1, 1, 2}));
  expect_array(t, {3}, {std::cos(0.5), std::cos(-1.0), 2 * std::cos(2.0)}, 1e-12);
}

TEST(CustomVjp, OutputsAreHandedToTheRule) {
  // exp with the vjp cot * output: the rule reuses the forward result instead of recomputing it.
  int calls = 0;
  auto f = custom_vjp([](const std::vector<array>& x) { return std::vector<array>{exp(x[0])}; },
                      [&calls](const std::vector<array>&, const std::vector<array>& cot,
                               const std::vector<array>& out) {
                        ++calls;
                        return std::vector<array>{cot[0] * out[0]};
                      });
  auto r = check_grads([&](const std::vector<array>& p) { return f(p); }, {vec({0.1, -0.7, 1.3})});
  EXPECT_TRUE(r.ok) << r.report;
  EXPECT_EQ(calls, 1);  // check_grads takes one vjp; the jvp goes through the forward
  auto g = grad([&](const array& a) { return sum(f({a})[0]); })(array({0.0f, 1.0f}));
  EXPECT_EQ(g.dtype(), float32);
  expect_array(g, {2}, {1.0, std::exp(1.0)}, 1e-6);
}

TEST(CustomFunction, VjpAndJvpRulesMatchFiniteDifferences) {
  auto sp = softplus_fn();
  for (Shape s : {Shape{4}, Shape{2, 3}, Shape{}}) {
    size_t n = 1;
    for (int d : s) n *= d;
    std::vector<double> v(n);
    for (size_t i = 0; i < n; ++i) v[i] = -2.0 + 0.7 * double(i);
    auto r = check_grads(sp, {array(v, s, float64)});
    EXPECT_TRUE(r.ok) << r.report;
  }
  // Large inputs: the forward overflows to inf only past exp's range; the rule stays finite.
  auto g = grad([&](const array& a) { return sum(sp({a})[0]); })(vec({-800.0, 0.0, 30.0}));
  expect_array(g, {3}, {0.0, 0.5, 1.0 / (1.0 + std::exp(-30.0))}, 1e-12);
}

TEST(CustomFunction, JvpRuleAloneFallsBackToVjpThroughTheForward) {
  int jvp_calls = 0;
  auto f = custom_function([](const std::vector<array>& x) { return std::vector<array>{x[0] * x[1]}; },
                           std::nullopt,
                           CustomJvpFn([&](const std::vector<array>& p, const std::vector<array>& t,
                                           const std::vector<int>& argnums) {
                             ++jvp_calls;
                             // Only the tangents of the inputs in argnums are given.
                             array out = zeros_like(p[0]);
                             for (size_t i = 0; i < argnums.size(); ++i) {
                               out = out + t[i] * p[1 - argnums[i]];
                             }
                             return std::vector<array>{out};
                           }));
  array a = vec({1.0, 2.0}), b = vec({3.0, -4.0});
  auto [o, t] = jvp(f, {a, b}, {vec({1.0, 0.0}), vec({0.5, 1.0})});
  EXPECT_EQ(jvp_calls, 1);
  expect_array(o[0], {2}, {3, -8});
  expect_array(t[0], {2}, {1 * 3 + 0.5 * 1, 0 * -4 + 1.0 * 2});
  auto gr = grad([&](const std::vector<array>& p) { return sum(f(p)[0]); }, {0, 1})({a, b});
  expect_array(gr[0], {2}, {3, -4});
  expect_array(gr[1], {2}, {1, 2});
  // With an integer input held fixed, the rule sees only the float argument.
  auto r = check_grads([&](const std::vector<array>& p) { return f({p[0], astype(p[1], float64)}); },
                       {a, array({2, 5})});
  EXPECT_TRUE(r.ok) << r.report;
}

TEST(CustomFunction, MultipleOutputsAndSecondOrder) {
  // (x^2, x^3) with hand-written rules that are themselves differentiable.
  auto f = custom_function(
      [](const std::vector<array>& x) { return std::vector<array>{square(x[0]), x[0] * x[0] * x[0]}; },
      CustomVjpFn([](const std::vector<array>& p, const std::vector<array>& c, const std::vector<array>&) {
        return std::vector<array>{c[0] * p[0] * 2.0 + c[1] * square(p[0]) * 3.0};
      }),
      CustomJvpFn([](const std::vector<array>& p, const std::vector<array>& t, const std::vector<int>&) {
        return std::vector<array>{t[0] * p[0] * 2.0, t[0] * square(p[0]) * 3.0};
      }));
  auto r = check_grads(f, {vec({0.3, -1.1, 2.0})});
  EXPECT_TRUE(r.ok) << r.report;
  // Only the second output: the first one's cotangent is zero.
  auto g = grad([&](const array& x) { return sum(f({x})[1]); })(vec({2.0}));
  expect_array(g, {1}, {12});
  // d2/dx2 of sum(x^3) = 6x, through the vjp rule.
  auto g2 = grad([&](const array& x) { return sum(grad([&](const array& y) { return sum(f({y})[1]); })(x)); });
  expect_array(g2(vec({1.0, -2.0})), {2}, {6, -12});
  // The gradient itself passes a finite-difference check (the rule's own vjp and jvp).
  auto gf = grad([&](const std::vector<array>& p) { return sum(f(p)[0] + f(p)[1]); }, 0);
  auto r2 = check_grads([&](const std::vector<array>& p) { return gf(p); }, {vec({0.4, -0.9})});
  EXPECT_TRUE(r2.ok) << r2.report;
}

TEST(CustomFunction, BadRulesAreClearErrors) {
  auto wrong_count = custom_vjp([](const std::vector<array>& x) { return std::vector<array>{x[0] + x[1]}; },
                                [](const std::vector<array>&, const std::vector<array>& c, const std::vector<array>&) {
                                  return std::vector<array>{c[0]};
                                });
  EXPECT_THROW_MSG(grad([&](const std::vector<array>& p) { return sum(wrong_count(p)[0]); })({vec({1}), vec({2})}),
                   std::invalid_argument, "returned 1 cotangents for 2 primals");
  auto wrong_shape = custom_vjp([](const std::vector<array>& x) { return std::vector<array>{sum(x[0])}; },
                                [](const std::vector<array>&, const std::vector<array>& c, const std::vector<array>&) {
                                  return std::vector<array>{c[0]};
                                });
  EXPECT_THROW_MSG(grad([&](const array& p) { return wrong_shape({p})[0]; })(vec({1, 2})), std::invalid_argument,
                   "cotangent of shape () for primal 0 of shape (2)");
  EXPECT_THROW_MSG(custom_vjp(nullptr, nullptr), std::invalid_argument, "[custom_vjp]");
  // No rule at all: the function itself comes back.
  auto same = custom_function([](const std::vector<array>& x) { return std::vector<array>{x[0] * 2.0}; });
  EXPECT_FALSE(same({vec({1.0})})[0].primitive().name() == std::string("CustomTransforms"));
}

TEST(Depends, ValuesPassThroughAndGradientsSkipTheDependencies) {
  array a = vec({1.0, 2.0}), b = vec({5.0});
  auto r = check_grads([](const std::vector<array>& p) { return depends({p[0] * 3.0}, {exp(p[1])}); },
                       {a, b});
  EXPECT_TRUE(r.ok) << r.report;
  auto outs = depends({a, b}, {a + 1.0});
  ASSERT_EQ(outs.size(), 2u);
  EXPECT_STREQ(outs[0].primitive().name(), "Depends");
  expect_array(outs[0], {2}, {1, 2});
  expect_array(outs[1], {1}, {5});
}

namespace {

// 50 layers alternating sin and tanh, optionally as checkpointed segments of `seg` layers.
array deep_chain(const array& x, int layers, int seg) {
  auto block = [](int n, int start) {
    return [n, start](const std::vector<array>& in) {
      array h = in[0];
      for (int i = 0; i < n; ++i) h = (start + i) % 2 ? tanh(h) : sin(h);
      return std::vector<array>{h};
    };
  };
  array h = x;
  for (int i = 0; i < layers; i += (seg > 0 ? seg : layers)) {
    int n = seg > 0 ? std::min(seg, layers - i) : layers;
    auto f = block(n, i);
    h = seg > 0 ? checkpoint(f)({h})[0] : f({h})[0];
  }
  return h;
}

}  // namespace

TEST(Checkpoint, SameValuesAndGradients) {
  for (int seg : {1, 3, 7}) {
    auto r = check_grads([seg](const std::vector<array>& p) { return std::vector<array>{deep_chain(p[0], 7, seg)}; },
                         {vec({0.3, -0.8, 1.5})});
    EXPECT_TRUE(r.ok) << "segments of " << seg << ": " << r.report;
  }
  // Two inputs, two outputs, one of them integer.
  auto f = checkpoint([](const std::vector<array>& x) {
    array h = sin(x[0]) * x[1];
    return std::vector<array>{h, argmax(h)};
  });
  auto r = check_grads(f, {vec({0.1, 0.9, -0.3}), vec({2.0, -1.0, 0.5})});
  EXPECT_TRUE(r.ok) << r.report;
  // Second order through a checkpoint: d2/dx2 sum(sin(x)) = -sin(x).
  auto s = checkpoint([](const std::vector<array>& x) { return std::vector<array>{sum(sin(x[0]))}; });
  auto g2 = grad([&](const array& x) { return sum(grad([&](const array& y) { return s({y})[0]; })(x)); });
  expect_array(g2(vec({0.3, 1.2})), {2}, {-std::sin(0.3), -std::sin(1.2)}, 1e-12);
}

TEST(Checkpoint, RecomputesInTheBackwardInsteadOfKeepingIntermediates) {
  const int n = 1 << 20, layers = 50;
  std::vector<float> xv(n);
  for (int i = 0; i < n; ++i) xv[i] = -1.0f + 2.0f * float(i) / float(n);
  array x(xv, {n}, float32);
  x.eval();
  auto run = [&](int seg) {
    auto vg = value_and_grad([seg](const array& a) { return sum(deep_chain(a, layers, seg)); });
    reset_peak_memory();
    size_t before = get_active_memory();
    auto [v, g] = vg(x);
    eval(v, g);
    size_t peak = get_peak_memory() - before;
    return std::make_tuple(v.item<float>(), g.to_vector<float>(), peak);
  };
  auto [v0, g0, peak0] = run(0);
  auto [v1, g1, peak1] = run(7);
  EXPECT_EQ(v0, v1);
  ASSERT_EQ(g0.size(), g1.size());
  for (size_t i = 0; i < g0.size(); i += 997) ASSERT_EQ(g0[i], g1[i]) << "at " << i;  // same ops, same order
  const double mb = 1 << 20;
  std::printf("peak without checkpoint %.1f MB, with %.1f MB\n", peak0 / mb, peak1 / mb);
  // Without: the backward keeps sin's inputs and tanh's outputs, which are the same arrays in an
  // alternating chain: 25 x 4 MB plus the running cotangent. With: the 8 segment boundaries plus
  // one segment's recomputation (about 11 x 4 MB).
  EXPECT_GT(peak0, size_t(25) * 4 * (1 << 20));
  EXPECT_LT(peak1, size_t(13) * 4 * (1 << 20));
  EXPECT_LT(peak1 * 2, peak0);
}

TEST(Checkpoint, StaysLazy) {
  auto f = checkpoint([](const std::vector<array>& x) { return std::vector<array>{sum(exp(x[0]))}; });
  auto [v, g] = value_and_grad([&](const array& a) { return f({a})[0]; })(array({0.0f, 1.0f}));
  EXPECT_FALSE(v.is_evaluated());
  EXPECT_FALSE(g.is_evaluated());
  eval(v, g);
  EXPECT_NEAR(v.item<float>(), 1 + std::exp(1.0f), 1e-5);
  expect_array(g, {2}, {1, std::exp(1.0)}, 1e-6);
}

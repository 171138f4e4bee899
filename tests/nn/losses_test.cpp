// nn::losses against closed forms (float64 numbers computed by hand from the formulas in the
// comments), every reduction, gradients against finite differences, and bad inputs.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "loom/loom.h"
#include "loom/nn/losses.h"
#include "loom/fast/fast.h"
#include "../test_utils.h"

using namespace loom;
using loom::testing::expect_array;
namespace L = loom::nn::losses;

namespace {

// Deterministic values in [lo, hi) (an LCG), as a float64 array.
array uniform_values(const Shape& s, double lo, double hi, unsigned seed) {
  return loom::testing::lcg_uniform(s, lo, hi, seed, 7);
}

array class_indices(const Shape& s, int num_classes, unsigned seed, Dtype d = int32) {
  size_t n = 1;
  for (int x : s) n *= x;
  std::vector<int64_t> v(n);
  uint64_t state = seed * 2654435761u + 3;
  for (auto& x : v) {
    state = state * 6364136223846793005ULL + 1442695040888963407ULL;
    x = static_cast<int64_t>((state >> 33) % uint64_t(num_classes));
  }
  return array(v, s, d);
}

void expect_grads(const std::function<array(const std::vector<array>&)>& f, const std::vector<array>& xs,
                  const std::vector<int>& argnums = {}) {
  auto r = check_grads([&](const std::vector<array>& p) { return std::vector<array>{f(p)}; }, xs, argnums);
  EXPECT_TRUE(r.ok) << r.report;
}

// Closed-form numbers used below.
const double kLog1pExpM3 = 0.04858735157374206;  // log(1 + e^-3): logits (2, -1), target 0
const double kLse123 = 3.40760596444438;         // log(e + e^2 + e^3)
const double kLog3 = 1.0986122886681098;          // logsumexp(0, 0, 0)

// The op-by-op reference the fused kernel must match: logsumexp - (1 - ls) x[t] - ls mean(x).
array ce_reference(const array& x, const array& t, int axis, double ls) {
  int ax = axis < 0 ? axis + static_cast<int>(x.ndim()) : axis;
  array score = squeeze(take_along_axis(x, expand_dims(t, ax), ax), ax);
  array loss = logsumexp(x, ax) - score * (1.0 - ls);
  if (ls > 0) loss = loss - mean(x, ax) * ls;
  return loss;
}

}  // namespace

// ---- cross entropy ----

TEST(CrossEntropy, ClassIndicesClosedForm) {
  // MLX's doc example: each row is log(1 + e^-3).
  array logits({2.0f, -1.0f, -1.0f, 2.0f}, {2, 2});
  array y({0, 1});
  array loss = L::cross_entropy(logits, y);  // default reduction: "none"
  EXPECT_EQ(loss.dtype(), float32);
  expect_array(loss, {2}, {kLog1pExpM3, kLog1pExpM3}, 1e-6);

  // Rows (1,2,3) target 2: lse - 3; (0,0,0) target 1: log 3.
  array x({1.0, 2.0, 3.0, 0.0, 0.0, 0.0}, {2, 3}, float64);
  array t({2, 1});
  expect_array(L::cross_entropy(x, t, "none"), {2}, {kLse123 - 3, kLog3}, 1e-12);
  expect_array(L::cross_entropy(x, t, "sum"), {}, {kLse123 - 3 + kLog3}, 1e-12);
  expect_array(L::cross_entropy(x, t, "mean"), {}, {(kLse123 - 3 + kLog3) / 2}, 1e-12);
  EXPECT_EQ(L::cross_entropy(x, t, "mean").dtype(), float64);
}

TEST(CrossEntropy, TargetDtypesAndLogitDtypes) {
  array x({1.0, 2.0, 3.0, 0.0, 0.0, 0.0}, {2, 3}, float64);
  for (Dtype td : {uint8, int32, int64}) {
    expect_array(L::cross_entropy(x, array({2, 1}, td)), {2}, {kLse123 - 3, kLog3}, 1e-12);
  }
  for (Dtype d : {float16, bfloat16, float32}) {
    array loss = L::cross_entropy(astype(x, d), array({2, 1}));
    EXPECT_EQ(loss.dtype(), d);
    double tol = d == float32 ? 1e-6 : (d == float16 ? 1e-3 : 8e-3);
    expect_array(loss, {2}, {kLse123 - 3, kLog3}, tol);
  }
  // Integer logits compute in float32.
  array xi({1, 2, 3, 0, 0, 0}, {2, 3});
  array li = L::cross_entropy(xi, array({2, 1}));
  EXPECT_EQ(li.dtype(), float32);
  expect_array(li, {2}, {kLse123 - 3, kLog3}, 1e-6);
}

TEST(CrossEntropy, AxisAndStridedLogits) {
  // Classes along axis 0: column j of (3, 2) is a row of (2, 3) above.
  array xt({1.0, 0.0, 2.0, 0.0, 3.0, 0.0}, {3, 2}, float64);
  array t({2, 1});
  expect_array(L::cross_entropy(xt, t, std::nullopt, 0), {2}, {kLse123 - 3, kLog3}, 1e-12);
  expect_array(L::cross_entropy(xt, t, std::nullopt, -2), {2}, {kLse123 - 3, kLog3}, 1e-12);
  // The transpose is a strided view with classes along the last axis.
  array view = transpose(xt);
  expect_array(L::cross_entropy(view, t), {2}, {kLse123 - 3, kLog3}, 1e-12);
  // A 3-d logits tensor with the classes in the middle: (2, 3, 2); the loss has shape (2, 2).
  array x3({1.0, 0.0, 2.0, 0.0, 3.0, 0.0,    // batch 0: classes down the column
            0.0, 1.0, 0.0, 2.0, 0.0, 3.0},  // batch 1: swapped columns
           {2, 3, 2}, float64);
  array t3({2, 1, 0, 2}, {2, 2});
  // (b0,c0)=(1,2,3)->2, (b0,c1)=(0,0,0)->1, (b1,c0)=(0,0,0)->0, (b1,c1)=(1,2,3)->2
  expect_array(L::cross_entropy(x3, t3, std::nullopt, 1), {2, 2}, {kLse123 - 3, kLog3, kLog3, kLse123 - 3}, 1e-12);
  // Strided targets (a transposed view holding the same indices).
  array t3v = transpose(array({2, 0, 1, 2}, {2, 2}));
  expect_array(L::cross_entropy(x3, t3v, std::nullopt, 1), {2, 2}, {kLse123 - 3, kLog3, kLog3, kLse123 - 3}, 1e-12);
  // 1-d logits: one sample, a 0-d target and a 0-d loss.
  array one = L::cross_entropy(array({1.0, 2.0, 3.0}, float64), array(0));
  EXPECT_EQ(one.ndim(), 0u);
  expect_array(one, {}, {kLse123 - 1}, 1e-12);
  // Broadcast (stride-0) logits.
  array row({1.0, 2.0, 3.0}, float64);
  array bx = broadcast_to(row, {3, 3});
  expect_array(L::cross_entropy(bx, array({0, 1, 2})), {3}, {kLse123 - 1, kLse123 - 2, kLse123 - 3}, 1e-12);
}

TEST(CrossEntropy, LabelSmoothing) {
  // lse - (1 - ls) x[t] - ls mean(x): for (1,2,3), target 2, ls 0.1: lse - 2.7 - 0.2.
  array x({1.0, 2.0, 3.0, 0.0, 0.0, 0.0}, {2, 3}, float64);
  array t({2, 1});
  expect_array(L::cross_entropy(x, t, std::nullopt, -1, 0.1), {2}, {kLse123 - 2.9, kLog3}, 1e-12);
  // The same number is the cross entropy against the smoothed distribution (0.1/3, 0.1/3, 0.9 + 0.1/3).
  array q({0.1 / 3, 0.1 / 3, 0.9 + 0.1 / 3, 0.0, 1.0, 0.0}, {2, 3}, float64);
  expect_array(L::cross_entropy(x, q), {2}, {kLse123 - 2.9, kLog3}, 1e-12);
  // Probability targets with smoothing (MLX's formula): lse - 0.8 * sum(p x) - 0.2 * mean(x).
  array x2({2.0, -1.0, -1.0, 2.0}, {2, 2}, float64);
  array p2({0.9, 0.1, 0.1, 0.9}, {2, 2}, float64);
  double lse = 2 + kLog1pExpM3;  // log(e^2 + e^-1)
  expect_array(L::cross_entropy(x2, p2, std::nullopt, -1, 0.2, "sum"), {}, {2 * (lse - 0.8 * 1.7 - 0.2 * 0.5)}, 1e-12);
}

TEST(CrossEntropy, ProbabilityTargets) {
  // MLX's doc example: lse(2, -1) - (0.9 * 2 - 0.1) = 0.348587...
  array x({2.0f, -1.0f, -1.0f, 2.0f}, {2, 2});
  array p({0.9f, 0.1f, 0.1f, 0.9f}, {2, 2});
  expect_array(L::cross_entropy(x, p), {2}, {0.3485873515737421, 0.3485873515737421}, 1e-6);
  // One-hot rows give the class-index loss; integer one-hot is promoted.
  array onehot({1, 0, 0, 1}, {2, 2});
  array l1 = L::cross_entropy(x, onehot);
  EXPECT_EQ(l1.dtype(), float32);
  expect_array(l1, {2}, {kLog1pExpM3, kLog1pExpM3}, 1e-6);
  // Half logits compute in float32 and come back as the promoted dtype.
  array lh = L::cross_entropy(astype(x, bfloat16), astype(p, bfloat16), "mean");
  EXPECT_EQ(lh.dtype(), bfloat16);
  expect_array(lh, {}, {0.3485873515737421}, 1e-2);
  // Along axis 0.
  expect_array(L::cross_entropy(transpose(x), transpose(p), std::nullopt, 0), {2}, {0.3485873515737421, 0.3485873515737421},
               1e-6);
}

TEST(CrossEntropy, Weights) {
  array x({1.0, 2.0, 3.0, 0.0, 0.0, 0.0}, {2, 3}, float64);
  array t({2, 1});
  array w({0.5, 2.0}, float64);
  expect_array(L::cross_entropy(x, t, w), {2}, {0.5 * (kLse123 - 3), 2 * kLog3}, 1e-12);
  // "mean" is mean(loss * w), as in MLX.
  expect_array(L::cross_entropy(x, t, w, "mean"), {}, {(0.5 * (kLse123 - 3) + 2 * kLog3) / 2}, 1e-12);
  expect_array(L::cross_entropy(x, t, w, "sum"), {}, {0.5 * (kLse123 - 3) + 2 * kLog3}, 1e-12);
  array q({0.0, 0.0, 1.0, 0.0, 1.0, 0.0}, {2, 3}, float64);
  expect_array(L::cross_entropy(x, q, w, "sum"), {}, {0.5 * (kLse123 - 3) + 2 * kLog3}, 1e-12);
}

TEST(CrossEntropy, LargeLogitsAreStable) {
  // lse(1e4, 0, -1e4) = 1e4 exactly in float32, so the losses are 0, 1e4 and 2e4.
  array x({1e4f, 0.0f, -1e4f, 1e4f, 0.0f, -1e4f, 1e4f, 0.0f, -1e4f}, {3, 3});
  array t({0, 1, 2});
  expect_array(L::cross_entropy(x, t), {3}, {0.0, 1e4, 2e4}, 1e-6);
  expect_array(L::cross_entropy(x, t, std::nullopt, -1, 0.5), {3}, {0.5 * 1e4, 0.5 * 1e4 + 0.5 * 1e4, 1e4 + 0.5 * 1e4},
               1e-6);
  array p({0.5f, 0.0f, 0.5f}, {1, 3});
  expect_array(L::cross_entropy(slice(x, {0, 0}, {1, 3}), p), {1}, {1e4}, 1e-6);
  // Gradient: softmax(x) - onehot = (1, 0, 0) - onehot(t), finite.
  auto g = grad([&](const array& z) { return L::cross_entropy(z, t, "sum"); })(x);
  expect_array(g, {3, 3}, {0, 0, 0, 1, -1, 0, 1, 0, -1}, 1e-6);
  // float16 near its largest value: 60000 is exact.
  array xh({60000.0f, 0.0f}, {1, 2}, float16);
  expect_array(L::cross_entropy(xh, array({1})), {1}, {60000.0}, 1e-6);
  expect_array(L::cross_entropy(xh, array({0})), {1}, {0.0}, 1e-6);
  // Infinite logit (MLX gives the same): -inf classes contribute nothing.
  float inf = std::numeric_limits<float>::infinity();
  array xi({0.0f, -inf}, {1, 2});
  expect_array(L::cross_entropy(xi, array({0})), {1}, {0.0}, 1e-6);
}

TEST(CrossEntropy, EmptyBatch) {
  array x = zeros({0, 5});
  array t = zeros({0}, int32);
  expect_array(L::cross_entropy(x, t), {0}, {});
  expect_array(L::cross_entropy(x, t, "sum"), {}, {0.0});
}

TEST(CrossEntropy, FusedMatchesOps) {
  for (Dtype d : {float32, float64}) {
    for (double ls : {0.0, 0.15}) {
      for (int axis : {-1, 0}) {
        array x = astype(uniform_values({33, 37}, -4, 4, 5), d);
        int classes = axis == -1 ? 37 : 33;
        int rows = axis == -1 ? 33 : 37;
        array t = class_indices({rows}, classes, 6, int64);
        double tol = d == float32 ? 2e-6 : 1e-13;
        array fused = fast::softmax_cross_entropy(x, t, axis, ls);
        array ref = ce_reference(x, t, axis, ls);
        eval(fused, ref);
        expect_array(fused, {rows}, ref.to_vector<double>(), tol);
        // Gradients of a weighted sum (a non-uniform cotangent) agree too.
        array w = astype(uniform_values({rows}, 0.5, 1.5, 7), d);
        auto gf = grad([&](const array& z) { return sum(fast::softmax_cross_entropy(z, t, axis, ls) * w); })(x);
        auto gr = grad([&](const array& z) { return sum(ce_reference(z, t, axis, ls) * w); })(x);
        eval(gf, gr);
        expect_array(gf, x.shape(), gr.to_vector<double>(), tol);
      }
    }
  }
  // Large enough to run on several threads, with a 3-d strided view.
  array big = transpose(astype(uniform_values({256, 4, 200}, -6, 6, 8), float32), {1, 2, 0});  // (4, 200, 256)
  array tb = class_indices({4, 200}, 256, 9);
  array fused = L::cross_entropy(big, tb, "mean");
  array ref = mean(ce_reference(big, tb, -1, 0.0));
  expect_array(fused, {}, {ref.item<double>()}, 1e-6);
  auto gf = grad([&](const array& z) { return L::cross_entropy(z, tb, "mean"); })(big);
  auto gr = grad([&](const array& z) { return mean(ce_reference(z, tb, -1, 0.0)); })(big);
  expect_array(gf, big.shape(), gr.to_vector<double>(), 1e-8);
  // Half logits: the fused kernel computes in float32 and rounds once at the end.
  array xh = astype(uniform_values({8, 11}, -3, 3, 10), float16);
  array th = class_indices({8}, 11, 11);
  array lh = L::cross_entropy(xh, th);
  EXPECT_EQ(lh.dtype(), float16);
  array lr = ce_reference(astype(xh, float64), th, -1, 0.0);
  expect_array(lh, {8}, lr.to_vector<double>(), 1e-3);
}

TEST(CrossEntropy, Gradients) {
  array x = uniform_values({4, 5}, -2, 2, 12);
  array t = class_indices({4}, 5, 13);
  for (double ls : {0.0, 0.3}) {
    for (const char* red : {"none", "mean", "sum"}) {
      expect_grads([&](const std::vector<array>& p) { return L::cross_entropy(p[0], t, std::nullopt, -1, ls, red); },
                   {x}, {0});
    }
    // Classes along axis 0, with weights (differentiated too).
    array tc = class_indices({5}, 4, 14);
    array w = uniform_values({5}, 0.5, 2, 15);
    expect_grads([&](const std::vector<array>& p) { return L::cross_entropy(p[0], tc, p[1], 0, ls, "mean"); },
                 {x, w}, {0, 1});
  }
  // Probability targets: gradients for the logits and the targets.
  array pr = softmax(uniform_values({4, 5}, -1, 1, 16), -1);
  expect_grads([&](const std::vector<array>& p) { return L::cross_entropy(p[0], p[1], std::nullopt, -1, 0.2, "sum"); },
               {x, pr}, {0, 1});
}

TEST(CrossEntropy, HigherOrderGradients) {
  // The fused backward has its own vjp and jvp: check the gradient map x -> dL/dx (with a cotangent
  // g) against finite differences, for x and for g.
  array x = uniform_values({3, 6}, -2, 2, 17);
  array t = class_indices({3}, 6, 18);
  array g = uniform_values({3}, 0.5, 1.5, 19);
  for (double ls : {0.0, 0.25}) {
    for (int axis : {-1, 0}) {
      array tt = axis == -1 ? t : class_indices({6}, 3, 20);
      array gg = axis == -1 ? g : uniform_values({6}, 0.5, 1.5, 21);
      expect_grads(
          [&](const std::vector<array>& p) {
            auto [out, cots] = vjp([&](const std::vector<array>& q) { return std::vector<array>{fast::softmax_cross_entropy(q[0], tt, axis, ls)}; },
                                   {p[0]}, {p[1]});
            return cots[0];
          },
          {x, gg}, {0, 1});
    }
  }
  // Second derivative of the summed loss against the closed form: the Hessian-vector product with
  // v is s * (v - sum(s v)) per row.
  array v = uniform_values({3, 6}, -1, 1, 22);
  auto gfun = [&](const array& z) { return grad([&](const array& w) { return L::cross_entropy(w, t, "sum"); })(z); };
  auto [gx, hv] = jvp(gfun, x, v);
  array s = softmax(x, -1);
  array expected = s * (v - sum(s * v, -1, true));
  expect_array(hv, {3, 6}, expected.to_vector<double>(), 1e-12);
}

TEST(CrossEntropy, BadInputs) {
  array x = zeros({4, 10});
  array t = zeros({4}, int32);
  EXPECT_THROW_MSG(L::cross_entropy(x, t, "avg"), std::invalid_argument, "[cross_entropy] reduction must be 'none', 'mean' or 'sum'; got 'avg'");
  EXPECT_THROW_MSG(L::cross_entropy(x, zeros({4}, float32)), std::invalid_argument,
                   "[cross_entropy] class-index targets must have an integer dtype; got float32 targets of shape (4)");
  EXPECT_THROW_MSG(L::cross_entropy(x, zeros({4}, bool_)), std::invalid_argument, "got bool targets");
  EXPECT_THROW_MSG(L::cross_entropy(x, zeros({5}, int32)), std::invalid_argument,
                   "class-index targets of shape (5) do not match logits of shape (4,10) without the class axis 1: expected (4)");
  EXPECT_THROW_MSG(L::cross_entropy(x, zeros({4, 9})), std::invalid_argument,
                   "probability targets of shape (4,9) do not match logits of shape (4,10)");
  EXPECT_THROW_MSG(L::cross_entropy(x, zeros({4, 10, 1})), std::invalid_argument,
                   "targets of shape (4,10,1) fit neither logits of shape (4,10)");
  EXPECT_THROW_MSG(L::cross_entropy(x, t, std::nullopt, 2), std::out_of_range, "[cross_entropy] axis 2 is out of range");
  EXPECT_THROW_MSG(L::cross_entropy(array(1.0f), array(0)), std::invalid_argument, "logits must have at least one axis");
  EXPECT_THROW_MSG(L::cross_entropy(x, t, std::nullopt, -1, 1.0), std::invalid_argument,
                   "[cross_entropy] label_smoothing must be in [0, 1); got 1");
  EXPECT_THROW_MSG(L::cross_entropy(x, t, std::nullopt, -1, -0.1), std::invalid_argument, "got -0.1");
  EXPECT_THROW_MSG(L::cross_entropy(x, t, ones({4, 1})), std::invalid_argument,
                   "[cross_entropy] weights of shape (4,1) must have the shape of the per-sample loss, (4)");
  EXPECT_THROW_MSG(L::cross_entropy(zeros({0, 0}), zeros({2}, int32)), std::invalid_argument, "do not match");
  EXPECT_THROW_MSG(L::cross_entropy(zeros({2, 0}), zeros({2}, int32)), std::invalid_argument, "have no classes along axis 1");
  // Class indices out of range: known at build time when the targets are evaluated...
  EXPECT_THROW_MSG(L::cross_entropy(x, array({0, 1, 10, 2})), std::out_of_range,
                   "[cross_entropy] class index 10 is out of range for 10 classes (axis 1 of logits of shape (4,10))");
  EXPECT_THROW_MSG(L::cross_entropy(x, array({0, -1, 1, 2})), std::out_of_range, "class index -1 is out of range");
  EXPECT_THROW_MSG(fast::softmax_cross_entropy(x, array({0, 1, 10, 2})), std::out_of_range, "[softmax_cross_entropy] class index 10");
  // ... and when the graph runs otherwise.
  array lazy = array({0, 1, 5, 2}) * 2;
  array loss = L::cross_entropy(x, lazy, "mean");
  EXPECT_THROW_MSG(eval(loss), std::out_of_range, "class index 10 is out of range for 10 classes");
  array lazy_neg = array({0, 1, 1, 2}) - 2;
  auto g = grad([&](const array& z) { return L::cross_entropy(z, lazy_neg, "sum"); })(x);
  EXPECT_THROW_MSG(eval(g), std::out_of_range, "class index -2 is out of range");
  // Nothing was lost: the inputs are still usable.
  expect_array(L::cross_entropy(x, t, "sum"), {}, {4 * std::log(10.0)}, 1e-6);
}

// ---- binary cross entropy ----

TEST(BinaryCrossEntropy, ClosedForms) {
  // MLX's doc examples: softplus(x) - x t, mean over 4 (default reduction "mean").
  array logits({0.105361f, 0.223144f, 1.20397f, 0.916291f});
  array targets({0, 0, 1, 1});
  array l = L::binary_cross_entropy(logits, targets);
  EXPECT_EQ(l.ndim(), 0u);
  EXPECT_EQ(l.dtype(), float32);
  expect_array(l, {}, {0.5392455484668962}, 1e-6);
  // Probabilities: (2 * -log 0.9 + 2 * -log 0.4) / 4.
  array probs({0.1f, 0.1f, 0.4f, 0.4f});
  expect_array(L::binary_cross_entropy(probs, targets, std::nullopt, false), {}, {0.5108256237659906}, 1e-6);
  // Reductions and weights.
  array x({0.0, 2.0, -1.0}, float64);
  array y({1.0, 0.0, 0.5}, float64);
  // log 2 - 0;  log(1 + e^2) - 0;  log(1 + e^-1) + 0.5
  std::vector<double> per{0.6931471805599453, 2.1269280110429727, 0.31326168751822286 + 0.5};
  expect_array(L::binary_cross_entropy(x, y, "none"), {3}, per, 1e-12);
  expect_array(L::binary_cross_entropy(x, y, "sum"), {}, {per[0] + per[1] + per[2]}, 1e-12);
  array w({1.0, 0.5, 2.0}, float64);
  expect_array(L::binary_cross_entropy(x, y, w, "none"), {3}, {per[0], 0.5 * per[1], 2 * per[2]}, 1e-12);
  expect_array(L::binary_cross_entropy(x, y, w, std::string("sum")), {}, {per[0] + 0.5 * per[1] + 2 * per[2]}, 1e-12);
  expect_array(L::binary_cross_entropy(x, y, w, true, "mean"), {}, {(per[0] + 0.5 * per[1] + 2 * per[2]) / 3}, 1e-12);
}

TEST(BinaryCrossEntropy, ExtremeInputs) {
  // Logits: softplus(1000) - 0 = 1000, softplus(-1000) = 0, softplus(-1000) + 1000 = 1000.
  array x({1000.0f, -1000.0f, -1000.0f, 30.0f});
  array y({0.0f, 0.0f, 1.0f, 1.0f});
  expect_array(L::binary_cross_entropy(x, y, "none"), {4}, {1000.0, 0.0, 1000.0, 9.357622968839299e-14}, 1e-6);
  auto g = grad([&](const array& z) { return L::binary_cross_entropy(z, y, "sum"); })(x);
  // d/dx = sigmoid(x) - y.
  expect_array(g, {4}, {1.0, 0.0, -1.0, 0.0}, 1e-6);
  // Probabilities at 0 and 1: log is clipped at -100 and the gradient stays finite.
  array p({0.0f, 1.0f, 0.0f, 1.0f});
  array t({0.0f, 1.0f, 1.0f, 0.0f});
  expect_array(L::binary_cross_entropy(p, t, std::nullopt, false, "none"), {4}, {0.0, 0.0, 100.0, 100.0}, 1e-6);
  auto gp = grad([&](const array& z) { return L::binary_cross_entropy(z, t, std::nullopt, false, "sum"); })(p);
  // Where the clipped term is active its gradient is 0; the other term gives -t/p + (1-t)/(1-p).
  expect_array(gp, {4}, {1.0, -1.0, 0.0, 0.0}, 1e-6);
}

TEST(BinaryCrossEntropy, Gradients) {
  array x({-3.0, -0.5, 0.0, 0.7, 4.0}, float64);
  array y({0.0, 1.0, 0.3, 1.0, 0.0}, float64);
  // Includes x = 0, where softplus's pieces meet.
  expect_grads([&](const std::vector<array>& p) { return L::binary_cross_entropy(p[0], p[1], "none"); }, {x, y});
  array w({1.0, 2.0, 0.5, 1.5, 1.0}, float64);
  expect_grads([&](const std::vector<array>& p) { return L::binary_cross_entropy(p[0], p[1], p[2], true, "mean"); },
               {x, y, w});
  array pr({0.1, 0.35, 0.5, 0.8, 0.95}, float64);
  expect_grads([&](const std::vector<array>& p) { return L::binary_cross_entropy(p[0], p[1], std::nullopt, false, "sum"); },
               {pr, y});
}

TEST(BinaryCrossEntropy, BadInputs) {
  array x = zeros({3});
  EXPECT_THROW_MSG(L::binary_cross_entropy(x, zeros({3, 1})), std::invalid_argument,
                   "[binary_cross_entropy] inputs of shape (3) and targets of shape (3,1) must have the same shape");
  EXPECT_THROW_MSG(L::binary_cross_entropy(x, x, "total"), std::invalid_argument,
                   "[binary_cross_entropy] reduction must be 'none', 'mean' or 'sum'; got 'total'");
  // A string literal after the weights is the reduction, not with_logits.
  EXPECT_THROW_MSG(L::binary_cross_entropy(x, x, ones({3}), "nope"), std::invalid_argument, "got 'nope'");
  EXPECT_THROW_MSG(L::binary_cross_entropy(x, x, ones({2})), std::invalid_argument,
                   "[binary_cross_entropy] weights of shape (2) must have the shape of the per-sample loss, (3)");
}

// ---- nll ----

TEST(NllLoss, ClosedFormsAndGradients) {
  array lp({-0.5, -1.0, -2.0, -0.1, -3.0, -4.0}, {2, 3}, float64);
  array t({1, 0});
  expect_array(L::nll_loss(lp, t), {2}, {1.0, 0.1}, 1e-12);
  expect_array(L::nll_loss(lp, t, "mean"), {}, {0.55}, 1e-12);
  expect_array(L::nll_loss(lp, t, -1, "sum"), {}, {1.1}, 1e-12);
  // Along axis 0: columns are the distributions.
  expect_array(L::nll_loss(lp, array({1, 0, 1}, int64), 0), {3}, {0.1, 1.0, 4.0}, 1e-12);
  // nll of log_softmax is cross entropy.
  array x = uniform_values({4, 6}, -2, 2, 23);
  array tc = class_indices({4}, 6, 24);
  expect_array(L::nll_loss(log_softmax(x, -1), tc), {4}, L::cross_entropy(x, tc).to_vector<double>(), 1e-12);
  expect_grads([&](const std::vector<array>& p) { return L::nll_loss(p[0], tc, "mean"); }, {x}, {0});
  EXPECT_THROW_MSG(L::nll_loss(lp, array({1.0f, 0.0f})), std::invalid_argument,
                   "[nll_loss] class-index targets must have an integer dtype");
  EXPECT_THROW_MSG(L::nll_loss(lp, array({1, 0, 0})), std::invalid_argument,
                   "[nll_loss] class-index targets of shape (3) do not match inputs of shape (2,3)");
  EXPECT_THROW_MSG(L::nll_loss(lp, array({3, 0})), std::out_of_range, "[nll_loss] class index 3 is out of range for 3 classes");
  EXPECT_THROW_MSG(L::nll_loss(lp, t, 5), std::out_of_range, "[nll_loss] axis 5");
  EXPECT_THROW_MSG(L::nll_loss(lp, t, "max"), std::invalid_argument, "[nll_loss] reduction must be");
}

// ---- regression losses ----

TEST(RegressionLosses, MseAndL1) {
  array p({1.0, 2.0, 3.0, 4.0}, {2, 2}, float64);
  array y({1.5, 0.0, 3.0, 7.0}, {2, 2}, float64);
  // differences -0.5, 2, 0, -3
  expect_array(L::mse_loss(p, y), {}, {(0.25 + 4 + 0 + 9) / 4}, 1e-12);  // default "mean"
  expect_array(L::mse_loss(p, y, "none"), {2, 2}, {0.25, 4, 0, 9}, 1e-12);
  expect_array(L::mse_loss(p, y, "sum"), {}, {13.25}, 1e-12);
  expect_array(L::l1_loss(p, y), {}, {5.5 / 4}, 1e-12);
  expect_array(L::l1_loss(p, y, "none"), {2, 2}, {0.5, 2, 0, 3}, 1e-12);
  expect_array(L::l1_loss(p, y, "sum"), {}, {5.5}, 1e-12);
  // float32 and a strided view.
  expect_array(L::mse_loss(transpose(astype(p, float32)), transpose(astype(y, float32)), "none"), {2, 2}, {0.25, 0, 4, 9},
               1e-6);
  array a = uniform_values({3, 4}, -1, 1, 25), b = uniform_values({3, 4}, -1, 1, 26);
  expect_grads([&](const std::vector<array>& q) { return L::mse_loss(q[0], q[1]); }, {a, b});
  expect_grads([&](const std::vector<array>& q) { return L::l1_loss(q[0], q[1], "sum"); }, {a, b});
  EXPECT_THROW_MSG(L::mse_loss(p, zeros({4})), std::invalid_argument,
                   "[mse_loss] predictions of shape (2,2) and targets of shape (4) must have the same shape");
  EXPECT_THROW_MSG(L::l1_loss(p, zeros({2})), std::invalid_argument, "[l1_loss] predictions of shape (2,2)");
  EXPECT_THROW_MSG(L::mse_loss(p, y, "Mean"), std::invalid_argument, "[mse_loss] reduction must be 'none', 'mean' or 'sum'; got 'Mean'");
  EXPECT_THROW_MSG(L::l1_loss(p, y, ""), std::invalid_argument, "[l1_loss] reduction must be");
}

TEST(RegressionLosses, SmoothL1) {
  array p({0.0, 0.0, 0.0, 0.0}, float64);
  array y({0.5, -1.0, 2.0, -0.2}, float64);
  // beta 1: |d| < 1 -> d^2 / 2, else |d| - 0.5: 0.125, 0.5, 1.5, 0.02.
  expect_array(L::smooth_l1_loss(p, y, "none"), {4}, {0.125, 0.5, 1.5, 0.02}, 1e-12);
  expect_array(L::smooth_l1_loss(p, y), {}, {(0.125 + 0.5 + 1.5 + 0.02) / 4}, 1e-12);  // default "mean"
  // beta 0.5: 0.5 -> 0.5 - 0.25; 1 -> 0.75; 2 -> 1.75; 0.2 -> 0.04 / 2 / 0.5 = 0.04.
  expect_array(L::smooth_l1_loss(p, y, 0.5, "none"), {4}, {0.25, 0.75, 1.75, 0.04}, 1e-12);
  expect_array(L::smooth_l1_loss(p, y, 0.5, "sum"), {}, {2.79}, 1e-12);
  // beta 0 is the L1 loss, with finite gradients.
  expect_array(L::smooth_l1_loss(p, y, 0.0, "none"), {4}, {0.5, 1.0, 2.0, 0.2}, 1e-12);
  auto g = grad([&](const array& z) { return L::smooth_l1_loss(z, y, 0.0, "sum"); })(p);
  expect_array(g, {4}, {-1, 1, -1, 1}, 1e-12);
  array a({0.3, -1.7, 2.2, 0.05}, float64), b({0.0, 0.1, 0.4, -0.6});
  for (double beta : {1.0, 0.5}) {
    expect_grads([&](const std::vector<array>& q) { return L::smooth_l1_loss(q[0], q[1], beta, "none"); }, {a, b});
  }
  EXPECT_THROW_MSG(L::smooth_l1_loss(p, y, -1.0), std::invalid_argument, "[smooth_l1_loss] beta must be >= 0; got -1");
  EXPECT_THROW_MSG(L::smooth_l1_loss(p, zeros({3})), std::invalid_argument, "[smooth_l1_loss] predictions of shape (4)");
  EXPECT_THROW_MSG(L::smooth_l1_loss(p, y, "x"), std::invalid_argument, "[smooth_l1_loss] reduction must be");
}

TEST(RegressionLosses, Huber) {
  array x({0.0, 0.0, 0.0, 0.0}, float64);
  array y({0.5, -1.0, 2.0, -3.0}, float64);
  // delta 1: |a| <= 1 -> a^2 / 2, else |a| - 0.5: 0.125, 0.5, 1.5, 2.5. Default reduction "none".
  expect_array(L::huber_loss(x, y), {4}, {0.125, 0.5, 1.5, 2.5}, 1e-12);
  // delta 2: 0.125, 0.5, 2 (the boundary), 2 * (3 - 1) = 4.
  expect_array(L::huber_loss(x, y, 2.0, "none"), {4}, {0.125, 0.5, 2.0, 4.0}, 1e-12);
  expect_array(L::huber_loss(x, y, 2.0, "mean"), {}, {6.625 / 4}, 1e-12);
  expect_array(L::huber_loss(x, y, "sum"), {}, {4.625}, 1e-12);
  // The gradient is exact at the boundary |a| = delta: delta * sign(x - y).
  auto g = grad([&](const array& z) { return L::huber_loss(z, y, 2.0, "sum"); })(x);
  expect_array(g, {4}, {-0.5, 1.0, -2.0, 2.0}, 1e-12);
  array a({0.3, -1.7, 2.2, 0.05}, float64), b({0.0, 0.1, 0.4, -0.6});
  expect_grads([&](const std::vector<array>& q) { return L::huber_loss(q[0], q[1], 0.8, "none"); }, {a, b});
  EXPECT_THROW_MSG(L::huber_loss(x, y, 0.0), std::invalid_argument, "[huber_loss] delta must be > 0; got 0");
  EXPECT_THROW_MSG(L::huber_loss(x, zeros({4, 1})), std::invalid_argument, "[huber_loss] inputs of shape (4) and targets of shape (4,1)");
  EXPECT_THROW_MSG(L::huber_loss(x, y, "all"), std::invalid_argument, "[huber_loss] reduction must be");
}

TEST(KlDivLoss, ClosedFormsAndGradients) {
  // KL(q || p) = sum q log(q / p) with q = (0.5, 0.5), p = (0.25, 0.75):
  // 0.5 log 2 + 0.5 log(2/3) = 0.5 log(4/3).
  array q({0.5, 0.5, 0.1, 0.9}, {2, 2}, float64);
  array p({0.25, 0.75, 0.1, 0.9}, {2, 2}, float64);
  array lq = log(q), lp = log(p);
  expect_array(L::kl_div_loss(lp, lq), {2}, {0.5 * std::log(4.0 / 3.0), 0.0}, 1e-12);  // default "none"
  expect_array(L::kl_div_loss(lp, lq, "sum"), {}, {0.5 * std::log(4.0 / 3.0)}, 1e-12);
  expect_array(L::kl_div_loss(lp, lq, "mean"), {}, {0.25 * std::log(4.0 / 3.0)}, 1e-12);
  // Along axis 0 (columns): q col0 = (0.5, 0.1), p col0 = (0.25, 0.1).
  array q0({0.5, 0.5, 0.5, 0.5}, {2, 2}, float64), p0({0.25, 0.75, 0.75, 0.25}, {2, 2}, float64);
  double kl = 0.5 * std::log(2.0) + 0.5 * std::log(2.0 / 3.0);
  expect_array(L::kl_div_loss(log(p0), log(q0), 0), {2}, {kl, kl}, 1e-12);
  array a = log_softmax(uniform_values({3, 4}, -1, 1, 27), -1), b = log_softmax(uniform_values({3, 4}, -1, 1, 28), -1);
  expect_grads([&](const std::vector<array>& r) { return L::kl_div_loss(r[0], r[1], -1, "mean"); }, {a, b});
  EXPECT_THROW_MSG(L::kl_div_loss(lp, zeros({2})), std::invalid_argument, "[kl_div_loss] inputs of shape (2,2) and targets of shape (2)");
  EXPECT_THROW_MSG(L::kl_div_loss(lp, lq, 2), std::out_of_range, "[kl_div_loss] axis 2");
  EXPECT_THROW_MSG(L::kl_div_loss(array(0.0, float64), array(0.0, float64)), std::invalid_argument, "[kl_div_loss] inputs must have at least one axis");
  EXPECT_THROW_MSG(L::kl_div_loss(lp, lq, "avg"), std::invalid_argument, "[kl_div_loss] reduction must be");
}

// softmax / log_softmax over the last axis: the fused kernel against the composition it replaces,
// known values, special values, finite differences.
#include "../test_utils.h"
#include "loom/core/primitive.h"

namespace loom {
namespace {

using loom::testing::kInfF;
using loom::testing::kNaNF;
using testing::lcg_uniform;

// The composition, op by op over the last axis (the max shift, 0 where that max is -inf; a +inf
// max stays, making its row NaN as in numpy, PyTorch and MLX).
array shift(const array& x) {
  array m = stop_gradient(max(x, -1, true));
  return where(logical_and(isinf(m), m < 0.0f), zeros_like(m), m);
}
array composed(const array& x, bool take_log) {
  array s = x - shift(x);
  if (take_log) return s - log(sum(exp(s), -1, true));
  array e = exp(s);
  return e / sum(e, -1, true);
}
array fused(const array& x, bool take_log) { return take_log ? log_softmax(x, -1) : softmax(x, -1); }

// Same shape, NaNs and infinities in the same places, other values within tol (relative).
void expect_close(array a, array b, double tol) {
  ASSERT_EQ(a.shape(), b.shape());
  auto x = a.to_vector<double>(), y = b.to_vector<double>();
  for (size_t i = 0; i < x.size(); ++i) {
    if (std::isnan(y[i]) || std::isinf(y[i])) {
      EXPECT_EQ(std::isnan(x[i]), std::isnan(y[i])) << "at " << i << ": " << x[i] << " vs " << y[i];
      if (std::isinf(y[i])) EXPECT_EQ(x[i], y[i]) << "at " << i;
    } else {
      EXPECT_NEAR(x[i], y[i], tol * (1 + std::abs(y[i]))) << "at " << i;
    }
  }
}

// The gradient of sum(f(x) * g) with the fused op and with the composition agree.
void expect_same_gradients(const array& x, const array& g, bool take_log, double tol) {
  auto loss = [&](bool use_fused) {
    return [&, use_fused](const std::vector<array>& p) {
      return sum((use_fused ? fused(p[0], take_log) : composed(p[0], take_log)) * g);
    };
  };
  auto g1 = value_and_grad(ScalarVectorFn(loss(true)))({x}).second;
  auto g2 = value_and_grad(ScalarVectorFn(loss(false)))({x}).second;
  expect_close(g1[0], g2[0], tol);
}

TEST(SoftmaxFused, KnownValues) {
  array x({1.0f, 2.0f, 3.0f}, {1, 3});
  testing::expect_array(softmax(x), {1, 3}, {0.09003057317038043, 0.24472847105479759, 0.6652409557748217}, 1e-6);
  // log_softmax = x - logsumexp(x), logsumexp(1, 2, 3) = 3.4076059644443806.
  testing::expect_array(log_softmax(x), {1, 3}, {-2.4076059644443806, -1.4076059644443806, -0.4076059644443806}, 1e-6);
  // The last axis, named either way, is the fused primitive.
  EXPECT_EQ(std::string(softmax(x, -1).primitive().name()), "Softmax");
  EXPECT_EQ(std::string(softmax(x, 1).primitive().name()), "Softmax");
  EXPECT_EQ(std::string(log_softmax(x, std::vector<int>{-1}).primitive().name()), "LogSoftmax");
  // Integers give float32.
  array i = softmax(array({1, 2, 3}));
  EXPECT_EQ(i.dtype(), float32);
  testing::expect_array(i, {3}, {0.09003057317038043, 0.24472847105479759, 0.6652409557748217}, 1e-6);
  EXPECT_EQ(log_softmax(array({1, 2, 3})).dtype(), float32);
}

TEST(SoftmaxFused, MatchesTheCompositionAndItsGradients) {
  for (bool take_log : {false, true}) {
    SCOPED_TRACE(take_log ? "log_softmax" : "softmax");
    // 1-D; 3-D with rows of 130 (not a multiple of the 16 lanes), enough rows to split over threads.
    for (Shape s : {Shape{37}, Shape{3, 100, 130}}) {
      array x = astype(lcg_uniform(s, -6, 6, 1), float32);
      array g = astype(lcg_uniform(s, -1, 1, 2), float32);
      expect_close(fused(x, take_log), composed(x, take_log), 2e-6);
      expect_same_gradients(x, g, take_log, 2e-6);
    }
    // A transposed (non-contiguous) input.
    array t = transpose(astype(lcg_uniform({130, 7}, -4, 4, 3), float32));
    eval(t);
    ASSERT_FALSE(t.flags().row_contiguous);
    array gt = astype(lcg_uniform({7, 130}, -1, 1, 4), float32);
    expect_close(fused(t, take_log), composed(t, take_log), 2e-6);
    expect_same_gradients(t, gt, take_log, 2e-6);
    // Very large values: the shift keeps them finite.
    array big = astype(lcg_uniform({4, 50}, 990, 1010, 5), float32);
    expect_close(fused(big, take_log), composed(big, take_log), 2e-6);
    expect_same_gradients(big, astype(lcg_uniform({4, 50}, -1, 1, 6), float32), take_log, 2e-6);
    // float64 stays float64, to float64 rounding.
    array d = lcg_uniform({5, 33}, -8, 8, 7);
    array yd = fused(d, take_log);
    EXPECT_EQ(yd.dtype(), float64);
    expect_close(yd, composed(d, take_log), 1e-13);
    expect_same_gradients(d, lcg_uniform({5, 33}, -1, 1, 8), take_log, 1e-13);
    // float16 in, float16 out (computed in float32).
    array h = astype(lcg_uniform({6, 40}, -4, 4, 9), float16);
    array yh = fused(h, take_log);
    EXPECT_EQ(yh.dtype(), float16);
    expect_close(astype(yh, float32), composed(astype(h, float32), take_log), 2e-3);
    EXPECT_EQ(fused(astype(h, bfloat16), take_log).dtype(), bfloat16);
  }
}

TEST(SoftmaxFused, SpecialValuesMatchTheComposition) {
  // Rows of 3 (the scalar tail) and of 40 (the 16 lanes and a tail).
  std::vector<std::vector<float>> rows = {
      {-kInfF, -kInfF, -kInfF},  // 0 / 0: NaN for softmax, -inf - -inf: NaN for log_softmax
      {kInfF, 1.0f, 2.0f},       // +inf: x - max is NaN there, so the whole row is NaN
      {kInfF, kInfF, 0.0f},
      {-kInfF, 0.0f, -kInfF},
      {kNaNF, 1.0f, 2.0f},  // NaN anywhere: the whole row is NaN
      {kNaNF, kInfF, -kInfF},
      {1000.0f, 0.0f, -1000.0f},
  };
  for (bool take_log : {false, true}) {
    SCOPED_TRACE(take_log ? "log_softmax" : "softmax");
    for (const auto& r : rows) {
      array x(r, {1, 3});
      expect_close(fused(x, take_log), composed(x, take_log), 1e-6);
      // The row's values at 5, 21 and 38 among finite ones (among -inf for the all -inf row).
      const bool all_neg_inf = std::all_of(r.begin(), r.end(), [](float v) { return v == -kInfF; });
      std::vector<float> wide(40);
      for (int j = 0; j < 40; ++j) wide[j] = all_neg_inf ? -kInfF : static_cast<float>(j % 7) - 3.0f;
      wide[5] = r[0], wide[21] = r[1], wide[38] = r[2];
      array w(wide, {1, 40});
      expect_close(fused(w, take_log), composed(w, take_log), 1e-6);
    }
    // The values themselves, for the all -inf row and the +inf row.
    testing::expect_array(fused(array(rows[0], {3}), take_log), {3}, {NAN, NAN, NAN});
    testing::expect_array(fused(array(rows[1], {3}), take_log), {3}, {NAN, NAN, NAN});
    // An empty last axis, and no rows.
    testing::expect_array(fused(zeros({3, 0}), take_log), {3, 0}, {});
    testing::expect_array(fused(zeros({0, 3}), take_log), {0, 3}, {});
    EXPECT_EQ(fused(zeros({2, 0}, int32), take_log).dtype(), float32);
  }
}

TEST(SoftmaxFused, GradientsMatchFiniteDifferences) {
  array x = lcg_uniform({3, 5}, -2, 2, 10), g = lcg_uniform({3, 5}, -1, 1, 11);
  auto sm = [](const std::vector<array>& p) { return std::vector<array>{softmax(p[0], -1)}; };
  auto lsm = [](const std::vector<array>& p) { return std::vector<array>{log_softmax(p[0], -1)}; };
  auto r = check_grads(sm, {x});
  EXPECT_TRUE(r.ok) << r.report;
  r = check_grads(lsm, {x});
  EXPECT_TRUE(r.ok) << r.report;
  // The gradient (written with ops, from the output y and the cotangent) as a function
  // of x and the cotangent: its own vjp and jvp, and the forward's.
  auto backward = [&](const VectorFn& f) {
    return [f](const std::vector<array>& p) { return vjp(f, {p[0]}, {p[1]}).second; };
  };
  r = check_grads(backward(sm), {x, g});
  EXPECT_TRUE(r.ok) << r.report;
  r = check_grads(backward(lsm), {x, g});
  EXPECT_TRUE(r.ok) << r.report;
}

TEST(SoftmaxFused, OtherAxesUseTheComposition) {
  array x = astype(lcg_uniform({4, 6, 5}, -3, 3, 12), float32);
  for (bool take_log : {false, true}) {
    SCOPED_TRACE(take_log ? "log_softmax" : "softmax");
    for (auto axes : {std::vector<int>{0}, std::vector<int>{1}, std::vector<int>{-2}, std::vector<int>{1, 2}}) {
      array y = take_log ? log_softmax(x, axes) : softmax(x, axes);
      const std::string name = y.primitive().name();
      EXPECT_NE(name, "Softmax");
      EXPECT_NE(name, "LogSoftmax");
      // Moving the normalized axes last (merged into one) turns them into the fused op's last axis.
      array moved = axes.size() == 2 ? reshape(x, {4, 30}) : moveaxis(x, axes[0], -1);
      array ref = fused(moved, take_log);
      if (axes.size() == 2) {
        ref = reshape(ref, {4, 6, 5});
      } else {
        ref = moveaxis(ref, -1, axes[0]);
      }
      expect_close(y, ref, 2e-6);
    }
  }
  auto f = [](const std::vector<array>& p) { return std::vector<array>{softmax(p[0], 0), log_softmax(p[0], 0)}; };
  auto r = check_grads(f, {lcg_uniform({3, 4}, -2, 2, 13)});
  EXPECT_TRUE(r.ok) << r.report;
}

}  // namespace
}  // namespace loom

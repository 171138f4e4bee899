// rms_norm: the fused kernel against the composition it replaces, known values, finite differences.
#include "../test_utils.h"

namespace loom {
namespace {

using testing::lcg_uniform;

array rms_norm_composed(const array& x, const std::optional<array>& w, double eps) {
  array y = x * rsqrt(mean(square(x), -1, true) + eps);
  if (w) y = y * *w;
  return y;
}

void expect_rms_norm_close(array a, array b, double tol) {
  ASSERT_EQ(a.shape(), b.shape());
  auto x = a.to_vector<double>(), y = b.to_vector<double>();
  for (size_t i = 0; i < x.size(); ++i) EXPECT_NEAR(x[i], y[i], tol * (1 + std::abs(y[i]))) << "at " << i;
}

TEST(RMSNormFused, KnownValues) {
  // Row (1, 2, 3): mean of squares 14/3, so (1, 2, 3) / sqrt(14/3) = (0.4629100, 0.9258201, 1.3887301).
  array x({1.0f, 2.0f, 3.0f}, {1, 3});
  testing::expect_array(fast::rms_norm(x, std::nullopt, 0.0), {1, 3}, {0.4629100499, 0.9258200998, 1.3887301497}, 1e-6);
  testing::expect_array(fast::rms_norm(x, array({2.0f, 1.0f, 0.5f}), 0.0), {1, 3},
                        {2 * 0.4629100499, 0.9258200998, 0.5 * 1.3887301497}, 1e-6);
  // eps enters under the root: (3, 4) has mean of squares 12.5.
  testing::expect_array(fast::rms_norm(array({3.0f, 4.0f}), std::nullopt, 0.5), {2}, {3 / std::sqrt(13.0), 4 / std::sqrt(13.0)},
                        1e-6);
  // Integers give float32.
  array i = fast::rms_norm(array({1, 2, 3}, {1, 3}), std::nullopt, 0.0);
  EXPECT_EQ(i.dtype(), float32);
  testing::expect_array(i, {1, 3}, {0.4629100499, 0.9258200998, 1.3887301497}, 1e-6);
}

TEST(RMSNormFused, MatchesTheCompositionAndItsGradients) {
  // 300 rows of 130 features (not a multiple of the 16 lanes), with and without weight.
  array x = astype(lcg_uniform({3, 100, 130}, -3, 5, 1), float32);
  array w = astype(lcg_uniform({130}, 0.5, 1.5, 2), float32);
  array g = astype(lcg_uniform({3, 100, 130}, -1, 1, 4), float32);
  for (int mode = 0; mode < 2; ++mode) {
    std::optional<array> ww = mode > 0 ? std::optional<array>(w) : std::nullopt;
    expect_rms_norm_close(fast::rms_norm(x, ww, 1e-5), rms_norm_composed(x, ww, 1e-5), 2e-6);
    auto loss = [&](bool fused) {
      return [&, fused](const std::vector<array>& p) {
        std::optional<array> pw = ww ? std::optional<array>(p[1]) : std::nullopt;
        return sum((fused ? fast::rms_norm(p[0], pw, 1e-5) : rms_norm_composed(p[0], pw, 1e-5)) * g);
      };
    };
    auto g1 = value_and_grad(ScalarVectorFn(loss(true)), {0, 1})({x, w}).second;
    auto g2 = value_and_grad(ScalarVectorFn(loss(false)), {0, 1})({x, w}).second;
    for (int i = 0; i <= mode; ++i) expect_rms_norm_close(g1[i], g2[i], 2e-4);
  }
  // A strided input (transposed), its gradients, and float16 in, float16 out.
  array t = transpose(astype(lcg_uniform({130, 7}, -2, 2, 5), float32));
  expect_rms_norm_close(fast::rms_norm(t, w, 1e-5), rms_norm_composed(t, w, 1e-5), 2e-6);
  array gt = astype(lcg_uniform({7, 130}, -1, 1, 6), float32);
  auto loss_t = [&](bool fused) {
    return [&, fused](const std::vector<array>& p) {
      return sum((fused ? fast::rms_norm(p[0], p[1], 1e-5) : rms_norm_composed(p[0], p[1], 1e-5)) * gt);
    };
  };
  auto t1 = value_and_grad(ScalarVectorFn(loss_t(true)), {0, 1})({t, w}).second;
  auto t2 = value_and_grad(ScalarVectorFn(loss_t(false)), {0, 1})({t, w}).second;
  for (int i = 0; i < 2; ++i) expect_rms_norm_close(t1[i], t2[i], 2e-4);
  array h = fast::rms_norm(astype(t, float16), std::nullopt);
  EXPECT_EQ(h.dtype(), float16);
  expect_rms_norm_close(astype(h, float32), rms_norm_composed(t, std::nullopt, 1e-5), 5e-3);
}

TEST(RMSNormFused, GradientsMatchFiniteDifferences) {
  array x = lcg_uniform({3, 5}, -2, 2, 6), w = lcg_uniform({5}, 0.5, 1.5, 7);
  auto rn = [](const std::vector<array>& p) { return std::vector<array>{fast::rms_norm(p[0], p[1], 1e-3)}; };
  auto r = check_grads(rn, {x, w});
  EXPECT_TRUE(r.ok) << r.report;
  auto plain = [](const std::vector<array>& p) { return std::vector<array>{fast::rms_norm(p[0], std::nullopt, 1e-3)}; };
  r = check_grads(plain, {x});
  EXPECT_TRUE(r.ok) << r.report;
  // The fused backward (RMSNormBackward) as a function of x, w and the cotangent, and of x and the cotangent.
  array g = lcg_uniform({3, 5}, -1, 1, 9);
  auto backward = [&](const std::vector<array>& p) { return vjp(rn, {p[0], p[1]}, {p[2]}).second; };
  r = check_grads(backward, {x, w, g});
  EXPECT_TRUE(r.ok) << r.report;
  auto plain_backward = [&](const std::vector<array>& p) { return vjp(plain, {p[0]}, {p[1]}).second; };
  r = check_grads(plain_backward, {x, g});
  EXPECT_TRUE(r.ok) << r.report;
}

TEST(RMSNormFused, BadInputsNameTheShapes) {
  EXPECT_THROW_MSG(fast::rms_norm(zeros({2, 4}), zeros({3})), std::invalid_argument,
                   "[rms_norm] weight must have shape (4) to match the last axis of x (2,4), got (3)");
  EXPECT_THROW_MSG(fast::rms_norm(zeros({2, 4}), zeros({4, 1})), std::invalid_argument, "got (4,1)");
  EXPECT_THROW_MSG(fast::rms_norm(array(1.0f), std::nullopt), std::invalid_argument, "[rms_norm] needs an array with at least one axis");
  EXPECT_THROW_MSG(fast::rms_norm(zeros({2, 4}), std::nullopt, -1.0), std::invalid_argument, "[rms_norm] eps must be >= 0");
  EXPECT_EQ(fast::rms_norm(zeros({0, 3}), ones({3})).shape(), (Shape{0, 3}));
}

}  // namespace
}  // namespace loom

// layer_norm: the fused kernel against the composition it replaces, known values, finite differences.
#include "../test_utils.h"

namespace loom {
namespace {

using testing::lcg_uniform;

array layer_norm_composed(const array& x, const std::optional<array>& w, const std::optional<array>& b, double eps) {
  array c = x - mean(x, -1, true);
  array y = c * rsqrt(mean(square(c), -1, true) + eps);
  if (w) y = y * *w;
  if (b) y = y + *b;
  return y;
}

void expect_layer_norm_close(array a, array b, double tol) {
  ASSERT_EQ(a.shape(), b.shape());
  auto x = a.to_vector<double>(), y = b.to_vector<double>();
  for (size_t i = 0; i < x.size(); ++i) EXPECT_NEAR(x[i], y[i], tol * (1 + std::abs(y[i]))) << "at " << i;
}

TEST(LayerNormFused, KnownValues) {
  // Row (1, 2, 3): mean 2, variance 2/3, so (-1, 0, 1) / sqrt(2/3) = (-1.2247449, 0, 1.2247449).
  array x({1.0f, 2.0f, 3.0f}, {1, 3});
  testing::expect_array(fast::layer_norm(x, std::nullopt, std::nullopt, 0.0), {1, 3}, {-1.2247448714, 0, 1.2247448714}, 1e-6);
  testing::expect_array(fast::layer_norm(x, array({2.0f, 1.0f, 0.5f}), array({1.0f, 1.0f, 1.0f}), 0.0), {1, 3},
                        {1 - 2 * 1.2247448714, 1, 1 + 0.5 * 1.2247448714}, 1e-6);
}

TEST(LayerNormFused, MatchesTheCompositionAndItsGradients) {
  // 300 rows of 130 features (not a multiple of the 16 lanes), with and without weight and bias.
  array x = astype(lcg_uniform({3, 100, 130}, -3, 5, 1), float32);
  array w = astype(lcg_uniform({130}, 0.5, 1.5, 2), float32), b = astype(lcg_uniform({130}, -1, 1, 3), float32);
  array g = astype(lcg_uniform({3, 100, 130}, -1, 1, 4), float32);
  for (int mode = 0; mode < 3; ++mode) {
    std::optional<array> ww = mode > 0 ? std::optional<array>(w) : std::nullopt;
    std::optional<array> bb = mode > 1 ? std::optional<array>(b) : std::nullopt;
    expect_layer_norm_close(fast::layer_norm(x, ww, bb, 1e-5), layer_norm_composed(x, ww, bb, 1e-5), 2e-6);
    auto loss = [&](bool fused) {
      return [&, fused](const std::vector<array>& p) {
        std::optional<array> pw = ww ? std::optional<array>(p[1]) : std::nullopt;
        std::optional<array> pb = bb ? std::optional<array>(p[2]) : std::nullopt;
        return sum((fused ? fast::layer_norm(p[0], pw, pb, 1e-5) : layer_norm_composed(p[0], pw, pb, 1e-5)) * g);
      };
    };
    auto g1 = value_and_grad(ScalarVectorFn(loss(true)), {0, 1, 2})({x, w, b}).second;
    auto g2 = value_and_grad(ScalarVectorFn(loss(false)), {0, 1, 2})({x, w, b}).second;
    for (int i = 0; i <= mode; ++i) expect_layer_norm_close(g1[i], g2[i], 2e-4);
  }
  // A strided input (transposed) and float16 in, float16 out.
  array t = transpose(astype(lcg_uniform({130, 7}, -2, 2, 5), float32));
  expect_layer_norm_close(fast::layer_norm(t, w, b, 1e-5), layer_norm_composed(t, w, b, 1e-5), 2e-6);
  array h = fast::layer_norm(astype(t, float16), std::nullopt, std::nullopt);
  EXPECT_EQ(h.dtype(), float16);
  expect_layer_norm_close(astype(h, float32), layer_norm_composed(t, std::nullopt, std::nullopt, 1e-5), 5e-3);
}

TEST(LayerNormFused, GradientsMatchFiniteDifferences) {
  array x = lcg_uniform({3, 5}, -2, 2, 6), w = lcg_uniform({5}, 0.5, 1.5, 7), b = lcg_uniform({5}, -1, 1, 8);
  auto ln = [](const std::vector<array>& p) { return std::vector<array>{fast::layer_norm(p[0], p[1], p[2], 1e-3)}; };
  auto r = check_grads(ln, {x, w, b});
  EXPECT_TRUE(r.ok) << r.report;
  // The fused backward (LayerNormBackward) as a function of x, w, b and the cotangent.
  array g = lcg_uniform({3, 5}, -1, 1, 9);
  auto backward = [&](const std::vector<array>& p) {
    return vjp(ln, {p[0], p[1], p[2]}, {p[3]}).second;
  };
  r = check_grads(backward, {x, w, b, g});
  EXPECT_TRUE(r.ok) << r.report;
}

TEST(LayerNormFused, BadInputsNameTheShapes) {
  EXPECT_THROW_MSG(fast::layer_norm(zeros({2, 4}), zeros({3}), std::nullopt), std::invalid_argument, "weight must have shape (4)");
  EXPECT_THROW_MSG(fast::layer_norm(zeros({2, 4}), std::nullopt, zeros({4, 1})), std::invalid_argument, "bias");
  EXPECT_THROW_MSG(fast::layer_norm(array(1.0f), std::nullopt, std::nullopt), std::invalid_argument, "0-d");
}

}  // namespace
}  // namespace loom

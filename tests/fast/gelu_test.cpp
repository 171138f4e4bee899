// fast::gelu: the fused exact GELU against std::erf, the composition it replaces, and finite differences.
#include "../test_utils.h"

namespace loom {
namespace {

double gelu_ref(double x) { return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0))); }
double gelu_grad_ref(double x) {
  return 0.5 * (1 + std::erf(x / std::sqrt(2.0))) + x * std::exp(-0.5 * x * x) / std::sqrt(2 * M_PI);
}

TEST(GeluErf, Float32MatchesTheExactValues) {
  // 20001 points over [-10, 10] (both tails and the cancellation near 0), and the derivative.
  std::vector<float> xs;
  for (int i = -10000; i <= 10000; ++i) xs.push_back(i * 1e-3f);
  array x(xs, {static_cast<int>(xs.size())});
  auto y = fast::gelu(x).to_vector<double>();
  auto [out, g] = vjp([](const array& a) { return fast::gelu(a); }, x, ones_like(x));
  auto gv = g.to_vector<double>();
  for (size_t i = 0; i < xs.size(); ++i) {
    const double v = xs[i];
    ASSERT_NEAR(y[i], gelu_ref(v), 4e-7 * (1 + std::abs(v))) << "gelu at " << v;
    ASSERT_NEAR(gv[i], gelu_grad_ref(v), 1e-6) << "gelu' at " << v;
  }
  // Written into the buffer of an input nothing else needs: a temporary cotangent (and input).
  auto [out2, g2] = vjp([](const array& a) { return fast::gelu(a); }, x * 1.0f, full(x.shape(), 2.0f) * 1.0f);
  auto g2v = g2.to_vector<double>();
  for (size_t i = 0; i < xs.size(); ++i) ASSERT_EQ(g2v[i], 2 * gv[i]) << "gelu' at " << xs[i];
  // Far tails and specials: 0 below, x above, NaN stays NaN.
  testing::expect_array(fast::gelu(array({-1000.0f, -50.0f, 50.0f, 1000.0f})), {4}, {0, 0, 50, 1000});
  EXPECT_TRUE(std::isnan(fast::gelu(array({NAN})).item<float>()));
}

TEST(GeluErf, Float64AndHalfAndViews) {
  array x = testing::lcg_uniform({3, 4}, -4, 4, 3);
  auto y = fast::gelu(x).to_vector<double>(), xv = x.to_vector<double>();
  for (size_t i = 0; i < y.size(); ++i) EXPECT_NEAR(y[i], gelu_ref(xv[i]), 1e-14);
  // A transposed (strided) input and float16 (computed in float32).
  array t = transpose(x);
  auto yt = fast::gelu(t).to_vector<double>(), tv = t.to_vector<double>();
  for (size_t i = 0; i < yt.size(); ++i) EXPECT_NEAR(yt[i], gelu_ref(tv[i]), 1e-14);
  array h = fast::gelu(astype(x, float16));
  EXPECT_EQ(h.dtype(), float16);
  auto hv = h.to_vector<double>();
  for (size_t i = 0; i < hv.size(); ++i) EXPECT_NEAR(hv[i], gelu_ref(xv[i]), 1e-2);
  EXPECT_EQ(fast::gelu(array({2, -1})).dtype(), float32);
}

TEST(GeluErf, GradientsMatchFiniteDifferences) {
  array x = testing::lcg_uniform({2, 5}, -3, 3, 4);
  auto r = check_grads([](const std::vector<array>& p) { return std::vector<array>{fast::gelu(p[0])}; }, {x});
  EXPECT_TRUE(r.ok) << r.report;
  // The fused gradient (GeluBackward) as a function of x and the cotangent g.
  array g = testing::lcg_uniform({2, 5}, -1, 1, 5);
  auto grad_map = [](const std::vector<array>& p) {
    return std::vector<array>{vjp([](const array& a) { return fast::gelu(a); }, p[0], p[1]).second};
  };
  r = check_grads(grad_map, {x, g});
  EXPECT_TRUE(r.ok) << r.report;
}

}  // namespace
}  // namespace loom

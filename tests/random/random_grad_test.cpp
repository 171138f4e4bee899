// Gradients: samples are constants to autograd; permutation(x) is differentiable in x.
#include "../test_utils.h"
#include "loom/ops/random.h"

using namespace loom;
using loom::testing::expect_array;

TEST(RandomGrad, PermutationOfArrayMatchesFiniteDifferences) {
  std::vector<double> v;
  for (int i = 0; i < 12; ++i) v.push_back(0.3 * i - 1.0 + 0.01 * i * i);
  array x(v, {3, 4}, float64);
  for (int axis : {0, 1, -1}) {
    auto r = check_grads(
        [axis](const std::vector<array>& p) {
          // Distinct weights per position, so a wrong (or unpermuted) gradient shows.
          array w = reshape(arange(1.0, 13.0, 1.0, float64), {3, 4});
          array y = random::permutation(p[0], axis, random::key(5));
          return std::vector<array>{y * w + square(y)};
        },
        {x});
    EXPECT_TRUE(r.ok) << "axis " << axis << ": " << r.report;
  }
  // A transposed (non-contiguous) input.
  auto r = check_grads(
      [](const std::vector<array>& p) {
        return std::vector<array>{exp(random::permutation(transpose(p[0]), 0, random::key(6)))};
      },
      {x});
  EXPECT_TRUE(r.ok) << r.report;
}

TEST(RandomGrad, PermutationGradientIsTheInverseShuffle) {
  array k = random::key(9);
  auto idx = random::permutation(5, k).to_vector<int>();
  // f(x) = sum(permutation(x) * c): df/dx[idx[j]] = c[j].
  auto g = grad([&](const array& x) { return sum(random::permutation(x, 0, k) * array({1.0, 2.0, 3.0, 4.0, 5.0})); })(
      array({0.0, 0.0, 0.0, 0.0, 0.0}));
  auto gv = g.to_vector<double>();
  for (int j = 0; j < 5; ++j) EXPECT_EQ(gv[idx[j]], j + 1.0);
}

TEST(RandomGrad, SamplesAreConstantsToAutograd) {
  array k = random::key(3);
  array eps = random::normal({4}, float64, k);
  auto e = eps.to_vector<double>();
  // d/dw sum(w * eps) = eps: the noise is a constant.
  array gw = grad([&](const array& w) { return sum(w * random::normal({4}, float64, k)); })(array(2.0, float64));
  EXPECT_NEAR(gw.item<double>(), e[0] + e[1] + e[2] + e[3], 1e-12);
  // Gradients stop at the parameters of uniform, truncated_normal and bernoulli.
  auto zero_grad = [&](std::function<array(const array&)> f) {
    array g = grad([&](const array& a) { return sum(f(a)); })(array(0.25, float64));
    EXPECT_EQ(g.item<double>(), 0.0);
  };
  zero_grad([&](const array& a) { return random::uniform(a, array(1.0), {8}, float64, k); });
  zero_grad([&](const array& a) { return random::truncated_normal(a, array(2.0), {8}, float64, k); });
  // bernoulli(p) * p: only the explicit factor p carries a derivative, so the gradient counts the trues.
  auto b = random::bernoulli(0.5, {64}, k).to_vector<double>();
  double trues = 0;
  for (double t : b) trues += t;
  array gb = grad([&](const array& p) { return sum(astype(random::bernoulli(p, {64}, k), float64) * p); })(
      array(0.5, float64));
  EXPECT_EQ(gb.item<double>(), trues);
  // Forward mode: the tangent of a sample is zero.
  auto [out, tan] = jvp([&](const array& lo) { return random::uniform(lo, array(1.0), {3}, float64, k); },
                        array(0.0, float64), array(1.0, float64));
  expect_array(tan, {3}, {0, 0, 0});
}

// The fused Adam/AdamW primitive against the same update written with separate ops.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "loom/autograd/transforms.h"
#include "loom/core/eval.h"
#include "loom/core/threads.h"
#include "loom/ops/ops.h"
#include "loom/ops/random.h"
#include "loom/fast/fast.h"
#include "loom/optim/optimizers.h"
#include "../test_utils.h"

using namespace loom;
using namespace loom::optim;  // Adam, AdamW
using loom::testing::expect_array;

namespace {

// torch.optim.AdamW's single-tensor step, one op per PyTorch call, every scalar rounded to the
// array's dtype as PyTorch rounds a Python number for a float tensor.
std::array<array, 3> adam_with_ops(array p, array g, array m, array v, const fast::AdamStep& hp) {
  const double t = static_cast<double>(hp.step);
  if (hp.decoupled) {
    if (hp.weight_decay != 0) p = p * (1 - hp.lr * hp.weight_decay);
  } else if (hp.weight_decay != 0) {
    g = g + hp.weight_decay * p;
  }
  const double w = 1 - hp.beta1;
  m = w < 0.5 ? m + w * (g - m) : g - (g - m) * (1.0 - static_cast<double>(static_cast<float>(w)));
  v = v * hp.beta2;
  v = v + ((1 - hp.beta2) * g) * g;
  const double bc1 = hp.bias_correction ? 1 - std::pow(hp.beta1, t) : 1.0;
  const double bc2s = hp.bias_correction ? std::sqrt(1 - std::pow(hp.beta2, t)) : 1.0;
  const array denom = sqrt(v) / bc2s + hp.eps;
  p = p + (-(hp.lr / bc1) * m) / denom;
  return {p, m, v};
}

void expect_bits_equal(const array& a_in, const array& b_in) {
  array a = a_in, b = b_in;
  ASSERT_EQ(a.shape(), b.shape());
  auto x = a.to_vector<float>();
  auto y = b.to_vector<float>();
  size_t diff = 0;
  for (size_t i = 0; i < x.size(); ++i) diff += x[i] != y[i];
  EXPECT_EQ(diff, 0u) << "of " << x.size() << " elements";
}

}  // namespace

TEST(AdamUpdate, BitIdenticalToTheOpsFormInFloat32) {
  random::seed(3);
  const Shape shape{257, 301};  // large enough for several threads
  array p = random::normal(shape), g = random::normal(shape);
  array m = random::normal(shape) * 0.1f, v = abs(random::normal(shape)) * 0.01f;
  eval(p, g, m, v);
  for (int threads : {1, 2}) {
    set_num_threads(threads);
    for (const fast::AdamStep& hp : {fast::AdamStep{1e-3, 0.9, 0.999, 1e-8, 0.01, true, true, 1},
                               fast::AdamStep{0.1, 0.3, 0.9, 1e-3, 0.5, true, true, 7},
                               fast::AdamStep{0.05, 0.8, 0.99, 1e-6, 0.1, false, true, 3},
                               fast::AdamStep{0.01, 0.9, 0.999, 1e-8, 0.0, true, false, 2}}) {
      auto fused = fast::adam_update(p, g, m, v, hp);
      auto ops = adam_with_ops(p, g, m, v, hp);
      for (int k = 0; k < 3; ++k) expect_bits_equal(fused[k], ops[k]);
    }
  }
  set_num_threads(2);
}

// The bias-corrected denominator sqrt(v) / sqrt(1 - beta2^t) is computed without a division where
// FMA is available: it must still round as the division does, over every magnitude of v, and an
// overflowed second moment (v = inf, from a huge gradient or already there) must give a zero step.
TEST(AdamUpdate, DenominatorRoundsAsTheDivisionAtEveryScale) {
  std::vector<float> pv, gv, mv, vv;
  random::seed(5);
  auto mant = random::uniform(1.0f, 2.0f, {4096}).to_vector<float>();
  for (int i = 0; i < 4096; ++i) {
    const int e = i % 200 - 140;  // v from 2^-140 (subnormal) to 2^59
    pv.push_back(0.5f + 0.001f * (i % 17));
    gv.push_back(i % 3 == 0 ? 0.0f : mant[i] * 1e-3f);
    mv.push_back(mant[(i * 7) % 4096] * 0.01f);
    vv.push_back(std::ldexp(mant[i], e));
  }
  vv[0] = 0.0f;
  vv[1] = std::numeric_limits<float>::infinity();
  gv[2] = 1e20f;  // (1 - beta2) g^2 overflows
  gv[3] = -3e19f;
  const int n = static_cast<int>(pv.size());
  array p(pv, {n}), g(gv, {n}), m(mv, {n}), v(vv, {n});
  for (const fast::AdamStep& hp : {fast::AdamStep{1e-3, 0.9, 0.999, 1e-8, 0.01, true, true, 1},
                             fast::AdamStep{1e-3, 0.9, 0.999, 1e-8, 0.01, true, true, 37},
                             fast::AdamStep{0.3, 0.5, 0.93, 1e-12, 0.0, true, true, 5}}) {
    auto fused = fast::adam_update(p, g, m, v, hp);
    auto ops = adam_with_ops(p, g, m, v, hp);
    for (int k = 0; k < 3; ++k) expect_bits_equal(fused[k], ops[k]);
    auto p2 = fused[0].to_vector<float>();
    for (int i = 1; i < 4; ++i) EXPECT_TRUE(std::isfinite(p2[i])) << i;  // v = inf: the step is 0
  }
}

TEST(AdamUpdate, Float64AndHalfTypes) {
  const fast::AdamStep hp{0.1, 0.9, 0.999, 1e-8, 0.01, true, true, 1};
  // Step 1 with m = v = 0: m' = 0.1 g, v' = 0.001 g^2, p' = p (1 - 1e-3) - 0.1 g / (|g| + 1e-8).
  for (Dtype dt : {float64, float32, float16, bfloat16}) {
    array p = array({1.0, -2.0, 0.25, 0.0}, dt), g = array({0.5, 0.5, -2.0, 0.0}, dt);
    auto [p2, m2, v2] = fast::adam_update(p, g, zeros_like(p), zeros_like(p), hp);
    const double tol = dt == float64 ? 1e-12 : dt == float32 ? 1e-6 : dt == float16 ? 2e-3 : 1e-2;
    EXPECT_EQ(p2.dtype(), dt);
    auto step = [](double p, double g) { return p * 0.999 - 0.1 * g / (std::abs(g) + 1e-8); };
    expect_array(p2, {4}, {step(1.0, 0.5), step(-2.0, 0.5), step(0.25, -2.0), 0.0}, tol);
    expect_array(m2, {4}, {0.05, 0.05, -0.2, 0.0}, tol);
    expect_array(v2, {4}, {0.00025, 0.00025, 0.004, 0.0}, tol);
  }
}

TEST(AdamUpdate, StridedBroadcastAndEmptyInputs) {
  const fast::AdamStep hp{0.1, 0.5, 0.75, 0.0, 0.0, true, true, 1};
  // p transposed, g a broadcast row, m and v fresh zeros (a broadcast scalar): dense results in
  // row-major order of the logical shape. Step 1: m = 0.5 g, v = 0.25 g^2, p' = p - 0.1 sign(g).
  array p = transpose(array({1.0f, 2.0f, 3.0f, 4.0f, 5.0f, 6.0f}, {3, 2}));  // (2, 3): 1 3 5 / 2 4 6
  array g = broadcast_to(array({1.0f, -1.0f, 2.0f}), {2, 3});
  auto [p2, m2, v2] = fast::adam_update(p, g, zeros({2, 3}), zeros({2, 3}), hp);
  expect_array(p2, {2, 3}, {0.9, 3.1, 4.9, 1.9, 4.1, 5.9});
  expect_array(m2, {2, 3}, {0.5, -0.5, 1.0, 0.5, -0.5, 1.0});
  expect_array(v2, {2, 3}, {0.25, 0.25, 1.0, 0.25, 0.25, 1.0});
  auto e = fast::adam_update(zeros({0, 3}), zeros({0, 3}), zeros({0, 3}), zeros({0, 3}), hp);
  expect_array(e[0], {0, 3}, {});
}

TEST(AdamUpdate, DonatesUnsharedBuffersOnly) {
  const fast::AdamStep hp{0.1, 0.9, 0.999, 1e-8, 0.0, true, true, 1};
  // Inputs held by nothing but the graph: the outputs take over their buffers.
  array p = full({1024}, 1.0f) + 1.0f, m = zeros({1024}) * 2.0f, v = zeros({1024}) * 2.0f;
  array g = ones({1024});
  eval(p, m, v);
  const void* pp = p.raw_data();
  const void* mp = m.raw_data();
  const void* vp = v.raw_data();
  auto outs = fast::adam_update(p, g, m, v, hp);
  p = array(0.0f);  // drop our handles so only the graph holds them
  m = array(0.0f);
  v = array(0.0f);
  eval(outs[0], outs[1], outs[2]);
  EXPECT_EQ(outs[0].raw_data(), pp);
  EXPECT_EQ(outs[1].raw_data(), mp);
  EXPECT_EQ(outs[2].raw_data(), vp);
  expect_array(outs[0], {1024}, std::vector<double>(1024, 2.0 - 0.1), 1e-6);

  // An input the caller still holds is never overwritten.
  array keep = full({8}, 3.0f);
  eval(keep);
  auto o2 = fast::adam_update(keep, ones({8}), zeros({8}), zeros({8}), hp);
  eval(o2[0]);
  EXPECT_NE(o2[0].raw_data(), keep.raw_data());
  expect_array(keep, {8}, std::vector<double>(8, 3.0));
  expect_array(o2[0], {8}, std::vector<double>(8, 2.9), 1e-6);
}

TEST(AdamUpdate, Errors) {
  const fast::AdamStep hp;
  EXPECT_THROW_MSG(fast::adam_update(zeros({2}), zeros({3}), zeros({2}), zeros({2}), hp), std::invalid_argument,
                   "[adam_update] the gradient has shape (3) but the parameter has shape (2)");
  EXPECT_THROW_MSG(fast::adam_update(zeros({2}), zeros({2}), zeros({2}), zeros({2, 1}), hp), std::invalid_argument,
                   "[adam_update] the v has shape (2,1)");
  EXPECT_THROW_MSG(fast::adam_update(array({1, 2}), array({1, 2}), array({1, 2}), array({1, 2}), hp), std::invalid_argument,
                   "the parameter must be floating point, got int32");
  fast::AdamStep bad = hp;
  bad.beta1 = 1.0;
  EXPECT_THROW_MSG(fast::adam_update(zeros({2}), zeros({2}), zeros({2}), zeros({2}), bad), std::invalid_argument,
                   "[adam_update] beta1 must be in [0, 1), got 1");
  bad = hp;
  bad.step = 0;
  EXPECT_THROW_MSG(fast::adam_update(zeros({2}), zeros({2}), zeros({2}), zeros({2}), bad), std::invalid_argument,
                   "step must be >= 1");
}

// The update's derivatives are its reference's (torch's op form): through p', m' and v', with respect
// to p, g, m and v, for decoupled and coupled decay, by finite differences in float64.
TEST(AdamUpdate, GradientsMatchFiniteDifferences) {
  const Shape s{2, 3};
  array p = loom::testing::lcg_uniform(s, -1, 1, 1), g = loom::testing::lcg_uniform(s, -1, 1, 2);
  array m = loom::testing::lcg_uniform(s, -0.1, 0.1, 3), v = loom::testing::lcg_uniform(s, 0.01, 0.05, 4);
  for (const fast::AdamStep& hp : {fast::AdamStep{0.1, 0.9, 0.999, 1e-3, 0.1, true, true, 3},
                                   fast::AdamStep{0.05, 0.3, 0.9, 1e-2, 0.2, false, true, 2}}) {
    auto f = [hp](const std::vector<array>& x) {
      auto o = fast::adam_update(x[0], x[1], x[2], x[3], hp);
      return std::vector<array>{o[0], o[1], o[2]};
    };
    auto r = check_grads(f, {p, g, m, v});
    EXPECT_TRUE(r.ok) << r.report;
  }
}

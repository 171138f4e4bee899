// Disagreements with PyTorch/numpy found by differential testing (issue 21), each kept as a named
// regression: empty operands that are broadcasts of scalars, empty vjps, float16 accumulation,
// NaN bounds, +inf in softmax rows.
#include <cmath>
#include <limits>
#include <vector>

#include "../test_utils.h"
#include "loom/autograd/transforms.h"
#include "loom/fast/fast.h"
#include "loom/ops/indexing.h"
#include "loom/ops/ops.h"

using namespace loom;
using loom::testing::expect_array;

namespace {
array scalar_broadcast(Shape shape, Dtype d = float32) { return broadcast_to(astype(array(1.0f), d), shape); }
}  // namespace

TEST(EmptyBroadcastOperands, ElementwiseOpsGiveEmptyResults) {
  array z01 = zeros({0, 1});
  EXPECT_EQ(add(astype(broadcast_to(array(2), {0, 1}), float32), z01).shape(), (Shape{0, 1}));
  eval(add(astype(broadcast_to(array(2), {0, 1}), float32), z01));
  array l = logical_and(broadcast_to(array(1.0f), {0}), zeros({0}));
  eval(l);
  EXPECT_EQ(l.shape(), (Shape{0}));
  array d = divide(broadcast_to(array(7), {0, 3}), broadcast_to(array(2), {0, 3}));
  eval(d);
  EXPECT_EQ(d.shape(), (Shape{0, 3}));
  array b = scalar_broadcast({0, 2});
  array m = minimum(add(b, b), zeros({0, 2}));
  eval(m);
  EXPECT_EQ(m.size(), 0u);
  array v = var(scalar_broadcast({0, 4}), std::vector<int>{1});
  eval(v);
  EXPECT_EQ(v.shape(), (Shape{0}));
}

TEST(EmptyBroadcastOperands, SameWithFusionOff) {
  detail::set_fusion(false);
  array b = scalar_broadcast({0, 2});
  array m = minimum(add(b, b), zeros({0, 2}));
  eval(m);
  EXPECT_EQ(m.size(), 0u);
  array d = add(astype(broadcast_to(array(2), {0, 1}), float32), zeros({0, 1}));
  eval(d);
  detail::set_fusion(true);
  EXPECT_EQ(d.shape(), (Shape{0, 1}));
}

namespace {
// The vjp of f at `primals` (all cotangent ones), evaluated.
std::vector<array> vjp_of(const std::function<array(const std::vector<array>&)>& f, const std::vector<array>& primals) {
  auto [outs, grads] = vjp([&](const std::vector<array>& x) { return std::vector<array>{f(x)}; }, primals,
                           {ones_like(f(primals))});
  eval(grads);
  return grads;
}
}  // namespace

TEST(EmptyOperands, VjpsAreEmpty) {
  array e = zeros({0, 3});
  for (auto f : std::vector<std::function<array(const std::vector<array>&)>>{
           [](const std::vector<array>& x) { return sigmoid(x[0]); },
           [](const std::vector<array>& x) { return tan(x[0]); },
           [](const std::vector<array>& x) { return logsumexp(x[0], 1); },
           [](const std::vector<array>& x) { return logsumexp(x[0], 0); },
           [](const std::vector<array>& x) { return power(x[0], x[1]); },
           [](const std::vector<array>& x) { return arctan2(x[0], x[1]); },
       }) {
    auto g = vjp_of(f, {e, zeros({0, 3})});
    ASSERT_EQ(g.size(), 2u);
    EXPECT_EQ(g[0].shape(), (Shape{0, 3}));
  }
  // A broadcast operand that is not empty gets a zero gradient of its own shape.
  auto g = vjp_of([](const std::vector<array>& x) { return power(x[0], x[1]); }, {zeros({0, 3}), full({3}, 2.0f)});
  expect_array(g[1], {3}, std::vector<double>{0, 0, 0});
}

TEST(Float16, MeanVarStdLogsumexpAccumulateInFloat32) {
  array x = ones({70000}, float16);
  EXPECT_EQ(mean(x).item<float>(), 1.0f);
  EXPECT_EQ(mean(x).dtype(), float16);
  EXPECT_EQ(var(x).item<float>(), 0.0f);
  EXPECT_EQ(loom::std(x).item<float>(), 0.0f);
  EXPECT_NEAR(logsumexp(zeros({70000}, float16)).item<float>(), std::log(70000.0f), 0.01);
  array ls = log_softmax(zeros({7, 10000}, float16), std::vector<int>{0, 1});
  EXPECT_NEAR(ls.to_vector<float>()[0], -std::log(70000.0f), 0.01);
  EXPECT_NEAR(mean(full({2, 40000}, 3.0f, bfloat16)).item<float>(), 3.0f, 0.02);
}

TEST(EmptySlice, NegativeStepVjpIsZero) {
  auto g = vjp_of([](const std::vector<array>& x) { return slice(x[0], {-5}, {-6}, {-1}); }, {zeros({4})});
  expect_array(g[0], {4}, std::vector<double>{0, 0, 0, 0});
  auto u = vjp_of([](const std::vector<array>& x) { return slice_update(x[0], x[1], {-5}, {-6}, {-1}); },
                  {zeros({4}), zeros({0})});
  expect_array(u[0], {4}, std::vector<double>{1, 1, 1, 1});
  EXPECT_EQ(u[1].shape(), (Shape{0}));
}

TEST(EmptyAxis, ProdVjp) {
  auto g = vjp_of([](const std::vector<array>& x) { return prod(x[0], 1); }, {ones({0, 3})});
  EXPECT_EQ(g[0].shape(), (Shape{0, 3}));
  auto h = vjp_of([](const std::vector<array>& x) { return prod(x[0], 0); }, {ones({0, 3})});
  EXPECT_EQ(h[0].shape(), (Shape{0, 3}));
}

TEST(Clip, NanBoundsPropagateAsMinimumOfMaximum) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  array x = array({1.0f, 5.0f, nan});
  array lo = clip(x, array(nan), array(3.0f));
  for (float v : lo.to_vector<float>()) EXPECT_TRUE(std::isnan(v));
  array hi = clip(x, array(0.0f), array(nan));
  for (float v : hi.to_vector<float>()) EXPECT_TRUE(std::isnan(v));
  expect_array(clip(array({-1.0f, 2.0f, 9.0f}), array(0.0f), array(3.0f)), {3}, std::vector<double>{0, 2, 3});
}

TEST(Softmax, RowWithPositiveInfinityIsNan) {
  const float inf = std::numeric_limits<float>::infinity();
  array x = array({1.0f, inf, 2.0f}, {1, 3});
  for (const array& y : {softmax(x, -1), log_softmax(x, -1), softmax(x, std::vector<int>{0, 1}),
                         log_softmax(x, std::vector<int>{0, 1})}) {
    for (float v : array(y).to_vector<float>()) EXPECT_TRUE(std::isnan(v));
  }
  // A row of -inf entries beside finite ones is fine: they get 0 (-inf in log space).
  array ok = softmax(array({0.0f, -inf}, {1, 2}), -1);
  expect_array(ok, {1, 2}, std::vector<double>{1, 0});
}

TEST(Uint8, SumAndProdOverLongContiguousRuns) {
  // GCC 12 miscompiled the eight-lane loop for uint8 summed in int32 (runs of 16 or more).
  for (int n : {15, 16, 17, 32, 33000}) {
    EXPECT_EQ(sum(astype(ones({n}), uint8)).item<int>(), n) << n;
  }
  EXPECT_EQ(prod(astype(full({16}, 2.0f), uint8)).item<int>(), 65536);
  array x = astype(astype(arange(0.0, 33000.0, 1.0, float32), int32), uint8);  // 0..255 repeating
  int64_t want = 0;
  for (int i = 0; i < 33000; ++i) want += i % 256;
  EXPECT_EQ(sum(x).item<int>(), want);
}

TEST(Abs, ClearsTheSignOfNegativeZero) {
  for (Dtype d : {float16, bfloat16, float32, float64}) {
    array z = abs(astype(array(-0.0f), d));
    EXPECT_EQ(reciprocal(astype(z, float32)).item<float>(), std::numeric_limits<float>::infinity()) << to_string(d);
  }
}

TEST(ScatterAdd, IntegerSumsWrapAsNumpy) {
  // Signed overflow was undefined behaviour (UBSan stopped the differential tester's case).
  const int64_t lo = std::numeric_limits<int64_t>::min();
  array base = array(std::vector<int64_t>{lo, 0}, {2});
  array upd = array(std::vector<int64_t>{-3}, {1});
  array out = scatter_add_axis(base, array({0}, {1}), upd, 0);
  auto v = out.to_vector<int64_t>();
  EXPECT_EQ(v[0], std::numeric_limits<int64_t>::max() - 2);
  EXPECT_EQ(v[1], 0);
  auto w = scatter_add_take(base, array({0}, {1}), upd, 0).to_vector<int64_t>();
  EXPECT_EQ(w[0], std::numeric_limits<int64_t>::max() - 2);
}

namespace {
// Leaves buffers full of NaN in the allocator's cache (sizes of 1 to 64 floats, four each), so that
// an output a kernel fails to write holds NaN instead of whatever memory happened to be there.
void poison_allocator_cache() {
  std::vector<array> held;
  for (int n = 1; n <= 64; ++n) {
    std::vector<float> nans(n, std::numeric_limits<float>::quiet_NaN());
    for (int k = 0; k < 4; ++k) held.push_back(array(nans.data(), {n}, float32));
  }
  eval(held);
}
}  // namespace

// A row-contiguous operand may carry any stride on an axis of size 1: the transpose of a (n, 1)
// matrix is (1, n) with row stride 1. As SGEMM's leading dimension that stride is illegal (below the
// row length), so OpenBLAS computed nothing and the output stayed uninitialized (the differential
// tester's cases 28977, 86480, 94383 of seed 20261127: NaN, 1e37, 5e-315 where values were expected).
TEST(Attention, SingleRowOperandsWithAnyRowStride) {
  poison_allocator_cache();
  // values (1, 3): the transpose of (3, 1); one key, so the output is that row.
  array q = array({1.0f, 2.0f}, {1, 2});
  array k1 = array({0.5f, -1.0f}, {1, 2});
  array v1 = transpose(array({1.0f, 2.0f, 3.0f}, {3, 1}));
  expect_array(fast::scaled_dot_product_attention(q, k1, v1, 1.0), {1, 3}, {1, 2, 3});

  // queries (1, 2) as the transpose of (2, 1): values and all three gradients (torch, float64).
  array qt = transpose(array({1.0f, 2.0f}, {2, 1}));
  array k = array({0.5f, -1.0f, 1.0f, 0.25f}, {2, 2});
  array v = array({1.0f, 2.0f, 3.0f, 4.0f, 5.0f, 6.0f}, {2, 3});
  auto f = [](const std::vector<array>& x) {
    return std::vector<array>{fast::scaled_dot_product_attention(x[0], x[1], x[2], 1.0)};
  };
  poison_allocator_cache();
  auto [outs, grads] = vjp(f, {qt, k, v}, {array({1.0f, -1.0f, 2.0f}, {1, 3})});
  eval(outs), eval(grads);
  expect_array(outs[0], {1, 3}, {3.8577223804673, 4.8577223804673, 5.8577223804673}, 1e-5);
  expect_array(grads[0], {1, 2}, {0.13552997919273538, 0.3388249479818408}, 1e-5);
  expect_array(grads[1], {2, 2}, {-0.27105995838547287, -0.5421199167709457, 0.2710599583854718, 0.5421199167709436},
               1e-5);
  expect_array(grads[2], {2, 3},
               {0.04742587317756679, -0.04742587317756679, 0.09485174635513358, 0.9525741268224334,
                -0.9525741268224334, 1.9051482536448667},
               1e-5);

  // keys (1, 2) as the transpose of (2, 1), one key: the weights are 1 whatever q, so dq and dk are 0.
  array q2 = array({1.0f, 2.0f, 3.0f, 4.0f}, {2, 2});
  array k2 = transpose(array({0.5f, -1.0f}, {2, 1}));
  array v2 = array({1.0f, 2.0f, 3.0f}, {1, 3});
  poison_allocator_cache();
  auto [outs2, grads2] = vjp(f, {q2, k2, v2}, {ones({2, 3})});
  eval(outs2), eval(grads2);
  expect_array(outs2[0], {2, 3}, {1, 2, 3, 1, 2, 3});
  expect_array(grads2[0], {2, 2}, {0, 0, 0, 0});
  expect_array(grads2[1], {1, 2}, {0, 0});
  expect_array(grads2[2], {1, 3}, {2, 2, 2});
}

// The derivative of a^0 (1 for every a) is 0; b a^(b-1) made it 0 * inf = NaN at a = 0 (case 144510
// of seed 20261127). Values from torch (float64): d/da and d/db of a^b at a = (0, 2), b = (0, 3).
TEST(Power, DerivativeOfZerothPowerIsZero) {
  array a = array({0.0, 2.0}, float64), b = array({0.0, 3.0}, float64);
  auto f = [](const std::vector<array>& x) { return std::vector<array>{power(x[0], x[1])}; };
  auto [outs, grads] = vjp(f, {a, b}, {ones({2}, float64)});
  eval(grads);
  expect_array(grads[0], {2}, {0, 12});
  expect_array(grads[1], {2}, {0, 5.545177444479562});
  auto [vals, tangents] = jvp(f, {a, b}, {ones({2}, float64), zeros({2}, float64)});
  expect_array(tangents[0], {2}, {0, 12});
  // A broadcast zero exponent: every base gets 0, including the base 0.
  auto [o2, g2] = vjp(f, {array({0.0f, -3.0f, 5.0f}), array(-0.0f)}, {ones({3})});
  expect_array(g2[0], {3}, {0, 0, 0});
}

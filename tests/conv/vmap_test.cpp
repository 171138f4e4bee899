// vmap of the convolution (forward, input-gradient and weight-gradient roles) and pooling (every
// role) primitives against a loop over the batch: images and weights batched or not, the batch on
// any axis, grouped, strided, padded, dilated and flipped convolutions, and gradients under vmap.
#include "../test_utils.h"
#include "loom/ops/conv.h"

using namespace loom;
using loom::testing::expect_vmap_matches_loop;
using loom::testing::lcg_uniform;

namespace {

constexpr int kVmcBatch = 3;
constexpr double kVmcRtol = 1e-4, kVmcAtol = 1e-5;

// `shape` with the batch inserted at `at` (-1: unbatched).
array vmc_f32(Shape shape, unsigned seed, int at = -1) {
  if (at >= 0) shape.insert(shape.begin() + at, kVmcBatch);
  return astype(lcg_uniform(shape, -1.0, 1.0, seed), float32);
}

using VmcConv = std::function<array(const array&, const array&)>;

VectorFn vmc_two(const VmcConv& f) {
  return [f](const std::vector<array>& x) { return std::vector<array>{f(x[0], x[1])}; };
}

// The gradients of sum(conv(x, w) * c) with respect to x and w: the input- and weight-gradient roles,
// with the cotangent c batched or not.
VectorFn vmc_conv_grads(const VmcConv& conv) {
  return [conv](const std::vector<array>& v) {
    return grad([conv](const std::vector<array>& p) { return sum(multiply(conv(p[0], p[1]), p[2])); }, {0, 1})(v);
  };
}

// conv(x, w) checked for every batching of x and w (batch first, middle and last), and its two
// gradients for every batching of x, w and the cotangent c.
void vmc_check_conv(const VmcConv& conv, const Shape& xs, const Shape& ws, unsigned seed) {
  const int xd = static_cast<int>(xs.size()), wd = static_cast<int>(ws.size());
  for (int xa : {-1, 0, xd / 2, xd}) {
    for (int wa : {-1, 0, wd / 2, wd}) {
      if (xa < 0 && wa < 0) continue;
      expect_vmap_matches_loop(vmc_two(conv), {vmc_f32(xs, seed, xa), vmc_f32(ws, seed + 1, wa)}, {xa, wa}, {},
                               kVmcRtol, kVmcAtol);
    }
  }
  const Shape ys = conv(vmc_f32(xs, seed), vmc_f32(ws, seed + 1)).shape();
  const int yd = static_cast<int>(ys.size());
  for (int xa : {-1, 1}) {
    for (int wa : {-1, wd}) {
      for (int ca : {-1, 0, yd}) {
        if (xa < 0 && wa < 0 && ca < 0) continue;
        expect_vmap_matches_loop(vmc_conv_grads(conv),
                                 {vmc_f32(xs, seed + 2, xa), vmc_f32(ws, seed + 3, wa), vmc_f32(ys, seed + 4, ca)},
                                 {xa, wa, ca}, {}, kVmcRtol, kVmcAtol);
      }
    }
  }
}

}  // namespace

TEST(ConvVmap, Conv1dPlainAndGrouped) {
  vmc_check_conv([](const array& x, const array& w) { return conv1d(x, w); }, {2, 7, 4}, {5, 3, 4}, 1);
  vmc_check_conv([](const array& x, const array& w) { return conv1d(x, w, 2, 1, 2, 2); }, {2, 9, 4}, {6, 3, 2}, 10);
  // Depthwise: one input channel per group.
  vmc_check_conv([](const array& x, const array& w) { return conv1d(x, w, 1, 1, 1, 4); }, {1, 6, 4}, {8, 3, 1}, 20);
}

TEST(ConvVmap, Conv2dAndConvGeneral) {
  vmc_check_conv([](const array& x, const array& w) { return conv2d(x, w, {2, 1}, {1, 0}, {1, 2}, 2); },
                 {2, 5, 6, 4}, {6, 3, 2, 2}, 30);
  // Input dilation, unequal padding and a flipped kernel.
  vmc_check_conv(
      [](const array& x, const array& w) { return conv_general(x, w, {2}, {1}, {2}, {2}, {2}, 2, true); },
      {2, 6, 4}, {4, 3, 2}, 40);
}

TEST(ConvVmap, TransposedConvolutions) {
  vmc_check_conv([](const array& x, const array& w) { return conv_transpose1d(x, w, 2, 1, 1, 1, 2); }, {2, 5, 4},
                 {6, 3, 2}, 50);
  vmc_check_conv([](const array& x, const array& w) { return conv_transpose2d(x, w, {2, 1}, {0, 1}); }, {1, 3, 4, 2},
                 {3, 2, 3, 2}, 60);
}

TEST(ConvVmap, NestedAndGradOfVmap) {
  // A grid of inputs against a batch of weights.
  auto conv = vmc_two([](const array& x, const array& w) { return conv1d(x, w, 1, 1, 1, 2); });
  const array xs = astype(lcg_uniform({2, kVmcBatch, 1, 6, 4}, -1, 1, 70), float32);
  const array ws = vmc_f32({4, 3, 2}, 71, 0);
  expect_vmap_matches_loop(vmap(conv, {0, -1}), {xs, ws}, {1, 0}, {}, kVmcRtol, kVmcAtol);
  expect_vmap_matches_loop(vmap(conv, {0, 0}), {xs, broadcast_to(expand_dims(ws, 0), {2, kVmcBatch, 4, 3, 2})}, {1, 1},
                           {}, kVmcRtol, kVmcAtol);
  // grad of vmap: per-weight losses summed, against the same sum written as a loop.
  const array x = vmc_f32({2, 6, 4}, 72);
  auto batched = [&](const std::vector<array>& v) {
    return sum(square(vmap(conv, {-1, 0})({v[0], v[1]})[0]));
  };
  auto looped = [&](const std::vector<array>& v) {
    array s = array(0.0f);
    for (int b = 0; b < kVmcBatch; ++b) s = add(s, sum(square(conv1d(v[0], take(v[1], b, 0), 1, 1, 1, 2))));
    return s;
  };
  auto g1 = grad(batched, {0, 1})({x, ws}), g2 = grad(looped, {0, 1})({x, ws});
  for (size_t k = 0; k < 2; ++k) EXPECT_TRUE(allclose(g1[k], g2[k], kVmcRtol, kVmcAtol).item<bool>()) << k;
}

// ---- pooling ----

TEST(PoolVmap, EveryPoolingOnEveryBatchAxis) {
  using Pool = std::function<array(const array&)>;
  const std::vector<std::pair<Pool, Shape>> pools{
      {[](const array& x) { return max_pool1d(x, 3, 2, 1); }, {2, 7, 3}},
      {[](const array& x) { return avg_pool1d(x, 2); }, {2, 6, 3}},
      {[](const array& x) { return max_pool2d(x, {2, 3}, {1, 2}, {1, 1}); }, {2, 4, 5, 2}},
      {[](const array& x) { return avg_pool2d(x, {3, 2}, {2, 1}, {1, 0}); }, {1, 5, 4, 2}},
      {[](const array& x) { return max_pool(x, {2, 2, 2}); }, {1, 4, 4, 2, 2}},
  };
  unsigned seed = 80;
  for (const auto& entry : pools) {
    const Pool pool = entry.first;  // (a structured binding cannot be captured in C++17)
    const Shape& xs = entry.second;
    for (int at = 0; at <= static_cast<int>(xs.size()); ++at) {
      const array x = vmc_f32(xs, seed++, at);
      expect_vmap_matches_loop([pool](const std::vector<array>& v) { return std::vector<array>{pool(v[0])}; }, {x},
                               {at});
      // vjp (max_scatter, avg_scatter) with the input and the cotangent batched or not.
      const Shape ys = pool(vmc_f32(xs, 0)).shape();
      auto g = [pool](const std::vector<array>& v) {
        return grad([pool](const std::vector<array>& p) { return sum(multiply(pool(p[0]), p[1])); }, 0)(v);
      };
      for (int ca : {-1, 0}) {
        expect_vmap_matches_loop(g, {x, vmc_f32(ys, seed++, ca)}, {at, ca});
      }
      expect_vmap_matches_loop(g, {vmc_f32(xs, seed++), vmc_f32(ys, seed++, 1)}, {-1, 1});
      // jvp (max_gather) with the input and the tangent batched or not.
      auto j = [pool](const std::vector<array>& v) {
        return jvp([pool](const std::vector<array>& p) { return std::vector<array>{pool(p[0])}; }, {v[0]}, {v[1]}).second;
      };
      expect_vmap_matches_loop(j, {x, vmc_f32(xs, seed++, at)}, {at, at});
      expect_vmap_matches_loop(j, {x, vmc_f32(xs, seed++)}, {at, -1});
      expect_vmap_matches_loop(j, {vmc_f32(xs, seed++), vmc_f32(xs, seed++, 0)}, {-1, 0});
    }
  }
}

TEST(PoolVmap, SecondOrderThroughMaxScatter) {
  // The vjp of max_scatter with respect to its cotangent is max_gather, and its own vjp max_scatter.
  auto f = [](const std::vector<array>& v) {
    auto inner = [](const std::vector<array>& p) {
      array gx = grad([](const std::vector<array>& q) { return sum(multiply(max_pool1d(q[0], 2), q[1])); }, 0)(p)[0];
      return sum(square(gx));
    };
    return grad(inner, {0, 1})(v);
  };
  expect_vmap_matches_loop(f, {vmc_f32({2, 6, 3}, 100, 2), vmc_f32({2, 3, 3}, 101, 0)}, {2, 0});
  expect_vmap_matches_loop(f, {vmc_f32({2, 6, 3}, 102), vmc_f32({2, 3, 3}, 103, 3)}, {-1, 3});
}

#include <gtest/gtest.h>

#include <cmath>

#include "loom/core/eval.h"
#include "loom/ops/ops.h"
#include "loom/optim/clip.h"
#include "../test_utils.h"

using namespace loom;
using namespace loom::optim;
using loom::testing::expect_array;

TEST(ClipGradNorm, ScalesDownOnlyAboveTheThreshold) {
  // MLX's example: {w1: [2, 3], w2: [1]} has norm sqrt(14).
  nn::ParamTree grads{{"w1", array({2.0f, 3.0f})}, {"w2", array({1.0f})}};
  auto [clipped, norm] = clip_grad_norm(grads, 2.0);
  EXPECT_FALSE(norm.is_evaluated());  // lazy
  EXPECT_NEAR(norm.item<float>(), std::sqrt(14.0), 1e-6);
  const double s = 2.0 / (std::sqrt(14.0) + 1e-6);
  expect_array(clipped["w1"], {2}, {2 * s, 3 * s}, 1e-6);
  expect_array(clipped["w2"], {1}, {s}, 1e-6);
  EXPECT_EQ(clipped.names(), (std::vector<std::string>{"w1", "w2"}));

  auto [same, norm2] = clip_grad_norm(grads, 4.0);  // sqrt(14) < 4: unchanged
  expect_array(same["w1"], {2}, {2, 3});
  expect_array(same["w2"], {1}, {1});
  EXPECT_NEAR(norm2.item<float>(), std::sqrt(14.0), 1e-6);

  // A matrix, a strided view and float64 (the norm becomes float64).
  nn::ParamTree mixed{{"a", transpose(array({3.0, 0.0, 0.0, 4.0}, {2, 2}, float64))}, {"b", zeros({3})}};
  auto [c3, n3] = clip_grad_norm(mixed, 1.0);
  EXPECT_EQ(n3.dtype(), float64);
  EXPECT_DOUBLE_EQ(n3.item<double>(), 5.0);
  expect_array(c3["a"], {2, 2}, {0.6, 0.0, 0.0, 0.8}, 1e-6);
  EXPECT_EQ(c3["b"].dtype(), float32);
}

TEST(ClipGradNorm, HalfPrecisionSumsInFloat32) {
  // 300^2 * 2 overflows float16's range (65504) but not the float32 accumulator.
  nn::ParamTree grads{{"h", array({300.0f, 300.0f}, float16)}};
  auto [clipped, norm] = clip_grad_norm(grads, 1.0);
  EXPECT_EQ(norm.dtype(), float32);
  EXPECT_NEAR(norm.item<float>(), 300.0 * std::sqrt(2.0), 1e-3);
  EXPECT_EQ(clipped["h"].dtype(), float16);
  expect_array(clipped["h"], {2}, {1 / std::sqrt(2.0), 1 / std::sqrt(2.0)}, 1e-3);
}

TEST(ClipGradNorm, EmptyTreeAndErrors) {
  auto [c, n] = clip_grad_norm(nn::ParamTree{}, 1.0);
  EXPECT_TRUE(c.empty());
  EXPECT_EQ(n.item<float>(), 0.0f);
  EXPECT_THROW_MSG(clip_grad_norm(nn::ParamTree{}, -1.0), std::invalid_argument,
                   "[clip_grad_norm] max_norm must be finite and >= 0, got -1");
  EXPECT_THROW_MSG(clip_grad_norm({{"i", array({1, 2})}}, 1.0), std::invalid_argument,
                   "gradient 'i' has non-floating dtype int32");
}

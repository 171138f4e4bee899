#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "loom/loom.h"
#include "loom/nn/linear.h"
#include "../test_utils.h"

using namespace loom;
using loom::testing::joined;
using loom::testing::expect_array;


TEST(Identity, ReturnsItsInput) {
  nn::Identity id;
  array x({1.0f, 2.0f}, {2, 1});
  EXPECT_EQ(id(x).id(), x.id());
  EXPECT_TRUE(id.parameters().empty());
}

TEST(Bilinear, HandComputedValues) {
  nn::Bilinear bl(2, 3, 2);
  EXPECT_EQ(joined(bl.parameters().names()), "weight bias");
  EXPECT_EQ(bl.weight.shape(), (Shape{2, 3, 2}));
  // W[o][j][i]: W[0] = [[1,0],[0,1],[1,1]], W[1] = [[2,0],[0,0],[0,-1]].
  bl.update({{"weight", array({1.0f, 0.0f, 0.0f, 1.0f, 1.0f, 1.0f, 2.0f, 0.0f, 0.0f, 0.0f, 0.0f, -1.0f}, {2, 3, 2})},
             {"bias", array({0.5f, -1.0f})}});
  array x1({1.0f, 2.0f, 0.0f, 1.0f}, {2, 2});
  array x2({1.0f, 0.0f, -1.0f, 2.0f, 1.0f, 1.0f}, {2, 3});
  expect_array(bl(x1, x2), {2, 2}, {-1.5, 3, 2.5, -2});
  // Leading axes are kept; a single vector works too.
  expect_array(bl(reshape(x1, {2, 1, 2}), reshape(x2, {2, 1, 3})), {2, 1, 2}, {-1.5, 3, 2.5, -2});
  expect_array(bl(array({1.0f, 2.0f}), array({1.0f, 0.0f, -1.0f})), {2}, {-1.5, 3});
  // Empty batches.
  EXPECT_EQ(bl(zeros({0, 2}), zeros({0, 3})).shape(), (Shape{0, 2}));
  nn::Bilinear nobias(2, 3, 4, false);
  EXPECT_EQ(nobias.parameters().size(), 1u);
  EXPECT_EQ(nobias(ones({5, 2}), ones({5, 3})).shape(), (Shape{5, 4}));
}

TEST(Bilinear, ErrorsNameTheShapes) {
  nn::Bilinear bl(2, 3, 2);
  EXPECT_THROW_MSG(bl(ones({4, 2}), ones({4, 2})), std::invalid_argument,
                   "[nn::Bilinear] expected x1 (..., 2) and x2 (..., 3) with the same leading axes, got shapes (4,2) and (4,2)");
  EXPECT_THROW_MSG(bl(ones({4, 2}), ones({5, 3})), std::invalid_argument, "got shapes (4,2) and (5,3)");
  EXPECT_THROW_MSG(nn::Bilinear(2, 0, 1), std::invalid_argument, "input2_dims 0");
}

TEST(Bilinear, InitIsUniformWithinOneOverSqrtInput1) {
  random::seed(11);
  nn::Bilinear bl(16, 8, 32);
  const float k = 0.25f;
  auto w = bl.weight.to_vector<float>();
  float lo = 1, hi = -1;
  for (float v : w) lo = std::min(lo, v), hi = std::max(hi, v);
  EXPECT_GE(lo, -k);
  EXPECT_LT(hi, k);
  EXPECT_GT(hi, 0.95f * k);
  for (float v : bl.bias->to_vector<float>()) EXPECT_LE(std::abs(v), k);
  random::seed(11);
  nn::Bilinear again(16, 8, 32);
  EXPECT_EQ(again.weight.to_vector<float>(), w);
}

TEST(Bilinear, GradientsMatchFiniteDifferences) {
  nn::Bilinear bl(3, 2, 2);
  auto fn = [&](const std::vector<array>& v) {
    bl.update({{"weight", v[2]}, {"bias", v[3]}});
    return std::vector<array>{bl(v[0], v[1])};
  };
  std::vector<array> primals = {random::normal({4, 3}, float64), random::normal({4, 2}, float64),
                                astype(bl.weight, float64), astype(*bl.bias, float64)};
  auto r = check_grads(fn, primals);
  EXPECT_TRUE(r.ok) << r.report;
}

TEST(Embedding, LooksUpRows) {
  nn::Embedding emb(4, 3);
  EXPECT_EQ(joined(emb.parameters().names()), "weight");
  emb.update({{"weight", reshape(arange(12.0, float32), {4, 3})}});
  expect_array(emb(array({2, 0, 1, 2}, {2, 2})), {2, 2, 3}, {6, 7, 8, 0, 1, 2, 3, 4, 5, 6, 7, 8});
  expect_array(emb(array(3)), {3}, {9, 10, 11});
  expect_array(emb(array({1, 3}, int64)), {2, 3}, {3, 4, 5, 9, 10, 11});
  // as_linear: x @ W^T.
  expect_array(emb.as_linear(array({1.0f, 0.0f, -1.0f})), {4}, {-2, -2, -2, -2});
  expect_array(emb.as_linear(array({0.0f, 1.0f, 0.0f}, {1, 3})), {1, 4}, {1, 4, 7, 10});
  // The gradient of the table accumulates over repeated indices.
  auto g = grad([&](const array& w) {
    emb.update({{"weight", w}});
    return sum(emb(array({1, 1, 3})));
  })(emb.weight);
  expect_array(g, {4, 3}, {0, 0, 0, 2, 2, 2, 0, 0, 0, 1, 1, 1});
}

TEST(Embedding, ErrorsAndInit) {
  nn::Embedding emb(4, 3);
  EXPECT_THROW_MSG(emb(array({1.0f})), std::invalid_argument, "indices must have an integer dtype, got float32");
  EXPECT_THROW_MSG(emb.as_linear(ones({2, 4})), std::invalid_argument, "last axis 3, got shape (2,4)");
  EXPECT_THROW_MSG(nn::Embedding(0, 3), std::invalid_argument, "got 0 and 3");
  // An index past the table fails when evaluated, naming the index.
  EXPECT_THROW_MSG(eval(emb(array({4}))), std::out_of_range, "index 4");
  // N(0, 1/dims) as in MLX.
  random::seed(5);
  nn::Embedding big(1000, 64);
  auto w = big.weight.to_vector<float>();
  double mean = 0, sq = 0;
  for (float v : w) mean += v, sq += double(v) * v;
  mean /= w.size();
  double sd = std::sqrt(sq / w.size() - mean * mean);
  EXPECT_NEAR(mean, 0.0, 0.002);
  EXPECT_NEAR(sd, 0.125, 0.002);
}

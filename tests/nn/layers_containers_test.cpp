#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "loom/loom.h"
#include "loom/nn/activations.h"
#include "loom/nn/containers.h"
#include "loom/nn/dropout.h"
#include "loom/nn/linear.h"
#include "loom/nn/normalization.h"
#include "../test_utils.h"

using namespace loom;
using loom::testing::joined;
using loom::testing::expect_array;


TEST(Sequential, NamesLayersByIndexAsMLX) {
  nn::Sequential seq(std::make_shared<nn::Linear>(3, 4), nn::relu, std::make_shared<nn::Linear>(4, 2));
  EXPECT_EQ(seq.size(), 3u);
  // The callable at index 1 takes an index but registers nothing.
  EXPECT_EQ(joined(seq.parameters().names()), "layers.0.weight layers.0.bias layers.2.weight layers.2.bias");
  EXPECT_EQ(seq.num_parameters(), 3u * 4 + 4 + 4 * 2 + 2);
  auto& ln = seq.emplace<nn::LayerNorm>(2);
  EXPECT_EQ(joined(seq.parameters().names()),
            "layers.0.weight layers.0.bias layers.2.weight layers.2.bias layers.3.weight layers.3.bias");
  EXPECT_EQ(&seq.get<nn::LayerNorm>(3), &ln);
  EXPECT_EQ(seq.layer(1), nullptr);
  EXPECT_THROW_MSG(seq.get<nn::Linear>(3), std::invalid_argument, "layer 3 has another type");
  EXPECT_THROW_MSG(seq.layer(4), std::out_of_range, "layer 4 is out of range for 4 layers");
  // Nested containers give dotted paths; unique_ptr layers are accepted.
  nn::Sequential outer;
  outer.append(std::make_unique<nn::Linear>(2, 2, false));
  outer.append(std::make_shared<nn::Sequential>(std::make_shared<nn::Linear>(2, 1)));
  EXPECT_EQ(joined(outer.parameters().names()), "layers.0.weight layers.1.layers.0.weight layers.1.layers.0.bias");
  EXPECT_THROW_MSG(outer.append(std::shared_ptr<nn::Linear>()), std::invalid_argument, "null module");
}

TEST(Sequential, AppliesLayersInOrder) {
  nn::Sequential seq;
  auto l1 = std::make_shared<nn::Linear>(2, 2);
  auto l2 = std::make_shared<nn::Linear>(2, 1);
  seq.append(l1).append([](const array& x) { return nn::relu(x); }).append(l2);
  l1->update({{"weight", array({1.0f, -1.0f, 2.0f, 1.0f}, {2, 2})}, {"bias", array({0.0f, -1.0f})}});
  l2->update({{"weight", array({1.0f, 3.0f}, {1, 2})}, {"bias", array({0.5f})}});
  // x = (2, 1): l1 -> (1, 4), relu -> (1, 4), l2 -> 1 + 12 + 0.5; x = (-1, 3): l1 -> (-4, 0) -> (0, 0) -> 0.5.
  expect_array(seq(array({2.0f, 1.0f, -1.0f, 3.0f}, {2, 2})), {2, 1}, {13.5, 0.5});
  // An empty Sequential is the identity.
  nn::Sequential empty;
  array x = ones({3});
  EXPECT_EQ(empty(x).id(), x.id());
}

TEST(Sequential, ModesFreezingAndStatefulLayers) {
  nn::Sequential seq(std::make_shared<nn::Linear>(4, 4), std::make_shared<nn::Dropout>(0.5),
                     std::make_shared<nn::BatchNorm>(4));
  seq.freeze({"layers.0"});
  EXPECT_EQ(joined(seq.trainable_parameters().names()), "layers.2.weight layers.2.bias");
  // Training mode: BatchNorm (whose call is not const) updates its running mean through the container.
  random::seed(1);
  eval(seq(random::normal({16, 4})));
  auto& bn = seq.get<nn::BatchNorm>(2);
  EXPECT_NE(bn.running_mean->to_vector<float>(), std::vector<float>(4, 0.0f));
  // Evaluation mode reaches the children: dropout is off, so two calls agree.
  seq.eval();
  EXPECT_FALSE(seq.get<nn::Dropout>(1).training());
  array x = random::normal({3, 4});
  EXPECT_EQ(seq(x).to_vector<float>(), seq(x).to_vector<float>());
}

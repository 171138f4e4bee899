#include <gtest/gtest.h>

#include <cstdio>
#include <memory>

#include "loom/loom.h"
#include "loom/nn/linear.h"
#include "loom/nn/module.h"
#include "../test_utils.h"

using namespace loom;
using loom::testing::joined;
using loom::testing::expect_array;

namespace {

struct Block : nn::Module {
  nn::Linear proj{3, 2};
  array scale = ones({2});
  array count = zeros({1});
  Block() {
    register_module("proj", proj);
    register_parameter("scale", scale);
    register_buffer("count", count);
  }
  array operator()(const array& x) const { return proj(x) * scale; }
};

struct Net : nn::Module {
  array first = zeros({4});
  std::vector<std::unique_ptr<Block>> layers;
  nn::Linear head{2, 1, false};
  Net() {
    register_parameter("first", first);
    for (int i = 0; i < 2; ++i) {
      layers.push_back(std::make_unique<Block>());
      register_module("layers." + std::to_string(i), *layers.back());
    }
    register_module("head", head);
  }
};


}  // namespace

TEST(Module, ParameterNamesFollowRegistrationOrder) {
  Net net;
  EXPECT_EQ(joined(net.parameters().names()),
            "first layers.0.proj.weight layers.0.proj.bias layers.0.scale layers.0.count "
            "layers.1.proj.weight layers.1.proj.bias layers.1.scale layers.1.count head.weight");
  EXPECT_EQ(joined(net.trainable_parameters().names()),
            "first layers.0.proj.weight layers.0.proj.bias layers.0.scale "
            "layers.1.proj.weight layers.1.proj.bias layers.1.scale head.weight");
  EXPECT_EQ(joined(net.buffers().names()), "layers.0.count layers.1.count");
  EXPECT_EQ(net.num_parameters(), 4u + 2 * (6 + 2 + 2) + 2);
  auto mods = net.modules();
  ASSERT_EQ(mods.size(), 5u);
  EXPECT_EQ(mods[0].first, "layers.0");
  EXPECT_EQ(mods[1].first, "layers.0.proj");
  EXPECT_EQ(mods[4].first, "head");
}

TEST(Module, FreezeAndUnfreezeByName) {
  Net net;
  net.freeze({"layers.0", "head.weight"});
  EXPECT_EQ(joined(net.trainable_parameters().names()), "first layers.1.proj.weight layers.1.proj.bias layers.1.scale");
  net.unfreeze({"layers.0.proj"});
  EXPECT_EQ(joined(net.trainable_parameters().names()),
            "first layers.0.proj.weight layers.0.proj.bias layers.1.proj.weight layers.1.proj.bias layers.1.scale");
  net.freeze();
  EXPECT_TRUE(net.trainable_parameters().empty());
  net.unfreeze();
  EXPECT_EQ(net.trainable_parameters().size(), 8u);  // buffers stay frozen
  // "layers.1" must not match "layers.10"-like prefixes of other names, and unknown names throw.
  EXPECT_THROW_MSG(net.freeze({"layers.2"}), std::invalid_argument, "no parameter or module named 'layers.2'");
  EXPECT_THROW_MSG(net.freeze({"fir"}), std::invalid_argument, "'fir'");
}

TEST(Module, TrainAndEvalModeReachChildren) {
  Net net;
  EXPECT_TRUE(net.layers[1]->proj.training());
  net.eval();
  EXPECT_FALSE(net.training());
  EXPECT_FALSE(net.layers[1]->proj.training());
  net.train();
  EXPECT_TRUE(net.head.training());
}

TEST(Module, UpdateReplacesNamedArraysAndChecksShapes) {
  Net net;
  net.update({{"layers.1.scale", array({5.0f, 6.0f})}});
  expect_array(net.layers[1]->scale, {2}, {5, 6});
  EXPECT_THROW_MSG(net.update({{"nope", zeros({1})}}), std::invalid_argument, "no parameter named 'nope'");
  EXPECT_THROW_MSG(net.update({{"first", zeros({3})}, {"head.weight", zeros({1, 2})}}), std::invalid_argument,
                   "'first' has shape (4)");
  expect_array(net.first, {4}, {0, 0, 0, 0});
}

TEST(Module, RegistrationErrors) {
  struct Bad : nn::Module {
    array a = zeros({1});
    void twice() {
      register_parameter("a", a);
      register_parameter("a", a);
    }
    void named(const std::string& n) { register_parameter(n, a); }
  };
  Bad b;
  EXPECT_THROW_MSG(b.twice(), std::invalid_argument, "'a' is already registered");
  EXPECT_THROW_MSG(b.named(""), std::invalid_argument, "invalid name");
  EXPECT_THROW_MSG(b.named("x..y"), std::invalid_argument, "invalid name 'x..y'");
  static_assert(!std::is_copy_constructible_v<nn::Linear>);
  static_assert(!std::is_move_constructible_v<nn::Linear>);
}

TEST(Linear, ComputesAffineMapOnBatches) {
  nn::Linear lin(3, 2);
  lin.update({{"weight", array({1.0f, 2.0f, 3.0f, -1.0f, 0.0f, 1.0f}, {2, 3})}, {"bias", array({0.5f, -0.5f})}});
  expect_array(lin(array({1.0f, 1.0f, 1.0f, 2.0f, 0.0f, -1.0f}, {2, 3})), {2, 2}, {6.5, -0.5, -0.5, -3.5});
  // Leading batch axes are kept.
  auto y = lin(ones({2, 4, 3}));
  expect_array(sum(y, {0, 1}), {2}, {8 * 6.5f, 8 * -0.5f});
  nn::Linear nobias(3, 2, false);
  EXPECT_EQ(nobias.parameters().size(), 1u);
  EXPECT_THROW_MSG(lin(ones({2, 4})), std::invalid_argument, "last axis 3, got shape (2,4)");
  EXPECT_THROW_MSG(nn::Linear(0, 2), std::invalid_argument, "input_dims 0");
}

TEST(Linear, DefaultInitIsUniformWithinOneOverSqrtFanIn) {
  random::seed(3);
  nn::Linear lin(400, 300);
  auto w = lin.weight.to_vector<float>();
  float k = 1.0f / 20.0f, lo = 1, hi = -1;
  double mean = 0;
  for (float v : w) lo = std::min(lo, v), hi = std::max(hi, v), mean += v;
  mean /= w.size();
  EXPECT_GE(lo, -k);
  EXPECT_LT(hi, k);
  EXPECT_GT(hi, 0.99 * k);
  EXPECT_NEAR(mean, 0.0, 0.001);
  random::seed(3);
  nn::Linear again(400, 300);
  EXPECT_EQ(again.weight.to_vector<float>(), w);
}

TEST(ValueAndGrad, GradsHaveTheTrainableNamesAndClosedFormValues) {
  nn::Linear lin(2, 1);
  lin.update({{"weight", array({2.0f, -1.0f}, {1, 2})}, {"bias", array({0.5f})}});
  auto loss_fn = [&](const array& x, const array& y) { return mean(square(lin(x) - y)); };
  auto vg = nn::value_and_grad(lin, loss_fn);
  array x({1.0f, 2.0f, 3.0f, 0.0f}, {2, 2});
  array y({1.0f, 2.0f}, {2, 1});
  auto [loss, grads] = vg(x, y);
  // predictions 0.5 and 6.5, residuals -0.5 and 4.5
  EXPECT_NEAR(loss.item<float>(), (0.25 + 20.25) / 2, 1e-5);
  EXPECT_EQ(joined(grads.names()), "weight bias");
  // dL/dW = mean(2 r x), dL/db = mean(2 r)
  expect_array(grads["weight"], {1, 2}, {(-0.5f * 1 + 4.5f * 3), (-0.5f * 2 + 0)});
  expect_array(grads["bias"], {1}, {4.0f});
  // The model keeps its own parameters afterwards.
  expect_array(lin.weight, {1, 2}, {2, -1});
  // Frozen parameters get no gradient.
  lin.freeze({"bias"});
  auto [loss2, grads2] = nn::value_and_grad(lin, loss_fn)(x, y);
  EXPECT_EQ(joined(grads2.names()), "weight");
}

TEST(ValueAndGrad, VectorOutputsAndRestoreOnThrow) {
  nn::Linear lin(2, 1);
  auto fn = [&](const array& x) { return std::vector<array>{sum(lin(x)), lin(x)}; };
  auto [outs, grads] = nn::value_and_grad(lin, fn)(ones({3, 2}));
  ASSERT_EQ(outs.size(), 2u);
  expect_array(grads["weight"], {1, 2}, {3, 3});
  expect_array(grads["bias"], {1}, {3});
  array before = lin.weight;
  auto throwing = [&](const array& x) -> array { throw std::runtime_error("boom " + std::to_string(x.ndim())); };
  EXPECT_THROW(nn::value_and_grad(lin, throwing)(ones({1})), std::runtime_error);
  EXPECT_EQ(lin.weight.id(), before.id());
  auto not_scalar = [&](const array& x) { return lin(x); };
  EXPECT_THROW_MSG(nn::value_and_grad(lin, not_scalar)(ones({3, 2})), std::invalid_argument, "scalar");
}

TEST(Module, EvalOfParameterTreeAndSaveLoadWeights) {
  random::seed(1);
  Net a;
  a.layers[0]->count = full({1}, 7.0f);
  a.update({{"layers.0.count", full({1}, 7.0f)}});
  eval(a.parameters());
  for (const auto& [name, v] : a.parameters()) EXPECT_TRUE(v.is_evaluated()) << name;
  std::string path = ::testing::TempDir() + "/loom_module_weights.safetensors";
  a.save_weights(path);
  Net b;
  b.load_weights(path);
  for (auto [name, v] : a.parameters()) {
    EXPECT_EQ(b.parameters()[name].to_vector<float>(), v.to_vector<float>()) << name;
  }
  // A file that does not match lists every difference.
  struct Other : nn::Module {
    array first = zeros({5});
    nn::Linear head{2, 1, false};
    array extra = zeros({1});
    Other() {
      register_parameter("first", first);
      register_module("head", head);
      register_parameter("extra", extra);
    }
  } other;
  try {
    other.load_weights(path);
    FAIL() << "expected a mismatch";
  } catch (const std::invalid_argument& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("shape of first: model (5), file (4)"), std::string::npos) << m;
    EXPECT_NE(m.find("missing from the file: extra (1)"), std::string::npos) << m;
    EXPECT_NE(m.find("not in the model: layers.1.scale (2)"), std::string::npos) << m;
  }
  other.load_weights(path, /*strict=*/false);
  EXPECT_EQ(other.head.weight.to_vector<float>(), a.head.weight.to_vector<float>());
  expect_array(other.first, {5}, {0, 0, 0, 0, 0});
  std::remove(path.c_str());
}

TEST(ParamTree, MapFlattenUnflatten) {
  nn::ParamTree t{{"a", array(1.0f)}, {"b.c", array({2.0f, 3.0f})}};
  auto doubled = nn::tree_map(t, [](const array& x) { return x * 2.0f; });
  expect_array(doubled["b.c"], {2}, {4, 6});
  auto summed = nn::tree_map(t, doubled, [](const array& x, const array& y) { return x + y; });
  expect_array(summed["a"], {}, {3});
  auto flat = nn::tree_flatten(t);
  ASSERT_EQ(flat.size(), 2u);
  EXPECT_EQ(flat[1].first, "b.c");
  auto back = nn::tree_unflatten(flat);
  EXPECT_EQ(joined(back.names()), "a b.c");
  EXPECT_EQ(joined(t.subtree("b").names()), "c");
  EXPECT_THROW_MSG(t.at("z"), std::out_of_range, "'z'");
  EXPECT_THROW_MSG(nn::tree_unflatten(t, {array(1.0f)}), std::invalid_argument, "1 arrays for a tree of 2");
  EXPECT_THROW_MSG(nn::tree_map(t, nn::ParamTree{{"a", array(1.0f)}, {"x", array(1.0f)}},
                                [](const array& x, const array&) { return x; }),
                   std::invalid_argument, "'b.c' is missing");
  EXPECT_THROW_MSG((nn::ParamTree{{"a", array(1.0f)}, {"a", array(2.0f)}}), std::invalid_argument, "duplicate");
  t.erase("a");
  EXPECT_EQ(joined(t.names()), "b.c");
}

TEST(ParamTree, CopiesShareNamesUntilOneChangesThem) {
  nn::ParamTree t{{"a", array(1.0f)}, {"b", array(2.0f)}};
  nn::ParamTree copy = t;
  copy.insert("c", array(3.0f));  // a new name: the copy's own index
  copy.insert("a", array(4.0f));  // an existing name: replaced in place
  EXPECT_EQ(joined(t.names()), "a b");
  EXPECT_FALSE(t.contains("c"));
  EXPECT_EQ(t["a"].item<float>(), 1.0f);
  EXPECT_EQ(joined(copy.names()), "a b c");
  EXPECT_EQ(copy["c"].item<float>(), 3.0f);
  auto mapped = nn::tree_map(t, [](const array& x) { return x + 10.0f; });
  mapped.erase("a");
  EXPECT_EQ(joined(t.names()), "a b");
  EXPECT_EQ(t["b"].item<float>(), 2.0f);
  EXPECT_EQ(joined(mapped.names()), "b");
  EXPECT_EQ(mapped["b"].item<float>(), 12.0f);
  EXPECT_THROW_MSG(mapped.at("a"), std::out_of_range, "'a'");
  nn::ParamTree empty;
  EXPECT_FALSE(empty.contains("a"));
  EXPECT_THROW_MSG(empty.at("a"), std::out_of_range, "'a'");
  empty.erase("a");
  EXPECT_TRUE(empty.empty());
}

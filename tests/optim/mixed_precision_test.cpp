// Mixed precision in a training loop: nn::value_and_grad's compute_dtype (float32 loss and
// gradients from bfloat16 / float16 products, training that matches float32's), and
// DynamicLossScaler (scaling, unscaling, skipping a step that overflowed, growing and backing off,
// its state, bad options).
#include <cmath>
#include <limits>

#include "../test_utils.h"
#include "loom/core/eval.h"
#include "loom/core/profile.h"
#include "loom/nn/average_gradients.h"
#include "loom/nn/linear.h"
#include "loom/nn/losses.h"
#include "loom/nn/module.h"
#include "loom/ops/ops.h"
#include "loom/ops/random.h"
#include "loom/optim/loss_scaler.h"
#include "loom/optim/optimizers.h"

using namespace loom;

namespace {

struct MixedNet : nn::Module {
  nn::Linear l1{6, 32}, l2{32, 3};
  MixedNet() {
    register_module("l1", l1);
    register_module("l2", l2);
  }
  array operator()(const array& x) const { return l2(nn::gelu(l1(x))); }
};

// A fixed 3-class problem: the class is the argmax of three fixed projections of x.
std::pair<array, array> mixed_batch(int n, int seed) {
  array x = astype(loom::testing::lcg_uniform({n, 6}, -2, 2, static_cast<unsigned>(seed)), float32);
  array proj = array({1.f, -1.f, 0.5f, 0.f, 2.f, -0.5f, 0.3f, 1.f, -2.f, 1.f, 0.f, 0.7f, -1.f, 0.2f, 0.f, 1.f, 1.f, -1.f},
                     {6, 3});
  return {x, argmax(matmul(x, proj), 1)};
}

array mixed_loss(MixedNet& m, const array& x, const array& y) {
  return nn::losses::cross_entropy(m(x), y, std::nullopt, -1, 0.0, "mean");
}

TEST(MixedPrecision, ValueAndGradComputesProductsInHalfAndReturnsFloat32) {
  random::seed(3);
  MixedNet model;
  auto [x, y] = mixed_batch(16, 1);
  auto full = nn::value_and_grad(model, [&](const array& a, const array& b) { return mixed_loss(model, a, b); });
  auto half = nn::value_and_grad(
      model, [&](const array& a, const array& b) { return mixed_loss(model, a, b); }, bfloat16);
  auto [l32, g32] = full(x, y);
  auto [l16, g16] = half(x, y);
  EXPECT_EQ(l16.dtype(), float32);
  ASSERT_EQ(g16.names(), g32.names());
  for (const auto& [name, g] : g16) {
    SCOPED_TRACE(name);
    EXPECT_EQ(g.dtype(), float32);
    EXPECT_TRUE(allclose(g, g32[name], 5e-2, 5e-3).item<bool>()) << g << "\nvs\n" << g32[name];
  }
  EXPECT_NEAR(l16.item<float>(), l32.item<float>(), 2e-2 * std::abs(l32.item<float>()));
  // The policy lasts for the call only, and the model keeps its float32 parameters.
  EXPECT_FALSE(autocast_dtype().has_value());
  for (const auto& [name, p] : model.parameters()) EXPECT_EQ(p.dtype(), float32) << name;
  EXPECT_THROW_MSG(nn::value_and_grad(model, [&](const array& a) { return sum(model(a)); }, float32),
                   std::invalid_argument, "[Autocast]");
}

// 150 AdamW steps in float32 and in bfloat16 from one initialization: the held-out losses agree
// within a few percent (bfloat16 keeps 8 bits of mantissa; the parameters and optimizer stay float32).
TEST(MixedPrecision, Bfloat16TrainingMatchesFloat32) {
  auto run = [](std::optional<Dtype> compute) {
    random::seed(11);
    MixedNet model;
    optim::AdamW opt(1e-2);
    auto step = nn::value_and_grad(
        model, [&](const array& a, const array& b) { return mixed_loss(model, a, b); }, compute);
    for (int i = 0; i < 150; ++i) {
      auto [x, y] = mixed_batch(32, 100 + i);
      auto [l, g] = step(x, y);
      opt.update(model, g);
      eval(l, model.parameters(), opt.state());
    }
    auto [hx, hy] = mixed_batch(512, 7);
    return mixed_loss(model, hx, hy).item<float>();
  };
  const float l32 = run(std::nullopt), l16 = run(bfloat16);
  EXPECT_LT(l32, 0.35f);  // it learned (chance: log 3 = 1.1)
  EXPECT_NEAR(l16, l32, 0.05f * l32 + 0.01f);
}

// Gradient accumulation under bfloat16: the micro-batches of a step share one cast of each weight
// (the first casts, the others reuse it: one AsType per weight per step, not per micro-batch), and
// training is bit for bit that of a loop whose every micro-batch casts the weights afresh.
TEST(MixedPrecision, MicroBatchesShareOneCastOfEachWeight) {
  struct Casts {
    int64_t made = 0, reused = 0;  // AsType and CastOfValue nodes run by the later micro-batches
  };
  auto run = [](bool fresh_casts, Casts* casts) {
    random::seed(5);
    MixedNet model;
    eval(model.parameters());  // evaluated from the first micro-batch on
    optim::AdamW opt(1e-2);
    nn::GradientAccumulator acc(3);
    auto step = nn::value_and_grad(
        model, [&](const array& a, const array& b) { return mixed_loss(model, a, b); }, bfloat16);
    std::vector<float> losses;
    for (int i = 0; i < 12; ++i) {
      // Lazy copies of the parameters are no evaluated arrays: each micro-batch casts them again.
      if (fresh_casts) model.update(tree_map(model.parameters(), [](const array& p) { return copy(p); }));
      auto [x, y] = mixed_batch(16, 200 + i);
      auto [l, g] = step(x, y);
      const bool later = i % 3 != 0;
      if (later) profile::start();
      if (auto mean = acc.accumulate(g)) {
        opt.update(model, *mean);
        eval(l, model.parameters(), opt.state());
      } else {
        eval(l, acc.state());
      }
      if (later) {
        profile::stop();
        for (const auto& k : profile::key_averages()) {
          if (k.name == "AsType") casts->made += k.calls;
          if (k.name == "CastOfValue") casts->reused += k.calls;
        }
      }
      losses.push_back(l.item<float>());
    }
    std::vector<float> params;
    for (const auto& [name, p] : model.parameters()) {
      for (float v : astype(flatten(p), float32).to_vector<float>()) params.push_back(v);
    }
    return std::make_pair(losses, params);
  };
  Casts kept, fresh;
  const auto [lk, pk] = run(false, &kept);
  const auto [lf, pf] = run(true, &fresh);
  EXPECT_EQ(lk, lf);
  EXPECT_EQ(pk, pf);
  // In the 8 later micro-batches the fresh loop casts the 4 parameters (2 weights, 2 biases) each
  // time, the other loop reuses the first micro-batch's casts; the rest (the input, the logits, the
  // gradients back to float32) is cast by both.
  EXPECT_EQ(fresh.made - kept.made, 8 * 4);
  EXPECT_EQ(kept.reused, 8 * 4);
  EXPECT_EQ(fresh.reused, 0);
}

TEST(DynamicLossScaler, ScalesAndUnscales) {
  optim::DynamicLossScaler scaler;
  EXPECT_EQ(scaler.loss_scale(), 65536.0);
  EXPECT_EQ(scaler.scale(array(1.5f)).item<float>(), 98304.0f);
  EXPECT_EQ(scaler.scale(array(1.5f, float16)).dtype(), float16);
  nn::ParamTree g{{"a", array({65536.f, -131072.f})}, {"b", astype(array({32768.f}), float16)}};
  nn::ParamTree u = scaler.unscale(g);
  loom::testing::expect_array(u["a"], {2}, {1.0, -2.0});
  EXPECT_EQ(u["b"].dtype(), float16);
  EXPECT_EQ(u["b"].item<float16_t>(), float16_t(0.5f));
  EXPECT_THROW_MSG(scaler.scale(array(1)), std::invalid_argument, "floating-point loss; got int32");
}

// A model of one parameter vector, trained by SGD, so that an update's effect is known exactly.
struct ScalerVec : nn::Module {
  array w = array({1.f, 2.f, 3.f});
  ScalerVec() { register_parameter("w", w); }
};

TEST(DynamicLossScaler, TakesFiniteStepsAndGrowsAfterTheInterval) {
  optim::DynamicLossScaler scaler({/*init_scale=*/1024.0, /*growth_factor=*/2.0, /*backoff_factor=*/0.5,
                                   /*growth_interval=*/3});
  ScalerVec model;
  optim::SGD opt(0.5);
  for (int i = 0; i < 3; ++i) {
    const double s = scaler.loss_scale();
    // The gradient of the scaled loss: s times the true gradient (1, 1, 1).
    nn::ParamTree g{{"w", full({3}, float(s))}};
    EXPECT_TRUE(scaler.step(opt, model, g));
    eval(model.parameters());
  }
  loom::testing::expect_array(model.w, {3}, {-0.5, 0.5, 1.5});  // three steps of 0.5 * 1
  EXPECT_EQ(scaler.loss_scale(), 2048.0);  // grew after the third good step
  EXPECT_EQ(scaler.skipped_steps(), 0);
}

TEST(DynamicLossScaler, SkipsAStepThatOverflowedAndBacksOff) {
  for (float bad : {std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                    std::numeric_limits<float>::quiet_NaN()}) {
    optim::DynamicLossScaler scaler;
    ScalerVec model;
    optim::Adam opt(0.1);
    EXPECT_TRUE(scaler.step(opt, model, {{"w", full({3}, 65536.f)}}));
    eval(model.parameters(), opt.state());
    const std::vector<float> before(model.w.data<float>(), model.w.data<float>() + 3);
    const nn::ParamTree state = opt.state();
    EXPECT_FALSE(scaler.step(opt, model, {{"w", array({65536.f, bad, 1.f})}}));
    eval(model.parameters(), opt.state());
    EXPECT_EQ(std::vector<float>(model.w.data<float>(), model.w.data<float>() + 3), before);
    EXPECT_EQ(opt.state()["step"].item<int64_t>(), state["step"].item<int64_t>());  // Adam did not count it
    EXPECT_EQ(scaler.loss_scale(), 32768.0);
    EXPECT_EQ(scaler.skipped_steps(), 1);
  }
}

// float16 products flush gradients below 2^-24 to zero; the scaled loss keeps them.
TEST(DynamicLossScaler, KeepsSmallFloat16GradientsFromFlushingToZero) {
  random::seed(5);
  ScalerVec model;
  const array x = array({1e-4f, -2e-4f, 3e-4f}, {1, 3});
  auto loss = [&]() { return sum(matmul(x, reshape(model.w, {3, 1}))) * 1e-5f; };  // d/dw = x * 1e-5
  auto plain = nn::value_and_grad(model, [&]() { return loss(); }, float16);
  optim::DynamicLossScaler scaler;
  auto scaled = nn::value_and_grad(model, [&]() { return scaler.scale(loss()); }, float16);
  auto [l0, g0] = plain();
  auto [l1, g1] = scaled();
  eval(g0["w"], g1["w"]);
  EXPECT_EQ(sum(abs(g0["w"])).item<float>(), 0.0f);  // lost without scaling
  const array u = scaler.unscale(g1)["w"];
  EXPECT_TRUE(allclose(u, array({1e-9f, -2e-9f, 3e-9f}), 2e-2, 0).item<bool>()) << u;
}

TEST(DynamicLossScaler, StateRoundTripsAndBadInputIsRefused) {
  optim::DynamicLossScaler a({256.0, 2.0, 0.5, 4});
  ScalerVec model;
  optim::SGD opt(0.1);
  a.step(opt, model, {{"w", full({3}, 1.f)}});
  a.step(opt, model, {{"w", full({3}, std::numeric_limits<float>::infinity())}});
  a.step(opt, model, {{"w", full({3}, 1.f)}});
  optim::DynamicLossScaler b({256.0, 2.0, 0.5, 4});
  b.set_state(a.state());
  EXPECT_EQ(b.loss_scale(), 128.0);
  EXPECT_EQ(b.state()["good_steps"].item<int64_t>(), 1);
  EXPECT_THROW_MSG(b.set_state({{"scale", array(1.0)}}), std::invalid_argument, "no \"good_steps\"");
  EXPECT_THROW_MSG(b.set_state({{"scale", array(-1.0)}, {"good_steps", array(0)}}), std::invalid_argument,
                   "scale must be finite and > 0");
  EXPECT_THROW_MSG(b.set_state({{"scale", array(1.0)}, {"good_steps", array(4)}}), std::invalid_argument,
                   "good_steps must be in [0, growth_interval = 4)");
  using O = optim::DynamicLossScaler::Options;
  EXPECT_THROW_MSG(optim::DynamicLossScaler(O{0.0, 2.0, 0.5, 1}), std::invalid_argument, "init_scale");
  EXPECT_THROW_MSG(optim::DynamicLossScaler(O{1.0, 1.0, 0.5, 1}), std::invalid_argument, "growth_factor");
  EXPECT_THROW_MSG(optim::DynamicLossScaler(O{1.0, 2.0, 1.0, 1}), std::invalid_argument, "backoff_factor");
  EXPECT_THROW_MSG(optim::DynamicLossScaler(O{1.0, 2.0, 0.5, 0}), std::invalid_argument, "growth_interval");
}

}  // namespace

// The training loop of DESIGN.md with each optimizer: it trains, the optimizer state is evaluated by
// eval(loss, model.parameters()), and the graph does not grow from step to step.
#include <gtest/gtest.h>

#include <functional>
#include <memory>

#include "loom/core/allocator.h"
#include "loom/core/eval.h"
#include "loom/nn/linear.h"
#include "loom/nn/module.h"
#include "loom/ops/ops.h"
#include "loom/ops/random.h"
#include "loom/optim/clip.h"
#include "loom/optim/optimizers.h"
#include "../test_utils.h"

using namespace loom;

namespace {

struct TrainingMLP : nn::Module {
  nn::Linear l1{4, 16}, l2{16, 1};
  TrainingMLP() {
    register_module("l1", l1);
    register_module("l2", l2);
  }
  array operator()(const array& x) const { return l2(maximum(l1(x), array(0.0f))); }
};

// y = x . (1, -2, 0.5, 3) + 0.25: a fixed regression problem.
std::pair<array, array> batch(int n) {
  array x = random::normal({n, 4});
  array y = matmul(x, array({1.0f, -2.0f, 0.5f, 3.0f}, {4, 1})) + 0.25f;
  return {x, y};
}

// Runs `steps` steps of the DESIGN.md loop and returns the mean loss of the first and last 10.
std::pair<double, double> train(optim::Optimizer& opt, int steps, bool clip = false) {
  random::seed(7);
  TrainingMLP model;
  auto loss_fn = [&](const array& x, const array& y) { return mean(square(model(x) - y)); };
  auto loss_and_grad = nn::value_and_grad(model, loss_fn);
  double first = 0, last = 0;
  for (int i = 0; i < steps; ++i) {
    auto [x, y] = batch(32);
    auto [loss, grads] = loss_and_grad(x, y);
    if (clip) grads = optim::clip_grad_norm(grads, 1.0).first;
    opt.update(model, grads);
    eval(loss, model.parameters());
    // Evaluating the parameters evaluated the optimizer state too, and nothing keeps a graph.
    for (const auto& [name, a] : opt.state()) {
      EXPECT_TRUE(a.is_evaluated()) << opt.name() << " " << name << " at step " << i;
      EXPECT_FALSE(a.has_primitive()) << opt.name() << " " << name << " at step " << i;
    }
    for (const auto& [name, a] : model.parameters()) EXPECT_FALSE(a.has_primitive()) << name;
    const double l = loss.item<double>();
    if (i < 10) first += l / 10;
    if (i >= steps - 10) last += l / 10;
  }
  return {first, last};
}

}  // namespace

TEST(Training, DesignLoopWithAdamWReducesTheLoss) {
  optim::AdamW opt(1e-2);
  auto [first, last] = train(opt, 300);
  EXPECT_GT(first, 5.0);  // the targets have variance 14.25
  EXPECT_LT(last, 0.05 * first) << "first " << first << " last " << last;
  EXPECT_EQ(opt.step(), 300);
}

TEST(Training, EveryOptimizerTrainsAndKeepsItsStateEvaluated) {
  std::vector<std::pair<std::string, std::function<std::unique_ptr<optim::Optimizer>()>>> makers = {
      {"SGD", [] { return std::make_unique<optim::SGD>(0.03); }},
      {"SGD momentum", [] { return std::make_unique<optim::SGD>(0.01, 0.9, 1e-4, 0.0, true); }},
      {"Adam", [] { return std::make_unique<optim::Adam>(1e-2); }},
      {"AdamW scheduled",
       [] {
         return std::make_unique<optim::AdamW>(
             optim::join_schedules({optim::linear_schedule(0, 1e-2, 20), optim::cosine_decay(1e-2, 180, 1e-3)}, {20}));
       }},
      {"Adagrad", [] { return std::make_unique<optim::Adagrad>(0.1); }},
      {"RMSprop", [] { return std::make_unique<optim::RMSprop>(3e-3, 0.99, 1e-8, 0.0, 0.5, true); }},
      {"Lion", [] { return std::make_unique<optim::Lion>(1e-2, optim::Betas{0.9, 0.99}, 0.01); }},
      {"Adafactor", [] { return std::make_unique<optim::Adafactor>(); }},
      {"Adafactor beta_1",
       [] {
         return std::make_unique<optim::Adafactor>(3e-2, std::pair<double, double>{1e-30, 1e-3}, 1.0, -0.8, 0.9, 0.0,
                                                   false, false);
       }},
  };
  for (auto& [label, make] : makers) {
    auto opt = make();
    auto [first, last] = train(*opt, 200, /*clip=*/label == "SGD");
    EXPECT_LT(last, 0.5 * first) << label << ": first " << first << " last " << last;
    EXPECT_GT(opt->state().size(), label == "SGD" ? 0u : 1u) << label;
  }
}

TEST(Training, ThousandStepsRunInBoundedMemory) {
  // If anything kept last step's graph alive, memory would grow with every step.
  random::seed(1);
  TrainingMLP model;
  optim::AdamW opt(1e-3);
  auto loss_fn = [&](const array& x, const array& y) { return mean(square(model(x) - y)); };
  auto loss_and_grad = nn::value_and_grad(model, loss_fn);
  size_t at_10 = 0;
  for (int i = 1; i <= 1000; ++i) {
    auto [x, y] = batch(8);
    auto [loss, grads] = loss_and_grad(x, y);
    opt.update(model, grads);
    eval(loss, model.parameters());
    if (i == 10) at_10 = get_active_memory();
    if (i == 1000) EXPECT_EQ(get_active_memory(), at_10);
  }
  EXPECT_EQ(opt.step(), 1000);
  EXPECT_EQ(opt.state().size(), 1u + 2 * 4);
}

TEST(Training, FrozenParametersAreLeftAloneAndKeepNoState) {
  random::seed(2);
  TrainingMLP model;
  model.freeze({"l1"});
  const auto w1 = model.parameters()["l1.weight"].to_vector<float>();
  const auto w2 = model.parameters()["l2.weight"].to_vector<float>();
  optim::Adam opt(1e-2);
  auto loss_fn = [&](const array& x, const array& y) { return mean(square(model(x) - y)); };
  auto loss_and_grad = nn::value_and_grad(model, loss_fn);
  for (int i = 0; i < 3; ++i) {
    auto [x, y] = batch(8);
    auto [loss, grads] = loss_and_grad(x, y);
    opt.update(model, grads);
    eval(loss, model.parameters());
  }
  EXPECT_EQ(model.parameters()["l1.weight"].to_vector<float>(), w1);
  EXPECT_NE(model.parameters()["l2.weight"].to_vector<float>(), w2);
  EXPECT_EQ(opt.state().names(),
            (std::vector<std::string>{"step", "l2.weight.m", "l2.weight.v", "l2.bias.m", "l2.bias.v"}));
}

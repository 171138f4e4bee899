// ZeRO (Optimizer::shard_state): alone and under mpirun -np 2 / 3 / 4, training with the optimizer
// state (stage 1) and the averaged gradients (stage 2) sharded across the ranks equals one process
// training on the whole batch, while each rank keeps 1/N of the state.
#include <unistd.h>

#include <cstdio>
#include <string>

#include "../test_utils.h"
#include "loom/distributed/distributed.h"
#include "loom/nn/linear.h"
#include "loom/ops/ops.h"
#include "loom/ops/random.h"
#include "loom/optim/checkpoint.h"
#include "loom/optim/optimizers.h"

using namespace loom;
namespace dist = loom::distributed;

namespace {

struct StateNet : nn::Module {
  nn::Linear l1{6, 16}, l2{16, 3};  // 163 parameters: not a multiple of 2, 3 or 4 ranks
  StateNet() {
    register_module("l1", l1);
    register_module("l2", l2);
  }
  array operator()(const array& x) const { return l2(tanh(l1(x))); }
};

// 20 AdamW steps on rows [first, first + rows) of a fixed data set; `stage` 0 is the replicated
// optimizer. With `float64_head` the second layer's parameters are float64 (two flat slices).
nn::ParamTree train_staged(int first, int rows, int stage, bool float64_head, nn::ParamTree* state = nullptr) {
  random::seed(42);
  StateNet model;
  if (float64_head) {
    model.update({{"l2.weight", astype(model.l2.weight, float64)}, {"l2.bias", astype(*model.l2.bias, float64)}});
  }
  const array X = random::normal({256, 6}, random::key(7)), Y = random::normal({256, 3}, random::key(8));
  optim::AdamW opt(1e-2);
  if (stage) opt.shard_state(dist::init(), stage);
  auto step = nn::value_and_grad(model, [&](const array& x, const array& y) { return mean(square(model(x) - y)); });
  for (int s = 0; s < 20; ++s) {
    auto [loss, grads] = step(slice(X, {first, 0}, {first + rows, 6}), slice(Y, {first, 0}, {first + rows, 3}));
    opt.update(model, grads);
    eval(loss, model.parameters(), opt.state());
  }
  if (state) *state = opt.state();
  return model.parameters();
}

}  // namespace

TEST(ShardedState, BothStagesEqualOneProcessOnTheWholeBatch) {
  auto g = dist::init();
  const int n = g.size(), per_rank = 16;
  for (int stage : {1, 2}) {
    for (bool f64 : {false, true}) {
      SCOPED_TRACE("stage " + std::to_string(stage) + (f64 ? ", float64 head" : ""));
      nn::ParamTree state;
      nn::ParamTree sharded = train_staged(g.rank() * per_rank, per_rank, stage, f64, &state);
      nn::ParamTree whole = train_staged(0, per_rank * n, 0, f64);
      for (auto [name, p] : whole) {
        const std::vector<double> want = astype(p, float64).to_vector<double>();
        const std::vector<double> got = astype(sharded.at(name), float64).to_vector<double>();
        ASSERT_EQ(got.size(), want.size()) << name;
        for (size_t i = 0; i < got.size(); ++i) ASSERT_NEAR(got[i], want[i], 1e-5) << name << "[" << i << "]";
        // Every rank holds the same parameters.
        array spread = dist::all_max(sharded.at(name), g) - dist::all_min(sharded.at(name), g);
        EXPECT_EQ(astype(max(abs(spread)), float64).item<double>(), 0.0) << name;
      }
      // This rank's state: m and v of its slice of each dtype's flattened parameters (1/N, rounded up).
      const int f32 = f64 ? 6 * 16 + 16 : 163, f64n = f64 ? 16 * 3 + 3 : 0;
      EXPECT_EQ(state.at("flat.float32.m").shape(), (Shape{(f32 + n - 1) / n}));
      EXPECT_EQ(state.at("flat.float32.v").shape(), (Shape{(f32 + n - 1) / n}));
      EXPECT_EQ(state.contains("flat.float64.m"), f64);
      if (f64) EXPECT_EQ(state.at("flat.float64.v").shape(), (Shape{(f64n + n - 1) / n}));
      EXPECT_EQ(state.size(), f64 ? 5u : 3u);  // and "step"
    }
  }
}

TEST(ShardedState, BadUse) {
  optim::Adafactor ada;
  EXPECT_THROW_MSG(ada.shard_state(), std::invalid_argument, "Adafactor does not update each element on its own");
  optim::AdamW opt;
  EXPECT_THROW_MSG(opt.shard_state(std::nullopt, 3), std::invalid_argument, "stage must be 1 or 2, got 3");
  EXPECT_EQ(opt.sharding_stage(), 0);
  random::seed(1);
  StateNet model;
  opt.update(model, nn::tree_map(model.trainable_parameters(), [](const array& p) { return zeros_like(p); }));
  EXPECT_THROW_MSG(opt.shard_state(), std::invalid_argument, "before the first update");
  optim::SGD sgd(0.1);
  sgd.shard_state();
  EXPECT_EQ(sgd.sharding_stage(), 2);
  EXPECT_THROW_MSG(sgd.update(model, {{"l1.weight", zeros({16, 6})}}), std::invalid_argument,
                   "only in the parameters: l1.bias");
}

// A ZeRO run's sharded checkpoint resumes it exactly on the same number of ranks; its gathered
// checkpoint loads into the unsharded model and optimizer of a 1-rank run.
TEST(ShardedState, CheckpointsResumeExactlyAndGatherForOneRank) {
  auto g = dist::init();
  const int n = g.size(), r = g.rank(), rows = 16;
  // One path for every rank: rank 0's process id.
  array pid({static_cast<int>(r == 0 ? getpid() : 0)});
  const std::string path = ::testing::TempDir() + "loom_zero_" + std::to_string(dist::all_max(pid, g).item<int>());
  const array X = random::normal({16 * n, 6}, random::key(7)), Y = random::normal({16 * n, 3}, random::key(8));
  const array x = slice(X, {r * rows, 0}, {(r + 1) * rows, 6}), y = slice(Y, {r * rows, 0}, {(r + 1) * rows, 3});
  auto steps = [&](StateNet& m, optim::Optimizer& opt, int k) {
    auto vg = nn::value_and_grad(m, [&](const array& a, const array& b) { return mean(square(m(a) - b)); });
    for (int s = 0; s < k; ++s) {
      auto [loss, grads] = vg(x, y);
      opt.update(m, grads);
      eval(loss, m.parameters(), opt.state());
    }
  };
  random::seed(42);
  StateNet model;
  optim::AdamW opt(1e-2);
  opt.shard_state(g, 2);
  steps(model, opt, 3);
  optim::save_sharded_checkpoint(path, model, opt, g, {{"note", "zero"}});
  optim::save_gathered_checkpoint(path + ".full", model, opt, g);
  const nn::ParamTree at_save = model.parameters(), state_at_save = opt.gathered_state(model.trainable_parameters());
  steps(model, opt, 3);

  random::seed(7);  // other initial values: the checkpoint must replace them all
  StateNet resumed;
  optim::AdamW opt2(1e-2);
  opt2.shard_state(g, 2);
  EXPECT_EQ(optim::load_sharded_checkpoint(path, resumed, opt2, g).at("note"), "zero");
  steps(resumed, opt2, 3);
  for (auto [name, p] : model.parameters()) {
    EXPECT_EQ(p.to_vector<float>(), resumed.parameters().at(name).to_vector<float>()) << name;  // bit for bit
  }

  // The gathered checkpoint: the whole parameters and per-parameter state, for an unsharded run.
  StateNet one;
  optim::AdamW plain(1e-2);
  optim::load_checkpoint(path + ".full", one, plain);
  EXPECT_EQ(plain.step(), 3);
  for (auto [name, p] : at_save) EXPECT_EQ(one.parameters().at(name).to_vector<float>(), p.to_vector<float>()) << name;
  nn::ParamTree plain_state = plain.state();
  for (auto [key, a] : state_at_save) EXPECT_EQ(plain_state.at(key).to_vector<float>(), a.to_vector<float>()) << key;

  if (n > 1) {
    StateNet other;
    optim::AdamW o(1e-2);
    EXPECT_THROW_MSG(optim::load_checkpoint(path + ".rank0-of-" + std::to_string(n), other, o), std::invalid_argument,
                     "load it with load_sharded_checkpoint");
    // The same files on a group of another size (each rank alone) are refused naming both sizes.
    auto alone = g.split(r);
    optim::AdamW o3(1e-2);
    o3.shard_state(alone, 2);
    EXPECT_THROW_MSG(optim::load_sharded_checkpoint(path, other, o3, alone), std::invalid_argument,
                     "was written by " + std::to_string(n) + " ranks; this run has 1");
  }
  eval(dist::all_sum(array(1.0f), g));  // every rank is done with the files
  std::remove((path + ".rank" + std::to_string(r) + "-of-" + std::to_string(n)).c_str());
  if (r == 0) std::remove((path + ".full").c_str());
}

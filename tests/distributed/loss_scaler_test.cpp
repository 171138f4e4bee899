// DynamicLossScaler across ranks: one rank's overflow makes every rank skip the step, so replicas
// stay equal; runs alone and under mpirun -np 2 / 3 / 4.
#include <limits>

#include "../test_utils.h"
#include "loom/core/eval.h"
#include "loom/distributed/distributed.h"
#include "loom/nn/module.h"
#include "loom/ops/ops.h"
#include "loom/optim/loss_scaler.h"
#include "loom/optim/optimizers.h"

using namespace loom;

namespace {

struct ScaledParams : nn::Module {
  array w = array({1.f, -1.f});
  ScaledParams() { register_parameter("w", w); }
};

TEST(DistributedLossScaler, OneRanksOverflowSkipsTheStepOnEveryRank) {
  auto world = distributed::init();
  const int last = world.size() - 1;
  optim::DynamicLossScaler scaler({1024.0, 2.0, 0.5, 2}, world);
  ScaledParams model;
  optim::SGD opt(1.0);
  // Step 1: only the last rank's gradient holds an inf (alone, that is rank 0's own).
  const float g1 = world.rank() == last ? std::numeric_limits<float>::infinity() : 1024.f;
  EXPECT_FALSE(scaler.step(opt, model, {{"w", array({g1, 1024.f})}}));
  eval(model.parameters());
  loom::testing::expect_array(model.w, {2}, {1.0, -1.0});
  EXPECT_EQ(scaler.loss_scale(), 512.0);
  // Step 2: finite everywhere: every rank steps, by its own (here equal) unscaled gradient.
  EXPECT_TRUE(scaler.step(opt, model, {{"w", array({512.f, -512.f})}}));
  eval(model.parameters());
  loom::testing::expect_array(model.w, {2}, {0.0, 0.0});
  EXPECT_EQ(scaler.skipped_steps(), 1);
}

}  // namespace

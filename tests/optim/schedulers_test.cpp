#include <gtest/gtest.h>

#include <cmath>

#include "loom/nn/tree.h"
#include "loom/optim/optimizers.h"
#include "loom/optim/schedulers.h"
#include "../test_utils.h"

using namespace loom;
using namespace loom::optim;

TEST(Schedules, ExponentialAndStepDecay) {
  auto e = exponential_decay(0.1, 0.9);
  EXPECT_DOUBLE_EQ(e(0), 0.1);
  EXPECT_DOUBLE_EQ(e(1), 0.09);
  EXPECT_NEAR(e(4), 0.06561, 1e-15);  // MLX's doc example: 5 updates
  auto s = step_decay(0.1, 0.9, 10);
  EXPECT_DOUBLE_EQ(s(0), 0.1);
  EXPECT_DOUBLE_EQ(s(9), 0.1);
  EXPECT_DOUBLE_EQ(s(10), 0.09);
  EXPECT_NEAR(s(20), 0.081, 1e-15);  // MLX's doc example: 21 updates
  EXPECT_NEAR(s(29), 0.081, 1e-15);
}

TEST(Schedules, CosineDecayWithEndValue) {
  auto c = cosine_decay(0.1, 1000);
  EXPECT_DOUBLE_EQ(c(0), 0.1);
  EXPECT_NEAR(c(4), 0.05 * (1 + std::cos(4 * M_PI / 1000)), 1e-16);  // MLX prints 0.0999961
  EXPECT_NEAR(c(500), 0.05, 1e-15);
  EXPECT_NEAR(c(1000), 0.0, 1e-15);
  EXPECT_NEAR(c(5000), 0.0, 1e-15);  // constant past decay_steps
  auto d = cosine_decay(1.0, 4, 0.2);
  EXPECT_DOUBLE_EQ(d(0), 1.0);
  EXPECT_NEAR(d(1), 0.2 + 0.8 * 0.5 * (1 + std::sqrt(0.5)), 1e-15);
  EXPECT_NEAR(d(2), 0.6, 1e-15);
  EXPECT_NEAR(d(4), 0.2, 1e-15);
  EXPECT_NEAR(d(100), 0.2, 1e-15);
}

TEST(Schedules, LinearAndJoined) {
  auto l = linear_schedule(0.0, 0.1, 100);
  EXPECT_DOUBLE_EQ(l(0), 0.0);
  EXPECT_NEAR(l(50), 0.05, 1e-15);
  EXPECT_NEAR(l(100), 0.1, 1e-15);
  EXPECT_NEAR(l(101), 0.1, 1e-15);
  auto down = linear_schedule(1.0, 0.5, 5);
  EXPECT_NEAR(down(2), 0.8, 1e-15);

  // MLX's example: warm-up for 10 steps then cosine over 200; after 12 updates the rate is cosine(1).
  auto j = join_schedules({linear_schedule(0, 0.1, 10), cosine_decay(0.1, 200)}, {10});
  EXPECT_DOUBLE_EQ(j(0), 0.0);
  EXPECT_NEAR(j(5), 0.05, 1e-15);
  EXPECT_NEAR(j(9), 0.09, 1e-15);
  EXPECT_NEAR(j(10), 0.1, 1e-15);
  EXPECT_NEAR(j(11), 0.05 * (1 + std::cos(M_PI / 200)), 1e-16);  // MLX prints 0.0999938
  EXPECT_NEAR(j(210), 0.0, 1e-15);

  // Three pieces: each later one counts from its own boundary.
  auto three = join_schedules({[](int64_t) { return 1.0; }, [](int64_t s) { return 10.0 + s; },
                               [](int64_t s) { return 100.0 + s; }},
                              {3, 5});
  EXPECT_EQ(three(2), 1.0);
  EXPECT_EQ(three(3), 10.0);
  EXPECT_EQ(three(4), 11.0);
  EXPECT_EQ(three(5), 100.0);
  EXPECT_EQ(three(7), 102.0);
}

TEST(Schedules, BadArguments) {
  EXPECT_THROW_MSG(step_decay(0.1, 0.9, 0), std::invalid_argument, "[step_decay] step_size must be at least 1, got 0");
  EXPECT_THROW_MSG(cosine_decay(0.1, 0), std::invalid_argument, "[cosine_decay] decay_steps must be at least 1, got 0");
  EXPECT_THROW_MSG(linear_schedule(0, 1, -3), std::invalid_argument, "[linear_schedule] steps must be at least 1, got -3");
  EXPECT_THROW_MSG(exponential_decay(NAN, 0.9), std::invalid_argument, "init must be finite");
  EXPECT_THROW_MSG(join_schedules({}, {}), std::invalid_argument, "[join_schedules] needs at least one schedule");
  EXPECT_THROW_MSG(join_schedules({exponential_decay(1, 0.5), exponential_decay(1, 0.5)}, {}), std::invalid_argument,
                   "2 schedules need 1 boundaries, got 0");
  EXPECT_THROW_MSG(join_schedules({exponential_decay(1, 0.5), exponential_decay(1, 0.5), exponential_decay(1, 0.5)},
                                  {5, 2}),
                   std::invalid_argument, "non-decreasing, got 5 then 2");
  EXPECT_THROW_MSG(join_schedules({exponential_decay(1, 0.5), Schedule()}, {1}), std::invalid_argument,
                   "schedule 1 is empty");
}

TEST(Schedules, OptimizerUsesScheduleOfStepBeforeTheUpdate) {
  // Update k uses schedule(k - 1): with SGD and a unit gradient the parameter falls by exactly that.
  SGD opt(exponential_decay(1.0, 0.5));
  EXPECT_TRUE(true);
  nn::ParamTree params{{"w", array(0.0, float64)}};
  nn::ParamTree grads{{"w", array(1.0, float64)}};
  EXPECT_DOUBLE_EQ(opt.learning_rate(), 1.0);
  params = opt.apply_gradients(grads, params);
  EXPECT_DOUBLE_EQ(params["w"].item<double>(), -1.0);
  EXPECT_DOUBLE_EQ(opt.learning_rate(), 0.5);
  params = opt.apply_gradients(grads, params);
  EXPECT_DOUBLE_EQ(params["w"].item<double>(), -1.5);
  params = opt.apply_gradients(grads, params);
  EXPECT_DOUBLE_EQ(params["w"].item<double>(), -1.75);
  EXPECT_EQ(opt.step(), 3);
  EXPECT_DOUBLE_EQ(opt.learning_rate(), 0.125);

  // A schedule that goes negative is refused at the update that would use it, naming the step.
  SGD bad([](int64_t s) { return 1.0 - s; });
  params = bad.apply_gradients(grads, params);
  params = bad.apply_gradients(grads, params);
  EXPECT_THROW_MSG(bad.apply_gradients(grads, params), std::invalid_argument,
                   "[SGD] the learning rate must be finite and non-negative, got -1 at step 2");
  EXPECT_EQ(bad.step(), 2);

  // set_learning_rate swaps in a new rate or schedule.
  bad.set_learning_rate(0.25);
  EXPECT_DOUBLE_EQ(bad.learning_rate(), 0.25);
}

// Learning-rate schedules (MLX's names): functions of the optimizer's step count, evaluated on the
// host once per update, so a schedule costs nothing in the graph.
//
// The update number k (1, 2, ...) uses schedule(k - 1), as in MLX: the first update sees step 0.
#pragma once

#include <cstdint>
#include <functional>
#include <type_traits>
#include <utility>
#include <vector>

namespace loom::optim {

/// A learning rate as a function of the number of updates done so far.
using Schedule = std::function<double(int64_t step)>;

/// A learning rate that is either a constant or a Schedule. Converts implicitly from a number and
/// from any callable taking the step, so `AdamW opt(1e-3)` and `AdamW opt(cosine_decay(1e-3, 1000))`
/// both work.
class LearningRate {
 public:
  LearningRate(double value) : value_(value) {}  // NOLINT(google-explicit-constructor)
  template <typename F, typename = std::enable_if_t<!std::is_arithmetic_v<std::decay_t<F>> &&
                                                    !std::is_same_v<std::decay_t<F>, LearningRate> &&
                                                    std::is_invocable_r_v<double, F&, int64_t>>>
  LearningRate(F schedule) : schedule_(std::move(schedule)) {}  // NOLINT(google-explicit-constructor)

  /// The rate for an update made after `step` updates.
  double operator()(int64_t step) const { return schedule_ ? schedule_(step) : value_; }
  bool is_schedule() const { return static_cast<bool>(schedule_); }

 private:
  double value_ = 0.0;
  Schedule schedule_;
};

/// init * decay_rate^step.
Schedule exponential_decay(double init, double decay_rate);

/// init * decay_rate^(step / step_size) (integer division): decays every `step_size` steps. step_size >= 1.
Schedule step_decay(double init, double decay_rate, int64_t step_size);

/// end + (init - end) * 0.5 * (1 + cos(pi * min(step, decay_steps) / decay_steps)): from init to end
/// over decay_steps steps, then constant. decay_steps >= 1.
Schedule cosine_decay(double init, int64_t decay_steps, double end = 0.0);

/// init + min(step, steps) * (end - init) / steps: linear from init to end, then constant. steps >= 1.
Schedule linear_schedule(double init, double end, int64_t steps);

/// schedules[0] until boundaries[0], then schedules[1] with the step counted from boundaries[0], and
/// so on (MLX's join_schedules). Needs one boundary fewer than schedules; boundaries must be
/// non-negative and non-decreasing. Typical use: join_schedules({linear_schedule(0, lr, w),
/// cosine_decay(lr, n)}, {w}) for a warm-up of w steps.
Schedule join_schedules(std::vector<Schedule> schedules, std::vector<int64_t> boundaries);

}  // namespace loom::optim

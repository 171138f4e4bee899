#include "loom/optim/schedulers.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

#include "loom/ops/utils.h"

namespace loom::optim {

using loom::detail::msg;

namespace {

void check_finite(double v, const char* op, const char* what) {
  if (!std::isfinite(v)) throw std::invalid_argument(msg("[", op, "] ", what, " must be finite, got ", v));
}

}  // namespace

Schedule exponential_decay(double init, double decay_rate) {
  check_finite(init, "exponential_decay", "init");
  check_finite(decay_rate, "exponential_decay", "decay_rate");
  return [init, decay_rate](int64_t step) { return init * std::pow(decay_rate, static_cast<double>(step)); };
}

Schedule step_decay(double init, double decay_rate, int64_t step_size) {
  check_finite(init, "step_decay", "init");
  check_finite(decay_rate, "step_decay", "decay_rate");
  if (step_size < 1) throw std::invalid_argument(msg("[step_decay] step_size must be at least 1, got ", step_size));
  return [init, decay_rate, step_size](int64_t step) {
    return init * std::pow(decay_rate, static_cast<double>(step / step_size));
  };
}

Schedule cosine_decay(double init, int64_t decay_steps, double end) {
  check_finite(init, "cosine_decay", "init");
  check_finite(end, "cosine_decay", "end");
  if (decay_steps < 1) {
    throw std::invalid_argument(msg("[cosine_decay] decay_steps must be at least 1, got ", decay_steps));
  }
  return [init, decay_steps, end](int64_t step) {
    const double s = static_cast<double>(std::min(step, decay_steps));
    const double decay = 0.5 * (1.0 + std::cos(M_PI / static_cast<double>(decay_steps) * s));
    return end + decay * (init - end);
  };
}

Schedule linear_schedule(double init, double end, int64_t steps) {
  check_finite(init, "linear_schedule", "init");
  check_finite(end, "linear_schedule", "end");
  if (steps < 1) throw std::invalid_argument(msg("[linear_schedule] steps must be at least 1, got ", steps));
  return [init, end, steps](int64_t step) {
    const double s = static_cast<double>(std::min(step, steps));
    return s * ((end - init) / static_cast<double>(steps)) + init;
  };
}

Schedule join_schedules(std::vector<Schedule> schedules, std::vector<int64_t> boundaries) {
  if (schedules.empty()) throw std::invalid_argument("[join_schedules] needs at least one schedule");
  if (boundaries.size() + 1 != schedules.size()) {
    throw std::invalid_argument(msg("[join_schedules] ", schedules.size(), " schedules need ", schedules.size() - 1,
                                    " boundaries, got ", boundaries.size()));
  }
  for (size_t i = 0; i < schedules.size(); ++i) {
    if (!schedules[i]) throw std::invalid_argument(msg("[join_schedules] schedule ", i, " is empty"));
  }
  for (size_t i = 0; i < boundaries.size(); ++i) {
    if (boundaries[i] < 0) {
      throw std::invalid_argument(msg("[join_schedules] boundary ", i, " is negative (", boundaries[i], ")"));
    }
    if (i > 0 && boundaries[i] < boundaries[i - 1]) {
      throw std::invalid_argument(msg("[join_schedules] boundaries must be non-decreasing, got ", boundaries[i - 1],
                                      " then ", boundaries[i]));
    }
  }
  return [schedules = std::move(schedules), boundaries = std::move(boundaries)](int64_t step) {
    // The last boundary at or below `step` picks the schedule (MLX's chain of where()).
    size_t k = 0;
    while (k < boundaries.size() && step >= boundaries[k]) ++k;
    return k == 0 ? schedules[0](step) : schedules[k](step - boundaries[k - 1]);
  };
}

}  // namespace loom::optim

// SGD, Adagrad, RMSprop, Lion and Adafactor, written with ops (each op is one elementwise pass).
#include <cmath>
#include <memory>
#include <stdexcept>

#include "loom/core/primitive.h"
#include "loom/ops/graph.h"
#include "loom/ops/ops.h"
#include "loom/ops/utils.h"
#include "loom/optim/optimizers.h"

namespace loom::optim {

using loom::detail::msg;

namespace {

bool non_negative(double x) { return x >= 0.0 && std::isfinite(x); }

}  // namespace

// ---- SGD ----

SGD::SGD(LearningRate learning_rate, double momentum, double weight_decay, double dampening, bool nesterov)
    : Optimizer(std::move(learning_rate)),
      momentum_(momentum),
      weight_decay_(weight_decay),
      dampening_(dampening),
      nesterov_(nesterov) {
  check_learning_rate();
  require(non_negative(momentum), "momentum must be finite and >= 0", momentum);
  require(non_negative(weight_decay), "weight_decay must be finite and >= 0", weight_decay);
  require(dampening >= 0.0 && dampening <= 1.0, "dampening must be in [0, 1]", dampening);
  if (nesterov && (momentum <= 0.0 || dampening != 0.0)) {
    throw std::invalid_argument(msg("[SGD] nesterov needs momentum > 0 and dampening 0, got momentum ", momentum,
                                    " and dampening ", dampening));
  }
}

array SGD::apply_single(const array& grad, const array& param, Slots& slots, int64_t, double lr) {
  array d = weight_decay_ != 0.0 ? grad + weight_decay_ * param : grad;
  if (momentum_ != 0.0) {
    array buf = slots.contains("v") ? slots.at("v") * momentum_ + (1.0 - dampening_) * d : d;
    slots.insert("v", buf);
    d = nesterov_ ? d + momentum_ * buf : buf;
  }
  return param - lr * d;
}

// ---- Adagrad ----

Adagrad::Adagrad(LearningRate learning_rate, double eps, double weight_decay, double lr_decay,
                 double initial_accumulator_value)
    : Optimizer(std::move(learning_rate)),
      eps_(eps),
      weight_decay_(weight_decay),
      lr_decay_(lr_decay),
      initial_(initial_accumulator_value) {
  check_learning_rate();
  require(non_negative(eps), "eps must be finite and >= 0", eps);
  require(non_negative(weight_decay), "weight_decay must be finite and >= 0", weight_decay);
  require(non_negative(lr_decay), "lr_decay must be finite and >= 0", lr_decay);
  require(non_negative(initial_accumulator_value), "initial_accumulator_value must be finite and >= 0",
          initial_accumulator_value);
}

array Adagrad::apply_single(const array& grad, const array& param, Slots& slots, int64_t step, double lr) {
  const array g = weight_decay_ != 0.0 ? grad + weight_decay_ * param : grad;
  const array v0 = slots.contains("v") ? slots.at("v") : full(param.shape(), initial_, param.dtype());
  const array v = v0 + g * g;
  slots.insert("v", v);
  const double clr = lr / (1.0 + static_cast<double>(step - 1) * lr_decay_);
  return param + (g * -clr) / (sqrt(v) + eps_);
}

// ---- RMSprop ----

namespace {
// torch.lerp's formula: a + w (b - a) for |w| < 0.5, b - (b - a) (1 - w) otherwise.
array lerp(const array& a, const array& b, double w) {
  return w < 0.5 ? a + w * (b - a) : b - (b - a) * (1.0 - w);
}
}  // namespace

RMSprop::RMSprop(LearningRate learning_rate, double alpha, double eps, double weight_decay, double momentum,
                 bool centered)
    : Optimizer(std::move(learning_rate)),
      alpha_(alpha),
      eps_(eps),
      weight_decay_(weight_decay),
      momentum_(momentum),
      centered_(centered) {
  check_learning_rate();
  require(alpha >= 0.0 && alpha <= 1.0, "alpha must be in [0, 1]", alpha);
  require(non_negative(eps), "eps must be finite and >= 0", eps);
  require(non_negative(weight_decay), "weight_decay must be finite and >= 0", weight_decay);
  require(non_negative(momentum), "momentum must be finite and >= 0", momentum);
}

array RMSprop::apply_single(const array& grad, const array& param, Slots& slots, int64_t, double lr) {
  const array g = weight_decay_ != 0.0 ? grad + weight_decay_ * param : grad;
  const array v0 = slots.contains("v") ? slots.at("v") : zeros_like(param);
  const array v = v0 * alpha_ + (g * (1.0 - alpha_)) * g;
  slots.insert("v", v);
  array avg = v;
  if (centered_) {
    const array a0 = slots.contains("grad_avg") ? slots.at("grad_avg") : zeros_like(param);
    const array a = lerp(a0, g, 1.0 - alpha_);
    slots.insert("grad_avg", a);
    avg = v - a * a;
  }
  avg = sqrt(avg) + eps_;
  if (momentum_ > 0.0) {
    const array b0 = slots.contains("buf") ? slots.at("buf") : zeros_like(param);
    const array b = b0 * momentum_ + g / avg;
    slots.insert("buf", b);
    return param + b * -lr;
  }
  return param + (g * -lr) / avg;
}

// ---- Lion ----

Lion::Lion(LearningRate learning_rate, Betas betas, double weight_decay)
    : Optimizer(std::move(learning_rate)), beta1_(betas.first), beta2_(betas.second), weight_decay_(weight_decay) {
  check_learning_rate();
  require(betas.first >= 0.0 && betas.first <= 1.0, "beta1 must be in [0, 1]", betas.first);
  require(betas.second >= 0.0 && betas.second <= 1.0, "beta2 must be in [0, 1]", betas.second);
  require(non_negative(weight_decay), "weight_decay must be finite and >= 0", weight_decay);
}

array Lion::apply_single(const array& grad, const array& param, Slots& slots, int64_t, double lr) {
  const array m0 = slots.contains("m") ? slots.at("m") : zeros_like(param);
  const array c = beta1_ * m0 + (1.0 - beta1_) * grad;
  const array m = beta2_ * m0 + (1.0 - beta2_) * grad;
  slots.insert("m", m);
  const array p = weight_decay_ > 0.0 ? (1.0 - lr * weight_decay_) * param : param;
  // m is not an ancestor of the new parameter: tie it in so eval(parameters) evaluates it.
  return depends({p - lr * sign(c)}, {m})[0];
}

// ---- Adafactor ----

Adafactor::Adafactor(std::optional<LearningRate> learning_rate, std::pair<double, double> eps, double clip_threshold,
                     double decay_rate, std::optional<double> beta_1, double weight_decay, bool scale_parameter,
                     bool relative_step, bool warmup_init)
    : Optimizer(learning_rate ? *learning_rate : LearningRate(0.0)),
      eps_(eps),
      clip_threshold_(clip_threshold),
      decay_rate_(decay_rate),
      beta_1_(beta_1),
      weight_decay_(weight_decay),
      scale_parameter_(scale_parameter),
      relative_step_(relative_step),
      warmup_init_(warmup_init) {
  if (!learning_rate && !relative_step) {
    throw std::invalid_argument("[Adafactor] relative_step=false needs a learning rate");
  }
  check_learning_rate();
  require(non_negative(eps.first), "eps.first must be finite and >= 0", eps.first);
  require(non_negative(eps.second), "eps.second must be finite and >= 0", eps.second);
  require(clip_threshold > 0.0 && std::isfinite(clip_threshold), "clip_threshold must be finite and > 0",
          clip_threshold);
  require(decay_rate <= 0.0 && std::isfinite(decay_rate), "decay_rate must be finite and <= 0", decay_rate);
  if (beta_1) require(*beta_1 >= 0.0 && *beta_1 < 1.0, "beta_1 must be in [0, 1)", *beta_1);
  require(non_negative(weight_decay), "weight_decay must be finite and >= 0", weight_decay);
}

std::optional<Shape> Adafactor::slot_shape(const std::string& slot, const array& param) const {
  const Shape& s = param.shape();
  const bool factored = s.size() >= 2;
  if (slot == "exp_avg") return s;
  if (slot == "exp_avg_sq") return factored ? std::nullopt : std::optional<Shape>(s);
  if (!factored) return std::nullopt;
  if (slot == "exp_avg_sq_row") return Shape(s.begin(), s.end() - 1);
  Shape col(s.begin(), s.end() - 2);  // exp_avg_sq_col
  col.push_back(s.back());
  return col;
}

array Adafactor::apply_single(const array& grad, const array& param, Slots& slots, int64_t step, double lr) {
  const Dtype dt = param.dtype();
  const double t = static_cast<double>(step);
  const auto rms = [](const array& x) { return sqrt(mean(square(x))); };

  // The step size: relative (1e-2, or 1e-6 t with warm-up, capped by 1/sqrt(t)) or the learning rate,
  // scaled by the parameter's RMS.
  double rel = lr;
  if (relative_step_) rel = std::min(warmup_init_ ? 1e-6 * t : 1e-2, 1.0 / std::sqrt(t));
  array step_size = array(rel, dt);
  if (scale_parameter_) step_size = maximum(array(eps_.second, dt), rms(param)) * step_size;
  const double beta2 = 1.0 - std::pow(t, decay_rate_);

  array update = square(grad) + eps_.first;
  if (param.ndim() >= 2) {
    const array r0 = slots.contains("exp_avg_sq_row") ? slots.at("exp_avg_sq_row") : zeros(*slot_shape("exp_avg_sq_row", param), dt);
    const array c0 = slots.contains("exp_avg_sq_col") ? slots.at("exp_avg_sq_col") : zeros(*slot_shape("exp_avg_sq_col", param), dt);
    const array r = beta2 * r0 + (1.0 - beta2) * mean(update, -1);
    const array c = beta2 * c0 + (1.0 - beta2) * mean(update, -2);
    slots.insert("exp_avg_sq_row", r);
    slots.insert("exp_avg_sq_col", c);
    const array r_factor = rsqrt(r / mean(r, -1, true));
    const array c_factor = rsqrt(c);
    update = expand_dims(r_factor, -1) * expand_dims(c_factor, -2) * grad;
  } else {
    const array v0 = slots.contains("exp_avg_sq") ? slots.at("exp_avg_sq") : zeros_like(param);
    const array v = beta2 * v0 + (1.0 - beta2) * update;
    slots.insert("exp_avg_sq", v);
    update = rsqrt(v) * grad;
  }
  update = update / maximum(array(1.0, dt), rms(update) / clip_threshold_);
  update = step_size * update;
  if (beta_1_) {
    const array m0 = slots.contains("exp_avg") ? slots.at("exp_avg") : zeros_like(param);
    update = *beta_1_ * m0 + (1.0 - *beta_1_) * update;
    slots.insert("exp_avg", update);
  }
  array p = param;
  if (weight_decay_ != 0.0) p = p + p * (step_size * -weight_decay_);
  return p - update;
}

}  // namespace loom::optim

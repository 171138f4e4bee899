// Adam and AdamW: each parameter's step is one fused update (fast::adam_update).
#include <cmath>
#include <stdexcept>

#include "loom/fast/fast.h"
#include "loom/ops/ops.h"
#include "loom/ops/utils.h"
#include "loom/optim/optimizers.h"

namespace loom::optim {

using loom::detail::msg;

Adam::Adam(LearningRate learning_rate, Betas betas, double eps, double weight_decay, bool bias_correction)
    : Adam("Adam", std::move(learning_rate), betas, eps, weight_decay, bias_correction, false) {}

Adam::Adam(const char* who, LearningRate learning_rate, Betas betas, double eps, double weight_decay,
           bool bias_correction, bool decoupled)
    : Optimizer(std::move(learning_rate)),
      beta1_(betas.first),
      beta2_(betas.second),
      eps_(eps),
      weight_decay_(weight_decay),
      bias_correction_(bias_correction),
      decoupled_(decoupled) {
  // name() is not yet the derived one inside a base constructor: spell the messages with `who`.
  auto require_here = [&](bool ok, const std::string& what, double value) {
    if (!ok) throw std::invalid_argument(msg("[", who, "] ", what, ", got ", value));
  };
  check_learning_rate(who);
  require_here(betas.first >= 0.0 && betas.first < 1.0, "beta1 must be in [0, 1)", betas.first);
  require_here(betas.second >= 0.0 && betas.second < 1.0, "beta2 must be in [0, 1)", betas.second);
  require_here(eps >= 0.0 && std::isfinite(eps), "eps must be finite and >= 0", eps);
  require_here(weight_decay >= 0.0 && std::isfinite(weight_decay), "weight_decay must be finite and >= 0",
               weight_decay);
}

AdamW::AdamW(LearningRate learning_rate, Betas betas, double eps, double weight_decay, bool bias_correction)
    : Adam("AdamW", std::move(learning_rate), betas, eps, weight_decay, bias_correction, true) {}

array Adam::apply_single(const array& grad, const array& param, Slots& slots, int64_t step, double lr) {
  const array m = slots.contains("m") ? slots.at("m") : zeros_like(param);
  const array v = slots.contains("v") ? slots.at("v") : zeros_like(param);
  fast::AdamStep hp;
  hp.lr = lr;
  hp.beta1 = beta1_;
  hp.beta2 = beta2_;
  hp.eps = eps_;
  hp.weight_decay = weight_decay_;
  hp.decoupled = decoupled_;
  hp.bias_correction = bias_correction_;
  hp.step = step;
  auto [p2, m2, v2] = fast::adam_update(param, grad, m, v, hp);
  slots.insert("m", m2);
  slots.insert("v", v2);
  return p2;
}

}  // namespace loom::optim

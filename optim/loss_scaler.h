// Dynamic loss scaling for float16 training (the rule of torch.cuda.amp.GradScaler; MLX has none).
// float16 flushes gradients below 2^-24 to zero; scaling the loss by S scales every gradient by S and
// keeps them representable. The scaler divides the gradients back before the optimizer sees them,
// skips a step whose gradients overflowed (inf or NaN), and adapts S: halved after an overflow,
// doubled after `growth_interval` good steps in a row.
//
//     optim::DynamicLossScaler scaler;
//     auto step = nn::value_and_grad(model, [&](const array& x, const array& y) {
//       return scaler.scale(loss_fn(model(x), y));
//     }, float16);
//     auto [scaled_loss, grads] = step(x, y);
//     nn::average_gradients(grads);                 // (data parallel: or shard_state, or FSDP)
//     if (scaler.step(opt, model, grads)) eval(model.parameters(), opt.state());
#pragma once

#include <cstdint>
#include <optional>

#include "loom/core/array.h"
#include "loom/distributed/distributed.h"
#include "loom/nn/module.h"
#include "loom/nn/tree.h"
#include "loom/optim/optimizers.h"

namespace loom::optim {

class DynamicLossScaler {
 public:
  struct Options {
    double init_scale = 65536.0;  // 2^16, torch's default
    double growth_factor = 2.0;   // > 1
    double backoff_factor = 0.5;  // in (0, 1)
    int growth_interval = 2000;   // good steps in a row before the scale grows
  };
  /// The decision to skip is taken by every rank of `group` together (default: the world): a rank
  /// whose gradients overflowed makes all of them skip, so replicas never diverge. Throws
  /// std::invalid_argument for options outside the ranges above.
  explicit DynamicLossScaler(Options options, std::optional<distributed::Group> group = std::nullopt);
  DynamicLossScaler() : DynamicLossScaler(Options{}) {}

  /// loss times the current scale, in loss's dtype (lazy). Differentiate this one.
  array scale(const array& loss) const;
  /// Each gradient divided by the current scale, in its own dtype (the division in float32 at least).
  nn::ParamTree unscale(const nn::ParamTree& grads) const;
  /// Evaluates whether every gradient is finite, on every rank (one all_sum of one flag when the group
  /// has several ranks). If so, applies optimizer.update(model, unscale(grads)) (lazy, as update is)
  /// and returns true; if not, leaves model and optimizer as they are and returns false. Then adapts
  /// the scale. Every rank of the group must call it.
  bool step(Optimizer& optimizer, nn::Module& model, const nn::ParamTree& grads);

  /// The current scale.
  double loss_scale() const { return scale_; }
  /// Steps skipped so far for overflowing gradients.
  int64_t skipped_steps() const { return skipped_; }
  /// The scaler's state for a checkpoint: "scale" (float64) and "good_steps" (int64) scalars.
  nn::ParamTree state() const;
  /// Restores a state(); throws std::invalid_argument when a name is missing or a value is invalid.
  void set_state(const nn::ParamTree& state);

 private:
  Options options_;
  std::optional<distributed::Group> group_;
  double scale_;
  int good_steps_ = 0;
  int64_t skipped_ = 0;
};

}  // namespace loom::optim

// Optimizers (names follow mlx.optimizers; the PyTorch-named ones take PyTorch's defaults).
//
// Everything is lazy: `update(model, grads)` gives the model new, unevaluated parameter arrays and
// the optimizer new, unevaluated state arrays, all in one graph, so the training step is
//
//   auto [loss, grads] = loss_and_grad(x, y);
//   opt.update(model, grads);
//   eval(loss, model.parameters());   // forward, backward, update and optimizer state together
//
// Every state array of every optimizer here is an ancestor of the new parameters, so evaluating the
// parameters evaluates the state too (and nothing is left unevaluated to grow across steps).
//
// State. Per parameter, named "<parameter>.<slot>" ("l1.weight.m", "l1.weight.v"), created on the
// first update that sees the parameter, in its dtype. The step counter is a host integer (step()),
// incremented by every apply_gradients and exported by state() as the int64 scalar "step".
// set_state() restores a state() (checkpoints), checking names and shapes.
//
// Learning rate. A number or a Schedule of the step (schedulers.h), evaluated on the host: update
// number k (1, 2, ...) uses lr(k - 1). learning_rate() is the rate the next update will use.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "loom/core/array.h"
#include "loom/distributed/distributed.h"
#include "loom/nn/module.h"
#include "loom/nn/tree.h"
#include "loom/optim/schedulers.h"

namespace loom::optim {

using Betas = std::pair<double, double>;

class Optimizer {
 public:
  virtual ~Optimizer() = default;

  /// model.update(apply_gradients(grads, model.trainable_parameters())). Nothing is evaluated.
  void update(nn::Module& model, const nn::ParamTree& grads);

  /// The updated parameters (new lazy arrays), in the order of `params`. `grads` and `params` must
  /// hold the same names with the same shapes (std::invalid_argument listing the differences).
  /// Increments step(); on an error the optimizer is left unchanged.
  nn::ParamTree apply_gradients(const nn::ParamTree& grads, const nn::ParamTree& params);

  /// Number of apply_gradients calls so far.
  int64_t step() const { return step_; }
  /// The learning rate the next update will use: lr(step()).
  double learning_rate() const { return lr_(step_); }
  void set_learning_rate(LearningRate lr) { lr_ = std::move(lr); }

  /// "step" (int64 scalar) and every state array as "<parameter>.<slot>".
  nn::ParamTree state() const;
  /// Restores a state() of this kind of optimizer. "step" must be there (a non-negative integer
  /// scalar) and every other name must end in one of this optimizer's slots. When the optimizer
  /// already holds state, the names and shapes must be exactly those of its state; otherwise shapes
  /// are checked against the parameters at the next update. Arrays are kept as given (lazy ones
  /// included); on an error nothing changes.
  void set_state(const nn::ParamTree& state);
  /// Checks a state (as set_state takes it) against the parameters it will update, as the next
  /// update would: every "<parameter>.<slot>" must name one of `params` and have the shape this
  /// optimizer keeps for that slot. Throws std::invalid_argument listing every difference.
  void check_state(const nn::ParamTree& state, const nn::ParamTree& params) const;

  /// "SGD", "Adam", ... (used in error messages and checkpoints).
  virtual const char* name() const = 0;

  /// ZeRO for data parallelism: shards this optimizer's state (stage 1), and the averaged gradients too
  /// (stage 2), across the ranks of `group` (default: the world). From then on update(model, grads)
  /// takes this rank's own gradients (not averaged: no nn::average_gradients) and
  ///  - flattens the trainable parameters of each dtype end to end (padded to a multiple of N ranks);
  ///  - averages the gradients over the group: stage 2 by a reduce-scatter (distributed::sum_scatter),
  ///    so each rank receives only its 1/N slice of the average; stage 1 by all-reduces, of which each
  ///    rank keeps its slice;
  ///  - updates this rank's slice of the parameters, keeping state for that slice alone (state() holds
  ///    "flat.<dtype>.<slot>" slices: 1/N of the replicated state);
  ///  - all-gathers the updated slices into every rank's model.
  /// The result is the replicated update's to float rounding. Call it before the first update; only
  /// optimizers that update each element on its own can shard (not Adafactor). Throws
  /// std::invalid_argument otherwise or for a stage other than 1 and 2.
  void shard_state(std::optional<distributed::Group> group = std::nullopt, int stage = 2);
  /// Whether shard_state is on, and its stage (0: off).
  int sharding_stage() const { return sharding_ ? sharding_->stage : 0; }
  /// The state as the replicated optimizer would hold it ("<parameter>.<slot>" in each parameter's
  /// shape) for the model's trainable parameters `params`: under shard_state every rank's slices,
  /// all-gathered and cut back into the parameters (lazy; every rank of the group must call it);
  /// otherwise state() without "step".
  nn::ParamTree gathered_state(const nn::ParamTree& params) const;
  /// Whether each element's update depends on that element alone (and its state), so that any slice
  /// of the flattened parameters can be updated by itself.
  virtual bool elementwise() const { return true; }

 protected:
  explicit Optimizer(LearningRate lr) : lr_(std::move(lr)) {}

  /// The state arrays of one parameter, by slot name ("m", "v"). Empty on the first update.
  using Slots = nn::ParamTree;
  /// The new parameter for `param` given its gradient; reads and replaces `slots`. `step` is the
  /// count including this update (1 on the first), `lr` the learning rate for this update. `grad`
  /// has the parameter's shape and dtype.
  virtual array apply_single(const array& grad, const array& param, Slots& slots, int64_t step, double lr) = 0;
  /// Every slot name this optimizer may create (for set_state's checks).
  virtual std::vector<std::string> slot_names() const = 0;
  /// The shape slot `slot` has for `param` (the parameter's shape unless overridden); nullopt when
  /// that slot cannot belong to such a parameter.
  virtual std::optional<Shape> slot_shape(const std::string& slot, const array& param) const { return param.shape(); }

  /// Throws std::invalid_argument "[Name] what, got value" unless ok.
  void require(bool ok, const std::string& what, double value) const;
  /// A constant learning rate must be finite and >= 0 (schedules are checked at every update).
  /// `who` names the optimizer in the message (name() by default; a base constructor cannot call it).
  void check_learning_rate(const char* who = nullptr) const;

 private:
  void check_gradients(const nn::ParamTree& grads, const nn::ParamTree& params) const;
  void sharded_update(nn::Module& model, const nn::ParamTree& grads);
  // Under shard_state: the parameters of each dtype, flattened end to end (see sharded_update).
  struct Flat {
    std::string name;        // "flat.<dtype>"
    int64_t size, slice;     // elements of the flattened parameters; of each rank's slice
    std::vector<size_t> members;  // positions in the parameter tree
  };
  std::vector<Flat> flat_layout(const nn::ParamTree& params) const;

  struct Sharding {
    distributed::Group group;
    int stage;
  };
  LearningRate lr_;
  int64_t step_ = 0;
  nn::ParamTree state_;  // "<parameter>.<slot>" -> array, without "step"
  std::optional<Sharding> sharding_;
};

/// Stochastic gradient descent with PyTorch's semantics: d = g + weight_decay * p; with momentum the
/// buffer is b = d on the first update and b = momentum * b + (1 - dampening) * d after; d = b, or
/// d + momentum * b with nesterov; p -= lr * d. Slot "v" (the buffer) when momentum > 0.
class SGD : public Optimizer {
 public:
  SGD(LearningRate learning_rate, double momentum = 0.0, double weight_decay = 0.0, double dampening = 0.0,
      bool nesterov = false);
  const char* name() const override { return "SGD"; }

 protected:
  array apply_single(const array& grad, const array& param, Slots& slots, int64_t step, double lr) override;
  std::vector<std::string> slot_names() const override { return {"v"}; }

 private:
  double momentum_, weight_decay_, dampening_;
  bool nesterov_;
};

/// Adam (Kingma & Ba) computed as torch.optim.Adam does: with weight_decay, g += weight_decay * p
/// (L2, coupled); m = lerp(m, g, 1 - b1); v = b2 v + (1 - b2) g^2; with bias_correction
/// p -= (lr / (1 - b1^t)) m / (sqrt(v) / sqrt(1 - b2^t) + eps), without it p -= lr m / (sqrt(v) + eps)
/// (MLX's default form). Slots "m" and "v". Each parameter's update is one fused primitive.
class Adam : public Optimizer {
 public:
  explicit Adam(LearningRate learning_rate = 1e-3, Betas betas = {0.9, 0.999}, double eps = 1e-8,
                double weight_decay = 0.0, bool bias_correction = true);
  const char* name() const override { return "Adam"; }

 protected:
  Adam(const char* who, LearningRate learning_rate, Betas betas, double eps, double weight_decay,
       bool bias_correction, bool decoupled);
  array apply_single(const array& grad, const array& param, Slots& slots, int64_t step, double lr) override;
  std::vector<std::string> slot_names() const override { return {"m", "v"}; }

 private:
  double beta1_, beta2_, eps_, weight_decay_;
  bool bias_correction_, decoupled_;
};

/// AdamW (Loshchilov & Hutter): Adam with decoupled weight decay, p *= 1 - lr * weight_decay before
/// the Adam step, matching torch.optim.AdamW (bias correction on by default, as in PyTorch and the
/// paper; MLX's default is off) to float32 rounding.
class AdamW : public Adam {
 public:
  explicit AdamW(LearningRate learning_rate = 1e-3, Betas betas = {0.9, 0.999}, double eps = 1e-8,
                 double weight_decay = 0.01, bool bias_correction = true);
  const char* name() const override { return "AdamW"; }
};

/// Adagrad as torch.optim.Adagrad: g += weight_decay * p; v += g^2;
/// p -= lr / (1 + (t - 1) lr_decay) * g / (sqrt(v) + eps). Slot "v" (starting at
/// initial_accumulator_value).
class Adagrad : public Optimizer {
 public:
  explicit Adagrad(LearningRate learning_rate = 1e-2, double eps = 1e-10, double weight_decay = 0.0,
                   double lr_decay = 0.0, double initial_accumulator_value = 0.0);
  const char* name() const override { return "Adagrad"; }

 protected:
  array apply_single(const array& grad, const array& param, Slots& slots, int64_t step, double lr) override;
  std::vector<std::string> slot_names() const override { return {"v"}; }

 private:
  double eps_, weight_decay_, lr_decay_, initial_;
};

/// RMSprop as torch.optim.RMSprop: g += weight_decay * p; v = alpha v + (1 - alpha) g^2; centered:
/// a = lerp(a, g, 1 - alpha) and d = sqrt(v - a^2) + eps, else d = sqrt(v) + eps; with momentum
/// b = momentum b + g / d and p -= lr b, else p -= lr g / d. Slots "v", "grad_avg" (centered),
/// "buf" (momentum > 0).
class RMSprop : public Optimizer {
 public:
  explicit RMSprop(LearningRate learning_rate = 1e-2, double alpha = 0.99, double eps = 1e-8,
                   double weight_decay = 0.0, double momentum = 0.0, bool centered = false);
  const char* name() const override { return "RMSprop"; }

 protected:
  array apply_single(const array& grad, const array& param, Slots& slots, int64_t step, double lr) override;
  std::vector<std::string> slot_names() const override { return {"v", "grad_avg", "buf"}; }

 private:
  double alpha_, eps_, weight_decay_, momentum_;
  bool centered_;
};

/// Lion (Chen et al.), as MLX: c = b1 m + (1 - b1) g; m = b2 m + (1 - b2) g;
/// p = p (1 - lr weight_decay) - lr sign(c). Slot "m".
class Lion : public Optimizer {
 public:
  explicit Lion(LearningRate learning_rate, Betas betas = {0.9, 0.99}, double weight_decay = 0.0);
  const char* name() const override { return "Lion"; }

 protected:
  array apply_single(const array& grad, const array& param, Slots& slots, int64_t step, double lr) override;
  std::vector<std::string> slot_names() const override { return {"m"}; }

 private:
  double beta1_, beta2_, weight_decay_;
};

/// Adafactor (Shazeer & Stern) with MLX's semantics and defaults. Parameters with two or more
/// dimensions keep factored second moments "exp_avg_sq_row" (shape without the last axis) and
/// "exp_avg_sq_col" (shape without the second-to-last axis); others keep "exp_avg_sq"; "exp_avg"
/// when beta_1 is given. With relative_step (the default) the step size is min(1e-2, 1/sqrt(t))
/// (min(1e-6 t, 1/sqrt(t)) with warmup_init) and the learning rate is ignored; scale_parameter
/// multiplies it by max(eps.second, RMS(p)). For more than two dimensions the factored estimate is
/// the outer product per leading index (MLX's matmul form is defined for two only).
class Adafactor : public Optimizer {
 public:
  explicit Adafactor(std::optional<LearningRate> learning_rate = std::nullopt, std::pair<double, double> eps = {1e-30, 1e-3},
                     double clip_threshold = 1.0, double decay_rate = -0.8, std::optional<double> beta_1 = std::nullopt,
                     double weight_decay = 0.0, bool scale_parameter = true, bool relative_step = true,
                     bool warmup_init = false);
  const char* name() const override { return "Adafactor"; }
  bool elementwise() const override { return false; }  // factored moments, RMS of the parameter

 protected:
  array apply_single(const array& grad, const array& param, Slots& slots, int64_t step, double lr) override;
  std::vector<std::string> slot_names() const override {
    return {"exp_avg_sq_row", "exp_avg_sq_col", "exp_avg_sq", "exp_avg"};
  }
  std::optional<Shape> slot_shape(const std::string& slot, const array& param) const override;

 private:
  std::pair<double, double> eps_;
  double clip_threshold_, decay_rate_;
  std::optional<double> beta_1_;
  double weight_decay_;
  bool scale_parameter_, relative_step_, warmup_init_;
};

}  // namespace loom::optim

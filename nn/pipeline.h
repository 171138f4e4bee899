// nn::Pipeline: pipeline parallelism. A Sequential's layers are split into stages of consecutive
// layers, one stage per rank of a group; a training step runs micro-batches through the stages by
// a schedule (GPipe or 1F1B), and one eval runs it all: every stage's forward and backward passes
// and the messages between them.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "loom/distributed/distributed.h"
#include "loom/nn/containers.h"
#include "loom/nn/module.h"

namespace loom::nn {

/// The order in which a stage runs the forward (F) and backward (B) passes of its micro-batches.
/// - gpipe: every F, then every B. A stage holds the activations of all m micro-batches at once.
/// - one_f_one_b: stage s runs p - 1 - s forwards first, then alternates one F and one B, then the
///   remaining B's (PipeDream-flush, Megatron's default). The bubble is the same, (p - 1) / (m + p - 1)
///   of the step, but a stage holds the activations of at most p - s micro-batches.
/// Both run each stage's backward passes in micro-batch order, so they give the same gradients bit for
/// bit.
enum class PipelineSchedule { gpipe, one_f_one_b };

/// What one training step of a pipeline returns: the loss (the mean over the micro-batches of
/// loss_fn's values), on every stage, and this stage's gradients.
struct PipelineStep {
  array loss;
  ParamTree grads;
};

/// A Sequential's layers as stages across the ranks of `group`: rank r holds stage r, layers
/// [first_layer(), end_layer()), and this module's parameters are that stage's, under the whole
/// model's names ("layers.4.weight", ...). Train with its value_and_grad, an optimizer's update of
/// this module, and one eval per step:
///
///     nn::Sequential model(...);                 // the whole model, built the same way on every rank
///     nn::Pipeline pipe(model, group);           // this rank's stage
///     optim::AdamW opt(1e-3);
///     auto [loss, grads] = pipe.value_and_grad(x, y, nn::losses::cross_entropy_mean, 8);  // 8 micro-batches
///     opt.update(pipe, grads);
///     eval(loss, pipe.parameters(), opt.state());
///
/// Build the whole model on every rank: its parameters are lazy until evaluated, and the pipeline
/// replaces the other stages' parameters with unevaluated placeholders (the Sequential is only the
/// blueprint afterwards), so a rank holds its own stage's parameters alone. Combine with data
/// parallelism over another axis of a distributed::Mesh by averaging the gradients over that axis
/// (nn::average_gradients(grads, ..., mesh.group("dp"))).
class Pipeline : public Module {
 public:
  using LossFn = std::function<array(const array& output, const array& target)>;

  /// `stage_sizes`: the number of layers of each stage (group.size() positive numbers adding up to
  /// model.size()); empty: as even as possible, the first stages taking one more layer when the
  /// layers do not divide. Throws std::invalid_argument for fewer layers than ranks or sizes that do
  /// not fit.
  Pipeline(Sequential& model, distributed::Group group, std::vector<int> stage_sizes = {});

  int stage() const { return stage_; }
  int num_stages() const { return static_cast<int>(sizes_.size()); }
  const std::vector<int>& stage_sizes() const { return sizes_; }
  size_t first_layer() const { return first_; }
  size_t end_layer() const { return end_; }
  const distributed::Group& group() const { return group_; }

  /// One training step's forward and backward passes, built (nothing is evaluated). `x` and `y` are
  /// the step's whole batch, split along axis 0 into `micro_batches` equal micro-batches (the batch
  /// must divide); every rank passes them (or arrays of their shapes and dtypes): the first stage
  /// reads x, the last y, the others neither. `loss_fn(output, target)` is applied on the last stage
  /// to each micro-batch and must return a scalar mean over it; the step's loss is the mean over the
  /// micro-batches, so the gradients are those of the whole batch's mean loss, as one process
  /// computes them. With `compute_dtype` (bfloat16 or float16) each stage runs under Autocast, as
  /// nn::value_and_grad does, and the activations travel in that dtype. The messages are checked
  /// first: ranks that build different steps (another schedule, number of micro-batches, shapes or
  /// split) all throw from eval, naming each rank's.
  PipelineStep value_and_grad(const array& x, const array& y, const LossFn& loss_fn, int micro_batches,
                              PipelineSchedule schedule = PipelineSchedule::one_f_one_b,
                              std::optional<Dtype> compute_dtype = std::nullopt);

  /// The forward passes alone (evaluation): the mean of loss_fn over the micro-batches, on every
  /// stage.
  array loss(const array& x, const array& y, const LossFn& loss_fn, int micro_batches,
             std::optional<Dtype> compute_dtype = std::nullopt);

 private:
  struct Boundary {
    Shape shape;
    Dtype dtype;
  };
  array apply(size_t begin, size_t end, const array& x) const;
  Boundary input_boundary(const array& micro_x, std::optional<Dtype> compute_dtype);
  PipelineStep run(const array& x, const array& y, const LossFn& loss_fn, int micro_batches,
                   PipelineSchedule schedule, std::optional<Dtype> compute_dtype, bool backward);

  distributed::Group group_;
  std::vector<int> sizes_;
  int stage_ = 0;
  size_t first_ = 0, end_ = 0;
  std::vector<std::shared_ptr<Module>> layers_;  // every layer of the model (null for callables)
  std::vector<Sequential::Fn> calls_;
  // The shape and dtype of this stage's input by (micro-batch shape, dtype, compute dtype): found by
  // running the earlier stages' layers on placeholders, once.
  std::map<std::tuple<Shape, int, int>, Boundary> boundaries_;
};

namespace detail {
/// One stage's passes in order: (forward, micro-batch).
struct PipelineAction {
  bool forward;
  int micro_batch;
};
std::vector<PipelineAction> pipeline_actions(PipelineSchedule schedule, int stages, int micro_batches, int stage);

/// One stage's messages in order. A send followed by a receive from the same peer travels as one
/// distributed::send_recv (`with_next`), which keeps 1F1B's steady state from blocking.
struct PipelineMessage {
  enum Kind { activation, gradient, loss } kind;
  bool send;
  int micro_batch;
  int peer;
  bool with_next;
};
std::vector<PipelineMessage> pipeline_messages(PipelineSchedule schedule, int stages, int micro_batches, int stage,
                                               bool backward = true);
}  // namespace detail

}  // namespace loom::nn

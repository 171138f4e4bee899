// Data-parallel gradient averaging as graph: bucketed all_mean nodes, evaluated by the step's eval.
#pragma once

#include <cstddef>
#include <functional>
#include <optional>

#include "loom/distributed/distributed.h"
#include "loom/nn/tree.h"

namespace loom::nn {

/// The mean of `grads` over the processes of `group` (default: the world), as MLX's
/// nn.average_gradients. Gradients are packed into buckets of at most `all_reduce_size` bytes in
/// reverse order (the order the backward pass produces them; a bucket holds one dtype, and a
/// gradient larger than the limit is a bucket of its own); each bucket is one all_mean_flat of its
/// gradients (eval has their producers write straight into the bucket; gradients already evaluated
/// are copied in), split back to the original names and shapes as views. `all_reduce_size` <= 0
/// sends every gradient alone. With `communication_type` (float16 or bfloat16, say) buckets travel
/// in that dtype, summed, then are cast back and divided in one pass. On a group of size 1 the
/// gradients come back untouched. Nothing is communicated here: the collectives run in the next eval.
ParamTree average_gradients(const ParamTree& grads, std::ptrdiff_t all_reduce_size = 32 << 20,
                            std::optional<Dtype> communication_type = std::nullopt,
                            std::optional<distributed::Group> group = std::nullopt);
/// The same for a model some of whose parameters are this rank's own part of a whole spread over
/// the group (the experts of an nn::MoE with expert parallelism): the gradients named in `local` are
/// not averaged but divided by the group's size, since the tokens of every rank reached them (each is
/// already the sum over the ranks' losses); the others are averaged as above. So a step equals the
/// one-process step on the whole batch. Every name must be among the gradients (std::invalid_argument).
ParamTree average_gradients(const ParamTree& grads, const std::vector<std::string>& local,
                            std::ptrdiff_t all_reduce_size = 32 << 20,
                            std::optional<Dtype> communication_type = std::nullopt,
                            std::optional<distributed::Group> group = std::nullopt);

/// Gradient accumulation (what PyTorch's `DDP.no_sync()` gives): the gradients of `steps`
/// micro-batches are summed on each rank with no communication, and every `steps`-th call to
/// accumulate returns their mean averaged over the group by one average_gradients (bucketed, with
/// `all_reduce_size` and `communication_type` as there). With micro-batches of equal size the update
/// is the one a `steps`-times larger batch would give, to float rounding. Evaluating state() with each
/// micro-batch's step keeps only the running sums between micro-batches, so memory stays one
/// micro-batch's step plus one copy of the gradients (in the step that averages, up to half a copy
/// more: new gradients wait beside the sums and the all-reduce's bucket until they are added in):
///
///     nn::GradientAccumulator acc(4);                 // 4 micro-batches per optimizer step
///     for (const auto& [x, y] : micro_batches) {
///       auto [loss, grads] = loss_and_grad(model, x, y);
///       if (auto g = acc.accumulate(grads)) opt.update(model, *g);
///       eval(loss, model.parameters(), opt.state(), acc.state());
///     }
///
/// Every rank must call accumulate the same number of times.
class GradientAccumulator {
 public:
  explicit GradientAccumulator(int steps, std::ptrdiff_t all_reduce_size = 32 << 20,
                               std::optional<Dtype> communication_type = std::nullopt,
                               std::optional<distributed::Group> group = std::nullopt);
  /// Adds `grads` (the same names and shapes every time) to the running sum. Returns nothing until
  /// the `steps`-th call since the last step, which returns the averaged mean and starts over.
  std::optional<ParamTree> accumulate(const ParamTree& grads);
  /// The running sums (empty right after a step): evaluate them with each micro-batch's step.
  const ParamTree& state() const { return sum_; }
  /// Micro-batches summed since the last step.
  int count() const { return count_; }
  int steps() const { return steps_; }
  /// Drops the running sums (a step abandoned midway).
  void reset();

 private:
  int steps_;
  std::ptrdiff_t all_reduce_size_;
  std::optional<Dtype> communication_type_;
  distributed::Group group_;
  ParamTree sum_;
  int count_ = 0;
};

/// Uneven data across ranks (PyTorch's `Join` for DistributedDataParallel): ranks may run
/// different numbers of steps. A rank that still has data averages its gradients with
/// `join.average_gradients(grads)` instead of nn::average_gradients; a rank that has run out calls
/// `join.finish(...)`, which shadows the others' averages with zero gradients until every rank has
/// run out, handing each average to `apply` so that its model and optimizer state follow the
/// others' exactly:
///
///     nn::Join join;                                   // one per pass over the data
///     for (const auto& [x, y] : my_batches) {          // this rank's share, of any length
///       auto [loss, grads] = loss_and_grad(model, x, y);
///       opt.update(model, join.average_gradients(grads));
///       eval(loss, model.parameters(), opt.state());
///     }
///     join.finish(model.trainable_parameters(), [&](const nn::ParamTree& g) {
///       opt.update(model, g);
///       eval(model.parameters(), opt.state());
///     });
///
/// Every rank must construct its Join with the same arguments. The averages carry one extra element,
/// the number of ranks that contributed data (`active()`), so a step costs no extra collective. As
/// PyTorch's default, a step's average divides by the group's size, joined ranks contributing zeros;
/// with `divide_by_initial_size` false it divides by the ranks that still had data. Only the gradient
/// averages are shadowed: any other collective a rank runs while another has joined (an all_sum of
/// the loss for logging, say) fails with the ranks' disagreement error, naming both collectives.
class Join {
 public:
  explicit Join(std::ptrdiff_t all_reduce_size = 32 << 20, std::optional<Dtype> communication_type = std::nullopt,
                std::optional<distributed::Group> group = std::nullopt, bool divide_by_initial_size = true);

  /// average_gradients(grads, all_reduce_size, communication_type, group) for a rank with data.
  ParamTree average_gradients(const ParamTree& grads);
  /// For a rank out of data: until no rank has data left, averages zero gradients shaped like `like`
  /// (the trainable parameters) with the others' and calls `apply` with each average. Returns the
  /// number of averages it shadowed; afterwards every rank of the group has finished.
  int finish(const ParamTree& like, const std::function<void(const ParamTree&)>& apply);
  /// The number of ranks that contributed data to the last average (evaluates it if needed).
  int active();
  const distributed::Group& group() const { return group_; }

 private:
  ParamTree average(const ParamTree& grads, bool has_data);

  std::ptrdiff_t all_reduce_size_;
  std::optional<Dtype> communication_type_;
  distributed::Group group_;
  bool divide_by_initial_size_;
  std::optional<array> active_;  // the last average's count (its mean over the group, when dividing by the size)
  bool finished_ = false;
};

}  // namespace loom::nn

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

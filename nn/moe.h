// nn::MoE: a mixture-of-experts MLP (Switch Transformer, GShard, Mixtral): a router sends each token
// to its top-k experts, each expert takes at most `capacity` tokens, and with expert parallelism the
// experts live on different ranks of a group and the tokens travel to them and back by all_to_all.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "loom/distributed/distributed.h"
#include "loom/nn/linear.h"
#include "loom/nn/module.h"

namespace loom::nn {

namespace detail {
struct MoEInit {  // the checked sizes and this rank's experts (moe.cpp)
  int dims, hidden, experts, k, first, local;
};
}  // namespace detail

/// What one call of an MoE layer gives.
struct MoEOutput {
  array y;                    // the input's shape: each token's experts' outputs, weighted by its gates
  array load_balancing_loss;  // Switch's auxiliary loss, E * sum_e f_e P_e (1 when the load is even)
  array dropped;              // the fraction of (token, choice) pairs over their expert's capacity (float32)
};

/// A mixture of `num_experts` two-layer MLPs (dims -> hidden -> dims, `activation` between, each with
/// biases). For tokens x (..., dims), flattened to T rows:
/// - the router (a Linear without bias, "router") gives each token probabilities over the experts
///   (softmax, float32); its top_k experts are chosen (ties to the lower index) and their
///   probabilities, renormalized to sum to 1, are the token's gates (Mixtral's rule; top_k = 1 with
///   renormalize false is Switch's, which keeps the raw probability);
/// - each expert takes at most capacity = ceil(capacity_factor * T * top_k / num_experts) of this
///   call's tokens, first choices before second ones and, within a choice, in token order (GShard's
///   priority); a (token, choice) past its expert's capacity is dropped and contributes nothing (the
///   residual around the layer carries the token on);
/// - y[t] = sum over its kept choices of gate * expert(x[t]).
///
/// Expert parallelism: with `group` (of N ranks, N dividing num_experts) rank r holds experts
/// [r E/N, (r + 1) E/N) (the parameters "experts.w1", "experts.b1", "experts.w2", "experts.b2"),
/// recorded as Module splits along axis 0 (so optim::save_gathered_checkpoint writes all E), and each call sends every rank's tokens for them there
/// and back by two all_to_alls of (E, capacity, dims); the capacity is per rank, from its own T. The
/// experts' gradients then come from every rank's tokens: average the gradients with
/// nn::average_gradients(grads, local) where `local` names the experts' parameters (model.splits()),
/// so that they are divided by N instead of averaged. The experts are drawn expert by expert from
/// one key (next from the global state), so every N gives the same model for the same seed: with
/// the same tokens per rank, N ranks compute what one process does on each rank's tokens in turn.
class MoE : public Module {
 public:
  MoE(int dims, int hidden, int num_experts, int top_k = 2, double capacity_factor = 1.25,
      std::optional<distributed::Group> group = std::nullopt,
      std::function<array(const array&)> activation = nullptr, bool renormalize = true);

  MoEOutput forward(const array& x) const;
  /// forward(x).y (for nn::Sequential); the last call's auxiliary values stay in last().
  array operator()(const array& x);
  const MoEOutput& last() const;

  int num_experts() const { return experts_; }
  int local_experts() const { return local_; }
  int top_k() const { return k_; }
  int capacity(int tokens) const;

  /// This rank's experts, stacked along axis 0: w1 (E/N, dims, hidden), b1 (E/N, hidden), w2 (E/N,
  /// hidden, dims), b2 (E/N, dims).
  struct Experts : Module {
    array w1, b1, w2, b2;
    Experts(array w1_, array b1_, array w2_, array b2_);
  };
  Linear router;
  Experts experts;

 private:
  MoE(const detail::MoEInit& in, double capacity_factor, const std::optional<distributed::Group>& group,
      std::function<array(const array&)> activation, bool renormalize);
  int dims_, experts_, k_, local_;
  double capacity_factor_;
  std::optional<distributed::Group> group_;
  std::function<array(const array&)> activation_;
  bool renormalize_;
  std::optional<MoEOutput> last_;
};

}  // namespace loom::nn

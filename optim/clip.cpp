#include "loom/optim/clip.h"

#include <cmath>
#include <stdexcept>
#include <unordered_set>

#include "loom/ops/ops.h"
#include "loom/ops/utils.h"

namespace loom::optim {

namespace {

// The dtype the squares are summed in: float32, float64 when any gradient is.
Dtype check(const nn::ParamTree& grads, double max_norm, const char* op) {
  if (!(max_norm >= 0.0) || !std::isfinite(max_norm)) {
    throw std::invalid_argument(loom::detail::msg("[", op, "] max_norm must be finite and >= 0, got ", max_norm));
  }
  Dtype acc = float32;
  for (const auto& [name, g] : grads) {
    if (!is_floating_point(g.dtype())) {
      throw std::invalid_argument(loom::detail::msg("[", op, "] gradient '", name, "' has non-floating dtype ", g.dtype()));
    }
    if (g.dtype() == float64) acc = float64;
  }
  return acc;
}

array squares(const array& g, Dtype acc) { return sum(square(astype(g, acc))); }

std::pair<nn::ParamTree, array> clip_to(const nn::ParamTree& grads, const array& norm_sq, double max_norm) {
  const array total_norm = sqrt(norm_sq);
  const array keep = total_norm < max_norm;
  const array normalizer = max_norm / (total_norm + 1e-6);
  nn::ParamTree clipped;
  for (const auto& [name, g] : grads) {
    clipped.insert(name, where(keep, g, g * astype(normalizer, g.dtype())));
  }
  return {std::move(clipped), total_norm};
}

}  // namespace

std::pair<nn::ParamTree, array> clip_grad_norm(const nn::ParamTree& grads, double max_norm) {
  const Dtype acc = check(grads, max_norm, "clip_grad_norm");
  array norm_sq = array(0.0, acc);
  for (const auto& [name, g] : grads) norm_sq = norm_sq + squares(g, acc);
  return clip_to(grads, norm_sq, max_norm);
}

std::pair<nn::ParamTree, array> clip_grad_norm_sharded(const nn::ParamTree& grads, double max_norm,
                                                       const std::vector<std::string>& sharded,
                                                       std::optional<distributed::Group> group) {
  const Dtype acc = check(grads, max_norm, "clip_grad_norm_sharded");
  std::unordered_set<std::string> parts;
  for (const std::string& name : sharded) {
    if (!grads.contains(name)) {
      throw std::invalid_argument(loom::detail::msg("[clip_grad_norm_sharded] '", name,
                                                    "' is listed as sharded but is not among the gradients"));
    }
    parts.insert(name);
  }
  array shard_sq = array(0.0, acc), replicated_sq = array(0.0, acc);
  for (const auto& [name, g] : grads) {
    array& into = parts.count(name) ? shard_sq : replicated_sq;
    into = into + squares(g, acc);
  }
  const distributed::Group g = group ? *group : distributed::init();
  return clip_to(grads, distributed::all_sum(shard_sq, g) + replicated_sq, max_norm);
}

}  // namespace loom::optim

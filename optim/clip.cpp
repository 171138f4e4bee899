#include "loom/optim/clip.h"

#include <cmath>
#include <stdexcept>

#include "loom/ops/ops.h"
#include "loom/ops/utils.h"

namespace loom::optim {

std::pair<nn::ParamTree, array> clip_grad_norm(const nn::ParamTree& grads, double max_norm) {
  if (!(max_norm >= 0.0) || !std::isfinite(max_norm)) {
    throw std::invalid_argument(loom::detail::msg("[clip_grad_norm] max_norm must be finite and >= 0, got ", max_norm));
  }
  Dtype acc = float32;
  for (const auto& [name, g] : grads) {
    if (!is_floating_point(g.dtype())) {
      throw std::invalid_argument(loom::detail::msg("[clip_grad_norm] gradient '", name, "' has non-floating dtype ",
                                                    g.dtype()));
    }
    if (g.dtype() == float64) acc = float64;
  }
  array norm_sq = array(0.0, acc);
  for (const auto& [name, g] : grads) norm_sq = norm_sq + sum(square(astype(g, acc)));
  const array total_norm = sqrt(norm_sq);
  const array keep = total_norm < max_norm;
  const array normalizer = max_norm / (total_norm + 1e-6);
  nn::ParamTree clipped;
  for (const auto& [name, g] : grads) {
    clipped.insert(name, where(keep, g, g * astype(normalizer, g.dtype())));
  }
  return {std::move(clipped), total_norm};
}

}  // namespace loom::optim

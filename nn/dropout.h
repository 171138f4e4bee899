// Dropout layers. In training mode each kept element is scaled by 1 / (1 - p), so the expected value is
// unchanged; in evaluation mode (and for p = 0) they return the input itself. Masks are drawn from the
// global random state (random::seed makes them reproducible).
#pragma once

#include "loom/nn/module.h"

namespace loom::nn {

/// Zeroes each element independently with probability p, 0 <= p < 1.
struct Dropout : Module {
  double p;
  explicit Dropout(double p = 0.5);
  array operator()(const array& x) const;
};

/// Channel dropout for (N, H, W, C) or (H, W, C) inputs: zeroes whole channels (the same mask over H
/// and W), as MLX's Dropout2d.
struct Dropout2d : Module {
  double p;
  explicit Dropout2d(double p = 0.5);
  array operator()(const array& x) const;
};

/// Channel dropout for (N, D, H, W, C) or (D, H, W, C) inputs (the same mask over D, H and W).
struct Dropout3d : Module {
  double p;
  explicit Dropout3d(double p = 0.5);
  array operator()(const array& x) const;
};

}  // namespace loom::nn

// The Walsh-Hadamard transform over the last axis (MLX's hadamard_transform).
//
// Deliberate differences from MLX:
// - float64 inputs are transformed in float64 (MLX's CPU backend rejects them at eval);
// - half-precision inputs are transformed in float32 and rounded once (MLX rounds after every
//   butterfly stage);
// - the vjp applies the transposed matrix: MLX applies H itself, a wrong gradient for sizes
//   20 * 2^k and 28 * 2^k, whose H is not symmetric;
// - an unsupported size is an error when the op is built, and a size n whose n / m is not a power
//   of two is refused (MLX accepts e.g. 36 = 12 * 3 and returns values that are no Hadamard
//   transform).
#pragma once

#include <optional>

#include "loom/core/array.h"

namespace loom {

/// y = scale * H x along the last axis, where H is the n x n Hadamard matrix kron(H_m, H_(2^k))
/// for n = m * 2^k, m in {1, 12, 20, 28} (H_(2^k) in Sylvester order; H_12, H_20 and H_28 are the
/// matrices of Sloane's library that MLX uses) and k <= 26. The default scale 1/sqrt(n) makes the
/// transform orthonormal. Floating inputs keep their dtype; others are transformed as float32.
/// When n is 1 the result is `a` (scale 1) or a * scale. Throws std::invalid_argument for empty
/// arrays and unsupported sizes.
array hadamard_transform(const array& a, std::optional<float> scale = std::nullopt, StreamOrDevice s = {});

}  // namespace loom

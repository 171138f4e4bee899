// Linear algebra beyond matmul: MLX's `mlx::core::linalg`, computed by LAPACK (the OpenBLAS build
// Loom links carries it). Batched over every axis before the last two.
#pragma once

#include <vector>

#include "loom/core/array.h"
#include "loom/core/stream.h"

namespace loom::linalg {

/// The singular value decomposition a = U diag(S) Vt of each matrix in the last two axes of `a`
/// (float32, float64 or complex64; integers and halves are refused, as MLX does). With `compute_uv`
/// it returns {U, S, Vt}: U of shape (..., m, m), S of shape (..., min(m, n)) in descending order
/// and of a's real dtype, Vt of shape (..., n, n) (full matrices, as MLX); without, {S} alone.
/// LAPACK's divide-and-conquer gesdd computes it; the signs of singular vectors are LAPACK's (any
/// pair u_i, v_i may flip together: compare U diag(S) Vt, not U). An input holding NaN or infinity,
/// or one LAPACK cannot converge on, throws std::runtime_error naming linalg::svd when evaluated.
/// No derivative (as MLX): a vjp or jvp through it throws.
std::vector<array> svd(const array& a, bool compute_uv, StreamOrDevice s = {});
inline std::vector<array> svd(const array& a, StreamOrDevice s = {}) { return svd(a, true, s); }

}  // namespace loom::linalg

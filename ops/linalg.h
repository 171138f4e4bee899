// Linear algebra beyond matmul: MLX's `mlx::core::linalg`. The factorizations are LAPACK's (the
// OpenBLAS build Loom links carries it, ops/lapack.cpp); the rest are compositions of Loom's ops
// (ops/linalg_compose.cpp). Every function works on the last two axes and is batched over the axes
// before them.
//
// Dtypes: float32, float64 and complex64 (MLX refuses complex64 in qr, inv, tri_inv, cholesky, lu,
// solve and pinv; Loom computes them). Integer and half inputs are refused when the op is built, as
// MLX does.
//
// Errors. A bad shape, dtype or argument throws std::invalid_argument naming the op when it is
// built. What only the values tell throws std::runtime_error naming the op and the matrix of the
// batch when it is evaluated: NaN or infinity in an input, a singular matrix in inv, tri_inv, solve
// and solve_triangular, a matrix cholesky finds not positive definite, and LAPACK not converging.
// lu of a singular matrix is no error (its U has a zero on the diagonal), as in numpy and MLX.
//
// Derivatives (vjp and jvp; MLX has none): svd, qr, inv, tri_inv, cholesky, solve, solve_triangular,
// eigh and eigvalsh, and through them norm, pinv, cholesky_inv, det and slogdet. Those of svd, qr,
// cholesky and eigh are for float32 and float64 inputs (complex ones throw). cholesky, eigh and
// eigvalsh read one triangle of their input, and their derivatives are with respect to that
// triangle: write f(A) as eigh((A + A^T) / 2) to get the symmetric gradient. Where two singular
// values (svd) or eigenvalues (eigh) are equal, the vectors' derivatives are infinite, as in
// PyTorch. eig, eigvals and lu_factor / lu have no derivative (a vjp or jvp through them throws).
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "loom/core/array.h"
#include "loom/core/stream.h"

namespace loom::linalg {

/// Norms (numpy's and MLX's). With no axis: the 2-norm of the flattened array. With one axis: a
/// vector norm; with two: a matrix norm (the two axes are the matrix's rows and columns). ord for
/// vectors: any number (0 counts the non-zeros, inf / -inf are the largest / smallest magnitude);
/// for matrices: 1, -1, 2, -2 (largest / smallest singular value), inf, -inf, "fro" and "nuc".
/// The result is floating point (complex inputs give float32). More than two axes, or an ord that
/// does not apply, throws std::invalid_argument.
array norm(const array& a, const std::optional<std::vector<int>>& axis = std::nullopt, bool keepdims = false,
           StreamOrDevice s = {});
inline array norm(const array& a, int axis, bool keepdims = false, StreamOrDevice s = {}) {
  return norm(a, std::vector<int>{axis}, keepdims, s);
}
array norm(const array& a, double ord, const std::optional<std::vector<int>>& axis = std::nullopt,
           bool keepdims = false, StreamOrDevice s = {});
inline array norm(const array& a, double ord, int axis, bool keepdims = false, StreamOrDevice s = {}) {
  return norm(a, ord, std::vector<int>{axis}, keepdims, s);
}
array norm(const array& a, const std::string& ord, const std::optional<std::vector<int>>& axis = std::nullopt,
           bool keepdims = false, StreamOrDevice s = {});
inline array norm(const array& a, const std::string& ord, int axis, bool keepdims = false, StreamOrDevice s = {}) {
  return norm(a, ord, std::vector<int>{axis}, keepdims, s);
}

/// The reduced QR factorization a = Q R: Q (..., m, k) with orthonormal (unitary) columns, R (..., k,
/// n) upper triangular, k = min(m, n). Householder reflections (LAPACK's geqrf, orgqr); the signs of
/// R's diagonal are LAPACK's.
std::pair<array, array> qr(const array& a, StreamOrDevice s = {});

/// The singular value decomposition a = U diag(S) Vt: with `compute_uv`, {U (..., m, m), S (..., k)
/// descending and of a's real dtype, Vt (..., n, n)} (full matrices, as MLX); without, {S}.
/// LAPACK's gesdd; a pair u_i, v_i may flip sign together. The derivative is through the first k
/// columns of U and rows of Vt (the rest are not determined by a).
std::vector<array> svd(const array& a, bool compute_uv, StreamOrDevice s = {});
inline std::vector<array> svd(const array& a, StreamOrDevice s = {}) { return svd(a, true, s); }

/// The inverse of each square matrix (LU with partial pivoting: getrf, getri).
array inv(const array& a, StreamOrDevice s = {});
/// The inverse of the lower (or `upper`) triangle of each square matrix; the other triangle of the
/// input is not read, and is zero in the result.
array tri_inv(const array& a, bool upper = false, StreamOrDevice s = {});
/// The Moore-Penrose pseudo-inverse (..., n, m), from the SVD with singular values below
/// 10 max(m, n) eps times the largest dropped, as MLX.
array pinv(const array& a, StreamOrDevice s = {});

/// The Cholesky factor L (a = L L^H), or with `upper` U (a = U^H U), of each Hermitian positive
/// definite matrix, read from that triangle (potrf). The other triangle of the result is zero.
array cholesky(const array& a, bool upper = false, StreamOrDevice s = {});
/// The inverse of L L^H (or U^H U) given the Cholesky factor L (or U).
array cholesky_inv(const array& L, bool upper = false, StreamOrDevice s = {});

/// The LU factorization with partial pivoting, as MLX: {row indices (..., m) uint32, L (..., m, k)
/// unit lower triangular, U (..., k, n)} with a = (L U)[row indices] along the rows, i.e.
/// take_along_axis(L, expand_dims(rows, -1), -2) @ U == a.
std::vector<array> lu(const array& a, StreamOrDevice s = {});
/// LAPACK's compact form: {LU (..., m, n) holding L below the diagonal (its unit diagonal implied)
/// and U on and above it, pivots (..., k) uint32: row i was swapped with row pivots[i], i = 0..k-1}.
std::pair<array, array> lu_factor(const array& a, StreamOrDevice s = {});

/// x with a x = b for square a (..., n, n): b (..., n, k), or b (n) a vector (then x is (..., n)).
/// The batch axes broadcast. LU with partial pivoting (getrf, getrs), or for solve_triangular the lower (or
/// `upper`) triangle of a alone (trtrs).
array solve(const array& a, const array& b, StreamOrDevice s = {});
array solve_triangular(const array& a, const array& b, bool upper = false, StreamOrDevice s = {});

/// The cross product of 3-vectors (or 2-vectors, taken as having a zero third entry) along `axis`,
/// broadcast over the other axes, as MLX and numpy.
array cross(const array& a, const array& b, int axis = -1, StreamOrDevice s = {});

/// Eigenvalues (ascending, of a's real dtype) and eigenvectors (the columns of the second array) of
/// each Hermitian matrix, read from its lower ("L") or upper ("U") triangle (LAPACK's syevd / heevd).
std::pair<array, array> eigh(const array& a, const std::string& UPLO = "L", StreamOrDevice s = {});
array eigvalsh(const array& a, const std::string& UPLO = "L", StreamOrDevice s = {});
/// Eigenvalues and right eigenvectors (unit norm columns) of each general square matrix, complex64
/// whatever the input's dtype, in LAPACK's order (geev).
std::pair<array, array> eig(const array& a, StreamOrDevice s = {});
array eigvals(const array& a, StreamOrDevice s = {});

/// The determinant of each square matrix, and {sign, log |det|}; a singular matrix gives 0 and
/// {0, -inf}. Real inputs (float32, float64; integers are promoted to float32), as MLX. Their
/// derivatives are det(a) a^-T and a^-T, which a singular matrix makes infinite.
array det(const array& a, StreamOrDevice s = {});
std::pair<array, array> slogdet(const array& a, StreamOrDevice s = {});

}  // namespace loom::linalg

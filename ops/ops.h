// The core op library: creation, elementwise math, reductions, shapes and linear algebra.
// Every op validates its arguments, then records a node; nothing runs until eval.
#pragma once

#include <limits>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "loom/core/array.h"

namespace loom {

// ---- creation ----
// Every op takes MLX's trailing `StreamOrDevice s = {}`: the stream (or the default stream of the
// device) its nodes belong to; `{}` is the calling thread's default stream (core/stream.h). Where an
// op has defaulted arguments before it, the overloads without them take `s` too, as in MLX's ops.h.
array zeros(const Shape& shape, Dtype dtype, StreamOrDevice s = {});
inline array zeros(const Shape& shape, StreamOrDevice s = {}) { return zeros(shape, float32, s); }
array ones(const Shape& shape, Dtype dtype, StreamOrDevice s = {});
inline array ones(const Shape& shape, StreamOrDevice s = {}) { return ones(shape, float32, s); }
/// An array of `shape` filled with `value` (broadcast), cast to `dtype`.
array full(const Shape& shape, const array& value, Dtype dtype, StreamOrDevice s = {});
array full(const Shape& shape, const array& value, StreamOrDevice s = {});
/// A scalar value takes MLX's dtype for its C++ type (a double makes float32) unless `dtype` is given.
template <typename T>
array full(const Shape& shape, T value, Dtype dtype, StreamOrDevice s = {}) {
  return full(shape, array(value, dtype), dtype, s);
}
template <typename T>
array full(const Shape& shape, T value, StreamOrDevice s = {}) {
  return full(shape, array(value), s);
}
array zeros_like(const array& a, StreamOrDevice s = {});
array zeros_like(const array& a, Dtype dtype, StreamOrDevice s = {});
array ones_like(const array& a, StreamOrDevice s = {});
array ones_like(const array& a, Dtype dtype, StreamOrDevice s = {});
/// Values start, start+step, ... below stop (numpy's arange). For an integer dtype the step is the
/// difference of the first two values cast to it, as numpy and MLX: arange(0, 5, 0.5, int32) holds ten
/// zeros.
array arange(double start, double stop, double step, Dtype dtype, StreamOrDevice s = {});
inline array arange(double start, double stop, double step, StreamOrDevice s = {}) {
  return arange(start, stop, step, float32, s);
}
/// arange with unit step in `dtype`.
array arange(double start, double stop, Dtype dtype, StreamOrDevice s = {});
inline array arange(double start, double stop, StreamOrDevice s = {}) { return arange(start, stop, 1.0, float32, s); }
array arange(double stop, Dtype dtype, StreamOrDevice s = {});
inline array arange(double stop, StreamOrDevice s = {}) { return arange(stop, float32, s); }
array arange(int start, int stop, int step, StreamOrDevice s = {});
inline array arange(int start, int stop, StreamOrDevice s = {}) { return arange(start, stop, 1, s); }
array arange(int stop, StreamOrDevice s = {});
/// `num` evenly spaced values from start to stop inclusive.
array linspace(double start, double stop, int num = 50, Dtype dtype = float32, StreamOrDevice s = {});
/// Ones on the k-th diagonal of an n x m matrix.
array eye(int n, int m, int k, Dtype dtype, StreamOrDevice s = {});
inline array eye(int n, Dtype dtype, StreamOrDevice s = {}) { return eye(n, n, 0, dtype, s); }
inline array eye(int n, int m, StreamOrDevice s = {}) { return eye(n, m, 0, float32, s); }
inline array eye(int n, int m, int k, StreamOrDevice s = {}) { return eye(n, m, k, float32, s); }
inline array eye(int n, StreamOrDevice s = {}) { return eye(n, n, 0, float32, s); }
array identity(int n, Dtype dtype, StreamOrDevice s = {});
inline array identity(int n, StreamOrDevice s = {}) { return identity(n, float32, s); }
/// Window functions of length M as float32 (numpy's np.hanning, np.hamming, np.blackman, np.bartlett,
/// as in MLX's ops.h): empty for M < 1, [1] for M = 1.
array hanning(int M, StreamOrDevice s = {});
array hamming(int M, StreamOrDevice s = {});
array blackman(int M, StreamOrDevice s = {});
array bartlett(int M, StreamOrDevice s = {});

/// Converts to `dtype` (a copy unless the dtype already matches).
array astype(const array& a, Dtype dtype, StreamOrDevice s = {});
/// A new array with the same values.
array copy(const array& a, StreamOrDevice s = {});
/// The same values with no gradient flowing back through it.
array stop_gradient(const array& a, StreamOrDevice s = {});

// ---- elementwise: unary ----
array negative(const array& a, StreamOrDevice s = {});
/// |a|; a complex64 array gives its float32 magnitudes.
array abs(const array& a, StreamOrDevice s = {});
/// -1, 0 or 1; z / |z| for complex64 (0 at 0), as MLX and numpy 2.
array sign(const array& a, StreamOrDevice s = {});
/// The real and imaginary parts of a complex64 array, as float32. A real array is its own real part
/// (returned as is) and has zeros for its imaginary part, as in MLX.
array real(const array& a, StreamOrDevice s = {});
array imag(const array& a, StreamOrDevice s = {});
/// The complex conjugate; a real array is returned as is.
array conjugate(const array& a, StreamOrDevice s = {});
/// numpy's and MLX's short name for conjugate.
array conj(const array& a, StreamOrDevice s = {});
array square(const array& a, StreamOrDevice s = {});
array sqrt(const array& a, StreamOrDevice s = {});
array rsqrt(const array& a, StreamOrDevice s = {});
array reciprocal(const array& a, StreamOrDevice s = {});
array exp(const array& a, StreamOrDevice s = {});
array expm1(const array& a, StreamOrDevice s = {});
array log(const array& a, StreamOrDevice s = {});
array log1p(const array& a, StreamOrDevice s = {});
array log2(const array& a, StreamOrDevice s = {});
array log10(const array& a, StreamOrDevice s = {});
array sin(const array& a, StreamOrDevice s = {});
array cos(const array& a, StreamOrDevice s = {});
array tan(const array& a, StreamOrDevice s = {});
array tanh(const array& a, StreamOrDevice s = {});
array arcsin(const array& a, StreamOrDevice s = {});
array arccos(const array& a, StreamOrDevice s = {});
array arctan(const array& a, StreamOrDevice s = {});
array sinh(const array& a, StreamOrDevice s = {});
array cosh(const array& a, StreamOrDevice s = {});
array arcsinh(const array& a, StreamOrDevice s = {});
array arccosh(const array& a, StreamOrDevice s = {});
array arctanh(const array& a, StreamOrDevice s = {});
/// Radians to degrees and back (multiplications; integer inputs give float32).
array degrees(const array& a, StreamOrDevice s = {});
array radians(const array& a, StreamOrDevice s = {});
array sigmoid(const array& a, StreamOrDevice s = {});
array erf(const array& a, StreamOrDevice s = {});
array erfinv(const array& a, StreamOrDevice s = {});
array floor(const array& a, StreamOrDevice s = {});
array ceil(const array& a, StreamOrDevice s = {});
/// Rounds half to even (numpy's rule) at `decimals` decimal places (negative: tens, hundreds...), as MLX: a * 10^d
/// rounded, times 10^-d, in a's dtype (integers compute in float32 and convert back).
array round(const array& a, int decimals, StreamOrDevice s = {});
inline array round(const array& a, StreamOrDevice s = {}) { return round(a, 0, s); }
/// Rounds toward zero; integer arrays come back unchanged.
array trunc(const array& a, StreamOrDevice s = {});
array logical_not(const array& a, StreamOrDevice s = {});
array isnan(const array& a, StreamOrDevice s = {});
array isinf(const array& a, StreamOrDevice s = {});
array isfinite(const array& a, StreamOrDevice s = {});
/// x == +inf (false for integer and bool arrays).
array isposinf(const array& a, StreamOrDevice s = {});
/// x == -inf (false for integer and bool arrays).
array isneginf(const array& a, StreamOrDevice s = {});
/// NaN to `nan`, +inf to `posinf` and -inf to `neginf` (default: the dtype's largest finite value and
/// its negative). Integer and bool arrays come back unchanged.
array nan_to_num(const array& a, float nan = 0.0f, std::optional<float> posinf = std::nullopt,
                 std::optional<float> neginf = std::nullopt, StreamOrDevice s = {});

// ---- elementwise: binary (numpy broadcasting and promotion) ----
array add(const array& a, const array& b, StreamOrDevice s = {});
array subtract(const array& a, const array& b, StreamOrDevice s = {});
array multiply(const array& a, const array& b, StreamOrDevice s = {});
/// True division: integer inputs give float32.
array divide(const array& a, const array& b, StreamOrDevice s = {});
/// Rounds the quotient toward negative infinity.
array floor_divide(const array& a, const array& b, StreamOrDevice s = {});
/// The remainder with the sign of the divisor (Python's %).
array remainder(const array& a, const array& b, StreamOrDevice s = {});
array power(const array& a, const array& b, StreamOrDevice s = {});
array maximum(const array& a, const array& b, StreamOrDevice s = {});
array minimum(const array& a, const array& b, StreamOrDevice s = {});
array arctan2(const array& a, const array& b, StreamOrDevice s = {});
/// log(exp(a) + exp(b)) without overflow. complex64 as MLX: hi + log1p(exp(lo - hi)), hi the larger in
/// complex64's lexicographic order (its imaginary part is not reduced to (-pi, pi]).
array logaddexp(const array& a, const array& b, StreamOrDevice s = {});
array equal(const array& a, const array& b, StreamOrDevice s = {});
array not_equal(const array& a, const array& b, StreamOrDevice s = {});
array less(const array& a, const array& b, StreamOrDevice s = {});
array less_equal(const array& a, const array& b, StreamOrDevice s = {});
array greater(const array& a, const array& b, StreamOrDevice s = {});
array greater_equal(const array& a, const array& b, StreamOrDevice s = {});
array logical_and(const array& a, const array& b, StreamOrDevice s = {});
array logical_or(const array& a, const array& b, StreamOrDevice s = {});

// ---- bitwise ops: bool and integer arrays (floats throw), promoted as the arithmetic ops ----
array bitwise_and(const array& a, const array& b, StreamOrDevice s = {});
array bitwise_or(const array& a, const array& b, StreamOrDevice s = {});
array bitwise_xor(const array& a, const array& b, StreamOrDevice s = {});
/// ~a; on bool it is logical_not (as MLX).
array bitwise_invert(const array& a, StreamOrDevice s = {});
/// a << b and a >> b (arithmetic for signed a). Two bool operands compute in uint8, as in MLX. A
/// count outside [0, bits) shifts every bit out, as numpy does: 0, or -1 for a negative a shifted
/// right (MLX's CPU backend leaves those counts to the hardware).
array left_shift(const array& a, const array& b, StreamOrDevice s = {});
array right_shift(const array& a, const array& b, StreamOrDevice s = {});

// ---- compositions of other ops, with MLX's names and semantics (ops/compose.cpp) ----
/// Reverses the order of the elements along `axes` (every axis by default): a view.
array flip(const array& a, const std::vector<int>& axes, StreamOrDevice s = {});
array flip(const array& a, int axis, StreamOrDevice s = {});
array flip(const array& a, StreamOrDevice s = {});
/// Shifts elements along each axis by its shift (those pushed off the end come back at the start);
/// without axes, over the flattened array. Shifts may be negative or exceed the length.
array roll(const array& a, int shift, StreamOrDevice s = {});
array roll(const array& a, const Shape& shift, StreamOrDevice s = {});
array roll(const array& a, int shift, int axis, StreamOrDevice s = {});
array roll(const array& a, const Shape& shift, int axis, StreamOrDevice s = {});
array roll(const array& a, int shift, const std::vector<int>& axes, StreamOrDevice s = {});
array roll(const array& a, const Shape& shift, const std::vector<int>& axes, StreamOrDevice s = {});
/// An (n, m) array with ones at and below diagonal k (k > 0 above the main one).
array tri(int n, int m, int k, Dtype dtype, StreamOrDevice s = {});
array tri(int n, Dtype dtype = float32, StreamOrDevice s = {});
/// The last two axes' lower (tril) or upper (triu) triangle from diagonal k; zeros elsewhere.
array tril(const array& x, int k = 0, StreamOrDevice s = {});
array triu(const array& x, int k = 0, StreamOrDevice s = {});
/// Diagonal `offset` of the matrices over axis1 and axis2, as a new last axis (numpy, MLX).
array diagonal(const array& a, int offset = 0, int axis1 = 0, int axis2 = 1, StreamOrDevice s = {});
/// A 2-d array's diagonal k, or the square matrix with a 1-d array on diagonal k.
array diag(const array& a, int k = 0, StreamOrDevice s = {});
/// The sum of diagonal `offset` over axis1 and axis2 (optionally in `dtype`).
array trace(const array& a, int offset, int axis1, int axis2, Dtype dtype, StreamOrDevice s = {});
array trace(const array& a, int offset, int axis1, int axis2, StreamOrDevice s = {});
array trace(const array& a, StreamOrDevice s = {});
/// An array of a's shape filled with `vals` (broadcast), in `dtype` or a's dtype.
array full_like(const array& a, const array& vals, Dtype dtype, StreamOrDevice s = {});
array full_like(const array& a, const array& vals, StreamOrDevice s = {});
/// At least 1, 2 or 3 dimensions, as numpy: (n) -> (1, n) -> (1, n, 1); (m, n) -> (m, n, 1).
array atleast_1d(const array& a, StreamOrDevice s = {});
array atleast_2d(const array& a, StreamOrDevice s = {});
array atleast_3d(const array& a, StreamOrDevice s = {});
std::vector<array> atleast_1d(const std::vector<array>& a, StreamOrDevice s = {});
std::vector<array> atleast_2d(const std::vector<array>& a, StreamOrDevice s = {});
std::vector<array> atleast_3d(const std::vector<array>& a, StreamOrDevice s = {});
/// The slices along `axis`, each without that axis.
std::vector<array> unstack(const array& a, int axis, StreamOrDevice s = {});
inline std::vector<array> unstack(const array& a, StreamOrDevice s = {}) { return unstack(a, 0, s); }
/// Coordinate grids from 1-d coordinate arrays (any array is flattened), "xy" (Cartesian: the
/// first two axes swapped) or "ij" (matrix) indexing; sparse keeps them unbroadcast.
std::vector<array> meshgrid(const std::vector<array>& arrays, bool sparse = false, const std::string& indexing = "xy",
                            StreamOrDevice s = {});
/// The Kronecker product (arrays of different ranks are padded with leading 1s).
array kron(const array& a, const array& b, StreamOrDevice s = {});
/// Sums the products over a's last `axis` axes and b's first `axis` axes.
array tensordot(const array& a, const array& b, int axis = 2, StreamOrDevice s = {});
/// Sums the products over axes_a of a paired with axes_b of b.
array tensordot(const array& a, const array& b, const std::vector<int>& axes_a, const std::vector<int>& axes_b,
                StreamOrDevice s = {});
/// Einstein summation, as numpy's and MLX's: "ij,jk->ik" (explicit output), "ij,jk" (implicit: the
/// letters seen once, sorted), "...ij,...jk" (an ellipsis for leading axes, broadcast), "ii" (a
/// diagonal). Size-1 axes broadcast. The operands are contracted pair by pair in the order
/// einsum_path gives (numpy's greedy rule), each pair by one batched matmul where it contracts.
/// Bad subscripts, a count of operands or axes that does not match, or sizes that do not broadcast
/// throw std::invalid_argument naming einsum.
array einsum(const std::string& subscripts, const std::vector<array>& operands, StreamOrDevice s = {});
/// The contraction order einsum takes (numpy's format: at each step, the positions in the current
/// list of operands that are contracted; the result goes to the end of the list) and a report of its
/// cost against contracting everything at once.
std::pair<std::vector<std::vector<int>>, std::string> einsum_path(const std::string& subscripts,
                                                                  const std::vector<array>& operands);

// ---- whole-array comparisons (MLX's semantics) ----
/// |a - b| <= atol + rtol * |b| elementwise, broadcasting; infinities are close only to the same
/// infinity; NaNs are close to each other only with equal_nan.
array isclose(const array& a, const array& b, double rtol = 1e-5, double atol = 1e-8, bool equal_nan = false,
              StreamOrDevice s = {});
/// all(isclose(a, b, ...)): a 0-d bool.
array allclose(const array& a, const array& b, double rtol = 1e-5, double atol = 1e-8, bool equal_nan = false,
               StreamOrDevice s = {});
/// True when a and b have the same shape and equal values (compared in their promoted dtype); NaNs
/// are equal only with equal_nan. Arrays of different shapes give false, not an error.
array array_equal(const array& a, const array& b, bool equal_nan = false, StreamOrDevice s = {});

// ---- elementwise: ternary ----
/// Picks x where cond is true and y elsewhere, broadcasting all three.
array where(const array& cond, const array& x, const array& y, StreamOrDevice s = {});
/// Limits values to [lo, hi]; either bound may be absent. A NaN bound gives NaN, as
/// minimum(maximum(a, lo), hi) (numpy, PyTorch, MLX); the gradient reaches `a` where lo <= a <= hi.
array clip(const array& a, const std::optional<array>& lo = std::nullopt, const std::optional<array>& hi = std::nullopt,
           StreamOrDevice s = {});

// ---- operators ----
// A C++ scalar takes the array's dtype when that keeps its value's kind (x * 2.0f stays float16 for
// a float16 x; an int array with a float scalar becomes float32).
namespace detail {
template <typename T>
array scalar_like(T v, const array& like) {
  Dtype d = like.dtype();
  if constexpr (std::is_floating_point_v<T>) {
    if (!is_inexact(d)) d = float32;
  } else if constexpr (std::is_same_v<T, bool>) {
    d = like.dtype();
  } else {
    if (d == bool_) {
      d = dtype_of<T>;
    } else if (is_integral(d)) {
      // As numpy: an integer scalar must fit the array's integer dtype (uint8 + 300 is an error,
      // not a silent wrap to 44).
      const long double x = static_cast<long double>(v);
      long double lo = 0, hi = 0;  // exact in a long double's 64-bit mantissa
      LOOM_DISPATCH_REAL(d, I, {
        lo = static_cast<long double>(std::numeric_limits<I>::min());
        hi = static_cast<long double>(std::numeric_limits<I>::max());
      });
      if (x < lo || x > hi) {
        throw std::invalid_argument("[operator] the scalar " + std::to_string(v) + " is out of range for " +
                                    to_string(d) + " [" + std::to_string(static_cast<long long>(lo)) + ", " +
                                    std::to_string(static_cast<unsigned long long>(hi)) + "]");
      }
    }
  }
  return array(v, d);
}
}  // namespace detail

#define LOOM_BINARY_OPERATOR(OP, FN)                                                             \
  inline array operator OP(const array& a, const array& b) { return FN(a, b); }                   \
  template <typename T, typename = std::enable_if_t<std::is_arithmetic_v<T>>>                     \
  array operator OP(const array& a, T b) {                                                        \
    return FN(a, detail::scalar_like(b, a));                                                      \
  }                                                                                               \
  template <typename T, typename = std::enable_if_t<std::is_arithmetic_v<T>>>                     \
  array operator OP(T a, const array& b) {                                                        \
    return FN(detail::scalar_like(a, b), b);                                                      \
  }
LOOM_BINARY_OPERATOR(+, add)
LOOM_BINARY_OPERATOR(-, subtract)
LOOM_BINARY_OPERATOR(*, multiply)
LOOM_BINARY_OPERATOR(/, divide)
LOOM_BINARY_OPERATOR(%, remainder)
LOOM_BINARY_OPERATOR(==, equal)
LOOM_BINARY_OPERATOR(!=, not_equal)
LOOM_BINARY_OPERATOR(<, less)
LOOM_BINARY_OPERATOR(<=, less_equal)
LOOM_BINARY_OPERATOR(>, greater)
LOOM_BINARY_OPERATOR(>=, greater_equal)
LOOM_BINARY_OPERATOR(&&, logical_and)
LOOM_BINARY_OPERATOR(||, logical_or)
LOOM_BINARY_OPERATOR(&, bitwise_and)
LOOM_BINARY_OPERATOR(|, bitwise_or)
LOOM_BINARY_OPERATOR(^, bitwise_xor)
LOOM_BINARY_OPERATOR(<<, left_shift)
LOOM_BINARY_OPERATOR(>>, right_shift)
#undef LOOM_BINARY_OPERATOR
inline array operator-(const array& a) { return negative(a); }
inline array operator!(const array& a) { return logical_not(a); }
inline array operator~(const array& a) { return bitwise_invert(a); }

// ---- reductions (axes may be negative; an empty axes list reduces nothing) ----
array sum(const array& a, const std::vector<int>& axes, bool keepdims = false, StreamOrDevice s = {});
array sum(const array& a, int axis, bool keepdims = false, StreamOrDevice s = {});
array sum(const array& a, bool keepdims, StreamOrDevice s = {});
inline array sum(const array& a, StreamOrDevice s = {}) { return sum(a, false, s); }
/// mean, var, std and logsumexp of float16 and bfloat16 accumulate in float32 and round once at the
/// end (a float16 sum of more than 65,504 ones would be inf); integers give float32.
array mean(const array& a, const std::vector<int>& axes, bool keepdims = false, StreamOrDevice s = {});
array mean(const array& a, int axis, bool keepdims = false, StreamOrDevice s = {});
array mean(const array& a, bool keepdims, StreamOrDevice s = {});
inline array mean(const array& a, StreamOrDevice s = {}) { return mean(a, false, s); }
array prod(const array& a, const std::vector<int>& axes, bool keepdims = false, StreamOrDevice s = {});
array prod(const array& a, int axis, bool keepdims = false, StreamOrDevice s = {});
array prod(const array& a, bool keepdims, StreamOrDevice s = {});
inline array prod(const array& a, StreamOrDevice s = {}) { return prod(a, false, s); }
array max(const array& a, const std::vector<int>& axes, bool keepdims = false, StreamOrDevice s = {});
array max(const array& a, int axis, bool keepdims = false, StreamOrDevice s = {});
array max(const array& a, bool keepdims, StreamOrDevice s = {});
inline array max(const array& a, StreamOrDevice s = {}) { return max(a, false, s); }
array min(const array& a, const std::vector<int>& axes, bool keepdims = false, StreamOrDevice s = {});
array min(const array& a, int axis, bool keepdims = false, StreamOrDevice s = {});
array min(const array& a, bool keepdims, StreamOrDevice s = {});
inline array min(const array& a, StreamOrDevice s = {}) { return min(a, false, s); }
array all(const array& a, const std::vector<int>& axes, bool keepdims = false, StreamOrDevice s = {});
array all(const array& a, int axis, bool keepdims = false, StreamOrDevice s = {});
array all(const array& a, bool keepdims, StreamOrDevice s = {});
inline array all(const array& a, StreamOrDevice s = {}) { return all(a, false, s); }
array any(const array& a, const std::vector<int>& axes, bool keepdims = false, StreamOrDevice s = {});
array any(const array& a, int axis, bool keepdims = false, StreamOrDevice s = {});
array any(const array& a, bool keepdims, StreamOrDevice s = {});
inline array any(const array& a, StreamOrDevice s = {}) { return any(a, false, s); }
/// Variance with `ddof` delta degrees of freedom (0: population variance).
array var(const array& a, const std::vector<int>& axes, bool keepdims = false, int ddof = 0, StreamOrDevice s = {});
array var(const array& a, int axis, bool keepdims = false, int ddof = 0, StreamOrDevice s = {});
array var(const array& a, bool keepdims, int ddof = 0, StreamOrDevice s = {});
inline array var(const array& a, StreamOrDevice s = {}) { return var(a, false, 0, s); }
array std(const array& a, const std::vector<int>& axes, bool keepdims = false, int ddof = 0, StreamOrDevice s = {});
array std(const array& a, int axis, bool keepdims = false, int ddof = 0, StreamOrDevice s = {});
array std(const array& a, bool keepdims, int ddof = 0, StreamOrDevice s = {});
inline array std(const array& a, StreamOrDevice s = {}) { return std(a, false, 0, s); }
/// log(sum(exp(a))) computed without overflow.
array logsumexp(const array& a, const std::vector<int>& axes, bool keepdims = false, StreamOrDevice s = {});
array logsumexp(const array& a, int axis, bool keepdims = false, StreamOrDevice s = {});
array logsumexp(const array& a, bool keepdims, StreamOrDevice s = {});
inline array logsumexp(const array& a, StreamOrDevice s = {}) { return logsumexp(a, false, s); }
/// Index of the largest value along `axis` (the first one on ties), as int32.
array argmax(const array& a, int axis, bool keepdims = false, StreamOrDevice s = {});
/// Index into the flattened array.
array argmax(const array& a, bool keepdims, StreamOrDevice s = {});
inline array argmax(const array& a, StreamOrDevice s = {}) { return argmax(a, false, s); }
array argmin(const array& a, int axis, bool keepdims = false, StreamOrDevice s = {});
array argmin(const array& a, bool keepdims, StreamOrDevice s = {});
inline array argmin(const array& a, StreamOrDevice s = {}) { return argmin(a, false, s); }
/// exp(a - max) / sum(exp(a - max)) over `axes`, the half types computed in float32. A row holding +inf
/// is NaN (x - max is NaN there), as in numpy, PyTorch and MLX; a row of -inf is NaN too (0 / 0).
/// Without axes it runs over the whole array (MLX). `precise` is accepted for MLX's sake: Loom always
/// computes the half types in float32.
array softmax(const array& a, const std::vector<int>& axes, bool precise = false, StreamOrDevice s = {});
array softmax(const array& a, int axis, bool precise = false, StreamOrDevice s = {});
array softmax(const array& a, bool precise = false, StreamOrDevice s = {});
array log_softmax(const array& a, const std::vector<int>& axes, StreamOrDevice s = {});
array log_softmax(const array& a, int axis = -1, StreamOrDevice s = {});
// ---- scans (MLX's Scan: one primitive for each running reduction; axes may be negative) ----
// Without an axis they run over the flattened array. `reverse` runs from the end; an exclusive scan
// (`inclusive=false`) shifts by one and starts from the identity (0, 1, -inf/the lowest value,
// +inf/the largest value, -inf). cumsum and cumprod first convert to `dtype` when it is given.
/// Running sum along `axis`.
array cumsum(const array& a, int axis, bool reverse = false, bool inclusive = true,
             std::optional<Dtype> dtype = std::nullopt, StreamOrDevice s = {});
inline array cumsum(const array& a, int axis, bool reverse, bool inclusive, StreamOrDevice s) {
  return cumsum(a, axis, reverse, inclusive, std::nullopt, s);
}
array cumsum(const array& a, bool reverse = false, bool inclusive = true, std::optional<Dtype> dtype = std::nullopt,
             StreamOrDevice s = {});
inline array cumsum(const array& a, bool reverse, bool inclusive, StreamOrDevice s) {
  return cumsum(a, reverse, inclusive, std::nullopt, s);
}
/// Running product, in a's dtype (as MLX: bool is a running "and", small integers wrap).
array cumprod(const array& a, int axis, bool reverse = false, bool inclusive = true,
              std::optional<Dtype> dtype = std::nullopt, StreamOrDevice s = {});
inline array cumprod(const array& a, int axis, bool reverse, bool inclusive, StreamOrDevice s) {
  return cumprod(a, axis, reverse, inclusive, std::nullopt, s);
}
array cumprod(const array& a, bool reverse = false, bool inclusive = true, std::optional<Dtype> dtype = std::nullopt,
              StreamOrDevice s = {});
inline array cumprod(const array& a, bool reverse, bool inclusive, StreamOrDevice s) {
  return cumprod(a, reverse, inclusive, std::nullopt, s);
}
/// Running maximum / minimum in a's dtype (bool: "or" / "and"); a NaN makes every later value NaN.
/// The gradient goes to the element holding the running extreme (ties: the latest in scan order).
array cummax(const array& a, int axis, bool reverse = false, bool inclusive = true, StreamOrDevice s = {});
array cummax(const array& a, bool reverse = false, bool inclusive = true, StreamOrDevice s = {});
array cummin(const array& a, int axis, bool reverse = false, bool inclusive = true, StreamOrDevice s = {});
array cummin(const array& a, bool reverse = false, bool inclusive = true, StreamOrDevice s = {});
/// Running log(sum(exp(a))), each step a stable logaddexp (no overflow; -inf entries add nothing;
/// NaN propagates). Integer and bool inputs give float32 (MLX keeps their dtype and truncates).
array logcumsumexp(const array& a, int axis, bool reverse = false, bool inclusive = true, StreamOrDevice s = {});
array logcumsumexp(const array& a, bool reverse = false, bool inclusive = true, StreamOrDevice s = {});

// ---- statistics and counts (MLX's semantics) ----
/// The median over `axes` (all by default): the middle value, or the mean of the two middle ones
/// for an even count; NaN where the values hold a NaN. Floating dtypes are kept, others give float32
/// (the half types average in float32). An empty set of values throws (MLX); no axes is the identity.
array median(const array& a, bool keepdims, StreamOrDevice s = {});
inline array median(const array& a, StreamOrDevice s = {}) { return median(a, false, s); }
array median(const array& a, const std::vector<int>& axes, bool keepdims = false, StreamOrDevice s = {});
array median(const array& a, int axis, bool keepdims = false, StreamOrDevice s = {});
/// The number of nonzero elements (NaN counts) over `axes` (all by default), as int32.
array count_nonzero(const array& a, bool keepdims = false, StreamOrDevice s = {});
array count_nonzero(const array& a, int axis, bool keepdims = false, StreamOrDevice s = {});
array count_nonzero(const array& a, const std::vector<int>& axes, bool keepdims = false, StreamOrDevice s = {});
/// The product of a's sizes along `axes` (its reciprocal when `inverted`, as MLX's mean uses it), as
/// a 0-d array of `dtype`. Axes may be negative and are checked (MLX wraps out-of-range ones).
array number_of_elements(const array& a, std::vector<int> axes, bool inverted, Dtype dtype = int32,
                         StreamOrDevice s = {});
/// `a` itself (unary plus).
array positive(const array& a, StreamOrDevice s = {});

// ---- searching a sorted sequence ----
/// For each of `values`, the index at which it would be inserted into the 1-d ascending
/// `sorted_sequence` keeping it sorted: before equal elements ("left") or after them ("right"), as
/// numpy (NaN orders last). Compared in the promoted dtype; the result has values' shape, as int32
/// (MLX: uint32; Loom's index results are int32).
array searchsorted(const array& sorted_sequence, const array& values, const std::string& side = "left",
                   StreamOrDevice s = {});

// ---- shapes and views ----
/// One dimension may be -1 (inferred). A view when the layout allows, a copy otherwise.
array reshape(const array& a, Shape shape, StreamOrDevice s = {});
/// Merges axes start_axis..end_axis (inclusive) into one. As MLX, the range is clamped to the array's
/// axes (flatten(a, -10, 10) flattens everything); a range empty after clamping throws.
array flatten(const array& a, int start_axis, int end_axis = -1, StreamOrDevice s = {});
array flatten(const array& a, StreamOrDevice s = {});
array transpose(const array& a, std::vector<int> axes, StreamOrDevice s = {});
/// A braced list of axes, `{}` included, is axes (not a stream), as in MLX.
inline array transpose(const array& a, std::initializer_list<int> axes, StreamOrDevice s = {}) {
  return transpose(a, std::vector<int>(axes), s);
}
array transpose(const array& a, StreamOrDevice s = {});
array swapaxes(const array& a, int axis1, int axis2, StreamOrDevice s = {});
array moveaxis(const array& a, int source, int destination, StreamOrDevice s = {});
array squeeze(const array& a, const std::vector<int>& axes, StreamOrDevice s = {});
array squeeze(const array& a, int axis, StreamOrDevice s = {});
array squeeze(const array& a, StreamOrDevice s = {});
array expand_dims(const array& a, const std::vector<int>& axes, StreamOrDevice s = {});
array expand_dims(const array& a, int axis, StreamOrDevice s = {});
array broadcast_to(const array& a, const Shape& shape, StreamOrDevice s = {});
std::vector<array> broadcast_arrays(const std::vector<array>& inputs, StreamOrDevice s = {});
Shape broadcast_shapes(const Shape& a, const Shape& b);
/// Elements start[i] <= j < stop[i] in steps of strides[i] (numpy rules: negative values count
/// from the end, bounds are clamped, steps may be negative).
array slice(const array& a, Shape start, Shape stop, Shape strides, StreamOrDevice s = {});
/// `slice(a, {0, 1}, stop, strides)`: the braced start is a Shape, not the array of dynamic starts.
inline array slice(const array& a, std::initializer_list<int> start, Shape stop, Shape strides, StreamOrDevice s = {}) {
  return slice(a, Shape(start), std::move(stop), std::move(strides), s);
}
array slice(const array& a, Shape start, Shape stop, StreamOrDevice s = {});
/// `src` with the slice [start:stop:strides] replaced by `update` (broadcast to the slice).
array slice_update(const array& src, const array& update, Shape start, Shape stop, Shape strides,
                   StreamOrDevice s = {});
array slice_update(const array& src, const array& update, Shape start, Shape stop, StreamOrDevice s = {});
array concatenate(const std::vector<array>& arrays, int axis, StreamOrDevice s = {});
inline array concatenate(const std::vector<array>& arrays, StreamOrDevice s = {}) { return concatenate(arrays, 0, s); }
array stack(const std::vector<array>& arrays, int axis, StreamOrDevice s = {});
inline array stack(const std::vector<array>& arrays, StreamOrDevice s = {}) { return stack(arrays, 0, s); }
/// Splits into `num_splits` equal parts along `axis`.
std::vector<array> split(const array& a, int num_splits, int axis, StreamOrDevice s = {});
inline std::vector<array> split(const array& a, int num_splits, StreamOrDevice s = {}) {
  return split(a, num_splits, 0, s);
}
/// Splits before each listed index along `axis`.
std::vector<array> split(const array& a, const std::vector<int>& indices, int axis, StreamOrDevice s = {});
inline std::vector<array> split(const array& a, const std::vector<int>& indices, StreamOrDevice s = {}) {
  return split(a, indices, 0, s);
}
/// Pads `axes` with `low[i]` values before and `high[i]` after. `mode` is numpy's and MLX's:
/// "constant" fills with `value`; "edge" repeats the end values; "reflect" mirrors about the end
/// values without repeating them; "symmetric" mirrors repeating them (these need a non-empty axis).
array pad(const array& a, const std::vector<int>& axes, const Shape& low, const Shape& high,
          const array& value = array(0), const std::string& mode = "constant", StreamOrDevice s = {});
/// Pads every axis by (before, after) pairs; a single pair applies to every axis.
array pad(const array& a, const std::vector<std::pair<int, int>>& pad_width, const array& value = array(0),
          const std::string& mode = "constant", StreamOrDevice s = {});
array pad(const array& a, const std::pair<int, int>& pad_width, const array& value = array(0),
          const std::string& mode = "constant", StreamOrDevice s = {});
array pad(const array& a, int pad_width, const array& value = array(0), const std::string& mode = "constant",
          StreamOrDevice s = {});
array tile(const array& a, std::vector<int> reps, StreamOrDevice s = {});
array repeat(const array& a, int repeats, int axis, StreamOrDevice s = {});
array repeat(const array& a, int repeats, StreamOrDevice s = {});

// ---- linear algebra ----
/// Matrix product with numpy semantics: 1-d operands are promoted, batch dimensions broadcast.
array matmul(const array& a, const array& b, StreamOrDevice s = {});
/// beta * c + alpha * (a @ b).
array addmm(const array& c, const array& a, const array& b, float alpha = 1.0f, float beta = 1.0f,
            StreamOrDevice s = {});
array outer(const array& a, const array& b, StreamOrDevice s = {});
/// Sum product over the last axes of a and b.
array inner(const array& a, const array& b, StreamOrDevice s = {});

// ---- MLX names found missing by scripts/mlx_compat.py (ops/compat.cpp) ----
/// The dtype the arrays' dtypes promote to (promote_types over all of them; bool for none).
Dtype result_type(const std::vector<array>& arrays);
inline Dtype result_type(const array& a, const array& b) { return promote_types(a.dtype(), b.dtype()); }
inline Dtype result_type(const array& a, const array& b, const array& c) {
  return promote_types(result_type(a, b), c.dtype());
}
/// `axis` in [0, ndim) (negative counts from the end); std::invalid_argument, starting with
/// `msg_prefix`, when it is out of range (MLX's utility).
int normalize_axis_index(int axis, int ndim, const std::string& msg_prefix = "");
/// `a` laid out row-major (or column-major, when allowed and `a` already is): `a`'s own buffer when it
/// already is and is not much larger than `a` (MLX's rule), a copy otherwise. The gradient is the identity.
array contiguous(const array& a, bool allow_col_major = false, StreamOrDevice s = {});
/// Splits axis `axis` into `shape` (one entry may be -1): the inverse of flatten.
array unflatten(const array& a, int axis, Shape shape, StreamOrDevice s = {});
/// {floor_divide(a, b), remainder(a, b)}.
std::vector<array> divmod(const array& a, const array& b, StreamOrDevice s = {});
/// linspace with numpy's `endpoint`: false leaves out `stop` ([start, stop) in `num` equal steps).
array linspace(double start, double stop, int num, bool endpoint, Dtype dtype = float32, StreamOrDevice s = {});
/// An array of a's shape filled with the scalar `val`, in `dtype` or a's dtype.
template <typename T, typename = std::enable_if_t<std::is_arithmetic_v<T>>>
array full_like(const array& a, T val, Dtype dtype, StreamOrDevice s = {}) {
  return full_like(a, array(val, dtype), dtype, s);
}
template <typename T, typename = std::enable_if_t<std::is_arithmetic_v<T>>>
array full_like(const array& a, T val, StreamOrDevice s = {}) {
  return full_like(a, array(val, a.dtype()), s);
}

}  // namespace loom

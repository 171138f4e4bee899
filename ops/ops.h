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
array zeros(const Shape& shape, Dtype dtype = float32);
array ones(const Shape& shape, Dtype dtype = float32);
/// An array of `shape` filled with `value` (broadcast), cast to `dtype`.
array full(const Shape& shape, const array& value, Dtype dtype);
array full(const Shape& shape, const array& value);
template <typename T>
array full(const Shape& shape, T value, Dtype dtype = dtype_of<T>) {
  return full(shape, array(value, dtype), dtype);
}
array zeros_like(const array& a);
array ones_like(const array& a);
/// Values start, start+step, ... below stop (numpy's arange).
array arange(double start, double stop, double step = 1.0, Dtype dtype = float32);
array arange(double stop, Dtype dtype = float32);
array arange(int start, int stop, int step = 1);
array arange(int stop);
/// `num` evenly spaced values from start to stop inclusive.
array linspace(double start, double stop, int num = 50, Dtype dtype = float32);
/// Ones on the k-th diagonal of an n x m matrix.
array eye(int n, int m, int k = 0, Dtype dtype = float32);
array eye(int n, Dtype dtype = float32);
array identity(int n, Dtype dtype = float32);
/// Window functions of length M as float32 (numpy's np.hanning, np.hamming, np.blackman, np.bartlett,
/// as in MLX's ops.h): empty for M < 1, [1] for M = 1.
array hanning(int M);
array hamming(int M);
array blackman(int M);
array bartlett(int M);

/// Converts to `dtype` (a copy unless the dtype already matches).
array astype(const array& a, Dtype dtype);
/// A new array with the same values.
array copy(const array& a);
/// The same values with no gradient flowing back through it.
array stop_gradient(const array& a);

// ---- elementwise: unary ----
array negative(const array& a);
/// |a|; a complex64 array gives its float32 magnitudes.
array abs(const array& a);
/// -1, 0 or 1; z / |z| for complex64 (0 at 0), as MLX and numpy 2.
array sign(const array& a);
/// The real and imaginary parts of a complex64 array, as float32. A real array is its own real part
/// (returned as is) and has zeros for its imaginary part, as in MLX.
array real(const array& a);
array imag(const array& a);
/// The complex conjugate; a real array is returned as is.
array conjugate(const array& a);
/// numpy's and MLX's short name for conjugate.
array conj(const array& a);
array square(const array& a);
array sqrt(const array& a);
array rsqrt(const array& a);
array reciprocal(const array& a);
array exp(const array& a);
array expm1(const array& a);
array log(const array& a);
array log1p(const array& a);
array log2(const array& a);
array log10(const array& a);
array sin(const array& a);
array cos(const array& a);
array tan(const array& a);
array tanh(const array& a);
array arcsin(const array& a);
array arccos(const array& a);
array arctan(const array& a);
array sinh(const array& a);
array cosh(const array& a);
array arcsinh(const array& a);
array arccosh(const array& a);
array arctanh(const array& a);
/// Radians to degrees and back (multiplications; integer inputs give float32).
array degrees(const array& a);
array radians(const array& a);
array sigmoid(const array& a);
array erf(const array& a);
array erfinv(const array& a);
array floor(const array& a);
array ceil(const array& a);
/// Rounds half to even, as numpy does.
array round(const array& a);
/// Rounds toward zero; integer arrays come back unchanged.
array trunc(const array& a);
array logical_not(const array& a);
array isnan(const array& a);
array isinf(const array& a);
array isfinite(const array& a);
/// x == +inf (false for integer and bool arrays).
array isposinf(const array& a);
/// x == -inf (false for integer and bool arrays).
array isneginf(const array& a);
/// NaN to `nan`, +inf to `posinf` and -inf to `neginf` (default: the dtype's largest finite value and
/// its negative). Integer and bool arrays come back unchanged.
array nan_to_num(const array& a, float nan = 0.0f, std::optional<float> posinf = std::nullopt,
                 std::optional<float> neginf = std::nullopt);

// ---- elementwise: binary (numpy broadcasting and promotion) ----
array add(const array& a, const array& b);
array subtract(const array& a, const array& b);
array multiply(const array& a, const array& b);
/// True division: integer inputs give float32.
array divide(const array& a, const array& b);
/// Rounds the quotient toward negative infinity.
array floor_divide(const array& a, const array& b);
/// The remainder with the sign of the divisor (Python's %).
array remainder(const array& a, const array& b);
array power(const array& a, const array& b);
array maximum(const array& a, const array& b);
array minimum(const array& a, const array& b);
array arctan2(const array& a, const array& b);
/// log(exp(a) + exp(b)) without overflow.
array logaddexp(const array& a, const array& b);
array equal(const array& a, const array& b);
array not_equal(const array& a, const array& b);
array less(const array& a, const array& b);
array less_equal(const array& a, const array& b);
array greater(const array& a, const array& b);
array greater_equal(const array& a, const array& b);
array logical_and(const array& a, const array& b);
array logical_or(const array& a, const array& b);

// ---- bitwise ops: bool and integer arrays (floats throw), promoted as the arithmetic ops ----
array bitwise_and(const array& a, const array& b);
array bitwise_or(const array& a, const array& b);
array bitwise_xor(const array& a, const array& b);
/// ~a; on bool it is logical_not (as MLX).
array bitwise_invert(const array& a);
/// a << b and a >> b (arithmetic for signed a). Two bool operands compute in uint8, as in MLX. A
/// count outside [0, bits) shifts every bit out, as numpy does: 0, or -1 for a negative a shifted
/// right (MLX's CPU backend leaves those counts to the hardware).
array left_shift(const array& a, const array& b);
array right_shift(const array& a, const array& b);

// ---- compositions of other ops, with MLX's names and semantics (ops/compose.cpp) ----
/// Reverses the order of the elements along `axes` (every axis by default): a view.
array flip(const array& a, const std::vector<int>& axes);
array flip(const array& a, int axis);
array flip(const array& a);
/// Shifts elements along each axis by its shift (those pushed off the end come back at the start);
/// without axes, over the flattened array. Shifts may be negative or exceed the length.
array roll(const array& a, int shift);
array roll(const array& a, const Shape& shift);
array roll(const array& a, int shift, int axis);
array roll(const array& a, const Shape& shift, int axis);
array roll(const array& a, int shift, const std::vector<int>& axes);
array roll(const array& a, const Shape& shift, const std::vector<int>& axes);
/// An (n, m) array with ones at and below diagonal k (k > 0 above the main one).
array tri(int n, int m, int k, Dtype dtype);
array tri(int n, Dtype dtype = float32);
/// The last two axes' lower (tril) or upper (triu) triangle from diagonal k; zeros elsewhere.
array tril(const array& x, int k = 0);
array triu(const array& x, int k = 0);
/// Diagonal `offset` of the matrices over axis1 and axis2, as a new last axis (numpy, MLX).
array diagonal(const array& a, int offset = 0, int axis1 = 0, int axis2 = 1);
/// A 2-d array's diagonal k, or the square matrix with a 1-d array on diagonal k.
array diag(const array& a, int k = 0);
/// The sum of diagonal `offset` over axis1 and axis2 (optionally in `dtype`).
array trace(const array& a, int offset, int axis1, int axis2, Dtype dtype);
array trace(const array& a, int offset, int axis1, int axis2);
array trace(const array& a);
/// An array of a's shape filled with `vals` (broadcast), in `dtype` or a's dtype.
array full_like(const array& a, const array& vals, Dtype dtype);
array full_like(const array& a, const array& vals);
/// At least 1, 2 or 3 dimensions, as numpy: (n) -> (1, n) -> (1, n, 1); (m, n) -> (m, n, 1).
array atleast_1d(const array& a);
array atleast_2d(const array& a);
array atleast_3d(const array& a);
std::vector<array> atleast_1d(const std::vector<array>& a);
std::vector<array> atleast_2d(const std::vector<array>& a);
std::vector<array> atleast_3d(const std::vector<array>& a);
/// The slices along `axis`, each without that axis.
std::vector<array> unstack(const array& a, int axis = 0);
/// Coordinate grids from 1-d coordinate arrays (any array is flattened), "xy" (Cartesian: the
/// first two axes swapped) or "ij" (matrix) indexing; sparse keeps them unbroadcast.
std::vector<array> meshgrid(const std::vector<array>& arrays, bool sparse = false, const std::string& indexing = "xy");
/// The Kronecker product (arrays of different ranks are padded with leading 1s).
array kron(const array& a, const array& b);
/// Sums the products over a's last `axis` axes and b's first `axis` axes.
array tensordot(const array& a, const array& b, int axis = 2);
/// Sums the products over axes_a of a paired with axes_b of b.
array tensordot(const array& a, const array& b, const std::vector<int>& axes_a, const std::vector<int>& axes_b);

// ---- whole-array comparisons (MLX's semantics) ----
/// |a - b| <= atol + rtol * |b| elementwise, broadcasting; infinities are close only to the same
/// infinity; NaNs are close to each other only with equal_nan.
array isclose(const array& a, const array& b, double rtol = 1e-5, double atol = 1e-8, bool equal_nan = false);
/// all(isclose(a, b, ...)): a 0-d bool.
array allclose(const array& a, const array& b, double rtol = 1e-5, double atol = 1e-8, bool equal_nan = false);
/// True when a and b have the same shape and equal values (compared in their promoted dtype); NaNs
/// are equal only with equal_nan. Arrays of different shapes give false, not an error.
array array_equal(const array& a, const array& b, bool equal_nan = false);

// ---- elementwise: ternary ----
/// Picks x where cond is true and y elsewhere, broadcasting all three.
array where(const array& cond, const array& x, const array& y);
/// Limits values to [lo, hi]; either bound may be absent. A NaN bound gives NaN, as
/// minimum(maximum(a, lo), hi) (numpy, PyTorch, MLX); the gradient reaches `a` where lo <= a <= hi.
array clip(const array& a, const std::optional<array>& lo, const std::optional<array>& hi);

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
array sum(const array& a, const std::vector<int>& axes, bool keepdims = false);
array sum(const array& a, int axis, bool keepdims = false);
array sum(const array& a, bool keepdims = false);
/// mean, var, std and logsumexp of float16 and bfloat16 accumulate in float32 and round once at the
/// end (a float16 sum of more than 65,504 ones would be inf); integers give float32.
array mean(const array& a, const std::vector<int>& axes, bool keepdims = false);
array mean(const array& a, int axis, bool keepdims = false);
array mean(const array& a, bool keepdims = false);
array prod(const array& a, const std::vector<int>& axes, bool keepdims = false);
array prod(const array& a, int axis, bool keepdims = false);
array prod(const array& a, bool keepdims = false);
array max(const array& a, const std::vector<int>& axes, bool keepdims = false);
array max(const array& a, int axis, bool keepdims = false);
array max(const array& a, bool keepdims = false);
array min(const array& a, const std::vector<int>& axes, bool keepdims = false);
array min(const array& a, int axis, bool keepdims = false);
array min(const array& a, bool keepdims = false);
array all(const array& a, const std::vector<int>& axes, bool keepdims = false);
array all(const array& a, int axis, bool keepdims = false);
array all(const array& a, bool keepdims = false);
array any(const array& a, const std::vector<int>& axes, bool keepdims = false);
array any(const array& a, int axis, bool keepdims = false);
array any(const array& a, bool keepdims = false);
/// Variance with `ddof` delta degrees of freedom (0: population variance).
array var(const array& a, const std::vector<int>& axes, bool keepdims = false, int ddof = 0);
array var(const array& a, int axis, bool keepdims = false, int ddof = 0);
array var(const array& a, bool keepdims = false, int ddof = 0);
array std(const array& a, const std::vector<int>& axes, bool keepdims = false, int ddof = 0);
array std(const array& a, int axis, bool keepdims = false, int ddof = 0);
array std(const array& a, bool keepdims = false, int ddof = 0);
/// log(sum(exp(a))) computed without overflow.
array logsumexp(const array& a, const std::vector<int>& axes, bool keepdims = false);
array logsumexp(const array& a, int axis, bool keepdims = false);
array logsumexp(const array& a, bool keepdims = false);
/// Index of the largest value along `axis` (the first one on ties), as int32.
array argmax(const array& a, int axis, bool keepdims = false);
/// Index into the flattened array.
array argmax(const array& a, bool keepdims = false);
array argmin(const array& a, int axis, bool keepdims = false);
array argmin(const array& a, bool keepdims = false);
/// exp(a - max) / sum(exp(a - max)) over `axes`, the half types computed in float32. A row holding +inf
/// is NaN (x - max is NaN there), as in numpy, PyTorch and MLX; a row of -inf is NaN too (0 / 0).
array softmax(const array& a, const std::vector<int>& axes);
array softmax(const array& a, int axis = -1);
array log_softmax(const array& a, const std::vector<int>& axes);
array log_softmax(const array& a, int axis = -1);
/// Running sum along `axis`; `reverse` sums from the end, `inclusive=false` shifts by one.
array cumsum(const array& a, int axis, bool reverse = false, bool inclusive = true);
array cumsum(const array& a);

// ---- scans (MLX's Scan: one primitive for each running reduction; axes may be negative) ----
// Without an axis they run over the flattened array. `reverse` runs from the end; an exclusive scan
// (`inclusive=false`) shifts by one and starts from the identity (0, 1, -inf/the lowest value,
// +inf/the largest value, -inf). MLX's optional `dtype` argument of cumsum/cumprod is left out.
/// The flattened form of cumsum with MLX's flags.
array cumsum(const array& a, bool reverse, bool inclusive = true);
/// Running product, in a's dtype (as MLX: bool is a running "and", small integers wrap).
array cumprod(const array& a, int axis, bool reverse = false, bool inclusive = true);
array cumprod(const array& a, bool reverse = false, bool inclusive = true);
/// Running maximum / minimum in a's dtype (bool: "or" / "and"); a NaN makes every later value NaN.
/// The gradient goes to the element holding the running extreme (ties: the latest in scan order).
array cummax(const array& a, int axis, bool reverse = false, bool inclusive = true);
array cummax(const array& a, bool reverse = false, bool inclusive = true);
array cummin(const array& a, int axis, bool reverse = false, bool inclusive = true);
array cummin(const array& a, bool reverse = false, bool inclusive = true);
/// Running log(sum(exp(a))), each step a stable logaddexp (no overflow; -inf entries add nothing;
/// NaN propagates). Integer and bool inputs give float32 (MLX keeps their dtype and truncates).
array logcumsumexp(const array& a, int axis, bool reverse = false, bool inclusive = true);
array logcumsumexp(const array& a, bool reverse = false, bool inclusive = true);

// ---- statistics and counts (MLX's semantics) ----
/// The median over `axes` (all by default): the middle value, or the mean of the two middle ones
/// for an even count; NaN where the values hold a NaN. Floating dtypes are kept, others give float32
/// (the half types average in float32). An empty set of values throws (MLX); no axes is the identity.
array median(const array& a, bool keepdims = false);
array median(const array& a, const std::vector<int>& axes, bool keepdims = false);
array median(const array& a, int axis, bool keepdims = false);
/// The number of nonzero elements (NaN counts) over `axes` (all by default), as int32.
array count_nonzero(const array& a, bool keepdims = false);
array count_nonzero(const array& a, int axis, bool keepdims = false);
array count_nonzero(const array& a, const std::vector<int>& axes, bool keepdims = false);
/// The product of a's sizes along `axes` (its reciprocal when `inverted`, as MLX's mean uses it), as
/// a 0-d array of `dtype`. Axes may be negative and are checked (MLX wraps out-of-range ones).
array number_of_elements(const array& a, std::vector<int> axes, bool inverted, Dtype dtype = int32);
/// `a` itself (unary plus).
array positive(const array& a);

// ---- searching a sorted sequence ----
/// For each of `values`, the index at which it would be inserted into the 1-d ascending
/// `sorted_sequence` keeping it sorted: before equal elements ("left") or after them ("right"), as
/// numpy (NaN orders last). Compared in the promoted dtype; the result has values' shape, as int32
/// (MLX: uint32; Loom's index results are int32).
array searchsorted(const array& sorted_sequence, const array& values, const std::string& side = "left");

// ---- shapes and views ----
/// One dimension may be -1 (inferred). A view when the layout allows, a copy otherwise.
array reshape(const array& a, Shape shape);
array flatten(const array& a, int start_axis = 0, int end_axis = -1);
array transpose(const array& a, std::vector<int> axes);
array transpose(const array& a);
array swapaxes(const array& a, int axis1, int axis2);
array moveaxis(const array& a, int source, int destination);
array squeeze(const array& a, const std::vector<int>& axes);
array squeeze(const array& a, int axis);
array squeeze(const array& a);
array expand_dims(const array& a, const std::vector<int>& axes);
array expand_dims(const array& a, int axis);
array broadcast_to(const array& a, const Shape& shape);
std::vector<array> broadcast_arrays(const std::vector<array>& inputs);
Shape broadcast_shapes(const Shape& a, const Shape& b);
/// Elements start[i] <= j < stop[i] in steps of strides[i] (numpy rules: negative values count
/// from the end, bounds are clamped, steps may be negative).
array slice(const array& a, Shape start, Shape stop, Shape strides);
array slice(const array& a, Shape start, Shape stop);
/// `src` with the slice [start:stop:strides] replaced by `update` (broadcast to the slice).
array slice_update(const array& src, const array& update, Shape start, Shape stop, Shape strides);
array slice_update(const array& src, const array& update, Shape start, Shape stop);
array concatenate(const std::vector<array>& arrays, int axis = 0);
array stack(const std::vector<array>& arrays, int axis = 0);
/// Splits into `num_splits` equal parts along `axis`.
std::vector<array> split(const array& a, int num_splits, int axis = 0);
/// Splits before each listed index along `axis`.
std::vector<array> split(const array& a, const std::vector<int>& indices, int axis = 0);
/// Pads `axes` with `low[i]` values before and `high[i]` after, filled with `value`.
array pad(const array& a, const std::vector<int>& axes, const Shape& low, const Shape& high,
          const array& value = array(0));
/// Pads every axis by (before, after) pairs.
array pad(const array& a, const std::vector<std::pair<int, int>>& pad_width, const array& value = array(0));
array pad(const array& a, int pad_width, const array& value = array(0));
array tile(const array& a, std::vector<int> reps);
array repeat(const array& a, int repeats, int axis);
array repeat(const array& a, int repeats);

// ---- linear algebra ----
/// Matrix product with numpy semantics: 1-d operands are promoted, batch dimensions broadcast.
array matmul(const array& a, const array& b);
/// beta * c + alpha * (a @ b).
array addmm(const array& c, const array& a, const array& b, float alpha = 1.0f, float beta = 1.0f);
array outer(const array& a, const array& b);
/// Sum product over the last axes of a and b.
array inner(const array& a, const array& b);

// ---- MLX names found missing by scripts/mlx_compat.py (ops/compat.cpp) ----
/// `a` laid out row-major (or column-major, when allowed and `a` already is): `a`'s own buffer when it
/// already is and is not much larger than `a` (MLX's rule), a copy otherwise. The gradient is the identity.
array contiguous(const array& a, bool allow_col_major = false);
/// Splits axis `axis` into `shape` (one entry may be -1): the inverse of flatten.
array unflatten(const array& a, int axis, Shape shape);
/// {floor_divide(a, b), remainder(a, b)}.
std::vector<array> divmod(const array& a, const array& b);
/// arange with unit step in `dtype`.
array arange(double start, double stop, Dtype dtype);
/// linspace with numpy's `endpoint`: false leaves out `stop` ([start, stop) in `num` equal steps).
array linspace(double start, double stop, int num, bool endpoint, Dtype dtype = float32);
/// An array of a's shape filled with the scalar `val`, in `dtype` or a's dtype.
template <typename T, typename = std::enable_if_t<std::is_arithmetic_v<T>>>
array full_like(const array& a, T val, Dtype dtype) {
  return full_like(a, array(val, dtype), dtype);
}
template <typename T, typename = std::enable_if_t<std::is_arithmetic_v<T>>>
array full_like(const array& a, T val) {
  return full_like(a, array(val, a.dtype()));
}

}  // namespace loom

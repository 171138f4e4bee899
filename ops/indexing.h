// Indexing and sorting ops: gathers and scatters (along an axis, and MLX's general gather / scatter
// family), masked_scatter, as_strided, slice updates, sorting, top-k and partitioning.
// Names and semantics follow MLX (`mlx/ops.h`) and numpy. Every op checks its arguments when it is
// built and records a lazy node; nothing runs until eval.
//
// Indices. Index arrays may have any integer dtype and any shape; bool and
// floating indices are rejected when the op is built. A negative index counts from the end of the
// axis (numpy): -1 is the last element. Index values are only known when the graph runs, so an index
// outside [-n, n) for an axis of size n makes `eval` throw std::out_of_range with a message that names
// the op, the bad index and the axis size (e.g. "[take] index 7 is out of bounds for axis 0 of size
// 5"). Apart from masked_scatter's source running short (std::runtime_error, as MLX), this is the
// only error these ops raise at eval time; everything known at build time (dtypes, axes, shapes, k)
// throws when the op is built.
//
// Gradients. Every primitive has a vjp and a jvp, except scatter_prod (none, as in MLX: both throw).
// Index arrays (and masks) get a zero cotangent (they are not differentiable; MLX throws when asked);
// argsort and argpartition are not differentiable.
#pragma once

#include <optional>
#include <type_traits>
#include <vector>

#include "loom/core/array.h"

namespace loom {

// ---- gathers ----

/// Elements of `a` at `indices` along `axis` (numpy/MLX `take`). The result has shape
/// a.shape[:axis] + indices.shape + a.shape[axis+1:]; a 0-d `indices` removes the axis.
array take(const array& a, const array& indices, int axis, StreamOrDevice s = {});
/// `take` on the flattened array: the result has the shape of `indices`.
array take(const array& a, const array& indices, StreamOrDevice s = {});
/// The slice at one index along `axis` (the axis is removed). The index is checked when built.
array take(const array& a, int index, int axis, StreamOrDevice s = {});
/// One element of the flattened array, as a 0-d array.
array take(const array& a, int index, StreamOrDevice s = {});

/// numpy/MLX `take_along_axis`: out[..., j, ...] = a[..., indices[..., j, ...], ...] along `axis`.
/// `indices` must have a.ndim() dimensions. Outside `axis`, `a` and `indices` broadcast against each
/// other; the result has the broadcast shape with indices.shape[axis] along `axis`.
array take_along_axis(const array& a, const array& indices, int axis, StreamOrDevice s = {});

// ---- scatters (each returns a new array; `a` is never modified) ----

/// numpy/MLX `put_along_axis`: a copy of `a` with out[..., indices[..., j, ...], ...] = values[..., j,
/// ...] along `axis`. `indices` must have a.ndim() dimensions; `values` is cast to a.dtype() (leading
/// size-1 dimensions beyond a.ndim() are dropped). `indices` and `values` broadcast together, and
/// outside `axis` each of their dimensions must be 1 or a's size there; the result has a's shape.
/// When indices repeat along the axis the value that comes last along the axis wins, and only that
/// value gets a gradient (the overwritten ones get zero; MLX would give every duplicate the
/// cotangent). The entries of `a` that were written over get zero gradient.
array put_along_axis(const array& a, const array& indices, const array& values, int axis, StreamOrDevice s = {});

/// Like put_along_axis, but adds: out = a, then out[..., indices[..., j, ...], ...] += values[..., j,
/// ...] along `axis`. Repeated indices accumulate. This is the gradient of take_along_axis (MLX's
/// `scatter_add_axis`).
array scatter_add_axis(const array& a, const array& indices, const array& values, int axis, StreamOrDevice s = {});

/// scatter_add_take: the adjoint of `take` (a Loom name; MLX has no such public op). out = a, then for
/// every position (pre, j, post) of `updates`
///     out[pre, indices.flat[j], post] += updates[pre, j, post]
/// where pre runs over a.shape[:axis], j over the elements of `indices` (row-major) and post over
/// a.shape[axis+1:]. So `updates` has the shape `take(a, indices, axis)` produces,
/// a.shape[:axis] + indices.shape + a.shape[axis+1:] (it is broadcast to that shape and cast to
/// a.dtype()), and the result has a's shape and dtype. Repeated indices accumulate (in the order of
/// j). `take`'s vjp is scatter_add_take of the cotangent into zeros. The embedding gradient is the
/// case a: (V, D), indices: (N,), updates: (N, D), axis 0.
/// It was called `scatter_add` before MLX's `scatter_add` (below, updates of shape indices.shape +
/// a.shape with a size-1 slice along the axis) took that name.
array scatter_add_take(const array& a, const array& indices, const array& updates, int axis, StreamOrDevice s = {});

// ---- MLX's general gather and scatters (mlx/ops.h) ----
//
// An index tuple picks a window. `indices` holds k integer arrays for the k distinct `axes`; they
// broadcast together to the index shape B. For each position b of B, the window of `a` starts at
// indices[j][b] along axes[j] and at 0 along every other axis. Negative indices count from the end of
// the axis, as elsewhere in Loom; an index whose window would reach past the end of its axis (index +
// window size > axis size, after wrapping) makes eval throw std::out_of_range naming the op, the
// index, the window size and the axis size, where MLX reads or writes outside the array (its docs call
// it undefined). Axes may be negative (MLX rejects them); repeated axes are an error.

/// MLX `gather`: the windows of size `slice_sizes` (one entry per dimension of `a`, each in
/// [0, a.shape[d]]) at every index tuple. The result has shape B + slice_sizes (the indexed axes keep
/// their slice size, usually 1; MLX does not squeeze them either).
array gather(const array& a, const std::vector<array>& indices, const std::vector<int>& axes, const Shape& slice_sizes,
             StreamOrDevice s = {});
/// gather with one index array along one axis.
array gather(const array& a, const array& indices, int axis, const Shape& slice_sizes, StreamOrDevice s = {});

/// MLX `scatter`: a copy of `a` with, for every index tuple b, the window starting there overwritten
/// by updates[b]. `updates` has shape B + W with W one size per dimension of `a` (W[d] <= a.shape[d];
/// usually 1 along the indexed axes and a.shape[d] elsewhere); it is cast to a.dtype() and not
/// broadcast (as MLX). Where windows overlap, the last index tuple in row-major order wins (MLX's CPU
/// order); only the winning update gets a gradient (MLX gives every overlapping update the cotangent,
/// which finite differences contradict).
array scatter(const array& a, const std::vector<array>& indices, const array& updates, const std::vector<int>& axes,
              StreamOrDevice s = {});
array scatter(const array& a, const array& indices, const array& updates, int axis, StreamOrDevice s = {});
/// MLX `scatter_add`: as scatter, but each update is added to what is there; overlaps accumulate.
/// Integers wrap around as in numpy; on bool it is a logical or. (For take-shaped updates see
/// scatter_add_take.)
array scatter_add(const array& a, const std::vector<array>& indices, const array& updates,
                  const std::vector<int>& axes, StreamOrDevice s = {});
array scatter_add(const array& a, const array& indices, const array& updates, int axis, StreamOrDevice s = {});
/// MLX `scatter_prod`: multiplies the updates in; overlaps accumulate. As in MLX it has no gradient:
/// its vjp and jvp throw std::runtime_error.
array scatter_prod(const array& a, const std::vector<array>& indices, const array& updates,
                   const std::vector<int>& axes, StreamOrDevice s = {});
array scatter_prod(const array& a, const array& indices, const array& updates, int axis, StreamOrDevice s = {});
/// MLX `scatter_max` / `scatter_min`: the larger (smaller) of what is there and each update. NaN
/// propagates from either side, as `maximum` does (MLX's CPU kernel drops a NaN already in `a`).
/// Gradients as MLX: the cotangent goes to `a` where the result equals a, and to each update equal to
/// the result at its position (ties give it to both).
array scatter_max(const array& a, const std::vector<array>& indices, const array& updates,
                  const std::vector<int>& axes, StreamOrDevice s = {});
array scatter_max(const array& a, const array& indices, const array& updates, int axis, StreamOrDevice s = {});
array scatter_min(const array& a, const std::vector<array>& indices, const array& updates,
                  const std::vector<int>& axes, StreamOrDevice s = {});
array scatter_min(const array& a, const array& indices, const array& updates, int axis, StreamOrDevice s = {});

/// MLX `masked_scatter`: a copy of `a` whose positions where `mask` is true take, in row-major order,
/// the consecutive elements of `src` (flattened). `mask` is bool with a.shape[:mask.ndim()] as its
/// shape (it covers whole trailing blocks); `src` has at most a.ndim() - mask.ndim() + 1 dimensions and
/// is broadcast as MLX does (a scalar fills every masked position). When `src` has fewer elements than
/// the masked positions, eval throws std::runtime_error naming both counts (as MLX's CPU kernel).
array masked_scatter(const array& a, const array& mask, const array& src, StreamOrDevice s = {});

/// MLX `as_strided`: a view of `a`'s elements in row-major order (a contiguous copy when `a` is not
/// contiguous) with the given shape, element strides (may be 0 or negative) and element offset.
/// Unlike MLX, which does not check, every element the view can reach must lie inside `a`'s
/// a.size() elements; otherwise it throws std::out_of_range when built, naming the offending range.
array as_strided(const array& a, Shape shape, Strides strides, size_t offset, StreamOrDevice s = {});

// ---- slice updates (MLX; the Shape overloads of slice_update are in ops.h) ----

namespace detail {
array dynamic_slice_update(const array& src, const array& update, const array& start, std::vector<int> axes,
                           StreamOrDevice s = {});
array dynamic_slice(const array& a, const array& start, std::vector<int> axes, Shape slice_size, StreamOrDevice s = {});
}  // namespace detail

/// MLX `slice` with start positions known only at eval: the block of shape `slice_size` (one size per
/// dimension of `a`, each at most its length) that begins at `start` (an integer array of shape (k,),
/// or 0-d for k = 1) along each of the k `axes`, and at 0 along the others. A negative start counts
/// from the end; a block reaching past the end of an axis makes eval throw std::out_of_range (MLX
/// reads outside the array). The gradient scatters back into the block. A template for the reason
/// given at slice_update below.
template <typename A, typename = std::enable_if_t<std::is_same_v<A, array>>>
array slice(const array& a, const A& start, std::vector<int> axes, Shape slice_size, StreamOrDevice s = {}) {
  return detail::dynamic_slice(a, start, std::move(axes), std::move(slice_size), s);
}

/// MLX `slice_update` with start positions known only at eval: `start` (an integer array of shape
/// (k,) or a 0-d one for k = 1) gives where the update's block begins along each of the k `axes`;
/// along every other axis it begins at 0. The update gets src's leading dimensions when it has fewer
/// and is cast to src.dtype(); its size along an axis is min(its size, src's) as MLX. A negative start
/// counts from the end; a block that would reach past the end of an axis makes eval throw
/// std::out_of_range (MLX writes outside the array). A template only so that a braced list never picks
/// this overload: slice_update(x, u, {0}, {2}) stays the Shape overload (start, stop).
template <typename A, typename = std::enable_if_t<std::is_same_v<A, array>>>
array slice_update(const array& src, const array& update, const A& start, std::vector<int> axes,
                   StreamOrDevice s = {}) {
  return detail::dynamic_slice_update(src, update, start, std::move(axes), s);
}

/// MLX `slice_update_add` / `_prod` / `_max` / `_min`: as slice_update(src, update, start, stop[,
/// strides]) but combining the update with what the slice holds (sum, product, maximum, minimum;
/// NaN propagates through max and min). Gradients as MLX's vjps; Loom also has their jvps (MLX throws
/// for prod, max and min).
array slice_update_add(const array& src, const array& update, Shape start, Shape stop, Shape strides,
                       StreamOrDevice s = {});
array slice_update_add(const array& src, const array& update, Shape start, Shape stop, StreamOrDevice s = {});
array slice_update_prod(const array& src, const array& update, Shape start, Shape stop, Shape strides,
                        StreamOrDevice s = {});
array slice_update_prod(const array& src, const array& update, Shape start, Shape stop, StreamOrDevice s = {});
array slice_update_max(const array& src, const array& update, Shape start, Shape stop, Shape strides,
                       StreamOrDevice s = {});
array slice_update_max(const array& src, const array& update, Shape start, Shape stop, StreamOrDevice s = {});
array slice_update_min(const array& src, const array& update, Shape start, Shape stop, Shape strides,
                       StreamOrDevice s = {});
array slice_update_min(const array& src, const array& update, Shape start, Shape stop, StreamOrDevice s = {});

// ---- matrix products with gathers and block masks (MLX; defined in ops/linalg.cpp) ----

/// MLX `gather_mm`: out[i] = a[lhs_indices[i]] @ b[rhs_indices[i]], where an index picks a matrix of
/// the operand's batch (its leading dimensions, flattened) and the two index arrays broadcast together
/// to I; the result has shape I + (M, N). A missing index array means every batch entry in order
/// (arange of the batch, in its shape); with neither it is matmul(a, b). 1-d operands are a row and a
/// column, as in matmul, and their dimension is dropped again. Only floating results (as MLX).
/// Loom builds it from take and matmul (the gathered matrices are materialized; `sorted_indices`, a
/// speed hint in MLX, changes nothing), so indices wrap when negative and out-of-range ones throw
/// std::out_of_range from eval ("[take] ..."); MLX casts them to uint32 and does not check.
array gather_mm(array a, array b, std::optional<array> lhs_indices = std::nullopt,
                std::optional<array> rhs_indices = std::nullopt, bool sorted_indices = false, StreamOrDevice s = {});

/// MLX `block_masked_mm`: a @ b with the matrices cut into blocks of block_size x block_size. mask_lhs
/// (..., ceil(M/bs), ceil(K/bs)) and mask_rhs (..., ceil(K/bs), ceil(N/bs)) mask the blocks of a and b
/// (given either, the other defaults to all true), mask_out (..., ceil(M/bs), ceil(N/bs)) those of the
/// result; masks broadcast over the batch. A bool mask zeroes the blocks where it is false (a NaN there
/// becomes 0); a floating one multiplies each block by its value. Without masks it is matmul(a, b).
/// MLX allows block sizes 32 and 64 only and its CPU kernel float32 only; Loom takes any block size
/// >= 1 and every floating dtype, built from repeat, where / multiply and matmul.
array block_masked_mm(array a, array b, int block_size, std::optional<array> mask_out = std::nullopt,
                      std::optional<array> mask_lhs = std::nullopt, std::optional<array> mask_rhs = std::nullopt,
                      StreamOrDevice s = {});

// ---- sorting (NaNs sort after every other value, as in numpy; axes may be negative) ----

/// The values of `a` sorted ascending along `axis`. Without an axis, as MLX's C++ API: the flattened
/// array, sorted (Python's mx.sort defaults to the last axis instead). The same holds for argsort,
/// topk, partition and argpartition.
array sort(const array& a, int axis, StreamOrDevice s = {});
array sort(const array& a, StreamOrDevice s = {});
/// The int32 indices that sort `a` along `axis`. Stable: equal values keep their order, and NaNs come
/// last in their original order.
array argsort(const array& a, int axis, StreamOrDevice s = {});
array argsort(const array& a, StreamOrDevice s = {});
/// The k largest values along `axis` (0 <= k <= a.shape(axis)); the axis becomes size k. MLX leaves
/// the order unspecified; Loom returns them in ascending order, so topk(a, k, axis) equals the last k
/// entries of sort(a, axis) along the axis. NaNs count as the largest values.
array topk(const array& a, int k, int axis, StreamOrDevice s = {});
array topk(const array& a, int k, StreamOrDevice s = {});
/// A copy of `a` rearranged along `axis` so the element at position `kth` is the one a full sort
/// would put there, with no larger element before it and no smaller one after it (the order within
/// each side is unspecified). kth may be negative (counts from the end).
array partition(const array& a, int kth, int axis, StreamOrDevice s = {});
array partition(const array& a, int kth, StreamOrDevice s = {});
/// The int32 indices of `partition`: partition(a, kth, axis) == take_along_axis(a, argpartition(a,
/// kth, axis), axis).
array argpartition(const array& a, int kth, int axis, StreamOrDevice s = {});
array argpartition(const array& a, int kth, StreamOrDevice s = {});

}  // namespace loom

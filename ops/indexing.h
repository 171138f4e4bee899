// Indexing and sorting ops: gathers and scatters along an axis, sorting, top-k and partitioning.
// Names and semantics follow MLX (`mlx/ops.h`) and numpy. Every op checks its arguments when it is
// built and records a lazy node; nothing runs until eval.
//
// Indices. Index arrays may have any integer dtype (uint8, int32, int64) and any shape; bool and
// floating indices are rejected when the op is built. A negative index counts from the end of the
// axis (numpy): -1 is the last element. Index values are only known when the graph runs, so an index
// outside [-n, n) for an axis of size n makes `eval` throw std::out_of_range with a message that names
// the op, the bad index and the axis size (e.g. "[take] index 7 is out of bounds for axis 0 of size
// 5"). This is the only error these ops raise at eval time; everything known at build time (dtypes,
// axes, shapes, k) throws when the op is built.
//
// Gradients. Every primitive has a vjp and a jvp. Index arrays get a zero cotangent (they are not
// differentiable); argsort and argpartition are not differentiable.
#pragma once

#include "loom/core/array.h"

namespace loom {

// ---- gathers ----

/// Elements of `a` at `indices` along `axis` (numpy/MLX `take`). The result has shape
/// a.shape[:axis] + indices.shape + a.shape[axis+1:]; a 0-d `indices` removes the axis.
array take(const array& a, const array& indices, int axis);
/// `take` on the flattened array: the result has the shape of `indices`.
array take(const array& a, const array& indices);
/// The slice at one index along `axis` (the axis is removed). The index is checked when built.
array take(const array& a, int index, int axis);
/// One element of the flattened array, as a 0-d array.
array take(const array& a, int index);

/// numpy/MLX `take_along_axis`: out[..., j, ...] = a[..., indices[..., j, ...], ...] along `axis`.
/// `indices` must have a.ndim() dimensions. Outside `axis`, `a` and `indices` broadcast against each
/// other; the result has the broadcast shape with indices.shape[axis] along `axis`.
array take_along_axis(const array& a, const array& indices, int axis);

// ---- scatters (each returns a new array; `a` is never modified) ----

/// numpy/MLX `put_along_axis`: a copy of `a` with out[..., indices[..., j, ...], ...] = values[..., j,
/// ...] along `axis`. `indices` must have a.ndim() dimensions; `values` is cast to a.dtype() (leading
/// size-1 dimensions beyond a.ndim() are dropped). `indices` and `values` broadcast together, and
/// outside `axis` each of their dimensions must be 1 or a's size there; the result has a's shape.
/// When indices repeat along the axis the value that comes last along the axis wins, and only that
/// value gets a gradient (the overwritten ones get zero; MLX would give every duplicate the
/// cotangent). The entries of `a` that were written over get zero gradient.
array put_along_axis(const array& a, const array& indices, const array& values, int axis);

/// Like put_along_axis, but adds: out = a, then out[..., indices[..., j, ...], ...] += values[..., j,
/// ...] along `axis`. Repeated indices accumulate. This is the gradient of take_along_axis (MLX's
/// `scatter_add_axis`).
array scatter_add_axis(const array& a, const array& indices, const array& values, int axis);

/// scatter_add_take: the adjoint of `take` (a Loom name; MLX has no such public op). out = a, then for
/// every position (pre, j, post) of `updates`
///     out[pre, indices.flat[j], post] += updates[pre, j, post]
/// where pre runs over a.shape[:axis], j over the elements of `indices` (row-major) and post over
/// a.shape[axis+1:]. So `updates` has the shape `take(a, indices, axis)` produces,
/// a.shape[:axis] + indices.shape + a.shape[axis+1:] (it is broadcast to that shape and cast to
/// a.dtype()), and the result has a's shape and dtype. Repeated indices accumulate (in the order of
/// j). `take`'s vjp is scatter_add_take of the cotangent into zeros. The embedding gradient is the
/// case a: (V, D), indices: (N,), updates: (N, D), axis 0.
/// It was called `scatter_add` before MLX's `scatter_add` (updates of shape indices.shape +
/// a.shape with a size-1 slice along the axis) took that name.
array scatter_add_take(const array& a, const array& indices, const array& updates, int axis);

// ---- sorting (NaNs sort after every other value, as in numpy; axes may be negative) ----

/// The values of `a` sorted ascending along `axis` (default: the last axis, as `mx.sort`).
array sort(const array& a, int axis = -1);
/// The int32 indices that sort `a` along `axis`. Stable: equal values keep their order, and NaNs come
/// last in their original order.
array argsort(const array& a, int axis = -1);
/// The k largest values along `axis` (0 <= k <= a.shape(axis)); the axis becomes size k. MLX leaves
/// the order unspecified; Loom returns them in ascending order, so topk(a, k) equals the last k
/// entries of sort(a) along the axis. NaNs count as the largest values.
array topk(const array& a, int k, int axis = -1);
/// A copy of `a` rearranged along `axis` so the element at position `kth` is the one a full sort
/// would put there, with no larger element before it and no smaller one after it (the order within
/// each side is unspecified). kth may be negative (counts from the end).
array partition(const array& a, int kth, int axis = -1);
/// The int32 indices of `partition`: partition(a, kth, axis) == take_along_axis(a, argpartition(a,
/// kth, axis), axis).
array argpartition(const array& a, int kth, int axis = -1);

}  // namespace loom

// view: the bytes of an array read as another dtype (MLX's view, numpy's ndarray.view).
//
// Deliberate difference from MLX: a view as bool is a copy holding 0 or 1 for each byte (true for
// any non-zero byte, as numpy reads it), since Loom's kernels assume bools are stored as 0 or 1;
// MLX keeps the raw bytes.
#pragma once

#include "loom/core/array.h"

namespace loom {

/// The bytes of `a` reinterpreted as `dtype` (little-endian host order). The last axis is scaled
/// by the ratio of the item sizes: viewing 8 uint8 as int32 gives 2, one float32 as uint8 gives 4.
/// Returns `a` when the dtype is already `dtype`. Row-contiguous inputs (and, for a smaller dtype,
/// inputs whose last axis is contiguous, or any input for an equal size) are viewed without a
/// copy; other inputs are first copied in row-major order, as MLX does. Throws
/// std::invalid_argument for a 0-d array whose item size changes, and when viewing as a larger
/// dtype, for a last axis whose size in bytes is not a multiple of the new item size. View has no
/// derivative: vjp and jvp through it throw.
array view(const array& a, Dtype dtype, StreamOrDevice s = {});

}  // namespace loom

// Strided copies between buffers (internal): how a kernel, a collective or a file writer gets a
// row-contiguous array out of any view, and the layout helpers that go with it.
#pragma once

#include <algorithm>

#include "loom/core/array.h"

namespace loom::kernels {

/// Copies (and converts) `src` into memory at `dst` laid out with `dst_strides` (elements of dst_dtype).
void copy_strided(const array& src, void* dst, Dtype dst_dtype, const Strides& dst_strides);

/// y[i] = float(x[i]) and y[i] = H(x[i]) (rounded to nearest even) over n contiguous elements, as
/// vector loops of the library copy's level: kernels whose arithmetic is heavy (GELU's erf) run half
/// operands through float blocks with them.
void widen(const bfloat16_t* x, float* y, size_t n);
void widen(const float16_t* x, float* y, size_t n);
void narrow(const float* x, bfloat16_t* y, size_t n);
void narrow(const float* x, float16_t* y, size_t n);

/// Sets the n elements (of `itemsize` bytes) at `dst` to the one at `value`, split over threads.
void fill(void* dst, size_t n, size_t itemsize, const void* value);

/// Row-major (C order) strides of a shape, in elements.
inline Strides row_major_strides(const Shape& shape) {
  Strides st(shape.size());
  int64_t s = 1;
  for (int i = static_cast<int>(shape.size()) - 1; i >= 0; --i) {
    st[i] = s;
    s *= std::max(shape[i], 1);
  }
  return st;
}

/// Whether `x` is a view of `owner`'s buffer that starts at `at` and has `strides` on each of its axes
/// longer than 1: where a kernel that lays several arrays out in one buffer would find it.
inline bool is_view_at(const array& x, const array& owner, const void* at, const Strides& strides) {
  if (x.data_shared_ptr() != owner.data_shared_ptr() || x.raw_data() != at) return false;
  for (size_t d = 0; d < x.ndim(); ++d) {
    if (x.shape()[d] > 1 && x.strides()[d] != strides[d]) return false;
  }
  return true;
}

/// Writes `src` (of out's shape) into out's buffer, laid out as out: the start of a kernel that updates
/// a copy of an input (slice_update, scatter, addmm). Nothing to do when eval gave out src's own
/// buffer (Primitive::donors): the values are already there.
inline void copy_into(const array& src, array& out) {
  if (out.raw_data() != src.raw_data()) copy_strided(src, out.raw_data(), out.dtype(), out.strides());
}

/// `src` itself when row-contiguous, otherwise an evaluated row-contiguous copy.
array row_contiguous(const array& src);
/// `src` itself when row-contiguous and of `dtype`, otherwise a row-contiguous copy converted to it.
array row_contiguous(const array& src, Dtype dtype);
/// `a` evaluated and row-contiguous: for file writers and datasets, outside eval (it runs a's graph,
/// which a kernel must never do).
array evaluated_row_contiguous(const array& a);

}  // namespace loom::kernels

// Helpers for the batching rules (Primitive::vmap) of the primitives in ops/, fast/ and
// distributed/ (internal). A rule receives inputs whose batch runs along axes[i] (-1: unbatched).
#pragma once

#include <utility>
#include <vector>

#include "loom/core/array.h"

namespace loom::detail {

using VmapResult = std::pair<std::vector<array>, std::vector<int>>;

/// The batch size: the extent of the batch axis of the batched inputs (there is at least one).
int vmap_size(const std::vector<array>& inputs, const std::vector<int>& axes);

/// `x` with its batch axis (at `axis`) moved to the front; an unbatched `x` (axis -1) unchanged.
array batch_first(const array& x, int axis);

/// `x` with its batch axis first; an unbatched `x` broadcast along a new first axis of `size`.
array batch_first_broadcast(const array& x, int axis, int size);

/// Every input with its batch first: unbatched ones broadcast along it.
std::vector<array> all_batch_first(const std::vector<array>& inputs, const std::vector<int>& axes);

/// The rule of a primitive whose inputs and outputs all have one shape and that works element by
/// element: the inputs are aligned (the batch at the first batched input's axis, unbatched inputs
/// broadcast) and the same primitive applied.
VmapResult vmap_elementwise(const std::vector<array>& inputs, const std::vector<int>& axes,
                            const std::vector<array>& outputs);

/// This node's own primitive (outputs[0].primitive_ptr()) again, on `inputs` that carry the batch
/// (of `size`) first: each output is the unbatched one's shape with the batch first. For kernels to
/// which a batch is just one more leading axis.
VmapResult same_op_batch_first(std::vector<array> inputs, const std::vector<array>& outputs, int size);

/// The rule of a primitive that handles any number of leading axes itself, for inputs batched or
/// not, given `make`, which builds the op on inputs with the batch first (unbatched ones untouched).
template <typename Make>
VmapResult vmap_leading(const std::vector<array>& inputs, const std::vector<int>& axes, Make&& make) {
  std::vector<array> in;
  in.reserve(inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) in.push_back(batch_first(inputs[i], axes[i]));
  std::vector<array> out = make(in);
  return {out, std::vector<int>(out.size(), 0)};
}

/// Axis `axis` of the unbatched array as an axis of the batched one, whose batch is at `batch_axis`.
inline int batched_axis(int axis, int batch_axis) { return axis + (axis >= batch_axis ? 1 : 0); }

/// `shape` with an axis of `size` inserted at `at`.
inline Shape insert_axis(Shape shape, int at, int size) {
  shape.insert(shape.begin() + at, size);
  return shape;
}

/// Each axis of `axes` (of the unbatched array) as an axis of the array with its batch first.
std::vector<int> shift_axes(const std::vector<int>& axes, int ndim);

}  // namespace loom::detail

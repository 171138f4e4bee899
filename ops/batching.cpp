#include "loom/ops/batching.h"

#include <stdexcept>

#include "loom/core/primitive.h"
#include "loom/ops/ops.h"
#include "loom/ops/utils.h"

namespace loom::detail {

int vmap_size(const std::vector<array>& inputs, const std::vector<int>& axes) {
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (axes[i] >= 0) return inputs[i].shape(axes[i]);
  }
  throw std::logic_error("[vmap] a batching rule ran with no batched input");
}

array batch_first(const array& x, int axis) { return axis <= 0 ? x : moveaxis(x, axis, 0); }

array batch_first_broadcast(const array& x, int axis, int size) {
  if (axis >= 0) return batch_first(x, axis);
  Shape shape = x.shape();
  shape.insert(shape.begin(), size);
  return broadcast_to(x, shape);
}

std::vector<array> all_batch_first(const std::vector<array>& inputs, const std::vector<int>& axes) {
  const int n = vmap_size(inputs, axes);
  std::vector<array> out;
  out.reserve(inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) out.push_back(batch_first_broadcast(inputs[i], axes[i], n));
  return out;
}

VmapResult vmap_elementwise(const std::vector<array>& inputs, const std::vector<int>& axes,
                            const std::vector<array>& outputs) {
  int at = -1;
  for (size_t i = 0; i < inputs.size() && at < 0; ++i) at = axes[i];
  std::vector<array> in;
  in.reserve(inputs.size());
  Shape shape;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const array& x = inputs[i];
    if (axes[i] == at) {
      in.push_back(x);
      shape = x.shape();
    } else if (axes[i] >= 0) {
      in.push_back(moveaxis(x, axes[i], at));
    } else {
      in.push_back(x);  // broadcast below, once the batched shape is known
    }
  }
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (axes[i] < 0) in[i] = broadcast_to(expand_dims(in[i], at), shape);
  }
  std::vector<Shape> shapes(outputs.size(), shape);
  std::vector<Dtype> dtypes;
  for (const array& o : outputs) dtypes.push_back(o.dtype());
  std::vector<array> out = array::make_arrays(std::move(shapes), dtypes, outputs[0].primitive_ptr(), std::move(in));
  return {out, std::vector<int>(out.size(), at)};
}

VmapResult same_op_batch_first(std::vector<array> inputs, const std::vector<array>& outputs, int size) {
  std::vector<Shape> shapes;
  std::vector<Dtype> dtypes;
  for (const array& o : outputs) {
    shapes.push_back(insert_axis(o.shape(), 0, size));
    dtypes.push_back(o.dtype());
  }
  std::vector<array> out = array::make_arrays(std::move(shapes), dtypes, outputs[0].primitive_ptr(), std::move(inputs));
  return {out, std::vector<int>(out.size(), 0)};
}

std::vector<int> shift_axes(const std::vector<int>& axes, int ndim) {
  std::vector<int> out;
  out.reserve(axes.size());
  for (int a : axes) out.push_back((a < 0 ? a + ndim : a) + 1);
  return out;
}

}  // namespace loom::detail

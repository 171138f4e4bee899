// Ops MLX's C++ API has that Loom lacked (found by scripts/mlx_compat.py): `contiguous`, a primitive,
// and small compositions of existing ops under MLX's names and argument orders.
#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

#include "loom/core/serialize.h"
#include "loom/core/copy.h"
#include "loom/core/primitive.h"
#include "loom/ops/batching.h"
#include "loom/ops/ops.h"
#include "loom/ops/utils.h"

namespace loom {

namespace {

// MLX's Contiguous: the input itself when it is already laid out as asked and its buffer is not much
// larger than it (a small row-contiguous slice of a big buffer is copied, so the big buffer can be
// freed, as MLX does); otherwise a row-major copy. A copy to autograd: the gradient is the identity.
class Contiguous : public UnaryPrimitive {
 public:
  void save(detail::Writer& w) const override { w.put(allow_col_major_); }
  std::vector<Shape> output_shapes(const std::vector<Shape>& in) const override { return same_shape_output(in); }
  explicit Contiguous(bool allow_col_major) : allow_col_major_(allow_col_major) {}
  bool supports_complex() const override { return true; }
  void eval_cpu(const std::vector<array>& in, array& out) override {
    const array& x = in[0];
    constexpr size_t kExtraBytes = 16384;  // MLX's slack before a shared buffer counts as too large
    const auto& data = x.data_shared_ptr();
    const size_t buffer_bytes = data ? data->buffer.size : 0;
    const bool layout_ok = x.flags().row_contiguous || (allow_col_major_ && x.flags().col_contiguous);
    if (layout_ok && buffer_bytes <= out.nbytes() + kExtraBytes) {
      out.copy_shared_buffer(x);
      return;
    }
    out.alloc();
    kernels::copy_strided(x, out.raw_data(), out.dtype(), out.strides());
  }
  std::vector<array> vjp(const std::vector<array>&, const std::vector<array>& cot, const std::vector<int>&,
                         const std::vector<array>&) override {
    return {cot[0]};
  }
  std::vector<array> jvp(const std::vector<array>&, const std::vector<array>& t, const std::vector<int>&) override {
    return {t[0]};
  }
  std::pair<std::vector<array>, std::vector<int>> vmap(const std::vector<array>& in, const std::vector<int>& axes,
                                                       const std::vector<array>& outs) override {
    return detail::vmap_elementwise(in, axes, outs);
  }
  const char* name() const override { return "Contiguous"; }
  bool makes_view() const override { return true; }

 private:
  bool allow_col_major_;
};
const bool kContiguousLoads = detail::register_primitive("Contiguous", [](detail::Reader& r) -> std::shared_ptr<Primitive> {
  return std::make_shared<Contiguous>(r.get<bool>());
});

}  // namespace

array contiguous(const array& a, bool allow_col_major, StreamOrDevice s) {
  OnStream on(s);
  return array(a.shape(), a.dtype(), std::make_shared<Contiguous>(allow_col_major), {a});
}

array unflatten(const array& a, int axis, Shape shape, StreamOrDevice s) {
  OnStream on(s);
  if (shape.empty()) throw std::invalid_argument("[unflatten] the shape to unflatten to is empty");
  const int nd = static_cast<int>(a.ndim());
  const int ax = detail::normalize_axis(axis, nd, "unflatten");
  int64_t known = 1;
  int infer = -1;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == -1) {
      if (infer >= 0) throw std::invalid_argument("[unflatten] only one dimension can be -1, got " + detail::shape_str(shape));
      infer = static_cast<int>(i);
    } else if (shape[i] < 0) {
      throw std::invalid_argument("[unflatten] negative dimension in " + detail::shape_str(shape));
    } else {
      known *= shape[i];
    }
  }
  const int64_t len = a.shape()[ax];
  if (infer >= 0 && known > 0 && len % known == 0) shape[infer] = static_cast<int>(len / known);
  int64_t total = 1;
  for (int d : shape) total *= d;
  if (total != len || (infer >= 0 && known == 0)) {
    throw std::invalid_argument(detail::msg("[unflatten] cannot unflatten axis ", axis, " of length ", len,
                                            " into shape ", detail::shape_str(shape)));
  }
  Shape out(a.shape().begin(), a.shape().begin() + ax);
  out.insert(out.end(), shape.begin(), shape.end());
  out.insert(out.end(), a.shape().begin() + ax + 1, a.shape().end());
  return reshape(a, out);
}

std::vector<array> divmod(const array& a, const array& b, StreamOrDevice s) {
  OnStream on(s);
  return {floor_divide(a, b), remainder(a, b)};
}

array arange(double start, double stop, Dtype dtype, StreamOrDevice s) {
  OnStream on(s);
  return arange(start, stop, 1.0, dtype);
}

array linspace(double start, double stop, int num, bool endpoint, Dtype dtype, StreamOrDevice s) {
  OnStream on(s);
  if (endpoint || num <= 0) return linspace(start, stop, num, dtype);
  // [start, stop): num values spaced (stop - start) / num apart, as numpy's endpoint=False.
  return linspace(start, start + (stop - start) * (num - 1) / num, num, dtype);
}

Dtype result_type(const std::vector<array>& arrays) {
  Dtype t = bool_;
  for (const array& a : arrays) t = promote_types(t, a.dtype());
  return t;
}

int normalize_axis_index(int axis, int ndim, const std::string& msg_prefix) {
  if (axis < -ndim || axis >= ndim) {
    throw std::invalid_argument(msg_prefix + "axis " + std::to_string(axis) + " is out of range for " +
                                std::to_string(ndim) + " dimensions");
  }
  return axis < 0 ? axis + ndim : axis;
}

const array array::ArrayIterator::operator*() const {
  Shape start(a_.ndim(), 0), stop = a_.shape();
  start[0] = index_;
  stop[0] = index_ + 1;
  return squeeze(slice(a_, std::move(start), std::move(stop)), 0);
}
array::ArrayIterator array::begin() const {
  if (ndim() == 0) throw std::invalid_argument("[array::begin] a 0-d array has no first axis to iterate over");
  return ArrayIterator(*this, 0);
}
array::ArrayIterator array::end() const {
  if (ndim() == 0) throw std::invalid_argument("[array::end] a 0-d array has no first axis to iterate over");
  return ArrayIterator(*this, shape()[0]);
}

}  // namespace loom

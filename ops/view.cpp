// view: one primitive whose output shares the input's buffer with rescaled strides when the layout
// allows it (as MLX's View::eval_cpu decides), else a row-major copy read as the new dtype.
#include "loom/core/serialize.h"
#include "loom/ops/view.h"

#include <limits>
#include <string>

#include "loom/core/copy.h"
#include "loom/core/loops.h"
#include "loom/core/primitive.h"
#include "loom/ops/batching.h"

namespace loom {

namespace {

std::string view_desc(const array& a, Dtype to) {
  return "shape " + detail::shape_str(a.shape()) + " of " + to_string(a.dtype()) + " as " + to_string(to);
}

// inputs: x, whose dtype differs from the output's. No vjp or jvp (the base class throws): a
// reinterpretation of bits has no derivative.
class View : public UnaryPrimitive {
 public:
  void save(detail::Writer&) const override {}
  bool supports_complex() const override { return true; }
  void eval_cpu(const std::vector<array>& in, array& out) override {
    const array& x = in[0];
    const int64_t ib = x.itemsize(), ob = out.itemsize();
    if (out.dtype() == bool_) {
      // Every byte becomes 0 or 1 (see view.h).
      const array bytes = kernels::row_contiguous(x);
      out.alloc();
      const auto* src = static_cast<const uint8_t*>(bytes.raw_data());
      auto* dst = static_cast<uint8_t*>(out.raw_data());
      for (size_t i = 0; i < out.size(); ++i) dst[i] = src[i] != 0;
      return;
    }
    const bool last_unit = x.ndim() > 0 && x.strides().back() == 1;
    if (ib == ob || (ob < ib && last_unit) || x.flags().row_contiguous) {
      Strides st = x.flags().row_contiguous ? out.strides() : x.strides();
      if (!x.flags().row_contiguous) {
        for (size_t i = 0; i + 1 < st.size(); ++i) st[i] = st[i] * ib / ob;
      }
      size_t data_size;
      const auto flags = array::layout_flags(out.shape(), st, &data_size);
      out.copy_shared_buffer(x, st, flags, data_size, 0);
      return;
    }
    const array copy = kernels::row_contiguous(x);
    size_t data_size;
    const auto flags = array::layout_flags(out.shape(), out.strides(), &data_size);
    out.copy_shared_buffer(copy, out.strides(), flags, data_size, 0);
  }
  std::pair<std::vector<array>, std::vector<int>> vmap(const std::vector<array>& in, const std::vector<int>& axes,
                                                       const std::vector<array>& outs) override {
    // The last axis changes length: the batch must not be it.
    const bool last = axes[0] == static_cast<int>(in[0].ndim()) - 1;
    return {{view(last ? detail::batch_first(in[0], axes[0]) : in[0], outs[0].dtype())}, {last ? 0 : axes[0]}};
  }
  const char* name() const override { return "View"; }
  bool makes_view() const override { return true; }
};
const bool kViewLoads = detail::register_primitive("View", [](detail::Reader&) -> std::shared_ptr<Primitive> {
  return std::make_shared<View>();
});

}  // namespace

array view(const array& a, Dtype dtype, StreamOrDevice s) {
  OnStream on(s);
  if (a.dtype() == dtype) return a;
  const int64_t ib = a.itemsize(), ob = dtype.size;
  Shape shape = a.shape();
  if (a.ndim() == 0) {
    if (ib != ob) {
      throw std::invalid_argument("[view] cannot view " + view_desc(a, dtype) +
                                  ": a 0-d array can only change to a dtype of the same size");
    }
  } else if (ib < ob) {
    if (shape.back() % (ob / ib) != 0) {
      throw std::invalid_argument("[view] cannot view " + view_desc(a, dtype) + ": the last axis holds " +
                                  std::to_string(int64_t(shape.back()) * ib) + " bytes, not a multiple of " +
                                  std::to_string(ob));
    }
    shape.back() = static_cast<int>(shape.back() / (ob / ib));
  } else if (ib > ob) {
    const int64_t grown = int64_t(shape.back()) * (ib / ob);
    if (grown > std::numeric_limits<int>::max()) {
      throw std::invalid_argument("[view] cannot view " + view_desc(a, dtype) + ": the last axis would exceed " +
                                  std::to_string(std::numeric_limits<int>::max()));
    }
    shape.back() = static_cast<int>(grown);
  }
  return array(shape, dtype, std::make_shared<View>(), {a});
}

}  // namespace loom

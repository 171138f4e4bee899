// softmax and log_softmax over the last axis as one primitive: one pass per row forward; the
// gradient is written with ops (as MLX's), from the output. fast::softmax adds a fused backward.
#include "loom/core/serialize.h"
#include "loom/core/primitive.h"
#include "loom/ops/batching.h"
#include "loom/kernels/softmax.h"
#include "loom/ops/ops.h"

namespace loom {

namespace detail {
array softmax_last_axis(const array& x, bool take_log);
}

namespace {

// inputs: x (float32 or float64)
class Softmax : public UnaryPrimitive {
 public:
  void save(detail::Writer& w) const override { w.put(log_); }
  std::vector<Shape> output_shapes(const std::vector<Shape>& in) const override { return same_shape_output(in); }
  bool is_equivalent(const Primitive& other) const override {
    auto* p = detail::same_primitive(this, other);
    return p && (log_ == p->log_);
  }
  explicit Softmax(bool take_log) : log_(take_log) {}
  void eval_cpu(const std::vector<array>& in, array& out) override {
    out.alloc();
    array x = kernels::row_contiguous(in[0]);
    if (out.size() == 0) return;
    kernels::dispatch_real(x.dtype(), [&](auto tag) { kernels::softmax_rows<decltype(tag)>(x, out, log_); });
  }
  // softmax: y (g - sum(g y)); log_softmax: g - exp(y) sum(g).
  std::vector<array> vjp(const std::vector<array>&, const std::vector<array>& cot, const std::vector<int>&,
                         const std::vector<array>& outputs) override {
    const array& y = outputs[0];
    const array g = astype(cot[0], y.dtype());
    if (log_) return {subtract(g, multiply(exp(y), sum(g, -1, true)))};
    return {multiply(y, subtract(g, sum(multiply(g, y), -1, true)))};
  }
  // softmax: y (t - sum(t y)); log_softmax: t - sum(exp(y) t).
  std::vector<array> jvp(const std::vector<array>& p, const std::vector<array>& tan, const std::vector<int>&) override {
    const array y = detail::softmax_last_axis(p[0], log_);
    const array& t = tan[0];
    if (log_) return {subtract(t, sum(multiply(exp(y), t), -1, true))};
    return {multiply(y, subtract(t, sum(multiply(t, y), -1, true)))};
  }
  uint64_t donors(const std::vector<array>& in, int) const override { return row_contiguous_donors(in, {0}); }
  // Rows of the last axis: the batch goes first, out of the way.
  std::pair<std::vector<array>, std::vector<int>> vmap(const std::vector<array>& in, const std::vector<int>& axes,
                                                       const std::vector<array>& outs) override {
    return detail::same_op_batch_first({detail::batch_first(in[0], axes[0])}, outs, detail::vmap_size(in, axes));
  }
  const char* name() const override { return log_ ? "LogSoftmax" : "Softmax"; }

 private:
  bool log_;
};
const detail::PrimitiveLoader kSoftmaxLoad = [](detail::Reader& r) -> std::shared_ptr<Primitive> {
  return std::make_shared<Softmax>(r.get<bool>());
};
// Registered under each name the class goes by.
const bool kSoftmaxLoads = detail::register_primitive("Softmax", kSoftmaxLoad) &&
                           detail::register_primitive("LogSoftmax", kSoftmaxLoad);

}  // namespace

namespace detail {

array softmax_last_axis(const array& x, bool take_log) {
  const Dtype cd = x.dtype() == float64 ? float64 : float32;  // half types compute in float32
  array y(x.shape(), cd, std::make_shared<Softmax>(take_log), {astype(x, cd)});
  return y.dtype() == x.dtype() ? y : astype(y, x.dtype());
}

}  // namespace detail

}  // namespace loom

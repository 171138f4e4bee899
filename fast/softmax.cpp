// softmax and log_softmax over the last axis with a fused backward: one pass per row each way (the
// backward reads the forward's output). The reference is loom::softmax / log_softmax: the same
// forward kernel with a gradient written with ops.
#include "loom/core/serialize.h"
#include "loom/fast/custom.h"
#include "loom/fast/fast.h"
#include "loom/kernels/softmax.h"
#include "loom/ops/ops.h"
#include "loom/ops/utils.h"

namespace loom::fast {

namespace {

Composition reference(bool take_log) {
  return [take_log](const std::vector<array>& in) {
    return std::vector<array>{take_log ? loom::log_softmax(in[0], -1) : loom::softmax(in[0], -1)};
  };
}

// inputs: x, g, y = softmax(x); output: dx.
class SoftmaxBackward : public CustomBackward {
 public:
  explicit SoftmaxBackward(bool take_log) : CustomBackward(reference(take_log), 1, 1, {0}), log_(take_log) {}
  void save(detail::Writer& w) const override { w.put(log_); }
  void eval_cpu(const std::vector<array>& in, std::vector<array>& outs) override {
    outs[0].alloc();
    array y = kernels::row_contiguous(in[2]), g = kernels::row_contiguous(in[1]);
    if (outs[0].size() == 0) return;
    kernels::dispatch_real(y.dtype(),
                           [&](auto tag) { kernels::softmax_backward_rows<decltype(tag)>(y, g, outs[0], log_); });
  }
  // Into g's or y's buffer: a row of each is read before dx's is written.
  uint64_t donors(const std::vector<array>& in, int) const override { return row_contiguous_donors(in, {1, 2}); }
  Batching batching(const std::vector<int>&) const override { return Batching::same_shape; }
  const char* name() const override { return log_ ? "LogSoftmaxBackward" : "SoftmaxBackward"; }

 private:
  bool log_;
};
// One class under two names: the flag saved picks the name back.
std::shared_ptr<Primitive> load_softmax_backward(detail::Reader& r) {
  return std::make_shared<SoftmaxBackward>(r.get<bool>());
}
const bool kSoftmaxBackwardLoads = detail::register_primitive("SoftmaxBackward", load_softmax_backward) &&
                                   detail::register_primitive("LogSoftmaxBackward", load_softmax_backward);

class Softmax : public Custom {
 public:
  std::vector<Shape> output_shapes(const std::vector<Shape>& in) const override { return {in.at(0)}; }
  explicit Softmax(bool take_log) : Custom(reference(take_log)), log_(take_log) {}
  void save(detail::Writer& w) const override { w.put(log_); }
  void eval_cpu(const std::vector<array>& in, std::vector<array>& outs) override {
    outs[0].alloc();
    array x = kernels::row_contiguous(in[0]);
    if (outs[0].size() == 0) return;
    kernels::dispatch_real(x.dtype(), [&](auto tag) { kernels::softmax_rows<decltype(tag)>(x, outs[0], log_); });
  }
  uint64_t donors(const std::vector<array>& in, int) const override { return row_contiguous_donors(in, {0}); }
  Batching batching(const std::vector<int>&) const override { return Batching::same_shape; }
  const char* name() const override { return log_ ? "FastLogSoftmax" : "FastSoftmax"; }

 protected:
  std::vector<array> fused_vjp(const std::vector<array>& p, const std::vector<array>& cot, const std::vector<int>&,
                               const std::vector<array>& outputs) override {
    const array& y = outputs[0];
    return backward(std::make_shared<SoftmaxBackward>(log_), p, {astype(cot[0], y.dtype())}, {0}, {y});
  }

 private:
  bool log_;
};
std::shared_ptr<Primitive> load_softmax(detail::Reader& r) { return std::make_shared<Softmax>(r.get<bool>()); }
const bool kSoftmaxLoads = detail::register_primitive("FastSoftmax", load_softmax) &&
                           detail::register_primitive("FastLogSoftmax", load_softmax);

array softmax_impl(const array& a, bool take_log) {
  const char* op = take_log ? "log_softmax" : "softmax";
  if (a.ndim() == 0) {
    throw std::invalid_argument(std::string("[") + op + "] needs an array with at least one axis, got a 0-d array");
  }
  detail::reject_complex(a.dtype(), op);
  const Dtype d = is_floating_point(a.dtype()) ? a.dtype() : float32;
  const Dtype cd = d == float64 ? float64 : float32;  // half types compute in float32
  array y(a.shape(), cd, std::make_shared<Softmax>(take_log), {astype(a, cd)});
  return y.dtype() == d ? y : astype(y, d);
}

}  // namespace

array softmax(const array& x, StreamOrDevice s) { OnStream on(s); return softmax_impl(x, false); }
array log_softmax(const array& x, StreamOrDevice s) { OnStream on(s); return softmax_impl(x, true); }

}  // namespace loom::fast

// custom_function, custom_vjp and checkpoint: primitives whose forward is a traced function and whose
// derivatives are rules supplied by the caller.
#include <algorithm>
#include <sstream>

#include "loom/autograd/transforms.h"
#include "loom/core/primitive.h"
#include "loom/ops/graph.h"
#include "loom/ops/ops.h"
#include "loom/ops/utils.h"

namespace loom {

using detail::msg;
using detail::shape_str;

namespace {


// Inputs: the function's arguments followed by its (stop_gradient'ed) traced outputs. The forward
// only hands out the traced outputs' buffers; vjp and jvp call the rules on the arguments.
class CustomTransforms : public Primitive {
 public:
  bool supports_complex() const override { return true; }
  CustomTransforms(size_t num_outputs, CustomVjpFn vjp, CustomJvpFn jvp, const char* label)
      : num_outputs_(num_outputs), vjp_(std::move(vjp)), jvp_(std::move(jvp)), label_(label) {}

  void eval_cpu(const std::vector<array>& inputs, std::vector<array>& outputs) override {
    const size_t first = inputs.size() - num_outputs_;
    for (size_t i = 0; i < num_outputs_; ++i) outputs[i].copy_shared_buffer(inputs[first + i]);
  }

  std::vector<array> vjp(const std::vector<array>& primals, const std::vector<array>& cotangents,
                         const std::vector<int>& argnums, const std::vector<array>& outputs) override {
    std::vector<array> args(primals.begin(), primals.end() - num_outputs_);
    std::vector<array> all = vjp_(args, cotangents, outputs);
    if (all.size() != args.size()) {
      throw std::invalid_argument(msg("[", label_, "] the vjp rule returned ", all.size(), " cotangents for ",
                                      args.size(), " primals"));
    }
    std::vector<array> out;
    out.reserve(argnums.size());
    for (int a : argnums) {
      if (static_cast<size_t>(a) >= args.size()) {  // a traced output: behind stop_gradient
        out.push_back(zeros_like(primals[a]));
        continue;
      }
      if (all[a].shape() != args[a].shape()) {
        throw std::invalid_argument(msg("[", label_, "] the vjp rule returned a cotangent of shape ",
                                        shape_str(all[a].shape()), " for primal ", a, " of shape ",
                                        shape_str(args[a].shape())));
      }
      out.push_back(all[a]);
    }
    return out;
  }

  std::vector<array> jvp(const std::vector<array>& primals, const std::vector<array>& tangents,
                         const std::vector<int>& argnums) override {
    const size_t nargs = primals.size() - num_outputs_;
    std::vector<array> args(primals.begin(), primals.begin() + nargs);
    std::vector<array> ts;
    std::vector<int> an;
    for (size_t i = 0; i < argnums.size(); ++i) {
      if (static_cast<size_t>(argnums[i]) < nargs) {
        an.push_back(argnums[i]);
        ts.push_back(tangents[i]);
      }
    }
    std::vector<array> out = jvp_(args, ts, an);
    if (out.size() != num_outputs_) {
      throw std::invalid_argument(msg("[", label_, "] the jvp rule returned ", out.size(), " tangents for ",
                                      num_outputs_, " outputs"));
    }
    return out;
  }

  const char* name() const override { return "CustomTransforms"; }
  void print(std::ostream& os) const override { os << "CustomTransforms(" << label_ << ")"; }

 private:
  size_t num_outputs_;
  CustomVjpFn vjp_;
  CustomJvpFn jvp_;
  const char* label_;
};

// Outputs alias the first `n` inputs; the rest are only there so that eval runs them first.

VectorFn make_custom(VectorFn fun, CustomVjpFn fun_vjp, CustomJvpFn fun_jvp, const char* label) {
  return [fun = std::move(fun), fun_vjp = std::move(fun_vjp), fun_jvp = std::move(fun_jvp),
          label](const std::vector<array>& args) {
    std::vector<array> outs = fun(args);
    if (outs.empty()) throw std::invalid_argument(msg("[", label, "] the function returned no outputs"));
    std::vector<Shape> shapes;
    std::vector<Dtype> dtypes;
    std::vector<array> inputs = args;
    for (const auto& o : outs) {
      shapes.push_back(o.shape());
      dtypes.push_back(o.dtype());
      inputs.push_back(stop_gradient(o));  // transforms never look behind it: only the rules apply
    }
    return array::make_arrays(std::move(shapes), dtypes,
                              std::make_shared<CustomTransforms>(outs.size(), fun_vjp, fun_jvp, label),
                              std::move(inputs));
  };
}

}  // namespace


VectorFn custom_function(VectorFn fun, std::optional<CustomVjpFn> fun_vjp, std::optional<CustomJvpFn> fun_jvp) {
  if (!fun) throw std::invalid_argument("[custom_function] the function is empty");
  if (!fun_vjp && !fun_jvp) return fun;
  CustomVjpFn v = fun_vjp ? std::move(*fun_vjp) : CustomVjpFn([fun](const std::vector<array>& primals,
                                                                     const std::vector<array>& cotangents,
                                                                     const std::vector<array>&) {
    return vjp(fun, primals, cotangents).second;
  });
  CustomJvpFn j = fun_jvp ? std::move(*fun_jvp) : CustomJvpFn([fun](const std::vector<array>& primals,
                                                                     const std::vector<array>& tangents,
                                                                     const std::vector<int>& argnums) {
    return jvp(fun, primals, tangents_or_zeros(primals, tangents, argnums)).second;
  });
  return make_custom(std::move(fun), std::move(v), std::move(j), "custom_function");
}

VectorFn custom_vjp(VectorFn fun, CustomVjpFn fun_vjp) {
  if (!fun_vjp) throw std::invalid_argument("[custom_vjp] the vjp rule is empty");
  return custom_function(std::move(fun), std::move(fun_vjp), std::nullopt);
}

VectorFn checkpoint(VectorFn fun) {
  if (!fun) throw std::invalid_argument("[checkpoint] the function is empty");
  CustomVjpFn v = [fun](const std::vector<array>& primals, const std::vector<array>& cotangents,
                        const std::vector<array>&) {
    // Recompute from the inputs, scheduled after the cotangents: eval reaches this segment's
    // recomputation only when the backward pass gets to it, so segments never hold their
    // intermediates at the same time.
    return vjp(fun, depends(primals, cotangents), cotangents).second;
  };
  CustomJvpFn j = [fun](const std::vector<array>& primals, const std::vector<array>& tangents,
                        const std::vector<int>& argnums) {
    return jvp(fun, primals, tangents_or_zeros(primals, tangents, argnums)).second;
  };
  return make_custom(std::move(fun), std::move(v), std::move(j), "checkpoint");
}

}  // namespace loom

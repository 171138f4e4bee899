// custom_function, custom_vjp and checkpoint: primitives whose forward is a traced function and whose
// derivatives are rules supplied by the caller.
#include <algorithm>
#include <sstream>

#include "loom/autograd/transforms.h"
#include "loom/core/primitive.h"
#include "loom/ops/graph.h"
#include "loom/ops/indexing.h"
#include "loom/ops/ops.h"
#include "loom/ops/utils.h"

namespace loom {

using detail::msg;
using detail::shape_str;

namespace {


// Inputs: the function's arguments followed by its (stop_gradient'ed) traced outputs. The forward
// only hands out the traced outputs' buffers; vjp, jvp and vmap call the rules on the arguments.
struct CustomRules {
  VectorFn fun;
  CustomVjpFn vjp;
  CustomJvpFn jvp;
  std::optional<CustomVmapFn> vmap;  // none: vmap of fun
  const char* label;
};

std::vector<array> make_custom_node(const CustomRules& rules, const std::vector<array>& args,
                                    const std::vector<array>& outs);

class CustomTransforms : public Primitive {
 public:
  bool supports_complex() const override { return true; }
  CustomTransforms(size_t num_outputs, CustomRules rules) : num_outputs_(num_outputs), r_(std::move(rules)) {}

  void eval_cpu(const std::vector<array>& inputs, std::vector<array>& outputs) override {
    const size_t first = inputs.size() - num_outputs_;
    for (size_t i = 0; i < num_outputs_; ++i) outputs[i].copy_shared_buffer(inputs[first + i]);
  }

  std::vector<array> vjp(const std::vector<array>& primals, const std::vector<array>& cotangents,
                         const std::vector<int>& argnums, const std::vector<array>& outputs) override {
    std::vector<array> args(primals.begin(), primals.end() - num_outputs_);
    std::vector<array> all = r_.vjp(args, cotangents, outputs);
    if (all.size() != args.size()) {
      throw std::invalid_argument(msg("[", r_.label, "] the vjp rule returned ", all.size(), " cotangents for ",
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
        throw std::invalid_argument(msg("[", r_.label, "] the vjp rule returned a cotangent of shape ",
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
    std::vector<array> out = r_.jvp(args, ts, an);
    if (out.size() != num_outputs_) {
      throw std::invalid_argument(msg("[", r_.label, "] the jvp rule returned ", out.size(), " tangents for ",
                                      num_outputs_, " outputs"));
    }
    return out;
  }

  // The user's batching rule (or vmap of the function) gives the outputs; the result is again a
  // custom node whose vjp and jvp are the user's rules batched, so grad of vmap still uses them.
  std::pair<std::vector<array>, std::vector<int>> vmap(const std::vector<array>& inputs, const std::vector<int>& axes,
                                                       const std::vector<array>&) override {
    const size_t nargs = inputs.size() - num_outputs_;
    const std::vector<array> args(inputs.begin(), inputs.begin() + nargs);
    const std::vector<int> in_axes(axes.begin(), axes.begin() + nargs);
    auto [outs, out_axes] = batched_forward(r_, args, in_axes, num_outputs_);
    CustomRules b;
    b.label = r_.label;
    const CustomRules r = r_;
    const size_t n_out = num_outputs_;
    b.fun = [r, in_axes, n_out](const std::vector<array>& a) { return batched_forward(r, a, in_axes, n_out).first; };
    b.vjp = [r, in_axes, out_axes = out_axes](const std::vector<array>& p, const std::vector<array>& c,
                                              const std::vector<array>& o) {
      const size_t np = p.size(), nc = c.size();
      VectorFn rule = [r, np, nc](const std::vector<array>& v) {
        return r.vjp(std::vector<array>(v.begin(), v.begin() + np), std::vector<array>(v.begin() + np, v.begin() + np + nc),
                     std::vector<array>(v.begin() + np + nc, v.end()));
      };
      std::vector<array> all = p;
      all.insert(all.end(), c.begin(), c.end());
      all.insert(all.end(), o.begin(), o.end());
      std::vector<int> ax = in_axes;
      ax.insert(ax.end(), out_axes.begin(), out_axes.end());
      ax.insert(ax.end(), out_axes.begin(), out_axes.end());
      std::vector<array> g = loom::vmap(rule, ax, std::vector<int>(np, 0))(all);
      // An unbatched primal served every batch entry: its cotangent sums theirs.
      for (size_t i = 0; i < np && i < g.size(); ++i) g[i] = in_axes[i] < 0 ? sum(g[i], 0) : moveaxis(g[i], 0, in_axes[i]);
      return g;
    };
    b.jvp = [r, in_axes, out_axes = out_axes](const std::vector<array>& p, const std::vector<array>& t,
                                              const std::vector<int>& argnums) {
      const size_t np = p.size();
      VectorFn rule = [r, np, argnums](const std::vector<array>& v) {
        return r.jvp(std::vector<array>(v.begin(), v.begin() + np), std::vector<array>(v.begin() + np, v.end()), argnums);
      };
      std::vector<array> all = p;
      all.insert(all.end(), t.begin(), t.end());
      std::vector<int> ax = in_axes;
      for (int a : argnums) ax.push_back(in_axes[a]);
      std::vector<array> j = loom::vmap(rule, ax, std::vector<int>(out_axes.size(), 0))(all);
      for (size_t k = 0; k < j.size() && k < out_axes.size(); ++k) {
        j[k] = out_axes[k] < 0 ? take(j[k], 0, 0) : moveaxis(j[k], 0, out_axes[k]);
      }
      return j;
    };
    return {make_custom_node(b, args, outs), out_axes};
  }

  const char* name() const override { return "CustomTransforms"; }
  void print(std::ostream& os) const override { os << "CustomTransforms(" << r_.label << ")"; }

 private:
  // The outputs for batched `args` and the batch axis of each: the user's rule, or vmap of fun.
  static std::pair<std::vector<array>, std::vector<int>> batched_forward(const CustomRules& r,
                                                                         const std::vector<array>& args,
                                                                         const std::vector<int>& in_axes, size_t n_out) {
    if (!r.vmap) return {loom::vmap(r.fun, in_axes, std::vector<int>(n_out, 0))(args), std::vector<int>(n_out, 0)};
    auto res = (*r.vmap)(args, in_axes);
    if (res.first.size() != n_out || res.second.size() != n_out) {
      throw std::invalid_argument(msg("[", r.label, "] the vmap rule returned ", res.first.size(), " outputs and ",
                                      res.second.size(), " axes for ", n_out, " outputs"));
    }
    return res;
  }

  size_t num_outputs_;
  CustomRules r_;
};

std::vector<array> make_custom_node(const CustomRules& rules, const std::vector<array>& args,
                                    const std::vector<array>& outs) {
  if (outs.empty()) throw std::invalid_argument(msg("[", rules.label, "] the function returned no outputs"));
  std::vector<Shape> shapes;
  std::vector<Dtype> dtypes;
  std::vector<array> inputs = args;
  for (const auto& o : outs) {
    shapes.push_back(o.shape());
    dtypes.push_back(o.dtype());
    inputs.push_back(stop_gradient(o));  // transforms never look behind it: only the rules apply
  }
  return array::make_arrays(std::move(shapes), dtypes, std::make_shared<CustomTransforms>(outs.size(), rules),
                            std::move(inputs));
}

VectorFn make_custom(CustomRules rules) {
  return [rules = std::move(rules)](const std::vector<array>& args) {
    return make_custom_node(rules, args, rules.fun(args));
  };
}

}  // namespace

VectorFn custom_function(VectorFn fun, std::optional<CustomVjpFn> fun_vjp, std::optional<CustomJvpFn> fun_jvp,
                         std::optional<CustomVmapFn> fun_vmap) {
  if (!fun) throw std::invalid_argument("[custom_function] the function is empty");
  if (!fun_vjp && !fun_jvp && !fun_vmap) return fun;
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
  return make_custom({std::move(fun), std::move(v), std::move(j), std::move(fun_vmap), "custom_function"});
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
  return make_custom({std::move(fun), std::move(v), std::move(j), std::nullopt, "checkpoint"});
}

}  // namespace loom

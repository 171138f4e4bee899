// vmap: trace the function once on placeholders of the unbatched inputs, then rebuild the traced
// graph on the batched inputs, each node through its primitive's batching rule (Primitive::vmap).
#include <algorithm>
#include <sstream>
#include <string>
#include <unordered_map>
#include <unordered_set>

#include "loom/autograd/tape.h"
#include "loom/autograd/transforms.h"
#include "loom/core/primitive.h"
#include "loom/ops/ops.h"
#include "loom/ops/utils.h"

namespace loom {

using detail::msg;
using detail::shape_str;

namespace {

// Stands for one entry of a batched input while vmap traces: it has the entry's shape and dtype but
// no values, so the traced function cannot compute with them.
std::shared_ptr<Primitive> vmap_input() {
  return std::make_shared<detail::TracePlaceholder>(
      "VmapInput",
      "[vmap] the function evaluated an array that depends on its batched inputs; a function under "
      "vmap must only build graph (no eval, item or data access on what depends on its inputs)");
}

std::string primitive_desc(const array& a) {
  std::ostringstream os;
  a.primitive().print(os);
  return os.str();
}

}  // namespace

namespace detail {

std::pair<std::vector<array>, std::vector<array>> vmap_trace(const VectorFn& fun, const std::vector<array>& inputs,
                                                             const std::vector<int>& in_axes) {
  if (in_axes.size() != inputs.size()) {
    throw std::invalid_argument(msg("[vmap] ", in_axes.size(), " in_axes for ", inputs.size(), " inputs"));
  }
  int size = -1;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const int ax = in_axes[i];
    if (ax == -1) continue;
    const int nd = static_cast<int>(inputs[i].ndim());
    if (ax < 0 || ax >= nd) {
      throw std::invalid_argument(msg("[vmap] in_axes[", i, "] = ", ax, " is not an axis of input ", i, " of shape ",
                                      shape_str(inputs[i].shape()), " (use -1 for an input that is not batched)"));
    }
    const int n = inputs[i].shape(ax);
    if (size >= 0 && n != size) {
      throw std::invalid_argument(msg("[vmap] batch sizes differ: input ", i, " of shape ", shape_str(inputs[i].shape()),
                                      " has ", n, " along axis ", ax, ", an earlier input ", size));
    }
    size = n;
  }
  if (size < 0) throw std::invalid_argument("[vmap] no input is batched: every in_axes entry is -1");
  detail::InTracing tracing;
  std::vector<array> s_inputs;
  s_inputs.reserve(inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (in_axes[i] == -1) {
      s_inputs.push_back(inputs[i]);
      continue;
    }
    Shape shape = inputs[i].shape();
    shape.erase(shape.begin() + in_axes[i]);
    array p(std::move(shape), inputs[i].dtype(), vmap_input(), {});
    p.set_tracer(true);
    s_inputs.push_back(std::move(p));
  }
  std::vector<array> s_outputs = fun(s_inputs);
  return {std::move(s_inputs), std::move(s_outputs)};
}

std::vector<array> vmap_replace(const std::vector<array>& inputs, const std::vector<array>& s_inputs,
                                const std::vector<array>& s_outputs, const std::vector<int>& in_axes,
                                const std::vector<int>& out_axes) {
  if (out_axes.size() != s_outputs.size()) {
    throw std::invalid_argument(msg("[vmap] ", out_axes.size(), " out_axes for ", s_outputs.size(), " outputs"));
  }
  int size = -1;
  // Each traced array that varies along the batch -> its batched array and batch axis.
  std::unordered_map<std::uintptr_t, std::pair<array, int>> batched;
  for (size_t i = 0; i < s_inputs.size(); ++i) {
    if (in_axes[i] == -1) continue;
    size = inputs[i].shape(in_axes[i]);
    batched.emplace(s_inputs[i].id(), std::make_pair(inputs[i], in_axes[i]));
  }

  // The traced nodes that depend on a placeholder, in topological order.
  std::unordered_set<std::uintptr_t> varies;
  for (const auto& [id, v] : batched) varies.insert(id);
  const std::vector<array> tape = detail::dependent_tape(s_outputs, varies, false);

  for (const array& a : tape) {
    std::vector<array> v_inputs;
    std::vector<int> v_axes;
    for (const array& in : a.inputs()) {
      auto it = batched.find(in.id());
      if (it != batched.end()) {
        v_inputs.push_back(it->second.first);
        v_axes.push_back(it->second.second);
      } else {
        v_inputs.push_back(in);
        v_axes.push_back(-1);
      }
    }
    const std::vector<array> outs = a.outputs();
    auto [v_outputs, v_out_axes] = a.primitive().vmap(v_inputs, v_axes, outs);
    if (v_outputs.size() != outs.size() || v_out_axes.size() != outs.size()) {
      throw std::logic_error(msg("[vmap] the batching rule of ", primitive_desc(a), " returned ", v_outputs.size(),
                                 " outputs and ", v_out_axes.size(), " axes for ", outs.size(), " outputs"));
    }
    for (size_t k = 0; k < outs.size(); ++k) {
      // A rule's result must be the unbatched output with the batch inserted where it says.
      Shape expect = outs[k].shape();
      if (v_out_axes[k] >= 0) expect.insert(expect.begin() + std::min<size_t>(v_out_axes[k], expect.size()), size);
      if (v_outputs[k].shape() != expect || v_outputs[k].dtype() != outs[k].dtype()) {
        throw std::logic_error(msg("[vmap] the batching rule of ", primitive_desc(a), " gave output ", k, " shape ",
                                   shape_str(v_outputs[k].shape()), " ", v_outputs[k].dtype(), " with its batch at axis ",
                                   v_out_axes[k], "; the unbatched output is ", shape_str(outs[k].shape()), " ",
                                   outs[k].dtype()));
      }
      batched.emplace(outs[k].id(), std::make_pair(std::move(v_outputs[k]), v_out_axes[k]));
    }
  }

  std::vector<array> result;
  result.reserve(s_outputs.size());
  for (size_t i = 0; i < s_outputs.size(); ++i) {
    auto it = batched.find(s_outputs[i].id());
    const bool varies_here = it != batched.end() && it->second.second >= 0;
    array out = it != batched.end() ? it->second.first : s_outputs[i];
    const int nd = static_cast<int>(out.ndim()) + (varies_here ? 0 : 1);
    const int to = out_axes[i] < 0 ? out_axes[i] + nd : out_axes[i];
    if (to < 0 || to >= nd) {
      throw std::invalid_argument(msg("[vmap] out_axes[", i, "] = ", out_axes[i], " is not an axis of output ", i,
                                      ", which has ", nd, " dimensions with its batch"));
    }
    if (varies_here) {
      if (it->second.second != to) out = moveaxis(out, it->second.second, to);
    } else {
      // The same for every batch entry (it does not depend on a batched input): repeated along it.
      Shape shape = out.shape();
      shape.insert(shape.begin() + to, size);
      out = broadcast_to(expand_dims(out, to), shape);
    }
    result.push_back(std::move(out));
  }
  return result;
}

}  // namespace detail

VectorFn vmap(const VectorFn& fun, const std::vector<int>& in_axes, const std::vector<int>& out_axes) {
  // As MLX: a list of only negative axes says "nothing batched", on either side or neither.
  auto none = [](const std::vector<int>& a) {
    return !a.empty() && std::all_of(a.begin(), a.end(), [](int x) { return x < 0; });
  };
  if (none(in_axes) != none(out_axes)) {
    throw std::invalid_argument(msg("[vmap] ", none(in_axes) ? "no in_axes entry is batched (all -1) but out_axes are"
                                                              : "every out_axes entry is negative but in_axes batch an input",
                                    ": give both or neither"));
  }
  return [fun, in_axes, out_axes](const std::vector<array>& inputs) {
    std::vector<int> ia = in_axes.empty() ? std::vector<int>(inputs.size(), 0) : in_axes;
    auto [s_inputs, s_outputs] = detail::vmap_trace(fun, inputs, ia);
    std::vector<int> oa = out_axes.empty() ? std::vector<int>(s_outputs.size(), 0) : out_axes;
    return detail::vmap_replace(inputs, s_inputs, s_outputs, ia, oa);
  };
}

std::function<array(const array&, const array&)> vmap(const std::function<array(const array&, const array&)>& fun,
                                                      int in_axis_a, int in_axis_b, int out_axis) {
  VectorFn f = vmap([fun](const std::vector<array>& x) { return std::vector<array>{fun(x[0], x[1])}; },
                    {in_axis_a, in_axis_b}, {out_axis});
  return [f](const array& a, const array& b) { return f({a, b})[0]; };
}

std::function<array(const array&)> vmap(const UnaryFn& fun, int in_axis, int out_axis) {
  VectorFn f = vmap([fun](const std::vector<array>& x) { return std::vector<array>{fun(x[0])}; }, {in_axis},
                    {out_axis});
  return [f](const array& a) { return f({a})[0]; };
}

}  // namespace loom

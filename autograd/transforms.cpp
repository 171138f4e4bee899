#include "loom/autograd/transforms.h"

#include <algorithm>
#include <string_view>
#include <unordered_map>
#include <unordered_set>

#include "loom/autograd/tape.h"
#include "loom/core/primitive.h"
#include "loom/ops/ops.h"
#include "loom/ops/utils.h"

namespace loom {

using detail::msg;
using detail::shape_str;

namespace {

// The tracers of the transforms running on this thread (nested ones included), so that a tracer left
// over from a finished call can be told from the live tracer of an enclosing transform.
thread_local std::vector<std::uintptr_t> live_tracers;

// Copies of the primals that the traced function sees; everything computed from them is a tracer.
// They stay in live_tracers while the Tracers object lives.
struct Tracers {
  std::vector<array> arrays;
  explicit Tracers(const std::vector<array>& primals) {
    for (const auto& p : primals) {
      // A primal that is a tracer of a finished call (a loop that stores the traced input in a
      // container and passes it back, say) is traced from what that copy read: the copies would
      // otherwise chain up, one more per call (MLX does the same). An enclosing transform's tracer
      // is live and stays: the inner trace must depend on it.
      const bool stale = p.is_tracer() && p.has_primitive() && p.inputs().size() == 1 &&
                         std::string_view(p.primitive().name()) == "Copy" &&
                         std::find(live_tracers.begin(), live_tracers.end(), p.id()) == live_tracers.end();
      array t = copy(stale ? p.inputs()[0] : p);
      t.set_tracer(true);
      arrays.push_back(std::move(t));
    }
    for (const array& t : arrays) live_tracers.push_back(t.id());
  }
  ~Tracers() { live_tracers.resize(live_tracers.size() - arrays.size()); }
  Tracers(const Tracers&) = delete;
  Tracers& operator=(const Tracers&) = delete;
};

void accumulate(std::unordered_map<std::uintptr_t, array>& acc, const array& target, array v) {
  if (v.shape() != target.shape()) {
    throw std::logic_error(msg("[vjp] a gradient of shape ", shape_str(v.shape()), " was produced for an input of shape ",
                               shape_str(target.shape())));
  }
  if (v.dtype() != target.dtype()) v = astype(v, target.dtype());
  auto it = acc.find(target.id());
  if (it == acc.end()) acc.emplace(target.id(), std::move(v));
  else it->second = add(it->second, v);
}

}  // namespace

namespace detail {

std::vector<array> dependent_tape(const std::vector<array>& outputs, std::unordered_set<std::uintptr_t>& live,
                                  bool differentiable_only) {
  std::vector<array> tape;
  std::unordered_set<const void*> visited;
  struct Frame {
    array a;
    size_t next;
  };
  std::vector<Frame> stack;
  auto key = [](const array& a) -> const void* {
    return a.has_primitive() ? static_cast<const void*>(a.node_id()) : reinterpret_cast<const void*>(a.id());
  };
  for (const auto& out : outputs) {
    if (!visited.insert(key(out)).second) continue;
    stack.push_back({out, 0});
    while (!stack.empty()) {
      Frame& f = stack.back();
      // (Behind a primitive without derivatives lies, e.g., the traced forward of a custom_function:
      // a derivative transform does not visit it.)
      const bool leaf = live.count(f.a.id()) || !f.a.has_primitive() ||
                        (differentiable_only && !f.a.primitive().is_differentiable());
      const auto& ins = f.a.inputs();
      if (!leaf && f.next < ins.size()) {
        const array& in = ins[f.next++];
        if (visited.insert(key(in)).second) stack.push_back({in, 0});
        continue;
      }
      array a = std::move(f.a);
      stack.pop_back();
      if (leaf) continue;
      bool depends = false;
      for (const auto& in : a.inputs()) depends |= live.count(in.id()) > 0;
      if (!depends) continue;
      bool joins = false;
      for (const auto& o : a.outputs()) {
        if (!differentiable_only || is_inexact(o.dtype())) {
          live.insert(o.id());
          joins = true;
        }
      }
      if (joins) tape.push_back(std::move(a));
    }
  }
  return tape;
}

namespace {
// The backward half of a vjp: the products of `cotangents` (one per output, or fewer) with the
// Jacobian of `outputs` with respect to `tracers[argnums]`.
std::vector<array> backward(const std::vector<array>& primals, const std::vector<array>& tracers,
                            const std::vector<array>& outputs, const std::vector<array>& cotangents,
                            const std::vector<int>& argnums) {
  if (cotangents.size() > outputs.size()) {
    throw std::invalid_argument(msg("[vjp] ", cotangents.size(), " cotangents for ", outputs.size(), " outputs"));
  }
  std::unordered_set<std::uintptr_t> live;
  for (int i : argnums) {
    if (is_inexact(primals[i].dtype())) live.insert(tracers[i].id());
  }
  std::vector<array> tape = detail::dependent_tape(outputs, live, true);

  std::unordered_map<std::uintptr_t, array> cot;
  for (size_t i = 0; i < cotangents.size(); ++i) {
    const array& o = outputs[i];
    if (cotangents[i].shape() != o.shape()) {
      throw std::invalid_argument(msg("[vjp] cotangent ", i, " has shape ", shape_str(cotangents[i].shape()),
                                      " but output ", i, " has shape ", shape_str(o.shape())));
    }
    if (!is_inexact(o.dtype()) || !live.count(o.id())) continue;
    accumulate(cot, o, cotangents[i]);
  }

  for (auto it = tape.rbegin(); it != tape.rend(); ++it) {
    const array& a = *it;
    std::vector<array> outs = a.outputs();
    std::vector<array> cots;
    bool any = false;
    for (const auto& o : outs) {
      auto c = cot.find(o.id());
      if (c != cot.end()) {
        cots.push_back(c->second);
        cot.erase(c);  // consumed: the graph keeps what it needs
        any = true;
      } else {
        cots.push_back(zeros_like(o));
      }
    }
    if (!any) continue;
    const auto& ins = a.inputs();
    std::vector<int> args;
    for (size_t j = 0; j < ins.size(); ++j) {
      if (live.count(ins[j].id())) args.push_back(static_cast<int>(j));
    }
    if (args.empty()) continue;
    std::vector<array> grads = a.primitive().vjp(ins, cots, args, outs);
    for (size_t k = 0; k < args.size(); ++k) accumulate(cot, ins[args[k]], std::move(grads[k]));
  }

  std::vector<array> result;
  for (int i : argnums) {
    auto c = cot.find(tracers[i].id());
    result.push_back(c != cot.end() ? c->second : zeros_like(primals[i]));
  }
  return result;
}
}  // namespace

std::pair<std::vector<array>, std::vector<array>> vjp_impl(const VectorFn& fun, const std::vector<array>& primals,
                                                           const CotangentFn& make_cotangents,
                                                           const std::vector<int>& argnums) {
  detail::InTracing tracing;
  Tracers traced(primals);
  std::vector<array> outputs = fun(traced.arrays);
  std::vector<array> result = backward(primals, traced.arrays, outputs, make_cotangents(outputs), argnums);
  return {std::move(outputs), std::move(result)};
}

}  // namespace detail

std::pair<std::vector<array>, std::vector<array>> vjp(const VectorFn& fun, const std::vector<array>& primals,
                                                      const std::vector<array>& cotangents) {
  std::vector<int> argnums(primals.size());
  for (size_t i = 0; i < argnums.size(); ++i) argnums[i] = static_cast<int>(i);
  return detail::vjp_impl(fun, primals, [&](const std::vector<array>&) { return cotangents; }, argnums);
}

std::pair<std::vector<array>, VjpFn> vjp(const VectorFn& fun, const std::vector<array>& primals) {
  struct Forward {
    std::vector<array> primals, tracers, outputs;
  };
  auto f = std::make_shared<Forward>();
  {
    detail::InTracing tracing;
    Tracers traced(primals);  // live while fun runs; afterwards the tracers are plain copies
    f->outputs = fun(traced.arrays);
    f->tracers = traced.arrays;
  }
  f->primals = primals;
  std::vector<int> argnums(primals.size());
  for (size_t i = 0; i < argnums.size(); ++i) argnums[i] = static_cast<int>(i);
  VjpFn pullback = [f, argnums](const std::vector<array>& cotangents) {
    detail::InTracing tracing;
    return detail::backward(f->primals, f->tracers, f->outputs, cotangents, argnums);
  };
  return {f->outputs, std::move(pullback)};
}

std::pair<array, array> vjp(const UnaryFn& fun, const array& primal, const array& cotangent) {
  auto [outs, grads] = vjp([&](const std::vector<array>& x) { return std::vector<array>{fun(x[0])}; }, {primal},
                           {cotangent});
  return {outs[0], grads[0]};
}

std::pair<std::vector<array>, std::vector<array>> jvp(const VectorFn& fun, const std::vector<array>& primals,
                                                      const std::vector<array>& tangents) {
  if (tangents.size() != primals.size()) {
    throw std::invalid_argument(msg("[jvp] ", tangents.size(), " tangents for ", primals.size(), " primals"));
  }
  for (size_t i = 0; i < primals.size(); ++i) {
    if (tangents[i].shape() != primals[i].shape()) {
      throw std::invalid_argument(msg("[jvp] tangent ", i, " has shape ", shape_str(tangents[i].shape()),
                                      " but primal ", i, " has shape ", shape_str(primals[i].shape())));
    }
  }
  detail::InTracing tracing;
  Tracers traced(primals);
  const std::vector<array>& tracers = traced.arrays;
  std::vector<array> outputs = fun(tracers);
  std::unordered_set<std::uintptr_t> live;
  std::unordered_map<std::uintptr_t, array> tan;
  for (size_t i = 0; i < primals.size(); ++i) {
    if (!is_inexact(primals[i].dtype())) continue;
    live.insert(tracers[i].id());
    tan.emplace(tracers[i].id(), astype(tangents[i], primals[i].dtype()));
  }
  std::vector<array> tape = detail::dependent_tape(outputs, live, true);
  for (const array& a : tape) {
    const auto& ins = a.inputs();
    std::vector<int> args;
    std::vector<array> ts;
    for (size_t j = 0; j < ins.size(); ++j) {
      auto t = tan.find(ins[j].id());
      if (t != tan.end()) {
        args.push_back(static_cast<int>(j));
        ts.push_back(t->second);
      }
    }
    if (args.empty()) continue;
    std::vector<array> outs = a.outputs();
    std::vector<array> jv = a.primitive().jvp(ins, ts, args);
    for (size_t k = 0; k < outs.size(); ++k) {
      // A tangent has its primal's dtype (Autocast's sum of a half array is float32, its tangent's sum half).
      if (is_inexact(outs[k].dtype())) {
        tan.emplace(outs[k].id(), jv[k].dtype() == outs[k].dtype() ? jv[k] : astype(jv[k], outs[k].dtype()));
      }
    }
  }
  std::vector<array> result;
  for (const auto& o : outputs) {
    auto t = tan.find(o.id());
    result.push_back(t != tan.end() ? t->second : zeros_like(o));
  }
  return {outputs, result};
}

std::pair<array, array> jvp(const UnaryFn& fun, const array& primal, const array& tangent) {
  auto [outs, tans] = jvp([&](const std::vector<array>& x) { return std::vector<array>{fun(x[0])}; }, {primal},
                          {tangent});
  return {outs[0], tans[0]};
}

ValueAndGradFn value_and_grad(const VectorFn& fun, const std::vector<int>& argnums) {
  if (argnums.empty()) throw std::invalid_argument("[value_and_grad] argnums is empty");
  return [fun, argnums](const std::vector<array>& given) {
    const int n = static_cast<int>(given.size());
    std::vector<int> argnums_sorted;
    for (int i : argnums) {
      if (i < -n || i >= n) {
        throw std::invalid_argument(msg("[value_and_grad] argnum ", i, " is out of range for ", n, " inputs"));
      }
      argnums_sorted.push_back(i < 0 ? i + n : i);
    }
    std::sort(argnums_sorted.begin(), argnums_sorted.end());
    if (std::adjacent_find(argnums_sorted.begin(), argnums_sorted.end()) != argnums_sorted.end()) {
      throw std::invalid_argument(msg("[value_and_grad] argnums names input ", *std::adjacent_find(argnums_sorted.begin(), argnums_sorted.end()), " twice"));
    }
    const std::vector<array>& inputs = given;
    for (int i : argnums_sorted) {
      if (!is_inexact(inputs[i].dtype())) {
        throw std::invalid_argument(msg("[value_and_grad] cannot differentiate with respect to input ", i,
                                        " of dtype ", inputs[i].dtype(), "; only floating-point inputs have gradients"));
      }
    }
    // The first output must be a scalar; its cotangent is 1 and the other outputs get none.
    auto seed = [](const std::vector<array>& outs) {
      if (outs.empty() || outs[0].size() != 1) {
        throw std::invalid_argument(msg("[value_and_grad] the function must return a scalar first output; got ",
                                        outs.empty() ? std::string("no output") : "shape " + shape_str(outs[0].shape())));
      }
      return std::vector<array>{ones_like(outs[0])};
    };
    return detail::vjp_impl(fun, inputs, seed, argnums_sorted);
  };
}

SimpleValueAndGradFn value_and_grad(const ScalarVectorFn& fun, const std::vector<int>& argnums) {
  auto vg = value_and_grad(VectorFn([fun](const std::vector<array>& x) { return std::vector<array>{fun(x)}; }), argnums);
  return [vg](const std::vector<array>& inputs) {
    auto [outs, grads] = vg(inputs);
    return std::make_pair(outs[0], grads);
  };
}

std::function<std::pair<array, array>(const array&)> value_and_grad(const UnaryFn& fun) {
  auto vg = value_and_grad(ScalarVectorFn([fun](const std::vector<array>& x) { return fun(x[0]); }), 0);
  return [vg](const array& x) {
    auto [value, grads] = vg({x});
    return std::make_pair(value, grads[0]);
  };
}

std::function<std::vector<array>(const std::vector<array>&)> grad(const ScalarVectorFn& fun,
                                                                  const std::vector<int>& argnums) {
  auto vg = value_and_grad(fun, argnums);
  return [vg](const std::vector<array>& inputs) { return vg(inputs).second; };
}

std::function<array(const array&)> grad(const UnaryFn& fun) {
  auto vg = value_and_grad(fun);
  return [vg](const array& x) { return vg(x).second; };
}

}  // namespace loom

// compile: a function traced once per input signature into a detail::Program (core/program.h), which
// every later call runs as the kernel of one `Compiled` node.
#include "loom/autograd/compile.h"

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <sstream>
#include <string>
#include <unordered_map>
#include <unordered_set>

#include "loom/autograd/compiled.h"
#include "loom/autograd/tape.h"
#include "loom/core/eval.h"
#include "loom/core/primitive.h"
#include "loom/core/program.h"
#include "loom/ops/ops.h"
#include "loom/ops/random.h"
#include "loom/ops/utils.h"

namespace loom {

using detail::msg;
using detail::shape_str;

namespace {

std::atomic<CompileMode>& mode() {
  static std::atomic<CompileMode> m{[] {
    for (const char* var : {"LOOM_DISABLE_COMPILE", "MLX_DISABLE_COMPILE"}) {
      const char* v = std::getenv(var);
      if (v && *v && std::strcmp(v, "0") != 0) return CompileMode::disabled;
    }
    return CompileMode::enabled;
  }()};
  return m;
}


using detail::CompiledTrace;

// A shapeless call's shapes: by tape position, each node's outputs'; and the program's outputs'.
struct CallShapes {
  std::vector<std::vector<Shape>> nodes;
  std::vector<Shape> outputs;
};

// The shapes every node of `prog` takes for inputs of other shapes (Primitive::output_shapes).
std::shared_ptr<const CallShapes> infer_shapes(const detail::Program& prog, const std::vector<array>& inputs) {
  auto shapes = std::make_shared<CallShapes>();
  std::unordered_map<std::uintptr_t, Shape> now;
  for (size_t i = 0; i < inputs.size(); ++i) now.emplace(prog.inputs()[i].id(), inputs[i].shape());
  auto find = [&](const array& a) {
    auto it = now.find(a.id());
    return it == now.end() ? a.shape() : it->second;  // a constant keeps its shape
  };
  const std::vector<array>& tape = prog.tape();
  for (size_t j = 0; j < tape.size(); ++j) {
    std::vector<Shape> in;
    for (const auto& x : tape[j].inputs()) in.push_back(find(x));
    std::vector<Shape> out = tape[j].primitive().output_shapes(in);
    const std::vector<array> outs = prog.node_outputs(j);
    if (out.size() != outs.size()) {
      throw std::logic_error(msg("[compile] ", tape[j].primitive().name(), "::output_shapes gave ", out.size(),
                                 " shapes for ", outs.size(), " outputs"));
    }
    for (size_t k = 0; k < outs.size(); ++k) now.emplace(outs[k].id(), out[k]);
    shapes->nodes.push_back(std::move(out));
  }
  for (const auto& o : prog.outputs()) shapes->outputs.push_back(find(o));
  return shapes;
}

// The graph of a program rebuilt as ordinary nodes on `inputs` (its placeholders' replacements),
// with `shapes` when they are other than the traced ones: a call in CompileMode::no_fuse.
std::vector<array> replay(const detail::Program& prog, const std::vector<array>& inputs, const CallShapes* shapes) {
  std::unordered_map<std::uintptr_t, array> now;
  for (size_t i = 0; i < inputs.size(); ++i) now.emplace(prog.inputs()[i].id(), inputs[i]);
  auto find = [&](const array& a) {
    auto it = now.find(a.id());
    return it == now.end() ? a : it->second;  // a constant stays itself
  };
  const std::vector<array>& tape = prog.tape();
  for (size_t j = 0; j < tape.size(); ++j) {
    std::vector<array> ins;
    ins.reserve(tape[j].inputs().size());
    for (const auto& in : tape[j].inputs()) ins.push_back(find(in));
    const std::vector<array> outs = prog.node_outputs(j);
    std::vector<array> made;
    std::vector<Shape> out_shapes;
    std::vector<Dtype> dtypes;
    for (const auto& o : outs) out_shapes.push_back(o.shape()), dtypes.push_back(o.dtype());
    if (shapes) out_shapes = shapes->nodes[j];
    made = array::make_arrays(std::move(out_shapes), dtypes, tape[j].primitive_ptr(), std::move(ins));
    for (size_t k = 0; k < outs.size(); ++k) now.emplace(outs[k].id(), made[k]);
  }
  std::vector<array> result;
  for (const auto& o : prog.outputs()) result.push_back(find(o));
  return result;
}

// The node a compiled call makes: its kernel runs the program.
class Compiled : public Primitive {
 public:
  // `shapes`: a shapeless call's, when its inputs' shapes are not the traced ones.
  Compiled(std::shared_ptr<const CompiledTrace> trace, std::shared_ptr<const CallShapes> shapes)
      : trace_(std::move(trace)), shapes_(std::move(shapes)) {}
  void eval_cpu(const std::vector<array>& inputs, std::vector<array>& outputs) override {
    trace_->program->run(inputs, outputs, shapes_ ? &shapes_->nodes : nullptr);
  }
  const char* name() const override { return "Compiled"; }
  void print(std::ostream& os) const override { os << "Compiled(nodes=" << trace_->program->tape().size() << ")"; }
  bool supports_complex() const override { return true; }
  bool is_equivalent(const Primitive& other) const override {
    auto* o = dynamic_cast<const Compiled*>(&other);
    return o && o->trace_ == trace_ && o->shapes_ == shapes_;
  }
  // No vjp, jvp or vmap: a compiled function called while a transform traces calls the function
  // itself (as MLX's does), so no transform meets a Compiled node.

 private:
  std::shared_ptr<const CompiledTrace> trace_;
  std::shared_ptr<const CallShapes> shapes_;
};

// Restores the key source (random draws without a key) however the trace ends.
struct KeySourceScope {
  random::detail::KeySource saved;
  explicit KeySourceScope(random::detail::KeySource s) : saved(random::detail::set_key_source(std::move(s))) {}
  ~KeySourceScope() { random::detail::set_key_source(std::move(saved)); }
  KeySourceScope(const KeySourceScope&) = delete;
  KeySourceScope& operator=(const KeySourceScope&) = delete;
};

// Merges equal subexpressions: nodes whose primitives are equivalent and whose inputs are the same
// arrays, and constants of one value (of equal dtype, shape and bits); drops no-op nodes (copy,
// stop_gradient: a compiled function is never differentiated, see Compiled). Returns the outputs in the merged graph.
std::vector<array> simplify(const std::vector<array>& outputs, const std::vector<array>& placeholders) {
  std::unordered_set<std::uintptr_t> live;
  for (const auto& p : placeholders) live.insert(p.id());
  const std::vector<array> tape = detail::dependent_tape(outputs, live, false);
  std::unordered_map<std::uintptr_t, array> now;  // an array -> its replacement
  // Constants of one value (scalars, and scalars broadcast: folded at trace time), by dtype, shape
  // and bits -> the one kept.
  std::map<std::string, array> scalars;
  auto find = [&](const array& a) -> array {
    auto it = now.find(a.id());
    if (it != now.end()) return it->second;
    if (a.is_evaluated() && !a.has_primitive() && a.size() > 0 && a.data_size() == 1) {
      std::string key = to_string(a.dtype()) + shape_str(a.shape());
      key.append(static_cast<const char*>(a.raw_data()), a.itemsize());
      auto [s, fresh] = scalars.emplace(std::move(key), a);
      now.emplace(a.id(), s->second);
      return s->second;
    }
    return a;
  };
  // Nodes already kept, by their first input's id (or 0), to find an equivalent one.
  std::unordered_multimap<std::uintptr_t, array> kept;
  for (const array& a : tape) {
    std::vector<array> ins;
    bool changed = false;
    for (const auto& in : a.inputs()) {
      ins.push_back(find(in));
      changed |= ins.back().id() != in.id();
    }
    const std::vector<array> outs = a.outputs();
    if (a.primitive().is_noop() && ins.size() == 1 && outs.size() == 1 && ins[0].shape() == a.shape() &&
        ins[0].dtype() == a.dtype()) {
      now.emplace(a.id(), ins[0]);  // copy, stop_gradient: the input itself
      continue;
    }
    const std::uintptr_t key = ins.empty() ? 0 : ins[0].id();
    std::optional<array> same;
    auto range = kept.equal_range(key);
    for (auto it = range.first; it != range.second && !same; ++it) {
      const array& b = it->second;
      if (b.inputs().size() != ins.size() || !b.primitive().is_equivalent(a.primitive())) continue;
      bool equal = true;
      for (size_t i = 0; i < ins.size() && equal; ++i) equal = b.inputs()[i].id() == ins[i].id();
      const std::vector<array> b_outs = b.outputs();
      for (size_t k = 0; k < outs.size() && equal; ++k) {
        equal = b_outs.size() == outs.size() && b_outs[k].shape() == outs[k].shape() && b_outs[k].dtype() == outs[k].dtype();
      }
      if (equal) same = b;
    }
    std::vector<array> made;
    if (same) {
      made = same->outputs();
    } else if (changed) {
      std::vector<Shape> shapes;
      std::vector<Dtype> dtypes;
      for (const auto& o : outs) shapes.push_back(o.shape()), dtypes.push_back(o.dtype());
      made = array::make_arrays(std::move(shapes), dtypes, a.primitive_ptr(), std::move(ins));
    } else {
      made = outs;
    }
    if (!same) kept.emplace(key, made[0]);
    for (size_t k = 0; k < outs.size(); ++k) {
      if (made[k].id() != outs[k].id()) now.emplace(outs[k].id(), made[k]);
    }
  }
  std::vector<array> result;
  for (const auto& o : outputs) result.push_back(find(o));
  return result;
}

// Sets shapeless tracing (core/array.h) for a scope.
struct ShapelessScope {
  bool saved;
  explicit ShapelessScope(bool on) : saved(detail::shapeless_tracing()) { detail::shapeless_tracing() = on; }
  ~ShapelessScope() { detail::shapeless_tracing() = saved; }
  ShapelessScope(const ShapelessScope&) = delete;
  ShapelessScope& operator=(const ShapelessScope&) = delete;
};

}  // namespace

array detail::compile_placeholder(const Shape& shape, Dtype dtype) {
  // Stands for one input of a function while compile traces it.
  return array(shape, dtype,
               std::make_shared<detail::TracePlaceholder>(
                   "CompileInput",
                   "[compile] the function evaluated an array that depends on its inputs while compile traced it; "
                   "a compiled function must only build graph (no eval, item or data access on what depends on "
                   "its inputs)"),
               {});
}

bool CompiledTrace::accepts(const std::vector<array>& inputs) const {
  if (in_shapes.size() != inputs.size()) return false;
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (in_dtypes[i] != inputs[i].dtype()) return false;
    if (shapeless ? in_shapes[i].size() != inputs[i].ndim() : in_shapes[i] != inputs[i].shape()) return false;
  }
  return true;
}

std::shared_ptr<CompiledTrace> detail::make_trace(std::vector<array> placeholders, std::vector<array> outputs,
                                                  int num_keys, bool shapeless) {
  auto trace = std::make_shared<CompiledTrace>();
  for (size_t i = 0; i + num_keys < placeholders.size(); ++i) {
    trace->in_shapes.push_back(placeholders[i].shape());
    trace->in_dtypes.push_back(placeholders[i].dtype());
  }
  trace->num_keys = num_keys;
  trace->shapeless = shapeless;
  for (const auto& o : outputs) {
    trace->out_shapes.push_back(o.shape());
    trace->out_dtypes.push_back(o.dtype());
  }
  // Only the program holds the graph from here on: its plan counts the handles.
  trace->program = std::make_unique<detail::Program>(std::move(placeholders), std::move(outputs));
  return trace;
}

std::shared_ptr<CompiledTrace> detail::trace_function(const VectorFn& fun, const std::vector<array>& inputs,
                                                      bool simplify_graph, bool shapeless) {
  std::vector<array> placeholders;
  for (const auto& x : inputs) placeholders.push_back(compile_placeholder(x.shape(), x.dtype()));
  std::vector<array> keys, outputs;
  {
    detail::InTracing tracing;  // compiled functions called inside run as they are: this program holds them
    ShapelessScope shapes(shapeless);
    KeySourceScope source([&keys] {
      keys.push_back(compile_placeholder(Shape{2}, uint32));
      return keys.back();
    });
    outputs = fun(placeholders);
  }
  const int num_keys = static_cast<int>(keys.size());
  placeholders.insert(placeholders.end(), keys.begin(), keys.end());
  keys.clear();

  // Constants: what the outputs read that does not depend on an input is computed now, once.
  {
    std::unordered_set<std::uintptr_t> live;
    for (const auto& p : placeholders) live.insert(p.id());
    std::vector<array> tape = detail::dependent_tape(outputs, live, false);
    std::vector<array> constants;
    auto fold = [&](const array& a) {
      if (!live.count(a.id()) && !a.is_evaluated()) constants.push_back(a);
    };
    for (const auto& a : tape) {
      for (const auto& in : a.inputs()) fold(in);
    }
    for (const auto& o : outputs) fold(o);
    tape.clear();
    eval(constants);
  }
  if (simplify_graph) outputs = simplify(outputs, placeholders);
  return make_trace(std::move(placeholders), std::move(outputs), num_keys, shapeless);
}

std::vector<array> detail::call_trace(const std::shared_ptr<const CompiledTrace>& trace,
                                      const std::vector<array>& inputs, bool as_nodes) {
  std::shared_ptr<const CallShapes> shapes;  // a shapeless call on other shapes: every node's
  for (size_t i = 0; i < inputs.size() && !shapes; ++i) {
    if (inputs[i].shape() != trace->in_shapes[i]) shapes = infer_shapes(*trace->program, inputs);
  }
  const std::vector<Shape>& out_shapes = shapes ? shapes->outputs : trace->out_shapes;
  std::vector<array> all = inputs;
  for (int k = 0; k < trace->num_keys; ++k) all.push_back(random::detail::next_key());
  if (as_nodes) return replay(*trace->program, all, shapes.get());
  auto node = std::make_shared<Compiled>(trace, std::move(shapes));
  return array::make_arrays(out_shapes, trace->out_dtypes, std::move(node), std::move(all));
}

namespace {

// The traces of one compiled function.
struct Cache {
  VectorFn fun;
  bool shapeless = false;
  std::mutex mu;
  std::vector<std::shared_ptr<const CompiledTrace>> traces;

  std::shared_ptr<const CompiledTrace> find(const std::vector<array>& inputs) {
    std::lock_guard<std::mutex> lock(mu);
    for (const auto& t : traces) {
      if (t->accepts(inputs)) return t;
    }
    return nullptr;
  }

  std::vector<array> call(const std::vector<array>& inputs) {
    const CompileMode m = mode().load(std::memory_order_relaxed);
    if (m == CompileMode::disabled || detail::tracing_depth() > 0) return fun(inputs);
    std::shared_ptr<const CompiledTrace> trace = find(inputs);
    if (!trace) {
      // Traced without the lock (the function may take long, or compile other functions); a call
      // that traced the same signature meanwhile wins.
      std::shared_ptr<const CompiledTrace> made = detail::trace_function(fun, inputs, m != CompileMode::no_simplify, shapeless);
      trace = find(inputs);
      if (!trace) {
        std::lock_guard<std::mutex> lock(mu);
        traces.push_back(made);
        trace = made;
      }
    }
    return detail::call_trace(trace, inputs, m == CompileMode::no_fuse);
  }
};

VectorFn compiled(std::shared_ptr<Cache> cache) {
  return [cache](const std::vector<array>& inputs) { return cache->call(inputs); };
}

}  // namespace

VectorFn compile(VectorFn fun, bool shapeless) {
  if (mode().load() == CompileMode::disabled) return fun;
  if (!fun) throw std::invalid_argument("[compile] cannot compile a null function");
  auto cache = std::make_shared<Cache>();
  cache->fun = std::move(fun);
  cache->shapeless = shapeless;
  return compiled(std::move(cache));
}

VectorFn compile(std::vector<array> (*fun)(const std::vector<array>&), bool shapeless) {
  if (mode().load() == CompileMode::disabled) return fun;
  if (!fun) throw std::invalid_argument("[compile] cannot compile a null function");
  // One cache per function and shapeless flag, alive while a compiled function uses it.
  static std::mutex mu;
  static std::map<std::pair<void*, bool>, std::weak_ptr<Cache>> shared;
  std::lock_guard<std::mutex> lock(mu);
  auto& slot = shared[{reinterpret_cast<void*>(fun), shapeless}];
  std::shared_ptr<Cache> cache = slot.lock();
  if (!cache) {
    cache = std::make_shared<Cache>();
    cache->fun = fun;
    cache->shapeless = shapeless;
    slot = cache;
  }
  return compiled(std::move(cache));
}

void disable_compile() { mode() = CompileMode::disabled; }
void enable_compile() { mode() = CompileMode::enabled; }
void set_compile_mode(CompileMode m) { mode() = m; }
CompileMode compile_mode() { return mode().load(); }

}  // namespace loom

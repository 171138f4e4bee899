#include "loom/core/eval.h"

#include <unordered_set>

#include "loom/core/primitive.h"

namespace loom {

namespace {

bool needs_eval(const array& a) { return !a.is_evaluated() && a.has_primitive(); }

// Post-order depth-first walk with an explicit stack, visiting inputs in their listed order. One
// entry per node (a multi-output primitive runs once).
std::vector<array> build_tape(const std::vector<array>& outputs) {
  std::vector<array> tape;
  std::unordered_set<const detail::Node*> visited;
  struct Frame {
    array a;
    size_t next;
  };
  std::vector<Frame> stack;
  for (const auto& out : outputs) {
    if (!needs_eval(out) || !visited.insert(out.node_id()).second) continue;
    stack.push_back({out, 0});
    while (!stack.empty()) {
      Frame& f = stack.back();
      const auto& ins = f.a.inputs();
      if (f.next < ins.size()) {
        const array& in = ins[f.next++];
        if (needs_eval(in) && visited.insert(in.node_id()).second) stack.push_back({in, 0});
      } else {
        tape.push_back(std::move(f.a));
        stack.pop_back();
      }
    }
  }
  return tape;
}

}  // namespace

void eval(std::vector<array> outputs) {
  std::vector<array> tape = build_tape(outputs);
  for (auto& entry : tape) {
    array a = std::move(entry);  // the tape lets go: consumers' inputs are the last holders
    if (a.is_evaluated()) continue;
    std::vector<array> outs = a.outputs();
    a.primitive().eval_cpu(a.inputs(), outs);
    for (auto& o : outs) {
      o.set_evaluated();
      if (!o.is_tracer()) o.detach();
    }
  }
}

void async_eval(std::vector<array> outputs) { eval(std::move(outputs)); }

}  // namespace loom

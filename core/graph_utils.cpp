#include "loom/core/graph_utils.h"

#include <functional>
#include <unordered_set>

#include "loom/core/primitive.h"

namespace loom {

const std::string& NodeNamer::get_name(const array& x) {
  auto it = names.find(x.id());
  if (it != names.end()) return it->second;
  // The next name of A, ..., Z, AA, AB, ...
  std::string name;
  for (size_t n = names.size() + 1; n > 0; n = (n - 1) / 26) name.insert(name.begin(), char('A' + (n - 1) % 26));
  return names.emplace(x.id(), std::move(name)).first->second;
}

void NodeNamer::set_name(const array& x, std::string n) { names[x.id()] = std::move(n); }

namespace {

// Calls f on every array the outputs depend on, each after its inputs and once (a node's sibling
// outputs count as visited with it). Iterative: a long chain must not exhaust the stack.
void depth_first(const std::vector<array>& outputs, const std::function<void(const array&)>& f) {
  std::unordered_set<std::uintptr_t> seen;
  std::vector<std::pair<array, bool>> stack;  // (array, its inputs are done)
  for (auto it = outputs.rbegin(); it != outputs.rend(); ++it) stack.emplace_back(*it, false);
  while (!stack.empty()) {
    auto [x, expanded] = stack.back();
    stack.pop_back();
    if (expanded) {
      f(x);
      continue;
    }
    if (seen.count(x.id())) continue;
    seen.insert(x.id());
    if (x.has_primitive()) {
      for (const array& s : x.outputs()) seen.insert(s.id());
    }
    stack.emplace_back(x, true);
    const auto& in = x.has_primitive() ? x.inputs() : std::vector<array>{};
    for (auto it = in.rbegin(); it != in.rend(); ++it) {
      if (!seen.count(it->id())) stack.emplace_back(*it, false);
    }
  }
}

void print_arrays(std::ostream& os, NodeNamer& namer, const std::vector<array>& arrays) {
  for (size_t i = 0; i < arrays.size(); ++i) {
    if (i) os << ", ";
    os << namer.get_name(arrays[i]) << " [" << detail::shape_str(arrays[i].shape()) << ", " << arrays[i].dtype() << "]";
  }
}

}  // namespace

void print_graph(std::ostream& os, NodeNamer namer, const std::vector<array>& outputs) {
  std::vector<array> tape, inputs;
  depth_first(outputs, [&](const array& x) { (x.has_primitive() ? tape : inputs).push_back(x); });
  os << "Inputs: ";
  print_arrays(os, namer, inputs);
  os << "\nOutputs: ";
  print_arrays(os, namer, outputs);
  os << "\n";
  for (const array& x : tape) {
    os << x.primitive().name() << " ";
    print_arrays(os, namer, x.inputs());
    os << " -> ";
    print_arrays(os, namer, x.outputs());
    os << "\n";
  }
}

void export_to_dot(std::ostream& os, NodeNamer namer, const std::vector<array>& outputs) {
  std::unordered_set<std::uintptr_t> intermediate;
  depth_first(outputs, [&](const array& x) {
    if (x.has_primitive()) {
      for (const array& a : x.inputs()) intermediate.insert(a.id());
    }
  });
  os << "digraph {\n";
  depth_first(outputs, [&](const array& x) {
    if (!x.has_primitive()) {
      os << "{ rank=source; \"" << namer.get_name(x) << "\"; }\n";
      return;
    }
    // A primitive's node is named by its address: the outputs it shares are one node.
    const auto node = reinterpret_cast<std::uintptr_t>(&x.primitive());
    os << "{ " << node << " [label =\"" << x.primitive().name() << "\", shape=rectangle]; }\n";
    for (const array& a : x.inputs()) os << '"' << namer.get_name(a) << "\" -> " << node << "\n";
    for (const array& a : x.outputs()) {
      os << "{ " << (intermediate.count(a.id()) ? "" : "rank=sink; ") << '"' << namer.get_name(a) << "\"; }\n";
      os << node << " -> \"" << namer.get_name(a) << "\"\n";
    }
  });
  os << "}";
}

}  // namespace loom

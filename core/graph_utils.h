// Views of a lazy graph for people (MLX's graph_utils.h): print_graph lists every node as text;
// export_to_dot writes a Graphviz digraph. Arrays are named A, B, ..., Z, AA, AB, ... in the order
// they are met, unless a NodeNamer was told otherwise.
#pragma once

#include <cstdint>
#include <ostream>
#include <string>
#include <type_traits>
#include <unordered_map>
#include <vector>

#include "loom/core/array.h"

namespace loom {

struct NodeNamer {
  std::unordered_map<std::uintptr_t, std::string> names;
  const std::string& get_name(const array& x);
  void set_name(const array& x, std::string n);
};

/// "Inputs: ..." (the arrays without a primitive), "Outputs: ...", then one line per node in an order
/// that computes each node after its inputs: `Name A [shape, dtype], ... -> C [shape, dtype]`.
void print_graph(std::ostream& os, NodeNamer namer, const std::vector<array>& outputs);
inline void print_graph(std::ostream& os, const std::vector<array>& outputs) { print_graph(os, NodeNamer{}, outputs); }
template <typename... Arrays, typename = std::enable_if_t<(std::is_convertible_v<Arrays, array> && ...)>>
void print_graph(std::ostream& os, Arrays&&... outputs) {
  print_graph(os, NodeNamer{}, std::vector<array>{std::forward<Arrays>(outputs)...});
}

/// The graph in Graphviz's dot language: arrays without a primitive at the top, the outputs at the
/// bottom, one rectangle per primitive.
void export_to_dot(std::ostream& os, NodeNamer namer, const std::vector<array>& outputs);
inline void export_to_dot(std::ostream& os, const std::vector<array>& outputs) {
  export_to_dot(os, NodeNamer{}, outputs);
}
template <typename... Arrays, typename = std::enable_if_t<(std::is_convertible_v<Arrays, array> && ...)>>
void export_to_dot(std::ostream& os, Arrays&&... outputs) {
  export_to_dot(os, NodeNamer{}, std::vector<array>{std::forward<Arrays>(outputs)...});
}

}  // namespace loom

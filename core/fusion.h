// Elementwise fusion inside eval (internal): chains of elementwise nodes whose intermediates nobody
// else holds run as one loop over cache-sized blocks, without materializing the intermediates.
#pragma once

#include <memory>
#include <unordered_map>
#include <vector>

#include "loom/core/array.h"

namespace loom::detail {

/// Elementwise nodes smaller than this run on their own: fusing them saves less than it costs
/// (the groups are planned on every eval). A program (core/program.h) plans once, and fuses every
/// elementwise node that is not empty.
inline constexpr size_t kFuseFrom = 256;

struct FusedGroup;  // how a group runs (core/fusion.cpp)

struct FusionPlan {
  std::vector<char> internal;            // by tape position: computed inside its consumer's group
  std::vector<std::vector<int>> groups;  // by tape position of a group's root: members in tape order, root last
  std::vector<int> member;               // by tape position of an internal node: its place in its group
  // By tape position of a group's root: how it runs, kept by a program's plan (whose graph stays)
  // from one run to the next; run_fused fills it.
  mutable std::vector<std::shared_ptr<FusedGroup>> runs;
};

/// Finds the groups of a tape. A node is internal when it is elementwise, its one consumer is
/// elementwise with the same shape, and nothing outside the graph holds it; `excluded` nodes (e.g.
/// readers of communication results) take no part.
FusionPlan plan_fusion(const std::vector<array>& tape, const std::unordered_map<const Node*, int>& index,
                       const std::vector<char>& excluded, size_t min_size = kFuseFrom);

/// Evaluates a group's root without materializing the other members, and releases their tape entries.
/// With `kept` (a kept graph's run, core/program.h), the tape's entries and the root's graph stay, and
/// kept(x) is how many more handles than eval's the program holds to x.
using KeptRefs = long (*)(const array& x);
void run_fused(std::vector<array>& tape, const FusionPlan& plan, int root_pos,
               const std::unordered_map<const Node*, int>& index, KeptRefs kept = nullptr);

}  // namespace loom::detail

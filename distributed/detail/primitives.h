// Internal to distributed/: the collectives as graph primitives. They talk to the backend only through
// GroupImpl (group_impl.h).
#pragma once

#include <string>
#include <vector>

#include "loom/distributed/distributed.h"

namespace loom::distributed::detail {

// The values double as collective kinds (debug.h). A mean is a sum divided as it is written.
enum class ReduceKind { sum = 0, max = 1, min = 2, mean = 5 };
/// "all_sum", "all_mean", ...
const char* reduce_name(ReduceKind k);

/// The nodes behind the public functions (distributed.cpp), which check their arguments first and
/// return the input itself for a group of size 1.
array all_reduce_node(const array& x, ReduceKind k, const Group& group);
array all_reduce_flat_node(const std::vector<array>& xs, ReduceKind k, const Group& group);
array all_gather_node(const array& x, const Group& group);
array sum_scatter_node(const array& x, const Group& group);
array all_to_all_node(const array& x, const Group& group);
array broadcast_node(const array& x, int root, const Group& group);
array barrier_node(const Group& group);
// Point-to-point nodes: inputs past x (`after`) only order them (distributed.h).
array send_node(const array& x, int dst, const Group& group, const std::vector<array>& after = {});
array recv_node(const Shape& shape, Dtype dtype, int src, const Group& group, const std::vector<array>& after = {});
array send_recv_node(const array& x, int dst, const Shape& shape, Dtype dtype, int src, const Group& group,
                     const std::vector<array>& after = {});
array agree_node(const std::string& what, const Group& group, const std::vector<array>& after = {});

/// The public reductions with the kind as an argument (the vjp and jvp rules use them).
array all_reduce(const array& x, ReduceKind k, const std::optional<Group>& group);
array all_reduce_flat(const std::vector<array>& xs, ReduceKind k, const std::optional<Group>& group);

}  // namespace loom::distributed::detail

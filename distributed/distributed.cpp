// The public API: groups, init, and the collectives' argument checks. The backends are behind
// GroupImpl (detail/group_impl.h); the nodes the collectives make are in primitives.cpp.
#include "loom/distributed/distributed.h"

#include <algorithm>
#include <limits>
#include <mutex>
#include <stdexcept>
#include <string>

#include "loom/core/profile.h"
#include "loom/distributed/detail/comm_thread.h"
#include "loom/distributed/detail/fault_watch.h"
#include "loom/distributed/detail/group_impl.h"
#include "loom/distributed/detail/primitives.h"
#include "loom/ops/ops.h"
#include "loom/ops/utils.h"

namespace loom::distributed {

using loom::detail::msg;
using loom::detail::shape_str;
using detail::reduce_name;
using detail::ReduceKind;

namespace {

std::mutex init_mutex;
std::shared_ptr<detail::GroupImpl> world_impl;
bool joined = false;  // a multi-process backend was joined

Group resolve(const std::optional<Group>& g) { return g ? *g : init(); }

// The profiler's view of the ranks (core/profile.h). Clocks: the ranks leave a barrier together
// (within its latency) and each samples its clock; rank 0's sample minus this rank's is the offset,
// the median of five rounds.
profile::detail::Ranks profile_align(int64_t start_ns) {
  detail::GroupImpl& g = *world_impl;
  const int n = g.size();
  std::vector<int64_t> offsets, all(n);
  for (int round = 0; round < 5; ++round) {
    int32_t one = 1, sum = 0;
    g.all_reduce(&one, &sum, 1, int32, detail::ReduceOp::sum);
    const int64_t t = profile::detail::now_ns();
    g.all_gather(&t, all.data(), 1, int64);
    offsets.push_back(all[0] - t);
  }
  std::sort(offsets.begin(), offsets.end());
  g.all_gather(&start_ns, all.data(), 1, int64);
  return {g.rank(), offsets[offsets.size() / 2], all[0]};
}

// Every rank's text to rank 0, in rank order: its length, then its bytes.
std::vector<std::string> profile_gather(const std::string& mine) {
  detail::GroupImpl& g = *world_impl;
  if (g.rank() != 0) {
    const int64_t len = static_cast<int64_t>(mine.size());
    g.send(&len, 1, int64, 0);
    g.send(mine.data(), mine.size(), uint8, 0);
    return {};
  }
  std::vector<std::string> out{mine};
  for (int r = 1; r < g.size(); ++r) {
    int64_t len = 0;
    g.recv(&len, 1, int64, r);
    std::string s(static_cast<size_t>(len), '\0');
    g.recv(s.data(), s.size(), uint8, r);
    out.push_back(std::move(s));
  }
  return out;
}

}  // namespace

int Group::rank() const { return impl_->rank(); }
int Group::size() const { return impl_->size(); }

Group Group::split(int color, int key) const {
  if (color < 0) throw std::invalid_argument(msg("[Group::split] color must be >= 0, got ", color));
  if (impl_->size() == 1) return *this;
  return Group(impl_->split(color, key < 0 ? impl_->rank() : key));
}

bool is_available() { return detail::mpi::is_available(); }

Group init(bool strict) {
  std::lock_guard<std::mutex> lock(init_mutex);
  if (!world_impl) {
    if (std::optional<detail::World> world = detail::mpi::init()) {
      world_impl = world->group;
      joined = true;
      // The communication thread (and the fault watch it checks) calls the backend beside eval.
      if (world_impl->size() > 1 && world->threads) detail::start_comm_thread(world_impl->size(), world->local_ranks);
      if (world_impl->size() > 1) profile::detail::set_distributed_hooks({profile_align, profile_gather});
    } else {
      world_impl = detail::single_process_group();
    }
  }
  if (strict && !joined) {
    throw std::runtime_error(
        is_available()
            ? "[distributed::init] strict: this process was not started by an MPI launcher; run it with "
              "mpirun -np N"
            : "[distributed::init] strict: Loom was built without MPI (LOOM_WITH_MPI=OFF), so no "
              "multi-process backend can be joined; rebuild with -DLOOM_WITH_MPI=ON");
  }
  return Group(world_impl);
}

void set_peer_timeout(double seconds) { detail::fault_watch().set_peer_timeout(seconds); }
void set_collective_timeout(double seconds) { detail::fault_watch().set_collective_timeout(seconds); }

namespace detail {

array all_reduce(const array& x, ReduceKind k, const std::optional<Group>& group) {
  Group g = resolve(group);
  if (g.size() == 1) return x;  // nothing to combine: no copy, no node
  return all_reduce_node(x, k, g);
}

array all_reduce_flat(const std::vector<array>& xs, ReduceKind k, const std::optional<Group>& group) {
  const std::string op = std::string(reduce_name(k)) + "_flat";
  if (xs.empty()) throw std::invalid_argument(msg("[", op, "] needs at least one array"));
  int64_t total = 0;
  for (size_t i = 0; i < xs.size(); ++i) {
    if (xs[i].dtype() != xs[0].dtype()) {
      throw std::invalid_argument(msg("[", op, "] every array must have one dtype: array 0 is ", to_string(xs[0].dtype()),
                                      ", array ", i, " is ", to_string(xs[i].dtype())));
    }
    total += static_cast<int64_t>(xs[i].size());
  }
  if (k == ReduceKind::mean && !is_inexact(xs[0].dtype())) {
    throw std::invalid_argument(msg("[", op, "] needs floating-point arrays, got ", to_string(xs[0].dtype()),
                                    " (use all_sum_flat and divide)"));
  }
  if (total > std::numeric_limits<int>::max()) {
    throw std::invalid_argument(msg("[", op, "] the arrays hold ", total, " elements together; at most ",
                                    std::numeric_limits<int>::max(), " fit one 1-D array"));
  }
  Group g = resolve(group);
  if (g.size() == 1) {
    std::vector<array> flat;
    for (const array& x : xs) flat.push_back(reshape(x, {-1}));
    return flat.size() == 1 ? flat[0] : concatenate(flat, 0);
  }
  return all_reduce_flat_node(xs, k, g);
}

}  // namespace detail

array all_sum(const array& x, std::optional<Group> group, StreamOrDevice s) {
  OnStream on(s);
  return detail::all_reduce(x, ReduceKind::sum, group);
}
array all_max(const array& x, std::optional<Group> group, StreamOrDevice s) {
  OnStream on(s);
  return detail::all_reduce(x, ReduceKind::max, group);
}
array all_mean(const array& x, std::optional<Group> group, StreamOrDevice s) {
  OnStream on(s);
  if (!is_inexact(x.dtype())) {
    throw std::invalid_argument(msg("[all_mean] needs a floating-point array, got ", to_string(x.dtype()),
                                    " (use all_sum and divide)"));
  }
  return detail::all_reduce(x, ReduceKind::mean, group);
}
array all_min(const array& x, std::optional<Group> group, StreamOrDevice s) {
  OnStream on(s);
  return detail::all_reduce(x, ReduceKind::min, group);
}
array all_sum_flat(const std::vector<array>& xs, std::optional<Group> group, StreamOrDevice s) {
  OnStream on(s);
  return detail::all_reduce_flat(xs, ReduceKind::sum, group);
}
array all_mean_flat(const std::vector<array>& xs, std::optional<Group> group, StreamOrDevice s) {
  OnStream on(s);
  return detail::all_reduce_flat(xs, ReduceKind::mean, group);
}

array all_gather(const array& x, std::optional<Group> group, StreamOrDevice s) {
  OnStream on(s);
  Group g = resolve(group);
  if (x.ndim() == 0) {
    throw std::invalid_argument("[all_gather] needs an array of at least 1 dimension (it concatenates along axis 0)");
  }
  if (g.size() == 1) return x;
  return detail::all_gather_node(x, g);
}

array sum_scatter(const array& x, std::optional<Group> group, StreamOrDevice s) {
  OnStream on(s);
  Group g = resolve(group);
  if (x.ndim() == 0 || x.shape(0) % g.size() != 0) {
    throw std::invalid_argument(msg("[sum_scatter] ", shape_str(x.shape()), " cannot be split among a group of ",
                                    g.size(), ": axis 0 must exist and be a multiple of the group size"));
  }
  if (g.size() == 1) return x;
  return detail::sum_scatter_node(x, g);
}

Mesh::Mesh(const std::vector<std::pair<std::string, int>>& axes, std::optional<Group> world) : world_(resolve(world)) {
  std::string listed;
  int known = 1, inferred = -1;
  for (size_t i = 0; i < axes.size(); ++i) {
    const auto& [name, size] = axes[i];
    listed += msg(i ? " x " : "", name, "=", size);
    if (name.empty()) throw std::invalid_argument("[Mesh] an axis needs a name");
    for (size_t j = 0; j < i; ++j) {
      if (axes[j].first == name) throw std::invalid_argument(msg("[Mesh] axis '", name, "' is named twice"));
    }
    if (size == -1 && inferred < 0) {
      inferred = static_cast<int>(i);
    } else if (size < 1) {
      throw std::invalid_argument(msg("[Mesh] axis '", name, "' has size ", size,
                                      ": sizes are >= 1, and one axis may be -1 (inferred)"));
    } else {
      known *= size;
    }
  }
  if (axes.empty()) throw std::invalid_argument("[Mesh] needs at least one axis");
  const int n = world_.size();
  if (inferred >= 0 ? n % known != 0 : known != n) {
    throw std::invalid_argument(msg("[Mesh] axes ", listed, " cannot hold the world's ", n, " ranks"));
  }
  for (const auto& [name, size] : axes) {
    names_.push_back(name);
    sizes_.push_back(size == -1 ? n / known : size);
  }
  // Row-major coordinates of this rank; each axis's group: the ranks equal on every other axis.
  const int r = world_.rank(), k = static_cast<int>(sizes_.size());
  std::vector<int> coord(k), stride(k);
  for (int i = k - 1, s = 1; i >= 0; --i) {
    stride[i] = s;
    coord[i] = (r / s) % sizes_[i];
    s *= sizes_[i];
  }
  for (int i = 0; i < k; ++i) groups_.push_back(world_.split(r - coord[i] * stride[i], coord[i]));
}

int Mesh::index(const std::string& axis) const {
  for (size_t i = 0; i < names_.size(); ++i) {
    if (names_[i] == axis) return static_cast<int>(i);
  }
  std::string have;
  for (size_t i = 0; i < names_.size(); ++i) have += (i ? ", " : "") + names_[i];
  throw std::invalid_argument(msg("[Mesh] no axis named '", axis, "'; the mesh has ", have));
}

const Group& Mesh::group(const std::string& axis) const { return groups_[index(axis)]; }

array all_to_all(const array& x, std::optional<Group> group, StreamOrDevice s) { return all_to_all(x, 0, 0, group, s); }

array all_to_all(const array& x, int split_axis, int concat_axis, std::optional<Group> group, StreamOrDevice s) {
  OnStream on(s);
  Group g = resolve(group);
  const int nd = static_cast<int>(x.ndim()), n = g.size();
  if (nd == 0) throw std::invalid_argument("[all_to_all] needs an array of at least 1 dimension");
  for (int a : {split_axis, concat_axis}) {
    if (a < -nd || a >= nd) {
      throw std::invalid_argument(msg("[all_to_all] axis ", a, " is out of range for shape ", shape_str(x.shape())));
    }
  }
  const int sa = split_axis < 0 ? split_axis + nd : split_axis, ca = concat_axis < 0 ? concat_axis + nd : concat_axis;
  if (x.shape(sa) % n != 0) {
    throw std::invalid_argument(msg("[all_to_all] ", shape_str(x.shape()), " cannot be split among a group of ", n,
                                    ": axis ", sa, " (", x.shape(sa), ") must be a multiple of the group size"));
  }
  if (n == 1) return x;
  if (sa == 0 && ca == 0) return detail::all_to_all_node(x, g);
  // The primitive exchanges blocks of axis 0: move the split axis there, exchange, then lay the
  // received blocks (rank-major) along the concat axis.
  const int block = x.shape(sa) / n;
  array y = detail::all_to_all_node(moveaxis(x, sa, 0), g);  // (S, rest...): block j from rank j
  Shape blocks = y.shape();
  blocks[0] = block;
  blocks.insert(blocks.begin(), n);
  array z = moveaxis(moveaxis(reshape(y, blocks), 1, sa + 1), 0, ca);  // x's axes, n just before concat_axis
  Shape out = x.shape();
  out[sa] = block;
  out[ca] *= n;
  return reshape(z, out);
}

array broadcast(const array& x, int root, std::optional<Group> group, StreamOrDevice s) {
  OnStream on(s);
  Group g = resolve(group);
  if (root < 0 || root >= g.size()) {
    throw std::invalid_argument(msg("[broadcast] root rank ", root, " is outside the group of size ", g.size()));
  }
  if (g.size() == 1) return x;
  return detail::broadcast_node(x, root, g);
}

void barrier(std::optional<Group> group) {
  Group g = resolve(group);
  if (g.size() == 1) return;
  detail::barrier_node(g).eval();
}

namespace {
void check_peer(const char* op, const char* role, int peer, const Group& g) {
  if (peer < 0 || peer >= g.size()) {
    throw std::invalid_argument(msg("[", op, "] ", role, " rank ", peer, " is outside the group of size ", g.size()));
  }
  if (peer == g.rank()) {
    throw std::invalid_argument(msg("[", op, "] rank ", peer, std::string(role) == "destination" ? " cannot send to itself" : " cannot receive from itself"));
  }
}
void check_shape(const char* op, const Shape& shape) {
  for (int d : shape) {
    if (d < 0) throw std::invalid_argument(msg("[", op, "] negative dimension in shape ", shape_str(shape)));
  }
}
}  // namespace

array send(const array& x, int dst, std::optional<Group> group, StreamOrDevice s) {
  OnStream on(s);
  return send(x, dst, std::vector<array>{}, group);
}

array send(const array& x, int dst, const std::vector<array>& after, std::optional<Group> group) {
  Group g = resolve(group);
  check_peer("send", "destination", dst, g);
  return detail::send_node(x, dst, g, after);
}

array recv(const Shape& shape, Dtype dtype, int src, std::optional<Group> group, StreamOrDevice s) {
  OnStream on(s);
  return recv(shape, dtype, src, std::vector<array>{}, group);
}

array recv(const Shape& shape, Dtype dtype, int src, const std::vector<array>& after, std::optional<Group> group) {
  Group g = resolve(group);
  check_peer("recv", "source", src, g);
  check_shape("recv", shape);
  return detail::recv_node(shape, dtype, src, g, after);
}

array send_recv(const array& x, int dst, const Shape& shape, Dtype dtype, int src, std::optional<Group> group,
                StreamOrDevice s) {
  OnStream on(s);
  return send_recv(x, dst, shape, dtype, src, std::vector<array>{}, group);
}

array send_recv(const array& x, int dst, const Shape& shape, Dtype dtype, int src, const std::vector<array>& after,
                std::optional<Group> group) {
  Group g = resolve(group);
  check_peer("send_recv", "destination", dst, g);
  check_peer("send_recv", "source", src, g);
  check_shape("send_recv", shape);
  return detail::send_recv_node(x, dst, shape, dtype, src, g, after);
}

array agree(const std::string& description, std::optional<Group> group, const std::vector<array>& after) {
  Group g = resolve(group);
  if (g.size() == 1) return array(true);
  return detail::agree_node(description, g, after);
}

array recv_like(const array& x, int src, std::optional<Group> group, StreamOrDevice s) {
  OnStream on(s);
  return recv(x.shape(), x.dtype(), src, group);
}

}  // namespace loom::distributed

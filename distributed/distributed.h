// Data-parallel communication: process groups and collectives as lazy graph primitives. The backend
// is MPI (when Loom is built with it: LOOM_WITH_MPI, the default) or a single process.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "loom/core/array.h"

namespace loom::distributed {

namespace detail {
class GroupImpl;  // a backend's group (internal)
}

/// A set of processes that communicate. The world group is returned by init().
class Group {
 public:
  int rank() const;
  int size() const;
  /// Processes with the same `color` form a new group, ordered by `key` (default: current rank).
  Group split(int color, int key = -1) const;

  explicit Group(std::shared_ptr<detail::GroupImpl> impl) : impl_(std::move(impl)) {}
  const std::shared_ptr<detail::GroupImpl>& impl() const { return impl_; }

 private:
  std::shared_ptr<detail::GroupImpl> impl_;
};

/// The world's ranks as a grid with named axes (PyTorch's DeviceMesh): rank r sits at the row-major
/// coordinates of r in the axes' sizes, and each axis has the group of the ranks that differ from r
/// only along it, ordered by their coordinate there. On 4 ranks, `Mesh({{"dp", 2}, {"tp", 2}})` puts
/// ranks 0 and 1 in one tp group and ranks 0 and 2 in one dp group: tensor parallel inside a tp
/// group (nn::shard_linear(..., mesh.group("tp"))) and data parallel across it
/// (nn::average_gradients(grads, ..., mesh.group("dp"))). One axis may be -1: the size that makes
/// the product the world's. Every rank must build the same mesh at the same point of its program
/// (the groups are made by collective splits). Throws std::invalid_argument naming the axes when
/// their sizes do not multiply to the world size, a name repeats or is empty, or a size is < 1.
class Mesh {
 public:
  explicit Mesh(const std::vector<std::pair<std::string, int>>& axes, std::optional<Group> world = std::nullopt);
  /// The group of `axis`; std::invalid_argument for a name the mesh does not have.
  const Group& group(const std::string& axis) const;
  int size(const std::string& axis) const { return group(axis).size(); }
  /// This rank's coordinate along `axis` (its rank in that axis's group).
  int coordinate(const std::string& axis) const { return group(axis).rank(); }
  const std::vector<std::string>& axis_names() const { return names_; }
  const std::vector<int>& shape() const { return sizes_; }
  const Group& world() const { return world_; }

 private:
  int index(const std::string& axis) const;
  std::vector<std::string> names_;
  std::vector<int> sizes_;
  std::vector<Group> groups_;
  Group world_;
};

/// True when Loom was built with a multi-process backend (MPI; false in a LOOM_WITH_MPI=OFF build).
bool is_available();

/// The world group. Joins MPI only when a launcher (mpirun, mpiexec) started this process; otherwise
/// returns a group of size 1 without touching MPI, so one binary runs alone or data parallel.
/// `strict` throws std::runtime_error when no multi-process backend can be joined (not launched by
/// mpirun, or built without MPI). Calling init again returns the same
/// world; MPI is finalized at exit.
Group init(bool strict = false);

/// How long a rank waits for a peer that has stopped answering (a stopped or killed process, a lost
/// connection between hosts), in a collective or at exit, before it ends the job naming that peer.
/// Ranks send each other heartbeats every second from a thread of their own, so a rank busy computing
/// still answers. Default 10 s, or LOOM_PEER_TIMEOUT (seconds). Per process; throws
/// std::invalid_argument unless positive.
void set_peer_timeout(double seconds);
/// How long a rank waits in one collective for peers that answer but do not reach it (stuck in
/// compute or I/O, or in another collective) before it ends the job. Default 1800 s (PyTorch's
/// process-group default), or LOOM_COLLECTIVE_TIMEOUT (seconds). Set it longer than the longest
/// stretch one rank computes alone (a test-set evaluation, a checkpoint). Per process; throws
/// std::invalid_argument unless positive.
void set_collective_timeout(double seconds);

/// Sum of `x` over every process of the group (every process gets the result).
array all_sum(const array& x, std::optional<Group> group = std::nullopt, StreamOrDevice s = {});
/// Mean of floating-point `x` over every process of the group: the sum, divided by the group size by
/// the collective itself (no separate node; the division runs where the communication does).
array all_mean(const array& x, std::optional<Group> group = std::nullopt, StreamOrDevice s = {});
/// all_sum / all_mean of many arrays of one dtype with one collective: the result is the
/// concatenation of their flattenings (a 1-D bucket, as nn::average_gradients uses). A producer of
/// `xs` that nothing else reads writes straight into the result's buffer, and a mean is divided
/// piece by piece as it is sent, so neither the concatenation nor the division costs a pass of its own.
array all_sum_flat(const std::vector<array>& xs, std::optional<Group> group = std::nullopt, StreamOrDevice s = {});
array all_mean_flat(const std::vector<array>& xs, std::optional<Group> group = std::nullopt, StreamOrDevice s = {});
array all_max(const array& x, std::optional<Group> group = std::nullopt, StreamOrDevice s = {});
array all_min(const array& x, std::optional<Group> group = std::nullopt, StreamOrDevice s = {});
/// The arrays of every process concatenated along axis 0, in rank order.
array all_gather(const array& x, std::optional<Group> group = std::nullopt, StreamOrDevice s = {});
/// MLX's sum_scatter (a reduce-scatter): `x`'s axis 0 is cut into group-size equal blocks, and rank r
/// gets the sum over the group of block r (shape: x's with axis 0 divided by the group size). Its
/// gradient is all_gather of the cotangent. Throws std::invalid_argument when axis 0 is missing or not
/// a multiple of the group size; a group of size 1 returns `x`.
array sum_scatter(const array& x, std::optional<Group> group = std::nullopt, StreamOrDevice s = {});
/// All-to-all (what expert parallelism routes tokens with): `x`'s axis `split_axis` is cut into
/// group-size equal blocks, block j is sent to rank j, and the blocks this rank receives are
/// concatenated along `concat_axis` in rank order. The result has x's shape with split_axis divided
/// and concat_axis multiplied by the group size (the same shape when they are one axis; the default,
/// axis 0 for both, is PyTorch's all_to_all_single with equal splits). Its gradient is the
/// all-to-all of the cotangent with the two axes swapped. Throws std::invalid_argument for a 0-d x,
/// an axis out of range, or a split axis that is not a multiple of the group size; a group of size
/// 1 returns `x`.
array all_to_all(const array& x, std::optional<Group> group = std::nullopt, StreamOrDevice s = {});
array all_to_all(const array& x, int split_axis, int concat_axis, std::optional<Group> group = std::nullopt,
                 StreamOrDevice s = {});
/// Rank `root`'s `x` on every rank. Every rank passes an array of the same shape and dtype (the
/// values of the others' are not read, as PyTorch's broadcast overwrites them). The gradient reaching
/// root's x is the sum of every rank's cotangent; the others' x get zero. Throws
/// std::invalid_argument for a root outside the group; a group of size 1 returns `x`.
array broadcast(const array& x, int root, std::optional<Group> group = std::nullopt, StreamOrDevice s = {});
/// Blocks until every rank of the group has called it (not lazy: it runs now). A rank that never
/// arrives ends the job after the collective timeout, one that died after the peer timeout, as in
/// any collective; ranks that meet another collective instead all throw, naming each one's.
void barrier(std::optional<Group> group = std::nullopt);
/// Sends `x` to `dst`; the result (x itself) must be evaluated for the send to happen.
array send(const array& x, int dst, std::optional<Group> group = std::nullopt, StreamOrDevice s = {});
/// Receives an array of `shape` and `dtype` from `src`.
array recv(const Shape& shape, Dtype dtype, int src, std::optional<Group> group = std::nullopt, StreamOrDevice s = {});
array recv_like(const array& x, int src, std::optional<Group> group = std::nullopt, StreamOrDevice s = {});
/// Sends `x` to `dst` while receiving an array of `shape` and `dtype` from `src` (dst itself, or
/// another rank), and returns what arrived. The two messages travel at once and the send does not
/// wait for `dst` to take it, so two ranks that each send the other a large array this way cannot
/// block each other, as a send before a recv on both sides can. It pairs with the peers' send and
/// recv in either order, or their own send_recv. (Not in MLX; MPI_Sendrecv.)
array send_recv(const array& x, int dst, const Shape& shape, Dtype dtype, int src,
                std::optional<Group> group = std::nullopt, StreamOrDevice s = {});

/// Messages in a fixed order. eval starts a message as soon as its inputs are ready, and a recv has
/// none, so of several messages in one graph a rank could start them in an order its peers do not
/// expect. These forms start only after every array of `after` (the result of another message, or
/// of agree) has started on this rank: a chain of them starts in the chain's order. nn::Pipeline's
/// schedules are such chains. (Not in MLX.)
array send(const array& x, int dst, const std::vector<array>& after, std::optional<Group> group = std::nullopt);
array recv(const Shape& shape, Dtype dtype, int src, const std::vector<array>& after,
           std::optional<Group> group = std::nullopt);
array send_recv(const array& x, int dst, const Shape& shape, Dtype dtype, int src, const std::vector<array>& after,
                std::optional<Group> group = std::nullopt);
/// A lazy check that every rank of the group passes the same `description` (of what the ranks are
/// about to run: a schedule of messages, say): evaluated, it throws std::runtime_error on every rank,
/// naming each rank's description (its first 239 bytes), when any differs. Returns a bool scalar,
/// true, to order messages `after` it. A group of size 1 agrees at once. (Not in MLX.)
array agree(const std::string& description, std::optional<Group> group = std::nullopt,
            const std::vector<array>& after = {});

}  // namespace loom::distributed

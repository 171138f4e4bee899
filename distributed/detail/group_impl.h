// Internal to distributed/ (not installed): the backend seam. A backend (mpi/mpi.cpp, local.cpp)
// implements GroupImpl; the public API (distributed.cpp) and the collective primitives
// (primitives.cpp) talk to it only through this interface.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "loom/core/dtype.h"

namespace loom::distributed::detail {

enum class ReduceOp { sum, max, min };

/// One group of processes of a backend. Buffers hold `count` elements of `dtype`, contiguous; every
/// call blocks until this process's part is done. Reductions of float16 and bfloat16 compute in
/// float; of bool, sum and max are a logical or, min a logical and. Errors throw std::runtime_error.
class GroupImpl {
 public:
  virtual ~GroupImpl() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  /// Member i's rank in the world group (the fault watch names world ranks).
  virtual const std::vector<int>& world_ranks() const = 0;
  /// Members with the same `color` form a new group, ordered by `key` (>= 0).
  virtual std::shared_ptr<GroupImpl> split(int color, int key) = 0;

  /// out = op over the group of in (`in` null: in place, out holds this process's part).
  virtual void all_reduce(const void* in, void* out, size_t count, Dtype dtype, ReduceOp op) = 0;
  /// out = every member's `count` elements of `in`, in rank order.
  virtual void all_gather(const void* in, void* out, size_t count, Dtype dtype) = 0;
  /// `in` holds size() blocks of `count` elements; out = block rank() of `in` reduced over the group.
  virtual void reduce_scatter(const void* in, void* out, size_t count, Dtype dtype, ReduceOp op) = 0;
  /// `in` holds size() blocks of `count` elements; out's block j = member j's block rank() (MPI_Alltoall).
  virtual void all_to_all(const void* in, void* out, size_t count, Dtype dtype) = 0;
  /// `buf`'s `count` elements of member `root`, written into every member's `buf`.
  virtual void broadcast(void* buf, size_t count, Dtype dtype, int root) = 0;
  /// Messages between two members arrive in the order they were sent.
  virtual void send(const void* in, size_t count, Dtype dtype, int dst) = 0;
  virtual void recv(void* out, size_t count, Dtype dtype, int src) = 0;
  /// Two messages to `dst` (`head`, then `in`: `head_bytes` and `in_bytes`) while two come from
  /// `src`: its head into `head_in`, then its data into where `data_in()` says (called once the head
  /// is in). The sends do not wait for `dst` to receive, so this pairs with a peer's send and recv in
  /// either order, or its own send_recv, and two members exchanging this way cannot block each other.
  virtual void send_recv(const void* head, void* head_in, size_t head_bytes, const void* in, size_t in_bytes, int dst,
                         const std::function<std::pair<void*, size_t>()>& data_in, int src) = 0;
  /// Whether every member passed the same `value` (a collective's signature). Blocks until all have;
  /// a member that waits long backs off (sleeps between polls) instead of spinning a core.
  virtual bool agree(uint64_t value) = 0;
  /// Ends every process of the job, now.
  [[noreturn]] virtual void abort() = 0;

  /// Numbers the group's collectives in the order this process runs them, which is the same on
  /// every member (signatures carry it).
  uint64_t next_sequence() { return sequence_.fetch_add(1, std::memory_order_relaxed); }

 private:
  std::atomic<uint64_t> sequence_{0};
};

/// The world as a backend joined it.
struct World {
  std::shared_ptr<GroupImpl> group;
  /// Whether the backend may be called from the communication thread and the fault watch beside
  /// eval's thread (MPI: MPI_THREAD_MULTIPLE).
  bool threads = false;
  /// Processes of the world on this machine.
  int local_ranks = 1;
};

/// The single-process backend (local.cpp): a group of size 1, in every build.
std::shared_ptr<GroupImpl> single_process_group();

namespace mpi {
/// False in a build without MPI (no_mpi.cpp).
bool is_available();
/// The MPI library's own description of itself, first line ("" without MPI).
std::string library_version();
/// Joins MPI when a launcher started this process (or MPI is already initialized); nullopt otherwise
/// and always in a build without MPI.
std::optional<World> init();
}  // namespace mpi

}  // namespace loom::distributed::detail

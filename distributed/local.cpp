// The single-process backend: the world of a process that no launcher started, and of every process
// of a build without MPI. The public functions return their input for a group of size 1 and never
// make a collective node, so its collectives are only reached by direct use; they copy.
#include <cstdlib>
#include <cstring>
#include <stdexcept>

#include "loom/distributed/detail/group_impl.h"

namespace loom::distributed::detail {

namespace {

class SingleProcess : public GroupImpl {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  const std::vector<int>& world_ranks() const override { return ranks_; }
  std::shared_ptr<GroupImpl> split(int, int) override { return std::make_shared<SingleProcess>(); }
  void all_reduce(const void* in, void* out, size_t count, Dtype dtype, ReduceOp) override {
    if (in && in != out) std::memcpy(out, in, count * size_of(dtype));
  }
  void all_gather(const void* in, void* out, size_t count, Dtype dtype) override {
    if (in != out) std::memcpy(out, in, count * size_of(dtype));
  }
  void reduce_scatter(const void* in, void* out, size_t count, Dtype dtype, ReduceOp) override {
    if (in != out) std::memcpy(out, in, count * size_of(dtype));
  }
  void all_to_all(const void* in, void* out, size_t count, Dtype dtype) override {
    if (in != out) std::memcpy(out, in, count * size_of(dtype));
  }
  void broadcast(void*, size_t, Dtype, int) override {}
  void send(const void*, size_t, Dtype, int dst) override {
    throw std::invalid_argument("[send] a group of size 1 has no other rank");
  }
  void recv(void*, size_t, Dtype, int src) override {
    throw std::invalid_argument("[recv] a group of size 1 has no other rank");
  }
  void send_recv(const void*, void*, size_t, const void*, size_t, int, const std::function<std::pair<void*, size_t>()>&,
                 int) override {
    throw std::invalid_argument("[send_recv] a group of size 1 has no other rank");
  }
  bool agree(uint64_t) override { return true; }
  [[noreturn]] void abort() override { std::abort(); }

 private:
  std::vector<int> ranks_{0};
};

}  // namespace

std::shared_ptr<GroupImpl> single_process_group() { return std::make_shared<SingleProcess>(); }

}  // namespace loom::distributed::detail

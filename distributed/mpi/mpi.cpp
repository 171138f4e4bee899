// The MPI backend: the only file that includes <mpi.h>. Built when LOOM_WITH_MPI is ON (no_mpi.cpp
// stands in otherwise).
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <limits>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>

#include "loom/core/profile.h"
#include "loom/distributed/detail/comm_thread.h"
#include "loom/distributed/detail/fault_watch.h"
#include "loom/distributed/detail/group_impl.h"
#include "loom/ops/utils.h"

namespace loom::distributed::detail::mpi {

using loom::detail::msg;

namespace {

bool launched_by_mpi() {
  for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_RANK", "PMI_SIZE", "MPI_LOCALNRANKS"}) {
    if (std::getenv(v)) return true;
  }
  return false;
}

void check_mpi(int rc, const char* what) {
  if (rc != MPI_SUCCESS) {
    char err[MPI_MAX_ERROR_STRING];
    int len = 0;
    MPI_Error_string(rc, err, &len);
    throw std::runtime_error(msg("[", what, "] MPI error: ", std::string(err, len)));
  }
}

int mpi_count(size_t count, const char* what) {
  if (count > static_cast<size_t>(std::numeric_limits<int>::max())) {
    throw std::invalid_argument(msg("[", what, "] ", count, " elements do not fit one MPI call"));
  }
  return static_cast<int>(count);
}

// ---- element types and reduction ops ----
template <typename T, int Kind>  // Kind: 0 sum, 1 max, 2 min
void half_reduce(void* in, void* inout, int* len, MPI_Datatype*) {
  T* a = static_cast<T*>(in);
  T* b = static_cast<T*>(inout);
  for (int i = 0; i < *len; ++i) {
    float x = a[i], y = b[i];
    b[i] = T(Kind == 0 ? x + y : Kind == 1 ? (x > y ? x : y) : (x < y ? x : y));
  }
}

// complex64's max and min (MPI defines only sums of complex types): lexicographic, real part then
// imaginary part, a NaN in either part winning (as the single-process max and min).
template <int Kind>
void complex_reduce(void* in, void* inout, int* len, MPI_Datatype*) {
  const complex64_t* a = static_cast<const complex64_t*>(in);
  complex64_t* b = static_cast<complex64_t*>(inout);
  for (int i = 0; i < *len; ++i) {
    const complex64_t x = a[i], y = b[i];
    if (y != y) continue;
    if (x != x || (Kind == 1 ? x > y : x < y)) b[i] = x;
  }
}

MPI_Datatype mpi_type(Dtype d) {
  switch (d.val) {
    case Dtype::Val::bool_: return MPI_C_BOOL;
    case Dtype::Val::uint8: return MPI_UINT8_T;
    case Dtype::Val::uint16: return MPI_UINT16_T;
    case Dtype::Val::uint32: return MPI_UINT32_T;
    case Dtype::Val::uint64: return MPI_UINT64_T;
    case Dtype::Val::int8: return MPI_INT8_T;
    case Dtype::Val::int16: return MPI_INT16_T;
    case Dtype::Val::int32: return MPI_INT32_T;
    case Dtype::Val::int64: return MPI_INT64_T;
    case Dtype::Val::float16:
    case Dtype::Val::bfloat16: return MPI_UINT16_T;
    case Dtype::Val::float32: return MPI_FLOAT;
    case Dtype::Val::float64: return MPI_DOUBLE;
    case Dtype::Val::complex64: return MPI_C_FLOAT_COMPLEX;
  }
  return MPI_BYTE;
}

MPI_Op mpi_op(Dtype d, ReduceOp k) {
  if (d == bool_) return k == ReduceOp::min ? MPI_LAND : MPI_LOR;
  if (d == float16 || d == bfloat16) {
    static MPI_Op ops[2][3];
    static std::once_flag once;
    std::call_once(once, [] {
      MPI_Op_create(&half_reduce<float16_t, 0>, 1, &ops[0][0]);
      MPI_Op_create(&half_reduce<float16_t, 1>, 1, &ops[0][1]);
      MPI_Op_create(&half_reduce<float16_t, 2>, 1, &ops[0][2]);
      MPI_Op_create(&half_reduce<bfloat16_t, 0>, 1, &ops[1][0]);
      MPI_Op_create(&half_reduce<bfloat16_t, 1>, 1, &ops[1][1]);
      MPI_Op_create(&half_reduce<bfloat16_t, 2>, 1, &ops[1][2]);
    });
    return ops[d == bfloat16][static_cast<int>(k)];
  }
  if (d == complex64 && k != ReduceOp::sum) {
    static MPI_Op ops[2];
    static std::once_flag once;
    std::call_once(once, [] {
      MPI_Op_create(&complex_reduce<1>, 1, &ops[0]);
      MPI_Op_create(&complex_reduce<2>, 1, &ops[1]);
    });
    return ops[k == ReduceOp::min];
  }
  return k == ReduceOp::sum ? MPI_SUM : k == ReduceOp::max ? MPI_MAX : MPI_MIN;
}

// Waits for `n` requests without spinning a core for long: polls for 50 us (a peer that is already there
// costs no sleep), then sleeps an eighth of the time waited so far between polls (20 us to 0.5 ms),
// so a rank that waits for a slow peer uses about 1% of a core and notices within 1/8 of its wait.
void wait_backing_off(int n, MPI_Request* req, const char* what) {
  using namespace std::chrono;
  const auto start = steady_clock::now();
  for (;;) {
    int done = 0;
    check_mpi(MPI_Testall(n, req, &done, MPI_STATUSES_IGNORE), what);
    if (done) return;
    const auto waited = steady_clock::now() - start;
    if (waited < microseconds(50)) continue;
    std::this_thread::sleep_for(std::clamp<steady_clock::duration>(waited / 8, microseconds(20), microseconds(500)));
  }
}

const char* reduce_call(ReduceOp k) {
  return k == ReduceOp::sum ? "all_sum" : k == ReduceOp::max ? "all_max" : "all_min";
}

class MpiGroup : public GroupImpl {
 public:
  MpiGroup(MPI_Comm comm, std::vector<int> world_ranks) : comm_(comm), world_ranks_(std::move(world_ranks)) {
    MPI_Comm_rank(comm_, &rank_);
    MPI_Comm_size(comm_, &size_);
    // Signatures travel apart from data, so that their point-to-point messages never match a
    // collective's. (Every member constructs its group at the same point: init or split.)
    check_mpi(MPI_Comm_dup(comm_, &signature_comm_), "signature");
  }
  ~MpiGroup() override {
    int finalized = 0;
    if (MPI_Finalized(&finalized), finalized) return;
    MPI_Comm_free(&signature_comm_);
    if (comm_ != MPI_COMM_WORLD) MPI_Comm_free(&comm_);
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  const std::vector<int>& world_ranks() const override { return world_ranks_; }

  std::shared_ptr<GroupImpl> split(int color, int key) override {
    MPI_Comm comm;
    check_mpi(MPI_Comm_split(comm_, color, key, &comm), "Group::split");
    int size = 0;
    MPI_Comm_size(comm, &size);
    std::vector<int> local(size), world(size);
    for (int i = 0; i < size; ++i) local[i] = i;
    MPI_Group mine, all;
    MPI_Comm_group(comm, &mine);
    MPI_Comm_group(MPI_COMM_WORLD, &all);
    MPI_Group_translate_ranks(mine, size, local.data(), all, world.data());
    MPI_Group_free(&mine);
    MPI_Group_free(&all);
    return std::make_shared<MpiGroup>(comm, std::move(world));
  }

  void all_reduce(const void* in, void* out, size_t count, Dtype dtype, ReduceOp op) override {
    const char* what = reduce_call(op);
    check_mpi(MPI_Allreduce(in ? in : MPI_IN_PLACE, out, mpi_count(count, what), mpi_type(dtype), mpi_op(dtype, op),
                            comm_),
              what);
  }
  void all_gather(const void* in, void* out, size_t count, Dtype dtype) override {
    const int n = mpi_count(count, "all_gather");
    check_mpi(MPI_Allgather(in, n, mpi_type(dtype), out, n, mpi_type(dtype), comm_), "all_gather");
  }
  void reduce_scatter(const void* in, void* out, size_t count, Dtype dtype, ReduceOp op) override {
    const int n = mpi_count(count, "sum_scatter");
    mpi_count(count * static_cast<size_t>(size()), "sum_scatter");  // the whole input's count fits too
    check_mpi(MPI_Reduce_scatter_block(in, out, n, mpi_type(dtype), mpi_op(dtype, op), comm_), "sum_scatter");
  }
  void all_to_all(const void* in, void* out, size_t count, Dtype dtype) override {
    const int n = mpi_count(count, "all_to_all");
    mpi_count(count * static_cast<size_t>(size()), "all_to_all");  // the whole input's count fits too
    check_mpi(MPI_Alltoall(in, n, mpi_type(dtype), out, n, mpi_type(dtype), comm_), "all_to_all");
  }
  void broadcast(void* buf, size_t count, Dtype dtype, int root) override {
    check_mpi(MPI_Bcast(buf, mpi_count(count, "broadcast"), mpi_type(dtype), root, comm_), "broadcast");
  }
  void send(const void* in, size_t count, Dtype dtype, int dst) override {
    check_mpi(MPI_Send(in, mpi_count(count, "send"), mpi_type(dtype), dst, 0, comm_), "send");
  }
  void recv(void* out, size_t count, Dtype dtype, int src) override {
    check_mpi(MPI_Recv(out, mpi_count(count, "recv"), mpi_type(dtype), src, 0, comm_, MPI_STATUS_IGNORE), "recv");
  }
  void send_recv(const void* head, void* head_in, size_t head_bytes, const void* in, size_t in_bytes, int dst,
                 const std::function<std::pair<void*, size_t>()>& data_in, int src) override {
    MPI_Request sends[2];
    check_mpi(MPI_Isend(head, mpi_count(head_bytes, "send_recv"), MPI_BYTE, dst, 0, comm_, &sends[0]), "send_recv");
    check_mpi(MPI_Isend(in, mpi_count(in_bytes, "send_recv"), MPI_BYTE, dst, 0, comm_, &sends[1]), "send_recv");
    check_mpi(MPI_Recv(head_in, mpi_count(head_bytes, "send_recv"), MPI_BYTE, src, 0, comm_, MPI_STATUS_IGNORE),
              "send_recv");
    const auto [out, out_bytes] = data_in();
    check_mpi(MPI_Recv(out, mpi_count(out_bytes, "send_recv"), MPI_BYTE, src, 0, comm_, MPI_STATUS_IGNORE), "send_recv");
    check_mpi(MPI_Waitall(2, sends, MPI_STATUSES_IGNORE), "send_recv");
  }
  bool agree(uint64_t value) override {
    // max(v) == ~max(~v) == min(v) exactly when every member passed the same v. The max is taken
    // by recursive doubling over point-to-point messages on a communicator of its own: on shared
    // memory a 16-byte exchange costs ~0.4 us where MPI_Iallreduce costs ~1.3 us (libnbc) and the
    // blocking MPI_Allreduce would spin a core while it waits for a slow peer.
    uint64_t mine[2] = {value, ~value};
    if (size_ == 1) return true;
    int pow2 = 1;
    while (pow2 * 2 <= size_) pow2 *= 2;
    if (rank_ >= pow2) {  // beyond the largest power of two: hand the value in, get the result back
      signature_message(mine, nullptr, rank_ - pow2);
      signature_message(nullptr, mine, rank_ - pow2);
    } else {
      uint64_t theirs[2];
      if (rank_ + pow2 < size_) {
        signature_message(nullptr, theirs, rank_ + pow2);
        combine_max(mine, theirs);
      }
      for (int mask = 1; mask < pow2; mask *= 2) {
        signature_message(mine, theirs, rank_ ^ mask);
        combine_max(mine, theirs);
      }
      if (rank_ + pow2 < size_) signature_message(mine, nullptr, rank_ + pow2);
    }
    return mine[0] == ~mine[1];
  }
  [[noreturn]] void abort() override {
    MPI_Abort(MPI_COMM_WORLD, 1);
    std::abort();
  }

 private:
  static void combine_max(uint64_t* a, const uint64_t* b) {
    a[0] = std::max(a[0], b[0]);
    a[1] = std::max(a[1], b[1]);
  }
  // Sends `out` to and/or receives `in` from `peer` (either may be null), waiting without spinning.
  void signature_message(const uint64_t* out, uint64_t* in, int peer) {
    MPI_Request req[2] = {MPI_REQUEST_NULL, MPI_REQUEST_NULL};
    if (in) check_mpi(MPI_Irecv(in, 2, MPI_UINT64_T, peer, 0, signature_comm_, &req[0]), "signature");
    if (out) check_mpi(MPI_Isend(out, 2, MPI_UINT64_T, peer, 0, signature_comm_, &req[1]), "signature");
    wait_backing_off(2, req, "signature");
  }

  MPI_Comm comm_;
  MPI_Comm signature_comm_ = MPI_COMM_NULL;
  int rank_ = 0, size_ = 1;
  std::vector<int> world_ranks_;
};

// The fault watch's messages, on a communicator of their own: one exit notice and a heartbeat every
// second from each rank to each other, each kind with a receive always posted per peer.
constexpr int kExitTag = 0x4c4f, kBeatTag = 0x4c50;

class MpiWatchLink : public WatchLink {
 public:
  MpiWatchLink(int rank, int size)
      : rank_(rank), exits_(size, MPI_REQUEST_NULL), beats_(size, MPI_REQUEST_NULL),
        beat_sends_(size, MPI_REQUEST_NULL), exit_buf_(size, 0), beat_buf_(size, 0) {
    MPI_Comm_dup(MPI_COMM_WORLD, &comm_);
    for (int r = 0; r < size; ++r) {
      if (r == rank) continue;
      MPI_Irecv(&exit_buf_[r], 1, MPI_INT, r, kExitTag, comm_, &exits_[r]);
      MPI_Irecv(&beat_buf_[r], 1, MPI_INT, r, kBeatTag, comm_, &beats_[r]);
    }
  }
  void poll(std::vector<char>& left, std::vector<char>& heard) override {
    for (size_t r = 0; r < exits_.size(); ++r) {
      int done = 0;
      if (exits_[r] != MPI_REQUEST_NULL && (MPI_Test(&exits_[r], &done, MPI_STATUS_IGNORE), done)) left[r] = 1;
      // Drain every heartbeat that came, reposting the receive each time.
      while (beats_[r] != MPI_REQUEST_NULL && (MPI_Test(&beats_[r], &done, MPI_STATUS_IGNORE), done)) {
        heard[r] = 1;
        MPI_Irecv(&beat_buf_[r], 1, MPI_INT, static_cast<int>(r), kBeatTag, comm_, &beats_[r]);
      }
    }
  }
  void beat() override {
    for (int r = 0; r < static_cast<int>(beat_sends_.size()); ++r) {
      if (r == rank_) continue;
      int done = 1;
      if (beat_sends_[r] != MPI_REQUEST_NULL) MPI_Test(&beat_sends_[r], &done, MPI_STATUS_IGNORE);
      if (done) MPI_Isend(&rank_, 1, MPI_INT, r, kBeatTag, comm_, &beat_sends_[r]);
    }
  }
  void announce() override {
    for (int r = 0; r < static_cast<int>(exits_.size()); ++r) {
      if (r == rank_) continue;
      exit_sends_.emplace_back();
      MPI_Isend(&rank_, 1, MPI_INT, r, kExitTag, comm_, &exit_sends_.back());
    }
  }
  void close() override {
    for (MPI_Request& b : beats_) {
      if (b == MPI_REQUEST_NULL) continue;
      MPI_Cancel(&b);
      MPI_Wait(&b, MPI_STATUS_IGNORE);
    }
    // A heartbeat still in flight may never be received now: it completes on its own.
    for (MPI_Request& b : beat_sends_) {
      if (b != MPI_REQUEST_NULL) MPI_Request_free(&b);
    }
    MPI_Waitall(static_cast<int>(exit_sends_.size()), exit_sends_.data(), MPI_STATUSES_IGNORE);
    MPI_Comm_free(&comm_);
  }

 private:
  MPI_Comm comm_ = MPI_COMM_NULL;
  int rank_;
  std::vector<MPI_Request> exits_, beats_, beat_sends_, exit_sends_;
  std::vector<int> exit_buf_, beat_buf_;
};

void finalize() {
  // LOOM_PROFILE's trace gathers from every rank (core/profile.h): before communication ends.
  if (int finalized = 0; MPI_Finalized(&finalized) == MPI_SUCCESS && !finalized) profile::detail::finish_at_exit();
  stop_comm_thread();
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) return;
  fault_watch().finish();
  MPI_Finalize();
}

}  // namespace

bool is_available() { return true; }

std::string library_version() {
  char v[MPI_MAX_LIBRARY_VERSION_STRING];
  int len = 0;
  MPI_Get_library_version(v, &len);
  std::string out(v, len);
  out = out.substr(0, out.find_first_of(",\n"));  // "Open MPI v4.1.4"
  return out;
}

std::optional<World> init() {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!launched_by_mpi() && !initialized) return std::nullopt;
  int provided = 0;
  if (!initialized) {
    fault_watch();  // made before finalize is registered, so that it is still there at exit
    check_mpi(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided), "distributed::init");
    std::atexit(finalize);
  } else {
    MPI_Query_thread(&provided);
  }
  // Errors come back as codes and become exceptions instead of aborting inside MPI.
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  int size = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  std::vector<int> ranks(size);
  for (int r = 0; r < size; ++r) ranks[r] = r;
  World world;
  world.group = std::make_shared<MpiGroup>(MPI_COMM_WORLD, std::move(ranks));
  const int rank = world.group->rank();
  MPI_Comm node;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &node);
  MPI_Comm_size(node, &world.local_ranks);
  MPI_Comm_free(&node);
  if (size > 1) {
    end_job_on_uncaught_exception(rank, world.group);
    // The communication thread and the fault watch call MPI beside eval's thread.
    world.threads = provided >= MPI_THREAD_MULTIPLE && !initialized;
    if (world.threads) fault_watch().start(rank, size, std::make_unique<MpiWatchLink>(rank, size), world.group);
  }
  return world;
}

}  // namespace loom::distributed::detail::mpi

#include <mpi.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <exception>
#include <functional>
#include <limits>
#include <mutex>
#include <optional>
#include <thread>

#include "loom/ops/graph.h"
#include "loom/core/primitive.h"
#include "loom/core/threads.h"
#include "loom/distributed/distributed.h"
#include "loom/core/copy.h"
#include "loom/ops/ops.h"
#include "loom/ops/utils.h"

namespace loom::distributed {

using loom::detail::msg;
using loom::detail::shape_str;

namespace detail {
struct GroupImpl {
  MPI_Comm comm = MPI_COMM_NULL;  // null for the single-process group
  int rank = 0;
  int size = 1;
  std::vector<int> world_ranks;  // member i's rank in the world, for the fault watch
  ~GroupImpl() {
    int finalized = 0;
    if (comm != MPI_COMM_NULL && comm != MPI_COMM_WORLD && (MPI_Finalized(&finalized), !finalized)) {
      MPI_Comm_free(&comm);
    }
  }
};
}  // namespace detail

namespace {

bool launched_by_mpi() {
  for (const char* v : {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_RANK", "PMI_SIZE", "MPI_LOCALNRANKS"}) {
    if (std::getenv(v)) return true;
  }
  return false;
}

std::mutex init_mutex;
std::shared_ptr<detail::GroupImpl> world_impl;
bool mpi_joined = false;

void check_mpi(int rc, const char* what) {
  if (rc != MPI_SUCCESS) {
    char err[MPI_MAX_ERROR_STRING];
    int len = 0;
    MPI_Error_string(rc, err, &len);
    throw std::runtime_error(msg("[", what, "] MPI error: ", std::string(err, len)));
  }
}

// "float32 (2,3)": how collectives are named in errors.
std::string typed_shape(Dtype d, const Shape& s) { return msg(to_string(d), " ", shape_str(s)); }

using Clock = std::chrono::steady_clock;

// ---- the fault watch ----
// Every rank tells every other when it leaves (normally or not, through exit/atexit). A rank that
// waits in a collective on a rank that has left would wait forever; the watch ends the job instead.
// Checked by the communication thread while idle and by eval while it waits, so it needs
// MPI_THREAD_MULTIPLE (without it there is no watch and no communication thread).
constexpr int kExitTag = 0x4c4f;  // on the watch's own communicator
constexpr double kGraceSeconds = 2.0;

struct Watch {
  std::mutex mu;
  MPI_Comm comm = MPI_COMM_NULL;
  int rank = 0;
  std::vector<MPI_Request> notices;  // one receive per other rank
  std::vector<int> buf;
  std::vector<Clock::time_point> left;  // when each rank's notice arrived (max() while it has not)
  // The collective this process is in, if any (one at a time).
  bool busy = false;
  const char* what = "";
  Shape shape;
  Dtype dtype = float32;
  const std::vector<int>* members = nullptr;
  Clock::time_point since;

  void start(int world_rank, int world_size) {
    MPI_Comm_dup(MPI_COMM_WORLD, &comm);
    rank = world_rank;
    notices.assign(world_size, MPI_REQUEST_NULL);
    buf.assign(world_size, 0);
    left.assign(world_size, Clock::time_point::max());
    for (int r = 0; r < world_size; ++r) {
      if (r != rank) MPI_Irecv(&buf[r], 1, MPI_INT, r, kExitTag, comm, &notices[r]);
    }
  }
  bool on() const { return comm != MPI_COMM_NULL; }

  void enter(const char* w, const array& x, const std::vector<int>& m) {
    std::lock_guard<std::mutex> lock(mu);
    busy = true, what = w, shape = x.shape(), dtype = x.dtype(), members = &m, since = Clock::now();
  }
  void leave() {
    std::lock_guard<std::mutex> lock(mu);
    busy = false;
  }

  void check() {
    if (!on()) return;
    std::lock_guard<std::mutex> lock(mu);
    for (size_t r = 0; r < notices.size(); ++r) {
      if (notices[r] == MPI_REQUEST_NULL) continue;
      int done = 0;
      MPI_Test(&notices[r], &done, MPI_STATUS_IGNORE);
      if (done) left[r] = Clock::now();
    }
    if (!busy) return;
    for (int q : *members) {
      if (left[q] == Clock::time_point::max()) continue;
      auto waited = std::chrono::duration<double>(Clock::now() - std::max(left[q], since)).count();
      if (waited < kGraceSeconds) continue;
      std::fprintf(stderr,
                   "[loom rank %d] rank %d has left the job while rank %d waits for it in %s; ending the "
                   "job (did one rank run fewer steps, or exit early?)\n",
                   rank, q, rank, (std::string(what) + " of " + typed_shape(dtype, shape)).c_str());
      std::fflush(stderr);
      MPI_Abort(MPI_COMM_WORLD, 1);
    }
  }

  // At exit: tell everyone, then wait until everyone has said the same, so that no rank finalizes
  // (a collective step of its own) while another still waits for it in a collective.
  void finish() {
    if (!on()) return;
    std::vector<MPI_Request> sends;
    for (int r = 0; r < static_cast<int>(notices.size()); ++r) {
      if (r == rank) continue;
      sends.emplace_back();
      MPI_Isend(&rank, 1, MPI_INT, r, kExitTag, comm, &sends.back());
    }
    for (;;) {
      int all = 0;
      {
        std::lock_guard<std::mutex> lock(mu);
        MPI_Testall(static_cast<int>(notices.size()), notices.data(), &all, MPI_STATUSES_IGNORE);
      }
      if (all) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    MPI_Waitall(static_cast<int>(sends.size()), sends.data(), MPI_STATUSES_IGNORE);
    MPI_Comm_free(&comm);
  }
};

Watch watch;

// ---- the communication thread ----
// Collectives that eval starts early run here, one at a time in start order, while eval computes.
class CommThread {
 public:
  struct Job {
    std::function<void()> fn;
    bool done = false;
    std::exception_ptr error;
  };

  CommThread() : thread_([this] { loop(); }) {}
  ~CommThread() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }

  std::shared_ptr<Job> submit(std::function<void()> fn) {
    auto job = std::make_shared<Job>();
    job->fn = std::move(fn);
    {
      std::lock_guard<std::mutex> lock(mu_);
      queue_.push_back(job);
    }
    cv_.notify_all();
    return job;
  }

  void wait(const std::shared_ptr<Job>& job) {
    std::unique_lock<std::mutex> lock(mu_);
    while (!job->done) {
      if (!done_cv_.wait_for(lock, std::chrono::milliseconds(20), [&] { return job->done; })) {
        lock.unlock();
        watch.check();
        lock.lock();
      }
    }
    if (job->error) std::rethrow_exception(job->error);
  }

 private:
  void loop() {
    std::unique_lock<std::mutex> lock(mu_);
    for (;;) {
      if (!cv_.wait_for(lock, std::chrono::milliseconds(20), [&] { return stop_ || !queue_.empty(); })) {
        lock.unlock();
        watch.check();  // eval may be in a blocking collective of its own
        lock.lock();
        continue;
      }
      if (queue_.empty()) return;  // stop_
      auto job = queue_.front();
      queue_.pop_front();
      lock.unlock();
      try {
        job->fn();
      } catch (...) {
        job->error = std::current_exception();
      }
      job->fn = nullptr;  // drop the arrays it holds before eval hears it is done
      lock.lock();
      job->done = true;
      done_cv_.notify_all();
    }
  }

  std::mutex mu_;
  std::condition_variable cv_, done_cv_;
  std::deque<std::shared_ptr<Job>> queue_;
  bool stop_ = false;
  std::thread thread_;
};

std::unique_ptr<CommThread> comm_thread;  // made by init when MPI gives us MPI_THREAD_MULTIPLE

void finalize_mpi() {
  comm_thread.reset();
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) return;
  watch.finish();
  MPI_Finalize();
}

// An uncaught exception on one rank ends the whole job, naming the rank, instead of leaving the
// others waiting in a collective.
[[noreturn]] void terminate_job() {
  std::string what = "unknown exception";
  if (auto e = std::current_exception()) {
    try {
      std::rethrow_exception(e);
    } catch (const std::exception& x) {
      what = x.what();
    } catch (...) {
    }
  } else {
    what = "std::terminate called without an exception";
  }
  std::fprintf(stderr, "[loom rank %d] uncaught exception: %s\n[loom rank %d] ending the job\n", watch.rank,
               what.c_str(), watch.rank);
  std::fflush(stderr);
  MPI_Abort(MPI_COMM_WORLD, 1);
  std::abort();
}

// Processes of the world on this machine (set by init).
int local_ranks = 1;

// Whether collectives run on the communication thread beside compute. When every rank is on this
// machine, communication is shared-memory copies and sums, CPU work: it hides behind compute only
// on a spare core. Where the ranks' threads fill every core it would take turns with the compute,
// and blocking inline where the collective becomes ready is faster (2 ranks x 1 thread on 2 cores,
// dp_mlp_step with 1 MiB buckets: 7.0-7.1 ms async, 6.4-6.7 ms inline). Across machines the network
// does the moving, so collectives always go async. LOOM_ASYNC_COLLECTIVES=1 or 0 forces either way.
// A per-process choice that changes where a collective runs, never when it is issued (is_async).
bool async_collectives() {
  static const int forced = [] {
    const char* v = std::getenv("LOOM_ASYNC_COLLECTIVES");
    return v && *v ? (std::strcmp(v, "0") != 0 ? 1 : 0) : -1;
  }();
  if (forced >= 0) return forced == 1;
  return local_ranks < world_impl->size || local_ranks * get_num_threads() < omp_get_num_procs();
}

bool debug_checks() {
  static const bool on = [] {
    const char* v = std::getenv("LOOM_DISTRIBUTED_DEBUG");
    return v && *v && std::strcmp(v, "0") != 0;
  }();
  return on;
}

// ---- element types and reduction ops for MPI ----
template <typename T, int Kind>  // Kind: 0 sum, 1 max, 2 min
void half_reduce(void* in, void* inout, int* len, MPI_Datatype*) {
  T* a = static_cast<T*>(in);
  T* b = static_cast<T*>(inout);
  for (int i = 0; i < *len; ++i) {
    float x = a[i], y = b[i];
    b[i] = T(Kind == 0 ? x + y : Kind == 1 ? (x > y ? x : y) : (x < y ? x : y));
  }
}

// The values double as collective kinds (kKindNames). A mean is a sum divided as it is written.
enum class ReduceKind { sum = 0, max = 1, min = 2, mean = 5 };

MPI_Datatype mpi_type(Dtype d) {
  switch (d.val) {
    case Dtype::Val::bool_: return MPI_C_BOOL;
    case Dtype::Val::uint8: return MPI_UINT8_T;
    case Dtype::Val::int32: return MPI_INT32_T;
    case Dtype::Val::int64: return MPI_INT64_T;
    case Dtype::Val::float16:
    case Dtype::Val::bfloat16: return MPI_UINT16_T;
    case Dtype::Val::float32: return MPI_FLOAT;
    case Dtype::Val::float64: return MPI_DOUBLE;
  }
  return MPI_BYTE;
}

MPI_Op mpi_op(Dtype d, ReduceKind k) {
  if (k == ReduceKind::mean) k = ReduceKind::sum;
  if (d == bool_) return k == ReduceKind::min ? MPI_LAND : MPI_LOR;
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
  return k == ReduceKind::sum ? MPI_SUM : k == ReduceKind::max ? MPI_MAX : MPI_MIN;
}

const char* reduce_name(ReduceKind k) {
  return k == ReduceKind::sum ? "all_sum" : k == ReduceKind::mean ? "all_mean" : k == ReduceKind::max ? "all_max" : "all_min";
}

// What a rank is about to do, compared across ranks when LOOM_DISTRIBUTED_DEBUG is set.
struct Signature {
  int kind = 0;
  Dtype dt = float32;
  int ndim = 0;
  int64_t dims[8] = {};
  static Signature of(int kind, const array& x) {
    Signature sig;
    sig.kind = kind;
    sig.dt = x.dtype();
    sig.ndim = static_cast<int>(x.ndim());
    for (int i = 0; i < std::min(sig.ndim, 8); ++i) sig.dims[i] = x.shape(i);
    return sig;
  }
  bool operator==(const Signature& o) const {
    return kind == o.kind && dt == o.dt && ndim == o.ndim && std::equal(dims, dims + 8, o.dims);
  }
  Shape shape() const { return Shape(dims, dims + std::min(ndim, 8)); }
};

const char* const kKindNames[] = {"all_sum", "all_max", "all_min", "all_gather", "send/recv", "all_mean"};
constexpr int kGatherKind = 3, kPointToPointKind = 4;
constexpr int kDataTag = 0, kSignatureTag = 1;

// The base of every communication primitive. `prepare` readies the buffers on eval's thread
// (kernels may run there) and returns the run: what this rank contributes and the blocking MPI calls,
// which own every buffer they touch. The calls run on the communication thread when eval started the
// node early, or on eval's thread when nothing else could run. The primitive keeps nothing of a run.
class Communication : public UnaryPrimitive {
 public:
  Communication(int kind, Group g) : kind_(kind), group_(std::move(g)) {}

  struct Run {
    array x;                             // this rank's part: named in errors, compared in debug mode
    std::function<void()> communicate;   // the blocking calls
  };

  void eval_cpu(const std::vector<array>& in, array& out) override { execute(prepare(in, out)); }
  // Always async, on every rank: eval then issues the collectives in its list schedule's order, which
  // depends on the graph alone. Whether a started collective runs on the communication thread or
  // right here, blocking, is this process's speed decision (async_collectives) and cannot change
  // that order: the thread runs its jobs one at a time in the order they were started.
  bool is_async() const override { return true; }
  std::unique_ptr<AsyncWork> eval_async(const std::vector<array>& in, std::vector<array>& outs) override {
    if (comm_thread == nullptr || !async_collectives()) {
      execute(prepare(in, outs[0]));
      return nullptr;
    }
    auto job = comm_thread->submit([this, run = prepare(in, outs[0])]() mutable { execute(run); });
    return std::make_unique<Work>(std::move(job));
  }

 protected:
  virtual Run prepare(const std::vector<array>& in, array& out) = 0;
  // LOOM_DISTRIBUTED_DEBUG: collectives compare signatures across the group (send/recv override).
  virtual void check_agreement(const array& x) {
    const int n = group_.size();
    std::vector<Signature> all(n);
    Signature mine = Signature::of(kind_, x);
    check_mpi(MPI_Allgather(&mine, sizeof(Signature), MPI_BYTE, all.data(), sizeof(Signature), MPI_BYTE,
                            group_.impl()->comm),
              name());
    bool same = true;
    for (const auto& s : all) same = same && s == all[0];
    if (same) return;
    std::string list;
    for (int r = 0; r < n; ++r) {
      list += msg(r ? "; " : "", "rank ", r, ": ", kKindNames[all[r].kind], " ", typed_shape(all[r].dt, all[r].shape()));
    }
    throw std::runtime_error(msg("[", name(), "] LOOM_DISTRIBUTED_DEBUG: the ranks disagree on this collective: ", list));
  }

  int kind_;
  Group group_;

 private:
  // A run started on the communication thread; eval owns it until it waits.
  struct Work : AsyncWork {
    explicit Work(std::shared_ptr<CommThread::Job> j) : job(std::move(j)) {}
    void wait() override {
      auto j = std::move(job);
      if (j) comm_thread->wait(j);
    }
    ~Work() override {  // unwinding: nothing may go while the thread still uses the buffers
      try {
        wait();
      } catch (...) {
      }
    }
    std::shared_ptr<CommThread::Job> job;
  };

  void execute(const Run& run) {
    if (watch.on()) watch.enter(name(), run.x, group_.impl()->world_ranks);
    struct Leave {
      ~Leave() {
        if (watch.on()) watch.leave();
      }
    } leave;
    if (debug_checks()) check_agreement(run.x);
    run.communicate();
  }
};

Group resolve(const std::optional<Group>& g);
array all_reduce(const array& x, ReduceKind k, const std::optional<Group>& group);
array all_reduce_flat(const std::vector<array>& xs, ReduceKind k, const std::optional<Group>& group);

// The reduction of one array (the result has its shape), or of several of one dtype (flat: the result
// is the concatenation of their flattenings, one 1-D bucket and one collective for them all). The
// result is reduced in place, in pieces of at most 4 MiB, each filled just before it is sent: an
// input that eval placed in the result's buffer (or donated to it) is already there; any other is
// copied in. A mean divides each 64 KiB chunk while it is still in L2, so it costs no pass of its own.
// The one exception is the sum of a single input held elsewhere, which MPI reduces out of place.
class AllReduce : public Communication {
  // Elements [begin, begin + size) of the result come from `src`, or are already in place.
  struct Part {
    int64_t begin, size;
    std::optional<array> src;
  };

 public:
  AllReduce(ReduceKind k, Group g, bool flat = false)
      : Communication(static_cast<int>(k), std::move(g)), op_(k), flat_(flat) {}
  const char* name() const override { return reduce_name(op_); }
  Run prepare(const std::vector<array>& in, array& out) override {
    std::vector<Part> parts;
    if (flat_) {
      out.alloc();
    } else if (in[0].flags().row_contiguous) {
      // Donation tests the graph's own handle: a copy of it would count as a second holder.
      out.alloc_or_donate(in[0]);
    } else {
      array x = kernels::row_contiguous(in[0]);
      out.alloc_or_donate(x);
      add_part(parts, x, 0, out);
      return {out, [this, out, parts = std::move(parts)]() mutable { communicate(parts, out); }};
    }
    int64_t offset = 0;
    for (const array& x : in) {
      add_part(parts, x.flags().row_contiguous ? x : kernels::row_contiguous(x), offset, out);
      offset += static_cast<int64_t>(x.size());
    }
    return {out, [this, out, parts = std::move(parts)]() mutable { communicate(parts, out); }};
  }
  // Owns `parts` (the inputs' buffers) and clears them when done, so that they can go before eval
  // hears that the run is done.
  void communicate(std::vector<Part>& parts, array& out) const {
    // In pieces of at most 4 MiB: OpenMPI (4.1, shared memory) falls off a cliff above ~16 MB in one
    // call (32 MB: 77 ms; as eight 4 MiB calls: 3.1 ms), pieces are as fast below that, and every
    // count fits MPI's int. MPI reads a single held input of a sum where it is (4 MB: 0.25 ms against
    // 0.30 ms for a copy and an in-place reduction). A mean is never divided afterwards: the result is
    // then out of cache (the kernel's cross-process copy wrote it), and dividing 4 MB there took 0.57 ms.
    const size_t isz = out.itemsize(), n = out.size(), piece = (size_t(4) << 20) / isz;
    const bool out_of_place = op_ != ReduceKind::mean && parts.size() == 1 && parts[0].src;
    const char* src = out_of_place ? static_cast<const char*>(parts[0].src->raw_data()) : nullptr;
    char* dst = static_cast<char*>(out.raw_data());
    for (size_t off = 0; off < n; off += piece) {
      const size_t count = std::min(piece, n - off);
      if (!src) fill(parts, out, off, count);
      check_mpi(MPI_Allreduce(src ? src + off * isz : MPI_IN_PLACE, dst + off * isz, static_cast<int>(count),
                              mpi_type(out.dtype()), mpi_op(out.dtype(), op_), group_.impl()->comm),
                name());
    }
    parts.clear();  // the inputs' buffers can go
  }
  bool input_offsets(const std::vector<array>& in, const array&, std::vector<int64_t>& offsets) const override {
    consecutive_offsets(in, offsets);
    return true;
  }
  std::vector<array> vjp(const std::vector<array>& p, const std::vector<array>& cot, const std::vector<int>& argnums,
                         const std::vector<array>& outputs) override {
    // The loss is taken to be summed over ranks: d/dx_r sum_r' L(sum_q x_q) = sum_r' cot_r'.
    if (flat_) {
      std::vector<Shape> shapes;
      for (const array& x : p) shapes.push_back(x.shape());
      std::vector<array> parts = split_flat(all_reduce(cot[0], op_, group_), shapes), out;
      for (int arg : argnums) out.push_back(std::move(parts[arg]));
      return out;
    }
    if (op_ == ReduceKind::sum) return {all_sum(cot[0], group_)};
    if (op_ == ReduceKind::mean) return {all_mean(cot[0], group_)};
    array mask = astype(equal(p[0], outputs[0]), cot[0].dtype());
    return {multiply(all_sum(cot[0], group_), mask)};
  }
  std::vector<array> jvp(const std::vector<array>& p, const std::vector<array>& t, const std::vector<int>& argnums) override {
    if (flat_) return {all_reduce_flat(tangents_or_zeros(p, t, argnums), op_, group_)};
    if (op_ == ReduceKind::sum) return {all_sum(t[0], group_)};
    if (op_ == ReduceKind::mean) return {all_mean(t[0], group_)};
    array y(p[0].shape(), p[0].dtype(), std::make_shared<AllReduce>(op_, group_), {p[0]});
    // The tangent of the process holding the extreme value, shared with everyone.
    array mask = astype(equal(p[0], y), t[0].dtype());
    return {all_sum(multiply(t[0], mask), group_)};
  }

 private:
  static void add_part(std::vector<Part>& parts, const array& x, int64_t begin, const array& out) {
    const bool in_place = x.raw_data() == static_cast<char*>(out.raw_data()) + begin * int64_t(out.itemsize());
    parts.push_back({begin, static_cast<int64_t>(x.size()), in_place ? std::nullopt : std::optional<array>(x)});
  }

  // Readies elements [off, off + count) of out for sending: copies in what is not in place and, for
  // a mean, divides every element by the group size.
  void fill(const std::vector<Part>& parts, array& out, size_t off, size_t count) const {
    const int64_t lo_piece = static_cast<int64_t>(off), hi_piece = lo_piece + static_cast<int64_t>(count);
    const size_t isz = out.itemsize();
    for (const Part& r : parts) {
      const int64_t lo = std::max(lo_piece, r.begin), hi = std::min(hi_piece, r.begin + r.size);
      if (lo >= hi) continue;
      char* dst = static_cast<char*>(out.raw_data()) + lo * isz;
      const char* src = r.src ? static_cast<const char*>(r.src->raw_data()) + (lo - r.begin) * isz : dst;
      // memcpy (rep movsb) writes lines without reading them first, which a store loop's
      // read-for-ownership would; the mean then divides each 64 KiB chunk while it is in L2.
      const size_t chunk = (size_t(64) << 10) / isz;
      for (int64_t c = 0; c < hi - lo; c += chunk) {
        const size_t k = std::min<size_t>(chunk, hi - lo - c);
        if (src != dst) std::memcpy(dst + c * isz, src + c * isz, k * isz);
        if (op_ == ReduceKind::mean) divide(out, lo + c, k);
      }
    }
  }

  // Elements [off, off + count) of out, divided by the group size.
  void divide(array& out, size_t off, size_t count) const {
    LOOM_DISPATCH_FLOAT(out.dtype(), T, {
      T* y = static_cast<T*>(out.raw_data()) + off;
      const compute_t<T> inv = compute_t<T>(1) / group_.size();
      for (size_t i = 0; i < count; ++i) y[i] = T(y[i] * inv);
    });
  }

  ReduceKind op_;
  bool flat_;
};

class AllGather : public Communication {
 public:
  explicit AllGather(Group g) : Communication(kGatherKind, std::move(g)) {}
  const char* name() const override { return "all_gather"; }
  Run prepare(const std::vector<array>& in, array& out) override {
    out.alloc();
    array x = kernels::row_contiguous(in[0]);
    return {x, [this, x, out]() { communicate(x, out); }};
  }
  void communicate(const array& x, const array& out) const {
    if (out.size() == 0) return;
    int count = static_cast<int>(x.size());
    MPI_Datatype t = mpi_type(x.dtype());
    check_mpi(MPI_Allgather(x.raw_data(), count, t, out.raw_data(), count, t, group_.impl()->comm),
              name());
  }
  std::vector<array> vjp(const std::vector<array>& p, const std::vector<array>& cot, const std::vector<int>&,
                         const std::vector<array>&) override {
    int n = p[0].shape(0), r = group_.rank();
    Shape start(cot[0].ndim(), 0), stop = cot[0].shape();
    start[0] = r * n;
    stop[0] = (r + 1) * n;
    return {slice(all_sum(cot[0], group_), start, stop)};
  }
  std::vector<array> jvp(const std::vector<array>&, const std::vector<array>& t, const std::vector<int>&) override {
    return {all_gather(t[0], group_)};
  }
};

class Send : public Communication {
 public:
  Send(int dst, Group g) : Communication(kPointToPointKind, std::move(g)), dst_(dst) {}
  Run prepare(const std::vector<array>& in, array& out) override {
    out.copy_shared_buffer(in[0]);
    array x = kernels::row_contiguous(in[0]);
    return {x, [this, x]() { communicate(x); }};
  }
  void communicate(const array& x) const {
    check_mpi(MPI_Send(x.raw_data(), static_cast<int>(x.size()), mpi_type(x.dtype()), dst_, kDataTag,
                       group_.impl()->comm),
              "send");
  }
  void check_agreement(const array& x) override {
    Signature mine = Signature::of(kind_, x);
    check_mpi(MPI_Send(&mine, sizeof(Signature), MPI_BYTE, dst_, kSignatureTag, group_.impl()->comm), "send");
  }
  const char* name() const override { return "send"; }
  bool is_differentiable() const override { return false; }

 private:
  int dst_;
};

class Recv : public Communication {
 public:
  Recv(int src, Group g) : Communication(kPointToPointKind, std::move(g)), src_(src) {}
  Run prepare(const std::vector<array>&, array& out) override {
    out.alloc();
    return {out, [this, out]() { communicate(out); }};
  }
  void communicate(const array& out) const {
    check_mpi(MPI_Recv(out.raw_data(), static_cast<int>(out.size()), mpi_type(out.dtype()), src_, kDataTag,
                       group_.impl()->comm, MPI_STATUS_IGNORE),
              "recv");
  }
  void check_agreement(const array& expected) override {
    Signature theirs;
    check_mpi(MPI_Recv(&theirs, sizeof(Signature), MPI_BYTE, src_, kSignatureTag, group_.impl()->comm,
                       MPI_STATUS_IGNORE),
              "recv");
    if (theirs == Signature::of(kind_, expected)) return;
    // Take the message anyway so the sender is not left blocked, then report.
    size_t bytes = size_of(theirs.dt);
    for (int64_t d : theirs.shape()) bytes *= static_cast<size_t>(d);
    std::vector<char> scratch(bytes);
    check_mpi(MPI_Recv(scratch.data(), static_cast<int>(bytes), MPI_BYTE, src_, kDataTag, group_.impl()->comm,
                       MPI_STATUS_IGNORE),
              "recv");
    throw std::runtime_error(msg("[recv] LOOM_DISTRIBUTED_DEBUG: rank ", group_.rank(), " expects ",
                                 typed_shape(expected.dtype(), expected.shape()), " from rank ", src_, ", which sends ",
                                 typed_shape(theirs.dt, theirs.shape())));
  }
  const char* name() const override { return "recv"; }
  bool is_differentiable() const override { return false; }

 private:
  int src_;
};

Group resolve(const std::optional<Group>& g) { return g ? *g : init(); }

array all_reduce(const array& x, ReduceKind k, const std::optional<Group>& group) {
  Group g = resolve(group);
  if (g.size() == 1) return x;  // nothing to combine: no copy, no node
  return array(x.shape(), x.dtype(), std::make_shared<AllReduce>(k, g), {x});
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
  if (k == ReduceKind::mean && !is_floating_point(xs[0].dtype())) {
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
  return array({static_cast<int>(total)}, xs[0].dtype(), std::make_shared<AllReduce>(k, g, true), xs);
}

}  // namespace

int Group::rank() const { return impl_->rank; }
int Group::size() const { return impl_->size; }

Group Group::split(int color, int key) const {
  if (color < 0) throw std::invalid_argument(msg("[Group::split] color must be >= 0, got ", color));
  if (impl_->comm == MPI_COMM_NULL) return *this;
  auto impl = std::make_shared<detail::GroupImpl>();
  check_mpi(MPI_Comm_split(impl_->comm, color, key < 0 ? impl_->rank : key, &impl->comm), "Group::split");
  MPI_Comm_rank(impl->comm, &impl->rank);
  MPI_Comm_size(impl->comm, &impl->size);
  impl->world_ranks.resize(impl->size);
  MPI_Group mine, world;
  MPI_Comm_group(impl->comm, &mine);
  MPI_Comm_group(MPI_COMM_WORLD, &world);
  std::vector<int> local(impl->size);
  for (int i = 0; i < impl->size; ++i) local[i] = i;
  MPI_Group_translate_ranks(mine, impl->size, local.data(), world, impl->world_ranks.data());
  MPI_Group_free(&mine);
  MPI_Group_free(&world);
  return Group(impl);
}

bool is_available() { return true; }

Group init(bool strict) {
  std::lock_guard<std::mutex> lock(init_mutex);
  if (!world_impl) {
    auto impl = std::make_shared<detail::GroupImpl>();
    int initialized = 0;
    MPI_Initialized(&initialized);
    if (launched_by_mpi() || initialized) {
      int provided = 0;
      if (!initialized) {
        check_mpi(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided), "distributed::init");
        std::atexit(finalize_mpi);
      } else {
        MPI_Query_thread(&provided);
      }
      // Errors come back as codes and become exceptions instead of aborting inside MPI.
      MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
      impl->comm = MPI_COMM_WORLD;
      MPI_Comm_rank(MPI_COMM_WORLD, &impl->rank);
      MPI_Comm_size(MPI_COMM_WORLD, &impl->size);
      impl->world_ranks.resize(impl->size);
      for (int r = 0; r < impl->size; ++r) impl->world_ranks[r] = r;
      mpi_joined = true;
      MPI_Comm node;
      MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, impl->rank, MPI_INFO_NULL, &node);
      MPI_Comm_size(node, &local_ranks);
      MPI_Comm_free(&node);
      if (impl->size > 1) {
        std::set_terminate(terminate_job);
        watch.rank = impl->rank;
        // The communication thread and the fault watch call MPI beside eval's thread.
        if (provided >= MPI_THREAD_MULTIPLE && !initialized) {
          watch.start(impl->rank, impl->size);
          comm_thread = std::make_unique<CommThread>();
        }
      }
    }
    world_impl = impl;
  }
  if (strict && !mpi_joined) {
    throw std::runtime_error(
        "[distributed::init] strict: this process was not started by an MPI launcher; run it with "
        "mpirun -np N");
  }
  return Group(world_impl);
}

array all_sum(const array& x, std::optional<Group> group) { return all_reduce(x, ReduceKind::sum, group); }
array all_max(const array& x, std::optional<Group> group) { return all_reduce(x, ReduceKind::max, group); }
array all_mean(const array& x, std::optional<Group> group) {
  if (!is_floating_point(x.dtype())) {
    throw std::invalid_argument(msg("[all_mean] needs a floating-point array, got ", to_string(x.dtype()),
                                    " (use all_sum and divide)"));
  }
  return all_reduce(x, ReduceKind::mean, group);
}
array all_min(const array& x, std::optional<Group> group) { return all_reduce(x, ReduceKind::min, group); }
array all_sum_flat(const std::vector<array>& xs, std::optional<Group> group) {
  return all_reduce_flat(xs, ReduceKind::sum, group);
}
array all_mean_flat(const std::vector<array>& xs, std::optional<Group> group) {
  return all_reduce_flat(xs, ReduceKind::mean, group);
}

array all_gather(const array& x, std::optional<Group> group) {
  Group g = resolve(group);
  if (x.ndim() == 0) {
    throw std::invalid_argument("[all_gather] needs an array of at least 1 dimension (it concatenates along axis 0)");
  }
  if (g.size() == 1) return x;
  Shape s = x.shape();
  s[0] *= g.size();
  return array(s, x.dtype(), std::make_shared<AllGather>(g), {x});
}

array send(const array& x, int dst, std::optional<Group> group) {
  Group g = resolve(group);
  if (dst < 0 || dst >= g.size()) {
    throw std::invalid_argument(msg("[send] destination rank ", dst, " is outside the group of size ", g.size()));
  }
  if (dst == g.rank()) throw std::invalid_argument(msg("[send] rank ", dst, " cannot send to itself"));
  return array(x.shape(), x.dtype(), std::make_shared<Send>(dst, g), {x});
}

array recv(const Shape& shape, Dtype dtype, int src, std::optional<Group> group) {
  Group g = resolve(group);
  if (src < 0 || src >= g.size()) {
    throw std::invalid_argument(msg("[recv] source rank ", src, " is outside the group of size ", g.size()));
  }
  if (src == g.rank()) throw std::invalid_argument(msg("[recv] rank ", src, " cannot receive from itself"));
  for (int d : shape) {
    if (d < 0) throw std::invalid_argument(msg("[recv] negative dimension in shape ", shape_str(shape)));
  }
  return array(shape, dtype, std::make_shared<Recv>(src, g), {});
}

array recv_like(const array& x, int src, std::optional<Group> group) {
  return recv(x.shape(), x.dtype(), src, group);
}

}  // namespace loom::distributed

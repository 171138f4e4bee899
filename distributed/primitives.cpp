// The collectives as graph primitives: each prepares its buffers on eval's thread, then makes its
// blocking calls through the backend interface (GroupImpl), inline or on the communication thread.
#include <algorithm>
#include <atomic>
#include <cstring>
#include <functional>
#include <limits>
#include <optional>
#include <stdexcept>
#include <string>

#include "loom/core/copy.h"
#include "loom/core/dispatch.h"
#include "loom/core/primitive.h"
#include "loom/core/profile.h"
#include "loom/distributed/detail/comm_thread.h"
#include "loom/distributed/detail/fault_watch.h"
#include "loom/distributed/detail/group_impl.h"
#include "loom/distributed/detail/primitives.h"
#include "loom/distributed/detail/signature.h"
#include "loom/ops/graph.h"
#include "loom/ops/ops.h"
#include "loom/ops/utils.h"

namespace loom::distributed::detail {

using loom::detail::msg;

namespace {

ReduceOp reduce_op(ReduceKind k) {
  return k == ReduceKind::max ? ReduceOp::max : k == ReduceKind::min ? ReduceOp::min : ReduceOp::sum;
}

// The base of every communication primitive. `prepare` readies the buffers on eval's thread
// (kernels may run there) and returns the run: what this rank contributes and the blocking calls,
// which own every buffer they touch. The calls run on the communication thread when eval started the
// node early, or on eval's thread when nothing else could run. The primitive keeps nothing of a run.
class Communication : public UnaryPrimitive {
 public:
  Communication(int kind, Group g, std::optional<uint64_t> layout = std::nullopt)
      : kind_(kind), group_(std::move(g)), layout_(layout), created_(next_created()) {}
  uint64_t start_key() const override { return created_; }

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
    CommThread* thread = comm_thread_for_collectives();
    if (!thread) {
      execute(prepare(in, outs[0]));
      return nullptr;
    }
    auto job = thread->submit([this, run = prepare(in, outs[0])]() mutable { execute(run); });
    return std::make_unique<Work>(thread, std::move(job));
  }

 protected:
  virtual Run prepare(const std::vector<array>& in, array& out) = 0;
  // Collectives compare signatures across the group before data moves (send/recv override).
  virtual void check_agreement(const array& x) {
    detail::check_agreement(impl(), name(), kind_, x, layout_ ? *layout_ : layout_hash({x.shape()}));
  }
  GroupImpl& impl() const { return *group_.impl(); }

  int kind_;
  Group group_;
  std::optional<uint64_t> layout_;  // a flat reduction's parts; otherwise the shape of x

 private:
  static uint64_t next_created() {
    static std::atomic<uint64_t> count{0};
    return count.fetch_add(1, std::memory_order_relaxed);
  }
  uint64_t created_;

 private:
  // A run started on the communication thread; eval owns it until it waits.
  struct Work : AsyncWork {
    Work(CommThread* t, std::shared_ptr<CommThread::Job> j) : thread(t), job(std::move(j)) {}
    void wait() override {
      auto j = std::move(job);
      if (j) thread->wait(j);
    }
    bool ready() override { return !job || job->done.load(std::memory_order_acquire); }
    ~Work() override {  // unwinding: nothing may go while the thread still uses the buffers
      try {
        wait();
      } catch (...) {
      }
    }
    CommThread* thread;
    std::shared_ptr<CommThread::Job> job;
  };

  void execute(const Run& run) {
    FaultWatch& watch = fault_watch();
    if (watch.on()) watch.enter(name(), run.x, impl().world_ranks());
    struct Leave {
      FaultWatch& watch;
      ~Leave() {
        if (watch.on()) watch.leave();
      }
    } leave{watch};
    const int64_t begin = profile::detail::recording() ? profile::detail::now_ns() : 0;
    check_agreement(run.x);
    run.communicate();
    if (begin) {  // the profiler's span where the data moved, with this rank's bytes
      profile::detail::Span s;
      s.name = name();
      s.category = "comm";
      s.begin_ns = begin;
      s.end_ns = profile::detail::now_ns();
      s.bytes_read = s.bytes_written = run.x.nbytes();
      s.args = "\"group_size\":" + std::to_string(impl().size());
      profile::detail::record(std::move(s));
    }
  }
};

// The reduction of one array (the result has its shape), or of several of one dtype (flat: the result
// is the concatenation of their flattenings, one 1-D bucket and one collective for them all). The
// result is reduced in place, in pieces of at most 4 MiB, each filled just before it is sent: an
// input that eval placed in the result's buffer (or donated to it) is already there; any other is
// copied in. A mean divides each 64 KiB chunk while it is still in L2, so it costs no pass of its own.
// The one exception is the sum of a single input held elsewhere, which the backend reduces out of place.
class AllReduce : public Communication {
  // Elements [begin, begin + size) of the result come from `src`, or are already in place.
  struct Part {
    int64_t begin, size;
    std::optional<array> src;
  };

 public:
  AllReduce(ReduceKind k, Group g) : Communication(static_cast<int>(k), std::move(g)), op_(k), flat_(false) {}
  // Flat: `layout` is the hash of the parts' shapes.
  AllReduce(ReduceKind k, Group g, uint64_t layout)
      : Communication(static_cast<int>(k), std::move(g), layout), op_(k), flat_(true) {}
  std::pair<std::vector<array>, std::vector<int>> vmap(const std::vector<array>& in, const std::vector<int>& axes,
                                                       const std::vector<array>&) override {
    // Elementwise across ranks: the batch stays where it is. The flat form (average_gradients'
    // buckets) concatenates flattened parts, so a batch has no one place in it: no rule.
    if (flat_) return Primitive::vmap(in, axes, {});
    return {{all_reduce_node(in[0], op_, group_)}, {axes[0]}};
  }
  const char* name() const override { return reduce_name(op_); }
  bool supports_complex() const override { return true; }
  Run prepare(const std::vector<array>& in, array& out) override {
    std::vector<Part> parts;
    out.alloc();  // a single input's own buffer when nothing else reads it (donors)
    if (!flat_ && !in[0].flags().row_contiguous) {
      kernels::copy_strided(in[0], out.raw_data(), out.dtype(), out.strides());
      parts.push_back({0, static_cast<int64_t>(out.size()), std::nullopt});  // reduced in place
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
      impl().all_reduce(src ? src + off * isz : nullptr, dst + off * isz, count, out.dtype(), reduce_op(op_));
    }
    parts.clear();  // the inputs' buffers can go
  }
  uint64_t donors(const std::vector<array>& in, int) const override {
    return flat_ ? 0 : row_contiguous_donors(in, {0});
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
    if (out.dtype() == complex64) {
      complex64_t* y = static_cast<complex64_t*>(out.raw_data()) + off;
      const float inv = 1.0f / static_cast<float>(group_.size());
      for (size_t i = 0; i < count; ++i) y[i] = complex64_t(y[i].real() * inv, y[i].imag() * inv);
      return;
    }
    LOOM_DISPATCH_FLOAT(out.dtype(), T, {
      T* y = static_cast<T*>(out.raw_data()) + off;
      const compute_t<T> inv = compute_t<T>(1) / group_.size();
      for (size_t i = 0; i < count; ++i) y[i] = T(y[i] * inv);
    });
  }

  ReduceKind op_;
  bool flat_;
};

// A collective that reads its one input whole (made row-contiguous first) into a fresh output.
class WholeArray : public Communication {
 public:
  using Communication::Communication;
  bool supports_complex() const override { return true; }
  Run prepare(const std::vector<array>& in, array& out) override {
    out.alloc();
    array x = kernels::row_contiguous(in[0]);
    return {x, [this, x, out]() {
              if (out.size() != 0) communicate(x, out);
            }};
  }

 protected:
  virtual void communicate(const array& x, const array& out) const = 0;
  // The vmap rule of a collective whose ranks' blocks lie along axis 0: a batch there moves to axis
  // 1 first, and `node` makes the collective of the moved x.
  template <class Node>
  static std::pair<std::vector<array>, std::vector<int>> vmap_off_axis0(const array& x, int axis, Node node) {
    return {{node(axis == 0 ? moveaxis(x, 0, 1) : x)}, {axis == 0 ? 1 : axis}};
  }
};

class AllGather : public WholeArray {
 public:
  explicit AllGather(Group g) : WholeArray(kGatherKind, std::move(g)) {}
  std::pair<std::vector<array>, std::vector<int>> vmap(const std::vector<array>& in, const std::vector<int>& axes,
                                                       const std::vector<array>&) override {
    return vmap_off_axis0(in[0], axes[0], [this](const array& x) { return all_gather_node(x, group_); });
  }
  const char* name() const override { return "all_gather"; }
  void communicate(const array& x, const array& out) const override {
    impl().all_gather(x.raw_data(), out.raw_data(), x.size(), x.dtype());
  }
  // Block r of the sum of every rank's cotangent: a reduce-scatter, which moves 1/size of the bytes
  // an all_sum and a slice would.
  std::vector<array> vjp(const std::vector<array>&, const std::vector<array>& cot, const std::vector<int>&,
                         const std::vector<array>&) override {
    return {sum_scatter(cot[0], group_)};
  }
  std::vector<array> jvp(const std::vector<array>&, const std::vector<array>& t, const std::vector<int>&) override {
    return {all_gather(t[0], group_)};
  }
};

// The sum over the group of block rank() of x (x's axis 0 cut into size() equal blocks). Its vjp is
// all_gather: every rank's block of the input reached exactly one rank's output.
class SumScatter : public WholeArray {
 public:
  explicit SumScatter(Group g) : WholeArray(kScatterKind, std::move(g)) {}
  std::pair<std::vector<array>, std::vector<int>> vmap(const std::vector<array>& in, const std::vector<int>& axes,
                                                       const std::vector<array>&) override {
    return vmap_off_axis0(in[0], axes[0], [this](const array& x) { return sum_scatter_node(x, group_); });
  }
  const char* name() const override { return "sum_scatter"; }
  void communicate(const array& x, const array& out) const override {
    impl().reduce_scatter(x.raw_data(), out.raw_data(), out.size(), x.dtype(), ReduceOp::sum);
  }
  std::vector<array> vjp(const std::vector<array>&, const std::vector<array>& cot, const std::vector<int>&,
                         const std::vector<array>&) override {
    return {all_gather(cot[0], group_)};
  }
  std::vector<array> jvp(const std::vector<array>&, const std::vector<array>& t, const std::vector<int>&) override {
    return {sum_scatter(t[0], group_)};
  }
};

// x's axis 0 cut into size() equal blocks: block j goes to member j, and the result's block j is what
// member j sent this one. A permutation of the group's blocks, so its vjp is itself (the cotangent of
// block j comes back from the member it went to) and so is its jvp.
class AllToAll : public WholeArray {
 public:
  explicit AllToAll(Group g) : WholeArray(kAllToAllKind, std::move(g)) {}
  std::pair<std::vector<array>, std::vector<int>> vmap(const std::vector<array>& in, const std::vector<int>& axes,
                                                       const std::vector<array>&) override {
    return vmap_off_axis0(in[0], axes[0], [this](const array& x) { return all_to_all_node(x, group_); });
  }
  const char* name() const override { return "all_to_all"; }
  void communicate(const array& x, const array& out) const override {
    impl().all_to_all(x.raw_data(), out.raw_data(), x.size() / static_cast<size_t>(impl().size()), x.dtype());
  }
  std::vector<array> vjp(const std::vector<array>&, const std::vector<array>& cot, const std::vector<int>&,
                         const std::vector<array>&) override {
    return {all_to_all_node(cot[0], group_)};
  }
  std::vector<array> jvp(const std::vector<array>&, const std::vector<array>& t, const std::vector<int>&) override {
    return {all_to_all_node(t[0], group_)};
  }
};

// Member root's x, on every member; each member passes an x of that shape and dtype, which only the
// root's kernel reads. Root's x reached every member, so its gradient is the sum of every member's
// cotangent, and the others' x reached nothing: zero (computed from that same sum, so that every
// member runs the all_sum whatever its rank).
class Broadcast : public Communication {
 public:
  Broadcast(int root, Group g) : Communication(kBroadcastKind, std::move(g)), root_(root) {}
  Run prepare(const std::vector<array>& in, array& out) override {
    out.alloc();  // x's own buffer when nothing else reads it (donors)
    if (group_.rank() == root_) kernels::copy_into(in[0], out);
    return {out, [this, out]() {
              if (out.size() != 0) impl().broadcast(out.raw_data(), out.size(), out.dtype(), root_);
            }};
  }
  void check_agreement(const array& x) override {
    detail::check_agreement(impl(), name(), kind_, x, layout_hash({x.shape()}), root_);
  }
  uint64_t donors(const std::vector<array>& in, int) const override { return row_contiguous_donors(in, {0}); }
  std::pair<std::vector<array>, std::vector<int>> vmap(const std::vector<array>& in, const std::vector<int>& axes,
                                                       const std::vector<array>&) override {
    return {{broadcast_node(in[0], root_, group_)}, {axes[0]}};
  }
  std::vector<array> vjp(const std::vector<array>&, const std::vector<array>& cot, const std::vector<int>&,
                         const std::vector<array>&) override {
    const array s = all_sum(cot[0], group_);
    return {where(array(group_.rank() == root_), s, zeros_like(s))};
  }
  std::vector<array> jvp(const std::vector<array>&, const std::vector<array>& t, const std::vector<int>&) override {
    return {broadcast_node(t[0], root_, group_)};
  }
  const char* name() const override { return "broadcast"; }
  bool supports_complex() const override { return true; }

 private:
  int root_;
};

// Every member waits here until all have arrived: the signature check before the (empty) run is
// the exchange that makes it so, and the fault watch covers the wait like any collective's.
class Barrier : public Communication {
 public:
  explicit Barrier(Group g) : Communication(kBarrierKind, std::move(g)) {}
  Run prepare(const std::vector<array>&, array& out) override {
    out.alloc();
    *static_cast<bool*>(out.raw_data()) = true;
    return {out, [] {}};
  }
  const char* name() const override { return "barrier"; }
  bool is_differentiable() const override { return false; }
};

// No batching rule: the receiving rank's recv depends on no batched input, so it could not know the
// batched shape. Inputs past a send's x, and a recv's inputs, only order them (`after`).
class Send : public Communication {
 public:
  Send(int dst, Group g) : Communication(kPointToPointKind, std::move(g)), dst_(dst) {}
  Run prepare(const std::vector<array>& in, array& out) override {
    out.copy_shared_buffer(in[0]);
    array x = kernels::row_contiguous(in[0]);
    return {x, [this, x]() { communicate(x); }};
  }
  void communicate(const array& x) const {
    impl().send(x.raw_data(), x.size(), x.dtype(), dst_);
  }
  void check_agreement(const array& x) override { send_signature(impl(), dst_, kind_, x); }
  const char* name() const override { return "send"; }
  bool supports_complex() const override { return true; }
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
    impl().recv(out.raw_data(), out.size(), out.dtype(), src_);
  }
  void check_agreement(const array& expected) override { check_signature_from(impl(), src_, kind_, expected); }
  const char* name() const override { return "recv"; }
  bool supports_complex() const override { return true; }
  bool is_differentiable() const override { return false; }

 private:
  int src_;
};

// A send to dst and a receive from src as one exchange (exchange_checked: the signatures and the data
// both ways, the sends not waiting for the peer). Inputs past x only order it (after).
class SendRecv : public Communication {
 public:
  SendRecv(int dst, int src, Group g) : Communication(kPointToPointKind, std::move(g)), dst_(dst), src_(src) {}
  Run prepare(const std::vector<array>& in, array& out) override {
    out.alloc();
    array x = kernels::row_contiguous(in[0]);
    return {x, [this, x, out]() { exchange_checked(impl(), dst_, kind_, x, src_, out); }};
  }
  void check_agreement(const array&) override {}  // the exchange carries the signatures
  const char* name() const override { return "send_recv"; }
  bool supports_complex() const override { return true; }
  bool is_differentiable() const override { return false; }

 private:
  int dst_, src_;
};

// Every member passed the same description, or every member throws naming each one's: a check that
// the members are about to run the same schedule of messages (nn::Pipeline's), made in its order.
class Agree : public Communication {
 public:
  Agree(std::string what, Group g) : Communication(kAgreeKind, std::move(g)), what_(std::move(what)) {}
  Run prepare(const std::vector<array>&, array& out) override {
    out.alloc();
    *static_cast<bool*>(out.raw_data()) = true;
    return {out, [this]() { check(); }};
  }
  void check_agreement(const array&) override {}  // the run is the check
  const char* name() const override { return "agree"; }
  bool is_differentiable() const override { return false; }

 private:
  static constexpr size_t kShown = 240;  // bytes of each member's description in the error
  void check() const {
    uint64_t h = 1469598103934665603ull;  // FNV-1a of the whole description
    for (unsigned char c : what_) h = (h ^ c) * 1099511628211ull;
    if (impl().agree(h)) return;
    const int n = impl().size();
    std::vector<char> mine(kShown, 0), all(kShown * static_cast<size_t>(n));
    std::memcpy(mine.data(), what_.data(), std::min(what_.size(), kShown - 1));
    impl().all_gather(mine.data(), all.data(), kShown, uint8);
    std::string list;
    for (int r = 0; r < n; ++r) list += msg(r ? "; " : "", "rank ", r, ": ", std::string(all.data() + r * kShown));
    throw std::runtime_error(msg("[agree] the ranks disagree: ", list));
  }
  std::string what_;
};

}  // namespace

const char* reduce_name(ReduceKind k) {
  return k == ReduceKind::sum ? "all_sum" : k == ReduceKind::mean ? "all_mean" : k == ReduceKind::max ? "all_max" : "all_min";
}

array all_reduce_node(const array& x, ReduceKind k, const Group& g) {
  return array(x.shape(), x.dtype(), std::make_shared<AllReduce>(k, g), {x});
}

array all_reduce_flat_node(const std::vector<array>& xs, ReduceKind k, const Group& g) {
  int64_t total = 0;
  std::vector<Shape> shapes;
  for (const array& x : xs) {
    total += static_cast<int64_t>(x.size());
    shapes.push_back(x.shape());
  }
  return array({static_cast<int>(total)}, xs[0].dtype(), std::make_shared<AllReduce>(k, g, layout_hash(shapes)), xs);
}

array all_gather_node(const array& x, const Group& g) {
  Shape s = x.shape();
  s[0] *= g.size();
  return array(s, x.dtype(), std::make_shared<AllGather>(g), {x});
}

array sum_scatter_node(const array& x, const Group& g) {
  Shape s = x.shape();
  s[0] /= g.size();
  return array(s, x.dtype(), std::make_shared<SumScatter>(g), {x});
}

array all_to_all_node(const array& x, const Group& g) {
  return array(x.shape(), x.dtype(), std::make_shared<AllToAll>(g), {x});
}

array broadcast_node(const array& x, int root, const Group& g) {
  return array(x.shape(), x.dtype(), std::make_shared<Broadcast>(root, g), {x});
}

array barrier_node(const Group& g) { return array(Shape{}, bool_, std::make_shared<Barrier>(g), {}); }

array send_node(const array& x, int dst, const Group& g, const std::vector<array>& after) {
  std::vector<array> in{x};
  in.insert(in.end(), after.begin(), after.end());
  return array(x.shape(), x.dtype(), std::make_shared<Send>(dst, g), std::move(in));
}

array recv_node(const Shape& shape, Dtype dtype, int src, const Group& g, const std::vector<array>& after) {
  return array(shape, dtype, std::make_shared<Recv>(src, g), after);
}

array send_recv_node(const array& x, int dst, const Shape& shape, Dtype dtype, int src, const Group& g,
                     const std::vector<array>& after) {
  std::vector<array> in{x};
  in.insert(in.end(), after.begin(), after.end());
  return array(shape, dtype, std::make_shared<SendRecv>(dst, src, g), std::move(in));
}

array agree_node(const std::string& what, const Group& g, const std::vector<array>& after) {
  return array(Shape{}, bool_, std::make_shared<Agree>(what, g), after);
}

}  // namespace loom::distributed::detail

#include <mpi.h>

#include <cstdlib>
#include <mutex>

#include "loom/core/primitive.h"
#include "loom/distributed/distributed.h"
#include "loom/ops/kernels/elementwise.h"
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

void finalize_mpi() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Finalize();
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

enum class ReduceKind { sum = 0, max = 1, min = 2 };

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

const char* kind_name(ReduceKind k) { return k == ReduceKind::sum ? "all_sum" : k == ReduceKind::max ? "all_max" : "all_min"; }

class AllReduce : public UnaryPrimitive {
 public:
  AllReduce(ReduceKind k, Group g) : kind_(k), group_(std::move(g)) {}
  void eval_cpu(const std::vector<array>& in, array& out) override {
    array x = kernels::row_contiguous(in[0]);
    out.alloc_or_donate(x);
    if (out.size() == 0) return;
    const void* src = out.raw_data() == x.raw_data() ? MPI_IN_PLACE : x.raw_data();
    check_mpi(MPI_Allreduce(src, out.raw_data(), static_cast<int>(out.size()), mpi_type(out.dtype()),
                            mpi_op(out.dtype(), kind_), group_.impl()->comm),
              kind_name(kind_));
  }
  std::vector<array> vjp(const std::vector<array>& p, const std::vector<array>& cot, const std::vector<int>&,
                         const std::vector<array>& outputs) override {
    // The loss is taken to be summed over ranks: d/dx_r sum_r' L(sum_q x_q) = sum_r' cot_r'.
    if (kind_ == ReduceKind::sum) return {all_sum(cot[0], group_)};
    array mask = astype(equal(p[0], outputs[0]), cot[0].dtype());
    return {multiply(all_sum(cot[0], group_), mask)};
  }
  std::vector<array> jvp(const std::vector<array>& p, const std::vector<array>& t, const std::vector<int>&) override {
    if (kind_ == ReduceKind::sum) return {all_sum(t[0], group_)};
    array y(p[0].shape(), p[0].dtype(), std::make_shared<AllReduce>(kind_, group_), {p[0]});
    // The tangent of the process holding the extreme value, shared with everyone.
    array mask = astype(equal(p[0], y), t[0].dtype());
    return {all_sum(multiply(t[0], mask), group_)};
  }
  const char* name() const override { return kind_name(kind_); }

 private:
  ReduceKind kind_;
  Group group_;
};

class AllGather : public UnaryPrimitive {
 public:
  explicit AllGather(Group g) : group_(std::move(g)) {}
  void eval_cpu(const std::vector<array>& in, array& out) override {
    array x = kernels::row_contiguous(in[0]);
    out.alloc();
    if (out.size() == 0) return;
    int count = static_cast<int>(x.size());
    MPI_Datatype t = mpi_type(x.dtype());
    check_mpi(MPI_Allgather(x.raw_data(), count, t, out.raw_data(), count, t, group_.impl()->comm), "all_gather");
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
  const char* name() const override { return "all_gather"; }

 private:
  Group group_;
};

class Send : public UnaryPrimitive {
 public:
  Send(int dst, Group g) : dst_(dst), group_(std::move(g)) {}
  void eval_cpu(const std::vector<array>& in, array& out) override {
    array x = kernels::row_contiguous(in[0]);
    check_mpi(MPI_Send(x.raw_data(), static_cast<int>(x.size()), mpi_type(x.dtype()), dst_, 0, group_.impl()->comm),
              "send");
    out.copy_shared_buffer(in[0]);
  }
  const char* name() const override { return "send"; }
  bool is_differentiable() const override { return false; }

 private:
  int dst_;
  Group group_;
};

class Recv : public UnaryPrimitive {
 public:
  Recv(int src, Group g) : src_(src), group_(std::move(g)) {}
  void eval_cpu(const std::vector<array>&, array& out) override {
    out.alloc();
    MPI_Status status;
    check_mpi(MPI_Recv(out.raw_data(), static_cast<int>(out.size()), mpi_type(out.dtype()), src_, 0,
                       group_.impl()->comm, &status),
              "recv");
  }
  const char* name() const override { return "recv"; }
  bool is_differentiable() const override { return false; }

 private:
  int src_;
  Group group_;
};

Group resolve(const std::optional<Group>& g) { return g ? *g : init(); }

array all_reduce(const array& x, ReduceKind k, const std::optional<Group>& group) {
  Group g = resolve(group);
  if (g.size() == 1) return x;  // nothing to combine: no copy, no node
  return array(x.shape(), x.dtype(), std::make_shared<AllReduce>(k, g), {x});
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
      if (!initialized) {
        int provided = 0;
        check_mpi(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided), "distributed::init");
        std::atexit(finalize_mpi);
      }
      // Errors come back as codes and become exceptions instead of aborting inside MPI.
      MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
      impl->comm = MPI_COMM_WORLD;
      MPI_Comm_rank(MPI_COMM_WORLD, &impl->rank);
      MPI_Comm_size(MPI_COMM_WORLD, &impl->size);
      mpi_joined = true;
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
array all_min(const array& x, std::optional<Group> group) { return all_reduce(x, ReduceKind::min, group); }

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

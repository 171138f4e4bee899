// linalg's factorizations, each one LAPACK call per matrix (ops/linalg.h). Built once, not per
// instruction set (CMakeLists.txt): the work is LAPACK's.
#include <complex>
#include <cstring>
#include <limits>

#define lapack_complex_float std::complex<float>
#define lapack_complex_double std::complex<double>
#include <lapack.h>

#include "loom/core/copy.h"
#include "loom/core/primitive.h"
#include "loom/core/serialize.h"
#include "loom/ops/batching.h"
#include "loom/ops/linalg.h"
#include "loom/ops/ops.h"
#include "loom/ops/utils.h"

namespace loom::linalg {

using detail::msg;
using detail::shape_str;

namespace {

using cfloat = std::complex<float>;

void check_matrices(const array& a, const char* op) {
  if (a.dtype() != float32 && a.dtype() != float64 && a.dtype() != complex64) {
    throw std::invalid_argument(msg("[", op, "] arrays must be float32, float64 or complex64; got ", a.dtype()));
  }
  if (a.ndim() < 2) {
    throw std::invalid_argument(msg("[", op, "] needs an array of at least 2 dimensions; got shape ",
                                    shape_str(a.shape())));
  }
  // LAPACK counts in 32-bit ints.
  const int64_t m = a.shape()[a.ndim() - 2], n = a.shape()[a.ndim() - 1];
  if (m * n > std::numeric_limits<int>::max() / 8) {
    throw std::invalid_argument(msg("[", op, "] a ", m, "x", n, " matrix is beyond LAPACK's 32-bit sizes"));
  }
}

template <typename T>
bool all_finite(const T* p, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    if constexpr (std::is_same_v<T, cfloat>) {
      if (!std::isfinite(p[i].real()) || !std::isfinite(p[i].imag())) return false;
    } else if (!std::isfinite(p[i])) {
      return false;
    }
  }
  return true;
}

// gesdd for one element type: the real and complex routines differ in their real workspace.
void gesdd(char jobz, int m, int n, float* a, float* s, float* u, int ldu, float* vt, int ldvt, float* work,
           int lwork, float*, int* iwork, int* info) {
  LAPACK_sgesdd(&jobz, &m, &n, a, &m, s, u, &ldu, vt, &ldvt, work, &lwork, iwork, info);
}
void gesdd(char jobz, int m, int n, double* a, double* s, double* u, int ldu, double* vt, int ldvt, double* work,
           int lwork, double*, int* iwork, int* info) {
  LAPACK_dgesdd(&jobz, &m, &n, a, &m, s, u, &ldu, vt, &ldvt, work, &lwork, iwork, info);
}
void gesdd(char jobz, int m, int n, cfloat* a, float* s, cfloat* u, int ldu, cfloat* vt, int ldvt, cfloat* work,
           int lwork, float* rwork, int* iwork, int* info) {
  LAPACK_cgesdd(&jobz, &m, &n, a, &m, s, u, &ldu, vt, &ldvt, work, &lwork, rwork, iwork, info);
}

template <typename T>
void set_identity(T* p, int n) {
  std::fill(p, p + size_t(n) * n, T(0));
  for (int i = 0; i < n; ++i) p[size_t(i) * n + i] = T(1);
}

class SVD : public Primitive {
 public:
  explicit SVD(bool compute_uv) : compute_uv_(compute_uv) {}
  void save(loom::detail::Writer& w) const override { w.put(compute_uv_); }

  void eval_cpu(const std::vector<array>& inputs, std::vector<array>& outputs) override {
    array a = kernels::row_contiguous(inputs[0]);
    for (auto& o : outputs) o.alloc();
    const size_t r = a.ndim();
    const int m = int(a.shape()[r - 2]), n = int(a.shape()[r - 1]), k = std::min(m, n);
    size_t batch = 1;
    for (size_t d = 0; d + 2 < r; ++d) batch *= size_t(a.shape()[d]);
    if (a.dtype() == float32) run<float, float>(a, outputs, m, n, k, batch);
    if (a.dtype() == float64) run<double, double>(a, outputs, m, n, k, batch);
    if (a.dtype() == complex64) run<cfloat, float>(a, outputs, m, n, k, batch);
  }

  bool supports_complex() const override { return true; }
  // Every matrix of a stack is factored on its own: the batch is one more stack axis, first.
  std::pair<std::vector<array>, std::vector<int>> vmap(const std::vector<array>& in, const std::vector<int>& axes,
                                                       const std::vector<array>& outs) override {
    return detail::same_op_batch_first({detail::batch_first(in[0], axes[0])}, outs, detail::vmap_size(in, axes));
  }
  const char* name() const override { return "SVD"; }
  void print(std::ostream& os) const override { os << "SVD(" << (compute_uv_ ? "uv" : "values") << ")"; }

 private:
  // a (m x n, row-major) is, read as LAPACK's column-major, a^T (n x m). gesdd of a^T = U' S V'^H
  // gives a = conj(V') S U'^T: LAPACK's V'^H buffer (m x m) read row-major is our U, and its U'
  // buffer (n x n) read row-major is our Vt, with no transposes.
  template <typename T, typename R>
  void run(const array& a, std::vector<array>& outputs, int m, int n, int k, size_t batch) {
    const T* src = reinterpret_cast<const T*>(a.raw_data());
    R* sv = reinterpret_cast<R*>(outputs[compute_uv_ ? 1 : 0].raw_data());
    T* u = compute_uv_ ? reinterpret_cast<T*>(outputs[0].raw_data()) : nullptr;
    T* vt = compute_uv_ ? reinterpret_cast<T*>(outputs[2].raw_data()) : nullptr;
    if (k == 0) {  // an empty matrix: no singular values, identity singular vectors (numpy's)
      for (size_t b = 0; compute_uv_ && b < batch; ++b) {
        set_identity(u + b * size_t(m) * m, m);
        set_identity(vt + b * size_t(n) * n, n);
      }
      return;
    }
    const char jobz = compute_uv_ ? 'A' : 'N';
    std::vector<T> work_a(size_t(m) * n);
    std::vector<int> iwork(8 * size_t(k));
    const size_t big = std::max(m, n);
    std::vector<R> rwork(std::is_same_v<T, cfloat>
                             ? std::max<size_t>(5 * size_t(k) * k + 7 * k, 2 * big * k + 2 * size_t(k) * k + k)
                             : 1);
    int info = 0;
    T query{};
    gesdd(jobz, n, m, work_a.data(), sv, vt, n, u, m, &query, -1, rwork.data(), iwork.data(), &info);
    if (info != 0) throw std::runtime_error(msg("[linalg::svd] LAPACK's workspace query failed (info ", info, ")"));
    const int lwork = std::max(1, int(std::real(query)));
    std::vector<T> work(static_cast<size_t>(lwork));
    for (size_t b = 0; b < batch; ++b) {
      const T* mat = src + b * size_t(m) * n;
      if (!all_finite(mat, size_t(m) * n)) {
        throw std::runtime_error(msg("[linalg::svd] matrix ", b, " of the batch holds NaN or infinity"));
      }
      std::memcpy(work_a.data(), mat, sizeof(T) * size_t(m) * n);
      T* ub = compute_uv_ ? u + b * size_t(m) * m : nullptr;
      T* vb = compute_uv_ ? vt + b * size_t(n) * n : nullptr;
      gesdd(jobz, n, m, work_a.data(), sv + b * k, vb, n, ub, m, work.data(), lwork, rwork.data(), iwork.data(),
            &info);
      if (info != 0) {
        throw std::runtime_error(msg("[linalg::svd] LAPACK's gesdd ", info > 0 ? "did not converge" : "failed",
                                     " on matrix ", b, " of the batch (info ", info, ")"));
      }
    }
  }

  bool compute_uv_;
};
const bool kSVDLoads =
    loom::detail::register_primitive("SVD", [](loom::detail::Reader& r) -> std::shared_ptr<Primitive> {
      return std::make_shared<SVD>(r.get<bool>());
    });

}  // namespace

std::vector<array> svd(const array& a, bool compute_uv, StreamOrDevice s) {
  OnStream on(s);
  check_matrices(a, "linalg::svd");
  const size_t r = a.ndim();
  const int m = a.shape()[r - 2], n = a.shape()[r - 1];
  Shape s_shape(a.shape().begin(), a.shape().end() - 1);
  s_shape.back() = std::min(m, n);
  const Dtype s_dtype = a.dtype() == complex64 ? float32 : a.dtype();
  auto prim = std::make_shared<SVD>(compute_uv);
  if (!compute_uv) return {array(s_shape, s_dtype, prim, {a})};
  Shape u_shape = a.shape(), vt_shape = a.shape();
  u_shape[r - 1] = m;
  vt_shape[r - 2] = n;
  return array::make_arrays({u_shape, s_shape, vt_shape}, {a.dtype(), s_dtype, a.dtype()}, prim, {a});
}

}  // namespace loom::linalg

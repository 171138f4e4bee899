// linalg's factorizations (ops/linalg.h): one LAPACK call per matrix of a batch. Built once, not per
// instruction set (CMakeLists.txt): the work is LAPACK's.
//
// Loom's matrices are row-major and LAPACK's column-major, so each matrix is copied into a
// column-major buffer (the copy is O(n^2) against the factorization's O(n^3)) and its factors copied
// back; the calls then read exactly the matrix the user gave, triangles included.
#include <complex>
#include <cstring>
#include <functional>
#include <limits>

#define lapack_complex_float std::complex<float>
#define lapack_complex_double std::complex<double>
#include <lapack.h>

#include "loom/core/copy.h"
#include "loom/core/loops.h"
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

// ---- LAPACK, one overload per element type ----

int getrf(int m, int n, float* a, int* ipiv) {
  int info = 0, lda = std::max(1, m);
  LAPACK_sgetrf(&m, &n, a, &lda, ipiv, &info);
  return info;
}
int getrf(int m, int n, double* a, int* ipiv) {
  int info = 0, lda = std::max(1, m);
  LAPACK_dgetrf(&m, &n, a, &lda, ipiv, &info);
  return info;
}
int getrf(int m, int n, cfloat* a, int* ipiv) {
  int info = 0, lda = std::max(1, m);
  LAPACK_cgetrf(&m, &n, a, &lda, ipiv, &info);
  return info;
}
int getri(int n, float* a, const int* ipiv, float* work, int lwork) {
  int info = 0, lda = std::max(1, n);
  LAPACK_sgetri(&n, a, &lda, ipiv, work, &lwork, &info);
  return info;
}
int getri(int n, double* a, const int* ipiv, double* work, int lwork) {
  int info = 0, lda = std::max(1, n);
  LAPACK_dgetri(&n, a, &lda, ipiv, work, &lwork, &info);
  return info;
}
int getri(int n, cfloat* a, const int* ipiv, cfloat* work, int lwork) {
  int info = 0, lda = std::max(1, n);
  LAPACK_cgetri(&n, a, &lda, ipiv, work, &lwork, &info);
  return info;
}
// Solves A^T X = B ('T') given getrf's factors of A (A is the transpose of the matrix we solve with).
int getrs_t(int n, int nrhs, const float* a, const int* ipiv, float* b) {
  int info = 0, ld = std::max(1, n);
  const char trans = 'T';
  LAPACK_sgetrs(&trans, &n, &nrhs, a, &ld, ipiv, b, &ld, &info);
  return info;
}
int getrs_t(int n, int nrhs, const double* a, const int* ipiv, double* b) {
  int info = 0, ld = std::max(1, n);
  const char trans = 'T';
  LAPACK_dgetrs(&trans, &n, &nrhs, a, &ld, ipiv, b, &ld, &info);
  return info;
}
int getrs_t(int n, int nrhs, const cfloat* a, const int* ipiv, cfloat* b) {
  int info = 0, ld = std::max(1, n);
  const char trans = 'T';
  LAPACK_cgetrs(&trans, &n, &nrhs, a, &ld, ipiv, b, &ld, &info);
  return info;
}
int potrf(char uplo, int n, float* a) {
  int info = 0, lda = std::max(1, n);
  LAPACK_spotrf(&uplo, &n, a, &lda, &info);
  return info;
}
int potrf(char uplo, int n, double* a) {
  int info = 0, lda = std::max(1, n);
  LAPACK_dpotrf(&uplo, &n, a, &lda, &info);
  return info;
}
int potrf(char uplo, int n, cfloat* a) {
  int info = 0, lda = std::max(1, n);
  LAPACK_cpotrf(&uplo, &n, a, &lda, &info);
  return info;
}
int trtri(char uplo, int n, float* a) {
  int info = 0, lda = std::max(1, n);
  const char diag = 'N';
  LAPACK_strtri(&uplo, &diag, &n, a, &lda, &info);
  return info;
}
int trtri(char uplo, int n, double* a) {
  int info = 0, lda = std::max(1, n);
  const char diag = 'N';
  LAPACK_dtrtri(&uplo, &diag, &n, a, &lda, &info);
  return info;
}
int trtri(char uplo, int n, cfloat* a) {
  int info = 0, lda = std::max(1, n);
  const char diag = 'N';
  LAPACK_ctrtri(&uplo, &diag, &n, a, &lda, &info);
  return info;
}
int trtrs_t(char uplo, int n, int nrhs, const float* a, float* b) {
  int info = 0, ld = std::max(1, n);
  const char trans = 'T', diag = 'N';
  LAPACK_strtrs(&uplo, &trans, &diag, &n, &nrhs, a, &ld, b, &ld, &info);
  return info;
}
int trtrs_t(char uplo, int n, int nrhs, const double* a, double* b) {
  int info = 0, ld = std::max(1, n);
  const char trans = 'T', diag = 'N';
  LAPACK_dtrtrs(&uplo, &trans, &diag, &n, &nrhs, a, &ld, b, &ld, &info);
  return info;
}
int trtrs_t(char uplo, int n, int nrhs, const cfloat* a, cfloat* b) {
  int info = 0, ld = std::max(1, n);
  const char trans = 'T', diag = 'N';
  LAPACK_ctrtrs(&uplo, &trans, &diag, &n, &nrhs, a, &ld, b, &ld, &info);
  return info;
}
int geqrf(int m, int n, float* a, float* tau, float* work, int lwork) {
  int info = 0, lda = std::max(1, m);
  LAPACK_sgeqrf(&m, &n, a, &lda, tau, work, &lwork, &info);
  return info;
}
int geqrf(int m, int n, double* a, double* tau, double* work, int lwork) {
  int info = 0, lda = std::max(1, m);
  LAPACK_dgeqrf(&m, &n, a, &lda, tau, work, &lwork, &info);
  return info;
}
int geqrf(int m, int n, cfloat* a, cfloat* tau, cfloat* work, int lwork) {
  int info = 0, lda = std::max(1, m);
  LAPACK_cgeqrf(&m, &n, a, &lda, tau, work, &lwork, &info);
  return info;
}
int orgqr(int m, int n, int k, float* a, const float* tau, float* work, int lwork) {
  int info = 0, lda = std::max(1, m);
  LAPACK_sorgqr(&m, &n, &k, a, &lda, tau, work, &lwork, &info);
  return info;
}
int orgqr(int m, int n, int k, double* a, const double* tau, double* work, int lwork) {
  int info = 0, lda = std::max(1, m);
  LAPACK_dorgqr(&m, &n, &k, a, &lda, tau, work, &lwork, &info);
  return info;
}
int orgqr(int m, int n, int k, cfloat* a, const cfloat* tau, cfloat* work, int lwork) {
  int info = 0, lda = std::max(1, m);
  LAPACK_cungqr(&m, &n, &k, a, &lda, tau, work, &lwork, &info);
  return info;
}
// syevd / heevd: eigenvalues ascending in w, eigenvectors (jobz 'V') in a's columns.
int syevd(char jobz, char uplo, int n, float* a, float* w, float* work, int lwork, float*, int, int* iwork,
          int liwork) {
  int info = 0, lda = std::max(1, n);
  LAPACK_ssyevd(&jobz, &uplo, &n, a, &lda, w, work, &lwork, iwork, &liwork, &info);
  return info;
}
int syevd(char jobz, char uplo, int n, double* a, double* w, double* work, int lwork, double*, int, int* iwork,
          int liwork) {
  int info = 0, lda = std::max(1, n);
  LAPACK_dsyevd(&jobz, &uplo, &n, a, &lda, w, work, &lwork, iwork, &liwork, &info);
  return info;
}
int syevd(char jobz, char uplo, int n, cfloat* a, float* w, cfloat* work, int lwork, float* rwork, int lrwork,
          int* iwork, int liwork) {
  int info = 0, lda = std::max(1, n);
  LAPACK_cheevd(&jobz, &uplo, &n, a, &lda, w, work, &lwork, rwork, &lrwork, iwork, &liwork, &info);
  return info;
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

// ---- batches of matrices ----

template <typename T>
struct real_of {
  using type = T;
};
template <>
struct real_of<cfloat> {
  using type = float;
};
template <typename T>
using real_t = typename real_of<T>::type;

// Calls f with a value of the element type of `d` (float32, float64 or complex64).
template <typename F>
void by_dtype(Dtype d, F&& f) {
  if (d == float32) {
    f(float{});
  } else if (d == float64) {
    f(double{});
  } else {
    f(cfloat{});
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

// Row-major (m x n) to column-major, and back.
template <typename T>
void to_cols(const T* src, int m, int n, T* dst) {
  for (int i = 0; i < m; ++i) {
    for (int j = 0; j < n; ++j) dst[size_t(j) * m + i] = src[size_t(i) * n + j];
  }
}
template <typename T>
void from_cols(const T* src, int m, int n, T* dst) {
  for (int i = 0; i < m; ++i) {
    for (int j = 0; j < n; ++j) dst[size_t(i) * n + j] = src[size_t(j) * m + i];
  }
}

size_t batch_count(const Shape& s) {
  size_t b = 1;
  for (size_t d = 0; d + 2 < s.size(); ++d) b *= size_t(s[d]);
  return b;
}

// The op's name, as the user called it, for value errors found while evaluating.
[[noreturn]] void fail(const char* op, size_t b, const std::string& what) {
  throw std::runtime_error(msg("[linalg::", op, "] matrix ", b, " of the batch ", what));
}
template <typename T>
void check_finite(const char* op, const T* p, size_t count, size_t b) {
  if (!all_finite(p, count)) fail(op, b, "holds NaN or infinity");
}

// Runs f(b0, b1) over the matrices [0, batch) of a stack, split across Loom's threads when there are
// enough of them for the work: LAPACK runs single-threaded in Loom (core/threads.cpp keeps OpenBLAS at
// one thread and splits products itself), so a batch is where a factorization's parallelism is.
template <typename F>
void for_each_matrix(size_t batch, int64_t flops_each, F&& f) {
  const size_t threshold = std::max<size_t>(2, size_t((int64_t(1) << 18) / std::max<int64_t>(flops_each, 1)));
  kernels::parallel_for(batch, f, threshold);
}

// ---- shape and dtype checks when an op is built ----

void check_dtype(const array& a, const char* op) {
  if (a.dtype() != float32 && a.dtype() != float64 && a.dtype() != complex64) {
    throw std::invalid_argument(msg("[linalg::", op, "] arrays must be float32, float64 or complex64; got ", a.dtype()));
  }
}

void check_matrices(const array& a, const char* op) {
  check_dtype(a, op);
  if (a.ndim() < 2) {
    throw std::invalid_argument(msg("[linalg::", op, "] needs an array of at least 2 dimensions; got shape ",
                                    shape_str(a.shape())));
  }
  // LAPACK counts in 32-bit ints.
  const int64_t m = a.shape()[a.ndim() - 2], n = a.shape()[a.ndim() - 1];
  if (m * n > std::numeric_limits<int>::max() / 8) {
    throw std::invalid_argument(msg("[linalg::", op, "] a ", m, "x", n, " matrix is beyond LAPACK's 32-bit sizes"));
  }
}

void check_square(const array& a, const char* op) {
  check_matrices(a, op);
  if (a.shape(-1) != a.shape(-2)) {
    throw std::invalid_argument(msg("[linalg::", op, "] needs square matrices; got shape ", shape_str(a.shape())));
  }
}

template <typename T>
void set_identity(T* p, int n) {
  std::fill(p, p + size_t(n) * n, T(0));
  for (int i = 0; i < n; ++i) p[size_t(i) * n + i] = T(1);
}

// ---- shapeless compile: shapes of a square stack's results ----

const Shape& square_shape(const Shape& a, const char* who) {
  if (a.size() < 2 || a[a.size() - 1] != a[a.size() - 2]) {
    throw std::invalid_argument(msg("[compile] ", who, " needs square matrices; got shape ", shape_str(a)));
  }
  return a;
}
// {values} or {values, vectors} of an eigendecomposition.
std::vector<Shape> eigen_shapes(const Shape& a, bool vectors, const char* who) {
  Shape w(square_shape(a, who).begin(), a.end() - 1);
  if (!vectors) return {w};
  return {w, a};
}

// ---- matrix algebra on arrays, for the derivatives ----

bool is_cplx(const array& a) { return a.dtype() == complex64; }
array mT(const array& a) { return swapaxes(a, -1, -2); }
array mH(const array& a) { return is_cplx(a) ? conjugate(mT(a)) : mT(a); }
// (..., k) -> (..., k, k) with v on the diagonal.
array diag_embed(const array& v) {
  const int k = v.shape(-1);
  return multiply(expand_dims(v, -1), astype(eye(k), v.dtype()));
}
array diag_part(const array& x) { return diagonal(x, 0, -2, -1); }
// The lower (upper) triangle with its diagonal halved: the symmetric part's half that a triangle holds.
array phi(const array& x, bool upper) {
  const array t = upper ? triu(x) : tril(x);
  return subtract(t, multiply(diag_embed(diag_part(t)), array(0.5, t.dtype())));
}
// F_ij = 1 / (e_j - e_i) off the diagonal, 0 on it (e: (..., k) real values).
array gap_inverse(const array& e) {
  const int k = e.shape(-1);
  const array d = subtract(expand_dims(e, -2), expand_dims(e, -1));  // d_ij = e_j - e_i
  const array off = logical_not(astype(eye(k), bool_));
  return where(off, reciprocal(where(off, d, ones_like(d))), zeros_like(d));
}
// A function of a Hermitian matrix computed from one triangle (`upper` or lower) reads only that
// triangle. The tangent it sees: the triangle, mirrored.
array mirror_triangle(const array& t, bool upper) {
  return upper ? add(triu(t), mH(triu(t, 1))) : add(tril(t), mH(tril(t, -1)));
}
// The cotangent of the read triangle, given the gradient G of a function of the Hermitian matrix.
array fold_to_triangle(const array& g, bool upper) {
  return upper ? add(triu(g), mH(tril(g, -1))) : add(tril(g), mH(triu(g, 1)));
}
void real_only_derivative(const array& a, const char* op) {
  if (is_cplx(a)) {
    throw std::invalid_argument(msg("[linalg::", op, "] derivatives of complex inputs are not implemented (float32 and "
                                    "float64 only)"));
  }
}

template <typename T>
const T* cptr(const array& a) {
  return reinterpret_cast<const T*>(a.raw_data());
}
template <typename T>
T* mptr(array& a) {
  return reinterpret_cast<T*>(a.raw_data());
}

// The workspace size LAPACK asks for in a query's first work element.
template <typename T>
int lwork_of(T query) {
  return std::max(1, int(std::real(query)));
}

// Every matrix of a stack is factored on its own: a vmap batch is one more stack axis, first.
std::pair<std::vector<array>, std::vector<int>> stack_vmap(const std::vector<array>& in, const std::vector<int>& axes,
                                                          const std::vector<array>& outs) {
  const int size = detail::vmap_size(in, axes);
  std::vector<array> batched;
  for (size_t i = 0; i < in.size(); ++i) batched.push_back(detail::batch_first_broadcast(in[i], axes[i], size));
  return detail::same_op_batch_first(std::move(batched), outs, size);
}

// ---- SVD ----

class SVD : public Primitive {
 public:
  explicit SVD(bool compute_uv) : compute_uv_(compute_uv) {}
  void save(loom::detail::Writer& w) const override { w.put(compute_uv_); }

  void eval_cpu(const std::vector<array>& inputs, std::vector<array>& outputs) override {
    array a = kernels::row_contiguous(inputs[0]);
    for (auto& o : outputs) o.alloc();
    const size_t r = a.ndim();
    const int m = int(a.shape()[r - 2]), n = int(a.shape()[r - 1]), k = std::min(m, n);
    const size_t batch = batch_count(a.shape());
    by_dtype(a.dtype(), [&](auto tag) { run<decltype(tag)>(a, outputs, m, n, k, batch); });
  }

  // a = U_k diag(S) V_k^T with U_k, V_k the first k = min(m, n) columns of U and V (the rest are not
  // determined by a: their cotangents take no part, as PyTorch's full_matrices). The terms in
  // F_ij = 1 / (s_j^2 - s_i^2) make the derivative infinite where two singular values meet.
  std::vector<array> vjp(const std::vector<array>& p, const std::vector<array>& cot, const std::vector<int>&,
                         const std::vector<array>& outs) override {
    const array& a = p[0];
    real_only_derivative(a, "svd");
    const std::vector<array> usv = compute_uv_ ? outs : svd(a, true);
    const int m = a.shape(-2), n = a.shape(-1), k = std::min(m, n);
    const array uk = first_cols(usv[0], k), vk = mT(first_rows(usv[2], k)), s = usv[1];
    const array s_bar = compute_uv_ ? cot[1] : cot[0];
    array inner = diag_embed(s_bar);
    if (!compute_uv_) return {matmul(multiply(uk, expand_dims(s_bar, -2)), mT(vk))};
    const array u_bar = first_cols(cot[0], k), v_bar = mT(first_rows(cot[2], k));
    const array f = gap_inverse(square(s)), sm = diag_embed(s);
    const array j = multiply(f, subtract(matmul(mT(uk), u_bar), matmul(mT(u_bar), uk)));
    const array kk = multiply(f, subtract(matmul(mT(vk), v_bar), matmul(mT(v_bar), vk)));
    inner = add(inner, add(matmul(j, sm), matmul(sm, kk)));
    array out = matmul(matmul(uk, inner), mT(vk));
    const array s_inv = expand_dims(reciprocal(s), -2);  // scales columns
    if (m > k) {  // (I - U_k U_k^T) Ubar S^-1 V_k^T
      const array proj = subtract(u_bar, matmul(uk, matmul(mT(uk), u_bar)));
      out = add(out, matmul(multiply(proj, s_inv), mT(vk)));
    }
    if (n > k) {  // U_k S^-1 Vbar^T (I - V_k V_k^T)
      const array proj = subtract(v_bar, matmul(vk, matmul(mT(vk), v_bar)));
      out = add(out, matmul(multiply(uk, s_inv), mT(proj)));
    }
    return {out};
  }

  std::vector<array> jvp(const std::vector<array>& p, const std::vector<array>& t, const std::vector<int>&) override {
    const array& a = p[0];
    real_only_derivative(a, "svd");
    const std::vector<array> usv = svd(a, true);
    const int m = a.shape(-2), n = a.shape(-1), k = std::min(m, n);
    const array uk = first_cols(usv[0], k), vk = mT(first_rows(usv[2], k)), s = usv[1];
    const array dp = matmul(matmul(mT(uk), t[0]), vk);
    const array ds = diag_part(dp);
    if (!compute_uv_) return {ds};
    const array f = gap_inverse(square(s)), sm = diag_embed(s), s_inv = expand_dims(reciprocal(s), -2);
    array du = matmul(uk, multiply(f, add(matmul(dp, sm), matmul(sm, mT(dp)))));
    array dv = matmul(vk, multiply(f, add(matmul(sm, dp), matmul(mT(dp), sm))));
    // (I - U_k U_k^T) dA V_k S^-1 and (I - V_k V_k^T) dA^T U_k S^-1.
    if (m > k) du = add(du, multiply(subtract(matmul(t[0], vk), matmul(uk, dp)), s_inv));
    if (n > k) dv = add(dv, multiply(subtract(matmul(mT(t[0]), uk), matmul(vk, mT(dp))), s_inv));
    // The columns past k stay orthogonal to the first k: their tangent is their least change that does.
    auto complete = [&](const array& full, const array& basis, const array& d, int total) {
      if (total == k) return d;
      const array rest = last_cols(full, total - k);
      return concatenate({d, negative(matmul(basis, matmul(mT(d), rest)))}, -1);
    };
    return {complete(usv[0], uk, du, m), ds, mT(complete(mT(usv[2]), vk, dv, n))};
  }

  bool supports_complex() const override { return true; }
  std::pair<std::vector<array>, std::vector<int>> vmap(const std::vector<array>& in, const std::vector<int>& axes,
                                                       const std::vector<array>& outs) override {
    return stack_vmap(in, axes, outs);
  }
  const char* name() const override { return "SVD"; }
  void print(std::ostream& os) const override { os << "SVD(" << (compute_uv_ ? "uv" : "values") << ")"; }

  static array first_cols(const array& x, int k) { return slice(x, Shape(x.ndim(), 0), with_last(x.shape(), -1, k)); }
  static array first_rows(const array& x, int k) { return slice(x, Shape(x.ndim(), 0), with_last(x.shape(), -2, k)); }
  static array last_cols(const array& x, int c) {
    Shape start(x.ndim(), 0);
    start.back() = x.shape(-1) - c;
    return slice(x, start, x.shape());
  }

 private:
  static Shape with_last(Shape s, int axis, int v) {
    s[s.size() + axis] = v;
    return s;
  }
  // a (m x n, row-major) is, read as LAPACK's column-major, a^T (n x m). gesdd of a^T = U' S V'^H
  // gives a = conj(V') S U'^T: LAPACK's V'^H buffer (m x m) read row-major is our U, and its U'
  // buffer (n x n) read row-major is our Vt, with no transposes.
  template <typename T>
  void run(const array& a, std::vector<array>& outputs, int m, int n, int k, size_t batch) {
    using R = real_t<T>;
    const T* src = cptr<T>(a);
    R* sv = mptr<R>(outputs[compute_uv_ ? 1 : 0]);
    T* u = compute_uv_ ? mptr<T>(outputs[0]) : nullptr;
    T* vt = compute_uv_ ? mptr<T>(outputs[2]) : nullptr;
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
    const int lwork = lwork_of(query);
    std::vector<T> work(static_cast<size_t>(lwork));
    for (size_t b = 0; b < batch; ++b) {
      const T* mat = src + b * size_t(m) * n;
      check_finite("svd", mat, size_t(m) * n, b);
      std::memcpy(work_a.data(), mat, sizeof(T) * size_t(m) * n);
      T* ub = compute_uv_ ? u + b * size_t(m) * m : nullptr;
      T* vb = compute_uv_ ? vt + b * size_t(n) * n : nullptr;
      gesdd(jobz, n, m, work_a.data(), sv + b * k, vb, n, ub, m, work.data(), lwork, rwork.data(), iwork.data(),
            &info);
      if (info != 0) fail("svd", b, msg("was not factored: LAPACK's gesdd ", info > 0 ? "did not converge" : "failed",
                                        " (info ", info, ")"));
    }
  }

  bool compute_uv_;
};
const bool kSVDLoads =
    loom::detail::register_primitive("SVD", [](loom::detail::Reader& r) -> std::shared_ptr<Primitive> {
      return std::make_shared<SVD>(r.get<bool>());
    });

// ---- Inverse (general, or of a triangle) ----

class Inverse : public UnaryPrimitive {
 public:
  Inverse(bool tri, bool upper) : tri_(tri), upper_(upper) {}
  void save(loom::detail::Writer& w) const override { w.put(tri_, upper_); }
  bool is_equivalent(const Primitive& other) const override {
    auto* p = loom::detail::same_primitive(this, other);
    return p && p->tri_ == tri_ && p->upper_ == upper_;
  }
  std::vector<Shape> output_shapes(const std::vector<Shape>& in) const override { return {square_shape(in.at(0), name())}; }

  void eval_cpu(const std::vector<array>& in, array& out) override {
    array a = kernels::row_contiguous(in[0]);
    out.alloc();
    const int n = a.shape(-1);
    const size_t batch = batch_count(a.shape()), nn = size_t(n) * n;
    if (nn == 0) return;
    by_dtype(a.dtype(), [&](auto tag) {
      using T = decltype(tag);
      for_each_matrix(batch, int64_t(n) * n * n, [&](size_t b0, size_t b1) {
        const char* op = tri_ ? "tri_inv" : "inv";
        std::vector<T> m(nn), work;
        std::vector<int> ipiv(n);
        int lwork = 1;
        if (!tri_) {
          T query{};
          if (getri(n, m.data(), ipiv.data(), &query, -1) != 0) throw std::runtime_error("[linalg::inv] workspace query failed");
          lwork = lwork_of(query);
          work.resize(size_t(lwork));
        }
        for (size_t b = b0; b < b1; ++b) {
          const T* src = cptr<T>(a) + b * nn;
          T* dst = mptr<T>(out) + b * nn;
          check_finite(op, src, nn, b);
          // No transposes: the row-major matrix read column-major is A^T, and inv(A^T) read back
          // row-major is inv(A); A's lower triangle is A^T's upper one.
          std::memcpy(m.data(), src, sizeof(T) * nn);
          if (tri_) {
            const int info = trtri(upper_ ? 'L' : 'U', n, m.data());
            if (info > 0) fail(op, b, msg("is singular: its diagonal entry ", info - 1, " is zero"));
          } else {
            int info = getrf(n, n, m.data(), ipiv.data());
            if (info > 0) fail(op, b, msg("is singular: U[", info - 1, ", ", info - 1, "] of its LU factorization is zero"));
            info = getri(n, m.data(), ipiv.data(), work.data(), lwork);
            if (info != 0) fail(op, b, msg("was not inverted (LAPACK's getri info ", info, ")"));
          }
          std::memcpy(dst, m.data(), sizeof(T) * nn);
          if (tri_) {  // the other triangle held the input's entries
            for (int i = 0; i < n; ++i) {
              for (int j = 0; j < n; ++j) {
                if (upper_ ? j < i : j > i) dst[size_t(i) * n + j] = T(0);
              }
            }
          }
        }
      });
    });
  }
  // Y = A^-1: dY = -Y dA Y, Abar = -Y^H Ybar Y^H; a triangular inverse reads (and so differentiates
  // by) its triangle alone.
  std::vector<array> vjp(const std::vector<array>&, const std::vector<array>& cot, const std::vector<int>&,
                         const std::vector<array>& outs) override {
    const array yh = mH(outs[0]);
    return {mask(negative(matmul(matmul(yh, cot[0]), yh)))};
  }
  std::vector<array> jvp(const std::vector<array>& p, const std::vector<array>& t, const std::vector<int>&) override {
    const array y = tri_ ? tri_inv(p[0], upper_) : inv(p[0]);
    return {negative(matmul(matmul(y, mask(t[0])), y))};
  }
  bool supports_complex() const override { return true; }
  std::pair<std::vector<array>, std::vector<int>> vmap(const std::vector<array>& in, const std::vector<int>& axes,
                                                       const std::vector<array>& outs) override {
    return stack_vmap(in, axes, outs);
  }
  const char* name() const override { return "Inverse"; }
  void print(std::ostream& os) const override { os << "Inverse(" << (tri_ ? (upper_ ? "upper" : "lower") : "general") << ")"; }

 private:
  array mask(const array& x) const { return tri_ ? (upper_ ? triu(x) : tril(x)) : x; }
  bool tri_, upper_;
};
const bool kInverseLoads =
    loom::detail::register_primitive("Inverse", [](loom::detail::Reader& r) -> std::shared_ptr<Primitive> {
      bool tri, upper;
      r.get(tri, upper);
      return std::make_shared<Inverse>(tri, upper);
    });

// ---- Solve (LU with partial pivoting) and SolveTriangular ----

// a (..., n, n) and b (..., n, r) with one batch shape; out (..., n, r).
class Solve : public UnaryPrimitive {
 public:
  // triangular: -1 a general matrix (getrf, getrs); 0 / 1 a lower / upper triangle (trtrs).
  explicit Solve(int triangular) : tri_(triangular) {}
  void save(loom::detail::Writer& w) const override { w.put(tri_); }
  bool is_equivalent(const Primitive& other) const override {
    auto* p = loom::detail::same_primitive(this, other);
    return p && p->tri_ == tri_;
  }
  std::vector<Shape> output_shapes(const std::vector<Shape>& in) const override {
    const Shape &a = in.at(0), &b = in.at(1);
    if (a.size() != b.size() || a.back() != a[a.size() - 2] || b[b.size() - 2] != a.back() ||
        !std::equal(a.begin(), a.end() - 2, b.begin())) {
      throw std::invalid_argument(msg("[compile] ", name(), " cannot take a of shape ", shape_str(a), " and b of shape ",
                                      shape_str(b)));
    }
    return {b};
  }

  void eval_cpu(const std::vector<array>& in, array& out) override {
    array a = kernels::row_contiguous(in[0]), rhs = kernels::row_contiguous(in[1]);
    out.alloc();
    const int n = a.shape(-1), r = rhs.shape(-1);
    const size_t batch = batch_count(a.shape()), nn = size_t(n) * n, nr = size_t(n) * r;
    if (nr == 0) return;
    const char* op = tri_ < 0 ? "solve" : "solve_triangular";
    by_dtype(a.dtype(), [&](auto tag) {
      using T = decltype(tag);
      for_each_matrix(batch, int64_t(n) * n * (n + r), [&](size_t b0, size_t b1) {
        std::vector<T> m(nn), x(nr);
        std::vector<int> ipiv(n);
        for (size_t b = b0; b < b1; ++b) {
          const T* as = cptr<T>(a) + b * nn;
          const T* bs = cptr<T>(rhs) + b * nr;
          check_finite(op, as, nn, b);
          check_finite(op, bs, nr, b);
          // a read column-major is A^T: factor it as it lies and solve with its transpose ('T'); a
          // triangle of A is the other triangle of A^T, solved transposed the same way.
          std::memcpy(m.data(), as, sizeof(T) * nn);
          to_cols(bs, n, r, x.data());
          int info = 0;
          if (tri_ < 0) {
            info = getrf(n, n, m.data(), ipiv.data());
            if (info == 0) info = getrs_t(n, r, m.data(), ipiv.data(), x.data());
          } else {
            info = trtrs_t(tri_ ? 'L' : 'U', n, r, m.data(), x.data());
          }
          if (info > 0) {
            fail(op, b, tri_ < 0 ? msg("is singular: U[", info - 1, ", ", info - 1, "] of its LU factorization is zero")
                                 : msg("is singular: its diagonal entry ", info - 1, " is zero"));
          }
          if (info < 0) fail(op, b, msg("was not solved (LAPACK info ", info, ")"));
          from_cols(x.data(), n, r, mptr<T>(out) + b * nr);
        }
      });
    });
  }
  // X = A^-1 B: Bbar = A^-H Xbar, Abar = -Bbar X^H; dX = A^-1 (dB - dA X). A triangle's solve reads
  // (and so differentiates by) its triangle alone.
  std::vector<array> vjp(const std::vector<array>& p, const std::vector<array>& cot, const std::vector<int>& argnums,
                         const std::vector<array>& outs) override {
    const array b_bar = tri_ < 0 ? solve(mH(p[0]), cot[0]) : solve_triangular(mH(p[0]), cot[0], tri_ == 0);
    std::vector<array> out;
    for (int arg : argnums) out.push_back(arg == 1 ? b_bar : mask(negative(matmul(b_bar, mH(outs[0])))));
    return out;
  }
  std::vector<array> jvp(const std::vector<array>& p, const std::vector<array>& t, const std::vector<int>& argnums) override {
    const array x = run_op(p[0], p[1]);
    std::optional<array> rhs;
    for (size_t i = 0; i < argnums.size(); ++i) {
      const array term = argnums[i] == 1 ? t[i] : negative(matmul(mask(t[i]), x));
      rhs = rhs ? add(*rhs, term) : term;
    }
    return {run_op(p[0], *rhs)};
  }
  bool supports_complex() const override { return true; }
  std::pair<std::vector<array>, std::vector<int>> vmap(const std::vector<array>& in, const std::vector<int>& axes,
                                                       const std::vector<array>& outs) override {
    return stack_vmap(in, axes, outs);
  }
  const char* name() const override { return tri_ < 0 ? "Solve" : "SolveTriangular"; }
  void print(std::ostream& os) const override { os << name() << (tri_ < 0 ? "" : tri_ ? "(upper)" : "(lower)"); }

 private:
  array mask(const array& x) const { return tri_ < 0 ? x : tri_ ? triu(x) : tril(x); }
  array run_op(const array& a, const array& b) const {
    return array(b.shape(), b.dtype(), std::make_shared<Solve>(tri_), {a, b});
  }
  int tri_;
};
const bool kSolveLoads = loom::detail::register_primitive("Solve", [](loom::detail::Reader& r) -> std::shared_ptr<Primitive> {
  return std::make_shared<Solve>(r.get<int>());
});
const bool kSolveTriangularLoads =
    loom::detail::register_primitive("SolveTriangular", [](loom::detail::Reader& r) -> std::shared_ptr<Primitive> {
      return std::make_shared<Solve>(r.get<int>());
    });

// ---- Cholesky ----

class Cholesky : public UnaryPrimitive {
 public:
  explicit Cholesky(bool upper) : upper_(upper) {}
  void save(loom::detail::Writer& w) const override { w.put(upper_); }
  bool is_equivalent(const Primitive& other) const override {
    auto* p = loom::detail::same_primitive(this, other);
    return p && p->upper_ == upper_;
  }
  std::vector<Shape> output_shapes(const std::vector<Shape>& in) const override { return {square_shape(in.at(0), name())}; }

  void eval_cpu(const std::vector<array>& in, array& out) override {
    array a = kernels::row_contiguous(in[0]);
    out.alloc();
    const int n = a.shape(-1);
    const size_t batch = batch_count(a.shape()), nn = size_t(n) * n;
    if (nn == 0) return;
    by_dtype(a.dtype(), [&](auto tag) {
      using T = decltype(tag);
      for_each_matrix(batch, int64_t(n) * n * n, [&](size_t b0, size_t b1) {
        std::vector<T> m(nn);
        for (size_t b = b0; b < b1; ++b) {
          const T* src = cptr<T>(a) + b * nn;
          T* dst = mptr<T>(out) + b * nn;
          check_finite("cholesky", src, nn, b);
          // No transposes: the row-major matrix read column-major is A^T, whose upper triangle is A's
          // lower one (conj(A) for a Hermitian A), and the factor U of A^T = U^H U, read back row-major,
          // is U^T = L with A = L L^H. OpenBLAS's 'U' is also the faster of its two.
          std::memcpy(m.data(), src, sizeof(T) * nn);
          const int info = potrf(upper_ ? 'L' : 'U', n, m.data());
          if (info > 0) {
            fail("cholesky", b, msg("is not positive definite (its leading minor of order ", info, " is not)"));
          }
          std::memcpy(dst, m.data(), sizeof(T) * nn);
          for (int i = 0; i < n; ++i) {  // the other triangle held the input's entries
            for (int j = 0; j < n; ++j) {
              if (upper_ ? j < i : j > i) dst[size_t(i) * n + j] = T(0);
            }
          }
        }
      });
    });
  }
  // A = L L^T read from one triangle. With L's cotangent Lbar: G = sym(L^-T Phi(L^T Lbar) L^-1) is
  // the gradient of a function of the symmetric matrix; the read triangle's cotangent folds it.
  std::vector<array> vjp(const std::vector<array>& p, const std::vector<array>& cot, const std::vector<int>&,
                         const std::vector<array>& outs) override {
    real_only_derivative(p[0], "cholesky");
    const array l = upper_ ? mT(outs[0]) : outs[0], l_bar = upper_ ? mT(cot[0]) : cot[0];
    const array inner = phi(matmul(mT(l), l_bar), false);
    const array left = solve_triangular(mT(l), inner, true);            // L^-T P
    const array s = mT(solve_triangular(mT(l), mT(left), true));        // L^-T P L^-1
    const array g = multiply(add(s, mT(s)), array(0.5, s.dtype()));
    return {fold_to_triangle(g, upper_)};
  }
  // dL = L Phi(L^-1 dA L^-T), dA the read triangle mirrored.
  std::vector<array> jvp(const std::vector<array>& p, const std::vector<array>& t, const std::vector<int>&) override {
    real_only_derivative(p[0], "cholesky");
    const array c = cholesky(p[0], upper_);
    const array l = upper_ ? mT(c) : c;
    const array da = mirror_triangle(t[0], upper_);
    const array z = solve_triangular(l, da, false);                 // L^-1 dA
    const array w = mT(solve_triangular(l, mT(z), false));          // L^-1 dA L^-T
    const array dl = matmul(l, phi(w, false));
    return {upper_ ? mT(dl) : dl};
  }
  bool supports_complex() const override { return true; }
  std::pair<std::vector<array>, std::vector<int>> vmap(const std::vector<array>& in, const std::vector<int>& axes,
                                                       const std::vector<array>& outs) override {
    return stack_vmap(in, axes, outs);
  }
  const char* name() const override { return "Cholesky"; }
  void print(std::ostream& os) const override { os << "Cholesky(" << (upper_ ? "upper" : "lower") << ")"; }

 private:
  bool upper_;
};
const bool kCholeskyLoads =
    loom::detail::register_primitive("Cholesky", [](loom::detail::Reader& r) -> std::shared_ptr<Primitive> {
      return std::make_shared<Cholesky>(r.get<bool>());
    });

// ---- Eigh (symmetric / Hermitian) ----

class Eigh : public Primitive {
 public:
  Eigh(bool upper, bool vectors) : upper_(upper), vectors_(vectors) {}
  void save(loom::detail::Writer& w) const override { w.put(upper_, vectors_); }
  bool is_equivalent(const Primitive& other) const override {
    auto* p = loom::detail::same_primitive(this, other);
    return p && p->upper_ == upper_ && p->vectors_ == vectors_;
  }
  std::vector<Shape> output_shapes(const std::vector<Shape>& in) const override {
    return eigen_shapes(in.at(0), vectors_, name());
  }

  void eval_cpu(const std::vector<array>& inputs, std::vector<array>& outputs) override {
    array a = kernels::row_contiguous(inputs[0]);
    for (auto& o : outputs) o.alloc();
    const int n = a.shape(-1);
    const size_t batch = batch_count(a.shape()), nn = size_t(n) * n;
    if (nn == 0) return;
    by_dtype(a.dtype(), [&](auto tag) {
      using T = decltype(tag);
      using R = real_t<T>;
      for_each_matrix(batch, int64_t(n) * n * n * 4, [&](size_t b0, size_t b1) {
        // No transpose in: the row-major matrix read column-major is A^T (= A, or conj(A) for a
        // Hermitian A, whose eigenvectors are the conjugates of A's), and A's lower triangle is A^T's
        // upper one.
        const char jobz = vectors_ ? 'V' : 'N', uplo = upper_ ? 'L' : 'U';
        std::vector<T> m(nn);
        T wq{};
        R rq{};
        int iq = 0;
        if (syevd(jobz, uplo, n, m.data(), nullptr, &wq, -1, &rq, -1, &iq, -1) != 0) {
          throw std::runtime_error("[linalg::eigh] LAPACK's workspace query failed");
        }
        std::vector<T> work(size_t(lwork_of(wq)));
        std::vector<R> rwork(std::max<size_t>(1, size_t(std::max(R(1), rq))));
        std::vector<int> iwork(size_t(std::max(1, iq)));
        const char* op = vectors_ ? "eigh" : "eigvalsh";
        for (size_t b = b0; b < b1; ++b) {
          const T* src = cptr<T>(a) + b * nn;
          check_finite(op, src, nn, b);
          std::memcpy(m.data(), src, sizeof(T) * nn);
          const int info = syevd(jobz, uplo, n, m.data(), mptr<R>(outputs[0]) + b * n, work.data(), int(work.size()),
                                 rwork.data(), int(rwork.size()), iwork.data(), int(iwork.size()));
          if (info != 0) fail(op, b, msg("was not diagonalized: LAPACK's syevd ", info > 0 ? "did not converge" : "failed",
                                         " (info ", info, ")"));
          if (vectors_) {
            T* v = mptr<T>(outputs[1]) + b * nn;
            from_cols(m.data(), n, n, v);
            if constexpr (std::is_same_v<T, cfloat>) {
              for (size_t i = 0; i < nn; ++i) v[i] = std::conj(v[i]);
            }
          }
        }
      });
    });
  }
  // A = V diag(w) V^T read from one triangle. G = V (diag(wbar) + F o skew(V^T Vbar) / 2) V^T,
  // F_ij = 1 / (w_j - w_i), is the gradient of a function of the symmetric matrix (infinite where
  // eigenvalues meet, unless Vbar is zero); the read triangle's cotangent folds it.
  std::vector<array> vjp(const std::vector<array>& p, const std::vector<array>& cot, const std::vector<int>&,
                         const std::vector<array>& outs) override {
    real_only_derivative(p[0], vectors_ ? "eigh" : "eigvalsh");
    const char* uplo = upper_ ? "U" : "L";
    const array v = vectors_ ? outs[1] : eigh(p[0], uplo).second;
    array inner = diag_embed(cot[0]);
    if (vectors_) {
      const array x = matmul(mT(v), cot[1]);
      inner = add(inner, multiply(multiply(gap_inverse(outs[0]), subtract(x, mT(x))), array(0.5, x.dtype())));
    }
    return {fold_to_triangle(matmul(matmul(v, inner), mT(v)), upper_)};
  }
  // X = V^T dA V with dA the read triangle mirrored: dw = diag(X), dV = V (F o X).
  std::vector<array> jvp(const std::vector<array>& p, const std::vector<array>& t, const std::vector<int>&) override {
    real_only_derivative(p[0], vectors_ ? "eigh" : "eigvalsh");
    const auto [w, v] = eigh(p[0], upper_ ? "U" : "L");
    const array x = matmul(matmul(mT(v), mirror_triangle(t[0], upper_)), v);
    if (!vectors_) return {diag_part(x)};
    return {diag_part(x), matmul(v, multiply(gap_inverse(w), x))};
  }
  bool supports_complex() const override { return true; }
  std::pair<std::vector<array>, std::vector<int>> vmap(const std::vector<array>& in, const std::vector<int>& axes,
                                                       const std::vector<array>& outs) override {
    return stack_vmap(in, axes, outs);
  }
  const char* name() const override { return "Eigh"; }
  void print(std::ostream& os) const override { os << "Eigh(" << (upper_ ? "U" : "L") << (vectors_ ? ", vectors" : "") << ")"; }

 private:
  bool upper_, vectors_;
};
const bool kEighLoads = loom::detail::register_primitive("Eigh", [](loom::detail::Reader& r) -> std::shared_ptr<Primitive> {
  bool upper, vectors;
  r.get(upper, vectors);
  return std::make_shared<Eigh>(upper, vectors);
});

// ---- QR ----

// a (m x n) = Q (m x k) R (k x n), k = min(m, n): the reduced factorization, as MLX's and numpy's.
class QRF : public Primitive {
 public:
  QRF() = default;
  void save(loom::detail::Writer&) const override {}
  bool is_equivalent(const Primitive& other) const override { return loom::detail::same_primitive(this, other); }

  void eval_cpu(const std::vector<array>& inputs, std::vector<array>& outputs) override {
    array a = kernels::row_contiguous(inputs[0]);
    for (auto& o : outputs) o.alloc();
    const int m = a.shape(-2), n = a.shape(-1), k = std::min(m, n);
    const size_t batch = batch_count(a.shape());
    if (k == 0) return;
    by_dtype(a.dtype(), [&](auto tag) {
      using T = decltype(tag);
      for_each_matrix(batch, int64_t(m) * n * k * 2, [&](size_t b0, size_t b1) {
        std::vector<T> c(size_t(m) * n), tau(k);
        T q1{}, q2{};
        if (geqrf(m, n, c.data(), tau.data(), &q1, -1) != 0 || orgqr(m, k, k, c.data(), tau.data(), &q2, -1) != 0) {
          throw std::runtime_error("[linalg::qr] LAPACK's workspace query failed");
        }
        std::vector<T> work(size_t(std::max(lwork_of(q1), lwork_of(q2))));
        for (size_t b = b0; b < b1; ++b) {
          const T* src = cptr<T>(a) + b * size_t(m) * n;
          check_finite("qr", src, size_t(m) * n, b);
          to_cols(src, m, n, c.data());
          int info = geqrf(m, n, c.data(), tau.data(), work.data(), int(work.size()));
          if (info != 0) fail("qr", b, msg("was not factored (LAPACK's geqrf info ", info, ")"));
          T* r = mptr<T>(outputs[1]) + b * size_t(k) * n;
          for (int i = 0; i < k; ++i) {
            for (int j = 0; j < n; ++j) r[size_t(i) * n + j] = j < i ? T(0) : c[size_t(j) * m + i];
          }
          info = orgqr(m, k, k, c.data(), tau.data(), work.data(), int(work.size()));
          if (info != 0) fail("qr", b, msg("was not factored (LAPACK's orgqr info ", info, ")"));
          from_cols(c.data(), m, k, mptr<T>(outputs[0]) + b * size_t(m) * k);
        }
      });
    });
  }

  // For m >= n: M = R Rbar^T - Qbar^T Q, Abar = (Qbar + Q copyltu(M)) R^-T. For m < n, a = [X | Y]
  // with X square: Ybar = Q Rbar_Y, and X's cotangent is the square case's with Qbar + Y Rbar_Y^T.
  std::vector<array> vjp(const std::vector<array>& p, const std::vector<array>& cot, const std::vector<int>&,
                         const std::vector<array>& outs) override {
    real_only_derivative(p[0], "qr");
    const array &q = outs[0], &r = outs[1];
    const int m = p[0].shape(-2), n = p[0].shape(-1);
    if (m >= n) return {square_vjp(q, r, cot[0], cot[1])};
    const array r_x = cols(r, 0, m), r_y = cols(r, m, n), rb_x = cols(cot[1], 0, m), rb_y = cols(cot[1], m, n);
    const array y = cols(p[0], m, n);
    const array ax = square_vjp(q, r_x, add(cot[0], matmul(y, mT(rb_y))), rb_x);
    return {concatenate({ax, matmul(q, rb_y)}, -1)};
  }
  // For m >= n: X = Q^T dA R^-1, Omega = tril(X, -1) - tril(X, -1)^T; dR = (X - Omega) R and
  // dQ = dA R^-1 - Q (X - Omega). For m < n the square part as that, and dR_Y = dQ^T Y + Q^T dY.
  std::vector<array> jvp(const std::vector<array>& p, const std::vector<array>& t, const std::vector<int>&) override {
    real_only_derivative(p[0], "qr");
    const auto [q, r] = qr(p[0]);
    const int m = p[0].shape(-2), n = p[0].shape(-1);
    if (m >= n) return square_jvp(q, r, t[0]);
    const std::vector<array> dx = square_jvp(q, cols(r, 0, m), cols(t[0], 0, m));
    const array dr_y = add(matmul(mT(dx[0]), cols(p[0], m, n)), matmul(mT(q), cols(t[0], m, n)));
    return {dx[0], concatenate({dx[1], dr_y}, -1)};
  }
  bool supports_complex() const override { return true; }
  std::pair<std::vector<array>, std::vector<int>> vmap(const std::vector<array>& in, const std::vector<int>& axes,
                                                       const std::vector<array>& outs) override {
    return stack_vmap(in, axes, outs);
  }
  const char* name() const override { return "QRF"; }

 private:
  static array cols(const array& x, int lo, int hi) {
    Shape start(x.ndim(), 0), stop = x.shape();
    start.back() = lo;
    stop.back() = hi;
    return slice(x, start, stop);
  }
  // Z R^-1 for upper triangular R: (R^-T Z^T)^T.
  static array right_div(const array& z, const array& r) { return mT(solve_triangular(mT(r), mT(z), false)); }
  static array square_vjp(const array& q, const array& r, const array& q_bar, const array& r_bar) {
    const array mm = subtract(matmul(r, mT(r_bar)), matmul(mT(q_bar), q));
    const array copyltu = add(tril(mm), mT(tril(mm, -1)));
    return mT(solve_triangular(r, mT(add(q_bar, matmul(q, copyltu))), true));  // (...) R^-T
  }
  static std::vector<array> square_jvp(const array& q, const array& r, const array& da) {
    const array da_rinv = right_div(da, r);
    const array x = matmul(mT(q), da_rinv);
    const array low = tril(x, -1);
    const array upper_part = subtract(x, subtract(low, mT(low)));  // X - Omega
    return {subtract(da_rinv, matmul(q, upper_part)), matmul(upper_part, r)};
  }
};
const bool kQRFLoads = loom::detail::register_primitive("QRF", [](loom::detail::Reader&) -> std::shared_ptr<Primitive> {
  return std::make_shared<QRF>();
});

// ---- LU ----

// a (m x n) -> LU (m x n, L's strict lower part and U), pivots (k: row i was swapped with row
// pivots[i], in order) and row indices (m: a = (L U)[row_indices], MLX's order).
class LUF : public Primitive {
 public:
  LUF() = default;
  void save(loom::detail::Writer&) const override {}
  bool is_equivalent(const Primitive& other) const override { return loom::detail::same_primitive(this, other); }

  void eval_cpu(const std::vector<array>& inputs, std::vector<array>& outputs) override {
    array a = kernels::row_contiguous(inputs[0]);
    for (auto& o : outputs) o.alloc();
    const int m = a.shape(-2), n = a.shape(-1), k = std::min(m, n);
    const size_t batch = batch_count(a.shape()), mn = size_t(m) * n;
    by_dtype(a.dtype(), [&](auto tag) {
      using T = decltype(tag);
      for_each_matrix(batch, int64_t(m) * n * std::max(k, 1), [&](size_t b0, size_t b1) {
        std::vector<T> c(mn);
        std::vector<int> ipiv(std::max(1, k));
        for (size_t b = b0; b < b1; ++b) {
          uint32_t* piv = reinterpret_cast<uint32_t*>(outputs[1].raw_data()) + b * k;
          uint32_t* rows = reinterpret_cast<uint32_t*>(outputs[2].raw_data()) + b * m;
          for (int i = 0; i < m; ++i) rows[i] = uint32_t(i);
          if (mn == 0) continue;
          const T* src = cptr<T>(a) + b * mn;
          check_finite("lu", src, mn, b);
          to_cols(src, m, n, c.data());
          // A singular matrix still has an LU factorization (U with a zero on its diagonal): numpy's,
          // scipy's and MLX's lu return it, and so does Loom's.
          const int info = getrf(m, n, c.data(), ipiv.data());
          if (info < 0) fail("lu", b, msg("was not factored (LAPACK's getrf info ", info, ")"));
          from_cols(c.data(), m, n, mptr<T>(outputs[0]) + b * mn);
          for (int i = 0; i < k; ++i) piv[i] = uint32_t(ipiv[i] - 1);
          for (int i = k - 1; i >= 0; --i) std::swap(rows[i], rows[piv[i]]);
        }
      });
    });
  }
  bool supports_complex() const override { return true; }
  std::pair<std::vector<array>, std::vector<int>> vmap(const std::vector<array>& in, const std::vector<int>& axes,
                                                       const std::vector<array>& outs) override {
    return stack_vmap(in, axes, outs);
  }
  const char* name() const override { return "LUF"; }
};
const bool kLUFLoads = loom::detail::register_primitive("LUF", [](loom::detail::Reader&) -> std::shared_ptr<Primitive> {
  return std::make_shared<LUF>();
});

// ---- Eig (general square matrices) ----

// geev for a real matrix: eigenvalues wr + i wi, and the right eigenvectors, complex. `call` is
// LAPACK's sgeev or dgeev (their real and imaginary parts in separate arrays).
template <typename R, typename Call>
int geev_real(char jobvr, int n, R* a, cfloat* w, cfloat* v, Call call) {
  std::vector<R> wr(n), wi(n), vr(jobvr == 'V' ? size_t(n) * n : 1);
  int info = 0, lwork = -1;
  R q = 0;
  call(jobvr, n, a, wr.data(), wi.data(), vr.data(), &q, lwork, &info);
  lwork = lwork_of(q);
  std::vector<R> work(static_cast<size_t>(lwork));
  call(jobvr, n, a, wr.data(), wi.data(), vr.data(), work.data(), lwork, &info);
  if (info != 0) return info;
  for (int j = 0; j < n; ++j) w[j] = cfloat(float(wr[j]), float(wi[j]));
  // A complex pair (wi[j] > 0, then its conjugate) keeps its vector's real and imaginary parts in
  // columns j and j + 1.
  for (int j = 0; jobvr == 'V' && j < n; ++j) {
    if (wi[j] != 0 && j + 1 < n) {
      for (int i = 0; i < n; ++i) {
        const R re = vr[size_t(j) * n + i], im = vr[size_t(j + 1) * n + i];
        v[size_t(j) * n + i] = cfloat(float(re), float(im));
        v[size_t(j + 1) * n + i] = cfloat(float(re), float(-im));
      }
      ++j;
    } else {
      for (int i = 0; i < n; ++i) v[size_t(j) * n + i] = cfloat(float(vr[size_t(j) * n + i]), 0);
    }
  }
  return 0;
}
int geev(char jobvr, int n, float* a, cfloat* w, cfloat* v) {
  return geev_real(jobvr, n, a, w, v, [](char jv, int n_, float* a_, float* wr, float* wi, float* vr, float* work, int lwork, int* info) {
    const char jobvl = 'N';
    int ld = std::max(1, n_), one = 1;
    LAPACK_sgeev(&jobvl, &jv, &n_, a_, &ld, wr, wi, nullptr, &one, vr, &ld, work, &lwork, info);
  });
}
int geev(char jobvr, int n, double* a, cfloat* w, cfloat* v) {
  return geev_real(jobvr, n, a, w, v, [](char jv, int n_, double* a_, double* wr, double* wi, double* vr, double* work, int lwork, int* info) {
    const char jobvl = 'N';
    int ld = std::max(1, n_), one = 1;
    LAPACK_dgeev(&jobvl, &jv, &n_, a_, &ld, wr, wi, nullptr, &one, vr, &ld, work, &lwork, info);
  });
}
int geev(char jobvr, int n, cfloat* a, cfloat* w, cfloat* v) {
  const char jobvl = 'N';
  int info = 0, ld = std::max(1, n), one = 1, lwork = -1;
  std::vector<float> rwork(2 * size_t(std::max(1, n)));
  cfloat q{}, dummy{};
  LAPACK_cgeev(&jobvl, &jobvr, &n, a, &ld, w, &dummy, &one, v, &ld, &q, &lwork, rwork.data(), &info);
  lwork = lwork_of(q);
  std::vector<cfloat> work(static_cast<size_t>(lwork));
  LAPACK_cgeev(&jobvl, &jobvr, &n, a, &ld, w, &dummy, &one, v, &ld, work.data(), &lwork, rwork.data(), &info);
  return info;
}

class Eig : public Primitive {
 public:
  explicit Eig(bool vectors) : vectors_(vectors) {}
  void save(loom::detail::Writer& w) const override { w.put(vectors_); }
  bool is_equivalent(const Primitive& other) const override {
    auto* p = loom::detail::same_primitive(this, other);
    return p && p->vectors_ == vectors_;
  }
  std::vector<Shape> output_shapes(const std::vector<Shape>& in) const override {
    return eigen_shapes(in.at(0), vectors_, name());
  }
  void eval_cpu(const std::vector<array>& inputs, std::vector<array>& outputs) override {
    array a = kernels::row_contiguous(inputs[0]);
    for (auto& o : outputs) o.alloc();
    const int n = a.shape(-1);
    const size_t batch = batch_count(a.shape()), nn = size_t(n) * n;
    if (nn == 0) return;
    const char* op = vectors_ ? "eig" : "eigvals";
    by_dtype(a.dtype(), [&](auto tag) {
      using T = decltype(tag);
      for_each_matrix(batch, int64_t(n) * n * n * 10, [&](size_t b0, size_t b1) {
        std::vector<T> c(nn);
        std::vector<cfloat> v(vectors_ ? nn : 1);
        for (size_t b = b0; b < b1; ++b) {
          const T* src = cptr<T>(a) + b * nn;
          check_finite(op, src, nn, b);
          to_cols(src, n, n, c.data());
          const int info = geev(vectors_ ? 'V' : 'N', n, c.data(), mptr<cfloat>(outputs[0]) + b * n, v.data());
          if (info != 0) fail(op, b, msg("was not diagonalized: LAPACK's geev ", info > 0 ? "did not converge" : "failed",
                                         " (info ", info, ")"));
          if (vectors_) from_cols(v.data(), n, n, mptr<cfloat>(outputs[1]) + b * nn);
        }
      });
    });
  }
  bool supports_complex() const override { return true; }
  std::pair<std::vector<array>, std::vector<int>> vmap(const std::vector<array>& in, const std::vector<int>& axes,
                                                       const std::vector<array>& outs) override {
    return stack_vmap(in, axes, outs);
  }
  const char* name() const override { return "Eig"; }
  void print(std::ostream& os) const override { os << "Eig(" << (vectors_ ? "vectors" : "values") << ")"; }

 private:
  bool vectors_;
};
const bool kEigLoads = loom::detail::register_primitive("Eig", [](loom::detail::Reader& r) -> std::shared_ptr<Primitive> {
  return std::make_shared<Eig>(r.get<bool>());
});


// ---- log |det| by LU ----

// a (..., n, n) -> {sign, log |det|} (slogdet), or {det} (det_): getrf's U diagonal and its row
// swaps. The determinant is the product itself (exp(log |det|) would lose log |det| ulps of it), in
// double whatever the dtype. A singular matrix gives sign 0 and -inf, or 0. d log|det| = tr(a^-1 da),
// d det = det tr(a^-1 da).
class Slogdet : public Primitive {
 public:
  explicit Slogdet(bool det) : det_(det) {}
  void save(loom::detail::Writer& w) const override { w.put(det_); }
  bool is_equivalent(const Primitive& other) const override {
    auto* p = loom::detail::same_primitive(this, other);
    return p && p->det_ == det_;
  }
  void eval_cpu(const std::vector<array>& inputs, std::vector<array>& outputs) override {
    array a = kernels::row_contiguous(inputs[0]);
    for (auto& o : outputs) o.alloc();
    const int n = a.shape(-1);
    const size_t batch = batch_count(a.shape()), nn = size_t(n) * n;
    by_dtype(a.dtype(), [&](auto tag) {
      using T = decltype(tag);
      if constexpr (!std::is_same_v<T, cfloat>) {
        std::vector<T> c(nn);
        std::vector<int> ipiv(std::max(1, n));
        for (size_t b = 0; b < batch; ++b) {
          T sign = 1, logabs = 0;
          double prod = 1;
          if (n > 0) {
            const T* src = cptr<T>(a) + b * nn;
            check_finite("slogdet", src, nn, b);
            std::memcpy(c.data(), src, sizeof(T) * nn);  // det(A^T) = det(A)
            if (getrf(n, n, c.data(), ipiv.data()) < 0) fail("slogdet", b, "was not factored");
            for (int i = 0; i < n; ++i) {
              const T u = c[size_t(i) * n + i];
              if (ipiv[i] != i + 1) sign = -sign;
              if (u < 0) sign = -sign;
              logabs += std::log(std::abs(u));  // log 0 = -inf: a singular matrix
              prod *= double(u);
            }
            if (std::isinf(logabs) && logabs < 0) sign = 0;
          }
          if (det_) {
            mptr<T>(outputs[0])[b] = static_cast<T>(prod * (n > 0 && piv_sign(ipiv.data(), n) < 0 ? -1 : 1));
          } else {
            mptr<T>(outputs[0])[b] = sign;
            mptr<T>(outputs[1])[b] = logabs;
          }
        }
      }
    });
  }
  std::vector<array> vjp(const std::vector<array>& p, const std::vector<array>& cot, const std::vector<int>&,
                         const std::vector<array>& outs) override {
    const array c = det_ ? multiply(cot[0], outs[0]) : cot[1];
    return {multiply(expand_dims(c, {-2, -1}), mT(inv(p[0])))};
  }
  std::vector<array> jvp(const std::vector<array>& p, const std::vector<array>& t, const std::vector<int>&) override {
    const array trace = sum(multiply(mT(inv(p[0])), t[0]), std::vector<int>{-2, -1});
    if (det_) return {multiply(trace, array(Shape(p[0].shape().begin(), p[0].shape().end() - 2), p[0].dtype(),
                                            std::make_shared<Slogdet>(true), {p[0]}))};
    return {zeros(Shape(p[0].shape().begin(), p[0].shape().end() - 2), p[0].dtype()), trace};
  }
  std::pair<std::vector<array>, std::vector<int>> vmap(const std::vector<array>& in, const std::vector<int>& axes,
                                                       const std::vector<array>& outs) override {
    return stack_vmap(in, axes, outs);
  }
  const char* name() const override { return "Slogdet"; }
  void print(std::ostream& os) const override { os << (det_ ? "Slogdet(det)" : "Slogdet(slogdet)"); }

 private:
  // The sign of the row swaps getrf made (1-based ipiv: row i swapped with ipiv[i]).
  static int piv_sign(const int* ipiv, int n) {
    int s = 1;
    for (int i = 0; i < n; ++i) s = ipiv[i] != i + 1 ? -s : s;
    return s;
  }
  bool det_;
};
const bool kSlogdetLoads = loom::detail::register_primitive("Slogdet", [](loom::detail::Reader& r) -> std::shared_ptr<Primitive> {
  return std::make_shared<Slogdet>(r.get<bool>());
});

}  // namespace

// ---- the ops ----

std::vector<array> svd(const array& a, bool compute_uv, StreamOrDevice s) {
  OnStream on(s);
  check_matrices(a, "svd");
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

std::pair<array, array> qr(const array& a, StreamOrDevice s) {
  OnStream on(s);
  check_matrices(a, "qr");
  const int k = std::min(a.shape(-2), a.shape(-1));
  Shape q_shape = a.shape(), r_shape = a.shape();
  q_shape.back() = k;
  r_shape[r_shape.size() - 2] = k;
  auto out = array::make_arrays({q_shape, r_shape}, {a.dtype(), a.dtype()}, std::make_shared<QRF>(), {a});
  return {out[0], out[1]};
}

array inv(const array& a, StreamOrDevice s) {
  OnStream on(s);
  check_square(a, "inv");
  return array(a.shape(), a.dtype(), std::make_shared<Inverse>(false, true), {a});
}

array tri_inv(const array& a, bool upper, StreamOrDevice s) {
  OnStream on(s);
  check_square(a, "tri_inv");
  return array(a.shape(), a.dtype(), std::make_shared<Inverse>(true, upper), {a});
}

array cholesky(const array& a, bool upper, StreamOrDevice s) {
  OnStream on(s);
  check_square(a, "cholesky");
  return array(a.shape(), a.dtype(), std::make_shared<Cholesky>(upper), {a});
}

std::pair<array, array> lu_factor(const array& a, StreamOrDevice s) {
  OnStream on(s);
  check_matrices(a, "lu_factor");
  const int m = a.shape(-2), n = a.shape(-1);
  Shape piv(a.shape().begin(), a.shape().end() - 2), rows(a.shape().begin(), a.shape().end() - 1);
  piv.push_back(std::min(m, n));
  auto out = array::make_arrays({a.shape(), piv, rows}, {a.dtype(), uint32, uint32}, std::make_shared<LUF>(), {a});
  return {out[0], out[1]};
}

std::vector<array> lu(const array& a, StreamOrDevice s) {
  OnStream on(s);
  check_matrices(a, "lu");
  const int m = a.shape(-2), n = a.shape(-1), k = std::min(m, n);
  Shape piv(a.shape().begin(), a.shape().end() - 2), rows(a.shape().begin(), a.shape().end() - 1);
  piv.push_back(k);
  auto out = array::make_arrays({a.shape(), piv, rows}, {a.dtype(), uint32, uint32}, std::make_shared<LUF>(), {a});
  array l = tril(out[0], -1), u = triu(out[0]);
  Shape start(a.ndim(), 0), stop = a.shape();
  if (n > k) {
    stop.back() = k;
    l = slice(l, start, stop);
  } else if (m > k) {
    stop[stop.size() - 2] = k;
    u = slice(u, start, stop);
  }
  l = add(l, astype(eye(m, k, 0, float32), a.dtype()));
  return {out[2], l, u};
}

namespace {

// solve's and solve_triangular's operands: a (..., n, n) and b (..., n, k), or b (n) a vector, with
// their batch axes broadcast; `vector` says b was one.
std::pair<array, array> solve_operands(const array& a, const array& b, const char* op, bool& vector) {
  if (a.ndim() < 2) {
    throw std::invalid_argument(msg("[linalg::", op, "] a must have at least 2 dimensions; got shape ", shape_str(a.shape())));
  }
  if (b.ndim() < 1) throw std::invalid_argument(msg("[linalg::", op, "] b must have at least 1 dimension; got a scalar"));
  if (a.shape(-1) != a.shape(-2)) {
    throw std::invalid_argument(msg("[linalg::", op, "] a must be square; got shape ", shape_str(a.shape())));
  }
  vector = b.ndim() == 1;
  const int rows = vector ? b.shape(0) : b.shape(-2);
  if (rows != a.shape(-1)) {
    throw std::invalid_argument(msg("[linalg::", op, "] a of shape ", shape_str(a.shape()), " and b of shape ",
                                    shape_str(b.shape()), " do not fit: b needs ", a.shape(-1), " rows"));
  }
  const Dtype d = promote_types(a.dtype(), b.dtype());
  if (d != float32 && d != float64 && d != complex64) {
    throw std::invalid_argument(msg("[linalg::", op, "] a (", a.dtype(), ") and b (", b.dtype(),
                                    ") must promote to float32, float64 or complex64; they promote to ", d));
  }
  array bm = vector ? reshape(b, {rows, 1}) : b;
  Shape batch;
  try {
    batch = broadcast_shapes(Shape(a.shape().begin(), a.shape().end() - 2), Shape(bm.shape().begin(), bm.shape().end() - 2));
  } catch (const std::invalid_argument&) {
    throw std::invalid_argument(msg("[linalg::", op, "] the batch axes of a ", shape_str(a.shape()), " and b ",
                                    shape_str(b.shape()), " do not broadcast"));
  }
  Shape as = batch, bs = batch;
  as.insert(as.end(), {a.shape(-2), a.shape(-1)});
  bs.insert(bs.end(), {bm.shape(-2), bm.shape(-1)});
  return {broadcast_to(astype(a, d), as), broadcast_to(astype(bm, d), bs)};
}

array solve_impl(const array& a, const array& b, int tri, const char* op) {
  bool vector = false;
  auto [am, bm] = solve_operands(a, b, op, vector);
  array x(bm.shape(), bm.dtype(), std::make_shared<Solve>(tri), {am, bm});
  return vector ? squeeze(x, -1) : x;
}

}  // namespace

array solve(const array& a, const array& b, StreamOrDevice s) {
  OnStream on(s);
  return solve_impl(a, b, -1, "solve");
}

array solve_triangular(const array& a, const array& b, bool upper, StreamOrDevice s) {
  OnStream on(s);
  return solve_impl(a, b, upper ? 1 : 0, "solve_triangular");
}

namespace {
bool parse_uplo(const std::string& uplo, const char* op) {
  if (uplo != "L" && uplo != "U") {
    throw std::invalid_argument(msg("[linalg::", op, "] UPLO must be \"L\" or \"U\"; got \"", uplo, "\""));
  }
  return uplo == "U";
}
}  // namespace

std::pair<array, array> eigh(const array& a, const std::string& UPLO, StreamOrDevice s) {
  OnStream on(s);
  check_square(a, "eigh");
  const bool upper = parse_uplo(UPLO, "eigh");
  const Dtype w = a.dtype() == complex64 ? float32 : a.dtype();
  auto out = array::make_arrays({Shape(a.shape().begin(), a.shape().end() - 1), a.shape()}, {w, a.dtype()},
                                std::make_shared<Eigh>(upper, true), {a});
  return {out[0], out[1]};
}

array eigvalsh(const array& a, const std::string& UPLO, StreamOrDevice s) {
  OnStream on(s);
  check_square(a, "eigvalsh");
  const bool upper = parse_uplo(UPLO, "eigvalsh");
  const Dtype w = a.dtype() == complex64 ? float32 : a.dtype();
  return array(Shape(a.shape().begin(), a.shape().end() - 1), w, std::make_shared<Eigh>(upper, false), {a});
}

std::pair<array, array> eig(const array& a, StreamOrDevice s) {
  OnStream on(s);
  check_square(a, "eig");
  auto out = array::make_arrays({Shape(a.shape().begin(), a.shape().end() - 1), a.shape()}, {complex64, complex64},
                                std::make_shared<Eig>(true), {a});
  return {out[0], out[1]};
}

// slogdet's LU path (ops/linalg_compose.cpp): a real square stack, checked there.
std::pair<array, array> slogdet_lu(const array& a) {
  Shape batch(a.shape().begin(), a.shape().end() - 2);
  auto out = array::make_arrays({batch, batch}, {a.dtype(), a.dtype()}, std::make_shared<Slogdet>(false), {a});
  return {out[0], out[1]};
}
array det_lu(const array& a) {
  return array(Shape(a.shape().begin(), a.shape().end() - 2), a.dtype(), std::make_shared<Slogdet>(true), {a});
}

array eigvals(const array& a, StreamOrDevice s) {
  OnStream on(s);
  check_square(a, "eigvals");
  return array(Shape(a.shape().begin(), a.shape().end() - 1), complex64, std::make_shared<Eig>(false), {a});
}

}  // namespace loom::linalg

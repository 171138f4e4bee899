// The BLAS GEMM behind matmul / addmm, conv and attention (internal): C = alpha op(A) op(B) + beta C
// on row-major float, double or complex64 operands, op = transpose when ta / tb.
#pragma once

#include <cblas.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "loom/core/parallel.h"
#include "loom/core/threads.h"

namespace loom::kernels {

namespace detail {

template <typename T>
void blas_gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, T alpha, const T* A, int64_t lda, const T* B,
               int64_t ldb, T beta, T* C, int64_t ldc) {
  const CBLAS_TRANSPOSE opa = ta ? CblasTrans : CblasNoTrans, opb = tb ? CblasTrans : CblasNoTrans;
  if constexpr (std::is_same_v<T, float>) {
    cblas_sgemm(CblasRowMajor, opa, opb, int(M), int(N), int(K), alpha, A, int(lda), B, int(ldb), beta, C, int(ldc));
  } else if constexpr (!std::is_same_v<T, double>) {  // complex64_t: std::complex<float>'s layout
    cblas_cgemm(CblasRowMajor, opa, opb, int(M), int(N), int(K), &alpha, A, int(lda), B, int(ldb), &beta, C, int(ldc));
  } else {
    cblas_dgemm(CblasRowMajor, opa, opb, int(M), int(N), int(K), alpha, A, int(lda), B, int(ldb), beta, C, int(ldc));
  }
}

}  // namespace detail

// GEMMs of at least this many multiply-adds are split across Loom's threads (about 5 us of work).
constexpr int64_t kGemmSplitMacs = int64_t(1) << 20;

// With more than one thread, a large GEMM runs as single-threaded BLAS calls on contiguous shares of
// C's rows (or of its columns, when it has more of those), claimed by Loom's pool, never through
// OpenBLAS's own threading: its OpenMP threads split the work statically and spin at the barrier,
// so one descheduled thread stalled the product on a loaded machine. On 2 cores (Zen 5) the split
// reached 340-490 GFLOP/s on the training steps' shapes (a linear layer's (4096, 384, 128), a
// convolution's (25088, 64, 288)), against OpenBLAS's threading 184-330; on large square products
// OpenBLAS's threading, which shares packed panels between the threads, was 2-4% ahead. Inside a
// task of the pool (attention's per-head loop) the call goes straight through.
template <typename T>
void gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, T alpha, const T* A, int64_t lda, const T* B, int64_t ldb,
          T beta, T* C, int64_t ldc) {
  if (M == 0 || N == 0) return;
  const int64_t split = std::max(M, N);
  const int nt = loom::detail::in_parallel() || M * N * K < kGemmSplitMacs ? 1 : get_num_threads();
  // Two parts per thread, of at least 32 rows or columns: each part packs the other operand again.
  const int64_t parts = std::min<int64_t>(int64_t(nt) * 2, split / 32);
  if (nt <= 1 || parts <= 1) {
    detail::blas_gemm(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    return;
  }
  loom::detail::run_parts(size_t(split), parts, nt, [&](size_t b0, size_t e0) {
    const int64_t b = int64_t(b0), e = int64_t(e0);
    if (M >= N) {  // rows [b, e) of C and of op(A)
      detail::blas_gemm(ta, tb, e - b, N, K, alpha, ta ? A + b : A + b * lda, lda, B, ldb, beta, C + b * ldc, ldc);
    } else {  // columns [b, e) of C and of op(B)
      detail::blas_gemm(ta, tb, M, e - b, K, alpha, A, lda, tb ? B + b * ldb : B + b, ldb, beta, C + b, ldc);
    }
  });
}

}  // namespace loom::kernels

// The BLAS GEMM behind matmul / addmm, conv and attention (internal): C = alpha op(A) op(B) + beta C
// on row-major float or double operands, op = transpose when ta / tb.
#pragma once

#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "loom/core/threads.h"

namespace loom::kernels {

namespace detail {

template <typename T>
void blas_gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, T alpha, const T* A, int64_t lda, const T* B,
               int64_t ldb, T beta, T* C, int64_t ldc) {
  const CBLAS_TRANSPOSE opa = ta ? CblasTrans : CblasNoTrans, opb = tb ? CblasTrans : CblasNoTrans;
  if constexpr (std::is_same_v<T, float>) {
    cblas_sgemm(CblasRowMajor, opa, opb, int(M), int(N), int(K), alpha, A, int(lda), B, int(ldb), beta, C, int(ldc));
  } else {
    cblas_dgemm(CblasRowMajor, opa, opb, int(M), int(N), int(K), alpha, A, int(lda), B, int(ldb), beta, C, int(ldc));
  }
}

}  // namespace detail

// GEMMs of at least this many multiply-adds are split across Loom's threads (about 5 us of work).
constexpr int64_t kGemmSplitMacs = int64_t(1) << 20;

// With more than one thread, a large GEMM runs as one single-threaded BLAS call per thread on a
// contiguous share of C's rows (or of its columns, when it has more of those), when one of its
// dimensions is below 512, instead of through OpenBLAS's own threading. On 2 cores (Zen 5) OpenBLAS's
// 2-thread sgemm reached 184-330 GFLOP/s on the training steps' shapes (a linear layer's
// (4096, 384, 128): 280; a convolution's (25088, 64, 288): 184, its 1-thread rate being 168), the
// split 340-490, about twice the 1-thread rate. On large square products OpenBLAS's threading, which
// shares packed panels between the threads, stays 2-4% ahead (1024 and 2048: 477-491 against
// 459-483), and from 512 up they are even. Inside a parallel region (attention's per-head loop)
// OpenBLAS runs single-threaded, so the call goes straight through.
template <typename T>
void gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, T alpha, const T* A, int64_t lda, const T* B, int64_t ldb,
          T beta, T* C, int64_t ldc) {
  if (M == 0 || N == 0) return;
  const int64_t split = std::max(M, N);
  const bool skinny = std::min({M, N, K}) < 512;
  int nt = !skinny || omp_in_parallel() || M * N * K < kGemmSplitMacs ? 1 : get_num_threads();
  nt = static_cast<int>(std::min<int64_t>(nt, split / 16));  // at least 16 rows or columns each
  if (nt <= 1) {
    detail::blas_gemm(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    return;
  }
#pragma omp parallel num_threads(nt)
  {
    const int64_t t = omp_get_thread_num(), n = omp_get_num_threads();
    const int64_t b = split * t / n, e = split * (t + 1) / n;
    if (e > b) {
      if (M >= N) {  // rows [b, e) of C and of op(A)
        detail::blas_gemm(ta, tb, e - b, N, K, alpha, ta ? A + b : A + b * lda, lda, B, ldb, beta, C + b * ldc, ldc);
      } else {  // columns [b, e) of C and of op(B)
        detail::blas_gemm(ta, tb, M, e - b, K, alpha, A, lda, tb ? B + b * ldb : B + b, ldb, beta, C + b, ldc);
      }
    }
  }
}

}  // namespace loom::kernels

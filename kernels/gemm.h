// The one GEMM seam (internal): every matrix product of the library (matmul / addmm, batched matmul
// and gather_mm through them, the convolutions, attention, the quantized products) calls `gemm`. It
// splits a product across Loom's pool and hands each share to a backend, one implementation file
// each: OpenBLAS (kernels/gemm_openblas.cpp: float32, float64, complex64) and oneDNN
// (kernels/gemm_dnnl.cpp: bfloat16 and float16 in, float32 accumulation, half or float32 out; float32
// when asked). Which backend runs a dtype is decided at run time by the CPU, never by the build
// machine (kernels/gemm.cpp); LOOM_GEMM=openblas|dnnl forces one.
#pragma once

#include <cstdint>
#include <string>
#include <type_traits>

#include "loom/core/dtype.h"
#include "loom/kernels/backend.h"

namespace loom::kernels {

/// One product, row-major: C = alpha op(A) op(B) + beta C, op(X) = X^T when its flag is set; op(A) is
/// M x K, op(B) K x N, C M x N, each with its leading dimension. A and B hold `in` (float32, float64,
/// complex64, bfloat16 or float16); C holds `out`, which is `in` itself or, for half inputs,
/// float32. Half products accumulate in float32 and round once into a half C. With beta == 0, C is
/// only written (NaN there does not propagate).
struct Gemm {
  Dtype in = float32, out = float32;
  bool ta = false, tb = false;
  int64_t M = 0, N = 0, K = 0;
  const void* A = nullptr;
  int64_t lda = 0;
  const void* B = nullptr;
  int64_t ldb = 0;
  void* C = nullptr;
  int64_t ldc = 0;
  double alpha = 1, beta = 0;
};

/// Runs a product. With more than one thread, a large one runs as single-threaded backend calls on
/// contiguous shares of C's rows (or of its columns, when it has more of those), claimed by Loom's
/// pool; inside a task of the pool (attention's per-head loop) the call goes straight through.
/// Throws std::invalid_argument for a dtype pair the seam does not take.
void gemm(const Gemm& g);

/// The typed form for products whose operands and result share one dtype.
template <typename T>
void gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, T alpha, const T* A, int64_t lda, const T* B,
          int64_t ldb, T beta, T* C, int64_t ldc) {
  constexpr Dtype d = std::is_same_v<T, float>    ? float32
                      : std::is_same_v<T, double> ? float64
                      : std::is_same_v<T, bfloat16_t> ? bfloat16
                      : std::is_same_v<T, float16_t>  ? float16
                                                      : complex64;
  auto real = [](T v) -> double {
    if constexpr (std::is_same_v<T, complex64_t>) {
      return v.real();
    } else {
      return static_cast<double>(v);
    }
  };
  gemm(Gemm{d, d, ta, tb, M, N, K, A, lda, B, ldb, C, ldc, real(alpha), real(beta)});
}

/// GEMMs of at least this many multiply-adds are split across Loom's threads (about 5 us of work).
constexpr int64_t kGemmSplitMacs = int64_t(1) << 20;

namespace detail {
/// Tests: run every product of the process on `b` from now on (as LOOM_GEMM would), or go back to
/// the CPU's choice with reset_gemm_backend(). Not to be called while products run.
void force_gemm_backend(GemmBackend b);
void reset_gemm_backend();
/// Whether oneDNN creates a primitive for products of `in` into `out` on this CPU (bfloat16 and
/// float16 need AVX-512 in oneDNN 2.x: an AVX2 CPU has none).
bool dnnl_takes(Dtype in, Dtype out);
/// Primitives the oneDNN backend has created and holds (its cache), and how many it created in all.
struct DnnlCacheStats {
  size_t held = 0, created = 0;
};
DnnlCacheStats dnnl_cache_stats();
}  // namespace detail

}  // namespace loom::kernels

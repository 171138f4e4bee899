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

/// The dtype of a seam operand of C++ type T.
template <typename T>
constexpr Dtype gemm_dtype() {
  if constexpr (std::is_same_v<T, float>) {
    return float32;
  } else if constexpr (std::is_same_v<T, double>) {
    return float64;
  } else if constexpr (std::is_same_v<T, bfloat16_t>) {
    return bfloat16;
  } else if constexpr (std::is_same_v<T, float16_t>) {
    return float16;
  } else {
    static_assert(std::is_same_v<T, complex64_t>, "the seam's dtypes: float32, float64, bfloat16, float16, complex64");
    return complex64;
  }
}

/// The typed form: operands of In, the result of Out (In itself, or float for half In); real
/// scalars of any arithmetic type (or complex64_t, whose real part is taken).
template <typename In, typename Out = In, typename S>
void gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, S alpha, const In* A, int64_t lda, const In* B,
          int64_t ldb, S beta, Out* C, int64_t ldc) {
  auto real = [](S v) -> double {
    if constexpr (std::is_same_v<S, complex64_t>) {
      return v.real();
    } else {
      return static_cast<double>(v);
    }
  };
  gemm(Gemm{gemm_dtype<In>(), gemm_dtype<Out>(), ta, tb, M, N, K, A, lda, B, ldb, C, ldc, real(alpha), real(beta)});
}

/// Whether the seam runs products of half dtype `d` on half kernels (oneDNN's, where the CPU has
/// them), so that a caller keeps its operands half; false where it would widen them to float32 for
/// each call (a caller then converts once, up front).
bool gemm_reads_half(Dtype d);

/// Names the backend of products of `in` into `out` in the profiler's row of the running node, for a
/// kernel whose products run inside its own pool tasks (attention's per-head loop), where the seam
/// cannot (a task knows no node). Once per node; nothing while the profiler is off.
void note_gemm_backend(Dtype in, Dtype out);

/// GEMMs of at least this many multiply-adds are split across Loom's threads (about 5 us of work).
constexpr int64_t kGemmSplitMacs = int64_t(1) << 20;

namespace detail {
/// Tests: run every product of the process on `b` from now on (as LOOM_GEMM would), or go back to
/// the CPU's choice with reset_gemm_backend(). Not to be called while products run.
void force_gemm_backend(GemmBackend b);
void reset_gemm_backend();
/// Tests: gemm_reads_half answers `on` from now on (-1: the CPU's answer again), so that the callers'
/// half paths run on any CPU (the seam then widens inside each call).
void force_gemm_reads_half(int on);
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

// The GEMM seam's dispatch (kernels/gemm.h): picks a backend per dtype at run time, splits a product
// across Loom's pool, and converts half operands around OpenBLAS where oneDNN has no kernel for them.
#include "loom/kernels/gemm.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <stdexcept>
#include <string>

#include "loom/core/allocator.h"
#include "loom/core/loops.h"
#include "loom/core/parallel.h"
#include "loom/core/profile.h"
#include "loom/core/threads.h"
#include "loom/kernels/gemm_backends.h"

namespace loom {

const char* to_string(GemmBackend b) { return b == GemmBackend::dnnl ? "dnnl" : "openblas"; }

namespace kernels {

namespace {

// What LOOM_GEMM asks for: nothing (the CPU decides), or one backend for every dtype it can take.
enum class Forced { none, openblas, dnnl };

Forced env_forced() {
  const char* v = std::getenv("LOOM_GEMM");
  if (!v || !*v) return Forced::none;
  const std::string s(v);
  if (s == "openblas") return Forced::openblas;
  if (s == "dnnl" || s == "onednn") return Forced::dnnl;
  throw std::invalid_argument(kmsg("[gemm] LOOM_GEMM=", s, ": expected openblas or dnnl (or unset, to let the CPU decide)"));
}

// -1: not forced by a test; otherwise the Forced value force_gemm_backend set.
std::atomic<int> test_forced{-1};
// -1: gemm_reads_half answers for the CPU; 0 or 1: a test's answer.
std::atomic<int> test_reads_half{-1};

Forced forced() {
  const int t = test_forced.load(std::memory_order_relaxed);
  if (t >= 0) return Forced(t);
  static const Forced f = env_forced();
  return f;
}

// How a product of `in` runs: its backend, and whether half operands go through float32 first.
struct Route {
  GemmBackend backend = GemmBackend::openblas;
  bool via_float32 = false;  // half inputs converted to float32 (the float32 backend then runs it)
};

Route route(Dtype in, Dtype out) {
  const Forced f = forced();
  if (in == float64 || in == complex64) return {GemmBackend::openblas, false};
  if (in == float32) {
    return {f == Forced::dnnl && backends::dnnl_supports(float32, float32) ? GemmBackend::dnnl : GemmBackend::openblas,
            false};
  }
  // bfloat16 / float16: oneDNN's kernels where it has them for this CPU, else float32's backend.
  if (f != Forced::openblas && backends::dnnl_supports(in, out)) return {GemmBackend::dnnl, false};
  return {route(float32, float32).backend, true};
}

void check(const Gemm& g) {
  const bool ok = (g.in == g.out && (g.in == float32 || g.in == float64 || g.in == complex64 || g.in == bfloat16 ||
                                     g.in == float16)) ||
                  ((g.in == bfloat16 || g.in == float16) && g.out == float32);
  if (!ok) throw std::invalid_argument(kmsg("[gemm] no product of ", g.in, " operands into ", g.out));
}

// The profiler's name for products that ran on a route ("Matmul [dnnl bf16]"): short, since the
// table has a column for it.
const char* tag(const Route& r, Dtype in) {
  const bool dnnl = r.backend == GemmBackend::dnnl;
  if (r.via_float32) {
    if (in == bfloat16) return dnnl ? "dnnl f32 from bf16" : "openblas f32 from bf16";
    return dnnl ? "dnnl f32 from f16" : "openblas f32 from f16";
  }
  if (dnnl) return in == bfloat16 ? "dnnl bf16" : in == float16 ? "dnnl f16" : "dnnl f32";
  return in == float64 ? "openblas f64" : in == complex64 ? "openblas c64" : "openblas f32";
}

template <typename H>
void via_float32(const Gemm& g, GemmBackend b);

// One share of a product on the calling thread. A layout oneDNN declines runs on OpenBLAS (half
// operands widened first: inside a share, via_float32 runs on this thread alone).
void run_share(const Gemm& g, GemmBackend b) {
  if (b != GemmBackend::dnnl) {
    backends::openblas_gemm(g);
  } else if (!backends::dnnl_gemm(g)) {
    if (g.in == float32) {
      backends::openblas_gemm(g);
    } else if (g.in == bfloat16) {
      via_float32<bfloat16_t>(g, GemmBackend::openblas);
    } else {
      via_float32<float16_t>(g, GemmBackend::openblas);
    }
  }
}

struct FloatBuffer {
  explicit FloatBuffer(size_t n) : buf(allocator::malloc(n * sizeof(float))) {}
  float* get() { return static_cast<float*>(buf.raw_ptr()); }
  allocator::Buffer buf;
  FloatBuffer(const FloatBuffer&) = delete;
  FloatBuffer& operator=(const FloatBuffer&) = delete;
  ~FloatBuffer() { allocator::free(buf); }
};

// A product of a transposed A over a long inner dimension (a weight gradient X^T dY over a batch's
// tokens) on oneDNN: its shares of rows or columns would each be a strided block of A as stored,
// which oneDNN's AMX kernels copy slowly (512 x 128 x 4096 ran no faster at 2 threads than at 1),
// so it splits the inner dimension instead, into two halves whatever the thread count (the sum's
// order does not depend on it), each into a float32 partial, added in order into C.
bool splits_inner(const Gemm& g, GemmBackend b) {
  return b == GemmBackend::dnnl && g.ta && g.in != float64 && g.in != complex64 && g.K >= 2048 &&
         g.K >= 4 * std::max(g.M, g.N) && g.M * g.N * g.K >= 2 * kGemmSplitMacs;
}

template <typename Out>
void add_partials(const float* p0, const float* p1, const Gemm& g) {
  parallel_for(size_t(g.M), [&](size_t r0, size_t r1) {
    for (size_t r = r0; r < r1; ++r) {
      Out* c = static_cast<Out*>(g.C) + int64_t(r) * g.ldc;
      const float *a = p0 + r * size_t(g.N), *bb = p1 + r * size_t(g.N);
      if (g.beta == 0.0) {
        for (int64_t j = 0; j < g.N; ++j) c[j] = Out(a[j] + bb[j]);
      } else {
        const float beta = float(g.beta);
        for (int64_t j = 0; j < g.N; ++j) c[j] = Out(a[j] + bb[j] + beta * static_cast<float>(c[j]));
      }
    }
  }, std::max<size_t>(1, kParallelThreshold / size_t(std::max<int64_t>(g.N, 1))));
}

void run_inner_halves(const Gemm& g, GemmBackend b) {
  const int64_t k0 = g.K / 2;
  const size_t ia = size_of(g.in);
  FloatBuffer part0(size_t(g.M * g.N)), part1(size_t(g.M * g.N));
  const int nt = loom::detail::in_parallel() ? 1 : std::min(2, get_num_threads());
  loom::detail::run_tasks(2, nt, [&](int64_t h) {
    Gemm s = g;
    s.out = float32, s.beta = 0.0, s.ldc = g.N;
    s.K = h == 0 ? k0 : g.K - k0;
    // Rows [k0, K) of A and of B as stored (A is transposed; B is (K, N), or (N, K) when transposed).
    s.A = static_cast<const char*>(g.A) + size_t(h == 0 ? 0 : k0 * g.lda) * ia;
    s.B = static_cast<const char*>(g.B) + size_t(h == 0 ? 0 : (g.tb ? k0 : k0 * g.ldb)) * ia;
    s.C = h == 0 ? part0.get() : part1.get();
    run_share(s, b);
  });
  if (g.out == bfloat16) {
    add_partials<bfloat16_t>(part0.get(), part1.get(), g);
  } else if (g.out == float16) {
    add_partials<float16_t>(part0.get(), part1.get(), g);
  } else {
    add_partials<float>(part0.get(), part1.get(), g);
  }
}

// Splits `g` into shares of C's rows (or columns, when it has more of those) over Loom's pool.
void run_split(const Gemm& g, GemmBackend b) {
  if (splits_inner(g, b)) {
    run_inner_halves(g, b);
    return;
  }
  const int64_t split = std::max(g.M, g.N);
  const int nt = loom::detail::in_parallel() || g.M * g.N * g.K < kGemmSplitMacs ? 1 : get_num_threads();
  // Two parts per thread, of at least 32 rows or columns: each part packs the other operand again.
  const int64_t parts = std::min<int64_t>(int64_t(nt) * 2, split / 32);
  if (nt <= 1 || parts <= 1) {
    run_share(g, b);
    return;
  }
  const size_t ia = size_of(g.in), ic = size_of(g.out);
  loom::detail::run_parts(size_t(split), parts, nt, [&](size_t b0, size_t e0) {
    const int64_t lo = int64_t(b0), hi = int64_t(e0);
    Gemm s = g;
    if (g.M >= g.N) {  // rows [lo, hi) of C and of op(A)
      s.M = hi - lo;
      s.A = static_cast<const char*>(g.A) + size_t(g.ta ? lo : lo * g.lda) * ia;
      s.C = static_cast<char*>(g.C) + size_t(lo * g.ldc) * ic;
    } else {  // columns [lo, hi) of C and of op(B)
      s.N = hi - lo;
      s.B = static_cast<const char*>(g.B) + size_t(g.tb ? lo * g.ldb : lo) * ia;
      s.C = static_cast<char*>(g.C) + size_t(lo) * ic;
    }
    run_share(s, b);
  });
}

// dst (rows x cols, row stride ldd) = src (rows x cols, row stride lds) converted (a half type to
// float32 exactly; float32 to a half type rounded to nearest even), over Loom's threads.
template <typename From, typename To>
void convert_rows(const From* src, int64_t lds, int64_t rows, int64_t cols, To* dst, int64_t ldd) {
  parallel_for(size_t(rows), [&](size_t b, size_t e) {
    for (size_t r = b; r < e; ++r) {
      const From* s = src + int64_t(r) * lds;
      To* d = dst + int64_t(r) * ldd;
      for (int64_t c = 0; c < cols; ++c) d[c] = To(static_cast<float>(s[c]));
    }
  }, std::max<size_t>(1, kParallelThreshold / size_t(std::max<int64_t>(cols, 1))));
}

// A half product on float32's backend: A and B widened as stored (their transposes kept), C computed
// in float32 (from a widened C when beta != 0) and rounded once into a half C.
template <typename H>
void via_float32(const Gemm& g, GemmBackend b) {
  const int64_t ar = g.ta ? g.K : g.M, ac = g.ta ? g.M : g.K, br = g.tb ? g.N : g.K, bc = g.tb ? g.K : g.N;
  FloatBuffer a(size_t(ar * ac)), bb(size_t(br * bc));
  convert_rows(static_cast<const H*>(g.A), g.lda, ar, ac, a.get(), ac);
  convert_rows(static_cast<const H*>(g.B), g.ldb, br, bc, bb.get(), bc);
  Gemm f = g;
  f.in = f.out = float32;
  f.A = a.get(), f.lda = std::max<int64_t>(ac, 1);
  f.B = bb.get(), f.ldb = std::max<int64_t>(bc, 1);
  if (g.out == float32) {
    run_split(f, b);
    return;
  }
  FloatBuffer c(size_t(g.M * g.N));
  if (g.beta != 0.0) convert_rows(static_cast<const H*>(g.C), g.ldc, g.M, g.N, c.get(), g.N);
  f.C = c.get(), f.ldc = std::max<int64_t>(g.N, 1);
  run_split(f, b);
  convert_rows(c.get(), g.N, g.M, g.N, static_cast<H*>(g.C), g.ldc);
}

// C = beta C when there is no inner dimension (beta == 0 writes zeros), in float64 for float64 and
// float32 otherwise (complex64 by parts).
template <typename T>
void scale_rows(void* C, int64_t M, int64_t N, int64_t ldc, double beta) {
  using W = std::conditional_t<std::is_same_v<T, double>, double, float>;
  for (int64_t r = 0; r < M; ++r) {
    T* c = static_cast<T*>(C) + r * ldc;
    for (int64_t j = 0; j < N; ++j) {
      if constexpr (std::is_same_v<T, complex64_t>) {
        c[j] = beta == 0.0 ? T(0.0f) : c[j] * T(float(beta));
      } else {
        c[j] = beta == 0.0 ? T(W(0)) : T(static_cast<W>(c[j]) * W(beta));
      }
    }
  }
}

void empty_inner(const Gemm& g) {
  if (g.out == float64) {
    scale_rows<double>(g.C, g.M, g.N, g.ldc, g.beta);
  } else if (g.out == complex64) {
    scale_rows<complex64_t>(g.C, g.M, g.N, g.ldc, g.beta);
  } else if (g.out == bfloat16) {
    scale_rows<bfloat16_t>(g.C, g.M, g.N, g.ldc, g.beta);
  } else if (g.out == float16) {
    scale_rows<float16_t>(g.C, g.M, g.N, g.ldc, g.beta);
  } else {
    scale_rows<float>(g.C, g.M, g.N, g.ldc, g.beta);
  }
}

}  // namespace

void gemm(const Gemm& g) {
  check(g);
  if (g.M <= 0 || g.N <= 0) return;
  if (g.K <= 0) {
    empty_inner(g);
    return;
  }
  const Route r = route(g.in, g.out);
  if (profile::detail::recording() && !loom::detail::in_parallel()) {
    profile::detail::note_backend(tag(r, g.in));
  }
  if (!r.via_float32) {
    run_split(g, r.backend);
  } else if (g.in == bfloat16) {
    via_float32<bfloat16_t>(g, r.backend);
  } else {
    via_float32<float16_t>(g, r.backend);
  }
}

void note_gemm_backend(Dtype in, Dtype out) {
  if (profile::detail::recording() && !loom::detail::in_parallel()) profile::detail::note_backend(tag(route(in, out), in));
}

bool gemm_reads_half(Dtype d) {
  const int t = test_reads_half.load(std::memory_order_relaxed);
  if (t >= 0) return t == 1;
  return !route(d, d).via_float32;
}

namespace detail {
void force_gemm_reads_half(int on) { test_reads_half.store(on < 0 ? -1 : on ? 1 : 0, std::memory_order_relaxed); }
void force_gemm_backend(GemmBackend b) {
  test_forced.store(int(b == GemmBackend::dnnl ? Forced::dnnl : Forced::openblas), std::memory_order_relaxed);
}
void reset_gemm_backend() { test_forced.store(-1, std::memory_order_relaxed); }
bool dnnl_takes(Dtype in, Dtype out) { return backends::dnnl_supports(in, out); }
DnnlCacheStats dnnl_cache_stats() { return backends::dnnl_stats(); }
}  // namespace detail

}  // namespace kernels

GemmBackend gemm_backend(Dtype dtype) {
  if (!is_inexact(dtype)) {
    throw std::invalid_argument(kernels::kmsg("[gemm_backend] products are of floating dtypes, got ", dtype));
  }
  return kernels::route(dtype, dtype).backend;
}

std::string gemm_config() {
  std::string s;
  for (Dtype d : {float32, bfloat16, float16, float64, complex64}) {
    const kernels::Route r = kernels::route(d, d);
    const Dtype run = r.via_float32 ? float32 : d;
    const std::string how = r.backend == GemmBackend::dnnl ? kernels::backends::dnnl_impl(run, run)
                                                           : kernels::backends::openblas_core() + " kernels";
    s += kernels::kmsg(s.empty() ? "" : "; ", d, ": ", r.via_float32 ? "as float32 on " : "", to_string(r.backend),
                           " (", how);
    if (r.via_float32) {
      s += kernels::forced() == kernels::Forced::openblas ? ", LOOM_GEMM=openblas"
                                                           : kernels::kmsg(", oneDNN has no ", d, " kernel for this CPU");
    }
    s += ")";
  }
  return s;
}

}  // namespace loom

// dnnl/epilogue.cpp: issue 25's question, measured on the shapes of mlp_step and transformer_step: does
// oneDNN's float32 matmul with its bias and activation fused (post-ops) beat what Loom does today,
// OpenBLAS's sgemm onto a pre-broadcast bias (beta = 1, as addmm) followed by a separate pass for
// the activation? Standalone (not built by CMake); compiled by hand against the dev build:
//
//   g++ -O3 -march=native -std=c++17 -fopenmp -Ibuild-dev/include -I/usr/include/x86_64-linux-gnu/openblas-pthread benchmarks/dnnl/epilogue.cpp -o /tmp/dnnl_epilogue -Wl,-rpath,$PWD/build-dev build-dev/libloom.so -ldnnl -lopenblas
//
//   /tmp/dnnl_epilogue [--threads T]... [--rounds R] [--block B] [--shape NAME] [--no-loom] [--no-backward] [--wt]
//   (default: threads 1 and 2, 40 rounds, blocks of 3 calls on the transformer's shapes, 10 on the MLP's)
//
// Forward, per shape (M rows, K in, N out; W of shape (N, K) row-major, y = act(x W^T + b)):
//   blas_sep        bias broadcast into C, cblas_sgemm beta=1 (split over rows/columns across the
//                   threads of Loom's pool as single-threaded calls, as ops/kernels/gemm.h does),
//                   then a separate pass for the activation into a new buffer (simd::gelu /
//                   max(x, 0), Loom's math; on the pool too)
//   dnnl_fused      dnnl::matmul with the bias as its bias memory and the activation as an eltwise
//                   post-op (gelu_erf / relu): one primitive, output written once; threaded by
//                   oneDNN itself (Debian's libdnnl uses OpenMP)
//   dnnl_bias_sep   dnnl::matmul with the bias fused, activation as blas_sep's separate pass (what
//                   training could use: GELU's backward needs the pre-activation, which a fused
//                   post-op never writes)
//   dnnl_fused_wT   (--wt, diagnostic) dnnl_fused on W^T stored row-major, the transpose untimed
//   dnnl_split      (2+ threads) dnnl_fused as single-threaded primitives on shares of the output,
//                   split as blas_sep's GEMM on Loom's pool (Loom's way of threading a product),
//                   not oneDNN's own OpenMP split
//   loom            Loom's own ops: eval(nn::gelu / nn::relu (addmm(b, x, transpose(W))))
// Backward (no epilogue), dX = dY W and dW = dY^T X: blas (the same split) vs dnnl plain matmul
// (threaded by oneDNN's OpenMP).
// Every implementation is timed call by call, interleaved: in each round each one runs a block of
// calls, in an order that rotates from round to round; medians over all calls are printed as JSON
// lines: wall time (median_ms) and the process's CPU time (median_cpu_ms; at 1 thread the robust
// number on a loaded machine, at 2 threads it also counts the threads' spinning). Primitives are created once, outside the timing (as Loom would cache them); their creation
// cost is measured separately (cold: primitive cache disabled; warm: a cache hit).
#include <cblas.h>
#include <loom/loom.h>
#include <loom/core/parallel.h>
#include <loom/kernels/simd_math.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <dnnl.hpp>
#include <functional>
#include <random>
#include <string>
#include <time.h>
#include <vector>

extern "C" void openblas_set_num_threads(int);

namespace {

using clk = std::chrono::steady_clock;
double now_ms() { return std::chrono::duration<double, std::milli>(clk::now().time_since_epoch()).count(); }
// CPU time of the whole process (all its threads): at 1 thread, the time the call was on a core,
// which time slices lost to other processes on a loaded machine do not inflate.
double cpu_ms() {
  timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
}
double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

enum class Act { none, relu, gelu };
const char* act_name(Act a) { return a == Act::none ? "none" : a == Act::relu ? "relu" : "gelu_erf"; }

struct Case {
  const char* name;
  int M, K, N;
  Act act;
};

// mlp_step (batch 128, Linear 784-512-512-10, ReLU) and transformer_step (B*T = 32*128 = 4096 rows,
// d_model 128, d_ff 512, exact GELU; q/k/v run as one (128 -> 384) product, nn/transformer.cpp).
const Case kCases[] = {
    {"mlp.l1", 128, 784, 512, Act::relu},   {"mlp.l2", 128, 512, 512, Act::relu},
    {"mlp.l3", 128, 512, 10, Act::none},    {"tf.qkv", 4096, 128, 384, Act::none},
    {"tf.out", 4096, 128, 128, Act::none},  {"tf.fc1", 4096, 128, 512, Act::gelu},
    {"tf.fc2", 4096, 512, 128, Act::none},  {"tf.head", 4096, 128, 256, Act::none},
};

int g_threads = 1;

// Loom's thread pool (core/parallel.h, exported by libloom): f(i) for i in [0, tasks) over `nt` threads.
template <typename F>
void pool(int64_t tasks, int nt, F&& f) {
  if (nt <= 1 || tasks <= 1) {
    for (int64_t i = 0; i < tasks; ++i) f(i);
  } else {
    loom::detail::run_tasks(tasks, nt, f);
  }
}

// ops/kernels/gemm.h's gemm, on Loom's pool as there: single-threaded OpenBLAS calls on contiguous
// shares of C's rows (or columns), two parts per thread of at least 32, above 2^20 MACs.
void gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda, const float* B,
          int64_t ldb, float beta, float* C, int64_t ldc) {
  auto call = [&](int64_t m, int64_t n, const float* a, const float* b, float* c) {
    cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, int(m), int(n), int(K),
                alpha, a, int(lda), b, int(ldb), beta, c, int(ldc));
  };
  const int64_t split = std::max(M, N);
  const int nt = M * N * K < (int64_t(1) << 20) ? 1 : g_threads;
  const int64_t parts = std::min<int64_t>(int64_t(nt) * 2, split / 32);
  if (nt <= 1 || parts <= 1) return call(M, N, A, B, C);
  pool(parts, nt, [&](int64_t p) {
    const int64_t b = split * p / parts, e = split * (p + 1) / parts;
    if (M >= N) {
      call(e - b, N, ta ? A + b : A + b * lda, B, C + b * ldc);
    } else {
      call(M, e - b, A, tb ? B + b * ldb : B + b, C + b);
    }
  });
}

// The separate activation pass (Loom's Gelu kernel and maximum(x, 0)), parts of at least 2^14
// elements (4 per thread at most) on Loom's pool.
void activation(Act act, const float* x, float* y, size_t n) {
  const int64_t chunks = int64_t((n + (1 << 14) - 1) >> 14), parts = loom::detail::parts_for(chunks, g_threads);
  pool(parts, g_threads, [&](int64_t p) {
    const size_t b = n * p / parts, e = n * (p + 1) / parts;
    if (act == Act::gelu) {
      for (size_t i = b; i < e; ++i) y[i] = loom::simd::gelu(x[i]);
    } else {
      for (size_t i = b; i < e; ++i) y[i] = std::max(x[i], 0.0f);
    }
  });
}

void broadcast_rows(const float* bias, float* c, int M, int N) {
  const int64_t chunks = (int64_t(M) * N) >> 14, parts = loom::detail::parts_for(std::max<int64_t>(chunks, 1), g_threads);
  pool(parts, g_threads, [&](int64_t p) {
    for (int64_t i = M * p / parts; i < M * (p + 1) / parts; ++i) std::memcpy(c + size_t(i) * N, bias, sizeof(float) * N);
  });
}

using dnnl::memory;
using tag = memory::format_tag;
using dt = memory::data_type;

dnnl::engine& eng() {
  static dnnl::engine e(dnnl::engine::kind::cpu, 0);
  return e;
}
dnnl::stream& strm() {  // one per thread: dnnl_split executes primitives from two threads at once
  thread_local dnnl::stream s(eng());
  return s;
}

// A matmul primitive: src (M, K) with strides, weights (K, N) with strides, optional bias (1, N), post-op.
struct DnnlMatmul {
  memory::desc src, wei, bias, dst;
  dnnl::matmul prim;
  bool has_bias = false;
  DnnlMatmul() = default;
  DnnlMatmul(int M, int K, int N, memory::dims src_strides, memory::dims wei_strides, bool with_bias, Act act,
             int64_t ldd = 0) {
    src = memory::desc({M, K}, dt::f32, src_strides);
    wei = memory::desc({K, N}, dt::f32, wei_strides);
    dst = memory::desc({M, N}, dt::f32, memory::dims{ldd ? ldd : N, 1});
    has_bias = with_bias;
    if (with_bias) bias = memory::desc({1, N}, dt::f32, tag::ab);
    dnnl::primitive_attr attr;
    if (act != Act::none) {
      dnnl::post_ops po;
      po.append_eltwise(1.0f, act == Act::gelu ? dnnl::algorithm::eltwise_gelu_erf : dnnl::algorithm::eltwise_relu,
                        0.0f, 0.0f);
      attr.set_post_ops(po);
    }
    dnnl::matmul::desc d = with_bias ? dnnl::matmul::desc(src, wei, bias, dst) : dnnl::matmul::desc(src, wei, dst);
    dnnl::matmul::primitive_desc pd(d, attr, eng());
    prim = dnnl::matmul(pd);
  }
  static const char* impl_name(int M, int K, int N, Act act) {
    static std::string s;
    DnnlMatmul m;
    memory::desc src({M, K}, dt::f32, tag::ab), wei({K, N}, dt::f32, tag::ba), bias({1, N}, dt::f32, tag::ab),
        dst({M, N}, dt::f32, tag::ab);
    dnnl::primitive_attr attr;
    if (act != Act::none) {
      dnnl::post_ops po;
      po.append_eltwise(1.0f, act == Act::gelu ? dnnl::algorithm::eltwise_gelu_erf : dnnl::algorithm::eltwise_relu,
                        0.0f, 0.0f);
      attr.set_post_ops(po);
    }
    dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(src, wei, bias, dst), attr, eng());
    s = pd.impl_info_str();
    return s.c_str();
  }
  // Memory objects wrap the caller's pointers on each call (Loom's buffers change from eval to eval).
  void run(const float* a, const float* w, const float* b, float* y) {
    memory ms(src, eng(), const_cast<float*>(a)), mw(wei, eng(), const_cast<float*>(w)), md(dst, eng(), y);
    std::unordered_map<int, memory> args{{DNNL_ARG_SRC, ms}, {DNNL_ARG_WEIGHTS, mw}, {DNNL_ARG_DST, md}};
    if (has_bias) args.insert({DNNL_ARG_BIAS, memory(bias, eng(), const_cast<float*>(b))});
    prim.execute(strm(), args);
    strm().wait();
  }
};

// dnnl_fused split as ops/kernels/gemm.h splits a product (and `gemm` above): single-threaded
// primitives (created while omp_get_max_threads() is 1) on contiguous shares of the output's rows, or
// of its columns when it has more of those, claimed by the threads of Loom's pool.
struct DnnlSplit {
  std::vector<DnnlMatmul> prims;
  std::vector<std::pair<int64_t, int64_t>> ranges;
  bool rows = true;
  int M = 0, K = 0, N = 0, nt = 1;
  DnnlSplit(int M_, int K_, int N_, Act act, int threads) : M(M_), K(K_), N(N_) {
    const int64_t split = std::max(M, N);
    nt = int64_t(M) * N * K < (int64_t(1) << 20) ? 1 : threads;
    const int64_t parts = std::max<int64_t>(1, std::min<int64_t>(int64_t(nt) * 2, split / 32));
    rows = M >= N;
    omp_set_num_threads(1);
    for (int64_t p = 0; p < parts; ++p) {
      const int64_t b = split * p / parts, e = split * (p + 1) / parts;
      ranges.push_back({b, e});
      if (rows) prims.emplace_back(int(e - b), K, N, memory::dims{K, 1}, memory::dims{1, K}, true, act);
      else prims.emplace_back(M, K, int(e - b), memory::dims{K, 1}, memory::dims{1, K}, true, act, N);
    }
    omp_set_num_threads(threads);
  }
  void run(const float* x, const float* w, const float* bias, float* y) {
    pool(int64_t(prims.size()), nt, [&](int64_t p) {
      const int64_t b = ranges[p].first;
      if (rows) prims[p].run(x + b * K, w, bias, y + b * N);
      else prims[p].run(x, w + b * K, bias + b, y + b);
    });
  }
};

std::vector<float> randn(size_t n, float scale, std::mt19937& g) {
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = d(g);
  return v;
}

float max_abs_diff(const float* a, const float* b, size_t n) {
  float m = 0;
  for (size_t i = 0; i < n; ++i) m = std::max(m, std::abs(a[i] - b[i]));
  return m;
}

struct Impl {
  std::string name;
  std::function<void()> fn;
  std::vector<double> ms, cpu;
};

// Rounds of blocks: each implementation runs `block` calls per round, the order rotating per round.
void measure(std::vector<Impl>& impls, int rounds, int block) {
  for (auto& im : impls) {
    for (int i = 0; i < 3; ++i) im.fn();  // warm-up
  }
  for (int r = 0; r < rounds; ++r) {
    for (size_t j = 0; j < impls.size(); ++j) {
      Impl& im = impls[(j + r) % impls.size()];
      for (int b = 0; b < block; ++b) {
        const double c0 = cpu_ms(), t0 = now_ms();
        im.fn();
        const double t1 = now_ms(), c1 = cpu_ms();
        im.ms.push_back(t1 - t0);
        im.cpu.push_back(c1 - c0);
      }
    }
  }
}

void print(const char* pass, const Case& c, int threads, std::vector<Impl>& impls, const std::string& extra) {
  const double base = median(impls[0].ms), cbase = median(impls[0].cpu);
  for (auto& im : impls) {
    const double m = median(im.ms), cm = median(im.cpu);
    std::printf("{\"bench\":\"dnnl_epilogue\",\"pass\":\"%s\",\"shape\":\"%s\",\"M\":%d,\"K\":%d,\"N\":%d,"
                "\"act\":\"%s\",\"threads\":%d,\"impl\":\"%s\",\"median_ms\":%.4f,\"vs_%s\":%.3f,\"median_cpu_ms\":%.4f,\"cpu_vs_first\":%.3f,\"min_ms\":%.4f,\"n\":%zu%s}\n",
                pass, c.name, c.M, c.K, c.N, act_name(c.act), threads, im.name.c_str(), m, impls[0].name.c_str(),
                m / base, cm, cm / cbase, *std::min_element(im.ms.begin(), im.ms.end()), im.ms.size(), extra.c_str());
    im.ms.clear();
    im.cpu.clear();
  }
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<int> threads;
  int rounds = 40;
  bool do_loom = true, do_backward = true, wt_diag = false;
  std::string only;  // --shape NAME: that shape alone
  int block_override = 0;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--threads") && i + 1 < argc) threads.push_back(std::atoi(argv[++i]));
    else if (!std::strcmp(argv[i], "--rounds") && i + 1 < argc) rounds = std::atoi(argv[++i]);
    else if (!std::strcmp(argv[i], "--no-loom")) do_loom = false;
    else if (!std::strcmp(argv[i], "--no-backward")) do_backward = false;
    else if (!std::strcmp(argv[i], "--wt")) wt_diag = true;
    else if (!std::strcmp(argv[i], "--shape") && i + 1 < argc) only = argv[++i];
    else if (!std::strcmp(argv[i], "--block") && i + 1 < argc) block_override = std::atoi(argv[++i]);
  }
  if (threads.empty()) threads = {1, 2};
  const auto v = dnnl::version();
  std::fprintf(stderr, "oneDNN %d.%d.%d (%s), OpenBLAS %s\n", v->major, v->minor, v->patch, v->hash,
               openblas_get_config());

  // Primitive creation cost, for transformer_step's fc1 (4096 x 128 -> 512, bias + gelu_erf):
  // cold (cache capacity 0: every creation builds and JITs the kernels again) and warm (cache hit).
  {
    const Case& c = kCases[5];
    std::vector<double> cold, warm;
    const int cap = dnnl::get_primitive_cache_capacity();
    double t0 = now_ms();
    eng(), strm();
    const double engine_ms = now_ms() - t0;
    t0 = now_ms();
    DnnlMatmul first(c.M, c.K, c.N, {c.K, 1}, {1, c.K}, true, c.act);
    const double first_ms = now_ms() - t0;
    dnnl::set_primitive_cache_capacity(0);
    for (int i = 0; i < 30; ++i) {
      t0 = now_ms();
      DnnlMatmul m(c.M, c.K, c.N, {c.K, 1}, {1, c.K}, true, c.act);
      cold.push_back(now_ms() - t0);
    }
    dnnl::set_primitive_cache_capacity(cap);
    DnnlMatmul prime(c.M, c.K, c.N, {c.K, 1}, {1, c.K}, true, c.act);
    for (int i = 0; i < 30; ++i) {
      t0 = now_ms();
      DnnlMatmul m(c.M, c.K, c.N, {c.K, 1}, {1, c.K}, true, c.act);
      warm.push_back(now_ms() - t0);
    }
    std::printf("{\"bench\":\"dnnl_primitive_creation\",\"shape\":\"%s\",\"engine_and_stream_ms\":%.3f,"
                "\"first_primitive_in_process_ms\":%.3f,\"cold_median_ms\":%.3f,\"cache_hit_median_ms\":%.4f,\"n\":30}\n",
                c.name, engine_ms, first_ms, median(cold), median(warm));
    for (const Case& k : kCases) {
      std::fprintf(stderr, "dnnl matmul impl for %s (%dx%dx%d, %s): %s\n", k.name, k.M, k.K, k.N, act_name(k.act),
                   DnnlMatmul::impl_name(k.M, k.K, k.N, k.act));
    }
  }

  std::mt19937 gen(0);
  openblas_set_num_threads(1);  // as Loom: OpenBLAS single-threaded, products split by the caller
  for (const Case& c : kCases) {
    if (!only.empty() && only != c.name) continue;
    const int M = c.M, K = c.K, N = c.N;
    std::vector<float> x = randn(size_t(M) * K, 1.0f, gen), w = randn(size_t(N) * K, 1.0f / std::sqrt(float(K)), gen),
                       bias = randn(N, 0.1f, gen), dy = randn(size_t(M) * N, 1.0f, gen);
    std::vector<float> h1(size_t(M) * N), y1(size_t(M) * N), y2(size_t(M) * N), h3(size_t(M) * N),
        y3(size_t(M) * N);
    std::vector<float> wt(size_t(K) * N), y4(size_t(M) * N);
    for (int i = 0; i < N; ++i)
      for (int j = 0; j < K; ++j) wt[size_t(j) * N + i] = w[size_t(i) * K + j];
    std::vector<float> dx1(size_t(M) * K), dx2(size_t(M) * K), dw1(size_t(N) * K), dw2(size_t(N) * K);

    loom::array lx(x, {M, K}), lw(w, {N, K}), lb(bias, {N});
    loom::eval(lx, lw, lb);
    std::vector<float> loom_out;

    for (int t : threads) {
      g_threads = t;
      omp_set_num_threads(t);  // oneDNN's OpenMP runtime
      loom::set_num_threads(t);
      openblas_set_num_threads(1);
      // Primitives are made after the thread count is set: oneDNN fixes a primitive's thread count
      // (its work split) when it is created, from omp_get_max_threads().
      DnnlMatmul fused(M, K, N, {K, 1}, {1, K}, true, c.act);
      DnnlMatmul biased(M, K, N, {K, 1}, {1, K}, true, Act::none);
      // Diagnostic: the same fused primitive on W^T stored row-major (K, N), the transpose untimed.
      DnnlMatmul fused_wt(M, K, N, {K, 1}, {N, 1}, true, c.act);
      DnnlSplit split(M, K, N, c.act, t);
      std::vector<float> y5(size_t(M) * N);
      // Backward: dX (M, K) = dY (M, N) W (N, K); dW (N, K) = dY^T (N, M) X (M, K).
      DnnlMatmul dx_prim(M, N, K, {N, 1}, {K, 1}, false, Act::none);
      DnnlMatmul dw_prim(N, M, K, {1, N}, {K, 1}, false, Act::none);

      auto blas_sep = [&] {
        broadcast_rows(bias.data(), h1.data(), M, N);
        gemm(false, true, M, N, K, 1.0f, x.data(), K, w.data(), K, 1.0f, h1.data(), N);
        if (c.act != Act::none) activation(c.act, h1.data(), y1.data(), size_t(M) * N);
      };
      auto dnnl_fused = [&] { fused.run(x.data(), w.data(), bias.data(), y2.data()); };
      auto dnnl_split = [&] { split.run(x.data(), w.data(), bias.data(), y5.data()); };
      auto dnnl_fused_wt = [&] { fused_wt.run(x.data(), wt.data(), bias.data(), y4.data()); };
      auto dnnl_bias_sep = [&] {
        biased.run(x.data(), w.data(), bias.data(), h3.data());
        activation(c.act, h3.data(), y3.data(), size_t(M) * N);
      };
      auto loom_op = [&] {
        loom::array h = loom::addmm(lb, lx, loom::transpose(lw));
        loom::array y = c.act == Act::gelu ? loom::nn::gelu(h) : c.act == Act::relu ? loom::nn::relu(h) : h;
        loom::eval(y);
        if (loom_out.empty()) loom_out.assign(y.data<float>(), y.data<float>() + y.size());
      };

      std::vector<Impl> impls{{"blas_sep", blas_sep, {}}, {"dnnl_fused", dnnl_fused, {}}};
      if (c.act != Act::none) impls.push_back({"dnnl_bias_sep", dnnl_bias_sep, {}});
      if (do_loom) impls.push_back({"loom", loom_op, {}});
      if (wt_diag) impls.push_back({"dnnl_fused_wT", dnnl_fused_wt, {}});
      if (t > 1) impls.push_back({"dnnl_split", dnnl_split, {}});
      const int block = block_override > 0 ? block_override : M * int64_t(N) * K > (int64_t(1) << 24) ? 3 : 10;
      measure(impls, rounds, block);

      const float* ref = c.act == Act::none ? h1.data() : y1.data();
      char extra[200];
      std::snprintf(extra, sizeof extra, ",\"max_abs_diff_dnnl\":%.2e,\"max_abs_diff_split\":%.2e,\"max_abs_diff_loom\":%.2e",
                    max_abs_diff(ref, y2.data(), size_t(M) * N), t > 1 ? max_abs_diff(ref, y5.data(), size_t(M) * N) : 0.0f,
                    loom_out.empty() ? 0.0f : max_abs_diff(ref, loom_out.data(), size_t(M) * N));
      print("forward", c, t, impls, extra);

      if (do_backward) {
        std::vector<Impl> dx{{"blas", [&] {
                                gemm(false, false, M, K, N, 1.0f, dy.data(), N, w.data(), K, 0.0f, dx1.data(), K);
                              }, {}},
                             {"dnnl", [&] { dx_prim.run(dy.data(), w.data(), nullptr, dx2.data()); }, {}}};
        measure(dx, rounds, block);
        std::snprintf(extra, sizeof extra, ",\"max_abs_diff_dnnl\":%.2e", max_abs_diff(dx1.data(), dx2.data(), dx1.size()));
        print("backward_dx", c, t, dx, extra);
        std::vector<Impl> dw{{"blas", [&] {
                                gemm(true, false, N, K, M, 1.0f, dy.data(), N, x.data(), K, 0.0f, dw1.data(), K);
                              }, {}},
                             {"dnnl", [&] { dw_prim.run(dy.data(), x.data(), nullptr, dw2.data()); }, {}}};
        measure(dw, rounds, block);
        std::snprintf(extra, sizeof extra, ",\"max_abs_diff_dnnl\":%.2e", max_abs_diff(dw1.data(), dw2.data(), dw1.size()));
        print("backward_dw", c, t, dw, extra);
      }
    }
  }
}

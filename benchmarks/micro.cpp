// matmul_512, matmul_1024, matmul_2048 (float32) and matmul_bf16_512, matmul_bf16_2048 (bfloat16
// operands and result, float32 accumulation: the GEMM seam's half path), eltwise_chain_4m and
// op_overhead as docs/benchmarks.md defines them,
// unary_4m: one float32 math op (exp, log, tanh, sigmoid, erf, nn::gelu, nn::gelu_approx) over
// 4M floats in [-4, 4) ([0.01, 8) for log); and fused_rows: forward + backward of rms_norm and
// softmax, fused and written op by op; quantized_matmul_4bit: x (8, 4096) against a 4-bit (group 64)
// quantized 4096 x 4096 weight, next to the float32 matmul of the same shapes.
#include <loom/loom.h>

#include <cstring>
#include <functional>
#include <tuple>
#include <utility>

#include "bench.h"

using namespace loom;

int main(int argc, char** argv) {
  const bool quick = bench::quick();
  for (int threads : bench::thread_counts(argc, argv)) {
    set_num_threads(threads);
    for (auto [n, dt] : {std::pair{512, float32}, {1024, float32}, {2048, float32}, {512, bfloat16}, {2048, bfloat16}}) {
      array a = astype(ones({n, n}) * 0.5f, dt), b = astype(ones({n, n}) * 0.25f, dt);
      eval(a, b);
      matmul(a, b).eval();  // warm-up
      int reps = quick ? 10 : (n <= 1024 ? 30 : 10);  // the peer times at least 0.1 s (QUICK) or 1 s
      std::vector<double> ms;
      for (int r = 0; r < reps; ++r) {
        double t0 = bench::now_ms();
        array c = matmul(a, b);
        c.eval();
        ms.push_back(bench::now_ms() - t0);
      }
      double t = bench::median(ms);
      std::printf("{\"bench\":\"matmul_%s%d\",\"impl\":\"loom\",\"threads\":%d,\"median_ms\":%.3f,\"gflops\":%.2f,"
                  "\"n\":%d,\"gemm\":\"%s\"}\n",
                  dt == bfloat16 ? "bf16_" : "", n, threads, t, 2.0 * n * n * n / (t * 1e-3) / 1e9, reps,
                  to_string(gemm_backend(dt)));
      std::fflush(stdout);
    }
    {
      const int n = 4 << 20;
      array x = arange(0.0, double(n), 1.0, float32) * (1.0f / n) - 0.5f;
      x.eval();
      auto chain = [&] { return exp(tanh(x * 2.0f + 1.0f) * x) - x; };
      chain().eval();
      int reps = quick ? 10 : 50;
      std::vector<double> ms;
      for (int r = 0; r < reps; ++r) {
        double t0 = bench::now_ms();
        array y = chain();
        y.eval();
        ms.push_back(bench::now_ms() - t0);
      }
      double t = bench::median(ms);
      std::printf("{\"bench\":\"eltwise_chain_4m\",\"impl\":\"loom\",\"threads\":%d,\"median_ms\":%.3f,\"gbps\":%.2f,\"n\":%d}\n",
                  threads, t, n * 8.0 / (t * 1e-3) / 1e9, reps);
      std::fflush(stdout);
    }
    {
      const int n = 4 << 20;
      array x = arange(0.0, double(n), 1.0, float32) * (8.0f / n) - 4.0f;
      array xp = abs(x) * 2.0f + 0.01f;
      eval(x, xp);
      const std::pair<const char*, std::function<array()>> ops[] = {
          {"exp", [&] { return exp(x); }},         {"log", [&] { return log(xp); }},
          {"tanh", [&] { return tanh(x); }},       {"sigmoid", [&] { return sigmoid(x); }},
          {"erf", [&] { return erf(x); }},         {"gelu", [&] { return nn::gelu(x); }},
          {"gelu_approx", [&] { return nn::gelu_approx(x); }}};
      for (const auto& [name, op] : ops) {
        op().eval();
        int reps = quick ? 10 : 40;
        std::vector<double> ms;
        for (int r = 0; r < reps; ++r) {
          double t0 = bench::now_ms();
          array y = op();
          y.eval();
          ms.push_back(bench::now_ms() - t0);
        }
        std::printf("{\"bench\":\"unary_4m\",\"op\":\"%s\",\"impl\":\"loom\",\"threads\":%d,\"median_ms\":%.3f,\"n\":%d}\n",
                    name, threads, bench::median(ms), reps);
        std::fflush(stdout);
      }
    }
    {
      const int ops = 1000, reps = quick ? 10 : 50;
      array one = ones({1});
      one.eval();
      std::vector<double> ms;
      for (int r = 0; r < reps + 1; ++r) {
        array x = zeros({1});
        x.eval();
        double t0 = bench::now_ms();
        for (int i = 0; i < ops; ++i) {
          x = x + one;
          x.eval();
        }
        if (r > 0) ms.push_back(bench::now_ms() - t0);
        if (x.item<float>() != ops) std::fprintf(stderr, "op_overhead: wrong sum\n");
      }
      double t = bench::median(ms);
      std::printf("{\"bench\":\"op_overhead\",\"impl\":\"loom\",\"threads\":%d,\"median_ms\":%.4f,\"us_per_op\":%.3f,\"n\":%d}\n",
                  threads, t, t * 1e3 / ops, reps);
      std::fflush(stdout);
    }
    {
      // op_overhead compiled: the same 1,000 adds traced once by compile (op_overhead_compiled: one
      // call runs them all, so each op costs its kernel's dispatch alone), and one compiled add
      // called and evaluated 1,000 times (op_overhead_compiled_call: a compiled call's own cost).
      const int ops = 1000, reps = quick ? 10 : 50;
      array one = ones({1});
      one.eval();
      VectorFn chain = compile([=](const std::vector<array>& in) {
        array x = in[0];
        for (int i = 0; i < ops; ++i) x = x + in[1];
        return std::vector<array>{x};
      });
      VectorFn add_one = compile([](const std::vector<array>& in) { return std::vector<array>{in[0] + in[1]}; });
      for (const char* name : {"op_overhead_compiled", "op_overhead_compiled_call"}) {
        const bool call = name[std::strlen(name) - 1] == 'l';
        std::vector<double> ms;
        for (int r = 0; r < reps + 1; ++r) {
          array x = zeros({1});
          x.eval();
          double t0 = bench::now_ms();
          if (call) {
            for (int i = 0; i < ops; ++i) {
              x = add_one({x, one})[0];
              x.eval();
            }
          } else {
            x = chain({x, one})[0];
            x.eval();
          }
          if (r > 0) ms.push_back(bench::now_ms() - t0);
          if (x.item<float>() != ops) std::fprintf(stderr, "%s: wrong sum\n", name);
        }
        double t = bench::median(ms);
        std::printf("{\"bench\":\"%s\",\"impl\":\"loom\",\"threads\":%d,\"median_ms\":%.4f,\"us_per_op\":%.3f,\"n\":%d}\n",
                    name, threads, t, t * 1e3 / ops, reps);
        std::fflush(stdout);
      }
    }
    {
      // fused_rows: forward + backward (vjp of sum(y * g)) of the row-wise fused ops against the same
      // math written op by op: rms_norm over (4096, 128) with a weight, softmax over (4096, 1000).
      array h = random::normal({4096, 128}), w = random::uniform({128}) + 0.5f, gh = random::normal({4096, 128});
      array s = random::normal({4096, 1000}) * 3.0f, gs = random::normal({4096, 1000});
      eval(h, w, gh, s, gs);
      const std::tuple<const char*, const char*, array, array, std::function<array(const array&)>> cases[] = {
          {"rms_norm", "fused", h, gh, [&](const array& x) { return fast::rms_norm(x, w, 1e-5); }},
          {"rms_norm", "composed", h, gh,
           [&](const array& x) { return x * rsqrt(mean(square(x), -1, true) + 1e-5f) * w; }},
          {"softmax", "fused", s, gs, [&](const array& x) { return fast::softmax(x); }},
          {"softmax", "composed", s, gs,
           [&](const array& x) {
             array e = exp(x - stop_gradient(max(x, -1, true)));
             return e / sum(e, -1, true);
           }}};
      for (const auto& [op, impl, x, g, fn] : cases) {
        auto step = [&, &x = x, &g = g, &fn = fn] {
          auto [y, dx] = vjp(fn, x, g);
          eval(y, dx);
        };
        step();
        const int reps = quick ? 10 : 30;
        std::vector<double> ms;
        for (int r = 0; r < reps; ++r) {
          double t0 = bench::now_ms();
          step();
          ms.push_back(bench::now_ms() - t0);
        }
        std::printf("{\"bench\":\"fused_rows\",\"op\":\"%s\",\"impl\":\"loom_%s\",\"threads\":%d,"
                    "\"median_ms\":%.3f,\"n\":%d}\n",
                    op, impl, threads, bench::median(ms), reps);
        std::fflush(stdout);
      }
    }
    for (const int M : {8, 512}) {
      // quantized_matmul_4bit: the product of a quantized linear layer, against matmul: M = 8 at
      // decode time, 512 for a prefill or a training batch; bfloat16 x too at 512 (weights
      // dequantized into bfloat16 panels where the GEMM seam has bfloat16 kernels).
      const int K = 4096, N = 4096;
      array x = random::normal({M, K}), w = random::normal({N, K}) * 0.02f;
      auto q = quantize(w, 64, 4);
      array xh = astype(x, bfloat16);
      auto qh = quantize(astype(w, bfloat16), 64, 4);
      array wt = transpose(w);
      eval(x, w, q[0], q[1], q[2], xh, qh[0], qh[1], qh[2]);
      std::vector<std::pair<const char*, std::function<array()>>> cases = {
          {"quantized_matmul_4bit", [&] { return quantized_matmul(x, q[0], q[1], q[2], true, 64, 4); }},
          {"matmul_f32", [&] { return matmul(x, wt); }}};
      if (M > 8) {
        cases.push_back({"quantized_matmul_4bit_bf16", [&] { return quantized_matmul(xh, qh[0], qh[1], qh[2], true, 64, 4); }});
      }
      const std::string name = "quantized_matmul_" + std::to_string(M) + "x4096x4096";
      for (const auto& [impl, op] : cases) {
        op().eval();
        const int reps = quick ? 10 : 50;
        std::vector<double> ms;
        for (int r = 0; r < reps; ++r) {
          double t0 = bench::now_ms();
          array y = op();
          y.eval();
          ms.push_back(bench::now_ms() - t0);
        }
        std::printf("{\"bench\":\"%s\",\"op\":\"%s\",\"impl\":\"loom\",\"threads\":%d,"
                    "\"median_ms\":%.3f,\"n\":%d}\n",
                    name.c_str(), impl, threads, bench::median(ms), reps);
        std::fflush(stdout);
      }
    }
  }
  return 0;
}

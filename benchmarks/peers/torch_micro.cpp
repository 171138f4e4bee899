// libtorch peer of bench_micro (no autograd: everything under NoGradGuard):
//   matmul             torch::matmul of two N x N tensors filled with 0.5 and 0.25, N = 512, 1024,
//                      2048, float32 and bfloat16 (.to(kBFloat16): oneDNN's kernels where the CPU
//                      has AVX512-BF16 or AMX, ATen's own loops elsewhere); GFLOP/s = 2 N^3 / t.
//                      Loom's rows: matmul_N, matmul_bf16_N.
//   elementwise_chain  y = exp(tanh(x * 2 + 1) * x) - x on 4,194,304 float32 (x as bench_micro's);
//                      GB/s with 8 bytes per element (read x, write y). Loom's row: eltwise_chain_4m.
//   op_overhead        1000 sequential x = x + one on 1-element tensors; us_per_op.
// One warm-up call, then the median of bench_micro's repetition counts (QUICK=1: fewer). A matmul
// stops early, after 3 repetitions at least, once its timed calls add up to 10 s (QUICK: 2 s): a
// bfloat16 product without bf16 instructions takes seconds.
//   torch_micro [--threads T]...      (default: 1, then 2)
#include "torch_bench.h"

int main(int argc, char** argv) {
  peer::init("torch_micro");
  const bool quick = bench::quick();
  torch::NoGradGuard no_grad;
  for (int threads : bench::thread_counts(argc, argv)) {
    peer::set_threads(threads);
    for (auto dt : {torch::kFloat32, torch::kBFloat16}) {
      for (int n : {512, 1024, 2048}) {
        auto a = torch::full({n, n}, 0.5f).to(dt), b = torch::full({n, n}, 0.25f).to(dt);
        auto c = torch::matmul(a, b);  // warm-up
        const int reps = quick ? 10 : (n <= 1024 ? 30 : 10);
        const double budget_ms = quick ? 2e3 : 1e4;
        std::vector<double> ms;
        double total = 0;
        for (int r = 0; r < reps && !(r >= 3 && total > budget_ms); ++r) {
          double t0 = bench::now_ms();
          c = torch::matmul(a, b);
          ms.push_back(bench::now_ms() - t0);
          total += ms.back();
        }
        // Every entry is exactly n / 8; a bfloat16 accumulator stalls at 32 (libtorch 1.13 without
        // AVX512-BF16 sums in bfloat16), reported here, timed all the same.
        if (float v = c[0][0].item<float>(); v != 0.125f * n) {
          std::fprintf(stderr, "torch_micro: matmul %s %d: an entry is %g, not %g\n",
                       dt == torch::kFloat32 ? "float32" : "bfloat16", n, v, 0.125 * n);
        }
        double t = bench::median(ms);
        std::printf("{\"bench\":\"matmul\",\"impl\":\"libtorch\",\"dtype\":\"%s\",\"threads\":%d,\"size\":%d,"
                    "\"median_ms\":%.3f,\"gflops\":%.2f,\"n\":%zu}\n",
                    dt == torch::kFloat32 ? "float32" : "bfloat16", threads, n, t, 2.0 * n * n * n / (t * 1e-3) / 1e9,
                    ms.size());
        std::fflush(stdout);
      }
    }
    {
      const int64_t n = 4 << 20;
      auto x = torch::arange(n, torch::kFloat32) * (1.0f / n) - 0.5f;
      auto chain = [&] { return torch::exp(torch::tanh(x * 2 + 1) * x) - x; };
      auto y = chain();  // warm-up
      const int reps = quick ? 10 : 50;
      std::vector<double> ms;
      for (int r = 0; r < reps; ++r) {
        double t0 = bench::now_ms();
        y = chain();
        ms.push_back(bench::now_ms() - t0);
      }
      double t = bench::median(ms);
      std::printf("{\"bench\":\"elementwise_chain\",\"impl\":\"libtorch\",\"threads\":%d,\"size\":%lld,"
                  "\"median_ms\":%.3f,\"gbps\":%.2f,\"n\":%d}\n",
                  threads, static_cast<long long>(n), t, n * 8.0 / (t * 1e-3) / 1e9, reps);
      std::fflush(stdout);
    }
    {
      const int ops = 1000, reps = quick ? 10 : 50;
      auto one = torch::ones({1});
      std::vector<double> ms;
      for (int r = 0; r < reps + 1; ++r) {  // the first round is the warm-up
        auto x = torch::zeros({1});
        double t0 = bench::now_ms();
        for (int i = 0; i < ops; ++i) x = x + one;
        if (r > 0) ms.push_back(bench::now_ms() - t0);
        if (x.item<float>() != ops) std::fprintf(stderr, "op_overhead: wrong sum\n");
      }
      double t = bench::median(ms);
      std::printf("{\"bench\":\"op_overhead\",\"impl\":\"libtorch\",\"threads\":%d,\"ops\":%d,\"median_ms\":%.4f,"
                  "\"us_per_op\":%.3f,\"n\":%d}\n",
                  threads, ops, t, t * 1e3 / ops, reps);
      std::fflush(stdout);
    }
  }
  return 0;
}

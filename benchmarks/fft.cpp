// fft: Loom's transforms (ops/fft.h) on batches of lines and in 2-d, beside numpy.fft on the same
// workloads in the same run (`--numpy`: runs benchmarks/fft_numpy.py with `--python PATH`, default
// python3, and prints a "vs_numpy" line per workload and thread count: both medians and their ratio).
//
//   fft_RxN          fft along the last axis of a complex64 (R, N) array (R lines of N)
//   fft_axis0_RxN    fft along axis 0: lines strided by N, gathered 16 columns at a time
//   rfft_RxN         rfft of a float32 (R, N) array
//   fft2_RxN         fft2 of a complex64 (R, N) array
// N = 4096 (a power of two), 4093 (a prime: Bluestein), 1024; single lines of 4096 and 2^20.
#include <loom/loom.h>

#include <cstdio>
#include <cstring>
#include <map>
#include <string>

#include "bench.h"

using namespace loom;

namespace {

struct Case {
  const char* name;
  const char* op;
  Shape shape;
};
// The same list as fft_numpy.py's CASES.
const Case kCases[] = {
    {"fft_1024x1024", "fft", {1024, 1024}},   {"fft_256x4096", "fft", {256, 4096}},
    {"fft_256x4093", "fft", {256, 4093}},     {"fft_1x4096", "fft", {4096}},
    {"fft_1x1048576", "fft", {1 << 20}},      {"rfft_1024x1024", "rfft", {1024, 1024}},
    {"rfft_256x4096", "rfft", {256, 4096}},   {"rfft_256x4093", "rfft", {256, 4093}},
    {"fft2_1024x1024", "fft2", {1024, 1024}}, {"fft_axis0_1024x1024", "fft_axis0", {1024, 1024}},
};

array run(const std::string& op, const array& x) {
  if (op == "rfft") return fft::rfft(x);
  if (op == "fft2") return fft::fft2(x);
  if (op == "fft_axis0") return fft::fft(x, 0);
  return fft::fft(x);
}

}  // namespace

int main(int argc, char** argv) {
  const bool quick = bench::quick();
  const bench::NumpyArgs args = bench::numpy_args(argc, argv);
  std::map<std::pair<std::string, int>, double> loom_ms;
  const std::vector<int> threads_list = bench::thread_counts(argc, argv);
  for (int threads : threads_list) {
    set_num_threads(threads);
    for (const Case& c : kCases) {
      random::seed(0);
      array x = std::string(c.op) == "rfft" ? random::normal(c.shape)
                                            : astype(random::normal(c.shape), complex64) +
                                                  multiply(random::normal(c.shape), array(complex64_t(0, 1)));
      x.eval();
      run(c.op, x).eval();  // warm-up: plans, scratch buffers
      const int reps = quick ? 5 : 15;
      std::vector<double> ms;
      for (int r = 0; r < reps; ++r) {
        const double t0 = bench::now_ms();
        array y = run(c.op, x);
        y.eval();
        ms.push_back(bench::now_ms() - t0);
      }
      const double t = bench::median(ms);
      loom_ms[{c.name, threads}] = t;
      std::printf("{\"bench\":\"%s\",\"impl\":\"loom\",\"threads\":%d,\"median_ms\":%.4f,\"n\":%d}\n", c.name, threads,
                  t, reps);
      std::fflush(stdout);
    }
  }
  if (!args.numpy) return 0;
  const std::string cmd = args.python + " " + LOOM_SOURCE_DIR "/benchmarks/fft_numpy.py" + (quick ? " --quick" : "");
  return bench::compare_with_numpy(cmd, loom_ms, false, "bench_fft");
}

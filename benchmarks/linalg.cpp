// linalg: Loom's factorizations and solves (ops/linalg.h) on float32 matrices, beside numpy.linalg on
// the same workloads in the same run (`--numpy`: runs benchmarks/linalg_numpy.py with `--python
// PATH`, default python3, once per thread count with OpenBLAS's threads set to it, and prints a
// "vs_numpy" line per workload and thread count). Both sides call LAPACK (Loom: OpenBLAS's; numpy:
// whichever LAPACK Debian's numpy is linked to), so the ratio shows each side's overhead around it:
// copies, layout, the batch loop.
//
//   inv_512, solve_512x64 (512 right-hand sides in 64 columns), cholesky_512, qr_512, svd_512 (values
//   and vectors), eigh_512, det_512: one 512 x 512 matrix
//   inv_4096x8x8, solve_4096x8x8: a batch of 4,096 small matrices (the per-matrix overhead)
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
// The same list as linalg_numpy.py's CASES.
const Case kCases[] = {
    {"inv_512", "inv", {512, 512}},           {"solve_512x64", "solve", {512, 512}},
    {"cholesky_512", "cholesky", {512, 512}}, {"qr_512", "qr", {512, 512}},
    {"svd_512", "svd", {512, 512}},           {"eigh_512", "eigh", {512, 512}},
    {"det_512", "det", {512, 512}},           {"inv_4096x8x8", "inv", {4096, 8, 8}},
    {"solve_4096x8x8", "solve", {4096, 8, 8}},
};

// A well-conditioned symmetric positive definite stack: M M^T / n + I.
array spd(const Shape& shape) {
  const int n = shape.back();
  const array m = random::normal(shape);
  return add(divide(matmul(m, swapaxes(m, -1, -2)), array(float(n))), eye(n));
}

std::vector<array> run(const std::string& op, const array& a, const array& b) {
  if (op == "inv") return {linalg::inv(a)};
  if (op == "solve") return {linalg::solve(a, b)};
  if (op == "cholesky") return {linalg::cholesky(a)};
  if (op == "qr") {
    auto [q, r] = linalg::qr(a);
    return {q, r};
  }
  if (op == "svd") return linalg::svd(a);
  if (op == "eigh") {
    auto [w, v] = linalg::eigh(a);
    return {w, v};
  }
  return {linalg::det(a)};
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
      const array a = spd(c.shape);
      Shape bs = c.shape;
      bs.back() = c.shape.size() == 2 ? 64 : 1;
      const array b = random::normal(bs);
      eval(a, b);
      eval(run(c.op, a, b));  // warm-up
      const int reps = quick ? 3 : 11;
      std::vector<double> ms;
      for (int r = 0; r < reps; ++r) {
        const double t0 = bench::now_ms();
        eval(run(c.op, a, b));
        ms.push_back(bench::now_ms() - t0);
      }
      const double t = bench::median(ms);
      loom_ms[{c.name, threads}] = t;
      std::printf("{\"bench\":\"%s\",\"impl\":\"loom\",\"threads\":%d,\"median_ms\":%.4f,\"n\":%d}\n", c.name, threads, t,
                  reps);
      std::fflush(stdout);
    }
  }
  if (!args.numpy) return 0;
  int status = 0;
  for (int threads : threads_list) {
    const std::string cmd = "OPENBLAS_NUM_THREADS=" + std::to_string(threads) + " OMP_NUM_THREADS=" +
                            std::to_string(threads) + " " + args.python + " " LOOM_SOURCE_DIR "/benchmarks/linalg_numpy.py --threads " +
                            std::to_string(threads) + (quick ? " --quick" : "");
    status |= bench::compare_with_numpy(cmd, loom_ms, true, "bench_linalg");
  }
  return status;
}

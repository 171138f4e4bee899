// allreduce (docs/benchmarks.md), under mpirun -np 2: the time of one evaluated all_sum of
// float32 arrays from 4 B to 64 MB (the slowest rank's, median over repetitions), as the raw MPI
// peer measures MPI_Allreduce. Then overlap: an all_sum of 16 MB alone, an independent compute
// graph alone, and both in one eval; `hidden` is the share of the shorter one that the overlap hid.
// Last, all_to_all: one evaluated distributed::all_to_all of 4 KB to 64 MB per rank beside a raw
// MPI_Alltoall of the same buffers (in a build with MPI), the target being <= 1.1x.
#include <loom/loom.h>
#ifdef LOOM_BENCH_MPI
#include <mpi.h>
#endif

#include "bench.h"

using namespace loom;

namespace {

distributed::Group world = distributed::init();

double slowest(double ms) { return distributed::all_max(array(ms)).item<double>(); }

// Median over `reps` of the slowest rank's time of `calls` back-to-back runs of `fn`, per call.
template <typename F>
double time_calls(F fn, int calls, int reps) {
  std::vector<double> t;
  for (int r = -2; r < reps; ++r) {
    eval(distributed::all_sum(array(1.0f)));  // a barrier
    double t0 = bench::now_ms();
    for (int i = 0; i < calls; ++i) fn();
    double ms = slowest((bench::now_ms() - t0) / calls);
    if (r >= 0) t.push_back(ms);
  }
  return bench::median(t);
}

}  // namespace

int main() {

  set_num_threads(1);
  const int reps = bench::quick() ? 5 : 21;
  for (long bytes : {4L, 4L << 10, 256L << 10, 4L << 20, 64L << 20}) {
    // A materialized array, as the raw peer's buffer is (full() alone is a broadcast view of one
    // value, which all_sum would first have to copy out).
    array x = full({static_cast<int>(bytes / 4)}, 1.0f) * 1.0f;
    eval(x);
    auto once = [&] {
      array y = distributed::all_sum(x);
      eval(y);
    };
    double one = time_calls(once, 1, 3);
    int calls = std::max(1, std::min(10000, static_cast<int>(2.0 / std::max(one, 1e-6))));
    calls = static_cast<int>(distributed::all_max(array(calls)).item<int>());  // everyone agrees
    double ms = time_calls(once, calls, reps);
    if (world.rank() == 0) {
      std::printf("{\"bench\":\"allreduce\",\"impl\":\"loom\",\"ranks\":%d,\"bytes\":%ld,\"median_ms\":%.5f,"
                  "\"gbps\":%.3f,\"n\":%d,\"calls_per_rep\":%d}\n",
                  world.size(), bytes, ms, bytes / ms / 1e6, reps, calls);
      std::fflush(stdout);
    }
  }

  // Overlap: 16 MB of communication beside an independent chain of matmuls.
  array grads = full({4 << 20}, 1.0f) * 1.0f;
  array a = full({256, 256}, 0.001f);
  eval(grads, a);
  auto compute = [&] {
    array h = a;
    for (int i = 0; i < 24; ++i) h = matmul(h, a);
    return h;
  };
  double comm_ms = time_calls([&] { eval(distributed::all_sum(grads)); }, 1, reps);
  double compute_ms = time_calls([&] { eval(compute()); }, 1, reps);
  double both_ms = time_calls([&] { eval(distributed::all_sum(grads), compute()); }, 1, reps);
  double hidden = (comm_ms + compute_ms - both_ms) / std::min(comm_ms, compute_ms);
  if (world.rank() == 0) {
    std::printf("{\"bench\":\"allreduce_overlap\",\"impl\":\"loom\",\"ranks\":%d,\"comm_ms\":%.3f,\"compute_ms\":%.3f,"
                "\"both_ms\":%.3f,\"hidden\":%.2f,\"n\":%d}\n",
                world.size(), comm_ms, compute_ms, both_ms, hidden, reps);
  }

  // all_to_all: the whole per-rank array of `bytes` exchanged in size() equal blocks.
  for (long bytes : {4L << 10, 256L << 10, 4L << 20, 64L << 20}) {
    const int n = static_cast<int>(bytes / 4);
    array x = full({n}, 1.0f) * float(world.rank() + 1);
    eval(x);
    auto once = [&] { eval(distributed::all_to_all(x)); };
    const int calls = static_cast<int>(
        distributed::all_max(array(std::max(1, std::min(1000, static_cast<int>(2.0 / std::max(time_calls(once, 1, 3), 1e-6))))))
            .item<int>());
    const double loom_ms = time_calls(once, calls, reps);
    double mpi_ms = -1;
#ifdef LOOM_BENCH_MPI
    if (world.size() > 1) {
      std::vector<float> out(static_cast<size_t>(n));
      const int block = n / world.size();
      mpi_ms = time_calls([&] { MPI_Alltoall(x.data<float>(), block, MPI_FLOAT, out.data(), block, MPI_FLOAT, MPI_COMM_WORLD); },
                          calls, reps);
    }
#endif
    if (world.rank() == 0) {
      std::printf("{\"bench\":\"all_to_all\",\"impl\":\"loom\",\"ranks\":%d,\"bytes\":%ld,\"median_ms\":%.5f,"
                  "\"mpi_ms\":%.5f,\"ratio\":%.3f,\"n\":%d,\"calls_per_rep\":%d}\n",
                  world.size(), bytes, loom_ms, mpi_ms, mpi_ms > 0 ? loom_ms / mpi_ms : -1.0, reps, calls);
      std::fflush(stdout);
    }
  }
}

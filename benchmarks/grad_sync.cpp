// grad_sync (docs/benchmarks.md), under mpirun -np 2: 100 gradients of 10,000 float32 averaged
// (a) with one all_sum each, (b) with nn::average_gradients, (c) as one all_sum of 1,000,000 floats.
// Times are the slowest rank's, per repetition; the modes alternate.
#include <loom/loom.h>

#include <algorithm>
#include <functional>
#include <numeric>

#include "bench.h"

using namespace loom;

namespace {

// Median over repetitions of the slowest rank's time.
double slowest_median(const std::vector<double>& ms) {
  array t(ms, {static_cast<int>(ms.size())}, float64);
  return bench::median(distributed::all_max(t).to_vector<double>());
}

}  // namespace

int main() {
  auto world = distributed::init();
  const int warmup = 10, reps = bench::quick() ? 20 : 100;
  nn::ParamTree grads;
  // Materialized arrays, as gradients are (full() alone would be a broadcast view of one value).
  for (int i = 0; i < 100; ++i) grads.insert("g" + std::to_string(i), arange(10000.0, float32) + float(world.rank() + i));
  array flat = arange(1000000.0, float32) + float(world.rank());
  eval(grads, flat);

  // The modes take turns within each repetition, each after a barrier (an all_sum of one float), so
  // that a busy spell of the shared machine slows them alike. The order cycles through every
  // permutation, so each mode follows each other mode equally often: a mode's time depends on what
  // the one before it left in the caches (per_tensor touches 8 MB of other buffers; with a fixed order
  // the mode after it ran 10-25% slower, whichever mode that was).
  array token = full({1}, 1.0f);
  eval(token);
  auto barrier = [&] { eval(distributed::all_sum(token)); };
  std::vector<std::function<void()>> steps = {
      [&] {
        std::vector<array> out;
        for (const auto& [name, g] : grads) out.push_back(distributed::all_sum(g) * (1.0f / world.size()));
        eval(out);
      },
      [&] { eval(nn::average_gradients(grads)); },
      [&] { eval(distributed::all_sum(flat)); }};
  std::vector<std::vector<double>> ms(steps.size());
  std::vector<size_t> order(steps.size());
  std::iota(order.begin(), order.end(), 0);
  for (int r = 0; r < warmup + reps; ++r) {
    std::next_permutation(order.begin(), order.end());
    for (size_t m : order) {
      barrier();
      double t0 = bench::now_ms();
      steps[m]();
      if (r >= warmup) ms[m].push_back(bench::now_ms() - t0);
    }
  }
  const double per_tensor = slowest_median(ms[0]), averaged = slowest_median(ms[1]), one = slowest_median(ms[2]);
  if (world.rank() == 0) {
    for (auto [mode, ms] : {std::pair<const char*, double>{"per_tensor", per_tensor}, {"average_gradients", averaged},
                            {"flat", one}}) {
      std::printf("{\"bench\":\"grad_sync\",\"impl\":\"loom\",\"ranks\":%d,\"mode\":\"%s\",\"median_ms\":%.3f,\"n\":%d}\n",
                  world.size(), mode, ms, reps);
    }
  }
}

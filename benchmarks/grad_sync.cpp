// grad_sync (../shared/BENCHMARKS.md), under mpirun -np 2: 100 gradients of 10,000 float32 averaged
// (a) with one all_sum each, (b) with nn::average_gradients, (c) as one all_sum of 1,000,000 floats.
// Times are the slowest rank's, per repetition.
#include <loom/loom.h>

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
  for (int i = 0; i < 100; ++i) grads.insert("g" + std::to_string(i), full({10000}, float(world.rank() + i)));
  array flat = full({1000000}, float(world.rank()));
  eval(grads, flat);

  auto time = [&](auto step) {
    std::vector<double> ms;
    for (int r = 0; r < warmup + reps; ++r) {
      double t0 = bench::now_ms();
      step();
      if (r >= warmup) ms.push_back(bench::now_ms() - t0);
    }
    return slowest_median(ms);
  };
  const double per_tensor = time([&] {
    std::vector<array> out;
    for (const auto& [name, g] : grads) out.push_back(distributed::all_sum(g) * (1.0f / world.size()));
    eval(out);
  });
  const double averaged = time([&] { eval(nn::average_gradients(grads)); });
  const double one = time([&] { eval(distributed::all_sum(flat)); });
  if (world.rank() == 0) {
    for (auto [mode, ms] : {std::pair<const char*, double>{"per_tensor", per_tensor}, {"average_gradients", averaged},
                            {"flat", one}}) {
      std::printf("{\"bench\":\"grad_sync\",\"impl\":\"loom\",\"ranks\":%d,\"mode\":\"%s\",\"median_ms\":%.3f,\"n\":%d}\n",
                  world.size(), mode, ms, reps);
    }
  }
}

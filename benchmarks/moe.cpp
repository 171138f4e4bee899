// moe (benchmarks/README.md), under mpirun -np 2 and -np 4: a training step (forward, backward,
// AdamW) of one nn::MoE layer of 8 experts (width 512, hidden 2048, top-2, capacity factor 1.25) on
// 2048 tokens per rank, in two ways:
//   all_experts      every rank holds all 8 experts and runs its own tokens through them (the same
//                    model on one rank; the ranks only run side by side)
//   expert_parallel  the experts spread over the ranks (8 / N each), every rank's tokens sent to
//                    their experts and back by two all_to_alls; gradients by average_gradients with
//                    the experts' divided by N
// One JSON line per mode: median_ms (the slowest rank's step), tokens_per_s (all ranks' tokens per
// second), state_mb (parameters + gradients + AdamW state of one rank), peak_mb (Loom's peak memory
// during a step, the largest rank's) and the bytes of each all_to_all.
#include <loom/loom.h>

#include <cstdio>
#include <string>
#include <vector>

#include "bench.h"
#include "ranks.h"

using namespace loom;

namespace {

constexpr int kDims = 512, kHidden = 2048, kExperts = 8, kTopK = 2, kTokens = 2048;

void run(bool spread, const distributed::Group& world, int warmup, int reps) {
  random::seed(1);
  nn::MoE moe(kDims, kHidden, kExperts, kTopK, 1.25, spread ? std::optional<distributed::Group>(world) : std::nullopt);
  std::vector<std::string> local;
  for (const auto& [name, split] : moe.splits()) local.push_back(name);
  optim::AdamW opt(1e-3);
  const array x = random::normal({kTokens, kDims}, float32, random::key(10 + static_cast<uint64_t>(world.rank())));
  eval(x);
  auto vg = nn::value_and_grad(moe, [&]() {
    const nn::MoEOutput o = moe.forward(x);
    return mean(square(o.y)) + 0.01f * o.load_balancing_loss;
  });
  std::vector<double> ms;
  double peak = 0, state = 0;
  for (int r = 0; r < warmup + reps; ++r) {
    eval(distributed::all_sum(full({1}, 1.0f), world));  // every rank starts the step together
    reset_peak_memory();
    const double t0 = bench::now_ms();
    auto [loss, grads] = vg();
    // Side by side, each rank's all-expert model trains alone; spread, the router is averaged and the
    // experts' gradients divided by N.
    if (spread) grads = nn::average_gradients(grads, local, 32 << 20, std::nullopt, world);
    opt.update(moe, grads);
    eval(loss, moe.parameters(), opt.state());
    if (r >= warmup) {
      ms.push_back(bench::now_ms() - t0);
      peak = std::max(peak, static_cast<double>(get_peak_memory()) / (1 << 20));
      state = 2 * bench::megabytes(moe.parameters()) + bench::megabytes(opt.state());
    }
  }
  array times(ms, {static_cast<int>(ms.size())}, float64);
  const double median = bench::median(distributed::all_max(times, world).to_vector<double>());
  state = bench::largest(state, world);
  peak = bench::largest(peak, world);
  const double a2a_mb = spread && world.size() > 1 ? double(kExperts) * moe.capacity(kTokens) * kDims * 4 / (1 << 20) : 0;
  if (world.rank() == 0) {
    std::printf("{\"bench\":\"moe\",\"mode\":\"%s\",\"ranks\":%d,\"experts_per_rank\":%d,\"median_ms\":%.2f,"
                "\"tokens_per_s\":%.0f,\"state_mb\":%.2f,\"peak_mb\":%.2f,\"all_to_all_mb\":%.2f,\"n\":%d}\n",
                spread ? "expert_parallel" : "all_experts", world.size(), moe.local_experts(), median,
                world.size() * kTokens / (median / 1e3), state, peak, a2a_mb, reps);
    std::fflush(stdout);
  }
}

}  // namespace

int main() {
  auto world = distributed::init();
  if (kExperts % world.size() != 0) {
    if (world.rank() == 0) std::fprintf(stderr, "moe: run with a number of ranks that divides %d\n", kExperts);
    return 1;
  }
  const int warmup = 2, reps = bench::quick() ? 3 : 10;
  run(false, world, warmup, reps);
  run(true, world, warmup, reps);
}

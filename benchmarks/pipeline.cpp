// pipeline (benchmarks/README.md), under mpirun -np 2 and -np 4: nn::Pipeline's training step of a
// deep MLP whose stages balance (8 blocks of Linear(1024, 1024) + GELU, a batch of 512 rows, MSE
// loss, AdamW) against the same model in one process, for GPipe and 1F1B and m micro-batches.
// One JSON line per (schedule, m):
//   median_ms        the slowest rank's step, median over repetitions
//   one_process_ms   the whole model's step on one rank (the others wait), same batch and threads
//   busy_ms          the slowest stage's own passes alone: its layers' forward and backward on the m
//                    micro-batches, without messages (what the stage would take with no bubble)
//   bubble           1 - busy_ms / median_ms: the share of the step a stage waits;
//   bubble_theory    (p - 1) / (m + p - 1), GPipe's and 1F1B's
//   state_mb         parameters + gradients + AdamW state of the largest stage;
//   one_process_state_mb  the same for the whole model;
//   peak_mb          Loom's peak memory during a step, the largest rank's
#include <loom/loom.h>

#include <cmath>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "bench.h"
#include "ranks.h"

using namespace loom;

namespace {

constexpr int kWidth = 1024, kBlocks = 8, kBatch = 512;

std::shared_ptr<nn::Sequential> model(int blocks) {
  random::seed(1);
  auto m = std::make_shared<nn::Sequential>();
  for (int i = 0; i < blocks; ++i) {
    m->append(std::make_shared<nn::Linear>(kWidth, kWidth));
    m->append(nn::gelu);
  }
  return m;
}

array mse(const array& out, const array& target) { return mean(square(out - target)); }

void barrier(const distributed::Group& g) { eval(distributed::all_sum(full({1}, 1.0f), g)); }

struct Timed {
  double median_ms = 0, peak_mb = 0, state_mb = 0;
};

// The whole model on rank 0 (the others wait at the barriers).
Timed one_process(const distributed::Group& world, const array& x, const array& y, int warmup, int reps) {
  Timed t;
  std::vector<double> ms;
  auto whole = model(kBlocks);
  optim::AdamW opt(1e-3);
  auto vg = nn::value_and_grad(*whole, [&]() { return mse((*whole)(x), y); });
  for (int r = 0; r < warmup + reps; ++r) {
    barrier(world);
    if (world.rank() != 0) continue;
    reset_peak_memory();
    const double t0 = bench::now_ms();
    auto [loss, grads] = vg();
    opt.update(*whole, grads);
    eval(loss, whole->parameters(), opt.state());
    if (r >= warmup) {
      ms.push_back(bench::now_ms() - t0);
      t.peak_mb = std::max(t.peak_mb, static_cast<double>(get_peak_memory()) / (1 << 20));
      t.state_mb = 2 * bench::megabytes(whole->parameters()) + bench::megabytes(opt.state());
    }
  }
  barrier(world);
  if (world.rank() == 0) t.median_ms = bench::median(ms);
  return t;
}

// This stage's layers alone: forward and backward of each micro-batch, no messages.
double busy(int stage_blocks, const array& x, int m, int warmup, int reps) {
  auto stage = model(stage_blocks);
  const int per = kBatch / m;
  std::vector<double> ms;
  for (int r = 0; r < warmup + reps; ++r) {
    const double t0 = bench::now_ms();
    std::vector<array> outs;
    for (int i = 0; i < m; ++i) {
      const array xi = slice(x, {i * per, 0}, {(i + 1) * per, kWidth});
      auto [loss, grads] = nn::value_and_grad(*stage, [&]() { return sum((*stage)(xi)); })();
      outs.push_back(loss);
      for (const auto& [name, g] : grads) outs.push_back(g);
      eval(outs);
      outs.clear();
    }
    if (r >= warmup) ms.push_back(bench::now_ms() - t0);
  }
  return bench::median(ms);
}

}  // namespace

int main() {
  auto world = distributed::init();
  const int p = world.size(), warmup = 2, reps = bench::quick() ? 3 : 10;
  if (kBlocks % p != 0) {
    if (world.rank() == 0) std::fprintf(stderr, "pipeline: run with a number of ranks that divides %d\n", kBlocks);
    return 1;
  }
  const array x = random::normal({kBatch, kWidth}, float32, random::key(7));
  const array y = random::normal({kBatch, kWidth}, float32, random::key(8));
  eval(x, y);
  const Timed one = one_process(world, x, y, warmup, reps);
  for (const auto schedule : {nn::PipelineSchedule::gpipe, nn::PipelineSchedule::one_f_one_b}) {
    for (int m : {1, 2, 4, 8}) {
      auto blueprint = model(kBlocks);
      nn::Pipeline pipe(*blueprint, world);
      optim::AdamW opt(1e-3);
      std::vector<double> ms;
      double peak = 0, state = 0;
      for (int r = 0; r < warmup + reps; ++r) {
        barrier(world);
        reset_peak_memory();  // (the buffer cache stays: a training loop reuses its buffers)
        const double t0 = bench::now_ms();
        nn::PipelineStep step = pipe.value_and_grad(x, y, mse, m, schedule);
        opt.update(pipe, step.grads);
        eval(step.loss, step.grads, pipe.parameters(), opt.state());
        if (r >= warmup) {
          ms.push_back(bench::now_ms() - t0);
          peak = std::max(peak, static_cast<double>(get_peak_memory()) / (1 << 20));
          state = 2 * bench::megabytes(pipe.parameters()) + bench::megabytes(opt.state());
        }
      }
      array times(ms, {static_cast<int>(ms.size())}, float64);
      const double median = bench::median(distributed::all_max(times, world).to_vector<double>());
      const double busy_ms = bench::largest(busy(kBlocks / p, x, m, 1, std::max(3, reps / 2)), world);
      state = bench::largest(state, world);
      peak = bench::largest(peak, world);
      if (world.rank() == 0) {
        std::printf(
            "{\"bench\":\"pipeline\",\"schedule\":\"%s\",\"ranks\":%d,\"micro_batches\":%d,\"median_ms\":%.2f,"
            "\"one_process_ms\":%.2f,\"busy_ms\":%.2f,\"bubble\":%.3f,\"bubble_theory\":%.3f,\"state_mb\":%.2f,"
            "\"one_process_state_mb\":%.2f,\"peak_mb\":%.2f,\"one_process_peak_mb\":%.2f,\"n\":%d}\n",
            schedule == nn::PipelineSchedule::gpipe ? "gpipe" : "1f1b", p, m, median, one.median_ms, busy_ms,
            1.0 - busy_ms / median, double(p - 1) / (m + p - 1), state, one.state_mb, peak, one.peak_mb, reps);
        std::fflush(stdout);
      }
    }
  }
}

// autograd_chain_4m: the cost of value_and_grad against the forward alone.
//
// x: float32, 4,194,304 elements evenly spaced in [-1, 1). f(x) = sum(chain(x)), where chain applies
// 100 layers alternating sin (even layers) and tanh (odd layers). "forward" evaluates f(x);
// "value_and_grad" evaluates f(x) and df/dx in one eval (the backward keeps the layer inputs and
// outputs it needs; no checkpointing); "value_and_grad_checkpoint" checkpoints segments of 10 layers
// (recomputing each segment's forward in the backward) for the memory/compute trade. 1 warm-up
// each, then 5 rounds (QUICK=1: 2) that run the three modes in turn, at threads 1 and 2 (--threads T
// to pick). Each line: wall-clock median `median_ms`, process CPU-time median `cpu_ms` (steadier on
// a shared machine), `ratio` / `cpu_ratio` over the forward's, and `peak_mb` (the allocator's peak
// of live array bytes above the input).
#include <loom/loom.h>
#include <time.h>

#include <functional>

#include "bench.h"

using namespace loom;

namespace {

array chain(const array& x, int first, int layers) {
  array h = x;
  for (int i = first; i < first + layers; ++i) h = i % 2 ? tanh(h) : sin(h);
  return h;
}

array loss(const array& x, int segment) {
  const int layers = 100;
  if (segment <= 0) return sum(chain(x, 0, layers));
  array h = x;
  for (int i = 0; i < layers; i += segment) {
    h = checkpoint([i, segment](const std::vector<array>& in) { return std::vector<array>{chain(in[0], i, segment)}; })(
        {h})[0];
  }
  return sum(h);
}

double cpu_ms() {
  timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
}

}  // namespace

int main(int argc, char** argv) {
  const bool quick = bench::quick();
  const int n = 4 << 20, reps = quick ? 2 : 5;
  array x = arange(0.0, double(n), 1.0, float32) * (2.0f / n) - 1.0f;
  x.eval();
  auto vg = value_and_grad([](const array& a) { return loss(a, 0); });
  auto vgc = value_and_grad([](const array& a) { return loss(a, 10); });
  struct Mode {
    const char* name;
    std::function<void()> run;
    std::vector<double> wall, cpu;
    size_t peak = 0;
  };
  for (int threads : bench::thread_counts(argc, argv)) {
    set_num_threads(threads);
    std::vector<Mode> modes = {
        {"forward", [&] { loss(x, 0).eval(); }, {}, {}, 0},
        {"value_and_grad",
         [&] {
           auto [v, g] = vg(x);
           eval(v, g);
         },
         {}, {}, 0},
        {"value_and_grad_checkpoint",
         [&] {
           auto [v, g] = vgc(x);
           eval(v, g);
         },
         {}, {}, 0},
    };
    for (auto& m : modes) m.run();  // warm-up (also fills the allocator's cache)
    // Rounds interleave the modes, so a change in the machine's load hits all of them alike.
    for (int r = 0; r < reps; ++r) {
      for (auto& m : modes) {
        reset_peak_memory();
        size_t base = get_active_memory();
        double t0 = bench::now_ms(), c0 = cpu_ms();
        m.run();
        m.cpu.push_back(cpu_ms() - c0);
        m.wall.push_back(bench::now_ms() - t0);
        m.peak = std::max(m.peak, get_peak_memory() - base);
      }
    }
    const double fwd = bench::median(modes[0].wall), fwd_cpu = bench::median(modes[0].cpu);
    for (auto& m : modes) {
      double t = bench::median(m.wall), c = bench::median(m.cpu);
      std::printf("{\"bench\":\"autograd_chain_4m\",\"impl\":\"loom\",\"threads\":%d,\"mode\":\"%s\","
                  "\"median_ms\":%.1f,\"cpu_ms\":%.1f,\"ratio\":%.2f,\"cpu_ratio\":%.2f,\"peak_mb\":%.0f,\"n\":%d}\n",
                  threads, m.name, t, c, t / fwd, c / fwd_cpu, m.peak / 1048576.0, reps);
      std::fflush(stdout);
    }
  }
  return 0;
}

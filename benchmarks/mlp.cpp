// mlp_step and dp_mlp_step (docs/benchmarks.md) on Fashion-MNIST batches.
//   bench_mlp                      mlp_step at 1 and 2 threads (batch 128), then again beside a
//                                  busy process (mlp_step_beside_busy), dp_mlp_step on 1 rank
//   mpirun -np 2 bench_mlp         dp_mlp_step on 2 ranks x 1 thread (128 rows each), with the
//                                  default buckets, 1 MiB buckets, and no gradient sync at all
// A step is: read the batch, forward, loss, backward (with the gradient all-reduce when data
// parallel), AdamW update, eval(loss, model.parameters()). mlp_step_compiled: the same step with the
// loss and gradients from nn::compile_value_and_grad.
#include <loom/loom.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "bench.h"

using namespace loom;

namespace {

struct MLP : nn::Module {
  nn::Linear l1{784, 512}, l2{512, 512}, l3{512, 10};
  MLP() {
    register_module("l1", l1);
    register_module("l2", l2);
    register_module("l3", l3);
  }
  array operator()(const array& x) { return l3(nn::relu(l2(nn::relu(l1(x))))); }
};

double peak_mb() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_maxrss / 1024.0;
}

// How gradients are synchronised: average_gradients with its default 32 MiB buckets (one bucket
// for this model), with 1 MiB buckets (three, so the first all_sum can overlap the rest of the
// backward), or not at all (the compute alone, to see how much communication costs on top).
enum class Sync { buckets_32mb, buckets_1mb, none };
const char* sync_name(Sync s) { return s == Sync::buckets_32mb ? "32MiB" : s == Sync::buckets_1mb ? "1MiB" : "none"; }

// Median step time over `timed` steps after `warmup`, on this rank's shard of a global batch.
// With `compiled`, the loss and gradients come from nn::compile_value_and_grad (the update and the
// gradient sync stay outside it).
double run(int global_batch, int warmup, int timed, const distributed::Group& world,
           Sync sync = Sync::buckets_32mb, bool compiled = false) {
  random::seed(0);
  MLP model;
  optim::AdamW opt(1e-3, {0.9, 0.999}, 1e-8, 0.01);
  auto images = data::fashion_mnist("/usr/share/datasets/fashion-mnist", "train");
  data::DataLoader loader(images, global_batch, data::LoaderOptions{true, 0, data::Remainder::drop}, world);
  auto loss_fn = [&](const array& x, const array& y) { return nn::losses::cross_entropy(model(x), y, "mean"); };
  auto step = nn::value_and_grad(model, loss_fn);
  auto compiled_step = nn::compile_value_and_grad(model, loss_fn);
  std::vector<double> ms;
  int64_t i = 0;
  for (int s = 0; s < warmup + timed; ++s, ++i) {
    if (i == loader.num_batches()) loader.set_epoch(loader.epoch() + 1), i = 0;
    double t0 = bench::now_ms();
    auto [xb, yb] = loader.batch(i);
    array x = reshape(astype(xb, float32) * (1.0f / 255.0f), {xb.shape(0), 784});
    auto [loss, grads] = compiled ? compiled_step(x, yb) : step(x, yb);
    if (sync != Sync::none) grads = nn::average_gradients(grads, sync == Sync::buckets_1mb ? 1 << 20 : 32 << 20);
    opt.update(model, grads);
    eval(loss, model.parameters());
    if (s >= warmup) ms.push_back(bench::now_ms() - t0);
  }
  // The slowest rank sets the pace.
  array t(ms, {static_cast<int>(ms.size())}, float64);
  return bench::median(distributed::all_max(t, world).to_vector<double>());
}

// Another process keeping one core busy while it lives (a machine shared with someone else's job).
class BusyProcess {
 public:
  BusyProcess() : pid_(fork()) {
    if (pid_ == 0) {
      for (volatile unsigned long i = 0;; i = i + 1) {
      }
    }
  }
  ~BusyProcess() {
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
  }

 private:
  pid_t pid_;
};

void print_mlp_step(const char* bench, int threads, double t, int timed) {
  std::printf("{\"bench\":\"%s\",\"impl\":\"loom\",\"threads\":%d,\"batch\":128,\"median_ms\":%.3f,"
              "\"samples_per_s\":%.0f,\"peak_mb\":%.1f,\"n\":%d}\n",
              bench, threads, t, 128 / (t * 1e-3), peak_mb(), timed);
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  auto world = distributed::init();
  const bool quick = bench::quick();
  const int warmup = 20, timed = quick ? 50 : 200;
  if (world.size() == 1) {
    const std::vector<int> threads = bench::thread_counts(argc, argv);
    for (int t : threads) {
      set_num_threads(t);
      print_mlp_step("mlp_step", t, run(128, warmup, timed, world), timed);
      print_mlp_step("mlp_step_compiled", t, run(128, warmup, timed, world, Sync::buckets_32mb, true), timed);
    }
    // Extra threads must never make a step slower, even when another process holds a core.
    for (int t : threads) {
      set_num_threads(t);
      BusyProcess busy;
      print_mlp_step("mlp_step_beside_busy", t, run(128, warmup, timed, world), timed);
    }
  }
  set_num_threads(1);
  for (Sync sync : {Sync::buckets_32mb, Sync::buckets_1mb, Sync::none}) {
    if (world.size() == 1 && sync != Sync::buckets_32mb) break;
    double t = run(256, warmup, timed, world, sync);
    if (world.rank() == 0) {
      std::printf("{\"bench\":\"dp_mlp_step\",\"impl\":\"loom\",\"ranks\":%d,\"threads\":1,\"batch\":256,"
                  "\"sync\":\"%s\",\"median_ms\":%.3f,\"samples_per_s\":%.0f,\"n\":%d}\n",
                  world.size(), sync_name(sync), t, 256 / (t * 1e-3), timed);
      std::fflush(stdout);
    }
  }
}

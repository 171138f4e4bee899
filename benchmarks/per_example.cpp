// per_example_grads: the gradient of every example's loss, for a batch, by vmap(grad(loss)) against
// a loop that builds one gradient per example (all evaluated in one eval), and against the one
// gradient of the batch's mean loss (what a training step computes) for scale.
//
// Model: an MLP 784 -> 256 -> 10 (tanh), squared error, batch 64, float32. 2 warm-ups, then 7 rounds
// (QUICK=1: 2) running the three modes in turn, at threads 1 and 2 (--threads T to pick). Each line:
// wall-clock median `median_ms` and `ratio` over the batch gradient's.
#include <loom/loom.h>

#include <functional>

#include "bench.h"

using namespace loom;

namespace {

array example_loss(const std::vector<array>& v) {  // w1, b1, w2, x (784), y (10)
  array h = tanh(add(matmul(v[3], v[0]), v[1]));
  return mean(square(subtract(matmul(h, v[2]), v[4])));
}

}  // namespace

int main(int argc, char** argv) {
  const int batch = 64, reps = bench::quick() ? 2 : 7;
  array w1 = multiply(random::normal({784, 256}), array(0.05f)), b1 = zeros({256});
  array w2 = multiply(random::normal({256, 10}), array(0.05f));
  array xs = random::uniform({batch, 784}), ys = random::uniform({batch, 10});
  eval(w1, b1, w2, xs, ys);
  auto g = grad(example_loss, {0, 1, 2});
  auto per_example = vmap(g, {-1, -1, -1, 0, 0});
  auto batch_loss = [](const std::vector<array>& v) {
    array h = tanh(add(matmul(v[3], v[0]), v[1]));
    return mean(square(subtract(matmul(h, v[2]), v[4])));
  };
  auto batch_grad = grad(batch_loss, {0, 1, 2});
  struct Mode {
    const char* name;
    std::function<void()> run;
    std::vector<double> wall;
  };
  std::vector<Mode> modes = {
      {"batch_gradient", [&] { eval(batch_grad({w1, b1, w2, xs, ys})); }, {}},
      {"vmap", [&] { eval(per_example({w1, b1, w2, xs, ys})); }, {}},
      {"loop", [&] {
         std::vector<array> all;
         for (int i = 0; i < batch; ++i) {
           for (array& a : g({w1, b1, w2, take(xs, i, 0), take(ys, i, 0)})) all.push_back(a);
         }
         eval(all);
       }, {}},
  };
  for (int threads : bench::thread_counts(argc, argv)) {
    set_num_threads(threads);
    for (auto& m : modes) {
      m.wall.clear();
      m.run();
      m.run();
    }
    for (int r = 0; r < reps; ++r) {
      for (auto& m : modes) {
        const double t0 = bench::now_ms();
        m.run();
        m.wall.push_back(bench::now_ms() - t0);
      }
    }
    const double base = bench::median(modes[0].wall);
    for (auto& m : modes) {
      const double t = bench::median(m.wall);
      std::printf("{\"bench\":\"per_example_grads\",\"impl\":\"loom\",\"threads\":%d,\"mode\":\"%s\","
                  "\"median_ms\":%.3f,\"ratio\":%.2f,\"batch\":%d,\"n\":%d}\n",
                  threads, m.name, t, t / base, batch, reps);
      std::fflush(stdout);
    }
  }
  return 0;
}

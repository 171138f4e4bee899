// libtorch peer of bench_mlp's mlp_step: MLP 784-512-512-10 with ReLU, batch 128, cross-entropy
// (mean), AdamW(lr 1e-3, betas 0.9/0.999, eps 1e-8, weight decay 0.01). The data are random: 60,000
// uint8 "images" of 784 pixels and labels 0..9, Fashion-MNIST's training split in shape and bytes
// (bench_mlp reads the real one, memory-mapped), shuffled once, drop-last batches. A step is what
// bench_mlp times: gather the batch and scale it to [0, 1] float32, forward, loss, backward,
// optimizer update (gradients set to none before the backward, PyTorch 2's default). 20 warm-up
// steps, then the median of 200 (QUICK=1: 50). peak_mb: the process's peak RSS so far.
//   torch_mlp [--threads T]...      (default: 1, then 2)
#include "torch_bench.h"

namespace {

struct MLP : torch::nn::Module {
  torch::nn::Linear l1{784, 512}, l2{512, 512}, l3{512, 10};
  MLP() {
    register_module("l1", l1);
    register_module("l2", l2);
    register_module("l3", l3);
  }
  torch::Tensor forward(const torch::Tensor& x) { return l3(torch::relu(l2(torch::relu(l1(x))))); }
};

double run(int warmup, int timed, const torch::Tensor& images, const torch::Tensor& labels) {
  const int64_t batch = 128, batches = images.size(0) / batch;
  torch::manual_seed(0);
  auto model = std::make_shared<MLP>();
  torch::optim::AdamW opt(model->parameters(), torch::optim::AdamWOptions(1e-3).weight_decay(0.01));
  auto perm = torch::randperm(images.size(0), torch::kLong);
  std::vector<double> ms;
  for (int s = 0, i = 0; s < warmup + timed; ++s, ++i) {
    if (i == batches) perm = torch::randperm(images.size(0), torch::kLong), i = 0;  // next epoch
    double t0 = bench::now_ms();
    auto idx = perm.slice(0, i * batch, (i + 1) * batch);
    auto x = images.index_select(0, idx).to(torch::kFloat32) * (1.0f / 255.0f);
    auto y = labels.index_select(0, idx);
    for (auto& p : model->parameters()) p.mutable_grad() = torch::Tensor();
    auto loss = torch::nn::functional::cross_entropy(model->forward(x), y);
    loss.backward();
    opt.step();
    if (s >= warmup) ms.push_back(bench::now_ms() - t0);
    if (s == 0) std::fprintf(stderr, "mlp_step: first loss %.4f\n", loss.item<float>());
  }
  return bench::median(ms);
}

}  // namespace

int main(int argc, char** argv) {
  peer::init("torch_mlp");
  const int warmup = 20, timed = bench::quick() ? 50 : 200;
  torch::manual_seed(1);
  auto images = torch::randint(0, 256, {60000, 784}, torch::kUInt8);
  auto labels = torch::randint(0, 10, {60000}, torch::kLong);
  for (int threads : bench::thread_counts(argc, argv)) {
    peer::set_threads(threads);
    double t = run(warmup, timed, images, labels);
    std::printf("{\"bench\":\"mlp_step\",\"impl\":\"libtorch\",\"threads\":%d,\"batch\":128,\"median_ms\":%.3f,"
                "\"samples_per_s\":%.0f,\"peak_mb\":%.1f,\"n\":%d}\n",
                threads, t, 128 / (t * 1e-3), peer::peak_mb(), timed);
    std::fflush(stdout);
  }
  return 0;
}

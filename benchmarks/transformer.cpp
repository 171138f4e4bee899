// transformer_step (docs/benchmarks.md): a byte-level causal transformer LM, the model of the
// libtorch peer (peers/libtorch/lm.cpp) layer for layer: vocab 256, context 128, d_model 128,
// 4 heads, 4 pre-LayerNorm blocks (attention with biased q/k/v/out projections, MLP 512 with exact
// GELU), learned positions, final LayerNorm, untied biased head; N(0, 0.02) init, zero biases.
// Batch 32 random windows of the fortune texts (first 90%), cross-entropy (mean), AdamW(3e-4,
// weight decay 0.01). A step is: sample the batch, forward, loss, backward, update,
// eval(loss, model.parameters()). 5 warm-up steps, then the median of 50 (QUICK: 10).
//   bench_transformer [--threads T]... [--only f32|bf16] [--profile]
// --profile prints the profiler's table of each configuration's timed steps to stderr.
#include <loom/loom.h>
#include <sys/resource.h>

#include <random>

#include "bench.h"

using namespace loom;

namespace {

constexpr int V = 256, T = 128, D = 128, H = 4, L = 4, F = 512, B = 32;

struct Block : nn::Module {
  nn::LayerNorm ln1{D}, ln2{D};
  nn::MultiHeadAttention attn{D, H, std::nullopt, std::nullopt, std::nullopt, std::nullopt, std::nullopt, true};
  nn::Linear fc1{D, F}, fc2{F, D};
  Block() {
    register_module("ln1", ln1);
    register_module("attn", attn);
    register_module("ln2", ln2);
    register_module("fc1", fc1);
    register_module("fc2", fc2);
  }
  array operator()(const array& x, const array& mask) const {
    array h = ln1(x);
    array y = x + attn(h, h, h, mask);
    return y + fc2(nn::gelu(fc1(ln2(y))));
  }
};

struct LM : nn::Module {
  nn::Embedding tok{V, D}, pos{T, D};
  std::vector<std::unique_ptr<Block>> blocks;
  nn::LayerNorm lnf{D};
  nn::Linear head{D, V};
  array mask = nn::MultiHeadAttention::create_additive_causal_mask(T);
  array positions = arange(T);

  LM() {
    register_module("tok", tok);
    register_module("pos", pos);
    for (int i = 0; i < L; ++i) {
      blocks.push_back(std::make_unique<Block>());
      register_module("b" + std::to_string(i), *blocks.back());
    }
    register_module("lnf", lnf);
    register_module("head", head);
    nn::ParamTree init;
    for (const auto& [name, p] : parameters()) {
      if (name.find("ln") != std::string::npos) continue;  // LayerNorms keep 1 and 0
      bool is_bias = name.size() >= 4 && name.compare(name.size() - 4, 4, "bias") == 0;
      init.insert(name, is_bias ? zeros_like(p) : nn::init::normal(p.shape(), 0.0, 0.02));
    }
    update(init);
    loom::eval(parameters());
  }
  array operator()(const array& tokens) const {  // (B, T) int32 -> logits (B, T, V)
    array x = tok(tokens) + pos(positions);
    for (const auto& b : blocks) x = (*b)(x, mask);
    return head(lnf(x));
  }
};

double peak_mb() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_maxrss / 1024.0;
}

// One configuration's median step; `compute`: the mixed-precision policy's dtype (none: float32).
double run(const data::TextDataset& text, int warmup, int timed, int64_t* nparams, std::optional<Dtype> compute,
           bool profiled) {
  random::seed(0);
  LM model;
  int64_t n = 0;
  for (const auto& [name, p] : model.parameters()) n += static_cast<int64_t>(p.size());
  *nparams = n;
  optim::AdamW opt(3e-4, {0.9, 0.999}, 1e-8, 0.01);
  auto loss_fn = [&](const array& x, const array& y) { return nn::losses::cross_entropy(model(x), y, "mean"); };
  auto step = nn::value_and_grad(model, loss_fn, compute);
  const int64_t ntrain = text.size() * 9 / 10;  // windows starting in the first 90%
  std::mt19937_64 rng(0);
  std::uniform_int_distribution<int64_t> start(0, ntrain - 1);
  std::vector<double> ms;
  for (int s = 0; s < warmup + timed; ++s) {
    if (profiled && s == warmup) profile::start();
    double t0 = bench::now_ms();
    std::vector<int64_t> idx(B);
    for (auto& i : idx) i = start(rng);
    auto [x, y] = text.get(idx);
    auto [loss, grads] = step(x, y);
    opt.update(model, grads);
    eval(loss, model.parameters());
    if (s >= warmup) ms.push_back(bench::now_ms() - t0);
    if (s == 0) {
      std::fprintf(stderr, "transformer_step%s: first loss %.4f\n", compute ? "_bf16" : "", loss.item<float>());
    }
  }
  if (profiled) {
    profile::stop();
    std::fprintf(stderr, "%s", profile::table(40).c_str());
  }
  return bench::median(ms);
}

}  // namespace

int main(int argc, char** argv) {
  const int warmup = 5, timed = bench::quick() ? 10 : 50;
  data::TextDataset text(data::fortune_files(), T, 1);
  bool profiled = false;
  std::string only;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--profile") == 0) profiled = true;
    if (std::strcmp(argv[i], "--only") == 0 && i + 1 < argc) only = argv[i + 1];
  }
  for (int threads : bench::thread_counts(argc, argv)) {
    set_num_threads(threads);
    // float32, then the same step under bfloat16 mixed precision (docs/mixed-precision.md), in one run
    // so that their ratio is taken on one machine state. peak_mb is the process's peak so far.
    for (std::optional<Dtype> compute : {std::optional<Dtype>(), std::optional<Dtype>(bfloat16)}) {
      if (!only.empty() && only != (compute ? "bf16" : "f32")) continue;
      int64_t nparams = 0;
      double t = run(text, warmup, timed, &nparams, compute, profiled);
      std::printf("{\"bench\":\"%s\",\"impl\":\"loom\",\"threads\":%d,\"batch\":%d,\"context\":%d,"
                  "\"median_ms\":%.2f,\"tokens_per_s\":%.0f,\"params\":%lld,\"peak_mb\":%.1f,\"n\":%d}\n",
                  compute ? "transformer_step_bf16" : "transformer_step", threads, B, T, t, B * T / (t * 1e-3),
                  static_cast<long long>(nparams), peak_mb(), timed);
      std::fflush(stdout);
    }
  }
}

// libtorch peer of bench_transformer: lm_step, the same byte-level causal transformer LM layer for
// layer (875,520 parameters): vocab 256, context 128, d_model 128, 4 heads, 4 pre-LayerNorm blocks
// (causal self-attention with biased projections, q/k/v as one Linear(128, 384); MLP 128-512-128
// with exact GELU), learned positions, final LayerNorm, untied biased head; N(0, 0.02) weights and
// embeddings, zero biases, LayerNorms 1 and 0. Attention is softmax(q k^T / sqrt(32) + mask) v
// written out (libtorch 1.13 has no public scaled_dot_product_attention), the causal mask applied
// with masked_fill(-inf), which keeps the scores' dtype under autocast.
// Batch 32 windows of 128 + 1 bytes at random starts in the first 90% of the fortune texts
// (bench_transformer's data::fortune_files: /usr/share/games/fortunes, else 2.5 MB of random bytes),
// cross-entropy (mean), AdamW(lr 3e-4, betas 0.9/0.999, eps 1e-8, weight decay 0.01). A step is:
// sample the batch, forward, loss, backward, update (gradients set to none first). 5 warm-up steps,
// then the median of 50 (QUICK=1: 10), cut short after 5 once the timed steps add up to 60 s (QUICK:
// 15 s): without AVX512-BF16, libtorch 1.13's bfloat16 products run on plain loops, seconds a step.
// --autocast bf16: forward and loss under CPU autocast to bfloat16 (float32 parameters, gradients
// and optimizer; the autocast cache cleared after each step), impl "libtorch_bf16": Loom's row is
// transformer_step_bf16.
//   torch_lm [--threads T]... [--autocast bf16]      (default threads: 1, then 2)
#include <ATen/autocast_mode.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include "torch_bench.h"

namespace {

namespace nn = torch::nn;
constexpr int64_t V = 256, T = 128, D = 128, H = 4, L = 4, F = 512, B = 32;

struct Block : nn::Module {
  nn::LayerNorm ln1{nn::LayerNormOptions({D})}, ln2{nn::LayerNormOptions({D})};
  nn::Linear qkv{D, 3 * D}, out{D, D}, fc1{D, F}, fc2{F, D};
  Block() {
    register_module("ln1", ln1);
    register_module("qkv", qkv);
    register_module("out", out);
    register_module("ln2", ln2);
    register_module("fc1", fc1);
    register_module("fc2", fc2);
  }
  torch::Tensor attention(const torch::Tensor& x, const torch::Tensor& future) {
    const int64_t b = x.size(0), t = x.size(1);
    auto h = qkv(x).view({b, t, 3, H, D / H}).permute({2, 0, 3, 1, 4});  // (3, B, H, T, D/H)
    auto q = h[0], k = h[1], v = h[2];
    auto scores = torch::matmul(q, k.transpose(-2, -1)) * (1.0 / std::sqrt(double(D / H)));
    auto p = torch::softmax(scores.masked_fill(future, -INFINITY), -1);
    return out(torch::matmul(p, v).transpose(1, 2).reshape({b, t, D}));
  }
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& future) {
    auto y = x + attention(ln1(x), future);
    return y + fc2(torch::gelu(fc1(ln2(y))));
  }
};

struct LM : nn::Module {
  nn::Embedding tok{V, D}, pos{T, D};
  std::vector<std::shared_ptr<Block>> blocks;
  nn::LayerNorm lnf{nn::LayerNormOptions({D})};
  nn::Linear head{D, V};
  torch::Tensor future = torch::ones({T, T}, torch::kBool).triu(1);  // true above the diagonal
  torch::Tensor positions = torch::arange(T, torch::kLong);

  LM() {
    register_module("tok", tok);
    register_module("pos", pos);
    for (int i = 0; i < L; ++i) blocks.push_back(register_module("b" + std::to_string(i), std::make_shared<Block>()));
    register_module("lnf", lnf);
    register_module("head", head);
    torch::NoGradGuard no_grad;
    for (auto& p : named_parameters()) {
      const std::string& name = p.key();
      if (name.find("ln") != std::string::npos) continue;  // LayerNorms keep 1 and 0
      bool is_bias = name.size() >= 4 && name.compare(name.size() - 4, 4, "bias") == 0;
      if (is_bias) p.value().zero_();
      else p.value().normal_(0.0, 0.02);
    }
  }
  torch::Tensor forward(const torch::Tensor& tokens) {  // (B, T) int64 -> logits (B, T, V)
    auto x = tok(tokens) + pos(positions);
    for (auto& b : blocks) x = b->forward(x, future);
    return head(lnf(x));
  }
};

// bench_transformer's text: the fortune files (regular files not ending in .dat or .u8, by name),
// concatenated; random bytes where the fortunes package is not installed.
std::string fortune_text() {
  namespace fs = std::filesystem;
  std::vector<std::string> files;
  std::error_code ec;
  for (fs::directory_iterator it("/usr/share/games/fortunes", ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    auto ends = [&](const char* s) { return name.size() >= std::strlen(s) && name.rfind(s) == name.size() - std::strlen(s); };
    std::error_code sec;
    if (name.empty() || name[0] == '.' || ends(".dat") || ends(".u8") || !fs::is_regular_file(it->path(), sec)) continue;
    files.push_back(it->path().string());
  }
  std::sort(files.begin(), files.end());
  std::string text;
  for (const auto& f : files) {
    std::ifstream in(f, std::ios::binary);
    text.append(std::istreambuf_iterator<char>(in), {});
  }
  if (text.size() < size_t(T + 1) * 10) {
    std::fprintf(stderr, "torch_lm: no fortune texts in /usr/share/games/fortunes: random bytes instead\n");
    torch::manual_seed(1);
    auto r = torch::randint(0, 256, {2500000}, torch::kUInt8);
    text.assign(static_cast<const char*>(r.data_ptr()), r.numel());
  }
  return text;
}

int64_t num_params(LM& m) {
  int64_t n = 0;
  for (const auto& p : m.parameters()) n += p.numel();
  return n;
}

// The median step; *steps: how many were timed.
double run(const torch::Tensor& data, int warmup, int timed, bool bf16, int64_t* nparams, int* steps) {
  torch::manual_seed(0);
  LM model;
  *nparams = num_params(model);
  torch::optim::AdamW opt(model.parameters(), torch::optim::AdamWOptions(3e-4).weight_decay(0.01));
  const int64_t windows = data.size(0) - (T + 1) + 1, ntrain = windows * 9 / 10;
  const auto offsets = torch::arange(T, torch::kLong).unsqueeze(0);  // (1, T)
  const double budget_ms = bench::quick() ? 15e3 : 60e3;
  std::vector<double> ms;
  double total = 0;
  for (int s = 0; s < warmup + timed && !(ms.size() >= 5 && total > budget_ms); ++s) {
    double t0 = bench::now_ms();
    auto idx = torch::randint(0, ntrain, {B, 1}, torch::kLong) + offsets;  // (B, T)
    auto x = data.index({idx}), y = data.index({idx + 1});
    for (auto& p : model.parameters()) p.mutable_grad() = torch::Tensor();
    if (bf16) {
      at::autocast::set_cpu_enabled(true);
      at::autocast::set_autocast_cpu_dtype(at::kBFloat16);
    }
    auto logits = model.forward(x);
    auto loss = torch::nn::functional::cross_entropy(logits.reshape({-1, V}), y.reshape({-1}));
    if (bf16) {
      at::autocast::set_cpu_enabled(false);
      at::autocast::clear_cache();
    }
    loss.backward();
    opt.step();
    if (s >= warmup) {
      ms.push_back(bench::now_ms() - t0);
      total += ms.back();
    }
    if (s == 0) std::fprintf(stderr, "lm_step%s: first loss %.4f\n", bf16 ? "_bf16" : "", loss.item<float>());
  }
  *steps = static_cast<int>(ms.size());
  return bench::median(ms);
}

}  // namespace

int main(int argc, char** argv) {
  peer::init("torch_lm");
  bool bf16 = false;
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::strcmp(argv[i], "--autocast") == 0) {
      if (std::strcmp(argv[i + 1], "bf16") != 0) {
        std::fprintf(stderr, "torch_lm: --autocast takes bf16, not %s\n", argv[i + 1]);
        return 2;
      }
      bf16 = true;
    }
  }
  const int warmup = 5, timed = bench::quick() ? 10 : 50;
  const std::string text = fortune_text();
  auto data = torch::from_blob(const_cast<char*>(text.data()), {int64_t(text.size())}, torch::kUInt8).to(torch::kLong);
  for (int threads : bench::thread_counts(argc, argv)) {
    peer::set_threads(threads);
    int64_t nparams = 0;
    int steps = 0;
    double t = run(data, warmup, timed, bf16, &nparams, &steps);
    std::printf("{\"bench\":\"lm_step\",\"impl\":\"%s\",\"threads\":%d,\"batch\":%lld,\"context\":%lld,"
                "\"median_ms\":%.2f,\"tokens_per_s\":%.0f,\"params\":%lld,\"peak_mb\":%.1f,\"n\":%d}\n",
                bf16 ? "libtorch_bf16" : "libtorch", threads, static_cast<long long>(B), static_cast<long long>(T), t,
                B * T / (t * 1e-3), static_cast<long long>(nparams), peer::peak_mb(), steps);
    std::fflush(stdout);
  }
  return 0;
}

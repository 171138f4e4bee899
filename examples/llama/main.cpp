// A LLaMA-style byte-level decoder trained on the fortune(6) texts, alone or data parallel under
// mpirun -np N: the model of the data-parallel guides. Model (the names of MLX's llama example):
//   tok_embeddings (256 bytes -> dims)
//   layers.i: h = x + attention(attention_norm(x)),  y = h + feed_forward(ffn_norm(h))
//     attention:    q, k, v = wq x, wk x, wv x (no biases), split into heads; RoPE on q and k;
//                   causal softmax(q k^T / sqrt(head_dim)) v (fast::scaled_dot_product_attention); wo
//     feed_forward: w2(silu(w1 x) * w3 x)  (SwiGLU, no biases); with --moe E, an nn::MoE of E GELU
//                   experts instead (top-k routing, capacity, Switch's load-balancing loss added with
//                   weight --moe-aux), spread over the ranks when they divide E (expert parallelism:
//                   the tokens travel to their experts and back by all_to_all)
//     attention_norm, ffn_norm: RMSNorm
//   norm (RMSNorm) -> output (dims -> 256, no bias)
// N(0, 0.02) weights, RMSNorm weights 1; AdamW(lr, weight decay 0.01); cross entropy.
//
// Each rank reads only its shard of every global batch (data::DataLoader), gradients are averaged by
// nn::average_gradients, and one eval per step runs forward, backward, the all-reduces, the AdamW
// update and the mean of the ranks' losses (the loss of the whole global batch). The same global
// batch and seed give the same loss curve on 1, 2 or 4 ranks, to float rounding (the CTest
// example_llama_ranks checks it). Rank 0 prints the step, the loss and tokens/s; at the end, every
// rank's peak memory (Loom's get_peak_memory() and the process's peak RSS) and the loss on held-out
// text. --metrics writes one JSON line per step and a summary line. --compute-dtype bfloat16 runs the
// products in bfloat16 under the mixed-precision policy (parameters, optimizer state and the float32
// list stay float32: docs/mixed-precision.md); --profile prints the profiler's table of a few steps,
// whose rows name the GEMM backend (`Matmul [dnnl bf16]` on a CPU with bf16 kernels).
#include <loom/loom.h>

#include <sys/resource.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <thread>

using namespace loom;

namespace {

nn::Linear linear(int in, int out) { return nn::Linear(in, out, /*bias=*/false); }

struct Attention : nn::Module {
  int heads, head_dim;
  nn::Linear wq, wk, wv, wo;
  nn::RoPE rope;

  Attention(int dims, int heads)
      : heads(heads), head_dim(dims / heads), wq(linear(dims, dims)), wk(linear(dims, dims)),
        wv(linear(dims, dims)), wo(linear(dims, dims)), rope(dims / heads) {
    register_module("wq", wq);
    register_module("wk", wk);
    register_module("wv", wv);
    register_module("wo", wo);
  }

  // x (B, L, dims), mask (L, L) additive causal -> (B, L, dims)
  array operator()(const array& x, const array& mask) const {
    const int B = x.shape(0), L = x.shape(1), D = x.shape(2);
    // q, k and v in one GEMM (the three weights stacked), then heads as a batch axis: (B, heads, L, head_dim).
    array qkv = matmul(x, transpose(concatenate({wq.weight, wk.weight, wv.weight}, 0)));
    auto parts = split(qkv, {D, 2 * D}, 2);
    auto heads_of = [&](const array& t) { return transpose(reshape(t, {B, L, heads, head_dim}), {0, 2, 1, 3}); };
    array q = rope(heads_of(parts[0])), k = rope(heads_of(parts[1])), v = heads_of(parts[2]);
    array out = fast::scaled_dot_product_attention(q, k, v, 1.0 / std::sqrt(double(head_dim)), mask);
    return wo(reshape(transpose(out, {0, 2, 1, 3}), {B, L, D}));
  }
};

struct FeedForward : nn::Module {
  int hidden;
  nn::Linear w1, w2, w3;

  FeedForward(int dims, int hidden) : hidden(hidden), w1(linear(dims, hidden)), w2(linear(hidden, dims)),
                                      w3(linear(dims, hidden)) {
    register_module("w1", w1);
    register_module("w2", w2);
    register_module("w3", w3);
  }

  // w2(silu(w1 x) * w3 x), with w1 x and w3 x from one GEMM.
  array operator()(const array& x) const {
    auto parts = split(matmul(x, transpose(concatenate({w1.weight, w3.weight}, 0))), std::vector<int>{hidden}, -1);
    return w2(nn::silu(parts[0]) * parts[1]);
  }
};

struct MoEOptions {
  int experts = 0, top_k = 2;
  double capacity_factor = 1.25;
  std::optional<distributed::Group> group;  // expert parallel over it
};

struct Block : nn::Module {
  nn::RMSNorm attention_norm, ffn_norm;
  Attention attention;
  FeedForward feed_forward;
  std::unique_ptr<nn::MoE> moe;  // instead of feed_forward, with --moe

  Block(int dims, int heads, int hidden, const MoEOptions& m)
      : attention_norm(dims), ffn_norm(dims), attention(dims, heads), feed_forward(m.experts ? 1 : dims, m.experts ? 1 : hidden) {
    register_module("attention_norm", attention_norm);
    register_module("attention", attention);
    register_module("ffn_norm", ffn_norm);
    if (m.experts) {
      moe = std::make_unique<nn::MoE>(dims, hidden, m.experts, m.top_k, m.capacity_factor, m.group);
      register_module("moe", *moe);
    } else {
      register_module("feed_forward", feed_forward);
    }
  }

  array operator()(const array& x, const array& mask) const {
    array h = x + attention(attention_norm(x), mask);
    return h + (moe ? (*moe)(ffn_norm(h)) : feed_forward(ffn_norm(h)));
  }
};

struct Llama : nn::Module {
  nn::Embedding tok_embeddings;
  std::vector<std::unique_ptr<Block>> layers;
  nn::RMSNorm norm;
  nn::Linear output;

  Llama(int dims, int heads, int num_layers, int hidden, const MoEOptions& m = {})
      : tok_embeddings(256, dims), norm(dims), output(linear(dims, 256)) {
    register_module("tok_embeddings", tok_embeddings);
    for (int i = 0; i < num_layers; ++i) {
      layers.push_back(std::make_unique<Block>(dims, heads, hidden, m));
      register_module("layers." + std::to_string(i), *layers.back());
    }
    register_module("norm", norm);
    register_module("output", output);
    // N(0, 0.02) for the embedding and every projection; the RMSNorm weights stay at 1, and the
    // experts keep nn::MoE's initialization (drawn expert by expert: the same for any number of ranks).
    nn::ParamTree init;
    for (const auto& [name, p] : parameters()) {
      if (name.find("norm") == std::string::npos && name.find(".moe.") == std::string::npos) {
        init.insert(name, nn::init::normal(p.shape(), 0.0, 0.02));
      }
    }
    update(init);
  }

  // The mean over the blocks of the last call's MoE load-balancing loss and dropped fraction.
  std::pair<array, array> moe_stats() const {
    array aux = zeros({}), dropped = zeros({});
    for (const auto& layer : layers) {
      aux = aux + layer->moe->last().load_balancing_loss;
      dropped = dropped + layer->moe->last().dropped;
    }
    const float n = static_cast<float>(layers.size());
    return {aux / n, dropped / n};
  }

  // tokens (B, L) int32 -> logits (B, L, 256)
  array operator()(const array& tokens) const {
    array x = tok_embeddings(tokens);
    array mask = nn::MultiHeadAttention::create_additive_causal_mask(tokens.shape(1));
    for (const auto& layer : layers) x = (*layer)(x, mask);
    return output(norm(x));
  }
};

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// The process's peak resident set size in bytes (getrusage; Linux reports KiB).
double peak_rss_bytes() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return double(usage.ru_maxrss) * 1024.0;
}

double mib(double bytes) { return bytes / (1024.0 * 1024.0); }

}  // namespace

int main(int argc, char** argv) {
  int steps = 300, batch = 32, context = 128, dims = 128, heads = 4, num_layers = 4, hidden = 0, threads = 0;
  int log_every = 10, val_windows = 256, profile_steps = 5, experts = 0, top_k = 2;
  double lr = 1e-3, capacity_factor = 1.25, moe_aux = 0.01;
  uint64_t seed = 0;
  std::string dir = "/usr/share/games/fortunes", metrics = "runs/llama/metrics.jsonl", compute = "float32", profile_path;
  CLI::App app{"Train a LLaMA-style byte-level decoder on the fortune texts, alone or under mpirun -np N."};
  app.add_option("--steps", steps, "training steps")->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--batch-size", batch, "global batch (windows), split evenly across ranks")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--context", context, "window length in bytes")->check(CLI::Range(2, 4096))->capture_default_str();
  app.add_option("--dims", dims, "model width")->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--heads", heads, "attention heads (dims / heads even, for RoPE)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--layers", num_layers, "decoder blocks")->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--hidden", hidden, "SwiGLU hidden width (default: 8/3 dims rounded up to a multiple of 32)");
  app.add_option("--lr", lr, "AdamW learning rate")->capture_default_str();
  app.add_option("--threads", threads, "threads per rank (default: cores / local ranks)");
  app.add_option("--seed", seed, "seed for the weights and the shuffling")->capture_default_str();
  app.add_option("--fortunes-dir", dir, "directory of fortune text files")->capture_default_str();
  app.add_option("--log-every", log_every, "print the loss every N steps")->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--val-windows", val_windows, "held-out windows scored at the end (the first N of the last 10%)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--metrics", metrics, "JSON lines, one per step and a summary (rank 0; empty: none)")
      ->capture_default_str();
  app.add_option("--compute-dtype", compute, "mixed precision: products in bfloat16, parameters and optimizer float32")
      ->check(CLI::IsMember({"float32", "bfloat16"}))
      ->capture_default_str();
  app.add_option("--profile", profile_path,
                 "profile the steps after the first: print the profiler's table, write a Chrome trace to this file");
  app.add_option("--moe", experts,
                 "mixture of experts: E experts per block instead of the SwiGLU MLP (0: none); expert parallel "
                 "over the ranks when they divide E")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("--top-k", top_k, "experts per token (--moe)")->check(CLI::PositiveNumber)->capture_default_str();
  app.add_option("--capacity-factor", capacity_factor, "tokens an expert takes: ceil(factor * tokens * k / E) (--moe)")
      ->capture_default_str();
  app.add_option("--moe-aux", moe_aux, "weight of Switch's load-balancing loss (--moe)")->capture_default_str();
  app.add_option("--profile-steps", profile_steps, "steps --profile records")->check(CLI::PositiveNumber)
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  if (dims % heads != 0 || (dims / heads) % 2 != 0) {
    std::fprintf(stderr, "--dims %d must be a multiple of --heads %d with an even head size (RoPE)\n", dims, heads);
    return 2;
  }
  if (hidden <= 0) hidden = (8 * dims / 3 + 31) / 32 * 32;

  auto world = distributed::init();
  if (batch % world.size() != 0) {
    if (world.rank() == 0) std::fprintf(stderr, "--batch-size %d must be a multiple of the %d ranks\n", batch, world.size());
    return 2;
  }
  if (threads <= 0) {
    const char* local = std::getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
    int per_node = local ? std::max(1, std::atoi(local)) : world.size();
    threads = std::max(1, static_cast<int>(std::thread::hardware_concurrency()) / per_node);
  }
  set_num_threads(threads);
  random::seed(seed);  // the same on every rank: the same initial weights
  const bool lead = world.rank() == 0;

  auto text = std::make_shared<data::TextDataset>(data::fortune_files(dir), context);
  const int64_t windows = text->size(), held_out = std::max<int64_t>(1, windows / 10);
  data::DataLoader loader(data::Subset(text, 0, windows - held_out), batch,
                          data::LoaderOptions{true, seed, data::Remainder::drop}, world);

  MoEOptions moe_options{experts, top_k, capacity_factor, std::nullopt};
  const bool expert_parallel = experts > 0 && world.size() > 1 && experts % world.size() == 0;
  if (expert_parallel) moe_options.group = world;
  Llama model(dims, heads, num_layers, hidden, moe_options);
  // The experts each rank holds alone (expert parallel): their gradients are divided by the number of
  // ranks, not averaged (nn::average_gradients' `local`).
  std::vector<std::string> local;
  for (const auto& [name, split] : model.splits()) local.push_back(name);
  int64_t num_params = 0;
  for (const auto& [name, p] : model.parameters()) num_params += p.size();
  if (lead) {
    std::printf("fortunes: %lld bytes, %lld windows of %d (%lld held out); %d rank(s) x %d thread(s), global batch %d "
                "(%lld per rank)\n",
                static_cast<long long>(text->num_bytes()), static_cast<long long>(windows), context,
                static_cast<long long>(held_out), world.size(), threads, batch,
                static_cast<long long>(loader.local_batch_size()));
    std::printf("model: dims %d, %d layers, %d heads, SwiGLU hidden %d, %.2fM parameters; AdamW lr %g, seed %llu; "
                "compute %s\n",
                dims, num_layers, heads, hidden, num_params / 1e6, lr, static_cast<unsigned long long>(seed),
                compute.c_str());
    if (experts > 0) {
      std::printf("moe: %d experts per block (hidden %d), top-%d, capacity factor %g, load-balancing weight %g; %s\n",
                  experts, hidden, top_k, capacity_factor, moe_aux,
                  expert_parallel ? ("expert parallel: " + std::to_string(experts / world.size()) + " experts per rank").c_str()
                                  : "every rank holds every expert");
    }
  }

  FILE* out = nullptr;
  if (lead && !metrics.empty()) {
    std::filesystem::path path(metrics);
    if (path.has_parent_path()) std::filesystem::create_directories(path.parent_path());
    out = std::fopen(metrics.c_str(), "w");
    if (!out) {
      std::fprintf(stderr, "cannot write %s\n", metrics.c_str());
      return 1;
    }
  }

  optim::AdamW optimizer(lr, {0.9, 0.999}, 1e-8, 0.01);
  const std::optional<Dtype> compute_dtype = compute == "bfloat16" ? std::optional<Dtype>(bfloat16) : std::nullopt;
  auto loss_and_grad = nn::value_and_grad(
      model,
      [&](const array& x, const array& y) {
        array loss = nn::losses::cross_entropy(model(x), y, "mean");
        if (experts > 0) return std::vector<array>{loss + moe_aux * model.moe_stats().first, loss};
        return std::vector<array>{loss, loss};
      },
      compute_dtype);

  const double tokens_per_step = double(batch) * context;
  const double t0 = now_s();
  double t_log = t0, t_first = 0;
  int logged = 0;  // the last step printed
  int64_t epoch = 0, i = 0;
  for (int step = 1; step <= steps; ++step, ++i) {
    if (i == loader.num_batches()) loader.set_epoch(++epoch), i = 0;
    // The profiler records whole steps, from the second (the first builds caches and pools).
    const bool profiling = !profile_path.empty() && step >= 2 && step < 2 + profile_steps;
    if (profiling && step == 2) profile::start();
    const double t_step = now_s();
    auto [x, y] = loader.batch(i);                  // this rank's shard of global batch i
    auto [losses, grads] = loss_and_grad(x, y);     // lazy: (the objective, the cross entropy alone)
    const array loss = losses[1];
    grads = nn::average_gradients(grads, local);    // lazy: bucketed all-reduces
    optimizer.update(model, grads);                 // lazy: new parameters and AdamW state
    array global_loss = distributed::all_mean(loss, world);  // the loss of the whole global batch
    eval(global_loss, model.parameters(), optimizer.state());  // all of it, in one graph
    const float value = global_loss.item<float>();
    const double t = now_s();
    if (profiling && (step == 1 + profile_steps || step == steps)) {
      profile::stop();
      if (lead) std::printf("profile of steps 2-%d (rank 0):\n%s", step, profile::table(25).c_str());
      profile::write_trace(profile_path);  // every rank: the trace gathers them all
      if (lead) std::printf("profile: trace of %d rank(s) written to %s\n", world.size(), profile_path.c_str());
    }
    if (step == 1) t_first = t - t_step;
    if (out) {
      std::fprintf(out, "{\"step\":%d,\"loss\":%.9g,\"seconds\":%.6f,\"tokens_per_s\":%.1f,\"ranks\":%d}\n", step,
                   value, t - t_step, tokens_per_step / (t - t_step), world.size());
    }
    if (lead && (step % log_every == 0 || step == 1 || step == steps)) {
      std::printf("step %d/%d  loss %.6f  %.0f tokens/s", step, steps, value,
                  (step - logged) * tokens_per_step / (t - t_log));
      if (experts > 0) {
        auto [aux, dropped] = model.moe_stats();
        std::printf("  moe balance %.3f, dropped %.1f%%", aux.item<float>(), 100 * dropped.item<float>());
      }
      std::printf("\n");
      std::fflush(stdout);
      t_log = t, logged = step;
    }
    if (!std::isfinite(value)) {
      if (lead) std::fprintf(stderr, "the loss is not finite at step %d: lower --lr\n", step);
      return 1;
    }
  }
  const double train_s = now_s() - t0;
  // Throughput without the first step (which also warms up the allocator's cache).
  const double tokens_per_s = steps > 1 ? (steps - 1) * tokens_per_step / (train_s - t_first) : tokens_per_step / train_s;

  // Held-out loss on the first val_windows windows of the last 10%: each rank scores a slice of them
  // and one all_sum combines the sums.
  model.eval();
  data::Subset val(text, windows - held_out, windows);
  const int64_t nval = std::min<int64_t>(val_windows, held_out);
  const int64_t vb = nval * world.rank() / world.size(), ve = nval * (world.rank() + 1) / world.size();
  array total = zeros({});
  for (int64_t b = vb; b < ve; b += 32) {
    std::vector<int64_t> idx;
    for (int64_t k = b; k < std::min(ve, b + 32); ++k) idx.push_back(k);
    auto [x, y] = val.get(idx);
    total = total + nn::losses::cross_entropy(model(x), y, "sum");
    eval(total);
  }
  const double val_loss = distributed::all_sum(total, world).item<double>() / (double(nval) * context);

  // Every rank's peak memory, gathered on rank 0: Loom's (the most its arrays held at once) and the
  // process's peak RSS (the library, MPI, the memory-mapped text and the allocator's cache too).
  const std::vector<double> mine{double(get_peak_memory()), peak_rss_bytes()};
  const std::vector<double> mem = distributed::all_gather(array(mine, {1, 2}), world).to_vector<double>();
  if (lead) {
    std::printf("trained %d steps in %.1f s: %.0f tokens/s (after the first step); held-out loss %.4f (%.3f bits per "
                "byte) on %lld windows\n",
                steps, train_s, tokens_per_s, val_loss, val_loss / std::log(2.0), static_cast<long long>(nval));
    for (int r = 0; r < world.size(); ++r) {
      std::printf("rank %d: peak memory %.1f MiB (Loom), peak RSS %.1f MiB (process)\n", r,
                  mib(mem[2 * r]), mib(mem[2 * r + 1]));
    }
    if (out) {
      std::fprintf(out, "{\"summary\":true,\"steps\":%d,\"ranks\":%d,\"threads\":%d,\"seconds\":%.3f,\"tokens_per_s\":%.1f,"
                   "\"held_out_loss\":%.6f,\"peak_memory_mib\":[",
                   steps, world.size(), threads, train_s, tokens_per_s, val_loss);
      for (int r = 0; r < world.size(); ++r) std::fprintf(out, "%s%.2f", r ? "," : "", mib(mem[2 * r]));
      std::fprintf(out, "],\"peak_rss_mib\":[");
      for (int r = 0; r < world.size(); ++r) std::fprintf(out, "%s%.2f", r ? "," : "", mib(mem[2 * r + 1]));
      std::fprintf(out, "]}\n");
      std::fclose(out);
      std::printf("metrics: %s\n", metrics.c_str());
    }
  }
}

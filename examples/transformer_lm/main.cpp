// A byte-level causal transformer language model trained on the fortune(6) texts, alone or data
// parallel under mpirun. Setup (the transformer_step workload): vocabulary 256 bytes, context 128,
// d_model 128, 4 heads, 4 pre-LayerNorm blocks with a GELU MLP of 512, learned positions, final
// LayerNorm, untied output head, N(0, 0.02) init; AdamW(3e-4, weight decay 0.01), global batch 32.
// At the end it reports the loss on held-out text and writes samples, greedy and with temperature.
// --mode picks how the ranks share the training state: replicated (average_gradients), zero1 / zero2
// (the optimizer state, and the averaged gradients, sharded: Optimizer::shard_state), fully_sharded
// (every parameter sharded, each block gathered by itself: nn::fully_shard) or tensor_parallel (each
// block's heads and MLP columns split across the ranks, which all train on the whole batch:
// TransformerEncoderLayer::shard). --tp N with replicated lays the ranks out as a dp x tp mesh
// (distributed::Mesh): tensor parallel inside each group of N ranks, data parallel across them.
#include <loom/loom.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <thread>

using namespace loom;

namespace {

struct LM : nn::Module {
  int context;
  nn::Embedding tok, pos;
  std::vector<std::unique_ptr<nn::TransformerEncoderLayer>> blocks;
  nn::LayerNorm lnf;
  nn::Linear head;
  std::vector<std::shared_ptr<nn::FullyShardedModule>> sharded_blocks;  // --mode fully_sharded
  std::shared_ptr<nn::FullyShardedModule> sharded_rest;

  LM(int context, int dims, int heads, int layers, int mlp_dims)
      : context(context), tok(256, dims), pos(context, dims), lnf(dims), head(dims, 256) {
    register_module("tok", tok);
    register_module("pos", pos);
    for (int i = 0; i < layers; ++i) {
      blocks.push_back(std::make_unique<nn::TransformerEncoderLayer>(dims, heads, mlp_dims, 0.0, nn::gelu, true));
      register_module("blocks." + std::to_string(i), *blocks.back());
    }
    register_module("lnf", lnf);
    register_module("head", head);
    // GPT-2 style init: N(0, 0.02) weights and embeddings, zero biases, LayerNorms at 1 and 0.
    nn::ParamTree init;
    for (const auto& [name, p] : parameters()) {
      if (name.find("ln") != std::string::npos) continue;
      bool is_bias = name.size() >= 4 && name.compare(name.size() - 4, 4, "bias") == 0;
      init.insert(name, is_bias ? zeros_like(p) : nn::init::normal(p.shape(), 0.0, 0.02));
    }
    update(init);
  }

  // Each block keeps its slices of its own parameters and gathers them for its call; the embeddings,
  // the final norm and the head are the model handle's.
  void fully_shard() {
    for (auto& b : blocks) sharded_blocks.push_back(nn::fully_shard(*b));
    sharded_rest = nn::fully_shard(*this);
  }

  // Each block's heads and MLP columns split across the group; the rest stays whole on every rank.
  void tensor_parallel(const distributed::Group& group) {
    for (auto& b : blocks) b->shard(group);
  }

  // tokens (B, T) int32 -> logits (B, T, 256)
  array operator()(const array& tokens) {
    auto forward = [&] {
      const int t = tokens.shape(1);
      array x = tok(tokens) + pos(arange(t));
      array mask = nn::MultiHeadAttention::create_additive_causal_mask(t);
      for (size_t i = 0; i < blocks.size(); ++i) {
        auto& b = *blocks[i];
        x = sharded_blocks.empty() ? b(x, mask) : (*sharded_blocks[i])([&] { return b(x, mask); });
      }
      return head(lnf(x));
    };
    return sharded_rest ? (*sharded_rest)(forward) : forward();
  }
};

std::string generate(LM& model, const std::string& prompt, int bytes, double temperature) {
  std::string text = prompt;
  for (int i = 0; i < bytes; ++i) {
    const size_t start = text.size() > size_t(model.context) ? text.size() - model.context : 0;
    std::vector<int> window(text.begin() + start, text.end());
    for (auto& c : window) c = static_cast<unsigned char>(c);
    array tokens(window, {1, static_cast<int>(window.size())});
    array logits = squeeze(slice(model(tokens), {0, int(window.size()) - 1, 0}, {1, int(window.size()), 256}), {0, 1});
    array next = temperature <= 0 ? argmax(logits) : random::categorical(logits * float(1.0 / temperature));
    text.push_back(static_cast<char>(next.item<int>()));
  }
  return text.substr(prompt.size());
}

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace

int main(int argc, char** argv) {
  int steps = 300, batch = 32, context = 128, threads = 0, sample_bytes = 300, log_every = 25, val_windows = 256;
  double lr = 3e-4, temperature = 0.8;
  int profile_steps = 5, tp = 1;
  uint64_t seed = 0;
  std::string dir = "/usr/share/games/fortunes", prompt = "The ", mode = "replicated", profile_path;
  std::string compute = "float32";
  CLI::App app{"Train a byte-level transformer LM on the fortune texts, alone or under mpirun -np N."};
  app.add_option("--steps", steps, "training steps")->capture_default_str();
  app.add_option("--batch-size", batch, "global batch (windows), split evenly across ranks")->capture_default_str();
  app.add_option("--context", context, "window length in bytes")->check(CLI::Range(2, 4096))->capture_default_str();
  app.add_option("--lr", lr, "AdamW learning rate")->capture_default_str();
  app.add_option("--threads", threads, "threads per rank (default: cores / local ranks)");
  app.add_option("--seed", seed, "seed for weights, shuffling and sampling")->capture_default_str();
  app.add_option("--fortunes-dir", dir, "directory of fortune text files")->capture_default_str();
  app.add_option("--prompt", prompt, "text the samples start from")->capture_default_str();
  app.add_option("--sample-bytes", sample_bytes, "bytes to generate per sample")->capture_default_str();
  app.add_option("--temperature", temperature, "sampling temperature for the second sample")->capture_default_str();
  app.add_option("--mode", mode, "how the ranks share the training state")
      ->check(CLI::IsMember({"replicated", "zero1", "zero2", "fully_sharded", "tensor_parallel"}))
      ->capture_default_str();
  app.add_option("--tp", tp,
                 "with --mode replicated: tensor parallel inside groups of this many ranks (a dp x tp mesh), data "
                 "parallel across them")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--compute-dtype", compute,
                 "mixed precision: products in this dtype, parameters and optimizer float32 (float16 scales the loss)")
      ->check(CLI::IsMember({"float32", "bfloat16", "float16"}))
      ->capture_default_str();
  app.add_option("--log-every", log_every, "print the loss every N steps")->capture_default_str();
  app.add_option("--val-windows", val_windows, "held-out windows scored at the end (the first N of the last 10%)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--profile", profile_path,
                 "profile the steps after the first: print the profiler's table, write a Chrome trace to this file");
  app.add_option("--profile-steps", profile_steps, "steps --profile records")->check(CLI::PositiveNumber)
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);

  auto world = distributed::init();
  if (threads <= 0) {
    const char* local = std::getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
    int per_node = local ? std::max(1, std::atoi(local)) : world.size();
    threads = std::max(1, static_cast<int>(std::thread::hardware_concurrency()) / per_node);
  }
  set_num_threads(threads);
  random::seed(seed);
  const bool lead = world.rank() == 0;
  if (tp > 1 && (mode != "replicated" || world.size() % tp != 0)) {
    if (lead) {
      std::fprintf(stderr, "--tp %d needs --mode replicated and a number of ranks that it divides (%d ranks, --mode %s)\n",
                   tp, world.size(), mode.c_str());
    }
    return 2;
  }
  std::optional<distributed::Mesh> mesh;
  if (tp > 1) mesh.emplace(std::vector<std::pair<std::string, int>>{{"dp", -1}, {"tp", tp}}, world);
  // The ranks that read different batches and average their gradients.
  const distributed::Group dp_group = mesh ? mesh->group("dp") : world;

  auto text = std::make_shared<data::TextDataset>(data::fortune_files(dir), context);
  const int64_t windows = text->size(), held_out = std::max<int64_t>(1, windows / 10);
  // Tensor-parallel ranks split the model, not the batch: each reads the whole of every batch.
  const bool tensor_parallel = mode == "tensor_parallel";
  data::DataLoader loader(data::Subset(text, 0, windows - held_out), batch, data::LoaderOptions{true, seed, data::Remainder::drop},
                          tensor_parallel ? data::Shard() : data::Shard(dp_group));
  if (lead) {
    std::printf("fortunes: %lld bytes, %lld windows of %d (%lld held out); %d rank(s) x %d thread(s), batch %d, %s%s, "
                "compute %s\n",
                static_cast<long long>(text->num_bytes()), static_cast<long long>(windows), context,
                static_cast<long long>(held_out), world.size(), threads, batch, mode.c_str(),
                mesh ? (" over a dp " + std::to_string(dp_group.size()) + " x tp " + std::to_string(tp) + " mesh").c_str() : "",
                compute.c_str());
  }

  LM model(context, 128, 4, 4, 512);
  optim::AdamW optimizer(lr, {0.9, 0.999}, 1e-8, 0.01);
  if (mode == "fully_sharded") model.fully_shard();
  if (tensor_parallel) model.tensor_parallel(world);
  if (mesh) model.tensor_parallel(mesh->group("tp"));
  if (mode == "zero1" || mode == "zero2") optimizer.shard_state(world, mode == "zero1" ? 1 : 2);
  // Mixed precision (docs/mixed-precision.md): the policy for forward and backward; float16 also
  // scales the loss, and a step whose gradients overflow is skipped on every rank.
  const std::optional<Dtype> compute_dtype =
      compute == "bfloat16" ? std::optional<Dtype>(bfloat16) : compute == "float16" ? std::optional<Dtype>(float16) : std::nullopt;
  std::optional<optim::DynamicLossScaler> scaler;
  if (compute == "float16") scaler.emplace(optim::DynamicLossScaler::Options{}, world);
  auto loss_fn = [&](const array& x, const array& y) {
    array loss = nn::losses::cross_entropy(model(x), y, "mean");
    return std::vector<array>{scaler ? scaler->scale(loss) : loss, loss};  // differentiate the first
  };
  auto loss_and_grad = nn::value_and_grad(model, loss_fn, compute_dtype);

  const double t0 = now_s();
  double recent = 0;
  int64_t epoch = 0, i = 0;
  for (int step = 1; step <= steps; ++step, ++i) {
    if (i == loader.num_batches()) loader.set_epoch(++epoch), i = 0;
    // The profiler records whole steps, from the second (the first builds caches and pools).
    const bool profiling = !profile_path.empty() && step >= 2 && step < 2 + profile_steps;
    if (profiling && step == 2) profile::start();
    auto [x, y] = loader.batch(i);
    auto [losses, grads] = loss_and_grad(x, y);
    const array loss = losses[1];
    // The sharded modes average inside; tensor-parallel gradients are the whole batch's already.
    if (mode == "replicated") grads = nn::average_gradients(grads, 32 << 20, std::nullopt, dp_group);
    if (scaler) {
      scaler->step(optimizer, model, grads);  // false: skipped (the gradients overflowed)
    } else {
      optimizer.update(model, grads);
    }
    eval(loss, model.parameters());
    if (profiling && (step == 1 + profile_steps || step == steps)) {
      profile::stop();
      if (lead) std::printf("profile of steps 2-%d (rank 0):\n%s", step, profile::table(25).c_str());
      profile::write_trace(profile_path);  // every rank: the trace gathers them all
      if (lead) std::printf("profile: trace of %d rank(s) written to %s\n", world.size(), profile_path.c_str());
    }
    recent += loss.item<float>();
    if (step % log_every == 0 || step == steps) {
      // The loss of the global batch: the mean of the ranks' (tensor-parallel ranks share one batch).
      const double global = tensor_parallel || dp_group.size() == 1
                                ? recent
                                : distributed::all_sum(array(recent, float64), dp_group).item<double>() / dp_group.size();
      int n = step % log_every == 0 ? log_every : step % log_every;
      double elapsed = now_s() - t0;
      if (lead) {
        std::printf("step %d/%d  loss %.4f  %.0f tokens/s\n", step, steps, global / n,
                    double(step) * batch * context / elapsed);
      }
      std::fflush(stdout);
      recent = 0;
    }
    if (step % log_every == 0) recent = 0;
  }

  // Held-out loss on the first val_windows windows of the last 10%: each rank scores a slice of
  // them and one all_sum combines the sums. A fully sharded or tensor-parallel model computes only
  // with every rank (of its tp group, on a mesh) taking part in its collectives, so there every rank
  // scores them all, or its dp coordinate's slice (and generates the samples).
  model.eval();
  const bool together = mode == "fully_sharded" || tensor_parallel || mesh;
  const bool split_val = !(mode == "fully_sharded" || tensor_parallel);
  data::Subset val(text, windows - held_out, windows);
  const int64_t nval = std::min<int64_t>(val_windows, held_out);
  const int64_t vb = split_val ? nval * dp_group.rank() / dp_group.size() : 0;
  const int64_t ve = split_val ? nval * (dp_group.rank() + 1) / dp_group.size() : nval;
  array total = zeros({});
  for (int64_t b = vb; b < ve; b += 32) {
    std::vector<int64_t> idx;
    for (int64_t k = b; k < std::min(ve, b + 32); ++k) idx.push_back(k);
    auto [x, y] = val.get(idx);
    total = total + nn::losses::cross_entropy(model(x), y, "sum");
    eval(total);
  }
  double val_loss = (split_val ? distributed::all_sum(total, dp_group) : total).item<double>() / (double(nval) * context);
  if (lead) {
    std::printf("held-out loss %.4f (%.3f bits per byte) after %d steps, %.1f s\n", val_loss, val_loss / std::log(2.0),
                steps, now_s() - t0);
    if (scaler) {
      std::printf("float16 loss scale %g; %lld step(s) skipped for overflowing gradients\n", scaler->loss_scale(),
                  static_cast<long long>(scaler->skipped_steps()));
    }
  }
  if (lead || together) {
    const std::string greedy = generate(model, prompt, sample_bytes, 0);
    const std::string sampled = generate(model, prompt, sample_bytes, temperature);
    if (lead) {
      std::printf("--- greedy:\n%s%s\n", prompt.c_str(), greedy.c_str());
      std::printf("--- temperature %.2f:\n%s%s\n", temperature, prompt.c_str(), sampled.c_str());
    }
  }
}

// sharded (docs/benchmarks.md), under mpirun -np 2 and -np 4: training steps of a small transformer LM
// whose parameters, gradients and AdamW state dominate memory (4 blocks of width 256, 3.4M parameters,
// a batch of 4 x 32 tokens per rank), in each of the ways Loom spreads a model over the ranks:
//   replicated       nn::average_gradients; every rank holds the whole state
//   zero1, zero2     Optimizer::shard_state(group, 1 or 2)
//   fully_sharded    nn::fully_shard, each block by itself and the rest by the model's handle
//   fully_sharded_checkpoint  the same, the blocks called through FullyShardedModule::checkpoint (each
//                    block's full parameters held only while it runs; its forward recomputed backward)
//   tensor_parallel  TransformerEncoderLayer::shard: heads and MLP columns split (the ranks share one batch)
//   tp2_dp           a distributed::Mesh of dp = N/2 x tp = 2 (at 4+ ranks): tensor parallel inside each
//                    pair, which shares a batch, and average_gradients across the pairs
// The blocks are nn::TransformerEncoderLayer (pre-norm, 8 heads, GELU MLP of 1024).
// One JSON line per mode: state_mb (parameters + averaged gradients + optimizer state held by one rank,
// the largest rank's), peak_mb (Loom's peak memory during a step, the largest rank's) and median_ms (the
// slowest rank's step, median over repetitions).
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

constexpr int kDims = 256, kHeads = 8, kLayers = 4, kVocab = 512, kBatch = 4, kTokens = 32;

struct LM : nn::Module {
  nn::Embedding embed{kVocab, kDims};
  std::vector<std::unique_ptr<nn::TransformerEncoderLayer>> blocks;
  nn::LayerNorm norm{kDims};
  std::vector<std::shared_ptr<nn::FullyShardedModule>> sharded_blocks;
  std::shared_ptr<nn::FullyShardedModule> sharded_rest;

  bool checkpointed = false;

  explicit LM(const std::optional<distributed::Group>& tp) {
    register_module("embed", embed);
    for (int i = 0; i < kLayers; ++i) {
      blocks.push_back(std::make_unique<nn::TransformerEncoderLayer>(kDims, kHeads, 4 * kDims, 0.0, nn::gelu));
      if (tp) blocks.back()->shard(*tp);
      register_module("blocks." + std::to_string(i), *blocks.back());
    }
    register_module("norm", norm);
  }
  void fully_shard() {
    for (auto& b : blocks) sharded_blocks.push_back(nn::fully_shard(*b));
    sharded_rest = nn::fully_shard(*this);
  }
  array loss(const array& tokens, const array& targets) {
    auto body = [&] {
      array h = embed(tokens);
      for (size_t i = 0; i < blocks.size(); ++i) {
        const nn::TransformerEncoderLayer& b = *blocks[i];
        if (sharded_blocks.empty()) {
          h = b(h);
        } else if (checkpointed) {
          h = sharded_blocks[i]->checkpoint([&b](const std::vector<array>& in) { return std::vector<array>{b(in[0])}; }, {h})[0];
        } else {
          h = (*sharded_blocks[i])([&] { return b(h); });
        }
      }
      return nn::losses::cross_entropy(embed.as_linear(norm(h)), targets, "mean");
    };
    return sharded_rest ? (*sharded_rest)(body) : body();
  }
};

void run(const std::string& mode, const distributed::Group& world, int warmup, int reps) {
  const bool mesh2d = mode == "tp2_dp", tp = mode == "tensor_parallel" || mesh2d;
  std::optional<distributed::Mesh> mesh;
  if (mesh2d) mesh.emplace(std::vector<std::pair<std::string, int>>{{"dp", -1}, {"tp", 2}}, world);
  const distributed::Group tp_group = mesh ? mesh->group("tp") : world;
  random::seed(1);
  LM model(tp ? std::optional<distributed::Group>(tp_group) : std::nullopt);
  if (mode == "fully_sharded" || mode == "fully_sharded_checkpoint") model.fully_shard();
  model.checkpointed = mode == "fully_sharded_checkpoint";
  optim::AdamW opt(1e-3);
  if (mode == "zero1" || mode == "zero2") opt.shard_state(world, mode == "zero1" ? 1 : 2);
  // Data-parallel modes read a batch of their own; the tensor-parallel ranks share one.
  const uint64_t data_key = mesh ? static_cast<uint64_t>(mesh->coordinate("dp")) : tp ? 0 : static_cast<uint64_t>(world.rank());
  const array tokens = random::randint(0, kVocab, {kBatch, kTokens + 1}, int32, random::key(100 + data_key));
  const array x = slice(tokens, {0, 0}, {kBatch, kTokens}), y = slice(tokens, {0, 1}, {kBatch, kTokens + 1});
  eval(x, y);
  auto step = nn::value_and_grad(model, [&](const array& a, const array& b) { return model.loss(a, b); });
  const array token = full({1}, 1.0f);
  std::vector<double> ms;
  double peak = 0, state = 0;
  for (int r = 0; r < warmup + reps; ++r) {
    eval(distributed::all_sum(token, world));  // a barrier: every rank starts the step together
    clear_cache();
    reset_peak_memory();
    const double t0 = bench::now_ms();
    auto [loss, grads] = step(x, y);
    if (mode == "replicated") grads = nn::average_gradients(grads, 32 << 20, std::nullopt, world);
    if (mesh) grads = nn::average_gradients(grads, 32 << 20, std::nullopt, mesh->group("dp"));
    opt.update(model, grads);
    eval(loss, grads, model.parameters(), opt.state());
    const double t = bench::now_ms() - t0;
    if (r >= warmup) {
      ms.push_back(t);
      peak = std::max(peak, static_cast<double>(get_peak_memory()) / (1 << 20));
      // The gradients a rank holds once they are averaged: all of them, or its slice (zero2, whose
      // reduce-scatter hands each rank only its slice; fully_sharded's are slices already).
      const double held_grads = bench::megabytes(grads) / (mode == "zero2" ? world.size() : 1);
      state = bench::megabytes(model.parameters()) + held_grads + bench::megabytes(opt.state());
    }
  }
  array times(ms, {static_cast<int>(ms.size())}, float64);
  const double median = bench::median(distributed::all_max(times, world).to_vector<double>());
  state = bench::largest(state, world);
  peak = bench::largest(peak, world);
  if (world.rank() == 0) {
    std::printf("{\"bench\":\"sharded\",\"mode\":\"%s\",\"ranks\":%d,\"state_mb\":%.2f,\"peak_mb\":%.2f,\"median_ms\":%.2f,\"n\":%d}\n",
                mode.c_str(), world.size(), state, peak, median, reps);
    std::fflush(stdout);
  }
}

}  // namespace

int main() {
  auto world = distributed::init();
  const int warmup = 3, reps = bench::quick() ? 5 : 20;
  for (const char* mode : {"replicated", "zero1", "zero2", "fully_sharded", "fully_sharded_checkpoint", "tensor_parallel"}) {
    run(mode, world, warmup, reps);
  }
  if (world.size() >= 4 && world.size() % 2 == 0) run("tp2_dp", world, warmup, reps);
}

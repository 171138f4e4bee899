// Fully sharded data parallelism (nn::fully_shard): alone and under mpirun -np 2 / 3 / 4, each rank
// holds 1/N of every parameter, and training on each rank's share of the batch equals one process
// training the unsharded model on the whole batch.
#include <unistd.h>

#include <cstdio>
#include <string>

#include "../test_utils.h"
#include "loom/core/allocator.h"
#include "loom/nn/distributed.h"
#include "loom/nn/linear.h"
#include "loom/nn/normalization.h"
#include "loom/ops/ops.h"
#include "loom/ops/random.h"
#include "loom/optim/checkpoint.h"
#include "loom/optim/optimizers.h"

using namespace loom;
namespace dist = loom::distributed;

namespace {

struct FsdpNet : nn::Module {
  nn::Linear l1{6, 12}, l2{12, 12};  // every axis 0 splits among 1 to 4 ranks
  nn::LayerNorm ln{12};
  FsdpNet() {
    register_module("l1", l1);
    register_module("ln", ln);
    register_module("l2", l2);
  }
  array operator()(const array& x) const { return l2(tanh(ln(l1(x)))); }
};

// 20 AdamW steps on rows [first, first + rows); `mode` 0: plain, 1: the whole model fully sharded,
// 2: each linear layer sharded by itself and the rest (the norm) by the model's handle, 3: as 2 with the
// layers called through FullyShardedModule::checkpoint. With a `mesh` (mode 1 only): HSDP, the model
// sharded over its "shard" axis and the gradient slices averaged over its "replicate" axis. With
// `checkpoint`, the trained run is written there: by save_checkpoint (plain), or gathered by the ranks
// of replicate coordinate 0 (HSDP).
nn::ParamTree train_fsdp(int first, int rows, int mode, std::optional<Dtype> compute = std::nullopt,
                         const dist::Mesh* mesh = nullptr, const std::string* checkpoint = nullptr) {
  const dist::Group shard_group = mesh ? mesh->group("shard") : dist::init();
  random::seed(42);
  FsdpNet model;
  const array X = random::normal({96, 6}, random::key(7)), Y = random::normal({96, 12}, random::key(8));
  std::shared_ptr<nn::FullyShardedModule> f1, f2, whole;
  if (mode >= 2) {
    f1 = nn::fully_shard(model.l1, std::nullopt, compute);
    f2 = nn::fully_shard(model.l2, std::nullopt, compute);
  }
  if (mode) whole = nn::fully_shard(model, shard_group, compute);
  if (mode >= 2 && dist::init().size() > 1) {
    EXPECT_EQ(whole->paths(), (std::vector<std::string>{"ln.weight", "ln.bias"}));  // the layers' are theirs
  }
  optim::AdamW opt(1e-2);
  auto forward = [&](const array& x) {
    if (mode == 2) {
      return (*whole)([&] {
        const array h = tanh(model.ln((*f1)([&] { return model.l1(x); })));
        return (*f2)([&] { return model.l2(h); });
      });
    }
    if (mode == 3) {
      return (*whole)([&] {
        auto l1 = [&](const std::vector<array>& in) { return std::vector<array>{model.l1(in[0])}; };
        auto l2 = [&](const std::vector<array>& in) { return std::vector<array>{model.l2(in[0])}; };
        const array h = tanh(model.ln(f1->checkpoint(l1, {x})[0]));
        return f2->checkpoint(l2, {h})[0];
      });
    }
    return mode ? (*whole)([&] { return model(x); }) : model(x);
  };
  auto step = nn::value_and_grad(model, [&](const array& x, const array& y) { return mean(square(forward(x) - y)); });
  for (int s = 0; s < 20; ++s) {
    auto [loss, grads] = step(slice(X, {first, 0}, {first + rows, 6}), slice(Y, {first, 0}, {first + rows, 12}));
    opt.update(model, mesh ? nn::average_gradients(grads, 32 << 20, std::nullopt, mesh->group("replicate")) : grads);
    eval(loss, model.parameters(), opt.state());
  }
  if (checkpoint && !mode) optim::save_checkpoint(*checkpoint, model, opt);
  if (checkpoint && mode) {
    if (mesh->coordinate("replicate") == 0) optim::save_gathered_checkpoint(*checkpoint, model, opt, shard_group);
    dist::barrier();
  }
  // This rank holds 1/N of each parameter; gathered, they are the whole parameters.
  nn::ParamTree out;
  const int n = mode ? shard_group.size() : 1;
  for (auto [name, p] : model.parameters()) {
    EXPECT_EQ(p.shape(0) * n, 12) << name;
    out.insert(name, n > 1 ? dist::all_gather(p, shard_group) : p);
  }
  return out;
}

void expect_same(nn::ParamTree got, nn::ParamTree want, double tol) {
  ASSERT_EQ(got.size(), want.size());
  for (auto [name, p] : want) {
    SCOPED_TRACE(name);
    const std::vector<double> w = astype(p, float64).to_vector<double>();
    const std::vector<double> g = astype(got.at(name), float64).to_vector<double>();
    ASSERT_EQ(g.size(), w.size());
    for (size_t i = 0; i < g.size(); ++i) ASSERT_NEAR(g[i], w[i], tol) << "[" << i << "]";
  }
}

}  // namespace

TEST(FullyShard, TrainingEqualsOneProcessOnTheWholeBatch) {
  auto g = dist::init();
  const int n = g.size(), per_rank = 48 / n, r = g.rank();
  const nn::ParamTree plain = train_fsdp(0, 48, 0);
  expect_same(train_fsdp(r * per_rank, per_rank, 1), plain, 1e-5);
  expect_same(train_fsdp(r * per_rank, per_rank, 2), plain, 1e-5);
  expect_same(train_fsdp(r * per_rank, per_rank, 3), plain, 1e-5);
  // bfloat16 compute: the same training to bfloat16's precision.
  expect_same(train_fsdp(r * per_rank, per_rank, 1, bfloat16), plain, 5e-2);
}

// HSDP (PyTorch's 2-D fully_shard): sharded inside the "shard" axis of a mesh, replicated across its
// "replicate" axis; every factorization of the world trains as one process on the whole batch.
TEST(FullyShard, HybridShardingOverAMeshEqualsOneProcess) {
  auto g = dist::init();
  const int n = g.size(), per_rank = 48 / n, r = g.rank();
  const array pid({static_cast<int>(r == 0 ? ::getpid() : 0)});
  const std::string stem = ::testing::TempDir() + "loom_hsdp_" + std::to_string(dist::all_max(pid, g).item<int>());
  const std::string one = stem + "_one.ckpt";  // every rank writes its own copy of the plain run
  const std::string one_mine = one + std::to_string(r);
  const nn::ParamTree plain = train_fsdp(0, 48, 0, std::nullopt, nullptr, &one_mine);
  for (int replicas = 1; replicas <= n; ++replicas) {
    if (n % replicas != 0) continue;
    SCOPED_TRACE("replicate " + std::to_string(replicas) + " x shard " + std::to_string(n / replicas));
    const dist::Mesh mesh({{"replicate", replicas}, {"shard", n / replicas}});
    const std::string gathered = stem + "_" + std::to_string(replicas) + ".ckpt";
    expect_same(train_fsdp(r * per_rank, per_rank, 1, std::nullopt, &mesh, &gathered), plain, 1e-5);
    // The gathered checkpoint is the one-process run's: parameters and AdamW state.
    FsdpNet a, b;
    optim::AdamW opt_a(1e-2), opt_b(1e-2);
    optim::load_checkpoint(one_mine, a, opt_a);
    optim::load_checkpoint(gathered, b, opt_b);
    expect_same(b.parameters(), a.parameters(), 1e-5);
    expect_same(opt_b.state(), opt_a.state(), 1e-5);
    dist::barrier();  // every rank has read it
    if (r == 0) std::remove(gathered.c_str());
  }
  std::remove(one_mine.c_str());
}

// checkpoint() frees each layer's gathered parameters after its forward pass and gathers them again
// for its backward pass, one layer ahead: over a step of 6 wide layers it holds at most two layers'
// full weights, where operator() holds all six from the forward pass to their backward.
TEST(FullyShard, CheckpointHoldsTwoLayersAtATime) {
  auto g = dist::init();
  const int n = g.size(), d = 240, layers = 6;  // 240 rows split among 1 to 4 ranks
  random::seed(1);
  struct Stack : nn::Module {
    std::vector<std::unique_ptr<nn::Linear>> layers;
    Stack(int n, int d) {
      for (int i = 0; i < n; ++i) {
        layers.push_back(std::make_unique<nn::Linear>(d, d, false));
        register_module("l" + std::to_string(i), *layers.back());
      }
    }
  } model(layers, d);
  auto& stack = model.layers;
  std::vector<std::shared_ptr<nn::FullyShardedModule>> handles;
  for (auto& l : stack) handles.push_back(nn::fully_shard(*l, g));
  const array x = random::normal({8, d}, random::key(3));
  auto peak_of = [&](bool ckpt) {
    auto loss = [&](const array& in) {
      array h = in;
      for (int i = 0; i < layers; ++i) {
        const nn::Linear& l = *stack[i];
        auto f = [&l](const std::vector<array>& v) { return std::vector<array>{tanh(l(v[0]))}; };
        h = ckpt ? handles[i]->checkpoint(f, {h})[0] : (*handles[i])([&] { return f({h})[0]; });
      }
      return sum(h);
    };
    auto [l, grads] = nn::value_and_grad(model, loss)(x);
    eval(x);
    const size_t before = get_active_memory();
    reset_peak_memory();
    eval(l, grads);
    return std::make_pair(get_peak_memory() - before, std::make_pair(l.item<float>(), grads));
  };
  auto [plain_peak, plain] = peak_of(false);
  auto [ckpt_peak, ckpt] = peak_of(true);
  EXPECT_NEAR(ckpt.first, plain.first, 1e-5 * std::fabs(plain.first));
  for (auto [name, gr] : plain.second) {
    SCOPED_TRACE(name);
    expect_same({{name, ckpt.second.at(name)}}, {{name, gr}}, 1e-6);
  }
  if (n == 1) return;  // nothing is gathered
  // One layer's full weight, as the allocator counts it (its size class).
  const size_t free_before = get_active_memory();
  array probe = zeros({d, d});
  eval(probe);
  const double weight = double(get_active_memory() - free_before);
  EXPECT_GE(double(plain_peak), layers * weight) << "operator() holds every gathered weight";
  // Two gathered weights, the whole gradients of one or two layers before their reduce-scatter (two
  // when collectives run on the communication thread: one may wait there to be sent), and the slices
  // of the gradients so far.
  EXPECT_LE(double(ckpt_peak), 4.25 * weight + layers * weight / n) << "checkpoint: " << ckpt_peak
                                                                    << " bytes at peak, operator(): " << plain_peak;
}

// checkpoint() without a function; fully_shard of a parameter split already (tensor parallel); a
// gathered checkpoint asked of a group its parameters are not split across.
TEST(FullyShard, CheckpointSplitsAndGatherBadInput) {
  auto g = dist::init();
  const int n = g.size();
  nn::Linear a(4, 2 * n);
  auto fs = nn::fully_shard(a, g);
  EXPECT_THROW_MSG(fs->checkpoint(nullptr, {}), std::invalid_argument, "the function is empty");
  if (n == 1) return;
  nn::Linear b(4, 2 * n);
  nn::shard_inplace(b, "all-to-sharded", 1, g);
  EXPECT_THROW_MSG(nn::fully_shard(b, g), std::invalid_argument, "is split across ranks already");
  const dist::Group alone = g.split(g.rank());
  optim::SGD opt(0.1);
  EXPECT_THROW_MSG(optim::save_gathered_checkpoint("/nonexistent/never-written", b, opt, alone), std::invalid_argument,
                   "is split across a group of");
}

TEST(FullyShard, WhatIsShardedAndBadInput) {
  auto g = dist::init();
  const int n = g.size();
  nn::BatchNorm bn(12);
  auto fs = nn::fully_shard(bn);
  if (n == 1) {
    EXPECT_TRUE(fs->paths().empty());  // nothing to shard alone
  } else {
    EXPECT_EQ(fs->paths(), (std::vector<std::string>{"weight", "bias"}));  // not the running statistics
    EXPECT_EQ(bn.weight->shape(), (Shape{12 / n}));
    EXPECT_EQ(bn.running_mean->shape(), (Shape{12}));
  }
  // The full parameters are in place inside the call only.
  const array y = (*fs)([&] {
    EXPECT_EQ(bn.weight->shape(), (Shape{12}));
    return sum(*bn.weight);
  });
  EXPECT_FLOAT_EQ(y.item<float>(), 12.0f);
  EXPECT_EQ(bn.weight->shape(), (Shape{12 / n}));
  EXPECT_THROW_MSG(nn::fully_shard(bn), std::invalid_argument, "already fully sharded");
  if (n > 1) {
    nn::Linear odd(4, n + 1);
    EXPECT_THROW_MSG(nn::fully_shard(odd), std::invalid_argument,
                     "cannot shard parameter 'weight' of shape (" + std::to_string(n + 1) + ",4)");
  }
  nn::Linear l(4, 4);
  EXPECT_THROW_MSG(nn::fully_shard(l, std::nullopt, int32), std::invalid_argument, "compute_dtype must be floating point");
}

// A fully sharded run's checkpoint resumes it exactly; its gathered checkpoint holds the whole
// parameters and optimizer state, which an unsharded 1-rank run loads.
TEST(FullyShard, CheckpointsResumeExactlyAndGatherForOneRank) {
  auto g = dist::init();
  const int n = g.size(), r = g.rank(), rows = 48 / n;
  array pid({static_cast<int>(r == 0 ? getpid() : 0)});
  const std::string path = ::testing::TempDir() + "loom_fsdp_" + std::to_string(dist::all_max(pid, g).item<int>());
  const array X = random::normal({48, 6}, random::key(7)), Y = random::normal({48, 12}, random::key(8));
  const array x = slice(X, {r * rows, 0}, {(r + 1) * rows, 6}), y = slice(Y, {r * rows, 0}, {(r + 1) * rows, 12});
  auto steps = [&](FsdpNet& m, nn::FullyShardedModule& fs, optim::Optimizer& opt, int k) {
    auto vg = nn::value_and_grad(m, [&](const array& a, const array& b) { return fs([&] { return mean(square(m(a) - b)); }); });
    for (int s = 0; s < k; ++s) {
      auto [loss, grads] = vg(x, y);
      opt.update(m, grads);
      eval(loss, m.parameters(), opt.state());
    }
  };
  random::seed(42);
  FsdpNet model;
  auto fs = nn::fully_shard(model);
  optim::AdamW opt(1e-2);
  steps(model, *fs, opt, 3);
  optim::save_sharded_checkpoint(path, model, opt, g);
  optim::save_gathered_checkpoint(path + ".full", model, opt, g);
  nn::ParamTree whole_at_save;
  for (auto [name, p] : model.parameters()) whole_at_save.insert(name, n > 1 ? dist::all_gather(p, g) : p);
  eval(whole_at_save);
  steps(model, *fs, opt, 3);

  random::seed(9);
  FsdpNet resumed;
  auto fs2 = nn::fully_shard(resumed);
  optim::AdamW opt2(1e-2);
  optim::load_sharded_checkpoint(path, resumed, opt2, g);
  steps(resumed, *fs2, opt2, 3);
  for (auto [name, p] : model.parameters()) {
    EXPECT_EQ(p.to_vector<float>(), resumed.parameters().at(name).to_vector<float>()) << name;
  }
  FsdpNet one;
  optim::AdamW plain(1e-2);
  optim::load_checkpoint(path + ".full", one, plain);
  for (auto [name, p] : whole_at_save) EXPECT_EQ(one.parameters().at(name).to_vector<float>(), p.to_vector<float>()) << name;
  EXPECT_EQ(plain.state().at("l1.weight.m").shape(), (Shape{12, 6}));
  eval(dist::all_sum(array(1.0f), g));
  std::remove((path + ".rank" + std::to_string(r) + "-of-" + std::to_string(n)).c_str());
  if (r == 0) std::remove((path + ".full").c_str());
}

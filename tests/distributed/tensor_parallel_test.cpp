// Tensor-parallel layers (nn/distributed.h): alone and under mpirun -np 2 / 3 / 4, a model split
// among the ranks computes the unsplit model's loss and, on each rank, the unsplit gradients of the
// slices it holds; trained with AdamW it follows the unsplit model step for step.
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <functional>
#include <memory>
#include <string>

#include "../test_utils.h"
#include "loom/nn/activations.h"
#include "loom/nn/distributed.h"
#include "loom/nn/normalization.h"
#include "loom/nn/transformer.h"
#include "loom/ops/ops.h"
#include "loom/ops/random.h"
#include "loom/optim/checkpoint.h"
#include "loom/optim/optimizers.h"

using namespace loom;
using loom::testing::expect_array;
namespace dist = loom::distributed;

namespace {

std::vector<double> values_of(const array& a) {
  array f = astype(a, float64);
  eval(f);
  return std::vector<double>(f.data<double>(), f.data<double>() + f.size());
}

void expect_close(const array& got, const array& want, double tol, const std::string& what) {
  ASSERT_EQ(got.shape(), want.shape()) << what;
  expect_array(got, want.shape(), values_of(want), tol);
}

// 20 AdamW steps of the unsplit and the split model: the same loss at every step, and then the split
// parameters are the unsplit ones' slices.
template <class Model, class FullStep, class SplitStep>
void expect_trains_alike(Model& full, Model& split, FullStep& vg_full, SplitStep& vg_split, optim::AdamW& opt_full,
                         optim::AdamW& opt_split, const nn::ShardingFn& rule, const dist::Group& g) {
  for (int step = 0; step < 20; ++step) {
    auto [lf, gf] = vg_full();
    opt_full.update(full, gf);
    auto [ls, gs] = vg_split();
    opt_split.update(split, gs);
    eval(lf, ls, full.parameters(), split.parameters(), opt_full.state(), opt_split.state());
    const float want = array(lf).item<float>(), got = array(ls).item<float>();
    EXPECT_NEAR(got, want, 1e-5 * std::max(1.0f, std::fabs(want))) << "step " << step;
  }
  const nn::ParamTree trained = nn::shard(full.parameters(), rule, g);
  for (const auto& [name, p] : split.parameters()) {
    SCOPED_TRACE(name);
    expect_close(p, trained.at(name), 1e-4, name);
  }
}

// A file name in the temporary directory, the same on every rank (rank 0's process id).
std::string shared_path(const std::string& stem, const dist::Group& g) {
  const array pid({static_cast<int>(g.rank() == 0 ? ::getpid() : 0)});
  return ::testing::TempDir() + stem + "_" + std::to_string(dist::all_max(pid, g).item<int>()) + ".ckpt";
}

}  // namespace

// shard: every part of the axis is split among the ranks on its own (a fused QKV weight of 3 parts
// gives rank r the r-th slice of each), by count, indices or fractions.
TEST(TensorParallel, ShardSplitsEachPart) {
  auto g = dist::init();
  const int n = g.size(), r = g.rank();
  // Rows of w: value = row index. 3 parts of 2n rows each.
  const array w = broadcast_to(reshape(arange(0.0, 6.0 * n, 1.0, float32), {6 * n, 1}), {6 * n, 2});
  const nn::ParamTree tree{{"qkv.weight", w}, {"qkv.bias", arange(0.0, 6.0 * n, 1.0, float32)}};
  std::vector<double> rows;
  for (int part = 0; part < 3; ++part) {
    for (int i = 0; i < 2; ++i) rows.push_back(part * 2 * n + 2 * r + i);
  }
  std::vector<double> want_w;
  for (double v : rows) want_w.insert(want_w.end(), {v, v});
  nn::ParamTree s = nn::shard(tree, nn::sharding_rule("all-to-sharded", 3), g);
  expect_array(s.at("qkv.weight"), {6, 2}, want_w);
  expect_array(s.at("qkv.bias"), {6}, rows);
  EXPECT_TRUE(s.at("qkv.weight").flags().row_contiguous);
  // The same parts given by their end indices, and by fractions of the axis.
  for (const nn::Segments& seg : {nn::Segments::at({2 * n, 4 * n}), nn::Segments::fractions({1.0 / 3, 2.0 / 3})}) {
    expect_array(nn::shard(tree, nn::sharding_rule("all-to-sharded", seg), g).at("qkv.bias"), {6}, rows);
  }
  // sharded-to-all: a weight's last axis; the bias stays whole.
  const array cols = broadcast_to(arange(0.0, 2.0 * n, 1.0, float32), {3, 2 * n});
  nn::ParamTree t = nn::shard({{"o.weight", cols}, {"o.bias", ones({3})}}, nn::sharding_rule("sharded-to-all"), g);
  expect_array(t.at("o.weight"), {3, 2}, {2.0 * r, 2.0 * r + 1, 2.0 * r, 2.0 * r + 1, 2.0 * r, 2.0 * r + 1});
  expect_array(t.at("o.bias"), {3}, {1, 1, 1});
  EXPECT_THROW_MSG(nn::sharding_rule("rows"), std::invalid_argument, "sharding 'rows' is not supported");
  if (n > 1) {
    EXPECT_THROW_MSG(nn::shard({{"w", ones({2 * n + 1, 2})}}, nn::sharding_rule("all-to-sharded"), g),
                     std::invalid_argument, "'w' of shape (" + std::to_string(2 * n + 1) + ",2)");
    EXPECT_THROW_MSG(nn::AllToShardedLinear(4, n + 1, true, g), std::invalid_argument,
                     "[nn::AllToShardedLinear] cannot split output_dims");
    EXPECT_THROW_MSG(nn::ShardedToAllLinear(n + 1, 4, true, g), std::invalid_argument,
                     "[nn::ShardedToAllLinear] cannot split input_dims");
  }
  EXPECT_THROW_MSG(nn::Segments(0), std::invalid_argument, "positive");
  EXPECT_THROW_MSG(nn::Segments::fractions({0.5, 0.25}), std::invalid_argument, "increase");
}

// A layer made on every rank at the same point of the random stream equals the slice of the Linear
// made there; shard_inplace gives a module its rank's slices.
TEST(TensorParallel, LayersAreSlicesOfTheUnsplitLinear) {
  auto g = dist::init();
  const int n = g.size(), r = g.rank(), k = 12 / n;  // 12 splits among 1 to 4 ranks
  random::seed(7);
  nn::Linear full(12, 12);
  random::seed(7);
  nn::AllToShardedLinear cols(12, 12, true, g);
  expect_close(cols.weight, slice(full.weight, {r * k, 0}, {(r + 1) * k, 12}), 0, "weight");
  expect_close(*cols.bias, slice(*full.bias, {r * k}, {(r + 1) * k}), 0, "bias");
  const array x = reshape(arange(0.0, 24.0, 1.0, float32), {2, 12}) * 0.1f;
  expect_close(cols(x), slice(full(x), {0, r * k}, {2, (r + 1) * k}), 1e-6, "output");
  auto rows = std::dynamic_pointer_cast<nn::ShardedToAllLinear>(nn::shard_linear(full, "sharded-to-all", 1, g));
  ASSERT_TRUE(rows);
  expect_close(rows->weight, slice(full.weight, {0, r * k}, {12, (r + 1) * k}), 0, "rows weight");
  expect_close(*rows->bias, *full.bias, 0, "rows bias");
  expect_close((*rows)(slice(x, {0, r * k}, {2, (r + 1) * k})), full(x), 1e-5, "rows output");
  // A pair: columns then rows is the unsplit pair.
  nn::Linear second(12, 5);
  auto pair_rows = nn::shard_linear(second, "sharded-to-all", 1, g);
  auto cols2 = nn::AllToShardedLinear::from_linear(full, 1, g);
  expect_close(dynamic_cast<nn::ShardedToAllLinear&>(*pair_rows)((*cols2)(x)), second(full(x)), 1e-5, "pair");
  nn::Linear inplace(12, 12);
  nn::Linear copy(12, 12);
  copy.update(inplace.parameters());
  nn::shard_inplace(inplace, "all-to-sharded", 1, g);
  expect_close(inplace.weight, slice(copy.weight, {r * k, 0}, {(r + 1) * k, 12}), 0, "in place");
  EXPECT_EQ(inplace.bias->shape(), (Shape{k}));
  EXPECT_THROW_MSG(nn::shard_linear(nn::LayerNorm(4), "all-to-sharded"), std::invalid_argument,
                   "expects an nn::Linear or nn::QuantizedLinear");
}

// The quantized layers hold the slices of a QuantizedLinear and compute its output (pair: the whole).
TEST(TensorParallel, QuantizedLayers) {
  auto g = dist::init();
  const int n = g.size(), r = g.rank();
  random::seed(5);
  nn::Linear a(64 * 12, 12), b(64, 12);  // a's input: 12 groups of 64 split among 1 to 4 ranks
  auto qa = nn::QuantizedLinear::from_linear(a), qb = nn::QuantizedLinear::from_linear(b);
  auto rows = std::dynamic_pointer_cast<nn::QuantizedShardedToAllLinear>(nn::shard_linear(*qa, "sharded-to-all", 1, g));
  auto cols = std::dynamic_pointer_cast<nn::QuantizedAllToShardedLinear>(nn::shard_linear(*qb, "all-to-sharded", 1, g));
  ASSERT_TRUE(rows && cols);
  EXPECT_TRUE(rows->trainable_parameters().empty());
  const int in = 64 * 12 / n, out = 12 / n;
  const array x = random::normal({3, 64 * 12});
  expect_close((*rows)(slice(x, {0, r * in}, {3, (r + 1) * in})), (*qa)(x), 1e-4, "rows");
  const array h = random::normal({3, 64});
  expect_close((*cols)(h), slice((*qb)(h), {0, r * out}, {3, (r + 1) * out}), 1e-5, "cols");
}

namespace {

// A pre-norm transformer block: attention with `heads` heads over `dims` features, then a GELU MLP of
// 2 * dims. Its six projections are Linear (unsplit) or the tensor-parallel layers: heads and MLP
// columns split (all-to-sharded), output projections summed (sharded-to-all).
struct Block : nn::Module {
  nn::LayerNorm ln1, ln2;
  std::shared_ptr<nn::Module> q, k, v, o, fc1, fc2;
  int heads, head_dim;

  Block(int dims, int heads_, std::optional<dist::Group> tp) : ln1(dims), ln2(dims), heads(heads_), head_dim(dims / heads_) {
    // Every rank builds the unsplit projections from the same seed; the split block shards them.
    // The key projection has no bias: softmax ignores it (its gradient is rounding noise, which Adam
    // would turn into steps of full size).
    std::shared_ptr<nn::Linear> lin[6] = {std::make_shared<nn::Linear>(dims, dims), std::make_shared<nn::Linear>(dims, dims, false),
                                          std::make_shared<nn::Linear>(dims, dims), std::make_shared<nn::Linear>(dims, dims),
                                          std::make_shared<nn::Linear>(dims, 2 * dims),
                                          std::make_shared<nn::Linear>(2 * dims, dims)};
    std::shared_ptr<nn::Module>* slot[6] = {&q, &k, &v, &o, &fc1, &fc2};
    for (int i = 0; i < 6; ++i) {
      const bool to_sharded = i == 0 || i == 1 || i == 2 || i == 4;
      *slot[i] = tp ? nn::shard_linear(*lin[i], to_sharded ? "all-to-sharded" : "sharded-to-all", 1, tp) : lin[i];
    }
    if (tp) heads /= tp->size();
    register_module("ln1", ln1);
    register_module("q", *q);
    register_module("k", *k);
    register_module("v", *v);
    register_module("o", *o);
    register_module("ln2", ln2);
    register_module("fc1", *fc1);
    register_module("fc2", *fc2);
  }

  static array call(const nn::Module& m, const array& x) {
    if (auto* l = dynamic_cast<const nn::Linear*>(&m)) return (*l)(x);
    if (auto* l = dynamic_cast<const nn::AllToShardedLinear*>(&m)) return (*l)(x);
    return dynamic_cast<const nn::ShardedToAllLinear&>(m)(x);
  }

  array operator()(const array& x) const {
    const int b = x.shape(0), t = x.shape(1);
    const array h = ln1(x);
    auto split_heads = [&](const array& y) { return transpose(reshape(y, {b, t, heads, head_dim}), {0, 2, 1, 3}); };
    const array qh = split_heads(call(*q, h)), kh = split_heads(call(*k, h)), vh = split_heads(call(*v, h));
    const array att = softmax(matmul(qh, transpose(kh, {0, 1, 3, 2})) * float(1.0 / std::sqrt(head_dim)), -1);
    const array ctx = reshape(transpose(matmul(att, vh), {0, 2, 1, 3}), {b, t, heads * head_dim});
    const array x1 = x + call(*o, ctx);
    return x1 + call(*fc2, nn::gelu(call(*fc1, ln2(x1))));
  }
};

}  // namespace

// How Block's layers split: q, k, v and fc1 by output features, o and fc2 by input features.
static nn::ShardingFn block_rule() {
  return [](const std::string& path, const array& w) -> std::optional<std::pair<int, nn::Segments>> {
    const std::string layer = path.substr(0, path.find('.'));
    if (layer == "q" || layer == "k" || layer == "v" || layer == "fc1") return nn::sharding_rule("all-to-sharded")(path, w);
    if (layer == "o" || layer == "fc2") return nn::sharding_rule("sharded-to-all")(path, w);
    return std::nullopt;
  };
}

// The split block's loss is the unsplit block's; each rank's gradients are the unsplit gradients'
// slices (and the whole gradient of the replicated norms); 20 AdamW steps follow the unsplit run to 1e-5.
TEST(TensorParallel, TransformerBlockTrainsAsTheUnsplitBlock) {
  auto g = dist::init();
  const int dims = 24, heads = 12;  // 12 heads and 48 MLP columns split among 1 to 4 ranks
  random::seed(11);
  Block full(dims, heads, std::nullopt);
  random::seed(11);
  Block split(dims, heads, g);
  random::seed(3);
  const array x = random::normal({2, 5, dims}), target = random::normal({2, 5, dims});
  auto loss_fn = [&](Block& m) { return [&m, &x, &target]() { return mean(square(m(x) - target)); }; };
  auto vg_full = nn::value_and_grad(full, loss_fn(full));
  auto vg_split = nn::value_and_grad(split, loss_fn(split));

  // The unsplit gradients sharded by each layer's rule are the split block's.
  auto [l0, g0] = vg_full();
  auto [l1, g1] = vg_split();
  EXPECT_NEAR(l1.item<float>(), l0.item<float>(), 1e-5 * std::fabs(l0.item<float>()));
  const nn::ShardingFn rule = block_rule();
  const nn::ParamTree want = nn::shard(g0, rule, g);
  ASSERT_EQ(want.size(), g1.size());
  for (const auto& [name, grad] : g1) {
    SCOPED_TRACE(name);
    expect_close(grad, want.at(name), 2e-5, name);
  }

  optim::AdamW opt_full(1e-2), opt_split(1e-2);
  expect_trains_alike(full, split, vg_full, vg_split, opt_full, opt_split, rule, g);
}

// A 2-D mesh, tensor parallel inside "tp" and data parallel across "dp" (each dp coordinate takes its
// share of the global batch, the gradients averaged over dp only): every factorization of the world
// trains the block as one process does on the whole batch, step for step, and ends with the unsplit
// parameters' slices, which a gathered checkpoint puts back together.
TEST(TensorParallel, TwoDimensionalMeshTrainsAsTheOneProcessModel) {
  auto g = dist::init();
  const int n = g.size(), dims = 24, heads = 12, batch = 12;  // heads and batch divide among 1 to 4
  for (int dp = 1; dp <= n; ++dp) {
    if (n % dp != 0) continue;
    const dist::Mesh mesh({{"dp", dp}, {"tp", n / dp}});
    SCOPED_TRACE("dp " + std::to_string(dp) + " x tp " + std::to_string(n / dp));
    random::seed(11);
    Block full(dims, heads, std::nullopt);
    random::seed(11);
    Block split(dims, heads, mesh.group("tp"));
    random::seed(3);
    const array x = random::normal({batch, 5, dims}), target = random::normal({batch, 5, dims});
    const int per = batch / dp, d = mesh.coordinate("dp");
    const array xs = slice(x, {d * per, 0, 0}, {(d + 1) * per, 5, dims});
    const array ts = slice(target, {d * per, 0, 0}, {(d + 1) * per, 5, dims});
    auto vg_full = nn::value_and_grad(full, [&]() { return mean(square(full(x) - target)); });
    auto vg_split = nn::value_and_grad(split, [&]() { return mean(square(split(xs) - ts)); });
    optim::AdamW opt_full(1e-2), opt_split(1e-2);
    for (int step = 0; step < 10; ++step) {
      auto [lf, gf] = vg_full();
      opt_full.update(full, gf);
      auto [ls, gs] = vg_split();
      opt_split.update(split, nn::average_gradients(gs, 32 << 20, std::nullopt, mesh.group("dp")));
      const array loss = dist::all_mean(ls, mesh.group("dp"));
      eval(lf, loss, full.parameters(), split.parameters(), opt_full.state(), opt_split.state());
      const float want = lf.item<float>();
      EXPECT_NEAR(loss.item<float>(), want, 1e-5 * std::max(1.0f, std::fabs(want))) << "step " << step;
    }
    const nn::ParamTree trained = nn::shard(full.parameters(), block_rule(), mesh.group("tp"));
    for (const auto& [name, p] : split.parameters()) {
      SCOPED_TRACE(name);
      expect_close(p, trained.at(name), 1e-4, name);
    }
    // The gathered checkpoint, written by the tp group of dp coordinate 0 (the others hold the same
    // slices), is the one-process run's: parameters and AdamW state.
    const std::string path = shared_path("loom_mesh_dp" + std::to_string(dp), g);
    if (mesh.coordinate("dp") == 0) optim::save_gathered_checkpoint(path, split, opt_split, mesh.group("tp"));
    dist::barrier();
    random::seed(99);
    Block loaded(dims, heads, std::nullopt);
    optim::AdamW opt_loaded(1e-2);
    optim::load_checkpoint(path, loaded, opt_loaded);
    for (const auto& [name, p] : full.parameters()) {
      SCOPED_TRACE(name);
      expect_close(loaded.parameters().at(name), p, 1e-4, name);
    }
    for (const auto& [key, a] : opt_full.state()) {
      SCOPED_TRACE(key);
      expect_close(opt_loaded.state().at(key), a, 1e-4, key);
    }
    dist::barrier();  // every rank has read it
    if (g.rank() == 0) std::remove(path.c_str());
  }
}

// nn::TransformerEncoder split by shard(): heads and MLP columns across the ranks, a causal mask, and
// dropout, whose split masks are the unsplit ones' columns. Losses, gradient slices and 20 AdamW steps
// match the unsplit encoder's.
TEST(TensorParallel, TransformerEncoderShardTrainsAsTheUnsplitEncoder) {
  auto g = dist::init();
  const int dims = 24, heads = 12, mlp = 48, t = 5;
  random::seed(5);
  nn::TransformerEncoder full(2, dims, heads, mlp, 0.1, nn::gelu);
  random::seed(5);
  nn::TransformerEncoder split(2, dims, heads, mlp, 0.1, nn::gelu);
  split.shard(g);
  if (g.size() > 1) {
    EXPECT_EQ(split.layers[0]->attention.num_heads, heads / g.size());
    EXPECT_EQ(split.layers[0]->linear1.weight.shape(), (Shape{mlp / g.size(), dims}));
    EXPECT_EQ(split.layers[0]->attention.out_proj.weight.shape(), (Shape{dims, dims / g.size()}));
  }
  random::seed(3);
  const array x = random::normal({2, t, dims}), target = random::normal({2, t, dims});
  const array mask = nn::MultiHeadAttention::create_additive_causal_mask(t);
  auto loss_fn = [&](nn::TransformerEncoder& m) {
    return [&m, &x, &target, &mask]() { return mean(square(m(x, mask) - target)); };
  };
  auto vg_full = nn::value_and_grad(full, loss_fn(full));
  auto vg_split = nn::value_and_grad(split, loss_fn(split));
  const nn::ShardingFn rule = [](const std::string& path, const array& w) -> std::optional<std::pair<int, nn::Segments>> {
    auto has = [&](const char* part) { return path.find(part) != std::string::npos; };
    if (has("query_proj") || has("key_proj") || has("value_proj") || has("linear1")) {
      return nn::sharding_rule("all-to-sharded")(path, w);
    }
    if (has("out_proj") || has("linear2")) return nn::sharding_rule("sharded-to-all")(path, w);
    return std::nullopt;
  };

  // Dropout on: the same key before each gives both the same masks.
  random::seed(21);
  auto [l0, g0] = vg_full();
  random::seed(21);
  auto [l1, g1] = vg_split();
  EXPECT_NEAR(l1.item<float>(), l0.item<float>(), 1e-5 * std::fabs(l0.item<float>()));
  const nn::ParamTree want = nn::shard(g0, rule, g);
  ASSERT_EQ(want.size(), g1.size());
  for (const auto& [name, grad] : g1) {
    SCOPED_TRACE(name);
    expect_close(grad, want.at(name), 2e-5, name);
  }

  full.eval();
  split.eval();
  optim::AdamW opt_full(1e-2), opt_split(1e-2);
  expect_trains_alike(full, split, vg_full, vg_split, opt_full, opt_split, rule, g);

  // The gathered checkpoint is the unsplit run's: one process loads it into the unsplit encoder.
  const std::string path = shared_path("loom_tp", g);
  // Per layer: the query, key, value and out weights, linear1's weight and bias, linear2's weight.
  EXPECT_EQ(split.splits().size(), g.size() > 1 ? 2u * 7u : 0u);
  optim::save_gathered_checkpoint(path, split, opt_split, g);
  if (g.rank() == 0) {
    random::seed(99);
    nn::TransformerEncoder loaded(2, dims, heads, mlp, 0.1, nn::gelu);
    optim::AdamW opt_loaded(1e-2);
    optim::load_checkpoint(path, loaded, opt_loaded);
    for (const auto& [name, p] : full.parameters()) {
      SCOPED_TRACE(name);
      expect_close(loaded.parameters().at(name), p, 1e-4, name);
    }
    const nn::ParamTree want_state = opt_full.state(), got_state = opt_loaded.state();
    ASSERT_EQ(got_state.size(), want_state.size());
    for (const auto& [key, a] : want_state) {
      SCOPED_TRACE(key);
      expect_close(got_state.at(key), a, 1e-4, key);
    }
    std::remove(path.c_str());
  }
}

// A fused query/key/value projection split by segments gathers back into the whole weight.
TEST(TensorParallel, GatheredCheckpointOfFusedSegments) {
  auto g = dist::init();
  const int n = g.size();
  random::seed(8);
  nn::Linear qkv(4, 3 * 2 * n);  // three parts of 2n rows
  struct Model : nn::Module {
    std::shared_ptr<nn::Module> layer;
    explicit Model(std::shared_ptr<nn::Module> l) : layer(std::move(l)) { register_module("qkv", *layer); }
  } model(nn::shard_linear(qkv, "all-to-sharded", 3, g));
  optim::SGD opt(0.1);
  const std::string path = shared_path("loom_qkv", g);
  optim::save_gathered_checkpoint(path, model, opt, g);
  if (g.rank() == 0) {
    struct Whole : nn::Module {
      nn::Linear qkv;
      explicit Whole(int n) : qkv(4, 3 * 2 * n) { register_module("qkv", qkv); }
    } whole(n);
    optim::SGD opt_whole(0.1);
    optim::load_checkpoint(path, whole, opt_whole);
    expect_close(whole.qkv.weight, qkv.weight, 0, "weight");
    expect_close(*whole.qkv.bias, *qkv.bias, 0, "bias");
    std::remove(path.c_str());
  }
  eval(dist::all_sum(array(1.0f), g));  // rank 0 is done with the file
}

// shard() refuses a split that does not divide, and a second split; on one rank it changes nothing.
TEST(TensorParallel, TransformerShardErrors) {
  auto g = dist::init();
  const int n = g.size();
  nn::TransformerEncoderLayer layer(24, 12, 48);  // 12 heads and 48 columns split among 1 to 4 ranks
  layer.shard(g);
  if (n == 1) {
    EXPECT_FALSE(layer.group.has_value());
    EXPECT_EQ(layer.attention.num_heads, 12);
    return;
  }
  EXPECT_THROW_MSG(layer.shard(g), std::invalid_argument, "split already");
  nn::MultiHeadAttention odd(2 * (n + 1), n + 1);
  EXPECT_THROW_MSG(odd.shard(g), std::invalid_argument, "cannot split num_heads");
  EXPECT_EQ(odd.num_heads, n + 1);  // untouched
  nn::TransformerEncoderLayer narrow(4 * n, n, 2 * n + 1);
  EXPECT_THROW_MSG(narrow.shard(g), std::invalid_argument, "cannot split mlp_dims");
  EXPECT_EQ(narrow.attention.num_heads, n);  // nothing was split
}

// sum_gradients is the identity forward and sums the cotangents of every rank backward.
TEST(TensorParallel, SumGradients) {
  auto g = dist::init();
  const int n = g.size(), r = g.rank();
  const array x = array({1.0f, 2.0f});
  auto gx = grad([&](const array& v) { return sum(nn::sum_gradients(v, g) * float(r + 1)); })(x);
  const double s = n * (n + 1) / 2.0;
  expect_array(gx, {2}, {s, s});
  expect_array(nn::sum_gradients(x, g), {2}, {1, 2});
}

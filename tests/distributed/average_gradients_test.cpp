// nn::average_gradients and data-parallel equivalence; runs alone and under mpirun -np 2 / 3.

#include <cstdlib>
#include <functional>
#include <set>
#include <unordered_set>

#include "../test_utils.h"
#include "loom/core/allocator.h"
#include "loom/core/eval.h"
#include "loom/core/primitive.h"
#include "loom/nn/average_gradients.h"
#include "loom/nn/linear.h"
#include "loom/ops/ops.h"
#include "loom/ops/random.h"
#include "loom/optim/optimizers.h"

using namespace loom;
using loom::testing::expect_array;
namespace dist = loom::distributed;

namespace {

// The all_sum and all_mean nodes reachable from `tree`, with the sizes they carry, in a fixed order.
std::vector<size_t> all_sum_sizes(const nn::ParamTree& tree) {
  std::vector<size_t> sizes;
  std::unordered_set<const detail::Node*> seen;
  std::vector<array> stack = tree.values();
  while (!stack.empty()) {
    array a = stack.back();
    stack.pop_back();
    if (!a.has_primitive() || !seen.insert(a.node_id()).second) continue;
    const std::string name = a.primitive().name();
    if (name == "all_sum" || name == "all_mean") sizes.push_back(a.size());
    for (const auto& in : a.inputs()) stack.push_back(in);
  }
  std::sort(sizes.begin(), sizes.end());
  return sizes;
}

nn::ParamTree rank_scaled_grads(int rank, const std::vector<Shape>& shapes) {
  nn::ParamTree t;
  for (size_t i = 0; i < shapes.size(); ++i) {
    int n = 1;
    for (int s : shapes[i]) n *= s;
    array base = reshape(arange(0.0, double(n), 1.0, float32) + float(i), shapes[i]);
    t.insert("g" + std::to_string(i), base * float(rank + 1));
  }
  return t;
}

void expect_mean(const nn::ParamTree& avg, const std::vector<Shape>& shapes, int size, double tol = 1e-5) {
  ASSERT_EQ(avg.size(), shapes.size());
  const double factor = (size + 1) / 2.0;  // mean of 1..size
  for (size_t i = 0; i < shapes.size(); ++i) {
    const array& a = avg.at("g" + std::to_string(i));
    ASSERT_EQ(a.shape(), shapes[i]) << "g" << i;
    std::vector<double> want(a.size());
    for (size_t k = 0; k < want.size(); ++k) want[k] = (double(k) + i) * factor;
    expect_array(a, shapes[i], want, tol);
  }
}

}  // namespace

TEST(AverageGradients, MeanOverRanksWithUnevenBuckets) {
  auto g = dist::init();
  const std::vector<Shape> shapes{{3}, {2, 5}, {7}, {1}, {4, 4}, {}};
  auto grads = rank_scaled_grads(g.rank(), shapes);
  // Bucket limit of 40 bytes = 10 floats; reverse order: {} (1) + {4,4} (16) do not fit together.
  for (std::ptrdiff_t limit : {std::ptrdiff_t(40), std::ptrdiff_t(0), std::ptrdiff_t(1) << 25, std::ptrdiff_t(4)}) {
    auto avg = nn::average_gradients(grads, limit);
    if (g.size() == 1) {
      for (const auto& [name, a] : avg) EXPECT_EQ(a.id(), grads.at(name).id()) << "untouched on one process";
      EXPECT_TRUE(all_sum_sizes(avg).empty());
    } else if (limit == 40) {
      // Reverse order: {} + ... : 1 | 16 | 1+7 | 10 | 3  -> buckets of 1, 16, 8, 10, 3 floats.
      EXPECT_EQ(all_sum_sizes(avg), (std::vector<size_t>{1, 3, 8, 10, 16}));
    } else if (limit == 0 || limit == 4) {
      EXPECT_EQ(all_sum_sizes(avg), (std::vector<size_t>{1, 1, 3, 7, 10, 16}));
    } else {
      EXPECT_EQ(all_sum_sizes(avg), (std::vector<size_t>{38}));
    }
    expect_mean(avg, shapes, g.size());
  }
}

TEST(AverageGradients, ManySmallGradientsShareOneAllSum) {
  auto g = dist::init();
  std::vector<Shape> shapes(100, Shape{100});
  auto avg = nn::average_gradients(rank_scaled_grads(g.rank(), shapes));
  if (g.size() > 1) EXPECT_EQ(all_sum_sizes(avg), (std::vector<size_t>{10000}));
  expect_mean(avg, shapes, g.size());
}

TEST(AverageGradients, CommunicationTypeAndMixedDtypes) {
  auto g = dist::init();
  const std::vector<Shape> shapes{{5}, {2, 3}};
  auto grads = rank_scaled_grads(g.rank(), shapes);
  auto avg = nn::average_gradients(grads, 1 << 20, bfloat16);
  for (const auto& [name, a] : avg) EXPECT_EQ(a.dtype(), float32) << name;
  expect_mean(avg, shapes, g.size(), 0.05);  // small integers: exact enough in bfloat16
  // float64 and float32 gradients travel in separate buckets and keep their dtypes.
  grads.insert("g1", astype(grads.at("g1"), float64));
  auto mixed = nn::average_gradients(grads);
  EXPECT_EQ(mixed.at("g1").dtype(), float64);
  EXPECT_EQ(mixed.at("g0").dtype(), float32);
  if (g.size() > 1) EXPECT_EQ(all_sum_sizes(mixed), (std::vector<size_t>{5, 6}));
  expect_mean(mixed, shapes, g.size());
}

TEST(AverageGradients, BadInput) {
  // The same errors on one process as on many (where the gradients otherwise come back untouched).
  nn::ParamTree ints{{"i", array({1, 2})}};
  EXPECT_THROW_MSG(nn::average_gradients(ints), std::invalid_argument, "gradient 'i' has dtype int32");
  nn::ParamTree f{{"f", array({1.0f})}};
  EXPECT_THROW_MSG(nn::average_gradients(f, 1024, int32), std::invalid_argument, "communication_type");
}

namespace {

struct MLP : nn::Module {
  nn::Linear l1{6, 16}, l2{16, 3};
  MLP() {
    register_module("l1", l1);
    register_module("l2", l2);
  }
  array operator()(const array& x) const { return l2(tanh(l1(x))); }
};

// 20 steps of SGD on `rows` of the fixed data set; `average` decides whether gradients are averaged
// over the world.
nn::ParamTree train_averaged(int first_row, int rows, bool average) {
  random::seed(42);
  MLP model;
  array X = random::normal({64 * 8, 6}, random::key(7));
  array Y = random::normal({64 * 8, 3}, random::key(8));
  auto loss_fn = [&](const array& x, const array& y) { return mean(square(model(x) - y)); };
  auto step = nn::value_and_grad(model, loss_fn);
  for (int s = 0; s < 20; ++s) {
    array x = slice(X, {first_row, 0}, {first_row + rows, 6});
    array y = slice(Y, {first_row, 0}, {first_row + rows, 3});
    auto [loss, grads] = step(x, y);
    if (average) grads = nn::average_gradients(grads);
    model.update(nn::tree_map(model.trainable_parameters(), grads,
                              [](const array& p, const array& gr) { return p - 0.1f * gr; }));
    eval(loss, model.parameters());
  }
  return model.parameters();
}

}  // namespace

TEST(DataParallel, TwentyStepsOnShardsEqualOneProcessOnTheGlobalBatch) {
  auto g = dist::init();
  const int per_rank = 64;
  auto sharded = train_averaged(g.rank() * per_rank, per_rank, true);
  auto whole = train_averaged(0, per_rank * g.size(), false);
  for (auto [name, p] : whole) {
    auto want = p.to_vector<float>();
    auto got = sharded.at(name).to_vector<float>();
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i) ASSERT_NEAR(got[i], want[i], 1e-5) << name << "[" << i << "]";
  }
  // And every rank holds the same parameters.
  for (auto [name, p] : sharded) {
    array spread = dist::all_max(p) - dist::all_min(p);
    EXPECT_LE(max(spread).item<float>(), 0.0f) << name;
  }
}

// Gradient accumulation: 3 micro-batches per step, each rank taking its share of every micro-batch,
// trained 20 AdamW steps, equal one process on the 3-times larger global batch; the micro-batches before
// the last communicate nothing, the last one sends one bucket.
TEST(GradientAccumulator, EqualsOneLargerBatch) {
  auto g = dist::init();
  const int n = g.size(), r = g.rank(), micro = 3, per_rank = 8;  // a micro-batch: 8 rows per rank
  const int global = micro * n * per_rank;
  array X = random::normal({global, 6}, random::key(7)), Y = random::normal({global, 3}, random::key(8));
  auto train_averaged = [&](bool accumulate) {
    random::seed(42);
    MLP model;
    optim::AdamW opt(1e-2);
    auto step = nn::value_and_grad(model, [&](const array& x, const array& y) { return mean(square(model(x) - y)); });
    nn::GradientAccumulator acc(micro);
    std::vector<float> losses;
    for (int s = 0; s < 20; ++s) {
      if (!accumulate) {
        auto [loss, grads] = step(X, Y);
        opt.update(model, grads);
        eval(loss, model.parameters(), opt.state());
        continue;
      }
      for (int m = 0; m < micro; ++m) {
        const int first = (m * n + r) * per_rank;  // micro-batch m, rank r's rows
        auto [loss, grads] = step(slice(X, {first, 0}, {first + per_rank, 6}), slice(Y, {first, 0}, {first + per_rank, 3}));
        auto avg = acc.accumulate(grads);
        EXPECT_EQ(bool(avg), m == micro - 1);
        EXPECT_EQ(acc.count(), (m + 1) % micro);
        if (avg) {
          if (n > 1) EXPECT_EQ(all_sum_sizes(*avg).size(), 1u);  // one bucket
          opt.update(model, *avg);
        } else {
          EXPECT_TRUE(all_sum_sizes(acc.state()).empty());  // nothing communicated
        }
        eval(loss, model.parameters(), opt.state(), acc.state());
      }
    }
    return model.parameters();
  };
  nn::ParamTree accumulated = train_averaged(true), whole = train_averaged(false);
  for (auto [name, p] : whole) {
    const std::vector<float> want = p.to_vector<float>(), got = accumulated.at(name).to_vector<float>();
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < got.size(); ++i) ASSERT_NEAR(got[i], want[i], 1e-5) << name << "[" << i << "]";
  }
}

// Accumulating costs about one copy of the gradients: a micro-batch's step that adds to the running
// sums peaks no higher than the same step alone plus the gradients' bytes, and the step that averages
// and updates no higher than a plain data-parallel step (average_gradients and AdamW) plus 1.5 times
// them.
TEST(GradientAccumulator, PeakIsOneMicroBatchStepPlusTheGradients) {
  auto g = dist::init();
  struct Wide : nn::Module {
    nn::Linear l1{256, 256}, l2{256, 256}, l3{256, 16};
    Wide() {
      register_module("l1", l1);
      register_module("l2", l2);
      register_module("l3", l3);
    }
    array operator()(const array& x) const { return l3(tanh(l2(tanh(l1(x))))); }
  };
  random::seed(4);
  Wide model;
  optim::AdamW opt(1e-3);
  auto step = nn::value_and_grad(model, [&](const array& x, const array& y) { return mean(square(model(x) - y)); });
  const array x = random::normal({64, 256}, random::key(1)), y = random::normal({64, 16}, random::key(2));
  eval(x, y, model.parameters());
  double grad_bytes = 0;
  for (const auto& [name, p] : model.parameters()) grad_bytes += double(p.nbytes());
  // Peak above what is live before the step; `work` builds the step and returns what to evaluate.
  auto peak_of = [&](const std::function<std::vector<array>()>& work) {
    std::vector<array> outs = work();
    const double before = double(get_active_memory());
    reset_peak_memory();
    eval(outs);
    return double(get_peak_memory()) - before;
  };
  auto flat = [](std::vector<array> v, const nn::ParamTree& t) {
    for (const auto& [name, a] : t) v.push_back(a);
    return v;
  };
  // Plain steps first, so that AdamW's state exists in both measurements.
  const double micro = peak_of([&] {
    auto [loss, grads] = step(x, y);
    return flat({loss}, grads);
  });
  auto dp_step = [&] {
    auto [loss, grads] = step(x, y);
    opt.update(model, nn::average_gradients(grads));
    return flat(flat({loss}, model.parameters()), opt.state());
  };
  peak_of(dp_step);  // creates AdamW's state
  const double dp = peak_of(dp_step);
  nn::GradientAccumulator acc(3);
  for (int m = 0; m < 3; ++m) {
    // The running sums are live before each micro-batch's step, so they count against the step.
    const double held = m == 0 ? 0 : grad_bytes;
    const double peak = peak_of([&] {
      auto [loss, grads] = step(x, y);
      if (auto avg = acc.accumulate(grads)) opt.update(model, *avg);
      return flat(flat(flat({loss}, model.parameters()), opt.state()), acc.state());
    }) + held;
    // The step that averages holds the running sums beside the all-reduce's bucket, and each new
    // gradient until it is added in (eval runs the adds as the backward pass allows, not at once):
    // up to half the gradients more.
    const double limit = m < 2 ? micro + 1.05 * grad_bytes : dp + 1.5 * grad_bytes;
    EXPECT_LE(peak, limit) << "micro-batch " << m << ": peak " << peak << " bytes, plain step " << (m < 2 ? micro : dp)
                           << ", gradients " << grad_bytes;
  }
}

TEST(GradientAccumulator, BadUse) {
  EXPECT_THROW_MSG(nn::GradientAccumulator(0), std::invalid_argument, "steps must be at least 1");
  nn::GradientAccumulator acc(3);
  EXPECT_FALSE(acc.accumulate({{"w", ones({2})}}));
  EXPECT_THROW_MSG(acc.accumulate({{"w", ones({3})}}), std::invalid_argument, "gradient 'w' does not match");
  EXPECT_THROW_MSG(acc.accumulate({{"v", ones({2})}}), std::invalid_argument, "gradient 'v' does not match");
  EXPECT_THROW_MSG(acc.accumulate({{"w", ones({2})}, {"v", ones({2})}}), std::invalid_argument, "got 2 gradients after 1");
  EXPECT_EQ(acc.count(), 1);
  acc.reset();
  EXPECT_EQ(acc.count(), 0);
  EXPECT_TRUE(acc.state().empty());
  // A step of one micro-batch is average_gradients itself.
  nn::GradientAccumulator one(1);
  auto avg = one.accumulate({{"w", full({2}, array(2.0f))}});
  ASSERT_TRUE(avg);
  expect_array(avg->at("w"), {2}, {2, 2});
}

TEST(Threads, ProcessesLaunchedTogetherShareTheCores) {
  if (std::getenv("OMP_NUM_THREADS")) GTEST_SKIP() << "OMP_NUM_THREADS decides";
  const char* local = std::getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
  const int procs = local ? std::max(1, std::atoi(local)) : 1;
  // The machine's cores shared by its processes, capped by the cores this process may run on
  // (mpirun --bind-to none: all of them).
  EXPECT_EQ(get_num_threads(),
            std::max(1, std::min(loom::detail::cores_available(), loom::detail::machine_cores() / procs)));
}

// ---- nn::Join: uneven data across ranks ----

namespace {

// Rank q runs steps_of(q) steps: 1, 3, 2, 4, ... (the last rank is not always the longest).
int steps_of(int q) { return q % 2 == 0 ? q + 1 : q + 2; }

array rows_of(const array& data, int q, int s, int cols) {
  const int start = (q * 8 + s) * 4;
  return slice(data, {start, 0}, {start + 4, cols});
}

struct JoinRun {
  nn::ParamTree params, state;
  std::vector<int> active;  // per step this rank ran, join.active()
  int shadowed = 0;
};

// The model, optimizer and data that the joined and the simulated training both start from.
struct JoinSetup {
  int seeded = (random::seed(3), 0);  // first: the model's initial weights come from the seed
  MLP model;
  optim::AdamW opt{0.05};
  array X = random::normal({64 * 8, 6}, random::key(11));
  array Y = random::normal({64 * 8, 3}, random::key(12));
  // Loss and gradients of rank q's batch s.
  std::pair<array, nn::ParamTree> step(int q, int s) {
    auto loss_fn = [&](const array& x, const array& y) { return mean(square(model(x) - y)); };
    return nn::value_and_grad(model, loss_fn)(rows_of(X, q, s, 6), rows_of(Y, q, s, 3));
  }
};

// Every rank trains the same MLP with AdamW on its own uneven share of batches under a Join.
JoinRun train_joined(bool divide_by_initial_size, std::ptrdiff_t bucket) {
  auto g = dist::init();
  JoinSetup setup;
  MLP& model = setup.model;
  optim::AdamW& opt = setup.opt;
  nn::Join join(bucket, std::nullopt, std::nullopt, divide_by_initial_size);
  JoinRun run;
  for (int s = 0; s < steps_of(g.rank()); ++s) {
    auto [loss, grads] = setup.step(g.rank(), s);
    opt.update(model, join.average_gradients(grads));
    eval(loss, model.parameters(), opt.state());
    run.active.push_back(join.active());
  }
  run.shadowed = join.finish(model.trainable_parameters(), [&](const nn::ParamTree& avg) {
    opt.update(model, avg);
    eval(model.parameters(), opt.state());
  });
  run.params = model.parameters();
  run.state = opt.state();
  return run;
}

// The same training simulated in one process: at step s, the ranks that still have data contribute
// their gradients, the others zeros, and the sum is divided by the group size (or by the active count).
nn::ParamTree train_simulated(int ranks, bool divide_by_initial_size) {
  JoinSetup setup;
  MLP& model = setup.model;
  optim::AdamW& opt = setup.opt;
  int longest = 0;
  for (int q = 0; q < ranks; ++q) longest = std::max(longest, steps_of(q));
  for (int s = 0; s < longest; ++s) {
    std::optional<nn::ParamTree> sum;
    int active = 0;
    for (int q = 0; q < ranks; ++q) {
      if (s >= steps_of(q)) continue;
      ++active;
      auto grads = setup.step(q, s).second;
      sum = sum ? nn::tree_map(*sum, grads, [](const array& a, const array& b) { return a + b; }) : grads;
    }
    const float divisor = divide_by_initial_size ? float(ranks) : float(active);
    opt.update(model, nn::tree_map(*sum, [&](const array& a) { return a / divisor; }));
    eval(model.parameters(), opt.state());
  }
  return model.parameters();
}

}  // namespace

TEST(Join, UnevenStepsFollowTheSimulatedRanksAndEndIdentical) {
  auto g = dist::init();
  const int n = g.size();
  int longest = 0;
  for (int q = 0; q < n; ++q) longest = std::max(longest, steps_of(q));
  for (bool by_size : {true, false}) {
    for (std::ptrdiff_t bucket : {std::ptrdiff_t(32) << 20, std::ptrdiff_t(200)}) {  // one bucket / several
      SCOPED_TRACE(::testing::Message() << "divide_by_initial_size " << by_size << ", bucket " << bucket);
      JoinRun run = train_joined(by_size, bucket);
      // This rank's steps saw the number of ranks that still had data.
      ASSERT_EQ(run.active.size(), size_t(steps_of(g.rank())));
      for (int s = 0; s < steps_of(g.rank()); ++s) {
        int want = 0;
        for (int q = 0; q < n; ++q) want += s < steps_of(q);
        EXPECT_EQ(run.active[s], want) << "step " << s;
      }
      EXPECT_EQ(run.shadowed, longest - steps_of(g.rank()));
      // The parameters are what the simulation gives...
      nn::ParamTree want = train_simulated(n, by_size);
      for (auto [name, p] : want) {
        auto w = p.to_vector<float>();
        auto got = run.params.at(name).to_vector<float>();
        ASSERT_EQ(got.size(), w.size());
        for (size_t i = 0; i < w.size(); ++i) ASSERT_NEAR(got[i], w[i], 2e-5) << name << "[" << i << "]";
      }
      // ...and bit for bit the same on every rank, parameters and optimizer state (step count too).
      for (const auto& tree : {run.params, run.state}) {
        for (const auto& [name, p] : tree) {
          array x = astype(p, float64);
          EXPECT_EQ(max(dist::all_max(x) - dist::all_min(x)).item<double>(), 0.0) << name;
        }
      }
      EXPECT_EQ(run.state.at("step").item<int64_t>(), longest);
    }
  }
}

TEST(Join, CommunicationTypeAndARankWithNoData) {
  auto g = dist::init();
  // Rank 0 has no data at all; the others one step of gradients equal to their rank + 1.
  nn::ParamTree like{{"a", zeros({3})}, {"b", zeros({2, 2})}};
  nn::Join join(1 << 20, bfloat16);
  std::vector<nn::ParamTree> seen;
  if (g.rank() > 0) {
    auto avg = join.average_gradients(nn::tree_map(like, [&](const array& p) { return p + float(g.rank() + 1); }));
    eval(avg.values());
    seen.push_back(avg);
    EXPECT_EQ(join.active(), g.size() - 1);
  }
  const int shadowed = join.finish(like, [&](const nn::ParamTree& avg) { seen.push_back(avg); });
  EXPECT_EQ(shadowed, g.rank() == 0 && g.size() > 1 ? 1 : 0);
  ASSERT_EQ(seen.size(), g.size() > 1 ? 1u : 0u);
  if (g.size() > 1) {
    // (2 + ... + n) / n on every rank, float32 after travelling in bfloat16.
    const float want = float(g.size() * (g.size() + 1) / 2 - 1) / float(g.size());
    for (auto [name, a] : seen[0]) {
      EXPECT_EQ(a.dtype(), float32);
      for (float v : a.to_vector<float>()) EXPECT_NEAR(v, want, 0.02) << name;
    }
  }
}

TEST(Join, OtherCollectivesOfAJoinedRankFailNamingJoin) {
  auto g = dist::init();
  if (g.size() == 1) GTEST_SKIP() << "needs two ranks";
  nn::ParamTree grads{{"w", ones({4})}};
  nn::Join join;
  // Rank 0 runs out of data and, instead of finish, sums its loss for logging; the others still
  // average gradients. Every rank throws, naming both collectives and pointing at Join.
  auto bad = [&] {
    if (g.rank() == 0) {
      eval(dist::all_sum(array(1.0f)));
    } else {
      eval(join.average_gradients(grads).values());
    }
  };
  EXPECT_THROW_MSG(bad(), std::runtime_error, "uneven data: nn::Join");
}

TEST(Join, BadUse) {
  nn::ParamTree grads{{"w", ones({2})}};
  EXPECT_THROW_MSG(nn::Join(1024, int32), std::invalid_argument, "communication_type must be floating point");
  nn::Join empty;
  EXPECT_THROW_MSG(empty.average_gradients({}), std::invalid_argument, "[Join] there are no gradients");
  EXPECT_THROW_MSG(empty.active(), std::logic_error, "[Join] active() before any average");
  auto g = dist::init();
  if (g.size() > 1) GTEST_SKIP() << "finishing alone would wait for the other ranks";
  nn::Join join;
  EXPECT_EQ(join.finish(grads, [](const nn::ParamTree&) { FAIL() << "nothing to shadow"; }), 0);
  EXPECT_EQ(join.active(), 0);
  EXPECT_THROW_MSG(join.average_gradients(grads), std::logic_error, "after finish");
  EXPECT_THROW_MSG(join.finish(grads, [](const nn::ParamTree&) {}), std::logic_error, "finish called twice");
}

// Pipeline parallelism (nn::Pipeline): the schedules' messages pair up and cannot block on any
// number of stages and micro-batches; a model split into stages over the ranks trains as one process
// trains it (losses and parameters, GPipe and 1F1B, uneven splits, bfloat16, with data parallelism
// over another mesh axis); bad input and ranks that build different steps are refused, naming them.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "../test_utils.h"
#include "loom/nn/activations.h"
#include "loom/nn/average_gradients.h"
#include "loom/nn/containers.h"
#include "loom/nn/linear.h"
#include "loom/nn/losses.h"
#include "loom/nn/pipeline.h"
#include "loom/ops/ops.h"
#include "loom/ops/random.h"
#include "loom/optim/checkpoint.h"
#include "loom/optim/optimizers.h"
#include <unistd.h>

using namespace loom;
namespace dist = loom::distributed;
using nn::PipelineSchedule;
using Msg = nn::detail::PipelineMessage;

namespace {

// Runs every stage's messages with the strictest semantics MPI allows: a plain send completes only
// once its receiver has posted the receive (a large message); a send_recv posts its send and then
// waits for its receive. Returns false when some stage can never go on.
bool runs_to_the_end(const std::vector<std::vector<Msg>>& stages) {
  const int p = static_cast<int>(stages.size());
  std::vector<size_t> at(p, 0);
  // Per (from, to): the messages sent so far, and how many of them the receiver has taken.
  std::map<std::pair<int, int>, std::vector<std::pair<int, int>>> sent;
  std::map<std::pair<int, int>, size_t> taken;
  auto key = [](const Msg& m) { return std::make_pair(static_cast<int>(m.kind), m.micro_batch); };
  std::vector<bool> posted(p, false);  // the current op's send is posted (plain send or send_recv)
  for (bool progress = true; progress;) {
    progress = false;
    for (int s = 0; s < p; ++s) {
      if (at[s] >= stages[s].size()) continue;
      const Msg& m = stages[s][at[s]];
      if (m.send) {
        if (!posted[s]) {
          sent[{s, m.peer}].push_back(key(m));
          posted[s] = true;
          progress = true;
        }
        if (m.with_next) {  // send_recv: the send is on its way; wait for the receive
          const Msg& r = stages[s][at[s] + 1];
          auto& q = sent[{r.peer, s}];
          size_t& t = taken[{r.peer, s}];
          if (t < q.size()) {
            EXPECT_EQ(q[t], key(r)) << "stage " << s << " receives another message than stage " << r.peer << " sent";
            ++t;
            at[s] += 2;
            posted[s] = false;
            progress = true;
          }
        } else {  // plain send: done once the receiver has taken it
          if (taken[{s, m.peer}] >= sent[{s, m.peer}].size()) {
            ++at[s];
            posted[s] = false;
            progress = true;
          }
        }
      } else {
        auto& q = sent[{m.peer, s}];
        size_t& t = taken[{m.peer, s}];
        if (t < q.size()) {
          EXPECT_EQ(q[t], key(m)) << "stage " << s << " receives another message than stage " << m.peer << " sent";
          ++t;
          ++at[s];
          progress = true;
        }
      }
    }
  }
  for (int s = 0; s < p; ++s) {
    if (at[s] < stages[s].size()) return false;
  }
  return true;
}

}  // namespace

TEST(PipelineSchedule, EveryPassOnceBackwardInOrderAndOneFOneBHoldsAtMostPMinusSForwards) {
  for (PipelineSchedule sched : {PipelineSchedule::gpipe, PipelineSchedule::one_f_one_b}) {
    for (int p = 1; p <= 8; ++p) {
      for (int m = 1; m <= 12; ++m) {
        for (int s = 0; s < p; ++s) {
          SCOPED_TRACE(::testing::Message() << (sched == PipelineSchedule::gpipe ? "gpipe" : "1f1b") << " p " << p
                                          << " m " << m << " stage " << s);
          const auto actions = nn::detail::pipeline_actions(sched, p, m, s);
          ASSERT_EQ(actions.size(), 2u * m);
          std::vector<int> forwards, backwards;
          int in_flight = 0, most = 0;
          for (const auto& a : actions) {
            if (a.forward) {
              forwards.push_back(a.micro_batch);
              most = std::max(most, ++in_flight);
            } else {
              EXPECT_NE(std::find(forwards.begin(), forwards.end(), a.micro_batch), forwards.end());
              backwards.push_back(a.micro_batch);
              --in_flight;
            }
          }
          for (int i = 0; i < m; ++i) {
            EXPECT_EQ(forwards[i], i);
            EXPECT_EQ(backwards[i], i);  // the gradients add up in the same order in both schedules
          }
          EXPECT_EQ(most, sched == PipelineSchedule::gpipe ? m : std::min(m, p - s));
        }
      }
    }
  }
}

TEST(PipelineSchedule, MessagesPairUpAndNeverBlockEvenWhenEverySendWaitsForItsReceiver) {
  for (int backward = 0; backward <= 1; ++backward) {
    for (PipelineSchedule sched : {PipelineSchedule::gpipe, PipelineSchedule::one_f_one_b}) {
      for (int p = 1; p <= 8; ++p) {
        for (int m = 1; m <= 12; ++m) {
          SCOPED_TRACE(::testing::Message() << (sched == PipelineSchedule::gpipe ? "gpipe" : "1f1b") << " p " << p
                                          << " m " << m << (backward ? "" : " forward only"));
          std::vector<std::vector<Msg>> stages;
          for (int s = 0; s < p; ++s) stages.push_back(nn::detail::pipeline_messages(sched, p, m, s, backward));
          EXPECT_TRUE(runs_to_the_end(stages));
          // Without send_recv, 1F1B's steady state blocks: two neighbours each send the other first.
          if (backward && sched == PipelineSchedule::one_f_one_b && p >= 2 && m >= p) {
            auto plain = stages;
            for (auto& st : plain) {
              for (auto& msg : st) msg.with_next = false;
            }
            EXPECT_FALSE(runs_to_the_end(plain));
          }
        }
      }
    }
  }
}

namespace {

// A 7-layer MLP: its layers do not divide evenly among 2, 3 or 4 stages.
std::shared_ptr<nn::Sequential> mlp(int seed) {
  random::seed(seed);
  return std::make_shared<nn::Sequential>(std::make_shared<nn::Linear>(6, 16), nn::relu,
                                          std::make_shared<nn::Linear>(16, 16), [](const array& a) { return tanh(a); },
                                          std::make_shared<nn::Linear>(16, 12), nn::gelu,
                                          std::make_shared<nn::Linear>(12, 3));
}

array mse(const array& out, const array& target) { return mean(square(out - target)); }

void expect_near_all(const array& got, const array& want, double tol, const std::string& what) {
  ASSERT_EQ(got.shape(), want.shape()) << what;
  const array diff = max(abs(astype(got, float32) - astype(want, float32)));
  const array scale = maximum(max(abs(astype(want, float32))), array(1.0f));
  EXPECT_LE((diff / scale).item<float>(), tol) << what;
}

// `steps` AdamW steps of the one-process model on the whole batch and of the pipeline: the same loss
// at every step and then the same parameters (the stage's, named as in the whole model).
void expect_trains_as_one_process(const dist::Group& pp, const std::optional<dist::Group>& dp, int micro_batches,
                                  PipelineSchedule sched, std::optional<Dtype> compute = std::nullopt,
                                  double tol = 2e-5) {
  const int batch = 24, steps = 4;
  auto whole = mlp(7);
  auto blueprint = mlp(7);
  nn::Pipeline pipe(*blueprint, pp);
  random::seed(3);
  const array x = random::normal({batch, 6}), y = random::normal({batch, 3});
  const int replicas = dp ? dp->size() : 1, r = dp ? dp->rank() : 0, per = batch / replicas;
  const array xs = slice(x, {r * per, 0}, {(r + 1) * per, 6}), ys = slice(y, {r * per, 0}, {(r + 1) * per, 3});
  auto vg = nn::value_and_grad(*whole, [&]() { return mse((*whole)(x), y); }, compute);
  optim::AdamW opt_whole(1e-2), opt_pipe(1e-2);
  for (int step = 0; step < steps; ++step) {
    auto [lw, gw] = vg();
    opt_whole.update(*whole, gw);
    nn::PipelineStep st = pipe.value_and_grad(xs, ys, mse, micro_batches, sched, compute);
    array loss = st.loss;
    nn::ParamTree grads = st.grads;
    if (dp) {
      grads = nn::average_gradients(grads, 32 << 20, std::nullopt, *dp);
      loss = dist::all_mean(loss, *dp);
    }
    opt_pipe.update(pipe, grads);
    eval(lw, loss, whole->parameters(), pipe.parameters(), opt_whole.state(), opt_pipe.state());
    const float want = lw.item<float>();
    EXPECT_NEAR(loss.item<float>(), want, tol * std::max(1.0f, std::fabs(want))) << "step " << step;
  }
  const nn::ParamTree mine = pipe.parameters(), all = whole->parameters();
  EXPECT_GT(mine.size(), 0u);
  for (const auto& [name, p] : mine) expect_near_all(p, all.at(name), 10 * tol, name);
}

}  // namespace

TEST(Pipeline, SplitsLayersEvenlyOrAsToldAndHoldsOnlyItsStage) {
  auto g = dist::init();
  const int n = g.size();
  auto blueprint = mlp(1);
  nn::Pipeline pipe(*blueprint, g);
  EXPECT_EQ(pipe.num_stages(), n);
  EXPECT_EQ(pipe.stage(), g.rank());
  int total = 0;
  for (int k : pipe.stage_sizes()) {
    EXPECT_TRUE(k == 7 / n || k == 7 / n + 1);
    total += k;
  }
  EXPECT_EQ(total, 7);
  EXPECT_EQ(pipe.end_layer() - pipe.first_layer(), static_cast<size_t>(pipe.stage_sizes()[pipe.stage()]));
  // Its parameters are its layers', under the whole model's names; the other layers hold placeholders.
  for (const auto& [name, p] : pipe.parameters()) {
    const size_t layer = std::stoul(name.substr(7));  // "layers.<i>."
    EXPECT_GE(layer, pipe.first_layer()) << name;
    EXPECT_LT(layer, pipe.end_layer()) << name;
  }
  if (n != 7) {
    EXPECT_THROW_MSG(nn::Pipeline(*mlp(1), g, std::vector<int>(n, 1)), std::invalid_argument,
                     "do not split 7 layers into " + std::to_string(n) + " stages");
  }
  if (n > 1) {
    nn::Sequential tiny(std::make_shared<nn::Linear>(2, 2));
    EXPECT_THROW_MSG(nn::Pipeline(tiny, g), std::invalid_argument,
                     "[nn::Pipeline] 1 layers cannot be split into " + std::to_string(n) + " stages");
  }
}

TEST(Pipeline, GPipeAndOneFOneBTrainAsOneProcessAndAgreeBitForBit) {
  auto g = dist::init();
  for (PipelineSchedule sched : {PipelineSchedule::gpipe, PipelineSchedule::one_f_one_b}) {
    for (int m : {1, 4, 6}) {
      SCOPED_TRACE(::testing::Message() << (sched == PipelineSchedule::gpipe ? "gpipe" : "1f1b") << ", " << m
                                      << " micro-batches");
      expect_trains_as_one_process(g, std::nullopt, m, sched);
    }
  }
  // The two schedules sum each stage's gradients in the same order: equal bit for bit.
  auto b1 = mlp(5), b2 = mlp(5);
  nn::Pipeline p1(*b1, g), p2(*b2, g);
  random::seed(4);
  const array x = random::normal({12, 6}), y = random::normal({12, 3});
  auto s1 = p1.value_and_grad(x, y, mse, 6, PipelineSchedule::gpipe);
  eval(s1.loss, s1.grads);  // (one pipeline step per eval: two steps' messages would interleave by chance)
  auto s2 = p2.value_and_grad(x, y, mse, 6, PipelineSchedule::one_f_one_b);
  eval(s2.loss, s2.grads);
  EXPECT_EQ(s1.loss.item<float>(), s2.loss.item<float>());
  for (const auto& [name, a] : s1.grads) EXPECT_TRUE(array_equal(a, s2.grads.at(name)).item<bool>()) << name;
  // The forward passes alone give the step's loss.
  const array l = p1.loss(x, y, mse, 3);
  EXPECT_NEAR(l.item<float>(), s1.loss.item<float>(), 1e-6f * std::max(1.0f, std::fabs(s1.loss.item<float>())));
}

TEST(Pipeline, ExplicitUnevenStagesAndBfloat16) {
  auto g = dist::init();
  const int n = g.size();
  if (n <= 7) {
    // All but one layer on the last stage.
    std::vector<int> sizes(n, 1);
    sizes.back() = 7 - (n - 1);
    auto whole = mlp(9);
    auto blueprint = mlp(9);
    nn::Pipeline pipe(*blueprint, g, sizes);
    EXPECT_EQ(pipe.stage_sizes(), sizes);
    random::seed(2);
    const array x = random::normal({8, 6}), y = random::normal({8, 3});
    auto [lw, gw] = nn::value_and_grad(*whole, [&]() { return mse((*whole)(x), y); })();
    auto st = pipe.value_and_grad(x, y, mse, 4);
    eval(lw, st.loss, gw, st.grads);
    EXPECT_NEAR(st.loss.item<float>(), lw.item<float>(), 1e-5f);
    for (const auto& [name, gr] : st.grads) expect_near_all(gr, gw.at(name), 1e-5, name);
  }
  // bfloat16 compute: the activations travel in bfloat16; the losses follow the one-process
  // bfloat16 run to its rounding.
  expect_trains_as_one_process(g, std::nullopt, 2, PipelineSchedule::one_f_one_b, bfloat16, 2e-2);
}

// dp x pp over every factorization of the world: each dp coordinate runs the pipeline on its share of
// the global batch, and the gradients are averaged over dp.
TEST(Pipeline, WithDataParallelOverAMeshTrainsAsOneProcess) {
  auto g = dist::init();
  const int n = g.size();
  for (int dp = 1; dp <= n; ++dp) {
    if (n % dp != 0 || 24 % (dp * 2) != 0) continue;
    const dist::Mesh mesh({{"dp", dp}, {"pp", n / dp}});
    SCOPED_TRACE("dp " + std::to_string(dp) + " x pp " + std::to_string(n / dp));
    expect_trains_as_one_process(mesh.group("pp"), mesh.group("dp"), 2, PipelineSchedule::one_f_one_b);
  }
}

TEST(Pipeline, BadInputAndRanksThatBuildAnotherStep) {
  auto g = dist::init();
  const int n = g.size();
  auto blueprint = mlp(1);
  nn::Pipeline pipe(*blueprint, g);
  const array x = zeros({12, 6}), y = zeros({12, 3});
  EXPECT_THROW_MSG(pipe.value_and_grad(x, y, mse, 5), std::invalid_argument,
                   "[nn::Pipeline::value_and_grad] a batch of 12 (x (12,6), y (12,3)) cannot be split into 5 equal "
                   "micro-batches");
  EXPECT_THROW_MSG(pipe.value_and_grad(x, zeros({10, 3}), mse, 2), std::invalid_argument, "cannot be split into 2");
  EXPECT_THROW_MSG(pipe.value_and_grad(x, y, mse, 0), std::invalid_argument, "needs at least one micro-batch, got 0");
  EXPECT_THROW_MSG(pipe.value_and_grad(x, y, mse, 2, PipelineSchedule::gpipe, int32), std::invalid_argument, "");
  if (pipe.stage() == n - 1) {
    auto no_mean = [](const array& o, const array& t) { return square(o - t); };
    EXPECT_THROW_MSG(pipe.value_and_grad(x, y, no_mean, 2), std::invalid_argument,
                     "loss_fn must return a scalar (the micro-batch's mean); got shape (6,3)");
  }
  if (n == 1) return;
  // Rank 0 builds another schedule than the others: every rank throws from eval, naming each one's
  // step, and no message after the check starts (the ranks go on in step).
  const PipelineSchedule mine = g.rank() == 0 ? PipelineSchedule::gpipe : PipelineSchedule::one_f_one_b;
  auto st = pipe.value_and_grad(x, y, mse, 2, mine);
  std::string what;
  try {
    eval(st.loss, st.grads);
  } catch (const std::runtime_error& e) {
    what = e.what();
  }
  EXPECT_NE(what.find("[agree] the ranks disagree: rank 0: nn::Pipeline GPipe step of 2 micro-batches, x float32 "
                      "(12,6), y float32 (12,3), stages of"),
            std::string::npos)
      << what;
  EXPECT_NE(what.find("; rank 1: nn::Pipeline 1F1B step of 2 micro-batches"), std::string::npos) << what;
  // Then a step that agrees runs, and gives the one-process loss.
  auto ok = pipe.value_and_grad(x, y, mse, 3);
  eval(ok.loss, ok.grads);
  auto ref = mlp(1);
  EXPECT_NEAR(ok.loss.item<float>(), mse((*ref)(x), y).item<float>(), 1e-6f);
  dist::barrier();
}

// Each stage writes its own part of a checkpoint (optim::save_sharded_checkpoint, the pipeline being
// a module of its stage's parameters): a new pipeline that loads it trains on as the first one does.
TEST(Pipeline, ShardedCheckpointResumesExactly) {
  auto g = dist::init();
  const array pid({static_cast<int>(g.rank() == 0 ? ::getpid() : 0)});
  const std::string path =
      ::testing::TempDir() + "loom_pipeline_" + std::to_string(dist::all_max(pid, g).item<int>()) + ".ckpt";
  random::seed(4);
  const array x = random::normal({8, 6}), y = random::normal({8, 3});
  auto b1 = mlp(2);
  nn::Pipeline run(*b1, g);
  optim::AdamW opt(1e-2);
  auto step = [&](nn::Pipeline& p, optim::AdamW& o) {
    auto st = p.value_and_grad(x, y, mse, 2);
    o.update(p, st.grads);
    eval(st.loss, p.parameters(), o.state());
    return st.loss.item<float>();
  };
  for (int i = 0; i < 2; ++i) step(run, opt);
  optim::save_sharded_checkpoint(path, run, opt, g);
  auto b2 = mlp(99);  // other initial values: all of them come from the checkpoint
  nn::Pipeline resumed(*b2, g);
  optim::AdamW opt2(1e-2);
  optim::load_sharded_checkpoint(path, resumed, opt2, g);
  for (int i = 0; i < 2; ++i) EXPECT_EQ(step(resumed, opt2), step(run, opt)) << "step " << i;
  for (const auto& [name, p] : run.parameters()) {
    EXPECT_TRUE(array_equal(p, resumed.parameters().at(name)).item<bool>()) << name;
  }
  dist::barrier();
  std::remove((path + ".rank" + std::to_string(g.rank()) + "-of-" + std::to_string(g.size())).c_str());
}

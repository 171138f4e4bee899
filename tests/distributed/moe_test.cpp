// nn::MoE: routing, capacity and the load-balancing loss against a by-hand computation; gradients
// against a dense composition of the same routing; expert parallelism at 1 to 4 ranks against one
// process holding every expert (outputs, then AdamW training); bad input.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "../test_utils.h"
#include "loom/nn/activations.h"
#include "loom/nn/average_gradients.h"
#include "loom/nn/moe.h"
#include "loom/ops/ops.h"
#include "loom/ops/random.h"
#include "loom/optim/checkpoint.h"
#include "loom/optim/optimizers.h"
#include <unistd.h>
#include <cstdio>

using namespace loom;
namespace dist = loom::distributed;
using loom::testing::expect_array;

namespace {

std::vector<double> values(const array& a) { return astype(a, float64).to_vector<double>(); }

double gelu_exact(double v) { return 0.5 * v * (1 + std::erf(v / std::sqrt(2.0))); }

// The layer by hand, in double: routing with ties to the lower index, GShard's priority, dropping
// past the capacity, the renormalized gates, each expert's MLP. Returns y (T x d) and the aux loss.
std::pair<std::vector<double>, double> by_hand(nn::MoE& moe, const array& x, int k, double cf) {
  const int t = x.shape(0), d = x.shape(1), e = moe.num_experts();
  const auto xs = values(x), wr = values(moe.router.weight);  // (E, d)
  const auto w1 = values(moe.experts.w1), b1 = values(moe.experts.b1), w2 = values(moe.experts.w2),
             b2 = values(moe.experts.b2);
  const int h = moe.experts.w1.shape(2);
  std::vector<std::vector<double>> p(t, std::vector<double>(e));
  for (int i = 0; i < t; ++i) {
    double mx = -1e300;
    for (int j = 0; j < e; ++j) {
      double z = 0;
      for (int q = 0; q < d; ++q) z += xs[i * d + q] * wr[j * d + q];
      p[i][j] = z;
      mx = std::max(mx, z);
    }
    double s = 0;
    for (int j = 0; j < e; ++j) s += (p[i][j] = std::exp(p[i][j] - mx));
    for (int j = 0; j < e; ++j) p[i][j] /= s;
  }
  std::vector<std::vector<int>> choice(t);
  for (int i = 0; i < t; ++i) {
    std::vector<int> idx(e);
    for (int j = 0; j < e; ++j) idx[j] = j;
    std::stable_sort(idx.begin(), idx.end(), [&](int a, int b) { return p[i][a] > p[i][b]; });
    choice[i].assign(idx.begin(), idx.begin() + k);
  }
  const int cap = std::max(1, static_cast<int>(std::ceil(cf * t * k / e)));
  std::vector<int> load(e, 0);
  std::vector<std::vector<bool>> kept(t, std::vector<bool>(k));
  std::vector<double> share(e, 0);
  for (int c = 0; c < k; ++c) {
    for (int i = 0; i < t; ++i) {
      const int ex = choice[i][c];
      kept[i][c] = load[ex]++ < cap;
      share[ex] += 1.0 / (t * k);
    }
  }
  std::vector<double> y(static_cast<size_t>(t) * d, 0);
  for (int i = 0; i < t; ++i) {
    double gsum = 0;
    for (int c = 0; c < k; ++c) gsum += p[i][choice[i][c]];
    for (int c = 0; c < k; ++c) {
      if (!kept[i][c]) continue;
      const int ex = choice[i][c];
      const double gate = p[i][ex] / gsum;
      std::vector<double> hid(h);
      for (int u = 0; u < h; ++u) {
        double z = b1[ex * h + u];
        for (int q = 0; q < d; ++q) z += xs[i * d + q] * w1[(ex * d + q) * h + u];
        hid[u] = gelu_exact(z);
      }
      for (int q = 0; q < d; ++q) {
        double z = b2[ex * d + q];
        for (int u = 0; u < h; ++u) z += hid[u] * w2[(ex * h + u) * d + q];
        y[i * d + q] += gate * z;
      }
    }
  }
  double aux = 0;
  for (int j = 0; j < e; ++j) {
    double pm = 0;
    for (int i = 0; i < t; ++i) pm += p[i][j] / t;
    aux += share[j] * pm;
  }
  return {y, aux * e};
}

}  // namespace

TEST(MoE, RoutesCapsAndCombinesAsByHand) {
  for (double cf : {2.0, 0.5}) {  // room for every token; and half of them past capacity
    SCOPED_TRACE("capacity factor " + std::to_string(cf));
    random::seed(1);
    nn::MoE moe(6, 10, 4, 2, cf);
    EXPECT_EQ(moe.local_experts(), 4);
    random::seed(2);
    const array x = random::normal({9, 6});
    const nn::MoEOutput out = moe.forward(x);
    const auto [want, aux] = by_hand(moe, x, 2, cf);
    ASSERT_EQ(out.y.shape(), (Shape{9, 6}));
    expect_array(out.y, {9, 6}, want, 2e-5);
    EXPECT_NEAR(out.load_balancing_loss.item<float>(), aux, 1e-5);
    const int cap = moe.capacity(9);
    EXPECT_EQ(cap, static_cast<int>(std::ceil(cf * 9 * 2 / 4)));
    if (cf < 1) EXPECT_GT(out.dropped.item<float>(), 0.0f);
    else EXPECT_EQ(out.dropped.item<float>(), 0.0f);
  }
  // Tokens of any leading shape; top-1 without renormalizing is Switch's routing.
  random::seed(1);
  nn::MoE switch_moe(6, 10, 4, 1, 4.0, std::nullopt, nullptr, false);
  random::seed(2);
  const array x = random::normal({3, 3, 6});
  const array y = switch_moe(x);
  EXPECT_EQ(y.shape(), (Shape{3, 3, 6}));
  const array probs = softmax(matmul(reshape(x, {9, 6}), transpose(switch_moe.router.weight)), -1);
  const array top = max(probs, -1);
  // y / gate is the chosen expert's output: its norm is positive for every token (none dropped).
  EXPECT_GT(min(sum(abs(reshape(y, {9, 6})), -1) / top).item<float>(), 0.0f);
  EXPECT_EQ(switch_moe.last().dropped.item<float>(), 0.0f);
}

TEST(MoE, GradientsEqualADenseCompositionOfTheSameRouting) {
  random::seed(3);
  nn::MoE moe(5, 8, 4, 2, 0.75);  // some pairs dropped
  random::seed(4);
  const array x = random::normal({7, 5}), target = random::normal({7, 5});
  auto vg = nn::value_and_grad(moe, [&](const array& in) {
    const nn::MoEOutput o = moe.forward(in);
    return mean(square(o.y - target)) + 0.1f * o.load_balancing_loss;
  });
  auto [loss, grads] = vg(x);
  // The same layer as dense masks: mask[t, e] = gate if (t, e) is a kept pair, from the routing the
  // layer made (a constant), every expert run on every token.
  const nn::MoEOutput o = moe.forward(x);
  eval(o.y);
  const int t = 7, e = 4, cap = moe.capacity(7);
  // The routing the layer made, from the evaluated probabilities (constants to the dense loss).
  array order = argsort(negative(softmax(matmul(x, transpose(moe.router.weight)), -1)), -1);
  const auto ord = order.to_vector<int32_t>();
  std::vector<float> keep_f(static_cast<size_t>(t) * e, 0.0f), chosen(static_cast<size_t>(t) * e, 0.0f);
  {
    std::vector<int> load(e, 0);
    for (int c = 0; c < 2; ++c) {
      for (int i = 0; i < t; ++i) {
        const int ex = ord[i * e + c];
        chosen[i * e + ex] = 1.0f;
        if (load[ex]++ < cap) keep_f[i * e + ex] = 1.0f;
      }
    }
  }
  auto dense = nn::value_and_grad(moe, [&](const array& in) {
    const array p = softmax(matmul(in, transpose(moe.router.weight)), -1);
    const array chosen_a(chosen.data(), {t, e}, float32), keep_a(keep_f.data(), {t, e}, float32);
    const array gates = divide(p * chosen_a, sum(p * chosen_a, -1, true)) * keep_a;  // (T, E)
    array y = zeros({t, 5});
    for (int ex = 0; ex < e; ++ex) {
      const array w1 = take(moe.experts.w1, ex, 0), b1 = take(moe.experts.b1, ex, 0);
      const array w2 = take(moe.experts.w2, ex, 0), b2 = take(moe.experts.b2, ex, 0);
      const array out = matmul(nn::gelu(matmul(in, w1) + b1), w2) + b2;
      y = y + out * slice(gates, {0, ex}, {t, ex + 1});
    }
    const array share = sum(chosen_a, 0) / float(t * 2);
    const array aux = sum(share * mean(p, 0)) * float(e);
    return mean(square(y - target)) + 0.1f * aux;
  });
  auto [loss_d, grads_d] = dense(x);
  eval(loss, grads, loss_d, grads_d);
  EXPECT_NEAR(loss.item<float>(), loss_d.item<float>(), 1e-5f);
  for (const auto& [name, g] : grads) {
    SCOPED_TRACE(name);
    const array diff = max(abs(g - grads_d.at(name)));
    EXPECT_LE(diff.item<float>(), 1e-5f * std::max(1.0f, max(abs(grads_d.at(name))).item<float>()));
  }
}

// Expert parallelism over the world: each rank holds E / N experts and its own tokens; the outputs
// and, after AdamW steps with average_gradients(grads, experts), the parameters are those of one
// process holding every expert and running each rank's tokens in turn (the same per-rank capacity).
TEST(MoE, ExpertParallelTrainsAsOneProcessWithEveryExpert) {
  auto g = dist::init();
  const int n = g.size(), r = g.rank(), experts = 12, tokens = 10, d = 6;
  random::seed(5);
  nn::MoE ep(d, 16, experts, 2, 1.0, g);
  random::seed(5);
  nn::MoE one(d, 16, experts, 2, 1.0);
  EXPECT_EQ(ep.local_experts(), experts / n);
  ASSERT_EQ(ep.experts.w1.shape(), (Shape{experts / n, d, 16}));
  // The same experts: this rank's slice of the whole.
  const int lo = r * (experts / n), hi = lo + experts / n;
  EXPECT_TRUE(array_equal(ep.experts.w1, slice(one.experts.w1, {lo, 0, 0}, {hi, d, 16})).item<bool>());
  EXPECT_TRUE(array_equal(ep.router.weight, one.router.weight).item<bool>());
  std::vector<std::string> local;
  for (const auto& [name, split] : ep.splits()) local.push_back(name);
  EXPECT_EQ(local.size(), n > 1 ? 4u : 0u);

  random::seed(6);
  const array x = random::normal({n, tokens, d}), target = random::normal({n, tokens, d});
  const array mine = take(x, r, 0), mine_t = take(target, r, 0);
  auto loss_of = [](const nn::MoEOutput& o, const array& t) { return mean(square(o.y - t)) + 0.01f * o.load_balancing_loss; };
  auto vg_ep = nn::value_and_grad(ep, [&]() { return loss_of(ep.forward(mine), mine_t); });
  auto vg_one = nn::value_and_grad(one, [&]() {
    array total = array(0.0f);
    for (int q = 0; q < n; ++q) total = total + loss_of(one.forward(take(x, q, 0)), take(target, q, 0));
    return total / float(n);
  });
  // Outputs first.
  const array y_ep = ep.forward(mine).y, y_one = one.forward(mine).y;
  EXPECT_LE(max(abs(y_ep - y_one)).item<float>(), 1e-5f);
  optim::AdamW opt_ep(1e-2), opt_one(1e-2);
  for (int step = 0; step < 5; ++step) {
    auto [l_ep, g_ep] = vg_ep();
    opt_ep.update(ep, nn::average_gradients(g_ep, local, 32 << 20, std::nullopt, g));
    auto [l_one, g_one] = vg_one();
    opt_one.update(one, g_one);
    const array loss = dist::all_mean(l_ep, g);
    eval(loss, l_one, ep.parameters(), one.parameters(), opt_ep.state(), opt_one.state());
    EXPECT_NEAR(loss.item<float>(), l_one.item<float>(), 1e-5f * std::max(1.0f, std::fabs(l_one.item<float>())))
        << "step " << step;
  }
  EXPECT_LE(max(abs(ep.router.weight - one.router.weight)).item<float>(), 1e-4f);
  for (const char* name : {"w1", "b1", "w2", "b2"}) {
    const array& a = std::string(name) == "w1" ? ep.experts.w1 : std::string(name) == "b1" ? ep.experts.b1
                     : std::string(name) == "w2" ? ep.experts.w2 : ep.experts.b2;
    const array& b = std::string(name) == "w1" ? one.experts.w1 : std::string(name) == "b1" ? one.experts.b1
                     : std::string(name) == "w2" ? one.experts.w2 : one.experts.b2;
    Shape lo_s(b.ndim(), 0), hi_s = b.shape();
    lo_s[0] = lo;
    hi_s[0] = hi;
    EXPECT_LE(max(abs(a - slice(b, lo_s, hi_s))).item<float>(), 1e-4f) << name;
  }
  // The gathered checkpoint holds all the experts: one process loads the one-process model from it,
  // parameters and AdamW state.
  const array pid({static_cast<int>(r == 0 ? ::getpid() : 0)});
  const std::string path = ::testing::TempDir() + "loom_moe_" + std::to_string(dist::all_max(pid, g).item<int>()) + ".ckpt";
  optim::save_gathered_checkpoint(path, ep, opt_ep, g);
  dist::barrier();
  random::seed(77);
  nn::MoE loaded(d, 16, experts, 2, 1.0);
  optim::AdamW opt_loaded(1e-2);
  optim::load_checkpoint(path, loaded, opt_loaded);
  for (const auto& [name, p] : one.parameters()) {
    EXPECT_LE(max(abs(loaded.parameters().at(name) - p)).item<float>(), 1e-4f) << name;
  }
  for (const auto& [key, a] : opt_one.state()) {
    EXPECT_LE(max(abs(astype(opt_loaded.state().at(key), float32) - astype(a, float32))).item<float>(), 1e-4f) << key;
  }
  dist::barrier();
  if (r == 0) std::remove(path.c_str());
}

TEST(MoE, BadInput) {
  auto g = dist::init();
  EXPECT_THROW_MSG(nn::MoE(4, 8, 4, 5), std::invalid_argument, "[nn::MoE] top_k must be between 1 and the 4 experts; got 5");
  EXPECT_THROW_MSG(nn::MoE(4, 8, 4, 2, 0.0), std::invalid_argument, "capacity_factor must be positive; got 0");
  EXPECT_THROW_MSG(nn::MoE(0, 8, 4), std::invalid_argument, "must be positive; got 0, 8 and 4");
  if (g.size() > 1) {
    EXPECT_THROW_MSG(nn::MoE(4, 8, g.size() + 1, 1, 1.0, g), std::invalid_argument,
                     "cannot be spread evenly over a group of " + std::to_string(g.size()) + " ranks");
  }
  nn::MoE moe(4, 8, 4);
  EXPECT_THROW_MSG(moe.forward(zeros({3, 5})), std::invalid_argument,
                   "[nn::MoE] expects tokens of 4 features (..., 4); got shape (3,5)");
  EXPECT_THROW_MSG(moe.last(), std::logic_error, "has not been called");
  EXPECT_THROW_MSG(nn::average_gradients(moe.parameters(), {"nope"}), std::invalid_argument,
                   "local names not among the gradients: nope");
}

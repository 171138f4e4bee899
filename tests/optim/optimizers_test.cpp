// Every optimizer's first three steps against its published update rule, computed here by hand in
// float64, and (for the PyTorch-named ones) against torch.optim's own float32 results.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>

#include "loom/core/eval.h"
#include "loom/nn/tree.h"
#include "loom/ops/ops.h"
#include "loom/optim/optimizers.h"
#include "../test_utils.h"

using namespace loom;
using namespace loom::optim;
using loom::testing::expect_array;

namespace {

using Vec = std::vector<double>;

// A (2, 3) parameter and three gradients chosen to cover signs, zeros, tiny and large values.
const Vec kP0 = {0.5, -1.25, 2.0, 0.0, 3.0e-3, -7.5};
const std::vector<Vec> kG = {{0.1, -0.2, 0.3, 1e-4, -5.0, 0.0},
                             {-0.3, 0.25, 0.0, 2.0, 1e-3, -0.5},
                             {0.05, 0.05, -1.5, -2.0, 4.0, 1e-6}};

// The parameter after each of the three updates.
std::vector<Vec> run(Optimizer& opt, Dtype dt, Shape shape = {2, 3}) {
  nn::ParamTree params{{"w", array(kP0, shape, dt)}};
  std::vector<Vec> out;
  for (const auto& g : kG) {
    nn::ParamTree grads{{"w", array(g, shape, dt)}};
    params = opt.apply_gradients(grads, params);
    eval(params);
    out.push_back(params["w"].to_vector<double>());
  }
  return out;
}

void expect_close(const std::vector<Vec>& got, const std::vector<Vec>& want, double tol) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t k = 0; k < got.size(); ++k) {
    ASSERT_EQ(got[k].size(), want[k].size());
    for (size_t i = 0; i < got[k].size(); ++i) {
      EXPECT_NEAR(got[k][i], want[k][i], tol * (1 + std::abs(want[k][i]))) << "step " << k + 1 << " element " << i;
    }
  }
}

// float32 results within `ulps` units in the last place of torch's float32 results.
void expect_ulps(const std::vector<Vec>& got, const std::vector<Vec>& want, int ulps) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t k = 0; k < got.size(); ++k) {
    for (size_t i = 0; i < got[k].size(); ++i) {
      const float w = static_cast<float>(want[k][i]);
      const float ulp = std::nextafter(std::abs(w), INFINITY) - std::abs(w);
      EXPECT_LE(std::abs(static_cast<float>(got[k][i]) - w), ulps * ulp)
          << "step " << k + 1 << " element " << i << ": " << got[k][i] << " vs torch " << want[k][i];
    }
  }
}

// Applies `rule(p, g, step)` elementwise for three steps (the state lives in the closure).
std::vector<Vec> reference(const std::function<double(size_t i, double p, double g, int t)>& rule) {
  Vec p = kP0;
  std::vector<Vec> out;
  for (int t = 1; t <= 3; ++t) {
    for (size_t i = 0; i < p.size(); ++i) p[i] = rule(i, p[i], kG[t - 1][i], t);
    out.push_back(p);
  }
  return out;
}

// torch.optim results (float32), generated once with Debian's python3-torch 1.13 by
//   p = torch.tensor(kP0).reshape(2, 3).requires_grad_(); opt = <constructor>([p], ..., foreach=False)
//   for g in kG: p.grad = torch.tensor(g).reshape(2, 3); opt.step(); print(p.flatten().tolist())
// torch 1.13 forms Adam's m as m*b1 + (1-b1)*g (newer releases: lerp) and its add(x, alpha=a) is one
// fused multiply-add, so results agree to a few float32 ulps rather than bit for bit.
const std::vector<Vec> kTorchAdamWDefault = {  // AdamW(lr=1e-3)
    {0.49899500608444214, -1.2489874362945557, 1.998979926109314, -0.0009998999303206801, 0.00399996992200613,
     -7.499924659729004},
    {0.49948418140411377, -1.2491376399993896, 1.9982898235321045, -0.0017440603114664555, 0.004669839050620794,
     -7.499105453491211},
    {0.49975666403770447, -1.2493480443954468, 1.9987947940826416, -0.001698878942988813, 0.004674694035202265,
     -7.49845552444458}};
const std::vector<Vec> kTorchAdamWCustom = {  // AdamW(lr=0.1, betas=(0.3, 0.9), eps=1e-3, weight_decay=0.5)
    {0.375990092754364, -1.087997555732727, 1.8003321886062622, -0.00909090880304575, 0.10283000767230988, -7.125},
    {0.4477807879447937, -1.0975072383880615, 1.6769472360610962, -0.11459606140851974, 0.13118641078472137,
     -6.663010120391846},
    {0.43745675683021545, -1.0843777656555176, 1.70743727684021, -0.04875870794057846, 0.05480993539094925,
     -6.292538166046143}};
const std::vector<Vec> kTorchAdamL2 = {  // Adam(lr=0.05, betas=(0.8, 0.99), eps=1e-6, weight_decay=0.1)
    {0.4500003457069397, -1.2000001668930054, 1.9500000476837158, -0.049504950642585754, 0.05299999564886093,
     -7.450000286102295},
    {0.467904269695282, -1.1853840351104736, 1.9063668251037598, -0.08869187533855438, 0.08445657044649124,
     -7.4001922607421875},
    {0.4691832959651947, -1.1681463718414307, 1.9271925687789917, -0.08353035897016525, 0.07994497567415237,
     -7.351966857910156}};
const std::vector<Vec> kTorchSGDNesterov = {  // SGD(lr=0.1, momentum=0.9, weight_decay=0.01, nesterov=True)
    {0.4800499975681305, -1.209625005722046, 1.9392000436782837, -1.8999999156221747e-05, 0.9529942870140076,
     -7.485750198364258},
    {0.5276328921318054, -1.2376142740249634, 1.9095956087112427, -0.38002702593803406, 1.3559911251068115,
     -7.370452404022217},
    {0.5333870649337769, -1.2485417127609253, 2.1660685539245605, -0.1613122671842575, 0.9570596218109131,
     -7.304417610168457}};
const std::vector<Vec> kTorchSGDDampening = {  // SGD(lr=0.1, momentum=0.5, dampening=0.25)
    {0.49000000953674316, -1.2300000190734863, 1.9700000286102295, -9.999999747378752e-06, 0.503000020980835, -7.5},
    {0.5074999928474426, -1.2387499809265137, 1.9550000429153442, -0.1500149965286255, 0.7529250383377075,
     -7.462500095367432},
    {0.512499988079071, -1.2468749284744263, 2.059999942779541, -0.07501748949289322, 0.5778875350952148,
     -7.443750381469727}};
const std::vector<Vec> kTorchAdagrad = {  // Adagrad(lr=0.1, lr_decay=0.5, weight_decay=0.02, initial_accumulator_value=0.1)
    {0.4671458899974823, -1.192025899887085, 1.9267758131027222, -3.162277425872162e-05, 0.10280059278011322,
     -7.4571428298950195},
    {0.5108495950698853, -1.2255913019180298, 1.9212619066238403, -0.06588026136159897, 0.10275992751121521,
     -7.398462295532227},
    {0.5041206479072571, -1.228423833847046, 1.9688999652862549, -0.030732128769159317, 0.07155318558216095,
     -7.388626575469971}};
const std::vector<Vec> kTorchRMSprop = {  // RMSprop(lr=0.01, alpha=0.9, weight_decay=0.01, momentum=0.5, centered=True)
    {0.46666666865348816, -1.2166666984558105, 1.9666666984558105, -0.03332222253084183, 0.03633332997560501,
     -7.4666666984558105},
    {0.48060640692710876, -1.2241498231887817, 1.9478423595428467, -0.08331683278083801, 0.052990470081567764,
     -7.4164886474609375},
    {0.4817618429660797, -1.2319101095199585, 1.9705067873001099, -0.08536012470722198, 0.04030831903219223,
     -7.386841773986816}};

// ---- the published rules, in float64 ----

std::vector<Vec> adam_rule(double lr, double b1, double b2, double eps, double wd, bool decoupled, bool bc) {
  auto m = std::make_shared<Vec>(6, 0.0), v = std::make_shared<Vec>(6, 0.0);
  return reference([=](size_t i, double p, double g, int t) {
    if (decoupled) p *= 1 - lr * wd;
    else g += wd * p;
    (*m)[i] = b1 * (*m)[i] + (1 - b1) * g;
    (*v)[i] = b2 * (*v)[i] + (1 - b2) * g * g;
    if (!bc) return p - lr * (*m)[i] / (std::sqrt((*v)[i]) + eps);
    const double mhat = (*m)[i] / (1 - std::pow(b1, t)), vhat = (*v)[i] / (1 - std::pow(b2, t));
    return p - lr * mhat / (std::sqrt(vhat) + eps);
  });
}

std::vector<Vec> sgd_rule(double lr, double mu, double wd, double damp, bool nesterov) {
  auto b = std::make_shared<Vec>(6, 0.0);
  return reference([=](size_t i, double p, double g, int t) {
    double d = g + wd * p;
    if (mu != 0) {
      (*b)[i] = t == 1 ? d : mu * (*b)[i] + (1 - damp) * d;
      d = nesterov ? d + mu * (*b)[i] : (*b)[i];
    }
    return p - lr * d;
  });
}

}  // namespace

// ---- AdamW ----

TEST(AdamW, FirstStepsMatchTheRuleAndPyTorch) {
  {
    AdamW opt(1e-3);  // PyTorch's defaults: betas (0.9, 0.999), eps 1e-8, weight_decay 0.01, bias correction
    expect_close(run(opt, float64), adam_rule(1e-3, 0.9, 0.999, 1e-8, 0.01, true, true), 1e-13);
    AdamW opt32(1e-3);
    const auto got = run(opt32, float32);
    expect_ulps(got, kTorchAdamWDefault, 2);
    // Bias correction makes the first step lr * sign(g) (up to eps) after the decay.
    EXPECT_NEAR(got[0][0], 0.5 * (1 - 1e-5) - 1e-3, 1e-7);
  }
  {
    AdamW opt(0.1, {0.3, 0.9}, 1e-3, 0.5);  // beta1 < 0.5 takes torch.lerp's other branch
    expect_close(run(opt, float64), adam_rule(0.1, 0.3, 0.9, 1e-3, 0.5, true, true), 1e-13);
    AdamW opt32(0.1, {0.3, 0.9}, 1e-3, 0.5);
    expect_ulps(run(opt32, float32), kTorchAdamWCustom, 2);
  }
  {
    AdamW opt(0.01, {0.9, 0.999}, 1e-8, 0.1, /*bias_correction=*/false);  // MLX's default form
    expect_close(run(opt, float64), adam_rule(0.01, 0.9, 0.999, 1e-8, 0.1, true, false), 1e-13);
  }
}

TEST(Adam, FirstStepsMatchTheRuleAndPyTorch) {
  Adam opt(0.05, {0.8, 0.99}, 1e-6, 0.1);  // L2 weight decay, added to the gradient
  expect_close(run(opt, float64), adam_rule(0.05, 0.8, 0.99, 1e-6, 0.1, false, true), 1e-13);
  Adam opt32(0.05, {0.8, 0.99}, 1e-6, 0.1);
  expect_ulps(run(opt32, float32), kTorchAdamL2, 2);
  Adam plain(0.01, {0.9, 0.999}, 1e-8, 0.0, false);
  expect_close(run(plain, float64), adam_rule(0.01, 0.9, 0.999, 1e-8, 0.0, false, false), 1e-13);
  EXPECT_STREQ(Adam().name(), "Adam");
  EXPECT_STREQ(AdamW().name(), "AdamW");
}

TEST(AdamW, HalfPrecisionComputesInFloat) {
  AdamW opt(0.1, {0.3, 0.9}, 1e-3, 0.5);
  const auto got16 = run(opt, float16);
  const auto want = adam_rule(0.1, 0.3, 0.9, 1e-3, 0.5, true, true);
  expect_close(got16, want, 4e-3);  // float16 keeps ~3 decimal digits between steps
  AdamW optb(0.1, {0.3, 0.9}, 1e-3, 0.5);
  expect_close(run(optb, bfloat16), want, 3e-2);
}

// ---- SGD ----

TEST(SGD, FirstStepsMatchTheRuleAndPyTorch) {
  SGD plain(0.1);
  expect_close(run(plain, float64), sgd_rule(0.1, 0, 0, 0, false), 1e-14);
  EXPECT_EQ(plain.state().size(), 1u);  // no momentum: only the step

  SGD nest(0.1, 0.9, 0.01, 0.0, true);
  expect_close(run(nest, float64), sgd_rule(0.1, 0.9, 0.01, 0, true), 1e-14);
  SGD nest32(0.1, 0.9, 0.01, 0.0, true);
  expect_ulps(run(nest32, float32), kTorchSGDNesterov, 4);  // torch fuses a + alpha * b into an fma

  SGD damp(0.1, 0.5, 0.0, 0.25);
  expect_close(run(damp, float64), sgd_rule(0.1, 0.5, 0, 0.25, false), 1e-14);
  SGD damp32(0.1, 0.5, 0.0, 0.25);
  expect_ulps(run(damp32, float32), kTorchSGDDampening, 4);
  // PyTorch's first buffer is the gradient itself (no dampening on step 1): 0.5 - 0.1 * 0.1.
  SGD first(0.1, 0.5, 0.0, 0.25);
  nn::ParamTree p{{"w", array({0.5}, float64)}};
  p = first.apply_gradients({{"w", array({0.1}, float64)}}, p);
  expect_array(p["w"], {1}, {0.49}, 1e-15);
  expect_array(first.state()["w.v"], {1}, {0.1}, 1e-15);
}

// ---- Adagrad ----

TEST(Adagrad, FirstStepsMatchTheRuleAndPyTorch) {
  const double lr = 0.1, lr_decay = 0.5, wd = 0.02, init = 0.1, eps = 1e-10;
  auto s = std::make_shared<Vec>(6, init);
  const auto want = reference([=](size_t i, double p, double g, int t) {
    g += wd * p;
    (*s)[i] += g * g;
    return p - lr / (1 + (t - 1) * lr_decay) * g / (std::sqrt((*s)[i]) + eps);
  });
  Adagrad opt(lr, eps, wd, lr_decay, init);
  expect_close(run(opt, float64), want, 1e-14);
  Adagrad opt32(lr, eps, wd, lr_decay, init);
  expect_ulps(run(opt32, float32), kTorchAdagrad, 2);
  // MLX's form (no decay terms): the first step is lr * g / |g|.
  Adagrad simple(0.5);
  nn::ParamTree p{{"w", array({1.0, 1.0}, float64)}};
  p = simple.apply_gradients({{"w", array({2.0, -0.25}, float64)}}, p);
  expect_array(p["w"], {2}, {0.5, 1.5}, 1e-9);
}

// ---- RMSprop ----

TEST(RMSprop, FirstStepsMatchTheRuleAndPyTorch) {
  {
    const double lr = 0.01, alpha = 0.9, eps = 1e-8, wd = 0.01, mu = 0.5;
    auto v = std::make_shared<Vec>(6, 0.0), a = std::make_shared<Vec>(6, 0.0), b = std::make_shared<Vec>(6, 0.0);
    const auto want = reference([=](size_t i, double p, double g, int) {
      g += wd * p;
      (*v)[i] = alpha * (*v)[i] + (1 - alpha) * g * g;
      (*a)[i] = alpha * (*a)[i] + (1 - alpha) * g;
      const double d = std::sqrt((*v)[i] - (*a)[i] * (*a)[i]) + eps;
      (*b)[i] = mu * (*b)[i] + g / d;
      return p - lr * (*b)[i];
    });
    RMSprop opt(lr, alpha, eps, wd, mu, true);
    expect_close(run(opt, float64), want, 1e-13);
    RMSprop opt32(lr, alpha, eps, wd, mu, true);
    expect_ulps(run(opt32, float32), kTorchRMSprop, 4);
    const auto names = opt.state().names();
    EXPECT_EQ(names, (std::vector<std::string>{"step", "w.v", "w.grad_avg", "w.buf"}));
  }
  {
    // MLX's RMSprop: v = a v + (1 - a) g^2, p -= lr g / (sqrt(v) + eps).
    auto v = std::make_shared<Vec>(6, 0.0);
    const auto want = reference([=](size_t i, double p, double g, int) {
      (*v)[i] = 0.99 * (*v)[i] + 0.01 * g * g;
      return p - 0.01 * g / (std::sqrt((*v)[i]) + 1e-8);
    });
    RMSprop opt(0.01);
    expect_close(run(opt, float64), want, 1e-13);
  }
}

// ---- Lion ----

TEST(Lion, FirstStepsMatchTheRule) {
  const double lr = 0.1, b1 = 0.9, b2 = 0.99, wd = 0.5;
  auto m = std::make_shared<Vec>(6, 0.0);
  const auto want = reference([=](size_t i, double p, double g, int) {
    const double c = b1 * (*m)[i] + (1 - b1) * g;
    (*m)[i] = b2 * (*m)[i] + (1 - b2) * g;
    const double sign = c > 0 ? 1.0 : c < 0 ? -1.0 : 0.0;
    return p * (1 - lr * wd) - lr * sign;
  });
  Lion opt(lr, {b1, b2}, wd);
  expect_close(run(opt, float64), want, 1e-14);
  // Step 1 by hand: c = 0.1 g, so p1 = 0.95 p - 0.1 sign(g); the zero gradient leaves 0.95 p.
  EXPECT_NEAR(want[0][0], 0.475 - 0.1, 1e-15);
  EXPECT_NEAR(want[0][5], -7.125, 1e-15);
}

// ---- Adafactor ----

namespace {

// MLX's Adafactor on the (2, 3) parameter (factored) in float64.
std::vector<Vec> adafactor_rule(std::optional<double> lr, double clip, std::optional<double> beta1, double wd,
                                bool scale, bool relative, bool warmup) {
  Vec p = kP0, row(2, 0.0), col(3, 0.0), ea(6, 0.0);
  std::vector<Vec> out;
  auto rms = [](const Vec& x) {
    double s = 0;
    for (double e : x) s += e * e;
    return std::sqrt(s / x.size());
  };
  for (int t = 1; t <= 3; ++t) {
    const Vec& g = kG[t - 1];
    double rel = relative ? std::min(warmup ? 1e-6 * t : 1e-2, 1 / std::sqrt(t)) : *lr;
    const double step_size = scale ? std::max(1e-3, rms(p)) * rel : rel;
    const double beta2 = 1 - std::pow(t, -0.8);
    Vec u(6);
    for (int i = 0; i < 6; ++i) u[i] = g[i] * g[i] + 1e-30;
    for (int r = 0; r < 2; ++r) row[r] = beta2 * row[r] + (1 - beta2) * (u[3 * r] + u[3 * r + 1] + u[3 * r + 2]) / 3;
    for (int c = 0; c < 3; ++c) col[c] = beta2 * col[c] + (1 - beta2) * (u[c] + u[3 + c]) / 2;
    const double row_mean = (row[0] + row[1]) / 2;
    for (int r = 0; r < 2; ++r) {
      for (int c = 0; c < 3; ++c) u[3 * r + c] = 1 / std::sqrt(row[r] / row_mean) / std::sqrt(col[c]) * g[3 * r + c];
    }
    const double denom = std::max(1.0, rms(u) / clip);
    for (double& e : u) e = step_size * e / denom;
    if (beta1) {
      for (int i = 0; i < 6; ++i) ea[i] = *beta1 * ea[i] + (1 - *beta1) * u[i];
      u = ea;
    }
    for (int i = 0; i < 6; ++i) p[i] = p[i] - wd * step_size * p[i] - u[i];
    out.push_back(p);
  }
  return out;
}

}  // namespace

TEST(Adafactor, FactoredFirstStepsMatchTheRule) {
  Adafactor opt;  // relative step 1e-2 scaled by RMS(p), no first moment
  expect_close(run(opt, float64), adafactor_rule(std::nullopt, 1.0, std::nullopt, 0.0, true, true, false), 1e-12);
  const auto st = opt.state();
  EXPECT_EQ(st.names(), (std::vector<std::string>{"step", "w.exp_avg_sq_row", "w.exp_avg_sq_col"}));
  EXPECT_EQ(st["w.exp_avg_sq_row"].shape(), Shape{2});
  EXPECT_EQ(st["w.exp_avg_sq_col"].shape(), Shape{3});

  Adafactor custom(0.05, {1e-30, 1e-3}, 0.5, -0.8, 0.9, 0.1, false, false, false);
  expect_close(run(custom, float64), adafactor_rule(0.05, 0.5, 0.9, 0.1, false, false, false), 1e-12);
  EXPECT_TRUE(custom.state().contains("w.exp_avg"));

  Adafactor warm(std::nullopt, {1e-30, 1e-3}, 1.0, -0.8, std::nullopt, 0.0, true, true, true);
  expect_close(run(warm, float64), adafactor_rule(std::nullopt, 1.0, std::nullopt, 0.0, true, true, true), 1e-12);

  // The first step by hand: beta2 = 0, so the update is g / |g| up to the row/column factorisation;
  // a (1, 1) parameter makes that exact: p - 1e-2 * max(1e-3, |p|) * sign(g).
  Adafactor one;
  nn::ParamTree p{{"w", array({2.0}, {1, 1}, float64)}};
  p = one.apply_gradients({{"w", array({-3.0}, {1, 1}, float64)}}, p);
  expect_array(p["w"], {1, 1}, {2.0 + 0.02}, 1e-12);
}

TEST(Adafactor, UnfactoredAndBatchedParameters) {
  // A 1-d parameter keeps exp_avg_sq: the first update is step_size * g / sqrt(g^2 + 1e-30), clipped
  // by the update's RMS (which is 1 here, so no clipping at threshold 1).
  Adafactor opt;
  nn::ParamTree p{{"b", array({1.0, -2.0, 0.5}, float64)}};
  p = opt.apply_gradients({{"b", array({0.5, -4.0, 1.0}, float64)}}, p);
  const double rms_p = std::sqrt((1.0 + 4.0 + 0.25) / 3);
  expect_array(p["b"], {3}, {1.0 - 1e-2 * rms_p, -2.0 + 1e-2 * rms_p, 0.5 - 1e-2 * rms_p}, 1e-12);
  EXPECT_EQ(opt.state()["b.exp_avg_sq"].shape(), Shape{3});

  // A (2, 2, 3) parameter factors each leading slice on its own: the same as two (2, 3) parameters.
  Adafactor batched, single;
  Vec both = kP0;
  both.insert(both.end(), kP0.begin(), kP0.end());
  Vec gboth = kG[0];
  for (double g : kG[0]) gboth.push_back(2 * g);
  nn::ParamTree pb{{"w", array(both, {2, 2, 3}, float64)}};
  pb = batched.apply_gradients({{"w", array(gboth, {2, 2, 3}, float64)}}, pb);
  EXPECT_EQ(batched.state()["w.exp_avg_sq_row"].shape(), (Shape{2, 2}));
  EXPECT_EQ(batched.state()["w.exp_avg_sq_col"].shape(), (Shape{2, 3}));
  auto got = pb["w"].to_vector<double>();
  // Slice 0 sees gradient g, slice 1 sees 2 g: the factored estimate scales the update back to the
  // same step, and both slices share the parameter RMS.
  for (int i = 0; i < 6; ++i) EXPECT_NEAR(got[i], got[6 + i], 1e-12) << i;
}

// ---- the Optimizer base ----

TEST(Optimizer, StateNamesShapesAndStep) {
  AdamW opt(1e-2);
  nn::ParamTree params{{"l1.weight", ones({3, 2})}, {"l1.bias", zeros({3})}};
  nn::ParamTree grads{{"l1.weight", full({3, 2}, 0.5f)}, {"l1.bias", ones({3})}};
  EXPECT_EQ(opt.state().names(), (std::vector<std::string>{"step"}));
  params = opt.apply_gradients(grads, params);
  params = opt.apply_gradients(grads, params);
  const auto st = opt.state();
  EXPECT_EQ(st.names(),
            (std::vector<std::string>{"step", "l1.weight.m", "l1.weight.v", "l1.bias.m", "l1.bias.v"}));
  EXPECT_EQ(st["step"].dtype(), int64);
  EXPECT_EQ(st["step"].ndim(), 0u);
  EXPECT_EQ(st["step"].item<int64_t>(), 2);
  EXPECT_EQ(opt.step(), 2);
  EXPECT_EQ(st["l1.weight.v"].shape(), (Shape{3, 2}));
  EXPECT_EQ(st["l1.weight.m"].dtype(), float32);
  // m after two constant gradients: (1 - 0.9^2) g.
  expect_array(st["l1.bias.m"], {3}, {0.19, 0.19, 0.19}, 1e-6);
}

TEST(Optimizer, SetStateRestoresAndContinuesIdentically) {
  nn::ParamTree p0{{"w", array(kP0, {2, 3}, float32)}};
  AdamW a(0.1, {0.3, 0.9}, 1e-3, 0.5);
  nn::ParamTree pa = a.apply_gradients({{"w", array(kG[0], {2, 3}, float32)}}, p0);
  pa = a.apply_gradients({{"w", array(kG[1], {2, 3}, float32)}}, pa);
  eval(pa, a.state());

  AdamW b(0.1, {0.3, 0.9}, 1e-3, 0.5);
  b.set_state(a.state());
  EXPECT_EQ(b.step(), 2);
  nn::ParamTree pb = pa;
  pa = a.apply_gradients({{"w", array(kG[2], {2, 3}, float32)}}, pa);
  pb = b.apply_gradients({{"w", array(kG[2], {2, 3}, float32)}}, pb);
  EXPECT_EQ(pa["w"].to_vector<float>(), pb["w"].to_vector<float>());
  EXPECT_EQ(a.state()["w.v"].to_vector<float>(), b.state()["w.v"].to_vector<float>());
}

TEST(Optimizer, CheckStateAgainstTheParameters) {
  nn::ParamTree params{{"w", zeros({2, 3})}, {"b", zeros({3})}};
  AdamW adam;
  adam.check_state({{"step", array(int64_t(4))}, {"w.m", zeros({2, 3})}, {"b.v", zeros({3})}}, params);
  EXPECT_THROW_MSG(adam.check_state({{"step", array(int64_t(4))}, {"w.m", zeros({3, 2})}, {"c.v", zeros({3})},
                                     {"b.x", zeros({3})}},
                                    params),
                   std::invalid_argument,
                   "[AdamW::check_state] state that does not fit the parameters: w.m (shape (3,2), parameter w of shape "
                   "(2,3) needs (2,3)), c.v (no parameter c), b.x (no AdamW slot)");
  // Adafactor keeps factored moments for matrices and a full one for vectors.
  Adafactor ada;
  ada.check_state({{"step", array(int64_t(1))}, {"w.exp_avg_sq_row", zeros({2})}, {"w.exp_avg_sq_col", zeros({3})},
                   {"b.exp_avg_sq", zeros({3})}},
                  params);
  EXPECT_THROW_MSG(ada.check_state({{"step", array(int64_t(1))}, {"w.exp_avg_sq_row", zeros({3})},
                                    {"w.exp_avg_sq", zeros({2, 3})}},
                                   params),
                   std::invalid_argument,
                   "w.exp_avg_sq_row (shape (3), parameter w of shape (2,3) needs (2)), w.exp_avg_sq (parameter w of "
                   "shape (2,3) keeps no 'exp_avg_sq')");
}

TEST(Optimizer, SetStateErrors) {
  AdamW opt;
  EXPECT_THROW_MSG(opt.set_state({{"w.m", zeros({2})}}), std::invalid_argument,
                   "[AdamW::set_state] the state has no 'step' entry");
  EXPECT_THROW_MSG(opt.set_state({{"step", array(1.5f)}}), std::invalid_argument, "'step' must be an integer scalar");
  EXPECT_THROW_MSG(opt.set_state({{"step", array(int64_t(-1))}}), std::invalid_argument,
                   "'step' must be non-negative, got -1");
  EXPECT_THROW_MSG(opt.set_state({{"step", array(int64_t(1))}, {"w.momentum", zeros({2})}}), std::invalid_argument,
                   "names that are not AdamW state (slots m, v): w.momentum");
  // Once the optimizer holds state, a state must match it name for name and shape for shape.
  nn::ParamTree params{{"w", zeros({2})}};
  params = opt.apply_gradients({{"w", ones({2})}}, params);
  EXPECT_THROW_MSG(opt.set_state({{"step", array(int64_t(1))}, {"w.m", zeros({3})}, {"x.v", zeros({2})}}),
                   std::invalid_argument, "missing: w.v; unexpected: x.v; wrong shapes: w.m (3) instead of (2)");
  EXPECT_EQ(opt.step(), 1);  // unchanged by the failed calls
  // A fresh optimizer takes any names of its slots and checks shapes at the next update.
  AdamW fresh;
  fresh.set_state({{"step", array(int64_t(4))}, {"w.m", zeros({3})}, {"w.v", zeros({3})}});
  EXPECT_THROW_MSG(fresh.apply_gradients({{"w", ones({2})}}, {{"w", zeros({2})}}), std::invalid_argument,
                   "state 'w.m' has shape (3) but parameter 'w' of shape (2) needs (2)");
  EXPECT_EQ(fresh.step(), 4);
  Adafactor af;
  af.set_state({{"step", array(int64_t(0))}, {"b.exp_avg_sq_row", zeros({3})}});
  EXPECT_THROW_MSG(af.apply_gradients({{"b", ones({3})}}, {{"b", ones({3})}}), std::invalid_argument,
                   "state 'b.exp_avg_sq_row' cannot belong to parameter 'b' of shape (3)");
}

TEST(Optimizer, MismatchedGradientsListTheNames) {
  SGD opt(0.1);
  nn::ParamTree params{{"a", zeros({2})}, {"b", zeros({2})}, {"c", zeros({1})}};
  nn::ParamTree grads{{"a", zeros({2})}, {"x", zeros({2})}, {"c", zeros({1})}};
  EXPECT_THROW_MSG(opt.apply_gradients(grads, params), std::invalid_argument,
                   "[SGD::apply_gradients] the gradients and parameters must have the same names; only in the "
                   "gradients: x; only in the parameters: b");
  nn::ParamTree wrong{{"a", zeros({3})}, {"b", zeros({2})}, {"c", zeros({1})}};
  EXPECT_THROW_MSG(opt.apply_gradients(wrong, params), std::invalid_argument,
                   "mismatched gradients: a (gradient (3), parameter (2))");
  nn::ParamTree ints{{"i", array({1, 2})}};
  EXPECT_THROW_MSG(opt.apply_gradients(ints, ints), std::invalid_argument, "parameter dtype int32 is not floating point");
  EXPECT_EQ(opt.step(), 0);
  // Gradients of another float dtype are cast to the parameter's.
  nn::ParamTree p16{{"h", array({1.0f, 2.0f}, float16)}};
  auto out = opt.apply_gradients({{"h", array({10.0, 20.0}, float64)}}, p16);
  EXPECT_EQ(out["h"].dtype(), float16);
  expect_array(out["h"], {2}, {0.0, 0.0}, 1e-3);
}

TEST(Optimizer, BadHyperParameters) {
  EXPECT_THROW_MSG(SGD(-0.1), std::invalid_argument, "[SGD] learning_rate must be finite and >= 0, got -0.1");
  EXPECT_THROW_MSG(SGD(0.1, -0.5), std::invalid_argument, "[SGD] momentum must be finite and >= 0, got -0.5");
  EXPECT_THROW_MSG(SGD(0.1, 0.9, 0.0, 1.5), std::invalid_argument, "[SGD] dampening must be in [0, 1], got 1.5");
  EXPECT_THROW_MSG(SGD(0.1, 0.0, 0.0, 0.0, true), std::invalid_argument,
                   "[SGD] nesterov needs momentum > 0 and dampening 0, got momentum 0 and dampening 0");
  EXPECT_THROW_MSG(AdamW(NAN), std::invalid_argument, "[AdamW] learning_rate must be finite and >= 0, got nan");
  EXPECT_THROW_MSG(AdamW(-1e-3), std::invalid_argument, "[AdamW] learning_rate must be finite and >= 0, got -0.001");
  EXPECT_THROW_MSG(AdamW(1e-3, {1.0, 0.999}), std::invalid_argument, "[AdamW] beta1 must be in [0, 1), got 1");
  EXPECT_THROW_MSG(AdamW(1e-3, {0.9, -0.1}), std::invalid_argument, "[AdamW] beta2 must be in [0, 1), got -0.1");
  EXPECT_THROW_MSG(AdamW(1e-3, {0.9, 0.999}, -1e-8), std::invalid_argument, "[AdamW] eps must be finite and >= 0");
  EXPECT_THROW_MSG(AdamW(1e-3, {0.9, 0.999}, 1e-8, -0.01), std::invalid_argument,
                   "[AdamW] weight_decay must be finite and >= 0, got -0.01");
  EXPECT_THROW_MSG(Adam(1e-3, {0.9, 1.5}), std::invalid_argument, "[Adam] beta2 must be in [0, 1), got 1.5");
  EXPECT_THROW_MSG(Adagrad(0.1, -1.0), std::invalid_argument, "[Adagrad] eps must be finite and >= 0, got -1");
  EXPECT_THROW_MSG(Adagrad(0.1, 1e-10, 0.0, -0.5), std::invalid_argument, "[Adagrad] lr_decay must be finite and >= 0");
  EXPECT_THROW_MSG(RMSprop(0.1, 1.5), std::invalid_argument, "[RMSprop] alpha must be in [0, 1], got 1.5");
  EXPECT_THROW_MSG(RMSprop(0.1, 0.9, 1e-8, 0.0, -1.0), std::invalid_argument, "[RMSprop] momentum must be finite");
  EXPECT_THROW_MSG(Lion(-1.0), std::invalid_argument, "[Lion] learning_rate must be finite and >= 0, got -1");
  EXPECT_THROW_MSG(Lion(1e-4, {0.9, 2.0}), std::invalid_argument, "[Lion] beta2 must be in [0, 1], got 2");
  EXPECT_THROW_MSG(Adafactor(std::nullopt, {1e-30, 1e-3}, 1.0, -0.8, std::nullopt, 0.0, true, false),
                   std::invalid_argument, "[Adafactor] relative_step=false needs a learning rate");
  EXPECT_THROW_MSG(Adafactor(std::nullopt, {1e-30, 1e-3}, 0.0), std::invalid_argument,
                   "[Adafactor] clip_threshold must be finite and > 0, got 0");
  EXPECT_THROW_MSG(Adafactor(std::nullopt, {1e-30, 1e-3}, 1.0, 0.5), std::invalid_argument,
                   "[Adafactor] decay_rate must be finite and <= 0, got 0.5");
  EXPECT_THROW_MSG(Adafactor(std::nullopt, {1e-30, 1e-3}, 1.0, -0.8, 1.0), std::invalid_argument,
                   "[Adafactor] beta_1 must be in [0, 1), got 1");
}

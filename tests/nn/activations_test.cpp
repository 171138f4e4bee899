#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "loom/loom.h"
#include "loom/nn/activations.h"
#include "../test_utils.h"

using namespace loom;
using loom::testing::expect_array;

namespace {

const std::vector<double> kPoints = {-3.0, -1.0, -0.5, 0.0, 0.25, 1.0, 2.5};

// Applies `ref` (scalar math from <cmath>) to every point.
std::vector<double> mapped(const std::function<double(double)>& ref, const std::vector<double>& xs = kPoints) {
  std::vector<double> out;
  for (double x : xs) out.push_back(ref(x));
  return out;
}

array points(Dtype dtype = float32) { return array(kPoints, {static_cast<int>(kPoints.size())}, dtype); }

double sigmoid_ref(double x) { return 1.0 / (1.0 + std::exp(-x)); }
double softplus_ref(double x) { return std::log1p(std::exp(x)); }

}  // namespace

TEST(Activations, PiecewiseLinear) {
  expect_array(nn::relu(points()), {7}, {0, 0, 0, 0, 0.25, 1, 2.5});
  expect_array(nn::relu6(array({-1.0f, 3.0f, 7.0f})), {3}, {0, 3, 6});
  expect_array(nn::leaky_relu(points()), {7}, {-0.03, -0.01, -0.005, 0, 0.25, 1, 2.5});
  expect_array(nn::leaky_relu(array({-2.0f, 3.0f}), 0.2), {2}, {-0.4, 3});
  // A slope above 1 still takes the negative branch only for x < 0.
  expect_array(nn::leaky_relu(array({-2.0f, 3.0f}), 2.0), {2}, {-4, 3});
  expect_array(nn::hard_tanh(array({-3.0f, -0.5f, 0.7f, 4.0f})), {4}, {-1, -0.5, 0.7, 1});
  expect_array(nn::hard_tanh(array({-3.0f, 0.5f, 4.0f}), 0.0, 2.0), {3}, {0, 0.5, 2});
  expect_array(nn::hardswish(array({-4.0f, -1.0f, 0.0f, 1.0f, 4.0f})), {5}, {0, -1.0 / 3, 0, 2.0 / 3, 4});
  expect_array(nn::prelu(array({-2.0f, 3.0f}), array({0.25f})), {2}, {-0.5, 3});
  // Integer inputs keep their dtype where the function has integer constants.
  array ri = nn::relu(array({-2, 3}));
  EXPECT_EQ(ri.dtype(), int32);
  expect_array(ri, {2}, {0, 3});
  EXPECT_THROW_MSG(nn::hard_tanh(points(), 1.0, -1.0), std::invalid_argument, "min_val 1 is greater than max_val -1");
}

TEST(Activations, SmoothFunctionsMatchClosedForms) {
  expect_array(nn::gelu(points()), {7}, mapped([](double x) { return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0))); }),
               1e-6);
  // Well-known values: Phi(1) = 0.841344746..., so gelu(1) = 0.841344746 and gelu(-1) = -0.158655254.
  expect_array(nn::gelu(array({1.0, -1.0}, float64)), {2}, {0.8413447460685429, -0.15865525393145707}, 1e-12);
  expect_array(nn::gelu_approx(points()), {7}, mapped([](double x) {
                 return 0.5 * x * (1 + std::tanh(std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x)));
               }),
               1e-6);
  // The tanh approximation stays within 5e-4 of the exact GELU on [-3, 2.5].
  auto approx = nn::gelu_approx(points()).to_vector<double>();
  auto exact = nn::gelu(points()).to_vector<double>();
  for (size_t i = 0; i < approx.size(); ++i) EXPECT_NEAR(approx[i], exact[i], 5e-4);
  expect_array(nn::gelu_fast_approx(points()), {7}, mapped([](double x) { return x * sigmoid_ref(1.702 * x); }));
  expect_array(nn::silu(points()), {7}, mapped([](double x) { return x * sigmoid_ref(x); }));
  expect_array(nn::silu(array({1.0}, float64)), {1}, {0.7310585786300049}, 1e-12);
  expect_array(nn::sigmoid(points()), {7}, mapped(sigmoid_ref));
  expect_array(nn::tanh(points()), {7}, mapped([](double x) { return std::tanh(x); }));
  expect_array(nn::softplus(points()), {7}, mapped(softplus_ref));
  expect_array(nn::softplus(array({0.0}, float64)), {1}, {M_LN2}, 1e-12);
  expect_array(nn::log_sigmoid(points()), {7}, mapped([](double x) { return std::log(sigmoid_ref(x)); }));
  expect_array(nn::softsign(points()), {7}, mapped([](double x) { return x / (1 + std::abs(x)); }));
  expect_array(nn::mish(points()), {7}, mapped([](double x) { return x * std::tanh(softplus_ref(x)); }));
  expect_array(nn::elu(points()), {7}, mapped([](double x) { return x > 0 ? x : std::exp(x) - 1; }));
  expect_array(nn::elu(points(), 0.5), {7}, mapped([](double x) { return x > 0 ? x : 0.5 * (std::exp(x) - 1); }));
  expect_array(nn::celu(points(), 2.0), {7},
               mapped([](double x) { return std::max(x, 0.0) + 2.0 * (std::exp(std::min(x, 0.0) / 2.0) - 1); }));
  expect_array(nn::selu(points()), {7}, mapped([](double x) {
                 return 1.0507009873554805 * (x > 0 ? x : 1.6732632423543772 * (std::exp(x) - 1));
               }));
  EXPECT_THROW_MSG(nn::celu(points(), 0.0), std::invalid_argument, "alpha must not be 0");
}

TEST(Activations, ExtremeInputsStayFinite) {
  array big({-1000.0f, -100.0f, 100.0f, 1000.0f});
  expect_array(nn::softplus(big), {4}, {0, 0, 100, 1000});
  expect_array(nn::log_sigmoid(big), {4}, {-1000, -100, 0, 0});
  expect_array(nn::mish(big), {4}, {0, 0, 100, 1000});
  expect_array(nn::elu(big), {4}, {-1, -1, 100, 1000});
  expect_array(nn::silu(big), {4}, {0, 0, 100, 1000});
  expect_array(nn::gelu(big), {4}, {0, 0, 100, 1000});
  // The gradient of elu at a large positive input is 1, not the NaN of inf * 0.
  auto g = grad([](const array& x) { return sum(nn::elu(x)); })(array({100.0f, 1000.0f, -1000.0f}));
  expect_array(g, {3}, {1, 1, 0});
  auto gs = grad([](const array& x) { return sum(nn::softplus(x)); })(array({1000.0f, -1000.0f, 0.5f}));
  expect_array(gs, {3}, {1, 0, 0.6224593312018546});
}

TEST(Activations, DtypesAndStridedInputs) {
  array h = nn::gelu(points(float16));
  EXPECT_EQ(h.dtype(), float16);
  expect_array(h, {7}, mapped([](double x) { return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0))); }), 2e-3);
  array d = nn::silu(points(float64));
  EXPECT_EQ(d.dtype(), float64);
  expect_array(d, {7}, mapped([](double x) { return x * sigmoid_ref(x); }), 1e-12);
  EXPECT_EQ(nn::mish(points(bfloat16)).dtype(), bfloat16);
  // A transposed (non-contiguous) input.
  array m = transpose(array({-1.0f, 2.0f, -3.0f, 4.0f, -5.0f, 6.0f}, {2, 3}));
  expect_array(nn::relu(m), {3, 2}, {0, 4, 2, 0, 0, 6});
  expect_array(nn::softsign(m), {3, 2}, {-0.5, 0.8, 2.0 / 3, -5.0 / 6, -0.75, 6.0 / 7});
  // Empty arrays pass through.
  EXPECT_EQ(nn::gelu(zeros({0, 3})).shape(), (Shape{0, 3}));
}

TEST(Activations, SoftmaxFamilyAndGlu) {
  array x({1.0f, 2.0f, 3.0f, 1.0f, 1.0f, 1.0f}, {2, 3});
  double z = std::exp(1.0) + std::exp(2.0) + std::exp(3.0);
  expect_array(nn::softmax(x), {2, 3},
               {std::exp(1.0) / z, std::exp(2.0) / z, std::exp(3.0) / z, 1.0 / 3, 1.0 / 3, 1.0 / 3});
  expect_array(nn::log_softmax(x), {2, 3},
               {1 - std::log(z), 2 - std::log(z), 3 - std::log(z), -std::log(3.0), -std::log(3.0), -std::log(3.0)});
  expect_array(nn::softmax(x, 0), {2, 3}, {0.5, sigmoid_ref(1), sigmoid_ref(2), 0.5, sigmoid_ref(-1), sigmoid_ref(-2)});
  // glu: a * sigmoid(b) with a, b the halves of the axis.
  expect_array(nn::glu(array({1.0f, 2.0f, 3.0f, 4.0f})), {2}, {sigmoid_ref(3), 2 * sigmoid_ref(4)});
  expect_array(nn::glu(array({1.0f, 2.0f, 3.0f, 4.0f}, {2, 2}), 0), {1, 2}, {sigmoid_ref(3), 2 * sigmoid_ref(4)});
  EXPECT_THROW_MSG(nn::glu(ones({2, 3})), std::invalid_argument, "axis -1 must have an even size");
  EXPECT_THROW_MSG(nn::glu(ones({2, 4}), 2), std::out_of_range, "axis 2");
}

TEST(Activations, ModulesApplyTheirFunctions) {
  array x = points();
  auto same = [&](const array& a, array b) { expect_array(a, b.shape(), b.to_vector<double>(), 1e-7); };
  same(nn::ReLU()(x), nn::relu(x));
  same(nn::ReLU6()(x), nn::relu6(x));
  same(nn::LeakyReLU(0.1)(x), nn::leaky_relu(x, 0.1));
  same(nn::ELU(0.5)(x), nn::elu(x, 0.5));
  same(nn::CELU(2.0)(x), nn::celu(x, 2.0));
  same(nn::SELU()(x), nn::selu(x));
  same(nn::GELU()(x), nn::gelu(x));
  same(nn::GELU("tanh")(x), nn::gelu_approx(x));
  same(nn::GELU("precise")(x), nn::gelu_approx(x));
  same(nn::GELU("fast")(x), nn::gelu_fast_approx(x));
  same(nn::SiLU()(x), nn::silu(x));
  same(nn::Sigmoid()(x), nn::sigmoid(x));
  same(nn::Tanh()(x), nn::tanh(x));
  same(nn::Softplus()(x), nn::softplus(x));
  same(nn::LogSigmoid()(x), nn::log_sigmoid(x));
  same(nn::Softsign()(x), nn::softsign(x));
  same(nn::Mish()(x), nn::mish(x));
  same(nn::Hardswish()(x), nn::hardswish(x));
  same(nn::HardTanh(-0.5, 0.5)(x), nn::hard_tanh(x, -0.5, 0.5));
  same(nn::Softmax()(x), nn::softmax(x));
  same(nn::LogSoftmax()(x), nn::log_softmax(x));
  same(nn::GLU()(ones({2, 4})), nn::glu(ones({2, 4})));
  EXPECT_TRUE(nn::ReLU().parameters().empty());
  EXPECT_THROW_MSG(nn::GELU("erf"), std::invalid_argument, "got 'erf'");
  EXPECT_THROW_MSG(nn::CELU(0.0), std::invalid_argument, "[nn::CELU]");
  EXPECT_THROW_MSG(nn::HardTanh(2.0, 1.0), std::invalid_argument, "[nn::HardTanh]");
}

TEST(Activations, PReLUHasOneSlopePerChannel) {
  nn::PReLU one;
  EXPECT_EQ(one.parameters().names(), std::vector<std::string>{"weight"});
  expect_array(one.weight, {1}, {0.25});
  expect_array(one(array({-4.0f, 4.0f})), {2}, {-1, 4});
  nn::PReLU per_channel(2, 0.5);
  per_channel.update({{"weight", array({0.5f, 0.1f})}});
  expect_array(per_channel(array({-2.0f, -2.0f, 3.0f, -10.0f}, {2, 2})), {2, 2}, {-1, -0.2, 3, -1});
  EXPECT_THROW_MSG(per_channel(ones({2, 3})), std::invalid_argument, "last axis 2 (one slope per channel), got shape (2,3)");
  EXPECT_THROW_MSG(nn::PReLU(0), std::invalid_argument, "num_parameters must be positive, got 0");
}

TEST(Activations, GradientsMatchFiniteDifferences) {
  // Points away from the kinks of relu-like functions.
  array x({-2.1, -0.7, -0.2, 0.3, 1.1, 2.4}, {2, 3}, float64);
  const std::vector<std::pair<std::string, std::function<array(const array&)>>> fns = {
      {"gelu", [](const array& a) { return nn::gelu(a); }},
      {"gelu_approx", [](const array& a) { return nn::gelu_approx(a); }},
      {"silu", [](const array& a) { return nn::silu(a); }},
      {"softplus", [](const array& a) { return nn::softplus(a); }},
      {"log_sigmoid", [](const array& a) { return nn::log_sigmoid(a); }},
      {"elu", [](const array& a) { return nn::elu(a, 0.7); }},
      {"celu", [](const array& a) { return nn::celu(a, 1.3); }},
      {"selu", [](const array& a) { return nn::selu(a); }},
      {"mish", [](const array& a) { return nn::mish(a); }},
      {"softsign", [](const array& a) { return nn::softsign(a); }},
      {"leaky_relu", [](const array& a) { return nn::leaky_relu(a, 0.2); }},
      {"hardswish", [](const array& a) { return nn::hardswish(a); }},
      {"glu", [](const array& a) { return nn::glu(a, 0); }},
  };
  for (const auto& [name, fn] : fns) {
    auto r = check_grads([&fn = fn](const std::vector<array>& v) { return std::vector<array>{fn(v[0])}; }, {x});
    EXPECT_TRUE(r.ok) << name << ": " << r.report;
  }
}

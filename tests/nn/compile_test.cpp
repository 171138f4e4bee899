// nn::compile_value_and_grad: training with a compiled loss-and-gradient function gives the losses
// and parameters of training without it, bit for bit; parameters are inputs (an update is seen), what
// the loss function assigns to a buffer comes back, dropout draws anew, and freezing retraces.
#include "../test_utils.h"

using namespace loom;

namespace {

struct CpnMLP : nn::Module {
  nn::Linear l1{12, 32}, l2{32, 5};
  nn::Dropout drop{0.25f};
  CpnMLP() {
    register_module("l1", l1);
    register_module("l2", l2);
    register_module("drop", drop);
  }
  array operator()(const array& x) { return l2(drop(nn::relu(l1(x)))); }
};

// A module that counts its calls in a buffer (as a BatchNorm updates its running statistics).
struct CpnCounting : nn::Module {
  nn::Linear lin{12, 5};
  array calls = zeros({});
  CpnCounting() {
    register_module("lin", lin);
    register_buffer("calls", calls);
  }
  array operator()(const array& x) {
    calls = calls + 1.0f;
    return lin(x);
  }
};

std::pair<array, array> cpn_batch(int step) {
  const array x = random::normal({16, 12}, float32, random::key(100 + step));
  const array y = random::randint(0, 5, {16}, int32, random::key(200 + step));
  return {x, y};
}

// Losses of `steps` AdamW steps, compiled or not, from the same seed.
std::vector<float> cpn_train(bool compiled, int steps, std::vector<array>* final_params) {
  random::seed(7);
  CpnMLP model;
  optim::AdamW opt(1e-2);
  auto loss_fn = [&model](const array& x, const array& y) { return nn::losses::cross_entropy(model(x), y, "mean"); };
  auto plain = nn::value_and_grad(model, loss_fn);
  auto fast = nn::compile_value_and_grad(model, loss_fn);
  std::vector<float> losses;
  for (int s = 0; s < steps; ++s) {
    auto [x, y] = cpn_batch(s);
    auto [loss, grads] = compiled ? fast(x, y) : plain(x, y);
    opt.update(model, grads);
    eval(loss, model.parameters());
    losses.push_back(loss.item<float>());
  }
  *final_params = model.parameters().values();
  return losses;
}

}  // namespace

TEST(CompileValueAndGrad, TrainsBitForBitAsUncompiled) {
  std::vector<array> p_plain, p_fast;
  const std::vector<float> plain = cpn_train(false, 12, &p_plain);
  const std::vector<float> fast = cpn_train(true, 12, &p_fast);
  ASSERT_EQ(plain.size(), fast.size());
  for (size_t s = 0; s < plain.size(); ++s) EXPECT_EQ(plain[s], fast[s]) << "step " << s;
  EXPECT_LT(plain.back(), plain.front());
  ASSERT_EQ(p_plain.size(), p_fast.size());
  for (size_t i = 0; i < p_plain.size(); ++i) EXPECT_TRUE(array_equal(p_plain[i], p_fast[i]).item<bool>()) << i;
}

TEST(CompileValueAndGrad, AssignedBuffersComeBackAndFreezingRetraces) {
  CpnCounting model;
  auto loss_fn = [&model](const array& x, const array& y) { return nn::losses::cross_entropy(model(x), y, "mean"); };
  auto fast = nn::compile_value_and_grad(model, loss_fn);
  auto [x, y] = cpn_batch(0);
  for (int s = 1; s <= 3; ++s) {
    auto [loss, grads] = fast(x, y);
    EXPECT_EQ(grads.size(), 2u);  // lin.weight, lin.bias: the buffer is not trainable
    EXPECT_EQ(model.calls.item<float>(), static_cast<float>(s));
  }
  // The uncompiled gradients, for the same parameters.
  const auto [want_loss, want] = nn::value_and_grad(model, loss_fn)(x, y);
  const auto [loss, grads] = fast(x, y);
  EXPECT_TRUE(array_equal(loss, want_loss).item<bool>());
  EXPECT_TRUE(array_equal(grads["lin.weight"], want["lin.weight"]).item<bool>());
  model.freeze({"lin.bias"});
  const auto [loss2, grads2] = fast(x, y);
  EXPECT_EQ(grads2.size(), 1u);
  EXPECT_TRUE(array_equal(grads2["lin.weight"], want["lin.weight"]).item<bool>());
}

// A program written against MLX's C++ API (mlx::core). The one line that differs from the MLX
// version is the #include: <loom/mlx.h> instead of "mlx/mlx.h". See docs/coming-from-mlx.md.
//
// Logistic regression on a synthetic, linearly separable problem, trained by gradient descent
// with mx::value_and_grad, then a few checks of the kinds of API MLX programs use (dtypes, bitwise
// ops, random keys, whole-array comparisons).
#include <cmath>
#include <iostream>

#include <loom/mlx.h>  // MLX: #include "mlx/mlx.h"

namespace mx = mlx::core;

int main() {
  const int num_features = 16, num_examples = 512, num_iters = 300;
  const float lr = 0.5f;

  mx::random::seed(7);
  auto w_true = mx::random::normal({num_features});
  auto X = mx::random::normal({num_examples, num_features});
  auto y = mx::astype(mx::matmul(X, w_true) > 0.0f, mx::float32);

  auto loss_fn = [&](const std::vector<mx::array>& params) {
    auto logits = mx::matmul(X, params[0]) + params[1];
    // log(1 + e^z) - y z, written with logaddexp so it cannot overflow.
    auto per_example = mx::logaddexp(mx::zeros_like(logits), logits) - y * logits;
    return mx::mean(per_example);
  };
  auto step = mx::value_and_grad(loss_fn, {0, 1});

  std::vector<mx::array> params = {mx::zeros({num_features}), mx::array(0.0f)};
  float first = 0, last = 0;
  for (int it = 0; it < num_iters; ++it) {
    auto [loss, grads] = step(params);
    for (size_t i = 0; i < params.size(); ++i) params[i] = params[i] - lr * grads[i];
    mx::eval(loss, params);
    if (it == 0) first = loss.item<float>();
    last = loss.item<float>();
  }
  auto pred = mx::astype(mx::matmul(X, params[0]) + params[1] > 0.0f, mx::float32);
  auto accuracy = mx::mean(mx::equal(pred, y)).item<float>();
  std::cout << "loss " << first << " -> " << last << ", accuracy " << accuracy << std::endl;

  // Dtypes and the ops on them as MLX defines them.
  auto a = mx::array({200, 100}, mx::uint8);
  auto b = mx::array({-100, 27}, mx::int8);
  auto c = a + b;                                  // uint8 with int8 promotes to int16
  auto bits = (c << 2) & 0xff;                     // bitwise ops and operators
  auto k = mx::random::key(0);
  auto u = mx::random::uniform({4}, mx::float32, k);  // same key, same numbers, every run
  bool ok = c.dtype() == mx::int16 && mx::array_equal(c, mx::array({100, 127}, mx::int16)).item<bool>() &&
            mx::allclose(u, mx::random::uniform({4}, mx::float32, k)).item<bool>() &&
            bits.dtype() == mx::int16;
  std::cout << "sum " << c << ", shifted " << bits << (ok ? ", api: ok" : ", api: MISMATCH") << std::endl;
  return ok && last < 0.5f * first && accuracy > 0.9f ? 0 : 1;
}

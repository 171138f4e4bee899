// A two-layer network learns the two-moons-like "circle" problem with plain Loom ops and autograd:
// points inside the unit circle are class 1. The lazy graph runs forward, backward and the SGD
// update in one eval per step.
#include <loom/loom.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <cstdlib>

using namespace loom;

int main(int argc, char** argv) {
  int steps = 1000;
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::strcmp(argv[i], "--steps") == 0) steps = std::atoi(argv[i + 1]);
  }
  // Data: a grid of 32x32 points in [-2, 2]^2, labels 1 inside the circle of radius 1.2.
  const int n = 1024;
  std::vector<float> xs(2 * n), ys(n);
  for (int i = 0; i < n; ++i) {
    float a = -2.0f + 4.0f * (i % 32) / 31.0f, b = -2.0f + 4.0f * (i / 32) / 31.0f;
    xs[2 * i] = a;
    xs[2 * i + 1] = b;
    ys[i] = (a * a + b * b < 1.44f) ? 1.0f : 0.0f;
  }
  array x(xs, {n, 2}), y(ys, {n, 1});
  // Parameters with a fixed, deterministic initialisation.
  std::vector<float> w1v(2 * 32), w2v(32);
  for (int i = 0; i < 64; ++i) w1v[i] = 0.8f * std::sin(1.7f * i + 0.3f);
  for (int i = 0; i < 32; ++i) w2v[i] = 0.5f * std::cos(2.3f * i);
  std::vector<array> params = {array(w1v, {2, 32}), zeros({32}), array(w2v, {32, 1}), zeros({1})};

  auto loss_fn = [&](const std::vector<array>& p) {
    array h = tanh(matmul(x, p[0]) + p[1]);
    array logits = matmul(h, p[2]) + p[3];
    // Binary cross-entropy with logits, computed stably.
    array l = maximum(logits, array(0.0f)) - logits * y + log1p(exp(-abs(logits)));
    return mean(l);
  };
  auto step = value_and_grad(loss_fn, {0, 1, 2, 3});
  const float lr = 0.5f;
  for (int s = 1; s <= steps; ++s) {
    auto [loss, grads] = step(params);
    for (size_t i = 0; i < params.size(); ++i) params[i] = params[i] - grads[i] * lr;
    eval(loss, params);
    if (s % (steps / 5 > 0 ? steps / 5 : 1) == 0) std::printf("step %4d  loss %.4f\n", s, loss.item<float>());
  }
  array logits = matmul(tanh(matmul(x, params[0]) + params[1]), params[2]) + params[3];
  float acc = mean(astype(equal(greater(logits, array(0.0f)), greater(y, array(0.5f))), float32)).item<float>();
  std::printf("accuracy %.2f\n", acc);
  return 0;
}

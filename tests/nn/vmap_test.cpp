// vmap over nn layers (their parameters the same for every batch entry) and over a loss's
// per-example gradients, each against a loop over the batch.
#include "../test_utils.h"

using namespace loom;
using loom::testing::as_vector_fn;
using loom::testing::expect_vmap_matches_loop;
using loom::testing::lcg_uniform;

namespace {

array vmn_f32(const Shape& shape, unsigned seed) { return astype(lcg_uniform(shape, -1.0, 1.0, seed), float32); }

}  // namespace

TEST(LayersVmap, LayersMatchTheLoop) {
  random::seed(3);
  nn::Sequential mlp(std::make_shared<nn::Linear>(8, 16), nn::relu, std::make_shared<nn::LayerNorm>(16),
                     std::make_shared<nn::Linear>(16, 4));
  // A batch of (3, 8) inputs along axis 0 and along axis 1.
  const array x = vmn_f32({5, 3, 8}, 1);
  expect_vmap_matches_loop(as_vector_fn([&](const array& a) { return mlp(a); }), {x}, {0}, {}, 1e-5, 1e-5);
  expect_vmap_matches_loop(as_vector_fn([&](const array& a) { return mlp(a); }), {x}, {1}, {}, 1e-5, 1e-5);

  nn::Conv2d conv(2, 3, 3, 1, 1);
  expect_vmap_matches_loop(as_vector_fn([&](const array& a) { return conv(a); }), {vmn_f32({4, 2, 5, 5, 2}, 2)}, {0},
                           {}, 1e-5, 1e-5);

  nn::Embedding emb(10, 6);
  const array tokens = astype(lcg_uniform({4, 7}, 0, 10, 3), int32);
  expect_vmap_matches_loop(as_vector_fn([&](const array& t) { return emb(t); }), {tokens}, {0}, {}, 0, 0);

  nn::TransformerEncoderLayer block(8, 2);
  block.eval();
  const array seq = vmn_f32({3, 2, 5, 8}, 4);  // a batch of (2, 5, 8) sequences
  expect_vmap_matches_loop(as_vector_fn([&](const array& a) { return block(a, std::nullopt); }), {seq}, {0}, {}, 1e-4,
                           1e-5);
}

TEST(LayersVmap, PerExampleGradientsOfALossWithRespectToParameters) {
  random::seed(4);
  nn::Linear layer(6, 5);
  const array xs = vmn_f32({8, 6}, 5);
  const array ys = astype(lcg_uniform({8}, 0, 5, 6), int32);
  // The loss of one example as a function of the layer's weight and bias.
  auto loss = [](const std::vector<array>& v) {
    array logits = add(matmul(v[2], transpose(v[0])), v[1]);
    return nn::losses::cross_entropy(expand_dims(logits, 0), expand_dims(v[3], 0), std::nullopt, -1, 0.0, "mean");
  };
  auto g = grad(loss, {0, 1});
  const std::vector<array> per = vmap(g, {-1, -1, 0, 0})({layer.weight, *layer.bias, xs, ys});
  ASSERT_EQ(per[0].shape(), (Shape{8, 5, 6}));
  for (int b = 0; b < 8; ++b) {
    const std::vector<array> want = g({layer.weight, *layer.bias, take(xs, b, 0), take(ys, b, 0)});
    EXPECT_TRUE(allclose(take(per[0], b, 0), want[0], 1e-5, 1e-6).item<bool>()) << b;
    EXPECT_TRUE(allclose(take(per[1], b, 0), want[1], 1e-5, 1e-6).item<bool>()) << b;
  }
  // Per-example gradient norms, clipped and averaged (DP-SGD's step), equal the loop's.
  auto clipped_mean = [](const array& per_w) {
    array norms = sqrt(sum(square(per_w), {1, 2}, true));
    return mean(divide(per_w, maximum(norms, array(1.0f))), 0);
  };
  std::vector<array> loop;
  for (int b = 0; b < 8; ++b) loop.push_back(g({layer.weight, *layer.bias, take(xs, b, 0), take(ys, b, 0)})[0]);
  EXPECT_TRUE(allclose(clipped_mean(per[0]), clipped_mean(stack(loop, 0)), 1e-5, 1e-6).item<bool>());
}

// Elementwise fusion inside eval: the fused path gives bit-identical results to the unfused one,
// materializes no intermediates, and leaves arrays that someone still holds alone.
#include <cstring>
#include <random>

#include "../test_utils.h"

using namespace loom;

namespace {

struct FusionOff {
  FusionOff() { detail::set_fusion(false); }
  ~FusionOff() { detail::set_fusion(true); }
};

// A random elementwise graph over leaves of `shape`: unary and binary ops, broadcast scalars and
// rows, comparisons and casts, shared subexpressions. Deterministic in `seed`.
array random_graph(uint32_t seed, const std::vector<array>& leaves) {
  std::mt19937 rng(seed);
  std::vector<array> pool = leaves;
  auto pick = [&] { return pool[rng() % pool.size()]; };
  for (int i = 0; i < 24; ++i) {
    array a = pick(), b = pick();
    array y = a;
    switch (rng() % 12) {
      case 0: y = a + b; break;
      case 1: y = a * b; break;
      case 2: y = a - 0.5f; break;
      case 3: y = tanh(a); break;
      case 4: y = exp(minimum(a, array(3.0f))); break;
      case 5: y = sigmoid(a) * b; break;
      case 6: y = where(a > b, a, b * 2.0f); break;
      case 7: y = abs(a) + 1.0f; break;
      case 8: y = log(abs(a) + 1.0f); break;
      case 9: y = astype(astype(a * 10.0f, int32), float32) / 10.0f; break;
      case 10: y = maximum(a, b) - minimum(a, b); break;
      case 11: y = square(a) / (1.0f + square(b)); break;
    }
    pool.push_back(y);
  }
  return pool.back() + pool[pool.size() - 2] + pool[pool.size() / 2];
}

}  // namespace

TEST(Fusion, RandomGraphsAreBitIdenticalToTheUnfusedPath) {
  const Shape shape = {37, 129};  // blocks that do not divide the size
  for (uint32_t seed = 0; seed < 40; ++seed) {
    SCOPED_TRACE(seed);
    auto leaves = [&] {
      return std::vector<array>{
          astype(loom::testing::lcg_uniform(shape, -2, 2, seed, 1), float32),
          astype(loom::testing::lcg_uniform(shape, -2, 2, seed, 2), float32),
          broadcast_to(astype(loom::testing::lcg_uniform({129}, -1, 1, seed, 3), float32), shape),  // a row
          transpose(astype(loom::testing::lcg_uniform({129, 37}, -1, 1, seed, 4), float32)),         // strided
      };
    };
    std::vector<array> in1 = leaves(), in2 = leaves();
    eval(in1), eval(in2);
    array fused = random_graph(seed, in1);
    fused.eval();
    array plain = [&] {
      FusionOff off;
      array y = random_graph(seed, in2);
      y.eval();
      return y;
    }();
    ASSERT_EQ(fused.shape(), plain.shape());
    auto a = fused.to_vector<float>(), b = plain.to_vector<float>();
    EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0);
  }
}

TEST(Fusion, AGroupTakesTheLayoutTheUnfusedKernelsGive) {
  // Unfused kernels give an output their input's layout (transposed, or broadcast with stride-0
  // axes); a fused group gives its root the same, so a reduction of either sums the same bits.
  // With mixed layouts the fused root is row-major and the unfused one whatever donation gave it.
  const array base = astype(loom::testing::lcg_uniform({40, 1, 30}, -2, 2, 5), float32);
  const array other = astype(loom::testing::lcg_uniform({30, 40}, -2, 2, 6), float32);
  const std::vector<std::pair<const char*, std::function<std::vector<array>()>>> inputs = {
      {"transposed", [&] { return std::vector<array>{transpose(other), transpose(other)}; }},
      {"broadcast", [&] { return std::vector<array>{broadcast_to(base, {40, 7, 30}), broadcast_to(base, {40, 7, 30})}; }},
      {"mixed", [&] { return std::vector<array>{transpose(other), contiguous(transpose(other))}; }},
  };
  auto chain = [](const std::vector<array>& in) { return square(subtract(multiply(in[0], array(1.5f)), in[1] * 0.25f)); };
  for (const auto& [name, make] : inputs) {
    SCOPED_TRACE(name);
    const std::vector<array> in = make();
    eval(in);
    array fused = chain(in);
    array fused_sum = sum(fused);
    eval(fused, fused_sum);
    auto [plain, plain_sum] = [&] {
      FusionOff off;
      array y = chain(in), total = sum(y);
      eval(y, total);
      return std::make_pair(y, total);
    }();
    if (std::string(name) != "mixed") {  // (mixed: unfused, donation picks the layout)
      EXPECT_EQ(fused.strides(), plain.strides());
      EXPECT_EQ(fused.data_size(), plain.data_size());
    }
    EXPECT_TRUE(array_equal(fused, plain).item<bool>());
    // (Mixed: the sums may differ in the last bit, as Reduce's order follows the layout; see
    // tests/diff/FINDINGS.md, session 26.)
    if (std::string(name) != "mixed") EXPECT_EQ(fused_sum.item<float>(), plain_sum.item<float>());
  }
}

TEST(Fusion, AChainMaterializesOnlyItsResult) {
  clear_cache();
  const int n = 1 << 20;
  array x = ones({n});
  x.eval();
  size_t base = get_active_memory();
  reset_peak_memory();
  array y = exp(tanh(x * 2.0f + 1.0f) * x) - x;
  y.eval();
  // Unfused, two 4 MiB intermediates are alive at once; fused, only the result (plus small blocks).
  EXPECT_LE(get_peak_memory() - base, size_t(n) * 4 + (1 << 18));
  EXPECT_FLOAT_EQ(y.to_vector<float>()[7], std::exp(std::tanh(3.0f)) - 1.0f);
}

TEST(Fusion, ArraysHeldOutsideTheGraphAreStillComputed) {
  array x = array({1.0f, 2.0f, 3.0f});
  array h = x * 2.0f;  // held by the test: must get its own buffer
  array y = h + 1.0f;
  eval(y);
  loom::testing::expect_array(y, {3}, {3, 5, 7});
  loom::testing::expect_array(h, {3}, {2, 4, 6});
  // Requested together with its consumer.
  array a = x - 1.0f;
  array b = exp(a);
  eval(a, b);
  loom::testing::expect_array(a, {3}, {0, 1, 2});
  loom::testing::expect_array(b, {3}, {1, std::exp(1.0), std::exp(2.0)}, 1e-6);
}

TEST(Fusion, ANodeReadTwiceIsComputedOnce) {
  // x + x at every step: walking the group naively would visit 2^60 paths.
  array x = full({1000}, 1.0f);
  for (int i = 0; i < 60; ++i) x = x + x * 0.5f;
  EXPECT_FLOAT_EQ(x.to_vector<float>()[999], std::pow(1.5f, 60.0f));
  array y = full({1000}, 1.0f);
  for (int i = 0; i < 60; ++i) y = y * y;
  EXPECT_EQ(y.to_vector<float>()[0], 1.0f);
}

// A cast is elementwise: a bfloat16 branch added to a float32 stream (the autocast policy's residual
// add) runs as one loop, bit for bit the unfused result, without a float32 copy of the branch.
TEST(Fusion, CastsFuseIntoTheirConsumer) {
  clear_cache();
  const int n = 1 << 20;
  array x = astype(loom::testing::lcg_uniform({n}, -2, 2, 71), float32);
  array h = astype(loom::testing::lcg_uniform({n}, -2, 2, 72), bfloat16);
  eval(x, h);
  array want = [&] {
    FusionOff off;
    array w = x + astype(h, float32) * 2.0f;
    eval(w);
    return w;
  }();
  size_t base = get_active_memory();
  reset_peak_memory();
  array y = x + astype(h, float32) * 2.0f;
  y.eval();
  EXPECT_LE(get_peak_memory() - base, size_t(n) * 4 + (1 << 18)) << "the cast or the product was materialized";
  EXPECT_TRUE(array_equal(y, want).item<bool>());
  // Narrowing too, and a cast between types of one size that may take its input's buffer.
  array z = astype(exp(x), bfloat16), zi = astype(astype(x * 3.0f, int32), float32);
  std::vector<array> unfused = [&] {
    FusionOff off;
    std::vector<array> u{astype(exp(x), bfloat16), astype(astype(x * 3.0f, int32), float32)};
    eval(u);
    return u;
  }();
  const array &zu = unfused[0], &ziu = unfused[1];
  eval(z, zi);
  EXPECT_TRUE(array_equal(z, zu).item<bool>());
  EXPECT_TRUE(array_equal(zi, ziu).item<bool>());
}

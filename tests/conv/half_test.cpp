// Half-precision convolutions on both of their paths: operands converted once to float32 (what a
// CPU without oneDNN half kernels runs), and operands kept half through im2col into the GEMM seam
// (what an AVX512-BF16 / AMX CPU runs; forced here with force_gemm_reads_half, the seam then widening
// inside each product). The forward and both gradients, against float64 values of the rounded inputs.
#include "loom/kernels/gemm.h"
#include "../test_utils.h"

namespace loom {
namespace {

struct HalfConvPaths : ::testing::Test {
  void TearDown() override { kernels::detail::force_gemm_reads_half(-1); }
};

// Checks `got` (half) against `want` (float64): every entry within float32 accumulation over `terms`
// terms of magnitude <= `mag` and one rounding of the result to the half type (2^-8 bfloat16, 2^-11
// float16) - twice for a gradient rounded once more through its cotangent's dtype.
void expect_close(const array& got, const array& want, Dtype d, double terms, double mag, const std::string& what) {
  ASSERT_EQ(got.dtype(), d) << what;
  ASSERT_EQ(got.shape(), want.shape()) << what;
  const std::vector<double> g = astype(got, float64).to_vector<double>(), w = array(want).to_vector<double>();
  const double unit = d == bfloat16 ? 1.0 / 256 : 1.0 / 2048;
  int bad = 0;
  for (size_t i = 0; i < g.size(); ++i) {
    const double tol = 4 * terms * 6e-8 * mag + unit * std::abs(w[i]) + 1e-6;
    if (!(std::abs(g[i] - w[i]) <= tol) && bad++ < 5) {
      ADD_FAILURE() << what << " at " << i << ": " << g[i] << ", want " << w[i] << " (tolerance " << tol << ")";
    }
  }
}

TEST_F(HalfConvPaths, ForwardAndGradientsOnBothPaths) {
  for (Dtype d : {bfloat16, float16}) {
    // x (2, 7, 6, 4), w (6, 3, 3, 2): groups 2, stride (2, 1), padding 1, a flipped (true) convolution
    // too; and a pointwise one.
    const array x = astype(testing::lcg_uniform({2, 7, 6, 4}, -1, 1, 11), d);
    const array w = astype(testing::lcg_uniform({6, 3, 3, 2}, -1, 1, 12), d);
    const array w1 = astype(testing::lcg_uniform({5, 1, 1, 4}, -1, 1, 13), d);
    const array x64 = astype(x, float64), w64 = astype(w, float64), w164 = astype(w1, float64);
    for (bool flip : {false, true}) {
      auto f = [flip](const array& a, const array& b) {
        return conv_general(a, b, {2, 1}, {1, 1}, {1, 1}, {}, {}, 2, flip);
      };
      const array y64 = f(x64, w64);
      const array cot = astype(testing::lcg_uniform(y64.shape(), -1, 1, 14), d);
      auto [out64, grads64] =
          vjp([&](const std::vector<array>& p) { return std::vector<array>{f(p[0], p[1])}; }, {x64, w64},
              {astype(cot, float64)});
      for (int native : {0, 1}) {
        kernels::detail::force_gemm_reads_half(native);
        const std::string what = std::string(native ? "half operands" : "float32 operands") + ", " +
                                 (d == bfloat16 ? "bfloat16" : "float16") + (flip ? ", flipped" : "");
        expect_close(f(x, w), y64, d, 9, 1, what + ": forward");
        auto [out, grads] =
            vjp([&](const std::vector<array>& p) { return std::vector<array>{f(p[0], p[1])}; }, {x, w}, {cot});
        expect_close(grads[0], grads64[0], d, 2 * 9 * 3, 1, what + ": input gradient");
        expect_close(grads[1], grads64[1], d, 2 * 4 * 6, 1, what + ": weight gradient");
      }
    }
    for (int native : {0, 1}) {
      kernels::detail::force_gemm_reads_half(native);
      expect_close(conv2d(x, w1), conv2d(x64, w164), d, 4, 1, "pointwise forward");
    }
  }
}

// A batch whose im2col matrix exceeds one chunk (8 images of 64 x 64 x 8 with a 3 x 3 kernel: 7 per
// chunk): the weight gradient adds its chunks in float32, the input gradient writes each chunk's.
TEST_F(HalfConvPaths, GradientsOverSeveralChunks) {
  const array x = astype(testing::lcg_uniform({8, 64, 64, 8}, -1, 1, 21), bfloat16);
  const array w = astype(testing::lcg_uniform({4, 3, 3, 8}, -1, 1, 22), bfloat16);
  auto f = [](const std::vector<array>& p) { return std::vector<array>{conv2d(p[0], p[1], {1, 1}, {1, 1})}; };
  const array cot = astype(testing::lcg_uniform({8, 64, 64, 4}, -1, 1, 23), bfloat16);
  auto [o64, g64] = vjp(f, {astype(x, float64), astype(w, float64)}, {astype(cot, float64)});
  for (int native : {0, 1}) {
    kernels::detail::force_gemm_reads_half(native);
    auto [o, g] = vjp(f, {x, w}, {cot});
    const std::string what = native ? "half operands" : "float32 operands";
    expect_close(g[0], g64[0], bfloat16, 9 * 4, 1, what + ": input gradient");
    expect_close(g[1], g64[1], bfloat16, 8 * 64 * 64, 1, what + ": weight gradient");
  }
}

}  // namespace
}  // namespace loom

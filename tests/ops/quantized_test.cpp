// quantize / dequantize / quantized_matmul / gather_qmm / to_fp8 / from_fp8 (ops/quantized.h):
// known values from a numpy reference of MLX's CPU kernels (tests/ops/quantized_ref.py), MLX's own
// identities (test_quantized.py), finite differences for the gradients and the error paths.
#include <cmath>
#include <cstring>

#include "../test_utils.h"
#include "loom/autograd/check.h"
#include "loom/autograd/transforms.h"
#include "loom/kernels/gemm.h"
#include "loom/ops/quantized.h"

using namespace loom;
using loom::testing::expect_array;
using loom::testing::lcg_uniform;

namespace {

// The reference script's input: built in float64, rounded once to float32.
array ref_w(int rows, int cols) {
  std::vector<float> v(size_t(rows) * cols);
  for (size_t i = 0; i < v.size(); ++i) {
    const double d = double(int64_t((i * 37) % 101) - 50) / 16.0 * (1 + double((i / 32) % 5) * 0.25) + double(i % 13) * 0.0371;
    v[i] = static_cast<float>(d);
  }
  return array(v, {rows, cols}, float32);
}

array randn(const Shape& s, unsigned seed, Dtype d = float32) { return astype(lcg_uniform(s, -1, 1, seed), d); }

const int kBits[] = {2, 3, 4, 5, 6, 8};
const int kGroups[] = {32, 64, 128};

// max |a - b|
double max_abs_diff(const array& a, const array& b) {
  return max(abs(subtract(astype(a, float64), astype(b, float64)))).item<double>();
}

}  // namespace

TEST(Quantize, AffineMatchesNumpyReferenceOfMlx) {
  // python3 tests/ops/quantized_ref.py: bits, group size, the first four words of row 0, the sum of
  // all words, scale/bias of the first and last group, and the sum of the dequantized values.
  struct Row {
    int bits, gs;
    uint32_t words[4];
    uint64_t word_sum;
    float s0, b0, s_last, b_last;
    double dq_sum;
  };
  const Row rows[] = {
      {2, 32, {3067918043u, 2267919917u, 3681405805u, 3631405921u}, 79998104568u, -1.63670003, 3.27340007, -1.5, 3, 204.286251},
      {2, 64, {3067721435u, 2339223085u, 3681405805u, 3631405921u}, 86267486433u, -2.06246257, 4.12492514, -3.22944999, 6.45889997, 195.600279},
      {2, 128, {3067721435u, 2607658605u, 3681475437u, 3635862370u}, 86278842679u, -2.6259625, 5.25192499, -3.22944999, 6.45889997, 172.785843},
      {3, 32, {2826489519u, 1358011726u, 2716021149u, 2076304186u}, 126886038447u, -0.818350017, 3.27340007, -0.75, 3, 121.191141},
      {3, 64, {3917040815u, 3538590028u, 2782212761u, 2076304186u}, 123241854158u, -1.03123128, 4.12492514, -1.61472499, 6.45889997, 117.561203},
      {3, 128, {3933555950u, 3572144588u, 2849319577u, 2074469682u}, 117342492775u, -1.31298125, 5.25192499, -1.61472499, 6.45889997, 116.545176},
      {4, 32, {1814619311u, 2387141793u, 2387216066u, 2691377346u}, 133465112026u, -0.409175009, 3.27340007, -0.375, 3, 110.134526},
      {4, 64, {2068370862u, 2354632098u, 2371495603u, 2456500404u}, 143345028647u, -0.515615642, 4.12492514, -0.807362497, 6.45889997, 108.979589},
      {4, 128, {2068367005u, 2337851027u, 2355705764u, 2474264757u}, 143067159823u, -0.656490624, 5.25192499, -0.807362497, 6.45889997, 104.77851},
      {5, 32, {185475743u, 505839982u, 3003418321u, 92737856u}, 166810412186u, -0.204587504, 3.27340007, -0.1875, 3, 106.451895},
      {5, 64, {2399971964u, 489325677u, 919045715u, 3884340530u}, 180479079617u, -0.257807821, 4.12492514, -0.403681248, 6.45889997, 104.923274},
      {5, 128, {1393274458u, 473065333u, 984188375u, 2844120867u}, 177174239975u, -0.328245312, 5.25192499, -0.403681248, 6.45889997, 105.154777},
      {6, 32, {1625102911u, 708994818u, 2137268965u, 1745193928u}, 215470819402u, -0.102293752, 3.27340007, -0.0909090936, 3, 106.241613},
      {6, 64, {3788589562u, 1779003107u, 2201281237u, 1730263886u}, 219174395207u, -0.124997735, 4.12492514, -0.195724249, 6.45889997, 105.796114},
      {6, 128, {2696767859u, 2039313060u, 2196087229u, 3845503569u}, 214558998895u, -0.164122656, 5.25192499, -0.195724249, 6.45889997, 105.793455},
      {8, 32, {3779305982u, 1724130948u, 3863586313u, 2145140617u}, 269810348470u, -0.0251800008, 3.27340007, -0.0223880596, 3, 105.285069},
      {8, 64, {3579027693u, 1891449736u, 3663242531u, 2245087373u}, 280253873418u, -0.0305550005, 4.12492514, -0.0482007451, 6.45889997, 105.260295},
      {8, 128, {3160052942u, 1890207874u, 3210647606u, 2142853253u}, 275657243897u, -0.040712595, 5.25192499, -0.0482007451, 6.45889997, 105.121521},
  };
  const array w = ref_w(2, 256);
  for (const Row& r : rows) {
    SCOPED_TRACE("bits " + std::to_string(r.bits) + " group_size " + std::to_string(r.gs));
    auto q = quantize(w, r.gs, r.bits);
    ASSERT_EQ(q.size(), 3u);
    EXPECT_EQ(q[0].dtype(), uint32);
    EXPECT_EQ(q[0].shape(), (Shape{2, 256 * r.bits / 32}));
    EXPECT_EQ(q[1].shape(), (Shape{2, 256 / r.gs}));
    auto words = q[0].to_vector<uint32_t>();
    for (int i = 0; i < 4; ++i) EXPECT_EQ(words[i], r.words[i]) << "word " << i;
    uint64_t sum = 0;
    for (uint32_t v : words) sum += v;
    EXPECT_EQ(sum, r.word_sum);
    auto s = q[1].to_vector<float>(), b = q[2].to_vector<float>();
    EXPECT_EQ(s.front(), r.s0);
    EXPECT_EQ(b.front(), r.b0);
    EXPECT_EQ(s.back(), r.s_last);
    EXPECT_EQ(b.back(), r.b_last);
    array dq = dequantize(q[0], q[1], q[2], r.gs, r.bits);
    EXPECT_EQ(dq.dtype(), float32);
    EXPECT_NEAR(loom::sum(astype(dq, float64)).item<double>(), r.dq_sum, 1e-5);
  }
}

TEST(Quantize, PackingIsALittleEndianBitStream) {
  // A row whose codes are 0, 1, 2, ... (mod 2^bits; the last one 2^bits - 1, so that the range is
  // full for 6 and 8 bits too): w = (2^bits - 1) - code gives scale -1 and bias 2^bits - 1 (MLX's
  // kernel nudges the scale so the larger edge is exact). Words from sum(code_i << (bits * i)) in Python.
  const std::vector<std::pair<int, std::vector<uint32_t>>> cases = {
      {2, {0xE4E4E4E4u, 0xE4E4E4E4u}},
      {3, {0x88FAC688u, 0xC688FAC6u, 0xFAC688FAu}},
      {4, {0x76543210u, 0xFEDCBA98u, 0x76543210u, 0xFEDCBA98u}},
      {5, {0x8A418820u, 0xC5A92839u, 0xCA307B9Au, 0x38BDAB49u, 0xFFBBCDEBu}},
      {6, {0x440C2040u, 0xA2481C61u, 0x3CE34C2Cu, 0x544D2450u, 0xA6585D65u, 0xFDE75C6Du}},
      {8, {0x03020100u, 0x07060504u, 0x0B0A0908u, 0x0F0E0D0Cu, 0x13121110u, 0x17161514u, 0x1B1A1918u, 0xFF1E1D1Cu}},
  };
  for (const auto& [bits, expected] : cases) {
    SCOPED_TRACE("bits " + std::to_string(bits));
    const int n = 1 << bits;
    std::vector<float> v(32);
    for (int i = 0; i < 32; ++i) v[i] = i == 31 ? 0.0f : float((n - 1) - (i % n));
    auto q = quantize(array(v, {1, 32}), 32, bits);
    EXPECT_EQ(q[0].to_vector<uint32_t>(), expected);
    EXPECT_EQ(q[1].item<float>(), -1.0f);
    EXPECT_EQ(q[2].item<float>(), float(n - 1));
    // and back exactly
    EXPECT_EQ(dequantize(q[0], q[1], q[2], 32, bits).to_vector<float>(), v);
  }
}

TEST(Quantize, DequantizeKnownValues) {
  // Words 0x76543210 0xFEDCBA98 hold the 4-bit codes 0..15; value = code * scale + bias.
  array wq(std::vector<uint32_t>{0x76543210u, 0xFEDCBA98u, 0x76543210u, 0xFEDCBA98u}, {1, 4}, uint32);
  array s(std::vector<float>{0.5f}, {1, 1}), b(std::vector<float>{-1.0f}, {1, 1});
  std::vector<double> expected(32);
  for (int i = 0; i < 32; ++i) expected[i] = (i % 16) * 0.5 - 1.0;
  expect_array(dequantize(wq, s, b, 32, 4), {1, 32}, expected, 0);
  // dtype: cast of the float32 result
  array h = dequantize(wq, s, b, 32, 4, "affine", std::nullopt, float16);
  EXPECT_EQ(h.dtype(), float16);
  expect_array(h, {1, 32}, expected, 0);
}

TEST(Quantize, AffineRoundTripWithinOneScaleEveryBitsAndGroupSize) {
  // MLX's test_quantize_dequantize: |w - dequantize(quantize(w))| <= |scale| + 1e-6 per group, and
  // zeros come back as zeros.
  const array w = randn({16, 512}, 3);
  for (int gs : kGroups) {
    for (int bits : kBits) {
      SCOPED_TRACE("bits " + std::to_string(bits) + " group_size " + std::to_string(gs));
      auto q = quantize(w, gs, bits);
      array wh = dequantize(q[0], q[1], q[2], gs, bits);
      array err = reshape(abs(subtract(w, wh)), {16, 512 / gs, gs});
      array bound = add(abs(expand_dims(q[1], -1)), array(1e-6f));
      EXPECT_TRUE(all(less_equal(err, bound)).item<bool>());
      // More bits, smaller error: the bound is the step of the grid.
      EXPECT_LT(max(err).item<float>(), 2.5f / float((1 << bits) - 1));
      auto z = quantize(zeros({4, 256}), gs, bits);
      EXPECT_TRUE(all(equal(dequantize(z[0], z[1], z[2], gs, bits), array(0.0f))).item<bool>());
    }
  }
}

TEST(Quantize, HalfTypesAndBatchAxes) {
  for (Dtype d : {float16, bfloat16}) {
    array w = randn({3, 4, 128}, 5, d);
    auto q = quantize(w);  // defaults: group_size 64, bits 4
    EXPECT_EQ(q[0].shape(), (Shape{3, 4, 16}));
    EXPECT_EQ(q[1].shape(), (Shape{3, 4, 2}));
    EXPECT_EQ(q[1].dtype(), d);
    EXPECT_EQ(q[2].dtype(), d);
    array wh = dequantize(q[0], q[1], q[2]);
    EXPECT_EQ(wh.dtype(), d);
    // Half rounding of the scale adds at most a few ulps to the one-step bound.
    EXPECT_LT(max_abs_diff(w, wh), 2.0 / 15 + 0.02);
    // The codes do not depend on the batch axes: the same rows as one matrix.
    auto q2 = quantize(reshape(w, {12, 128}));
    EXPECT_EQ(q2[0].to_vector<uint32_t>(), q[0].to_vector<uint32_t>());
  }
}

TEST(Quantize, NonContiguousInput) {
  array w = randn({128, 64}, 9);
  array wt = transpose(w);  // (64, 128), a strided view
  auto a = quantize(wt, 32, 4);
  auto b = quantize(copy(wt), 32, 4);
  EXPECT_EQ(a[0].to_vector<uint32_t>(), b[0].to_vector<uint32_t>());
  EXPECT_EQ(a[1].to_vector<float>(), b[1].to_vector<float>());
}

TEST(Quantize, FloatingModes) {
  const std::vector<float> lut = {0, 0.5, 1, 1.5, 2, 3, 4, 6, -0.0f, -0.5, -1, -1.5, -2, -3, -4, -6};
  // mxfp4: FP4 values in groups of 32 whose largest magnitude is 6 come back exactly (MLX's test).
  {
    std::vector<float> v(64 * 32);
    for (size_t i = 0; i < v.size(); ++i) v[i] = (i % 32 == 0) ? 6.0f : lut[(i * 7 + i / 5) % 16];
    array w = astype(array(v, {64, 32}), bfloat16);
    auto q = quantize(w, std::nullopt, std::nullopt, "mxfp4");
    ASSERT_EQ(q.size(), 2u);
    EXPECT_EQ(q[1].dtype(), uint8);
    EXPECT_EQ(q[0].shape(), (Shape{64, 4}));
    EXPECT_EQ(q[1].shape(), (Shape{64, 1}));
    EXPECT_EQ(q[1].to_vector<uint8_t>()[0], 127);  // scale 2^0
    // Codes: the index of each value in the table, 8 per word from the low bits up.
    EXPECT_EQ(q[0].to_vector<uint32_t>()[0] & 0xFu, 7u);  // 6.0
    array wh = dequantize(q[0], q[1], std::nullopt, std::nullopt, std::nullopt, "mxfp4");
    EXPECT_EQ(wh.dtype(), bfloat16);
    EXPECT_EQ(max_abs_diff(w, wh), 0.0);
    // A power-of-two larger range: scale 2^3, same codes.
    auto q8 = quantize(multiply(w, array(8.0f, bfloat16)), std::nullopt, std::nullopt, "mxfp4");
    EXPECT_EQ(q8[1].to_vector<uint8_t>()[0], 130);
    EXPECT_EQ(q8[0].to_vector<uint32_t>(), q[0].to_vector<uint32_t>());
    auto z = quantize(zeros({4, 64}), std::nullopt, std::nullopt, "mxfp4");
    EXPECT_TRUE(all(equal(dequantize(z[0], z[1], std::nullopt, 32, 4, "mxfp4"), array(0.0f))).item<bool>());
  }
  // mxfp8: MLX's tolerance (allclose, rtol = atol = 0.1): the power-of-two scale is rounded from
  // log2(amax / 448), so the largest values may saturate at 448 * scale (1 -> 0.875 here).
  {
    array w = astype(randn({64, 32}, 11), bfloat16);
    auto q = quantize(w, 32, 8, "mxfp8");
    EXPECT_EQ(q[0].shape(), (Shape{64, 8}));
    array wh = dequantize(q[0], q[1], std::nullopt, 32, 8, "mxfp8", std::nullopt, float32);
    EXPECT_EQ(wh.dtype(), float32);
    EXPECT_TRUE(allclose(astype(w, float32), wh, 0.1, 0.1).item<bool>());
    EXPECT_GT(max_abs_diff(w, wh), 0.0);  // not a no-op
  }
  // nvfp4: groups of 16 with an E4M3 scale; exact on FP4 values with a 6 in each group; the
  // alternating case of MLX's test (small and large groups next to each other); a global scale.
  {
    std::vector<float> v(32 * 16);
    for (size_t i = 0; i < v.size(); ++i) v[i] = (i % 16 == 0) ? 6.0f : lut[(i * 5 + i / 3) % 16];
    array w = astype(array(v, {32, 16}), bfloat16);
    auto q = quantize(w, std::nullopt, std::nullopt, "nvfp4");
    EXPECT_EQ(q[0].shape(), (Shape{32, 2}));
    EXPECT_EQ(q[1].to_vector<uint8_t>()[0], 0x38);  // E4M3 1.0
    EXPECT_EQ(max_abs_diff(w, dequantize(q[0], q[1], std::nullopt, std::nullopt, std::nullopt, "nvfp4")), 0.0);
    std::vector<float> alt(64 * 16);
    for (size_t i = 0; i < alt.size(); ++i) alt[i] = (i / 16) % 2 == 0 ? 6.0f * std::ldexp(1.0f, -9) : 6.0f;
    array a = astype(array(alt, {64, 16}), bfloat16);
    auto qa = quantize(a, std::nullopt, std::nullopt, "nvfp4");
    EXPECT_LT(max_abs_diff(a, dequantize(qa[0], qa[1], std::nullopt, 16, 4, "nvfp4", std::nullopt, bfloat16)), 1e-6);
    array g = astype(max(abs(w)), float32);
    auto qg = quantize(w, std::nullopt, std::nullopt, "nvfp4", g);
    EXPECT_LT(max_abs_diff(w, dequantize(qg[0], qg[1], std::nullopt, 16, 4, "nvfp4", g)), 1e-5);
    auto z = quantize(zeros({4, 32}), std::nullopt, std::nullopt, "nvfp4");
    EXPECT_TRUE(all(equal(dequantize(z[0], z[1], std::nullopt, 16, 4, "nvfp4"), array(0.0f))).item<bool>());
  }
}

TEST(Quantize, FloatingModesMatchNumpyReferenceOfMlx) {
  // python3 tests/ops/quantized_ref.py: MLX's fp_quantize fallback on float32 (argmin over the FP4
  // table, E4M3 as the nearest value): the first four words, the sum of all words, the first four
  // scale bytes and the sum of the scale bytes.
  struct Row {
    const char* mode;
    uint32_t words[4];
    uint64_t word_sum;
    int scales[4];
    int scale_sum;
  };
  const Row rows[] = {
      {"mxfp4", {1029760447u, 240776647u, 240874454u, 3075305942u}, 148606312038u, {126, 126, 127, 127}, 2026},
      {"mxfp8", {4202032380u, 1811249610u, 4201901948u, 1375303388u}, 378755402262u, {120, 120, 120, 121}, 1927},
      {"nvfp4", {1029760447u, 240776647u, 240874454u, 2805817814u}, 151145597694u, {48, 49, 50, 51}, 1665},
  };
  for (const Row& r : rows) {
    SCOPED_TRACE(r.mode);
    auto q = quantize(ref_w(2, 256), std::nullopt, std::nullopt, r.mode);
    auto words = q[0].to_vector<uint32_t>();
    auto sc = q[1].to_vector<uint8_t>();
    for (int i = 0; i < 4; ++i) EXPECT_EQ(words[i], r.words[i]) << "word " << i;
    uint64_t sum = 0;
    for (uint32_t v : words) sum += v;
    EXPECT_EQ(sum, r.word_sum);
    int ssum = 0;
    for (uint8_t v : sc) ssum += v;
    for (int i = 0; i < 4; ++i) EXPECT_EQ(int(sc[i]), r.scales[i]) << "scale " << i;
    EXPECT_EQ(ssum, r.scale_sum);
  }
}

TEST(QuantizedMatmul, EqualsMatmulWithDequantizedWeights) {
  // MLX's test_qmm: quantized_matmul(x, w_q, ...) == x @ dequantize(w_q).T (and without transpose).
  for (int gs : kGroups) {
    for (int bits : kBits) {
      SCOPED_TRACE("bits " + std::to_string(bits) + " group_size " + std::to_string(gs));
      array x = randn({5, 256}, 21);
      auto q = quantize(randn({48, 256}, 22), gs, bits);
      array wh = dequantize(q[0], q[1], q[2], gs, bits);
      array y = quantized_matmul(x, q[0], q[1], q[2], true, gs, bits);
      EXPECT_EQ(y.shape(), (Shape{5, 48}));
      EXPECT_LT(max_abs_diff(y, matmul(x, transpose(wh))), 1e-4);
      // transpose = false: w is (K, N) quantized along N.
      auto qn = quantize(randn({256, 128}, 23), gs, bits);
      array whn = dequantize(qn[0], qn[1], qn[2], gs, bits);
      array yn = quantized_matmul(x, qn[0], qn[1], qn[2], false, gs, bits);
      EXPECT_EQ(yn.shape(), (Shape{5, 128}));
      EXPECT_LT(max_abs_diff(yn, matmul(x, whn)), 1e-4);
    }
  }
}

TEST(QuantizedMatmul, ShapesDtypesAndBatches) {
  auto q = quantize(randn({64, 128}, 31));
  array wh = dequantize(q[0], q[1], q[2]);
  // x of 1, 3 and 4 dimensions against one matrix
  for (Shape xs : {Shape{128}, Shape{2, 3, 128}, Shape{2, 1, 3, 128}}) {
    array x = randn(xs, 32);
    array y = quantized_matmul(x, q[0], q[1], q[2]);
    Shape ys = xs;
    ys.back() = 64;
    EXPECT_EQ(y.shape(), ys);
    EXPECT_LT(max_abs_diff(y, matmul(x, transpose(wh))), 1e-4);
  }
  // no rows
  EXPECT_EQ(quantized_matmul(zeros({0, 128}), q[0], q[1], q[2]).shape(), (Shape{0, 64}));
  // a strided x
  array xt = transpose(randn({128, 6}, 33));
  EXPECT_LT(max_abs_diff(quantized_matmul(xt, q[0], q[1], q[2]), matmul(xt, transpose(wh))), 1e-4);
  // batched w, broadcast against x's batch axes
  auto qb = quantize(randn({3, 32, 128}, 34), 32, 8);
  array whb = dequantize(qb[0], qb[1], qb[2], 32, 8);
  array xb = randn({2, 1, 4, 128}, 35);
  array yb = quantized_matmul(xb, qb[0], qb[1], qb[2], true, 32, 8);
  EXPECT_EQ(yb.shape(), (Shape{2, 3, 4, 32}));
  EXPECT_LT(max_abs_diff(yb, matmul(xb, swapaxes(whb, -1, -2))), 1e-4);
  // half x: the result has x's dtype, computed in float32
  array xh = astype(randn({4, 128}, 36), bfloat16);
  auto qh = quantize(astype(randn({64, 128}, 37), bfloat16));
  array yh = quantized_matmul(xh, qh[0], qh[1], qh[2]);
  EXPECT_EQ(yh.dtype(), bfloat16);
  array ref = matmul(astype(xh, float32), transpose(astype(dequantize(qh[0], qh[1], qh[2]), float32)));
  EXPECT_LT(max_abs_diff(yh, ref), 0.05);
  // float32 x with float16 scales promotes to float32 (MLX: promote_types(x, scales))
  EXPECT_EQ(quantized_matmul(randn({2, 128}, 38), qh[0], qh[1], qh[2]).dtype(), float32);
  // a large product that the kernel splits across threads and blocks
  array xl = randn({8, 1024}, 39);
  auto ql = quantize(randn({1000, 1024}, 40));
  EXPECT_LT(max_abs_diff(quantized_matmul(xl, ql[0], ql[1], ql[2]), matmul(xl, transpose(dequantize(ql[0], ql[1], ql[2])))),
            1e-3);
}

// Half x on both of its paths: kept half, with the weights dequantized into half panels for half
// products (where the GEMM seam reads the half type; forced here, the seam then widening inside each
// product on a CPU without half kernels), and cast to float32 elsewhere. Each against float64
// products of the rounded inputs, within the half type's unit (the panels' and the result's
// rounding) times sum |x| |w|; the gradient with respect to x the same way; and gather_qmm's pairs.
TEST(QuantizedMatmul, HalfXOnBothPaths) {
  for (int native : {0, 1}) {
    kernels::detail::force_gemm_reads_half(native);
    for (Dtype d : {bfloat16, float16}) {
      const double unit = d == bfloat16 ? 1.0 / 128 : 1.0 / 1024;
      for (bool tr : {true, false}) {
        const std::string what = std::string(native ? "half panels" : "float32") + (d == bfloat16 ? ", bfloat16" : ", float16") +
                                 (tr ? ", transposed" : "");
        const array x = randn({40, 256}, 51, d), cot = randn({40, 128}, 53, d);
        auto q = quantize(randn(tr ? Shape{128, 256} : Shape{256, 128}, 52, d), 64, 4);
        const array y = quantized_matmul(x, q[0], q[1], q[2], tr, 64, 4);
        ASSERT_EQ(y.dtype(), d) << what;
        ASSERT_EQ(y.primitive().name() == std::string("QuantizedMatmul"), bool(native)) << what;  // else a cast of it
        const array wd = astype(dequantize(q[0], q[1], q[2], 64, 4), float64);
        const array w = tr ? transpose(wd) : wd;  // (256, 128)
        const array x64 = astype(x, float64);
        const array err = abs(subtract(astype(y, float64), matmul(x64, w)));
        EXPECT_TRUE(all(less_equal(err, multiply(matmul(abs(x64), abs(w)), array(unit)))).item<bool>())
            << what << ": largest error " << max(err).item<double>();
        auto f = [&](const std::vector<array>& p) {
          return std::vector<array>{quantized_matmul(p[0], q[0], q[1], q[2], tr, 64, 4)};
        };
        const array dx = vjp(f, {x}, {cot}).second[0];
        ASSERT_EQ(dx.dtype(), d) << what;
        const array c64 = astype(cot, float64);
        const array derr = abs(subtract(astype(dx, float64), matmul(c64, transpose(w))));
        EXPECT_TRUE(all(less_equal(derr, multiply(matmul(abs(c64), abs(transpose(w))), array(unit)))).item<bool>())
            << what << ": dx, largest error " << max(derr).item<double>();
        // gather_qmm, the same kernel over a stack of 3 weights: each index pair against float64.
        auto qs = quantize(randn(tr ? Shape{3, 128, 256} : Shape{3, 256, 128}, 54, d), 64, 4);
        const array xs = randn({2, 40, 256}, 55, d);
        array li(std::vector<int32_t>{1, 0, 1}, {3}, int32), ri(std::vector<int32_t>{2, 2, 0}, {3}, int32);
        const array ys = gather_qmm(xs, qs[0], qs[1], qs[2], li, ri, tr, 64, 4);
        ASSERT_EQ(ys.dtype(), d) << what;
        ASSERT_EQ(ys.shape(), (Shape{3, 40, 128})) << what;
        ASSERT_EQ(ys.primitive().name() == std::string("GatherQMM"), bool(native)) << what;
        const array ws = astype(dequantize(qs[0], qs[1], qs[2], 64, 4), float64);
        const std::vector<int32_t> lv = li.to_vector<int32_t>(), rv = ri.to_vector<int32_t>();
        for (int i = 0; i < 3; ++i) {
          const array wi = tr ? transpose(take(ws, rv[i], 0)) : take(ws, rv[i], 0);
          const array xi = astype(take(xs, lv[i], 0), float64);
          const array gerr = abs(subtract(astype(take(ys, i, 0), float64), matmul(xi, wi)));
          EXPECT_TRUE(all(less_equal(gerr, multiply(matmul(abs(xi), abs(wi)), array(unit)))).item<bool>())
              << what << ": gather_qmm pair " << i << ", largest error " << max(gerr).item<double>();
        }
      }
    }
  }
  kernels::detail::force_gemm_reads_half(-1);
}

TEST(QuantizedMatmul, FloatingModes) {
  for (std::string mode : {"mxfp4", "mxfp8", "nvfp4"}) {
    SCOPED_TRACE(mode);
    array x = randn({3, 64}, 41);
    auto q = quantize(randn({40, 64}, 42), std::nullopt, std::nullopt, mode);
    array wh = dequantize(q[0], q[1], std::nullopt, std::nullopt, std::nullopt, mode, std::nullopt, float32);
    array y = quantized_matmul(x, q[0], q[1], std::nullopt, true, std::nullopt, std::nullopt, mode);
    EXPECT_EQ(y.dtype(), float32);  // x's dtype for the fp modes
    EXPECT_LT(max_abs_diff(y, matmul(x, transpose(wh))), 1e-4);
    auto qn = quantize(randn({64, 32}, 43), std::nullopt, std::nullopt, mode);
    array whn = dequantize(qn[0], qn[1], std::nullopt, std::nullopt, std::nullopt, mode, std::nullopt, float32);
    array yn = quantized_matmul(x, qn[0], qn[1], std::nullopt, false, std::nullopt, std::nullopt, mode);
    EXPECT_LT(max_abs_diff(yn, matmul(x, whn)), 1e-4);
  }
}

TEST(GatherQmm, MatchesQuantizedMatmulPerIndexPair) {
  auto q = quantize(randn({4, 24, 64}, 51), 32, 4);
  array x = randn({3, 2, 64}, 52);
  array li(std::vector<int32_t>{2, 0, 1, 1}, {4}, int32), ri(std::vector<int32_t>{3, 3, 0, 2}, {4}, int32);
  array y = gather_qmm(x, q[0], q[1], q[2], li, ri, true, 32, 4);
  EXPECT_EQ(y.shape(), (Shape{4, 2, 24}));
  auto lv = li.to_vector<int32_t>(), rv = ri.to_vector<int32_t>();
  for (int i = 0; i < 4; ++i) {
    array yi = quantized_matmul(take(x, lv[i], 0), take(q[0], rv[i], 0), take(q[1], rv[i], 0), take(q[2], rv[i], 0),
                                true, 32, 4);
    EXPECT_LT(max_abs_diff(take(y, i, 0), yi), 1e-5) << "pair " << i;
  }
  // Only rhs indices: every x matrix in order, broadcast with the indices (MoE layers' use).
  array x1 = randn({2, 64}, 53);
  array y1 = gather_qmm(x1, q[0], q[1], q[2], std::nullopt, array(std::vector<int32_t>{1, 3}, {2}, int32), true, 32, 4);
  EXPECT_EQ(y1.shape(), (Shape{2, 2, 24}));
  array ref = quantized_matmul(x1, take(q[0], 3, 0), take(q[1], 3, 0), take(q[2], 3, 0), true, 32, 4);
  EXPECT_LT(max_abs_diff(take(y1, 1, 0), ref), 1e-5);
  // No indices at all: quantized_matmul (batch axes broadcast).
  array x4 = randn({4, 2, 64}, 54);
  EXPECT_LT(max_abs_diff(gather_qmm(x4, q[0], q[1], q[2], std::nullopt, std::nullopt, true, 32, 4),
                         quantized_matmul(x4, q[0], q[1], q[2], true, 32, 4)),
            0.0 + 1e-12);
  // The fp modes: the same per pair.
  auto qf = quantize(randn({4, 24, 64}, 55), std::nullopt, std::nullopt, "nvfp4");
  array yf = gather_qmm(x, qf[0], qf[1], std::nullopt, li, ri, true, std::nullopt, std::nullopt, "nvfp4");
  for (int i = 0; i < 4; ++i) {
    array yi = quantized_matmul(take(x, lv[i], 0), take(qf[0], rv[i], 0), take(qf[1], rv[i], 0), std::nullopt, true,
                                std::nullopt, std::nullopt, "nvfp4");
    EXPECT_LT(max_abs_diff(take(yf, i, 0), yi), 1e-5) << "nvfp4 pair " << i;
  }
  // An index past the stack is an error at eval.
  array bad = gather_qmm(x, q[0], q[1], q[2], std::nullopt, array(std::vector<int32_t>{4}, {1}, int32), true, 32, 4);
  EXPECT_THROW(bad.eval(), std::out_of_range);
}

TEST(QuantizedMatmul, GradientsMatchFiniteDifferences) {
  // x, scales and biases (float64 in the checker; the codes stay fixed).
  auto q = quantize(randn({6, 64}, 61), 32, 3);
  auto f = [&](const std::vector<array>& v) { return std::vector<array>{quantized_matmul(v[0], q[0], v[1], v[2], true, 32, 3)}; };
  auto r = check_grads(f, {randn({2, 3, 64}, 62), q[1], q[2]});
  EXPECT_TRUE(r.ok) << r.report;
  auto qn = quantize(randn({64, 32}, 63), 32, 4);
  auto fn = [&](const std::vector<array>& v) { return std::vector<array>{quantized_matmul(v[0], qn[0], v[1], v[2], false, 32, 4)}; };
  auto rn = check_grads(fn, {randn({3, 64}, 64), qn[1], qn[2]});
  EXPECT_TRUE(rn.ok) << rn.report;
  // batched w, broadcast x
  auto qb = quantize(randn({2, 5, 32}, 65), 32, 8);
  auto fb = [&](const std::vector<array>& v) { return std::vector<array>{quantized_matmul(v[0], qb[0], v[1], v[2], true, 32, 8)}; };
  auto rb = check_grads(fb, {randn({3, 1, 2, 32}, 66), qb[1], qb[2]});
  EXPECT_TRUE(rb.ok) << rb.report;
  // fp modes: x only
  auto qf = quantize(randn({8, 32}, 67), std::nullopt, std::nullopt, "mxfp4");
  auto ff = [&](const std::vector<array>& v) {
    return std::vector<array>{quantized_matmul(v[0], qf[0], qf[1], std::nullopt, true, std::nullopt, std::nullopt, "mxfp4")};
  };
  auto rf = check_grads(ff, {randn({2, 32}, 68)});
  EXPECT_TRUE(rf.ok) << rf.report;
}

TEST(GatherQmm, GradientsMatchFiniteDifferences) {
  auto q = quantize(randn({3, 6, 32}, 71), 32, 4);
  array li(std::vector<int32_t>{1, 0, 1}, {3}, int32), ri(std::vector<int32_t>{2, 2, 0}, {3}, int32);
  auto f = [&](const std::vector<array>& v) {
    return std::vector<array>{gather_qmm(v[0], q[0], v[1], v[2], li, ri, true, 32, 4)};
  };
  auto r = check_grads(f, {randn({2, 2, 32}, 72), q[1], q[2]});
  EXPECT_TRUE(r.ok) << r.report;
  auto qn = quantize(randn({2, 32, 64}, 73), 32, 2);
  array rin(std::vector<int32_t>{1, 0, 1}, {3}, int32);
  auto fn2 = [&](const std::vector<array>& v) {
    return std::vector<array>{gather_qmm(v[0], qn[0], v[1], v[2], std::nullopt, rin, false, 32, 2)};
  };
  auto rn = check_grads(fn2, {randn({3, 1, 32}, 74), qn[1], qn[2]});
  EXPECT_TRUE(rn.ok) << rn.report;
}

TEST(Dequantize, GradientsMatchFiniteDifferences) {
  auto q = quantize(randn({4, 64}, 81), 32, 5);
  auto f = [&](const std::vector<array>& v) { return std::vector<array>{dequantize(q[0], v[0], v[1], 32, 5)}; };
  auto r = check_grads(f, {q[1], q[2]});
  EXPECT_TRUE(r.ok) << r.report;
}

TEST(QuantizedMatmul, NoGradientForThePackedWeightsOrFpScales) {
  // MLX raises for the gradient of w_q (uint32) and of the fp modes' scales (uint8). In Loom both are
  // integer inputs, which the transforms refuse before the primitive is asked.
  auto q = quantize(randn({8, 64}, 91), 32, 4);
  array x = randn({2, 64}, 92);
  auto fw = [&](const std::vector<array>& v) { return loom::sum(quantized_matmul(x, v[0], q[1], q[2], true, 32, 4)); };
  EXPECT_THROW_MSG(grad(fw)({q[0]}), std::invalid_argument, "only floating-point inputs have gradients");
  auto qf = quantize(randn({8, 64}, 93), std::nullopt, std::nullopt, "mxfp8");
  auto fs = [&](const std::vector<array>& v) {
    return loom::sum(quantized_matmul(x, qf[0], v[0], std::nullopt, true, std::nullopt, std::nullopt, "mxfp8"));
  };
  EXPECT_THROW_MSG(grad(fs)({qf[1]}), std::invalid_argument, "only floating-point inputs have gradients");
  // The vjp with respect to x still works for the fp modes.
  auto fx = [&](const std::vector<array>& v) {
    return loom::sum(quantized_matmul(v[0], qf[0], qf[1], std::nullopt, true, std::nullopt, std::nullopt, "mxfp8"));
  };
  array gx = grad(fx)({x})[0];
  array wh = dequantize(qf[0], qf[1], std::nullopt, 32, 8, "mxfp8", std::nullopt, float32);
  EXPECT_LT(max_abs_diff(gx, broadcast_to(loom::sum(wh, 0), {2, 64})), 1e-4);  // d sum(x W^T) / dx = column sums of W
}

TEST(Fp8, ToFp8KnownValues) {
  // From tests/ops/quantized_ref.py: the nearest finite E4M3 value (ties to the even code), saturating at 448.
  const std::vector<double> xs = {0.0, -0.0, 1.0, -1.0, 0.5, 448.0, 449.0, 470.0, 1000000.0, -1000000.0, 0.013671875,
                                  0.0009765625, 0.001, 1.0625, 1.1875, 3.3, -7.77, 0.001953125, 0.0009765625, 240.0,
                                  232.0, 0.3, 1e-09};
  const std::vector<uint8_t> codes = {0x00, 0x80, 0x38, 0xB8, 0x30, 0x7E, 0x7E, 0x7E, 0x7E, 0xFE, 0x07, 0x00,
                                      0x01, 0x38, 0x3A, 0x45, 0xD0, 0x01, 0x00, 0x77, 0x76, 0x2A, 0x00};
  for (Dtype d : {float32, float64}) {
    array c = to_fp8(array(xs, {int(xs.size())}, d));
    EXPECT_EQ(c.dtype(), uint8);
    EXPECT_EQ(c.to_vector<uint8_t>(), codes);
  }
  // inf and NaN saturate (MLX's CPU conversion)
  array special(std::vector<float>{INFINITY, -INFINITY, NAN}, {3});
  EXPECT_EQ(to_fp8(special).to_vector<uint8_t>(), (std::vector<uint8_t>{0x7E, 0xFE, 0x7E}));
  // half inputs convert their value
  EXPECT_EQ(to_fp8(array(std::vector<float>{3.3f}, {1}, bfloat16)).to_vector<uint8_t>()[0], 0x45);
}

TEST(Fp8, FromFp8EveryCode) {
  std::vector<uint8_t> all(256);
  for (int i = 0; i < 256; ++i) all[i] = uint8_t(i);
  array c(all, {256}, uint8);
  auto got = from_fp8(c, float32).to_vector<float>();
  for (int i = 0; i < 256; ++i) {
    const int e = (i >> 3) & 15, m = i & 7;
    double v = e == 0 ? m / 8.0 * std::ldexp(1.0, -6) : (1 + m / 8.0) * std::ldexp(1.0, e - 7);
    if (i & 128) v = -v;
    EXPECT_EQ(double(got[i]), v) << "code " << i;  // 0x7F reads 480, as MLX (no NaN)
  }
  // Round trip: every code but 0x7F / 0xFF (which saturate to 448).
  auto back = to_fp8(from_fp8(c, float32)).to_vector<uint8_t>();
  for (int i = 0; i < 256; ++i) EXPECT_EQ(back[i], (i & 127) == 127 ? (i & 128) | 0x7E : i) << "code " << i;
  EXPECT_EQ(from_fp8(c, bfloat16).dtype(), bfloat16);
  EXPECT_EQ(from_fp8(c, float16).to_vector<float>(), got);
}

TEST(Quantize, BadInputsThrowNamingTheOp) {
  array w = randn({8, 64}, 101);
  EXPECT_THROW_MSG(quantize(w, 64, 4, "xyz"), std::invalid_argument, "[quantize] invalid quantization mode 'xyz'");
  EXPECT_THROW_MSG(quantize(zeros({8, 64}, int32)), std::invalid_argument, "[quantize] only floating");
  EXPECT_THROW_MSG(quantize(zeros({64})), std::invalid_argument, "at least 2 dimensions; got shape (64)");
  EXPECT_THROW_MSG(quantize(randn({8, 96}, 1), 64), std::invalid_argument, "(8,96) must be divisible by the group size 64");
  EXPECT_THROW_MSG(quantize(w, 16, 4), std::invalid_argument, "group_size 16 is not supported");
  EXPECT_THROW_MSG(quantize(w, 64, 7), std::invalid_argument, "bits 7 is not supported");
  EXPECT_THROW_MSG(quantize(w, 64, std::nullopt, "mxfp4"), std::invalid_argument, "mxfp4 quantization requires group_size 32");
  EXPECT_THROW_MSG(quantize(w, std::nullopt, 3, "mxfp4"), std::invalid_argument, "requires bits 4 but got 3");
  EXPECT_THROW_MSG(quantize(w, std::nullopt, 7, "mxfp8"), std::invalid_argument, "requires bits 8");
  EXPECT_THROW_MSG(quantize(w, 64, 4, "affine", array(1.0f)), std::invalid_argument, "only supported for 'nvfp4'");
  EXPECT_THROW_MSG(quantize(w, std::nullopt, std::nullopt, "nvfp4", ones({2})), std::invalid_argument, "must be a scalar");
  EXPECT_THROW_MSG(quantize(w, std::nullopt, std::nullopt, "nvfp4", array(1.0, float64)), std::invalid_argument,
                   "must be float32");

  auto q = quantize(w, 32, 4);
  EXPECT_THROW_MSG(dequantize(q[0], q[1]), std::invalid_argument, "[dequantize] biases must be given for affine");
  EXPECT_THROW_MSG(dequantize(q[0], q[1], q[2], 64, 4), std::invalid_argument, "do not match with group_size=64");
  EXPECT_THROW_MSG(dequantize(astype(q[0], int32), q[1], q[2], 32, 4), std::invalid_argument, "must be uint32");
  EXPECT_THROW_MSG(dequantize(q[0], astype(q[1], int32), astype(q[2], int32), 32, 4), std::invalid_argument,
                   "must be floating");
  EXPECT_THROW_MSG(dequantize(q[0], q[1], q[2], 32, 4, "affine", std::nullopt, int32), std::invalid_argument,
                   "output dtype must be floating");
  EXPECT_THROW_MSG(dequantize(q[0], q[1], q[2], 32, 4, "xyz"), std::invalid_argument, "invalid quantization mode");
  auto qf = quantize(w, std::nullopt, std::nullopt, "mxfp4");
  EXPECT_THROW_MSG(dequantize(qf[0], qf[1], q[2], 32, 4, "mxfp4"), std::invalid_argument, "biases must not be given");
  EXPECT_THROW_MSG(dequantize(qf[0], astype(qf[1], float32), std::nullopt, 32, 4, "mxfp4"), std::invalid_argument,
                   "scales must be uint8");
  EXPECT_THROW_MSG(dequantize(qf[0], qf[1], std::nullopt, 64, 4, "mxfp4"), std::invalid_argument, "requires group_size 32");

  array x = randn({2, 64}, 102);
  auto qf32 = quantize(randn({8, 32}, 104), std::nullopt, std::nullopt, "mxfp4");
  EXPECT_THROW_MSG(quantized_matmul(x, q[0], q[1], q[2], true, 32, 4, "xyz"), std::invalid_argument,
                   "[quantized_matmul] invalid quantization mode");
  EXPECT_THROW_MSG(quantized_matmul(x, q[0], q[1], std::nullopt, true, 32, 4), std::invalid_argument,
                   "[quantized_matmul] biases must be given");
  EXPECT_THROW_MSG(quantized_matmul(x, q[0], astype(q[1], int32), astype(q[2], int32), true, 32, 4),
                   std::invalid_argument, "[quantized_matmul] scales and biases must be floating");
  EXPECT_THROW_MSG(quantized_matmul(x, q[0], q[1], q[2], true, 32, 4, "mxfp4"), std::invalid_argument,
                   "[quantized_matmul] mxfp4 scales must be uint8");
  EXPECT_THROW_MSG(quantized_matmul(zeros({2, 32}, int32), qf32[0], qf32[1], std::nullopt, true, 32, 4, "mxfp4"),
                   std::invalid_argument, "only floating x");
  // MLX's test_throw: a transposed w_q or scales, or transpose = false with the (N, K) layout.
  auto q16 = quantize(randn({16, 64}, 103), 32, 4);
  EXPECT_THROW_MSG(quantized_matmul(x, transpose(q16[0]), q16[1], q16[2], true, 32, 4), std::invalid_argument,
                   "[quantized_matmul] w (8,16) and scales (16,2) do not match with group_size=32 and bits=4");
  EXPECT_THROW_MSG(quantized_matmul(x, q16[0], transpose(q16[1]), transpose(q16[2]), true, 32, 4),
                   std::invalid_argument, "w (16,8) and scales (2,16) do not match");
  EXPECT_THROW_MSG(quantized_matmul(x, q16[0], q16[1], q16[2], false, 32, 4), std::invalid_argument,
                   "the last dimension of x (2,64) does not match the dequantized w (16, 64)");
  EXPECT_THROW_MSG(quantized_matmul(randn({2, 32}, 3), q[0], q[1], q[2], true, 32, 4), std::invalid_argument,
                   "the last dimension of x (2,32)");
  EXPECT_THROW_MSG(quantized_matmul(randn({3, 3, 64}, 4), broadcast_to(q16[0], {2, 16, 8}), broadcast_to(q16[1], {2, 16, 2}),
                                    broadcast_to(q16[2], {2, 16, 2}), true, 32, 4),
                   std::invalid_argument, "the batch dimensions of x (3,3,64) and w (2,16,8) do not broadcast");
  EXPECT_THROW_MSG(gather_qmm(x, q[0], q[1], std::nullopt, std::nullopt, array(0), true, 32, 4), std::invalid_argument,
                   "[gather_qmm] biases must be given");
  EXPECT_THROW_MSG(gather_qmm(x, q[0], q[1], q[2], std::nullopt, array(0.5f), true, 32, 4), std::invalid_argument,
                   "[gather_qmm] rhs_indices must have an integer dtype");
  EXPECT_THROW_MSG(to_fp8(array(std::vector<int32_t>{1}, {1}, int32)), std::invalid_argument, "[to_fp8] only floating");
  EXPECT_THROW_MSG(from_fp8(array(1.0f), float32), std::invalid_argument, "[from_fp8] x must be uint8");
  EXPECT_THROW_MSG(from_fp8(array(std::vector<uint8_t>{1}, {1}, uint8), int32), std::invalid_argument,
                   "[from_fp8] the dtype must be floating");
}

TEST(Quantize, UnderVmap) {
  using loom::testing::expect_vmap_matches_loop;
  const array w = randn({3, 16, 64}, 91);
  for (int ax : {0, 1}) {
    expect_vmap_matches_loop([](const std::vector<array>& v) { return quantize(v[0], 32, 4); }, {w}, {ax}, {}, 0, 0);
    expect_vmap_matches_loop([](const std::vector<array>& v) { return quantize(v[0], 32, 4, "mxfp4"); }, {w}, {ax}, {},
                             0, 0);
  }
  // Dequantize with codes, scales and biases batched or shared.
  auto q = quantize(w, 32, 4);
  auto deq = [](const std::vector<array>& v) { return std::vector<array>{dequantize(v[0], v[1], v[2], 32, 4)}; };
  expect_vmap_matches_loop(deq, {q[0], q[1], q[2]}, {0, 0, 0}, {}, 0, 0);
  expect_vmap_matches_loop(deq, {q[0], take(q[1], 0, 0), take(q[2], 1, 0)}, {0, -1, -1}, {}, 0, 0);
  expect_vmap_matches_loop(deq, {q[0], q[1], q[2]}, {1, 1, 1}, {}, 0, 0);
  // quantized_matmul: a batch of inputs against one weight (more rows), and per-entry weights.
  const array x = randn({4, 5, 64}, 92);
  auto w2 = quantize(randn({24, 64}, 93), 32, 4);
  auto qmm = [](const std::vector<array>& v) {
    return std::vector<array>{quantized_matmul(v[0], v[1], v[2], v[3], true, 32, 4)};
  };
  expect_vmap_matches_loop(qmm, {x, w2[0], w2[1], w2[2]}, {0, -1, -1, -1}, {}, 1e-5, 1e-5);
  expect_vmap_matches_loop(qmm, {x, w2[0], w2[1], w2[2]}, {1, -1, -1, -1}, {}, 1e-5, 1e-5);
  auto ws = quantize(randn({4, 24, 64}, 94), 32, 4);
  expect_vmap_matches_loop(qmm, {x, ws[0], ws[1], ws[2]}, {0, 0, 0, 0}, {}, 1e-5, 1e-5);
  expect_vmap_matches_loop(qmm, {take(x, 0, 0), ws[0], ws[1], ws[2]}, {-1, 0, 0, 0}, {}, 1e-5, 1e-5);
  const array x3 = randn({4, 2, 5, 64}, 95);  // x with a stack axis of its own, weights per entry
  expect_vmap_matches_loop(qmm, {x3, ws[0], ws[1], ws[2]}, {0, 0, 0, 0}, {}, 1e-5, 1e-5);
  auto stack = quantize(randn({2, 24, 64}, 96), 32, 4);  // a shared stack of weights
  expect_vmap_matches_loop(qmm, {x3, stack[0], stack[1], stack[2]}, {0, -1, -1, -1}, {}, 1e-5, 1e-5);
  expect_vmap_matches_loop(qmm, {moveaxis(x3, 0, 2), stack[0], stack[1], stack[2]}, {2, -1, -1, -1}, {}, 1e-5, 1e-5);
  // Gradients of x through it, per entry.
  auto loss = [&](const std::vector<array>& v) {
    return sum(square(quantized_matmul(v[0], w2[0], w2[1], w2[2], true, 32, 4)));
  };
  expect_vmap_matches_loop(grad(loss), {x}, {0}, {}, 1e-5, 1e-5);
  // fp8 conversions.
  expect_vmap_matches_loop([](const std::vector<array>& v) { return std::vector<array>{from_fp8(to_fp8(v[0]), float32)}; },
                           {x}, {2}, {}, 0, 0);
}

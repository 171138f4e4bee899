// scaled_dot_product_attention: the fused kernel against the op-by-op composition it replaces, its
// gradients against finite differences, and its argument checks.
#include <functional>
#include <limits>

#include "../test_utils.h"

namespace loom {
namespace {

using testing::lcg_uniform;

// softmax(scale q k^T + mask) v, op by op.
array attention_composed(const array& q, const array& k, const array& v, double scale, const std::optional<array>& mask) {
  array s = matmul(q * scale, swapaxes(k, -1, -2));
  if (mask) s = s + astype(*mask, s.dtype());
  return matmul(softmax(s, -1), v);
}

array causal_mask(int L, int S, Dtype d = float32) {
  std::vector<double> m(size_t(L) * S, 0.0);
  const double low = d == float64 ? std::numeric_limits<double>::lowest() : double(std::numeric_limits<float>::lowest());
  for (int i = 0; i < L; ++i) {
    for (int j = i + 1 + (S - L); j < S; ++j) m[size_t(i) * S + j] = low;
  }
  return array(m, {L, S}, d);
}

array f32(const Shape& s, unsigned seed, double lo = -1.5, double hi = 1.5) {
  return astype(lcg_uniform(s, lo, hi, seed), float32);
}

void expect_attention_close(array a, array b, double tol) {
  ASSERT_EQ(a.shape(), b.shape());
  auto x = a.to_vector<double>(), y = b.to_vector<double>();
  for (size_t i = 0; i < x.size(); ++i) EXPECT_NEAR(x[i], y[i], tol * (1 + std::abs(y[i]))) << "at " << i;
}

// The gradients with respect to q, k and v of sum(reduce(attention(q, k, v, mask))), the fused op's
// against the composition's.
void expect_same_grads(const array& q, const array& k, const array& v, double scale, const array& mask,
                       const std::function<array(const array&)>& reduce) {
  auto loss = [&](bool fused) {
    return [&, fused](const std::vector<array>& x) {
      return reduce(fused ? fast::scaled_dot_product_attention(x[0], x[1], x[2], scale, mask)
                          : attention_composed(x[0], x[1], x[2], scale, mask));
    };
  };
  auto g1 = value_and_grad(ScalarVectorFn(loss(true)), {0, 1, 2})({q, k, v}).second;
  auto g2 = value_and_grad(ScalarVectorFn(loss(false)), {0, 1, 2})({q, k, v}).second;
  for (size_t i = 0; i < g1.size(); ++i) expect_attention_close(g1[i], g2[i], 2e-5);
}

TEST(ScaledDotProductAttention, MatchesTheComposition) {
  const double scale = 0.4;
  // (B, H, L, E) with S != L and Ev != E; 70 rows cross the kernel's 32-row blocks.
  for (int L : {5, 70}) {
    const int S = L + 3;
    array q = f32({2, 3, L, 4}, 1), k = f32({2, 3, S, 4}, 2), v = f32({2, 3, S, 6}, 3);
    std::vector<std::optional<array>> masks = {std::nullopt, causal_mask(L, S), f32({2, 3, L, S}, 4, -2, 2),
                                               f32({L, S}, 5, -1, 1) + causal_mask(L, S)};
    for (const auto& m : masks) {
      array got = fast::scaled_dot_product_attention(q, k, v, scale, m);
      expect_attention_close(got, attention_composed(q, k, v, scale, m), 1e-5);
      // The gradients of every input (and of a float mask) agree with the composition's.
      array w = f32({2, 3, L, 6}, 6);
      std::vector<array> in{q, k, v};
      if (m) in.push_back(broadcast_to(*m, {2, 3, L, S}));
      auto loss = [&](bool fused) {
        return [&, fused](const std::vector<array>& x) {
          std::optional<array> mm = x.size() > 3 ? std::optional<array>(x[3]) : std::nullopt;
          array o = fused ? fast::scaled_dot_product_attention(x[0], x[1], x[2], scale, mm) : attention_composed(x[0], x[1], x[2], scale, mm);
          return sum(o * w);
        };
      };
      std::vector<int> args{0, 1, 2};
      if (m) args.push_back(3);
      auto g1 = value_and_grad(ScalarVectorFn(loss(true)), args)(in).second;
      auto g2 = value_and_grad(ScalarVectorFn(loss(false)), args)(in).second;
      for (size_t i = 0; i < g1.size(); ++i) expect_attention_close(g1[i], g2[i], 2e-5);
    }
  }
}

TEST(ScaledDotProductAttention, BooleanMaskAndOtherRanks) {
  // A boolean mask attends where true; 3-D inputs (no head axis) and a strided (transposed) key.
  array q = f32({2, 4, 3}, 7), kt = f32({2, 3, 5}, 8), v = f32({2, 5, 2}, 9);
  array k = swapaxes(kt, -1, -2);
  std::vector<bool> keep;
  for (int i = 0; i < 4 * 5; ++i) keep.push_back(i % 3 != 1);
  array mb(std::vector<int>(keep.begin(), keep.end()), {4, 5}, bool_);
  array ref = attention_composed(q, k, v, 0.7, where(mb, array(0.0f), array(std::numeric_limits<float>::lowest())));
  expect_attention_close(fast::scaled_dot_product_attention(q, k, v, 0.7, mb), ref, 1e-5);
  // Two axes: one batch.
  expect_attention_close(fast::scaled_dot_product_attention(take(q, array(0), 0), take(k, array(0), 0),
                                            take(v, array(0), 0), 0.7),
               attention_composed(take(q, array(0), 0), take(k, array(0), 0), take(v, array(0), 0), 0.7, std::nullopt), 1e-5);
  // float16 computes in float32 and returns float16.
  array h = fast::scaled_dot_product_attention(astype(q, float16), astype(k, float16), astype(v, float16), 0.7);
  EXPECT_EQ(h.dtype(), float16);
  expect_attention_close(astype(h, float32), attention_composed(q, k, v, 0.7, std::nullopt), 2e-3);
}

TEST(ScaledDotProductAttention, InfiniteAndFullyMaskedRows) {
  // -inf inside a row and at its end, a row masked everywhere with the lowest float (the softmax of the
  // mask: uniform weights) and one row masked but for its last key; 40 queries span two blocks.
  const int L = 40, S = 37;
  const float inf = std::numeric_limits<float>::infinity(), low = std::numeric_limits<float>::lowest();
  std::vector<float> m(size_t(L) * S, 0.0f);
  for (int i = 0; i < L; ++i) {
    for (int j = 0; j < S; ++j) {
      if ((i + j) % 5 == 0) m[size_t(i) * S + j] = -inf;
      if (j > S - 4 && i % 3 == 0) m[size_t(i) * S + j] = -inf;
    }
  }
  for (int j = 0; j < S; ++j) m[size_t(7) * S + j] = low, m[size_t(33) * S + j] = j == S - 1 ? 0.0f : -inf;
  array mask(m, {L, S}, float32);
  array q = f32({2, L, 5}, 21), k = f32({2, S, 5}, 22), v = f32({2, S, 3}, 23), w = f32({2, L, 3}, 24);
  expect_attention_close(fast::scaled_dot_product_attention(q, k, v, 0.6, mask), attention_composed(q, k, v, 0.6, mask), 1e-5);
  expect_same_grads(q, k, v, 0.6, mask, [&](const array& o) { return sum(o * w); });
  // Row 33 attends to the last key alone.
  auto o = fast::scaled_dot_product_attention(q, k, v, 0.6, mask).to_vector<float>();
  auto vv = v.to_vector<float>();
  for (int c = 0; c < 3; ++c) EXPECT_FLOAT_EQ(o[33 * 3 + c], vv[(S - 1) * 3 + c]);
}

TEST(ScaledDotProductAttention, WideHeadsFromAProjection) {
  // Head sizes of 16 and more (the kernels' transposed copies of q and dout go 16 x 16 tiles at a time,
  // with leftover rows and columns), q, k and v strided views of one projection's output as in a
  // multi-head layer, 50 queries against 50 keys under a causal mask.
  const int B = 2, L = 50, H = 2, E = 20, Ev = 18;
  array proj = f32({B, L, H * (2 * E + Ev)}, 25);
  auto heads = [&](int begin, int width) {
    array x = slice(proj, {0, 0, begin}, {B, L, begin + H * width});
    return transpose(reshape(x, {B, L, H, width}), {0, 2, 1, 3});
  };
  array q = heads(0, E), k = heads(H * E, E), v = heads(2 * H * E, Ev);
  array mask = causal_mask(L, L), w = f32({B, H, L, Ev}, 26);
  expect_attention_close(fast::scaled_dot_product_attention(q, k, v, 0.3, mask), attention_composed(q, k, v, 0.3, mask), 1e-5);
  expect_same_grads(q, k, v, 0.3, mask, [&](const array& o) { return sum(o * w); });
  // The cotangent strided too: the gradient of a projection of the output.
  array wo = f32({B, L, H * Ev}, 27);
  expect_same_grads(q, k, v, 0.3, mask,
                    [&](const array& o) { return sum(reshape(transpose(o, {0, 2, 1, 3}), {B, L, H * Ev}) * wo); });
}

TEST(ScaledDotProductAttention, SelfAttentionGradientsLandInTheProjectionsLayout) {
  // q, k and v of one shape split from one projection (B, L, 3 H E), as a self-attention layer
  // makes them: the backward writes dq, dk and dv interleaved in one buffer, (B, L, 3, H, E), so the
  // projection's gradient (the split's backward concatenates them) is that buffer, uncopied.
  const int B = 2, L = 37, H = 3, E = 16;
  array proj = f32({B, L, 3 * H * E}, 41), mask = causal_mask(L, L), w = f32({B, H, L, E}, 42);
  auto loss = [&](bool fused) {
    return [&, fused](const std::vector<array>& x) {
      auto parts = split(x[0], 3, 2);
      std::vector<array> heads;
      for (const array& p : parts) heads.push_back(transpose(reshape(p, {B, L, H, E}), {0, 2, 1, 3}));
      array o = fused ? fast::scaled_dot_product_attention(heads[0], heads[1], heads[2], 0.25, mask)
                      : attention_composed(heads[0], heads[1], heads[2], 0.25, mask);
      return sum(o * w);
    };
  };
  array g1 = value_and_grad(ScalarVectorFn(loss(true)), 0)({proj}).second[0];
  array g2 = value_and_grad(ScalarVectorFn(loss(false)), 0)({proj}).second[0];
  expect_attention_close(g1, g2, 2e-5);
  EXPECT_TRUE(g1.flags().row_contiguous);
  // The heads' gradients directly: views 16 floats apart in one buffer when q, k and v are so laid
  // out themselves; head-major gradients of their own for separate q, k and v of the same shape.
  auto head = [&](int part) {
    return transpose(reshape(slice(proj, {0, 0, part * H * E}, {B, L, (part + 1) * H * E}), {B, L, H, E}), {0, 2, 1, 3});
  };
  auto head_grads = [&](const array& q, const array& k, const array& v) {
    auto g = value_and_grad(ScalarVectorFn([&](const std::vector<array>& x) {
                              return sum(fast::scaled_dot_product_attention(x[0], x[1], x[2], 0.25, mask) * w);
                            }),
                            {0, 1, 2})({q, k, v})
                 .second;
    eval(g);
    return g;
  };
  auto g = head_grads(head(0), head(1), head(2));
  EXPECT_EQ(static_cast<char*>(g[1].raw_data()) - static_cast<char*>(g[0].raw_data()), H * E * 4);
  EXPECT_EQ(static_cast<char*>(g[2].raw_data()) - static_cast<char*>(g[0].raw_data()), 2 * H * E * 4);
  EXPECT_EQ(g[0].strides(), (Strides{L * 3 * H * E, E, 3 * H * E, 1}));
  array q = head(0) * 1.0f;
  auto sep = head_grads(q, q * 0.5f, q + 1.0f);
  auto same = head_grads(head(0), head(0), head(0));  // one view three times: not a qkv split
  for (const auto* gs : {&sep, &same}) {
    for (const array& x : *gs) EXPECT_EQ(x.strides(), (Strides{L * H * E, E, H * E, 1}));
  }
  expect_attention_close(sep[0], value_and_grad(ScalarVectorFn([&](const std::vector<array>& x) {
                                        return sum(attention_composed(x[0], x[1], x[2], 0.25, mask) * w);
                                      }),
                                      {0, 1, 2})({q, q * 0.5f, q + 1.0f})
                           .second[0],
               2e-5);
}

TEST(ScaledDotProductAttention, CausalRowsSeeOnlyThePast) {
  // Row 0 of a causal attention is v's row 0 exactly; row i averages v[0..i] when the scores are equal.
  array q = zeros({1, 1, 4, 2}), k = f32({1, 1, 4, 2}, 10);
  array v = reshape(astype(arange(8), float32), {1, 1, 4, 2});
  array o = fast::scaled_dot_product_attention(q, k, v, 1.0, causal_mask(4, 4));
  testing::expect_array(o, {1, 1, 4, 2}, {0, 1, 1, 2, 2, 3, 3, 4}, 1e-6);
}

TEST(ScaledDotProductAttention, GradientsMatchFiniteDifferences) {
  array q = lcg_uniform({1, 2, 3, 2}, -1, 1, 11), k = lcg_uniform({1, 2, 4, 2}, -1, 1, 12),
        v = lcg_uniform({1, 2, 4, 3}, -1, 1, 13);
  array m = lcg_uniform({1, 2, 3, 4}, -1, 1, 14) + causal_mask(3, 4, float64);
  auto attend = [](const std::vector<array>& x) {
    return std::vector<array>{fast::scaled_dot_product_attention(x[0], x[1], x[2], 0.8, x[3])};
  };
  auto r = check_grads(attend, {q, k, v, m});
  EXPECT_TRUE(r.ok) << r.report;
  auto no_mask = [](const std::vector<array>& x) {
    return std::vector<array>{fast::scaled_dot_product_attention(x[0], x[1], x[2], 1.3)};
  };
  r = check_grads(no_mask, {q, k, v});
  EXPECT_TRUE(r.ok) << r.report;
}

TEST(ScaledDotProductAttention, BackwardGradientsMatchFiniteDifferences) {
  // The fused backward (ScaledDotProductAttentionGrad) as a function of q, k, v and the cotangent.
  array q = lcg_uniform({2, 3, 2}, -1, 1, 15), k = lcg_uniform({2, 3, 2}, -1, 1, 16),
        v = lcg_uniform({2, 3, 2}, -1, 1, 17), g = lcg_uniform({2, 3, 2}, -1, 1, 18);
  array m = causal_mask(3, 3, float64);
  auto backward = [&](const std::vector<array>& x) {
    auto f = [&](const std::vector<array>& y) {
      return std::vector<array>{fast::scaled_dot_product_attention(y[0], y[1], y[2], 0.9, m)};
    };
    return vjp(f, {x[0], x[1], x[2]}, {x[3]}).second;
  };
  auto r = check_grads(backward, {q, k, v, g});
  EXPECT_TRUE(r.ok) << r.report;
}

TEST(ScaledDotProductAttention, BadInputsNameTheShapes) {
  array q = zeros({2, 4, 3}), k = zeros({2, 5, 3}), v = zeros({2, 5, 2});
  EXPECT_THROW_MSG(fast::scaled_dot_product_attention(q, zeros({2, 5, 4}), v, 1.0), std::invalid_argument,
                   "keys (2,5,4)");
  EXPECT_THROW_MSG(fast::scaled_dot_product_attention(q, k, zeros({2, 6, 2}), 1.0), std::invalid_argument,
                   "scaled_dot_product_attention");
  EXPECT_THROW_MSG(fast::scaled_dot_product_attention(zeros({4}), k, v, 1.0), std::invalid_argument, "at least 2");
  EXPECT_THROW_MSG(fast::scaled_dot_product_attention(astype(q, int32), astype(k, int32), astype(v, int32), 1.0),
                   std::invalid_argument, "floating-point");
  EXPECT_THROW_MSG(fast::scaled_dot_product_attention(q, k, v, 1.0, zeros({4, 4})), std::invalid_argument,
                   "does not broadcast");
}

}  // namespace
}  // namespace loom

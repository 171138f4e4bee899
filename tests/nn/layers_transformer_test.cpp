#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "loom/loom.h"
#include "loom/nn/activations.h"
#include "loom/nn/linear.h"
#include "loom/nn/transformer.h"
#include "../test_utils.h"

using namespace loom;
using loom::testing::joined;
using loom::testing::expect_array;

namespace {


void set_identity_projections(nn::MultiHeadAttention& mha, int dims) {
  for (const char* p : {"query_proj", "key_proj", "value_proj", "out_proj"}) {
    mha.update({{std::string(p) + ".weight", eye(dims)}});
  }
}

double transformer_sigmoid_ref(double x) { return 1.0 / (1.0 + std::exp(-x)); }

// Rows [0, t) of (B, L, D) arrays, as a flat vector.
std::vector<float> prefix(const array& a, int t) {
  return slice(a, {0, 0, 0}, {a.shape(0), t, a.shape(2)}).to_vector<float>();
}

}  // namespace

TEST(MultiHeadAttention, ParameterNamesAndShapesFollowMLX) {
  nn::MultiHeadAttention mha(8, 2);
  EXPECT_EQ(joined(mha.parameters().names()), "query_proj.weight key_proj.weight value_proj.weight out_proj.weight");
  EXPECT_EQ(mha.num_parameters(), 4u * 64);
  nn::MultiHeadAttention biased(8, 2, std::nullopt, std::nullopt, std::nullopt, std::nullopt, std::nullopt, true);
  EXPECT_EQ(joined(biased.parameters().names()),
            "query_proj.weight query_proj.bias key_proj.weight key_proj.bias value_proj.weight value_proj.bias "
            "out_proj.weight out_proj.bias");
  // query 6, key 5 (value input defaults to key's), value_dims 4, value_output_dims 3.
  nn::MultiHeadAttention custom(8, 2, 6, 5, std::nullopt, 4, 3);
  EXPECT_EQ(custom.query_proj.weight.shape(), (Shape{8, 6}));
  EXPECT_EQ(custom.key_proj.weight.shape(), (Shape{8, 5}));
  EXPECT_EQ(custom.value_proj.weight.shape(), (Shape{4, 5}));
  EXPECT_EQ(custom.out_proj.weight.shape(), (Shape{3, 4}));
  EXPECT_EQ(custom(ones({2, 7, 6}), ones({2, 3, 5}), ones({2, 3, 5})).shape(), (Shape{2, 7, 3}));
}

TEST(MultiHeadAttention, Errors) {
  EXPECT_THROW_MSG(nn::MultiHeadAttention(8, 3), std::invalid_argument,
                   "[nn::MultiHeadAttention] num_heads 3 must divide dims 8");
  EXPECT_THROW_MSG(nn::MultiHeadAttention(8, 2, std::nullopt, std::nullopt, std::nullopt, 5), std::invalid_argument,
                   "num_heads 2 must divide value_dims 5");
  EXPECT_THROW_MSG(nn::MultiHeadAttention(8, 0), std::invalid_argument, "num_heads 0");
  nn::MultiHeadAttention mha(4, 2);
  EXPECT_THROW_MSG(mha(ones({2, 3, 4}), ones({2, 5, 4}), ones({2, 4, 4})), std::invalid_argument,
                   "expected queries (B, L, 4), keys (B, S, 4) and values (B, S, 4), got queries (2,3,4), keys (2,5,4) "
                   "and values (2,4,4)");
  EXPECT_THROW_MSG(mha(ones({3, 4}), ones({3, 4}), ones({3, 4})), std::invalid_argument, "got queries (3,4)");
  EXPECT_THROW_MSG(mha(ones({2, 3, 4}), ones({2, 3, 4}), ones({2, 3, 4}), zeros({3, 4})), std::invalid_argument,
                   "the mask of shape (3,4) does not broadcast to the scores (B, num_heads, L, S) = (2,2,3,3)");
}

TEST(MultiHeadAttention, HandComputedSingleHead) {
  nn::MultiHeadAttention mha(2, 1);
  set_identity_projections(mha, 2);
  array q({1.0f, 0.0f}, {1, 1, 2});
  array k({1.0f, 0.0f, 0.0f, 1.0f}, {1, 2, 2});
  array v({1.0f, 2.0f, 3.0f, 4.0f}, {1, 2, 2});
  // scores (1/sqrt(2), 0): weights sigmoid(1/sqrt(2)) and the rest.
  double p = transformer_sigmoid_ref(1 / std::sqrt(2.0));
  expect_array(mha(q, k, v), {1, 1, 2}, {p * 1 + (1 - p) * 3, p * 2 + (1 - p) * 4}, 1e-6);
  // An additive mask that hides key 1 leaves value 0; a boolean mask does the same.
  expect_array(mha(q, k, v, array({0.0f, -1e9f}, {1, 2})), {1, 1, 2}, {1, 2}, 1e-6);
  expect_array(mha(q, k, v, array({true, false}, {1, 2})), {1, 1, 2}, {1, 2}, 1e-6);
}

TEST(MultiHeadAttention, HeadsAttendSeparately) {
  // dims 4, 2 heads with identity projections: head 0 sees features 0-1, head 1 features 2-3.
  nn::MultiHeadAttention mha(4, 2);
  set_identity_projections(mha, 4);
  array q({1.0f, 0.0f, 0.0f, 1.0f}, {1, 1, 4});
  array k({1.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 1.0f}, {1, 2, 4});
  array v({1.0f, 1.0f, 1.0f, 1.0f, 3.0f, 3.0f, 3.0f, 3.0f}, {1, 2, 4});
  // Head 0: scores (1/sqrt2, 0); head 1: scores (0, 1/sqrt2).
  double p = transformer_sigmoid_ref(1 / std::sqrt(2.0));
  double h0 = p * 1 + (1 - p) * 3, h1 = (1 - p) * 1 + p * 3;
  expect_array(mha(q, k, v), {1, 1, 4}, {h0, h0, h1, h1}, 1e-6);
  // A per-head mask of shape (2, 1, 2): head 0 only sees key 1, head 1 only key 0.
  array mask({-1e9f, 0.0f, 0.0f, -1e9f}, {2, 1, 2});
  expect_array(mha(q, k, v, mask), {1, 1, 4}, {3, 3, 1, 1}, 1e-6);
}

TEST(MultiHeadAttention, CausalMaskHidesTheFuture) {
  array m = nn::MultiHeadAttention::create_additive_causal_mask(3);
  const double low = -static_cast<double>(std::numeric_limits<float>::max());
  expect_array(m, {3, 3}, {0, low, low, 0, 0, low, 0, 0, 0});
  EXPECT_EQ(m.dtype(), float32);
  array h = nn::MultiHeadAttention::create_additive_causal_mask(2, float16);
  EXPECT_EQ(h.dtype(), float16);
  expect_array(h, {2, 2}, {0, -65504, 0, 0});
  EXPECT_THROW_MSG(nn::MultiHeadAttention::create_additive_causal_mask(2, int32), std::invalid_argument,
                   "dtype must be floating point, got int32");

  random::seed(12);
  nn::MultiHeadAttention mha(8, 2, std::nullopt, std::nullopt, std::nullopt, std::nullopt, std::nullopt, true);
  array x = random::normal({2, 6, 8});
  array mask = nn::MultiHeadAttention::create_additive_causal_mask(6);
  array y = mha(x, x, x, mask);
  // Change positions 3..5: outputs at 0..2 stay exactly the same, later ones change.
  array x2 = slice_update(x, random::normal({2, 3, 8}), {0, 3, 0}, {2, 6, 8});
  array y2 = mha(x2, x2, x2, mask);
  EXPECT_EQ(prefix(y2, 3), prefix(y, 3));
  EXPECT_NE(y2.to_vector<float>(), y.to_vector<float>());
  // The first position attends only to itself: its output is out_proj(value_proj(x_0)).
  array first = slice(x, {0, 0, 0}, {2, 1, 8});
  expect_array(reshape(slice(y, {0, 0, 0}, {2, 1, 8}), {2, 8}), {2, 8},
               reshape(mha.out_proj(mha.value_proj(first)), {2, 8}).to_vector<double>(), 1e-5);
  // A boolean causal mask gives the same result.
  array tri = greater_equal(reshape(arange(6), {6, 1}), reshape(arange(6), {1, 6}));
  expect_array(mha(x, x, x, tri), y.shape(), y.to_vector<double>(), 1e-6);
}

TEST(MultiHeadAttention, GradientsMatchFiniteDifferences) {
  random::seed(13);
  nn::MultiHeadAttention mha(4, 2, std::nullopt, std::nullopt, std::nullopt, std::nullopt, std::nullopt, true);
  const auto names = mha.parameters().names();
  array mask = nn::MultiHeadAttention::create_additive_causal_mask(3, float64);
  auto fn = [&](const std::vector<array>& v) {
    nn::ParamTree p;
    for (size_t i = 0; i < names.size(); ++i) p.insert(names[i], v[i + 2]);
    mha.update(p);
    return std::vector<array>{mha(v[0], v[1], v[1], mask)};
  };
  std::vector<array> primals = {random::normal({2, 3, 4}, float64), random::normal({2, 3, 4}, float64)};
  for (const auto& [name, value] : mha.parameters()) primals.push_back(astype(value, float64));
  auto r = check_grads(fn, primals);
  EXPECT_TRUE(r.ok) << r.report;
}

TEST(MultiHeadAttention, SelfAttentionTakesOneProjectionGemmWithTheSameResults) {
  // mha(x, x, x) projects with one GEMM of the stacked weights; a copy of x as keys and values takes
  // the three separate projections. Values and every gradient agree.
  random::seed(21);
  for (bool bias : {false, true}) {
    nn::MultiHeadAttention mha(8, 2, std::nullopt, std::nullopt, std::nullopt, std::nullopt, std::nullopt, bias);
    const auto names = mha.parameters().names();
    array x = random::normal({2, 5, 8}, float64);
    array mask = nn::MultiHeadAttention::create_additive_causal_mask(5, float64);
    for (const auto& [name, value] : mha.parameters()) mha.update({{name, astype(value, float64)}});
    auto loss = [&](bool fused) {
      return [&, fused](const std::vector<array>& v) {
        nn::ParamTree p;
        for (size_t i = 0; i < names.size(); ++i) p.insert(names[i], v[i + 1]);
        mha.update(p);
        array kv = fused ? v[0] : v[0] * 1.0;
        return std::vector<array>{sum(square(mha(v[0], kv, kv, mask)))};
      };
    };
    std::vector<array> primals = {x};
    for (const auto& [name, value] : mha.parameters()) primals.push_back(value);
    auto fused = vjp(loss(true), primals, {array(1.0)});
    auto separate = vjp(loss(false), primals, {array(1.0)});
    EXPECT_NEAR(fused.first[0].item<double>(), separate.first[0].item<double>(), 1e-9);
    for (size_t i = 0; i < primals.size(); ++i) {
      auto a = fused.second[i].to_vector<double>(), b = separate.second[i].to_vector<double>();
      ASSERT_EQ(a.size(), b.size());
      for (size_t k = 0; k < a.size(); ++k) EXPECT_NEAR(a[k], b[k], 1e-9) << "argument " << i << " element " << k;
    }
  }
}

TEST(TransformerEncoderLayer, NamesAndResidualIdentities) {
  nn::TransformerEncoderLayer layer(4, 2);
  EXPECT_EQ(joined(layer.parameters().names()),
            "attention.query_proj.weight attention.key_proj.weight attention.value_proj.weight "
            "attention.out_proj.weight ln1.weight ln1.bias ln2.weight ln2.bias linear1.weight linear1.bias "
            "linear2.weight linear2.bias");
  EXPECT_EQ(layer.linear1.weight.shape(), (Shape{16, 4}));  // mlp_dims = 4 * dims
  EXPECT_EQ(nn::TransformerEncoderLayer(4, 2, 6).linear2.weight.shape(), (Shape{4, 6}));
  // With the attention output and the MLP output zeroed, the pre-norm block is the identity and the
  // post-norm block is LayerNorm applied twice.
  nn::ParamTree zero{{"attention.out_proj.weight", zeros({4, 4})},
                     {"linear2.weight", zeros({4, 16})},
                     {"linear2.bias", zeros({4})}};
  layer.update(zero);
  random::seed(14);
  array x = random::normal({2, 3, 4});
  expect_array(layer(x), {2, 3, 4}, x.to_vector<double>(), 1e-6);
  nn::TransformerEncoderLayer post(4, 2, std::nullopt, 0.0, nullptr, false);
  post.update(zero);
  auto xs = x.to_vector<double>();
  std::vector<double> want;
  for (int r = 0; r < 6; ++r) {
    std::vector<double> row(xs.begin() + 4 * r, xs.begin() + 4 * r + 4);
    for (int pass = 0; pass < 2; ++pass) {
      double m = 0, v = 0;
      for (double e : row) m += e / 4;
      for (double e : row) v += (e - m) * (e - m) / 4;
      for (double& e : row) e = (e - m) / std::sqrt(v + 1e-5);
    }
    want.insert(want.end(), row.begin(), row.end());
  }
  expect_array(post(x), {2, 3, 4}, want, 1e-5);
  EXPECT_THROW_MSG(layer(ones({3, 4})), std::invalid_argument,
                   "[nn::TransformerEncoderLayer] expected input (B, L, 4), got shape (3,4)");
  EXPECT_THROW_MSG(nn::TransformerEncoderLayer(6, 4), std::invalid_argument, "num_heads 4 must divide dims 6");
}

TEST(TransformerEncoderLayer, CausalityDropoutAndActivation) {
  random::seed(15);
  for (bool norm_first : {true, false}) {
    nn::TransformerEncoderLayer layer(8, 2, 16, 0.0, nn::gelu, norm_first);
    array mask = nn::MultiHeadAttention::create_additive_causal_mask(5);
    array x = random::normal({1, 5, 8});
    array x2 = slice_update(x, random::normal({1, 2, 8}), {0, 3, 0}, {1, 5, 8});
    EXPECT_EQ(prefix(layer(x2, mask), 3), prefix(layer(x, mask), 3)) << norm_first;
  }
  nn::TransformerEncoderLayer drop(8, 2, 16, 0.5);
  array x = random::normal({2, 4, 8});
  EXPECT_NE(drop(x).to_vector<float>(), drop(x).to_vector<float>());
  drop.eval();
  EXPECT_FALSE(drop.dropout2.training());
  EXPECT_EQ(drop(x).to_vector<float>(), drop(x).to_vector<float>());
}

TEST(TransformerEncoder, StackNamesAndTraining) {
  nn::TransformerEncoder enc(2, 8, 2, 16);
  auto names = enc.parameters().names();
  ASSERT_EQ(names.size(), 2u * 12 + 2);
  EXPECT_EQ(names[0], "layers.0.attention.query_proj.weight");
  EXPECT_EQ(names[12], "layers.1.attention.query_proj.weight");
  EXPECT_EQ(names[24], "ln.weight");
  EXPECT_EQ(names[25], "ln.bias");

  // A tiny causal language model learns a fixed batch with plain gradient descent.
  struct TinyLM : nn::Module {
    nn::Embedding embed{16, 8};
    nn::TransformerEncoder encoder{1, 8, 2, 16};
    nn::Linear head{8, 16};
    TinyLM() {
      register_module("embed", embed);
      register_module("encoder", encoder);
      register_module("head", head);
    }
    array operator()(const array& tokens) const {
      array mask = nn::MultiHeadAttention::create_additive_causal_mask(tokens.shape(1));
      return head(encoder(embed(tokens), mask));
    }
  };
  random::seed(16);
  TinyLM lm;
  array tokens = random::randint(0, 16, {4, 6});
  array targets = random::randint(0, 16, {4, 6});
  auto loss_fn = [&](const array& t, const array& y) {
    array logp = nn::log_softmax(lm(t));
    return -mean(take_along_axis(logp, expand_dims(y, -1), -1));
  };
  auto step = nn::value_and_grad(lm, loss_fn);
  float first = 0, last = 0;
  for (int i = 0; i < 30; ++i) {
    auto [loss, grads] = step(tokens, targets);
    EXPECT_EQ(grads.size(), lm.trainable_parameters().size());
    nn::ParamTree params = lm.parameters();
    nn::ParamTree next;
    for (const auto& [name, g] : grads) next.insert(name, params[name] - g * 0.5f);
    lm.update(next);
    eval(loss, lm.parameters());
    (i == 0 ? first : last) = loss.item<float>();
  }
  EXPECT_NEAR(first, std::log(16.0f), 0.5f);
  EXPECT_LT(last, 0.5f * first);
}

TEST(RoPE, HandComputedRotations) {
  nn::RoPE rope(2);
  EXPECT_TRUE(rope.parameters().empty());
  // One pair with frequency 1: position l rotates (1, 0) to (cos l, sin l).
  array x({1.0f, 0.0f, 1.0f, 0.0f, 1.0f, 0.0f}, {3, 2});
  expect_array(rope(x), {3, 2}, {1, 0, std::cos(1.0), std::sin(1.0), std::cos(2.0), std::sin(2.0)}, 1e-6);
  expect_array(rope(x, 5), {3, 2},
               {std::cos(5.0), std::sin(5.0), std::cos(6.0), std::sin(6.0), std::cos(7.0), std::sin(7.0)}, 1e-6);
  // dims 4, base 10000: frequencies 1 and 0.01. Position 1 of a length-2 sequence.
  const double c1 = std::cos(1.0), s1 = std::sin(1.0), c2 = std::cos(0.01), s2 = std::sin(0.01);
  nn::RoPE trad(4, true);
  array t({0.0f, 0.0f, 0.0f, 0.0f, 1.0f, 0.0f, 1.0f, 0.0f}, {2, 4});  // pairs (0,1), (2,3)
  expect_array(slice(trad(t), {1, 0}, {2, 4}), {1, 4}, {c1, s1, c2, s2}, 1e-6);
  nn::RoPE half(4);
  array u({0.0f, 0.0f, 0.0f, 0.0f, 1.0f, 1.0f, 0.0f, 0.0f}, {2, 4});  // pairs (0,2), (1,3)
  expect_array(slice(half(u), {1, 0}, {2, 4}), {1, 4}, {c1, c2, s1, s2}, 1e-6);
  // scale multiplies the positions; features past dims are untouched.
  nn::RoPE scaled(2, false, 10000, 0.5);
  expect_array(scaled(array({0.0f, 0.0f, 1.0f, 0.0f}, {2, 2})), {2, 2}, {0, 0, std::cos(0.5), std::sin(0.5)}, 1e-6);
  nn::RoPE partial(2);
  array w({1.0f, 0.0f, 5.0f, 6.0f, 1.0f, 0.0f, 7.0f, 8.0f}, {2, 4});
  expect_array(partial(w), {2, 4}, {1, 0, 5, 6, std::cos(1.0), std::sin(1.0), 7, 8}, 1e-6);
}

TEST(RoPE, PreservesNormsAndDependsOnRelativePosition) {
  random::seed(17);
  for (bool traditional : {false, true}) {
    nn::RoPE rope(8, traditional);
    array x = random::normal({2, 7, 8});
    expect_array(sum(square(rope(x)), -1), {2, 7}, sum(square(x), -1).to_vector<double>(), 1e-5);
    // <R_m q, R_n k> depends only on m - n.
    array q = random::normal({1, 8}), k = random::normal({1, 8});
    auto dot_at = [&](int m, int n) { return sum(rope(q, m) * rope(k, n)).item<float>(); };
    EXPECT_NEAR(dot_at(3, 1), dot_at(10, 8), 1e-4);
    EXPECT_NEAR(dot_at(0, 5), dot_at(4, 9), 1e-4);
    EXPECT_GT(std::abs(dot_at(3, 1) - dot_at(1, 3)), 1e-4);  // and on its sign
    // Position 0 is the identity.
    expect_array(rope(q), {1, 8}, q.to_vector<double>(), 1e-6);
  }
  EXPECT_EQ(nn::RoPE(4)(ones({2, 3, 4}, float16)).dtype(), float16);
}

TEST(RoPE, Errors) {
  EXPECT_THROW_MSG(nn::RoPE(3), std::invalid_argument, "[nn::RoPE] dims must be positive and even, got 3");
  EXPECT_THROW_MSG(nn::RoPE(8)(ones({2, 3, 4})), std::invalid_argument,
                   "expected input (..., L, D) with D >= dims = 8, got shape (2,3,4)");
  EXPECT_THROW_MSG(nn::RoPE(2)(ones({2})), std::invalid_argument, "got shape (2)");
}

TEST(SinusoidalPositionalEncoding, HandComputed) {
  // dims 4: frequencies max_freq = 1 and min_freq = 1e-4; scale sqrt(2 / 4).
  nn::SinusoidalPositionalEncoding pe(4);
  EXPECT_TRUE(pe.parameters().empty());
  const double s = std::sqrt(0.5);
  expect_array(pe(array({0.0f, 2.0f})), {2, 4},
               {0, 0, s, s, s * std::sin(2.0), s * std::sin(2e-4), s * std::cos(2.0), s * std::cos(2e-4)}, 1e-6);
  nn::SinusoidalPositionalEncoding cf(4, 1e-4, 1.0, 1.0, true, true);
  const double f = 2 * M_PI;
  expect_array(cf(array(0.25f)), {4}, {std::cos(0.25 * f), std::cos(0.25e-4 * f), std::sin(0.25 * f),
                                        std::sin(0.25e-4 * f)},
               1e-6);
  // Geometric frequencies 1, 0.01, 1e-4 for dims 6; integer positions become float32.
  nn::SinusoidalPositionalEncoding six(6, 1e-4, 1.0, 1.0);
  expect_array(six.sigmas, {3}, {1, 0.01, 1e-4}, 1e-6);
  array y = six(reshape(arange(4), {2, 2}));
  EXPECT_EQ(y.shape(), (Shape{2, 2, 6}));
  EXPECT_EQ(y.dtype(), float32);
  expect_array(slice(y, {1, 1, 0}, {2, 2, 6}), {1, 1, 6},
               {std::sin(3.0), std::sin(0.03), std::sin(3e-4), std::cos(3.0), std::cos(0.03), std::cos(3e-4)}, 1e-6);
  EXPECT_THROW_MSG(nn::SinusoidalPositionalEncoding(5), std::invalid_argument, "dims must be even and at least 4, got 5");
  EXPECT_THROW_MSG(nn::SinusoidalPositionalEncoding(4, 0.0), std::invalid_argument, "must be positive");
}

// nn::QuantizedLinear, nn::QuantizedEmbedding, nn::to_quantized and nn::quantize (nn/quantized.h).
#include <gtest/gtest.h>

#include "../test_utils.h"
#include "loom/loom.h"
#include "loom/nn/quantized.h"

using namespace loom;
using loom::testing::joined;

namespace {

double max_abs_diff(const array& a, const array& b) {
  return max(abs(subtract(astype(a, float64), astype(b, float64)))).item<double>();
}

array rnd(const Shape& s, unsigned seed) { return astype(loom::testing::lcg_uniform(s, -1, 1, seed), float32); }

struct MLP : nn::Module {
  nn::Child<nn::Embedding> embed{this, "embed", 10, 64};
  nn::Child<nn::Linear> l1{this, "l1", 64, 128};
  nn::Child<nn::Linear> l2{this, "l2", 128, 32, false};
};

struct QMLP : nn::Module {
  nn::Child<nn::QuantizedEmbedding> embed{this, "embed", 10, 64, 32, 8};
  nn::Child<nn::QuantizedLinear> l1{this, "l1", 64, 128, true, 32, 8};
  nn::Child<nn::QuantizedLinear> l2{this, "l2", 128, 32, false, 32, 8};
};

}  // namespace

TEST(QuantizedLinear, OutputIsXTimesDequantizedWeightPlusBias) {
  nn::Linear lin(128, 48);
  lin.update({{"bias", rnd({48}, 2)}});
  for (int bits : {2, 3, 4, 5, 6, 8}) {
    for (int gs : {32, 64, 128}) {
      SCOPED_TRACE("bits " + std::to_string(bits) + " group_size " + std::to_string(gs));
      auto ql = nn::QuantizedLinear::from_linear(lin, gs, bits);
      array x = rnd({3, 5, 128}, 3);
      array w = dequantize(ql->weight, ql->scales, ql->biases, gs, bits);
      array expected = add(matmul(x, transpose(w)), *lin.bias);
      array y = (*ql)(x);
      EXPECT_EQ(y.shape(), (Shape{3, 5, 48}));
      EXPECT_LT(max_abs_diff(y, expected), 1e-4);
      // and close to the float layer, within the quantization error
      EXPECT_LT(max_abs_diff(y, lin(x)), bits >= 4 ? 0.5 : 3.0);
    }
  }
  // The float layer's own weight quantizes to the same codes.
  auto ql = nn::QuantizedLinear::from_linear(lin);
  EXPECT_EQ(ql->weight.to_vector<uint32_t>(), quantize(lin.weight)[0].to_vector<uint32_t>());
  EXPECT_EQ(ql->input_dims(), 128);
  EXPECT_EQ(ql->output_dims(), 48);
}

TEST(QuantizedLinear, ParametersAndFreezing) {
  nn::QuantizedLinear ql(64, 16);
  EXPECT_EQ(joined(ql.parameters().names()), "weight scales biases bias");
  EXPECT_EQ(ql.weight.dtype(), uint32);
  EXPECT_EQ(ql.weight.shape(), (Shape{16, 8}));  // defaults: group_size 64, bits 4
  EXPECT_EQ(ql.scales.shape(), (Shape{16, 1}));
  EXPECT_EQ(ql.group_size, 64);
  EXPECT_EQ(ql.bits, 4);
  // Frozen as MLX's: nothing to train; the bias starts at zero.
  EXPECT_TRUE(ql.trainable_parameters().empty());
  EXPECT_EQ(max(abs(*ql.bias)).item<float>(), 0.0f);
  nn::QuantizedLinear nb(64, 16, false, 32, 2);
  EXPECT_EQ(joined(nb.parameters().names()), "weight scales biases");
  nn::QuantizedLinear fp(64, 16, true, std::nullopt, std::nullopt, "mxfp4");
  EXPECT_EQ(joined(fp.parameters().names()), "weight scales bias");
  EXPECT_EQ(fp.scales.dtype(), uint8);
  EXPECT_EQ(fp(ones({2, 64})).shape(), (Shape{2, 16}));
  // from_linear keeps the float layer's bias trainable (MLX sets it after freezing).
  nn::Linear lin(64, 16);
  auto ql2 = nn::QuantizedLinear::from_linear(lin, 32, 4);
  EXPECT_EQ(joined(ql2->parameters().names()), "weight scales biases bias");
  EXPECT_EQ(joined(ql2->trainable_parameters().names()), "bias");
  // The bias gets a gradient through the quantized layer: d sum(y) / d bias = number of rows.
  auto loss = [&](const array& x) { return loom::sum((*ql2)(x)); };
  auto [value, grads] = nn::value_and_grad(*ql2, loss)(ones({3, 64}));
  EXPECT_EQ(grads.names(), std::vector<std::string>{"bias"});
  EXPECT_EQ(max(abs(subtract(grads.at("bias"), array(3.0f)))).item<float>(), 0.0f);
  EXPECT_THROW_MSG(ql(ones({2, 32})), std::invalid_argument, "[nn::QuantizedLinear] expected input with last axis 64");
  EXPECT_THROW_MSG(nn::QuantizedLinear(64, 16, true, 64, 4, "xyz"), std::invalid_argument, "invalid quantization mode 'xyz'");
  EXPECT_THROW_MSG(nn::QuantizedLinear(0, 16), std::invalid_argument, "must be positive");
}

TEST(QuantizedLinear, InputGradientMatchesFiniteDifferences) {
  nn::QuantizedLinear ql(64, 8, true, 32, 4);
  auto f = [&](const std::vector<array>& v) { return std::vector<array>{ql(v[0])}; };
  auto r = check_grads(f, {rnd({2, 64}, 5)});
  EXPECT_TRUE(r.ok) << r.report;
}

TEST(QuantizedEmbedding, RowsAreDequantizedAndAsLinearIsQuantizedMatmul) {
  nn::Embedding emb(12, 64);
  auto qe = nn::QuantizedEmbedding::from_embedding(emb, 32, 6);
  EXPECT_EQ(joined(qe->parameters().names()), "weight scales biases");
  EXPECT_TRUE(qe->trainable_parameters().empty());
  array idx(std::vector<int32_t>{3, 0, 11, 3, 7, 1}, {2, 3}, int32);
  array table = dequantize(qe->weight, qe->scales, qe->biases, 32, 6);
  array y = (*qe)(idx);
  EXPECT_EQ(y.shape(), (Shape{2, 3, 64}));
  EXPECT_EQ(max_abs_diff(y, take(table, idx, 0)), 0.0);  // the same rows, bit for bit
  EXPECT_LT(max_abs_diff(y, emb(idx)), 0.05);
  array x = rnd({4, 64}, 7);
  EXPECT_LT(max_abs_diff(qe->as_linear(x), matmul(x, transpose(table))), 1e-4);
  nn::QuantizedEmbedding fresh(20, 64);
  EXPECT_EQ(fresh.weight.shape(), (Shape{20, 8}));
  EXPECT_THROW_MSG(fresh(array(1.0f)), std::invalid_argument, "[nn::QuantizedEmbedding] indices must have an integer dtype");
}

TEST(NnQuantize, ParametersLoadIntoTheQuantizedTwin) {
  MLP model;
  QMLP qmodel;
  nn::ParamTree qp = nn::quantize(model, 32, 8);
  EXPECT_EQ(joined(qp.names()),
            "embed.weight embed.scales embed.biases l1.weight l1.scales l1.biases l1.bias l2.weight l2.scales l2.biases");
  qmodel.update(qp);  // every name and shape matches the twin's
  array idx(std::vector<int32_t>{1, 4, 9}, {3}, int32);
  array h = qmodel.embed(idx);
  EXPECT_LT(max_abs_diff(h, model.embed(idx)), 0.01);
  array x = rnd({3, 64}, 9);
  EXPECT_LT(max_abs_diff(qmodel.l1(x), model.l1(x)), 0.05);
  EXPECT_EQ(max_abs_diff(qp.at("l1.bias"), *model.l1.bias), 0.0);
  // A predicate: only l2.
  nn::ParamTree only = nn::quantize(model, 32, 4, "affine", [](const std::string& path, const nn::Module&) {
    return path == "l2";
  });
  EXPECT_EQ(joined(only.names()), "embed.weight l1.weight l1.bias l2.weight l2.scales l2.biases");
  EXPECT_EQ(only.at("l1.weight").dtype(), float32);
  EXPECT_EQ(only.at("l2.weight").dtype(), uint32);
  // to_quantized gives the layer itself.
  auto q = nn::to_quantized(model.l1, 64, 4);
  EXPECT_NE(dynamic_cast<nn::QuantizedLinear*>(q.get()), nullptr);
  EXPECT_NE(dynamic_cast<nn::QuantizedEmbedding*>(nn::to_quantized(model.embed).get()), nullptr);
  nn::Identity id;
  EXPECT_THROW_MSG(nn::to_quantized(id), std::invalid_argument, "only Linear and Embedding");
  struct WithIdentity : nn::Module {
    nn::Child<nn::Linear> l{this, "l", 32, 8};
    nn::Child<nn::Identity> id{this, "id"};
  } wi;
  EXPECT_EQ(joined(nn::quantize(wi, 32, 4).names()), "l.weight l.scales l.biases l.bias");  // the default skips id
  EXPECT_THROW_MSG(nn::quantize(wi, 32, 4, "affine", [](const std::string&, const nn::Module&) { return true; }),
                   std::invalid_argument, "the predicate chose 'id', which is not a Linear or an Embedding");
}

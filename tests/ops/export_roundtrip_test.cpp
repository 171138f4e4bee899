// Export round trips (core/serialize.h) of the primitives of indexing, sorting, random, hadamard, SVD,
// convolution, pooling, quantization and the fused fast:: ops: each node is built through its public
// op (gradient nodes through vjp / jvp), and its primitive saved, loaded and run again on the same
// inputs must give the same outputs bit for bit. Each parameter that changes what a primitive computes
// (or which name it has) gets a node of its own.
#include "../test_utils.h"

using namespace loom;
using loom::testing::expect_export_roundtrip;

namespace {

// Evaluated float32 data in [-1, 1).
array xr_data(const Shape& shape, unsigned seed) {
  array a = astype(loom::testing::lcg_uniform(shape, -1, 1, seed), float32);
  a.eval();
  return a;
}

// The first node (depth first from `out`) named `which`, or whose print() starts with `which` when
// that has a "(" (primitives that print their role: "Convolution(input_grad"), round-tripped.
void xr_roundtrip(const array& out, const std::string& which) {
  const bool by_print = which.find('(') != std::string::npos;
  std::vector<array> todo{out};
  while (!todo.empty()) {
    const array a = todo.back();
    todo.pop_back();
    if (!a.has_primitive()) continue;
    std::ostringstream os;
    a.primitive().print(os);
    if (by_print ? os.str().rfind(which, 0) == 0 : which == a.primitive().name()) {
      SCOPED_TRACE(os.str());
      expect_export_roundtrip(a);
      return;
    }
    for (const array& in : a.inputs()) todo.push_back(in);
  }
  ADD_FAILURE() << "no " << which << " node in the graph";
}

// The cotangents of `fun` at `primals` for cotangents of ones (unevaluated).
std::vector<array> xr_grads(const VectorFn& fun, const std::vector<array>& primals) {
  std::vector<array> cot;
  for (const array& o : fun(primals)) cot.push_back(ones_like(o));
  return vjp(fun, primals, cot).second;
}

}  // namespace

TEST(ExportRoundtrip, TakeAndScatterAlongAxis) {
  const array x = xr_data({3, 5, 2}, 1);
  const array idx = array({4, 0, 4, 2}, {2, 2}, int32);
  xr_roundtrip(take(x, idx, 1), "Take");
  const array along = array({4, 0, 1, 3, 2, 2}, {3, 1, 2}, int32);
  xr_roundtrip(take_along_axis(x, along, 1), "TakeAlongAxis");
  const array v = xr_data({3, 1, 2}, 2);
  xr_roundtrip(put_along_axis(x, along, v, 1), "PutAlongAxis");
  xr_roundtrip(scatter_add_axis(x, along, v, 1), "ScatterAddAxis");
  xr_roundtrip(scatter_add_take(x, idx, xr_data({3, 2, 2, 2}, 3), 1), "ScatterAddTake");
}

TEST(ExportRoundtrip, GatherAndScatters) {
  const array a = xr_data({4, 3, 5}, 4);
  const array i0 = array({3, 0, 3}, int32), i1 = array({1, 2, 0}, int32);
  xr_roundtrip(gather(a, {i0, i1}, {0, 2}, {1, 2, 1}), "Gather");
  const array u = xr_data({3, 1, 2, 1}, 5);
  xr_roundtrip(scatter(a, {i0, i1}, u, {0, 2}), "Scatter");
  xr_roundtrip(scatter_add(a, {i0, i1}, u, {0, 2}), "ScatterAdd");
  xr_roundtrip(scatter_prod(a, {i0, i1}, u, {0, 2}), "ScatterProd");
  xr_roundtrip(scatter_max(a, {i0, i1}, u, {0, 2}), "ScatterMax");
  xr_roundtrip(scatter_min(a, {i0, i1}, u, {0, 2}), "ScatterMin");
  // slice_update's Scatter names its own op in errors.
  const array start = array({1, 2}, int32);
  xr_roundtrip(slice_update(a, xr_data({2, 3, 2}, 6), start, {0, 2}), "Scatter");
}

TEST(ExportRoundtrip, MaskedScatterAndAsStrided) {
  const array a = xr_data({3, 4}, 7);
  xr_roundtrip(masked_scatter(a, greater(a, array(0.0f)), xr_data({12}, 8)), "MaskedScatter");
  xr_roundtrip(as_strided(a, {3, 2}, {3, 2}, 1), "AsStrided");
}

TEST(ExportRoundtrip, Sorting) {
  const array x = xr_data({4, 6}, 9);
  xr_roundtrip(sort(x, 1), "Sort");
  xr_roundtrip(argsort(x, 0), "ArgSort");
  xr_roundtrip(topk(x, 3, 1), "TopK");
  // ArgTopK is made only by TopK's derivatives.
  xr_roundtrip(xr_grads([](const std::vector<array>& v) { return std::vector<array>{topk(v[0], 2, 0)}; }, {x})[0],
               "ArgTopK");
  xr_roundtrip(argpartition(x, 2, 1), "ArgPartition");
  const array seq = array({-0.5f, 0.0f, 0.25f, 0.5f});
  xr_roundtrip(searchsorted(seq, x, "left"), "SearchSorted");
  xr_roundtrip(searchsorted(seq, array({0.0f, 0.5f, 0.3f}), "right"), "SearchSorted");
}

TEST(ExportRoundtrip, RandomDistributions) {
  const array k = random::key(42);
  xr_roundtrip(random::bits({3, 5}, 2, k), "RandomBits");
  xr_roundtrip(random::split(k, 3), "RandomBits");
  xr_roundtrip(random::uniform(array(-2.0f), array(3.0f), {4, 3}, float32, k), "RandomUniform");
  xr_roundtrip(random::normal({5}, float32, std::nullopt, std::nullopt, k), "RandomNormal");
  xr_roundtrip(random::normal({5}, float64, 0.5f, 2.0f, k), "RandomNormal");
  xr_roundtrip(random::truncated_normal(array(-1.0f), array(0.5f), {6}, float32, k), "RandomTruncatedNormal");
  xr_roundtrip(random::randint(array(-3), array(9), {7}, int16, k), "RandomInt");
  xr_roundtrip(random::bernoulli(array(0.3f), {8}, k), "RandomBernoulli");
  xr_roundtrip(random::gumbel({4}, float32, k), "RandomGumbel");
  xr_roundtrip(random::laplace({4}, float32, 1.5f, 0.25f, k), "RandomLaplace");
  xr_roundtrip(random::permutation(9, k), "RandomPermutation");
  xr_roundtrip(random::categorical(array({0.1f, 2.0f, -1.0f, 0.5f}), 0, Shape{6}, k), "RandomCategorical");
}

TEST(ExportRoundtrip, PermuteAxis) {
  const array k = random::key(7), x = xr_data({3, 5}, 10);
  xr_roundtrip(random::permutation(x, 1, k), "PermuteAxis");
  const auto g = xr_grads([&](const std::vector<array>& v) { return std::vector<array>{random::permutation(v[0], 1, k)}; },
                          {x});
  xr_roundtrip(g[0], "PermuteAxisInverse");
}

TEST(ExportRoundtrip, HadamardAndSVD) {
  // H_20 is not symmetric: the vjp's transposed transform differs from the forward's.
  const array x = xr_data({3, 20}, 11);
  xr_roundtrip(hadamard_transform(x, 0.5f), "Hadamard");
  const auto g = xr_grads([](const std::vector<array>& v) { return std::vector<array>{hadamard_transform(v[0])}; }, {x});
  xr_roundtrip(g[0], "Hadamard");
  const array m = xr_data({2, 4, 3}, 12);
  xr_roundtrip(linalg::svd(m, true)[0], "SVD(uv)");
  xr_roundtrip(linalg::svd(m, false)[0], "SVD(values)");
}

TEST(ExportRoundtrip, ConvolutionRoles) {
  const array x = xr_data({2, 6, 7, 4}, 13), w = xr_data({6, 3, 3, 2}, 14);
  auto conv = [](const std::vector<array>& v) {
    return std::vector<array>{conv2d(v[0], v[1], {2, 1}, {1, 0}, {1, 2}, 2)};
  };
  xr_roundtrip(conv({x, w})[0], "Convolution(forward");
  const auto g = xr_grads(conv, {x, w});
  xr_roundtrip(g[0], "Convolution(input_grad");
  xr_roundtrip(g[1], "Convolution(weight_grad");
  // Flipped taps and input dilation, asymmetric padding.
  const array wt = xr_data({3, 3, 2, 4}, 15);
  xr_roundtrip(conv_transpose2d(x, wt, {2, 1}, {1, 0}, {1, 1}, {1, 0}), "Convolution(forward, groups=1, flip");
  xr_roundtrip(conv_general(x, wt, {1, 2}, {0, 1}, {2, 0}, {1, 1}, {2, 1}, 1, true), "Convolution(forward");
}

TEST(ExportRoundtrip, PoolingRoles) {
  const array x = xr_data({2, 5, 6, 3}, 16);
  auto max_pool = [](const std::vector<array>& v) { return std::vector<array>{max_pool2d(v[0], {3, 2}, {2, 2}, {1, 0})}; };
  auto avg_pool = [](const std::vector<array>& v) { return std::vector<array>{avg_pool2d(v[0], {2, 3}, {1, 2}, {1, 1})}; };
  xr_roundtrip(max_pool({x})[0], "Pooling(max)");
  xr_roundtrip(avg_pool({x})[0], "Pooling(avg)");
  xr_roundtrip(xr_grads(max_pool, {x})[0], "Pooling(max_scatter)");
  xr_roundtrip(xr_grads(avg_pool, {x})[0], "Pooling(avg_scatter)");
  xr_roundtrip(jvp(max_pool, {x}, {xr_data({2, 5, 6, 3}, 17)}).second[0], "Pooling(max_gather)");
}

TEST(ExportRoundtrip, QuantizeAndDequantize) {
  const array w = xr_data({4, 64}, 18);
  const array gs = array(3.0f);
  for (const char* mode : {"affine", "mxfp4", "mxfp8", "nvfp4"}) {
    SCOPED_TRACE(mode);
    xr_roundtrip(quantize(w, std::nullopt, std::nullopt, mode)[0], "Quantize");
    std::vector<array> q = quantize(w, std::nullopt, std::nullopt, mode);
    eval(q);
    const std::optional<array> biases = q.size() == 3 ? std::optional<array>(q[2]) : std::nullopt;
    xr_roundtrip(dequantize(q[0], q[1], biases, std::nullopt, std::nullopt, mode), "Dequantize");
  }
  xr_roundtrip(quantize(w, 32, 3, "affine")[0], "Quantize");
  xr_roundtrip(quantize(w, std::nullopt, std::nullopt, "nvfp4", gs)[0], "Quantize");
  std::vector<array> q = quantize(w, std::nullopt, std::nullopt, "nvfp4", gs);
  eval(q);
  xr_roundtrip(dequantize(q[0], q[1], std::nullopt, std::nullopt, std::nullopt, "nvfp4", gs), "Dequantize");
}

TEST(ExportRoundtrip, QuantizedMatmulAndFP8) {
  const array x = xr_data({3, 64}, 19);
  std::vector<array> qt = quantize(xr_data({5, 64}, 20), 32, 4);  // (N, K): transposed
  std::vector<array> qn = quantize(xr_data({64, 32}, 21), 32, 8);  // (K, N)
  std::vector<array> qf = quantize(xr_data({5, 64}, 22), std::nullopt, std::nullopt, "mxfp4");
  eval(qt, qn, qf);
  xr_roundtrip(quantized_matmul(x, qt[0], qt[1], qt[2], true, 32, 4), "QuantizedMatmul");
  xr_roundtrip(quantized_matmul(x, qn[0], qn[1], qn[2], false, 32, 8), "QuantizedMatmul");
  xr_roundtrip(quantized_matmul(x, qf[0], qf[1], std::nullopt, true, std::nullopt, std::nullopt, "mxfp4"),
               "QuantizedMatmul");
  // Three stacked weight matrices, gathered by index.
  std::vector<array> qs = quantize(xr_data({3, 5, 64}, 23), 64, 4);
  eval(qs);
  const array xs = xr_data({2, 2, 64}, 24);
  xr_roundtrip(gather_qmm(xs, qs[0], qs[1], qs[2], array({1, 0, 1}, int32), array({2, 2, 0}, int32), true, 64, 4),
               "GatherQMM");
  xr_roundtrip(to_fp8(x), "ToFP8");
  array codes = to_fp8(x);
  codes.eval();
  xr_roundtrip(from_fp8(codes, float32), "FromFP8");
}

TEST(ExportRoundtrip, FastElementwiseAndSoftmax) {
  const array x = xr_data({3, 7}, 25);
  auto gelu = [](const std::vector<array>& v) { return std::vector<array>{fast::gelu(v[0])}; };
  xr_roundtrip(gelu({x})[0], "Gelu");
  xr_roundtrip(xr_grads(gelu, {x})[0], "GeluBackward");
  auto softmax = [](const std::vector<array>& v) { return std::vector<array>{fast::softmax(v[0])}; };
  auto log_softmax = [](const std::vector<array>& v) { return std::vector<array>{fast::log_softmax(v[0])}; };
  xr_roundtrip(softmax({x})[0], "FastSoftmax");
  xr_roundtrip(log_softmax({x})[0], "FastLogSoftmax");
  xr_roundtrip(xr_grads(softmax, {x})[0], "SoftmaxBackward");
  xr_roundtrip(xr_grads(log_softmax, {x})[0], "LogSoftmaxBackward");
}

TEST(ExportRoundtrip, FastNorms) {
  const array x = xr_data({4, 6}, 26), w = xr_data({6}, 27), b = xr_data({6}, 28);
  auto ln_wb = [](const std::vector<array>& v) { return std::vector<array>{fast::layer_norm(v[0], v[1], v[2], 1e-3)}; };
  auto ln_w = [](const std::vector<array>& v) { return std::vector<array>{fast::layer_norm(v[0], v[1], std::nullopt)}; };
  auto ln_b = [](const std::vector<array>& v) { return std::vector<array>{fast::layer_norm(v[0], std::nullopt, v[1], 0.5)}; };
  auto ln = [](const std::vector<array>& v) { return std::vector<array>{fast::layer_norm(v[0], std::nullopt, std::nullopt)}; };
  xr_roundtrip(ln_wb({x, w, b})[0], "LayerNorm");
  xr_roundtrip(ln_w({x, w})[0], "LayerNorm");
  xr_roundtrip(ln_b({x, b})[0], "LayerNorm");
  xr_roundtrip(ln({x})[0], "LayerNorm");
  xr_roundtrip(xr_grads(ln_wb, {x, w, b})[1], "LayerNormBackward");
  xr_roundtrip(xr_grads(ln_b, {x, b})[0], "LayerNormBackward");
  xr_roundtrip(xr_grads(ln, {x})[0], "LayerNormBackward");
  auto rms_w = [](const std::vector<array>& v) { return std::vector<array>{fast::rms_norm(v[0], v[1], 1e-2)}; };
  auto rms = [](const std::vector<array>& v) { return std::vector<array>{fast::rms_norm(v[0], std::nullopt)}; };
  xr_roundtrip(rms_w({x, w})[0], "RMSNorm");
  xr_roundtrip(rms({x})[0], "RMSNorm");
  xr_roundtrip(xr_grads(rms_w, {x, w})[1], "RMSNormBackward");
  xr_roundtrip(xr_grads(rms, {x})[0], "RMSNormBackward");
}

TEST(ExportRoundtrip, FastCrossEntropyAndAdam) {
  const array logits = xr_data({5, 3, 2}, 29);
  const array targets = array({0, 4, 2, 1, 3, 3}, {3, 2}, int32);
  auto ce = [&](const std::vector<array>& v) {
    return std::vector<array>{fast::softmax_cross_entropy(v[0], targets, 0, 0.1)};
  };
  xr_roundtrip(ce({logits})[0], "SoftmaxCrossEntropy");
  xr_roundtrip(xr_grads(ce, {logits})[0], "SoftmaxCrossEntropyBackward");
  fast::AdamStep hp;
  hp.lr = 0.05;
  hp.beta1 = 0.8;
  hp.beta2 = 0.95;
  hp.eps = 1e-6;
  hp.weight_decay = 0.1;
  hp.decoupled = false;
  hp.bias_correction = false;
  hp.step = 3;
  const array p = xr_data({4, 3}, 30), g = xr_data({4, 3}, 31), m = xr_data({4, 3}, 32);
  const array v = abs(xr_data({4, 3}, 33));
  xr_roundtrip(fast::adam_update(p, g, m, v, hp)[0], "AdamUpdate");
  hp.decoupled = true;
  hp.bias_correction = true;
  xr_roundtrip(fast::adam_update(p, g, m, v, hp)[1], "AdamUpdate");
}

TEST(ExportRoundtrip, FastAttention) {
  const array q = xr_data({2, 3, 4}, 34), k = xr_data({2, 5, 4}, 35), v = xr_data({2, 5, 3}, 36);
  const array mask = xr_data({3, 5}, 37);
  auto att = [](const std::vector<array>& a) {
    return std::vector<array>{fast::scaled_dot_product_attention(a[0], a[1], a[2], 0.7)};
  };
  auto att_mask = [&](const std::vector<array>& a) {
    return std::vector<array>{fast::scaled_dot_product_attention(a[0], a[1], a[2], 0.3, mask)};
  };
  xr_roundtrip(att({q, k, v})[0], "ScaledDotProductAttention");
  xr_roundtrip(att_mask({q, k, v})[0], "ScaledDotProductAttention");
  xr_roundtrip(xr_grads(att, {q, k, v})[1], "ScaledDotProductAttentionBackward");
  xr_roundtrip(xr_grads(att_mask, {q, k, v})[2], "ScaledDotProductAttentionBackward");
}

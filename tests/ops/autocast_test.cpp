// Autocast, the mixed-precision policy: which ops compute in the policy's dtype, which in float32,
// which as their inputs say; that the values are those of the explicit casts; that regions nest,
// belong to their thread, and give gradients in the parameters' own dtype.
#include <thread>

#include "../test_utils.h"
#include "loom/fast/fast.h"
#include "loom/ops/autocast.h"
#include "loom/ops/conv.h"
#include "loom/ops/linalg.h"

namespace loom {
namespace {

// float32 values (lcg_uniform gives float64, which the policy leaves alone).
array lcg_uniform(const Shape& shape, double lo, double hi, unsigned seed) {
  return astype(testing::lcg_uniform(shape, lo, hi, seed), float32);
}

// Equal element for element, bit for bit (both evaluated in the same dtype).
void expect_same(const array& got, const array& want) {
  ASSERT_EQ(got.dtype(), want.dtype());
  ASSERT_EQ(got.shape(), want.shape());
  EXPECT_TRUE(array_equal(got, want, true).item<bool>()) << got << "\nwant\n" << want;
}

TEST(Autocast, OffByDefaultAndScoped) {
  EXPECT_FALSE(autocast_dtype().has_value());
  {
    Autocast mixed(bfloat16);
    EXPECT_EQ(autocast_dtype(), std::optional<Dtype>(bfloat16));
    {
      Autocast inner(float16);
      EXPECT_EQ(autocast_dtype(), std::optional<Dtype>(float16));
      {
        Autocast off(float16, false);
        EXPECT_FALSE(autocast_dtype().has_value());
        EXPECT_EQ(matmul(ones({2, 2}), ones({2, 2})).dtype(), float32);
      }
      EXPECT_EQ(autocast_dtype(), std::optional<Dtype>(float16));
    }
    EXPECT_EQ(autocast_dtype(), std::optional<Dtype>(bfloat16));
  }
  EXPECT_FALSE(autocast_dtype().has_value());
}

TEST(Autocast, BelongsToItsThread) {
  Autocast mixed(bfloat16);
  std::optional<Dtype> seen = bfloat16;
  Dtype product = bfloat16;
  std::thread t([&] {
    seen = autocast_dtype();
    product = matmul(ones({2, 2}), ones({2, 2})).dtype();
  });
  t.join();
  EXPECT_FALSE(seen.has_value());
  EXPECT_EQ(product, float32);
}

TEST(Autocast, RejectsDtypesItHasNoUseFor) {
  for (Dtype d : {float32, float64, int32, complex64}) {
    EXPECT_THROW_MSG(Autocast{d}, std::invalid_argument, "[Autocast] computes in bfloat16 or float16");
  }
  EXPECT_NO_THROW((Autocast{float32, false}));  // off: the dtype is not used
}

TEST(Autocast, MatrixProductsComputeInThePolicyDtype) {
  const array a = lcg_uniform({4, 6}, -1, 1, 1), b = lcg_uniform({6, 5}, -1, 1, 2), bias = lcg_uniform({5}, -1, 1, 3);
  for (Dtype d : {bfloat16, float16}) {
    array mm = matmul(a, b), am = addmm(bias, a, b), batched = matmul(reshape(a, {2, 2, 6}), b);
    array want_mm = matmul(astype(a, d), astype(b, d));
    array want_am = addmm(astype(bias, d), astype(a, d), astype(b, d));
    {
      Autocast mixed(d);
      mm = matmul(a, b);
      am = addmm(bias, a, b);
      batched = matmul(reshape(a, {2, 2, 6}), b);
    }
    expect_same(mm, want_mm);
    expect_same(am, want_am);
    EXPECT_EQ(batched.dtype(), d);
    // Close to the float32 product, within the half type's rounding.
    EXPECT_TRUE(allclose(astype(mm, float32), matmul(a, b), 3e-2, 3e-2).item<bool>());
  }
}

TEST(Autocast, ConvolutionsGatherMmAndAttentionComputeInThePolicyDtype) {
  const array x = lcg_uniform({1, 6, 6, 2}, -1, 1, 4), w = lcg_uniform({3, 3, 3, 2}, -1, 1, 5);
  const array q = lcg_uniform({1, 2, 4, 8}, -1, 1, 6), k = lcg_uniform({1, 2, 5, 8}, -1, 1, 7),
              v = lcg_uniform({1, 2, 5, 8}, -1, 1, 8), mask = lcg_uniform({4, 5}, -1, 0, 9);
  const array ga = lcg_uniform({3, 2, 4}, -1, 1, 10), gb = lcg_uniform({2, 4, 3}, -1, 1, 11);
  const array want_conv = conv2d(astype(x, bfloat16), astype(w, bfloat16));
  const array want_tconv = conv_transpose2d(astype(x, bfloat16), astype(w, bfloat16));
  const array want_att = fast::scaled_dot_product_attention(astype(q, bfloat16), astype(k, bfloat16),
                                                            astype(v, bfloat16), 0.35, astype(mask, bfloat16));
  const array want_gmm = gather_mm(astype(ga, bfloat16), astype(gb, bfloat16), array({2, 0}), array({1, 1}));
  Autocast mixed(bfloat16);
  expect_same(conv2d(x, w), want_conv);
  expect_same(conv_transpose2d(x, w), want_tconv);
  expect_same(fast::scaled_dot_product_attention(q, k, v, 0.35, mask), want_att);
  expect_same(gather_mm(ga, gb, array({2, 0}), array({1, 1})), want_gmm);
}

TEST(Autocast, Float32ListComputesInFloat32) {
  const array x = astype(lcg_uniform({3, 7}, -3, 3, 12), bfloat16);
  const array x32 = astype(x, float32);
  const array w = lcg_uniform({7}, 0.5, 1.5, 13), bias = lcg_uniform({7}, -1, 1, 14);
  const array targets({1, 6, 0}, int32);
  struct Case {
    const char* name;
    std::function<array(const array&)> f;
  };
  const std::vector<Case> cases = {
      {"softmax", [](const array& a) { return softmax(a, -1); }},
      {"softmax over axis 0", [](const array& a) { return softmax(a, 0); }},
      {"log_softmax", [](const array& a) { return log_softmax(a, -1); }},
      {"logsumexp", [](const array& a) { return logsumexp(a, -1); }},
      {"sum", [](const array& a) { return sum(a, 1); }},
      {"sum of all", [](const array& a) { return sum(a); }},
      {"prod", [](const array& a) { return prod(a, 0); }},
      {"mean", [](const array& a) { return mean(a, -1); }},
      {"var", [](const array& a) { return var(a, 0); }},
      {"std", [](const array& a) { return std(a); }},
      {"cumsum", [](const array& a) { return cumsum(a, 1); }},
      {"cumprod", [](const array& a) { return cumprod(a, 1); }},
      {"layer_norm", [&](const array& a) { return fast::layer_norm(a, w, bias, 1e-5); }},
      {"rms_norm", [&](const array& a) { return fast::rms_norm(a, w, 1e-5); }},
      {"softmax_cross_entropy", [&](const array& a) { return fast::softmax_cross_entropy(a, targets); }},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const array want = c.f(x32);
    array got = x;
    {
      Autocast mixed(bfloat16);
      got = c.f(x);
    }
    EXPECT_EQ(got.dtype(), float32);
    expect_same(got, want);
  }
}

// A half array's sum under the policy reads it as it is (no float32 copy: a bias gradient's sum of
// its bfloat16 cotangent), accumulates and returns float32; its gradient comes back in bfloat16, its
// tangent in float32.
TEST(Autocast, SumOfAHalfArrayReadsItAsItIs) {
  array x = astype(lcg_uniform({300, 5}, -1, 1, 17), bfloat16);
  const std::vector<double> xv = astype(x, float64).to_vector<double>();
  std::vector<double> want(5, 0.0);
  for (size_t i = 0; i < xv.size(); ++i) want[i % 5] += xv[i];
  Autocast mixed(bfloat16);
  array s = sum(x, 0);
  EXPECT_EQ(s.dtype(), float32);
  const array r = sum(x, {0}, true);  // the reduction node itself (sum(x, 0) reshapes it)
  EXPECT_STREQ(r.primitive().name(), "Reduce");
  ASSERT_EQ(r.inputs().size(), 1u);
  EXPECT_EQ(r.inputs()[0].id(), x.id());
  const std::vector<float> got = s.to_vector<float>();
  for (int c = 0; c < 5; ++c) EXPECT_NEAR(got[c], want[c], 1e-4) << "column " << c;
  auto f = [](const std::vector<array>& p) { return std::vector<array>{sum(p[0], 0)}; };
  auto [outs, grads] = vjp(f, {x}, {array({1.0f, 2.0f, 3.0f, 4.0f, 5.0f})});
  EXPECT_EQ(grads[0].dtype(), bfloat16);
  EXPECT_EQ(grads[0].shape(), x.shape());
  EXPECT_EQ(slice(grads[0], {7, 0}, {8, 5}).to_vector<float>(), (std::vector<float>{1, 2, 3, 4, 5}));
  auto [jo, jt] = jvp(f, {x}, {ones_like(x)});
  EXPECT_EQ(jt[0].dtype(), float32);
  EXPECT_EQ(jt[0].to_vector<float>(), std::vector<float>(5, 300.0f));
}

TEST(Autocast, OtherOpsFollowTheirInputs) {
  const array h = astype(lcg_uniform({2, 3}, -1, 1, 15), bfloat16), f = lcg_uniform({2, 3}, -1, 1, 16);
  Autocast mixed(bfloat16);
  EXPECT_EQ(add(h, h).dtype(), bfloat16);
  EXPECT_EQ(add(h, f).dtype(), float32);  // a float32 residual stream stays float32
  EXPECT_EQ(exp(f).dtype(), float32);
  EXPECT_EQ(max(h, 0).dtype(), bfloat16);  // exact in any dtype
  EXPECT_EQ(cummax(h, 1).dtype(), bfloat16);
  EXPECT_EQ(fast::gelu(h).dtype(), bfloat16);
}

TEST(Autocast, LeavesFloat64IntegersAndComplexAlone) {
  const array d = testing::lcg_uniform({3, 3}, -1, 1, 17);  // float64
  const array i = array({1, 2, 3, 4}, {2, 2}, int32);
  const array c = astype(lcg_uniform({2, 2}, -1, 1, 18), complex64);
  Autocast mixed(float16);
  EXPECT_EQ(matmul(d, d).dtype(), float64);
  EXPECT_EQ(sum(d).dtype(), float64);
  EXPECT_EQ(softmax(d, -1).dtype(), float64);
  EXPECT_EQ(sum(i).dtype(), int32);
  EXPECT_EQ(matmul(c, c).dtype(), complex64);
}

TEST(Autocast, GradientsComeBackInTheParametersDtype) {
  const array x = lcg_uniform({8, 5}, -1, 1, 19), w = lcg_uniform({5, 4}, -1, 1, 20);
  auto loss = [&](const std::vector<array>& p) { return std::vector<array>{mean(square(matmul(x, p[0])))}; };
  auto [v32, g32] = value_and_grad(loss, {0})({w});
  std::vector<array> v16, g16;
  {
    Autocast mixed(bfloat16);
    std::tie(v16, g16) = value_and_grad(loss, {0})({w});
  }
  EXPECT_EQ(v16[0].dtype(), float32);  // mean is in the float32 list
  EXPECT_EQ(g16[0].dtype(), float32);
  // The product rounds to bfloat16 (8 bits of mantissa): ~1% relative.
  EXPECT_TRUE(allclose(v16[0], v32[0], 2e-2, 1e-3).item<bool>()) << v16[0] << " vs " << v32[0];
  EXPECT_TRUE(allclose(g16[0], g32[0], 3e-2, 3e-3).item<bool>()) << g16[0] << "\nvs\n" << g32[0];
}

// An array that several products read is cast once: one astype node in the graph, shared by the
// products; gradients through the shared cast equal those through a cast per product (to bfloat16
// rounding of the summed cotangents); and the memo keeps neither the source nor the cast alive.
TEST(Autocast, CastsAnArrayOncePerGraph) {
  const array x = lcg_uniform({16, 8}, -1, 1, 21), w1 = lcg_uniform({8, 4}, -1, 1, 22),
              w2 = lcg_uniform({8, 4}, -1, 1, 23);
  {
    Autocast mixed(bfloat16);
    const array a = matmul(x, w1), b = matmul(x, w2);
    ASSERT_EQ(a.inputs().size(), 2u);
    EXPECT_EQ(a.inputs()[0].dtype(), bfloat16);
    EXPECT_EQ(a.inputs()[0].id(), b.inputs()[0].id()) << "x was cast twice";
    EXPECT_NE(a.inputs()[1].id(), b.inputs()[1].id());
    // Another dtype is another cast; so is the same array outside the region.
    Autocast half(float16);
    EXPECT_NE(matmul(x, w1).inputs()[0].id(), a.inputs()[0].id());
  }
  auto loss = [&](const std::vector<array>& p) {
    return std::vector<array>{sum(add(matmul(p[0], w1), matmul(p[0], w2)))};
  };
  auto separate = [&](const std::vector<array>& p) {  // one explicit cast per product
    const array l = add(matmul(astype(p[0], bfloat16), astype(w1, bfloat16)),
                        matmul(astype(p[0], bfloat16), astype(w2, bfloat16)));
    return std::vector<array>{sum(astype(l, float32))};
  };
  std::vector<array> v, g;
  {
    Autocast mixed(bfloat16);
    std::tie(v, g) = value_and_grad(loss, {0})({x});
  }
  auto [vs, gs] = value_and_grad(separate, {0})({x});
  EXPECT_EQ(g[0].dtype(), float32);
  EXPECT_TRUE(allclose(v[0], vs[0], 1e-2, 1e-2).item<bool>()) << v[0] << " vs " << vs[0];
  // Each entry of dx is a sum of 8 products of bfloat16 weights; one more bfloat16 rounding.
  EXPECT_TRUE(allclose(g[0], gs[0], 1e-2, 1e-2).item<bool>()) << g[0] << "\nvs\n" << gs[0];
  // Nothing stays alive through the memo: once the graph's handles go, so do the source and its cast.
  array::Weak source, cast;
  {
    Autocast mixed(bfloat16);
    array big = lcg_uniform({64, 64}, -1, 1, 24);
    array y = matmul(big, big);
    source = big.weak();
    cast = y.inputs()[0].weak();
    ASSERT_TRUE(cast.lock().has_value());
  }
  EXPECT_FALSE(source.lock().has_value());
  EXPECT_FALSE(cast.lock().has_value());
}

// A parameter (an evaluated array) is cast once per value: the first graph computes its bfloat16
// copy, later graphs of vjp's traced copies of the same array reuse it (a CastOfValue node, no
// AsType), with the same values, gradients and tangents (against central differences; every value
// here is exact in bfloat16, so they agree exactly); a new array of other values gets its own cast,
// and the kept copy goes with its source.
TEST(Autocast, CastsAnEvaluatedArrayOncePerValue) {
  // Multiples of 1/2 in [-2, 2]: the products' sums are exact in bfloat16 too.
  auto exact = [](const Shape& shape, unsigned seed, float step = 0.5f) {
    array a = multiply(round(divide(lcg_uniform(shape, -2, 2, seed), array(step))), array(step));
    eval(a);
    return a;
  };
  const array x = exact({16, 8}, 31), c = exact({16, 4}, 32);
  array w = exact({8, 4}, 33);
  std::string cast_node;  // the primitive behind the product's bfloat16 weight, as the last call built it
  auto f = [&](const std::vector<array>& p) {
    Autocast mixed(bfloat16);
    const array y = matmul(x, p[0]);
    cast_node = y.inputs()[1].primitive().name();
    return std::vector<array>{sum(multiply(astype(y, float32), c))};
  };
  const array want_grad = matmul(transpose(x), c);  // f is linear in w: its gradient is x^T c
  auto [v1, g1] = vjp(f, {w}, {array(1.f)});
  EXPECT_EQ(cast_node, "AsType");
  eval(v1, g1);
  auto [v2, g2] = vjp(f, {w}, {array(1.f)});
  EXPECT_EQ(cast_node, "CastOfValue") << "the second graph cast the weight again";
  expect_same(v2[0], v1[0]);
  expect_same(g2[0], g1[0]);
  expect_same(g2[0], want_grad);
  // Central differences of f along each element and along a direction (jvp through the kept cast).
  float eps = 0.5f;
  std::vector<float> fd;
  for (int k = 0; k < 32; ++k) {
    const array e = reshape(astype(equal(arange(32, int32), array(k)), float32), {8, 4});
    const float up = f({add(w, multiply(e, array(eps)))})[0].item<float>();
    const float down = f({subtract(w, multiply(e, array(eps)))})[0].item<float>();
    fd.push_back((up - down) / (2 * eps));
  }
  expect_same(g2[0], array(fd, {8, 4}));
  const array t = exact({8, 4}, 34, 2.f);  // -2, 0 or 2: w +- eps t stays on the grid
  eps = 0.25f;
  auto [o3, t3] = jvp(f, {w}, {t});
  EXPECT_EQ(cast_node, "CastOfValue");
  const float along = (f({add(w, multiply(t, array(eps)))})[0].item<float>() -
                       f({subtract(w, multiply(t, array(eps)))})[0].item<float>()) / (2 * eps);
  EXPECT_EQ(t3[0].item<float>(), along);
  expect_same(o3[0], v1[0]);
  // Other values, another cast: nothing stale is read.
  const array::Weak old = w.weak();
  w = exact({8, 4}, 35);
  EXPECT_FALSE(old.lock().has_value());
  auto [v4, g4] = vjp(f, {w}, {array(1.f)});
  EXPECT_EQ(cast_node, "AsType");
  const array want4 = sum(multiply(matmul(astype(x, float64), astype(w, float64)), astype(c, float64)));
  EXPECT_EQ(v4[0].item<float>(), want4.item<double>());
  // The kept copy ends with its source: once w and the graphs are gone, the memory is back.
  eval(v4, g4);
  v1.clear(), g1.clear(), v2.clear(), g2.clear(), v4.clear(), g4.clear(), o3.clear(), t3.clear();
  const size_t before = get_active_memory();
  {
    array big = lcg_uniform({256, 256}, -1, 1, 36);
    eval(big);
    const size_t with_big = get_active_memory();
    for (int i = 0; i < 2; ++i) {
      Autocast mixed(bfloat16);
      eval(matmul(big, big));
    }
    EXPECT_GE(get_active_memory(), with_big + 256 * 256 * 2) << "the cast was not kept";
  }
  array z = exact({8, 4}, 37);
  {
    Autocast mixed(bfloat16);
    eval(matmul(x, z));  // a miss: sweeps the entry of the dead source
  }
  EXPECT_LE(get_active_memory(), before + 4096) << "a dead source's cast stayed";
}

}  // namespace
}  // namespace loom

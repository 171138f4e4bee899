// vmap: each batching rule against a loop over the batch (expect_vmap_matches_loop), the transform's
// own semantics (axes, None inputs, outputs that do not vary, nesting) and its errors, and its
// compositions with grad.
#include "../test_utils.h"

using namespace loom;
using loom::testing::expect_array;
using loom::testing::as_vector_fn;
using loom::testing::expect_vmap_matches_loop;
using loom::testing::lcg_uniform;

namespace {

array vm_f32(const Shape& shape, unsigned seed, double lo = -1.0, double hi = 1.0) {
  return astype(lcg_uniform(shape, lo, hi, seed), float32);
}

}  // namespace

TEST(Vmap, UnaryOnEveryBatchAxisAndOutAxis) {
  const array x = vm_f32({3, 4, 5}, 1);
  for (int in_ax : {0, 1, 2}) {
    for (int out_ax : {0, 1, 2}) {
      expect_vmap_matches_loop(as_vector_fn([](const array& a) { return exp(sin(a)); }), {x}, {in_ax}, {out_ax});
    }
  }
  // A negative out axis counts from the end (beside a non-negative one: all negative means None).
  expect_vmap_matches_loop([](const std::vector<array>& v) { return std::vector<array>{v[0], cos(v[0])}; }, {x}, {1},
                           {0, -1});
  // The one-array form.
  array y = vmap([](const array& a) { return multiply(a, a); }, 1, 0)(x);
  ASSERT_EQ(y.shape(), (Shape{4, 3, 5}));
  EXPECT_TRUE(allclose(y, transpose(square(x), {1, 0, 2})).item<bool>());
}

TEST(Vmap, BinaryBroadcastsAgainstUnbatchedInputs) {
  const array x = vm_f32({6, 3}, 2), y = vm_f32({4, 3}, 3), z = vm_f32({3, 6}, 4);
  // x's entries are (3,), y is (4, 3) for every entry: each result is (4, 3).
  expect_vmap_matches_loop(as_vector_fn([](const array& a, const array& b) { return add(a, b); }), {x, y}, {0, -1});
  expect_vmap_matches_loop(as_vector_fn([](const array& a, const array& b) { return multiply(b, a); }), {x, y}, {0, -1});
  // Both batched, along different axes.
  expect_vmap_matches_loop(as_vector_fn([](const array& a, const array& b) { return subtract(a, b); }), {x, z}, {0, 1});
  // Comparisons, where, and a scalar.
  expect_vmap_matches_loop(as_vector_fn([](const array& a, const array& b) { return where(greater(a, b), a, array(0.5f)); }),
                           {x, z}, {0, 1});
  expect_vmap_matches_loop(as_vector_fn([](const array& a, const array& b) { return multiply(maximum(a, array(0.0f)), b); }), {x, y}, {0, -1});
  // The binary form of vmap.
  array r = vmap([](const array& a, const array& b) { return add(a, b); }, 0, 1, 0)(x, z);
  EXPECT_TRUE(allclose(r, add(x, transpose(z))).item<bool>());
}

TEST(Vmap, DtypesCastsAndCopies) {
  const array x = vm_f32({4, 5}, 5, -3, 3);
  expect_vmap_matches_loop(as_vector_fn([](const array& a) { return astype(a, int32); }), {x}, {1});
  expect_vmap_matches_loop(as_vector_fn([](const array& a) { return astype(astype(a, bfloat16), float32); }), {x}, {0});
  expect_vmap_matches_loop(as_vector_fn([](const array& a) { return stop_gradient(copy(a)); }), {x}, {1});
  expect_vmap_matches_loop(as_vector_fn([](const array& a) { return contiguous(transpose(a)); }), {vm_f32({4, 5, 2}, 6)}, {2});
  expect_vmap_matches_loop(as_vector_fn([](const array& a) { return view(a, int32); }), {x}, {1});
  expect_vmap_matches_loop(as_vector_fn([](const array& a) { return view(a, uint8); }), {x}, {1});
  expect_vmap_matches_loop(as_vector_fn([](const array& a) { return full({2, 3}, sum(a)); }), {x}, {0});
  expect_vmap_matches_loop(as_vector_fn([](const array& a) { return full({2, 3}, sum(a), int32); }), {x}, {1});
}

TEST(Vmap, Reductions) {
  const array x = vm_f32({3, 4, 5}, 7);
  for (int ax : {0, 1, 2}) {
    expect_vmap_matches_loop(as_vector_fn([](const array& a) { return sum(a, 0); }), {x}, {ax});
    expect_vmap_matches_loop(as_vector_fn([](const array& a) { return sum(a, -1, true); }), {x}, {ax});
    expect_vmap_matches_loop(as_vector_fn([](const array& a) { return max(a, {0, 1}); }), {x}, {ax});
    expect_vmap_matches_loop(as_vector_fn([](const array& a) { return prod(a); }), {x}, {ax});
    expect_vmap_matches_loop(as_vector_fn([](const array& a) { return min(a, 1, true); }), {x}, {ax});
    expect_vmap_matches_loop(as_vector_fn([](const array& a) { return all(greater(a, array(-0.9f)), 0); }), {x}, {ax});
    expect_vmap_matches_loop(as_vector_fn([](const array& a) { return argmax(a, 1); }), {x}, {ax});
    expect_vmap_matches_loop(as_vector_fn([](const array& a) { return argmin(a, 0, true); }), {x}, {ax});
    expect_vmap_matches_loop(as_vector_fn([](const array& a) { return cumsum(a, -1); }), {x}, {ax});
    expect_vmap_matches_loop(as_vector_fn([](const array& a) { return cummax(a, 0, true); }), {x}, {ax});
    expect_vmap_matches_loop(as_vector_fn([](const array& a) { return mean(a, -1); }), {x}, {ax});
    expect_vmap_matches_loop(as_vector_fn([](const array& a) { return var(a, 0); }), {x}, {ax});
    expect_vmap_matches_loop(as_vector_fn([](const array& a) { return logsumexp(a, 1); }), {x}, {ax});
    expect_vmap_matches_loop(as_vector_fn([](const array& a) { return softmax(a, -1); }), {x}, {ax});
    expect_vmap_matches_loop(as_vector_fn([](const array& a) { return log_softmax(a, 0); }), {x}, {ax});
  }
}

TEST(Vmap, ShapeOps) {
  const array x = vm_f32({3, 4, 6}, 8);
  for (int ax : {0, 1, 2}) {
    expect_vmap_matches_loop(as_vector_fn([](const array& a) { return reshape(a, {-1}); }), {x}, {ax});
    expect_vmap_matches_loop(as_vector_fn([](const array& a) { return reshape(a, {2, -1, 3}); }), {x}, {ax});
    expect_vmap_matches_loop(as_vector_fn([](const array& a) { return transpose(a); }), {x}, {ax});
    expect_vmap_matches_loop(as_vector_fn([](const array& a) { return swapaxes(a, 0, 1); }), {x}, {ax});
    expect_vmap_matches_loop(as_vector_fn([](const array& a) { return expand_dims(squeeze(expand_dims(a, 1), 1), 0); }), {x}, {ax});
    expect_vmap_matches_loop(as_vector_fn([](const array& a) { return broadcast_to(expand_dims(a, 0), {5, a.shape(0), a.shape(1)}); }),
                             {x}, {ax});
    expect_vmap_matches_loop(as_vector_fn([](const array& a) { return slice(a, {1, 0}, {a.shape(0), a.shape(1)}, {1, 2}); }), {x}, {ax});
    expect_vmap_matches_loop(as_vector_fn([](const array& a) { return concatenate({a, square(a), a}, 1); }), {x}, {ax});
    expect_vmap_matches_loop(
        [](const std::vector<array>& v) { return split(v[0], std::vector<int>{1, 2}, 0); }, {x}, {ax});
    expect_vmap_matches_loop(as_vector_fn([](const array& a) { return pad(a, {0, 1}, {1, 0}, {2, 1}, array(7.0f)); }), {x}, {ax});
    expect_vmap_matches_loop(as_vector_fn([](const array& a) { return flatten(a); }), {x}, {ax});
  }
  // Concatenating a batched array with an unbatched one; slice_update with either batched.
  const array y = vm_f32({3, 4}, 9), u = vm_f32({2, 4}, 10), us = vm_f32({6, 2, 4}, 11);
  expect_vmap_matches_loop(as_vector_fn([](const array& a, const array& b) { return concatenate({a, b}, 0); }), {x, y}, {2, -1});
  expect_vmap_matches_loop(as_vector_fn([](const array& a, const array& b) { return slice_update(a, b, {1, 0}, {3, 4}); }),
                           {x, u}, {2, -1});
  expect_vmap_matches_loop(as_vector_fn([](const array& a, const array& b) { return slice_update(a, b, {0, 0}, {2, 4}); }),
                           {y, us}, {-1, 0});
  expect_vmap_matches_loop(as_vector_fn([](const array& a, const array& b) { return slice_update_add(a, b, {1, 0}, {3, 4}); }),
                           {x, us}, {2, 0});
  // One pad value per batch entry.
  const array values = vm_f32({6}, 12);
  expect_vmap_matches_loop(as_vector_fn([](const array& a, const array& v) { return pad(a, {1}, {2}, {1}, v); }), {y, values},
                           {-1, 0});
  expect_vmap_matches_loop(as_vector_fn([](const array& a, const array& v) { return pad(a, {0}, {1}, {1}, v); }), {x, values},
                           {2, 0});
}

TEST(Vmap, Matmul) {
  const array a = vm_f32({5, 3, 4}, 13), w = vm_f32({4, 2}, 14), ws = vm_f32({5, 4, 2}, 15), v = vm_f32({5, 4}, 16);
  auto mm = as_vector_fn([](const array& p, const array& q) { return matmul(p, q); });
  expect_vmap_matches_loop(mm, {a, w}, {0, -1});                    // rows of the shared matrix
  expect_vmap_matches_loop(mm, {a, w}, {1, -1});
  expect_vmap_matches_loop(mm, {transpose(w), ws}, {-1, 0});        // columns of the shared matrix
  expect_vmap_matches_loop(mm, {transpose(w), moveaxis(ws, 0, 2)}, {-1, 2});
  expect_vmap_matches_loop(mm, {a, ws}, {0, 0});                    // both batched
  expect_vmap_matches_loop(mm, {v, w}, {0, -1});                    // vector @ matrix
  expect_vmap_matches_loop(mm, {w, vm_f32({2, 5}, 35)}, {-1, 1});   // matrix @ vector
  expect_vmap_matches_loop(mm, {v, v}, {0, 0});                     // dot products
  // A batch of stacked matrices against stacked matrices.
  const array s = vm_f32({2, 5, 3, 4}, 17), t = vm_f32({2, 4, 3}, 18);
  expect_vmap_matches_loop(mm, {s, t}, {1, -1});
  expect_vmap_matches_loop(mm, {t, s}, {-1, 1}, {}, 1e-5, 1e-5);
  // addmm (bias and scaling folded into the product's node).
  const array bias = vm_f32({2}, 19), biases = vm_f32({5, 2}, 20);
  expect_vmap_matches_loop(
      [](const std::vector<array>& x) { return std::vector<array>{addmm(x[0], x[1], x[2], 0.5f, 2.0f)}; },
      {bias, a, w}, {-1, 0, -1});
  expect_vmap_matches_loop(
      [](const std::vector<array>& x) { return std::vector<array>{addmm(x[0], x[1], x[2])}; },
      {biases, moveaxis(a, 0, 1), w}, {0, 1, -1});
}

TEST(Vmap, NoneInputsAndOutputsThatDoNotVary) {
  const array x = vm_f32({4, 3}, 21), c = vm_f32({3}, 22);
  auto f = [](const std::vector<array>& v) { return std::vector<array>{add(v[0], v[1]), exp(v[1]), v[0]}; };
  auto out = vmap(f, {0, -1}, {0, 1, -1})({x, c});
  ASSERT_EQ(out.size(), 3u);
  EXPECT_TRUE(allclose(out[0], add(x, c)).item<bool>());
  // exp(c) does not depend on the batched input: repeated along the batch at out axis 1.
  ASSERT_EQ(out[1].shape(), (Shape{3, 4}));
  EXPECT_TRUE(allclose(out[1], broadcast_to(expand_dims(exp(c), 1), {3, 4})).item<bool>());
  // The input itself, its batch moved to the last axis.
  EXPECT_TRUE(array_equal(out[2], transpose(x)).item<bool>());
}

TEST(Vmap, Nested) {
  const array x = vm_f32({2, 3, 4}, 23), w = vm_f32({4, 5}, 24);
  auto inner = [](const std::vector<array>& v) { return std::vector<array>{sum(square(matmul(v[0], v[1])))}; };
  // Over axis 0 of x outside, then axis 0 (originally 1) inside: one scalar per (i, j).
  auto f = vmap(vmap(inner, {0, -1}), {0, -1});
  array r = f({x, w})[0];
  ASSERT_EQ(r.shape(), (Shape{2, 3}));
  array want = sum(square(matmul(x, w)), -1);
  EXPECT_TRUE(allclose(r, want, 1e-5, 1e-5).item<bool>());
  // The outer batch on the last axis, the inner on the first of what is left; and out axis 1.
  const array xt = transpose(x, {1, 2, 0});
  expect_vmap_matches_loop(vmap(inner, {0, -1}), {xt, w}, {2, -1}, {}, 1e-5, 1e-5);
  expect_vmap_matches_loop(vmap(inner, {0, -1}), {x, w}, {1, -1}, {}, 1e-5, 1e-5);
  expect_vmap_matches_loop(vmap(inner, {0, -1}), {x, w}, {0, -1}, {}, 1e-5, 1e-5);
}

TEST(Vmap, InnerFunctionClosesOverTheOuterBatch) {
  // vmap(x -> vmap(y -> x * y + sum(x))(ys))(xs): the inner function reads the outer placeholder.
  const array xs = vm_f32({4, 3}, 36), ys = vm_f32({5, 3}, 37);
  auto outer = [&](const std::vector<array>& xv) {
    const array x = xv[0];
    return vmap([x](const std::vector<array>& yv) { return std::vector<array>{add(multiply(x, yv[0]), sum(x))}; },
                {0})({ys});
  };
  array r = vmap(outer, {0})({xs})[0];
  ASSERT_EQ(r.shape(), (Shape{4, 5, 3}));
  array want = add(multiply(expand_dims(xs, 1), expand_dims(ys, 0)), reshape(sum(xs, 1), {4, 1, 1}));
  EXPECT_TRUE(allclose(r, want, 1e-5, 1e-6).item<bool>());
}

namespace {

// A two-layer network's loss on one example, written with plain ops.
array vm_mlp_loss(const array& w1, const array& b1, const array& w2, const array& x, const array& y) {
  array h = tanh(addmm(b1, expand_dims(x, 0), w1));
  array pred = squeeze(matmul(h, w2), 0);
  return mean(square(subtract(pred, y)));
}

}  // namespace

TEST(Vmap, PerExampleGradientsOfAnMLPMatchALoop) {
  const array w1 = vm_f32({6, 8}, 25), b1 = vm_f32({8}, 26), w2 = vm_f32({8, 3}, 27);
  const array xs = vm_f32({10, 6}, 28), ys = vm_f32({10, 3}, 29);
  auto g = grad([](const std::vector<array>& v) { return vm_mlp_loss(v[0], v[1], v[2], v[3], v[4]); }, {0, 1, 2});
  auto per_example = vmap(g, {-1, -1, -1, 0, 0});
  std::vector<array> got = per_example({w1, b1, w2, xs, ys});
  ASSERT_EQ(got.size(), 3u);
  EXPECT_EQ(got[0].shape(), (Shape{10, 6, 8}));
  EXPECT_EQ(got[1].shape(), (Shape{10, 8}));
  EXPECT_EQ(got[2].shape(), (Shape{10, 8, 3}));
  for (int b = 0; b < 10; ++b) {
    std::vector<array> want = g({w1, b1, w2, take(xs, b, 0), take(ys, b, 0)});
    for (size_t k = 0; k < 3; ++k) {
      EXPECT_TRUE(allclose(take(got[k], b, 0), want[k], 1e-5, 1e-6).item<bool>()) << "example " << b << " grad " << k;
    }
  }
  // Their mean is the gradient of the mean loss.
  auto batch_loss = [&](const std::vector<array>& v) {
    return mean(vmap([&](const std::vector<array>& e) { return std::vector<array>{vm_mlp_loss(v[0], v[1], v[2], e[0], e[1])}; },
                     {0, 0})({xs, ys})[0]);
  };
  std::vector<array> full_grad = grad(batch_loss, {0, 1, 2})({w1, b1, w2});
  for (size_t k = 0; k < 3; ++k) EXPECT_TRUE(allclose(mean(got[k], 0), full_grad[k], 1e-5, 1e-6).item<bool>()) << k;
}

TEST(Vmap, GradOfVmapAndJvpOfVmap) {
  const array x = vm_f32({4, 3}, 30), w = vm_f32({3, 3}, 31);
  auto row_fn = [](const std::vector<array>& v) { return std::vector<array>{tanh(matmul(v[0], v[1]))}; };
  auto loss = [&](const std::vector<array>& v) { return sum(vmap(row_fn, {0, -1})(v)[0]); };
  auto direct = [](const std::vector<array>& v) { return sum(tanh(matmul(v[0], v[1]))); };
  auto g1 = grad(loss, {0, 1})({x, w});
  auto g2 = grad(direct, {0, 1})({x, w});
  for (size_t k = 0; k < 2; ++k) EXPECT_TRUE(allclose(g1[k], g2[k], 1e-5, 1e-6).item<bool>()) << k;
  // jvp through vmap, and vmap of jvp.
  const array t = vm_f32({4, 3}, 32);
  auto [o1, j1] = jvp([&](const std::vector<array>& v) { return vmap(row_fn, {0, -1})({v[0], w}); }, {x}, {t});
  auto [o2, j2] = jvp([&](const std::vector<array>& v) { return row_fn({v[0], w}); }, {x}, {t});
  EXPECT_TRUE(allclose(j1[0], j2[0], 1e-5, 1e-6).item<bool>());
  expect_vmap_matches_loop(
      [&](const std::vector<array>& v) { return jvp([&](const std::vector<array>& p) { return row_fn({p[0], w}); }, {v[0]}, {v[1]}).second; },
      {x, t}, {0, 0});
  // Second order: vmap of a Hessian-vector product.
  auto hvp = [](const std::vector<array>& v) {
    auto gfn = [](const std::vector<array>& p) { return grad([](const std::vector<array>& q) { return sum(exp(sin(q[0]))); })(p); };
    return jvp(gfn, {v[0]}, {v[1]}).second;
  };
  expect_vmap_matches_loop(hvp, {x, t}, {0, 0});
}

TEST(Vmap, Errors) {
  const array x = vm_f32({4, 3}, 33), y = vm_f32({5, 3}, 34);
  auto f = as_vector_fn([](const array& a, const array& b) { return add(a, b); });
  EXPECT_THROW_MSG(vmap(f, {0})({x, y}), std::invalid_argument, "1 in_axes for 2 inputs");
  EXPECT_THROW_MSG(vmap(f, {0, 0})({x, y}), std::invalid_argument, "batch sizes differ");
  EXPECT_THROW_MSG(vmap(f, {2, 0})({x, x}), std::invalid_argument, "in_axes[0] = 2 is not an axis of input 0 of shape (4,3)");
  EXPECT_THROW_MSG(vmap(f, {-2, 0})({x, x}), std::invalid_argument, "in_axes[0] = -2");
  EXPECT_THROW_MSG(vmap(f, {-1, -1})({x, x}), std::invalid_argument, "no in_axes entry is batched (all -1) but out_axes are");
  EXPECT_THROW_MSG(vmap(f, {0, -1}, {-1}), std::invalid_argument, "every out_axes entry is negative but in_axes batch");
  EXPECT_THROW_MSG(vmap(f, {-1, -1}, {-1})({x, x}), std::invalid_argument, "no input is batched");
  EXPECT_THROW_MSG(vmap(f, {0, 0}, {0, 0})({x, x}), std::invalid_argument, "2 out_axes for 1 outputs");
  EXPECT_THROW_MSG(vmap(f, {0, 0}, {2})({x, x}), std::invalid_argument, "out_axes[0] = 2 is not an axis of output 0");
  EXPECT_THROW_MSG(vmap(as_vector_fn([](const array& a) { return array(sum(a).item<float>()); }), {0})({x}),
                   std::invalid_argument, "[vmap] the function evaluated an array");
  // A 0-d input cannot be batched.
  EXPECT_THROW_MSG(vmap(as_vector_fn([](const array& a) { return a; }), {0})({array(1.0f)}), std::invalid_argument,
                   "in_axes[0] = 0 is not an axis of input 0 of shape ()");
  // Nothing is left half-made: the inputs still evaluate.
  expect_array(sum(x), {}, {sum(x).item<double>()});
}

TEST(Vmap, CustomFunctionRules) {
  const array x = vm_f32({5, 3}, 40);
  auto f = [](const std::vector<array>& v) { return std::vector<array>{sin(v[0])}; };
  // A vmap rule is used in place of batching the function (it says cos, to be seen).
  int calls = 0;
  CustomVmapFn rule = [&calls](const std::vector<array>& in, const std::vector<int>& axes) {
    ++calls;
    return std::make_pair(std::vector<array>{cos(in[0])}, std::vector<int>{axes[0]});
  };
  auto cf = custom_function(f, std::nullopt, std::nullopt, rule);
  array r = vmap(cf, {1})({x})[0];
  EXPECT_EQ(calls, 1);
  EXPECT_TRUE(allclose(r, transpose(cos(x))).item<bool>());
  // Unbatched, the function itself runs.
  EXPECT_TRUE(allclose(cf({x})[0], sin(x)).item<bool>());

  // The vjp rule (deliberately not sin's derivative: 2 c) survives vmap, both ways round.
  CustomVjpFn twice = [](const std::vector<array>&, const std::vector<array>& c, const std::vector<array>&) {
    return std::vector<array>{multiply(c[0], array(2.0f))};
  };
  auto cv = custom_function(f, twice);
  auto loss = [&](const std::vector<array>& v) { return sum(vmap(cv, {0})(v)[0]); };
  expect_array(grad(loss)({x})[0], {5, 3}, std::vector<double>(15, 2.0));
  auto g = grad([&](const std::vector<array>& v) { return sum(cv(v)[0]); });
  array per = vmap(g, {0})({x})[0];
  expect_array(per, {5, 3}, std::vector<double>(15, 2.0));
  // An unbatched primal's cotangent sums over the batch.
  auto cv2 = custom_function(
      [](const std::vector<array>& v) { return std::vector<array>{multiply(v[0], v[1])}; },
      CustomVjpFn([](const std::vector<array>& p, const std::vector<array>& c, const std::vector<array>&) {
        return std::vector<array>{multiply(c[0], p[1]), multiply(c[0], p[0])};
      }));
  const array w = vm_f32({3}, 41);
  auto gw = grad([&](const std::vector<array>& v) { return sum(vmap(cv2, {0, -1})({v[0], v[1]})[0]); }, {0, 1})({x, w});
  EXPECT_TRUE(allclose(gw[0], broadcast_to(w, {5, 3})).item<bool>());
  EXPECT_TRUE(allclose(gw[1], sum(x, 0)).item<bool>());

  // The jvp rule too (3 t, to be seen).
  CustomJvpFn thrice = [](const std::vector<array>&, const std::vector<array>& t, const std::vector<int>&) {
    return std::vector<array>{multiply(t[0], array(3.0f))};
  };
  auto cj = custom_function(f, std::nullopt, thrice);
  const array t = vm_f32({5, 3}, 42);
  auto tan = jvp([&](const std::vector<array>& v) { return vmap(cj, {0})(v); }, {x}, {t}).second[0];
  EXPECT_TRUE(allclose(tan, multiply(t, array(3.0f))).item<bool>());
  // checkpoint under vmap: the same values and gradients.
  auto ck = checkpoint([](const std::vector<array>& v) { return std::vector<array>{exp(tanh(v[0]))}; });
  expect_vmap_matches_loop(ck, {x}, {1});
  expect_vmap_matches_loop(grad([&](const std::vector<array>& v) { return sum(ck(v)[0]); }), {x}, {0});
}

TEST(Vmap, BrokenUserRulesAreNamed) {
  const array x = vm_f32({5, 3}, 38);
  auto f = [](const std::vector<array>& v) { return std::vector<array>{sin(v[0])}; };
  // A rule with the wrong number of outputs, and one whose result lacks the batch it claims.
  auto two = custom_function(f, std::nullopt, std::nullopt, CustomVmapFn([](const std::vector<array>& in, const std::vector<int>&) {
    return std::make_pair(std::vector<array>{in[0], in[0]}, std::vector<int>{0, 0});
  }));
  EXPECT_THROW_MSG(vmap(two, {0})({x}), std::invalid_argument, "[custom_function] the vmap rule returned 2 outputs");
  auto unbatched = custom_function(f, std::nullopt, std::nullopt,
                                   CustomVmapFn([](const std::vector<array>& in, const std::vector<int>&) {
                                     return std::make_pair(std::vector<array>{sum(in[0], 0)}, std::vector<int>{0});
                                   }));
  EXPECT_THROW_MSG(vmap(unbatched, {0})({x}), std::logic_error, "the batching rule of CustomTransforms(custom_function)");
}

TEST(Vmap, FusedOps) {
  const array x = vm_f32({4, 3, 8}, 43), w = vm_f32({8}, 44), b = vm_f32({8}, 45), ws = vm_f32({4, 8}, 46);
  for (int ax : {0, 1, 2}) {
    expect_vmap_matches_loop(as_vector_fn([](const array& a) { return fast::gelu(a); }), {x}, {ax});
    expect_vmap_matches_loop(as_vector_fn([](const array& a) { return fast::softmax(a); }), {x}, {ax});
    expect_vmap_matches_loop(as_vector_fn([](const array& a) { return fast::log_softmax(a); }), {x}, {ax});
  }
  auto ln = [](const std::vector<array>& v) { return std::vector<array>{fast::layer_norm(v[0], v[1], v[2], 1e-5)}; };
  expect_vmap_matches_loop(ln, {x, w, b}, {0, -1, -1}, {}, 1e-5, 1e-5);
  expect_vmap_matches_loop(ln, {x, ws, b}, {0, 0, -1}, {}, 1e-5, 1e-5);  // per-example weights: the reference
  auto rms = [](const std::vector<array>& v) { return std::vector<array>{fast::rms_norm(v[0], v[1], 1e-5)}; };
  expect_vmap_matches_loop(rms, {x, w}, {1, -1}, {}, 1e-5, 1e-5);
  expect_vmap_matches_loop(rms, {x, ws}, {0, 0}, {}, 1e-5, 1e-5);
  // Their backward kernels, under per-example gradients.
  auto ln_loss = [](const std::vector<array>& v) { return sum(square(fast::layer_norm(fast::gelu(v[0]), v[1], v[2], 1e-5))); };
  expect_vmap_matches_loop(grad(ln_loss, {0, 1, 2}), {x, w, b}, {0, -1, -1}, {}, 1e-4, 1e-5);
  auto sm_loss = [](const std::vector<array>& v) { return sum(multiply(fast::softmax(v[0]), v[1])); };
  expect_vmap_matches_loop(grad(sm_loss, 0), {x, transpose(x, {2, 0, 1})}, {2, 0}, {}, 1e-5, 1e-6);
  auto rms_loss = [](const std::vector<array>& v) { return sum(square(fast::rms_norm(v[0], v[1], 1e-5))); };
  expect_vmap_matches_loop(grad(rms_loss, {0, 1}), {x, w}, {1, -1}, {}, 1e-4, 1e-5);
  // Attention and cross-entropy batch through their references.
  const array q = vm_f32({3, 2, 4, 8}, 47), k = vm_f32({3, 2, 5, 8}, 48), v = vm_f32({3, 2, 5, 8}, 49);
  auto attn = [](const std::vector<array>& a) {
    return std::vector<array>{fast::scaled_dot_product_attention(a[0], a[1], a[2], 0.35)};
  };
  expect_vmap_matches_loop(attn, {q, k, v}, {0, 0, 0}, {}, 1e-5, 1e-5);
  expect_vmap_matches_loop(attn, {q, take(k, 0, 1), take(v, 1, 1)}, {2, -1, -1}, {}, 1e-5, 1e-5);
  const array logits = vm_f32({6, 4, 10}, 50);
  const array labels = astype(vm_f32({6, 4}, 51, 0, 10), int32);
  auto ce = [](const std::vector<array>& a) { return std::vector<array>{fast::softmax_cross_entropy(a[0], a[1])}; };
  expect_vmap_matches_loop(ce, {logits, labels}, {0, 0}, {}, 1e-5, 1e-5);
  expect_vmap_matches_loop(ce, {logits, labels}, {1, 1}, {}, 1e-5, 1e-5);
}

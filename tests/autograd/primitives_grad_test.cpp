// Finite-difference checks of vjp and jvp for the core primitives.
#include "../test_utils.h"

using namespace loom;

namespace {

array rand_like_shape(const Shape& s, double lo, double hi, unsigned seed) {
  return loom::testing::lcg_uniform(s, lo, hi, seed, 1);
}

void check(const std::function<array(const std::vector<array>&)>& f, const std::vector<array>& xs,
           const std::vector<int>& argnums = {}) {
  auto r = check_grads([&](const std::vector<array>& p) { return std::vector<array>{f(p)}; }, xs, argnums);
  EXPECT_TRUE(r.ok) << r.report;
}

}  // namespace

TEST(GradCheck, Unary) {
  array x = rand_like_shape({3, 4}, 0.2, 0.9, 1);
  using F = array (*)(const array&, StreamOrDevice);
  for (F f : {F(negative), F(abs), F(square), F(sqrt), F(rsqrt), F(reciprocal), F(exp), F(expm1), F(log), F(log1p),
              F(log2), F(log10), F(sin), F(cos), F(tan), F(tanh), F(sigmoid), F(erf), F(erfinv), F(arcsin),
              F(arccos), F(arctan), F(sinh), F(cosh), F(arcsinh), F(arctanh)}) {
    check([&](const std::vector<array>& p) { return f(p[0], {}); }, {x});
  }
  // arccosh is defined from 1 up.
  check([&](const std::vector<array>& p) { return arccosh(p[0]); }, {x + 1.5});
  // Piecewise-constant ops have zero derivative away from their jumps.
  for (F f : {F(floor), F(ceil), F(round), F(sign)}) {
    check([&](const std::vector<array>& p) { return f(p[0], {}) * p[0]; }, {x});
  }
}

TEST(GradCheck, BinaryWithBroadcasting) {
  array a = rand_like_shape({2, 3}, 0.5, 2.0, 2);
  array b = rand_like_shape({3}, 0.5, 2.0, 3);
  using F = array (*)(const array&, const array&, StreamOrDevice);
  for (F f : {F(add), F(subtract), F(multiply), F(divide), F(power), F(maximum), F(minimum), F(arctan2), F(logaddexp)}) {
    check([&](const std::vector<array>& p) { return f(p[0], p[1], {}); }, {a, b});
  }
  check([&](const std::vector<array>& p) { return remainder(p[0], p[1]); }, {a * 3.0, b});
}

TEST(GradCheck, WhereAndClip) {
  array c({true, false, true, false, false, true}, {2, 3});
  array a = rand_like_shape({2, 3}, -1, 1, 4), b = rand_like_shape({1, 3}, -1, 1, 5);
  check([&](const std::vector<array>& p) { return where(c, p[0], p[1]); }, {a, b});
  check([&](const std::vector<array>& p) { return clip(p[0], array(-0.5), array(0.5)); }, {a});
}

TEST(GradCheck, Reductions) {
  array x = rand_like_shape({3, 4, 2}, 0.5, 1.5, 6);
  for (bool keep : {false, true}) {
    check([&](const std::vector<array>& p) { return sum(p[0], {0, 2}, keep); }, {x});
    check([&](const std::vector<array>& p) { return mean(p[0], -1, keep); }, {x});
    check([&](const std::vector<array>& p) { return prod(p[0], 1, keep); }, {x});
    check([&](const std::vector<array>& p) { return max(p[0], {0, 1}, keep); }, {x});
    check([&](const std::vector<array>& p) { return min(p[0], 2, keep); }, {x});
    check([&](const std::vector<array>& p) { return var(p[0], 1, keep, 1); }, {x});
    check([&](const std::vector<array>& p) { return loom::std(p[0], 0, keep); }, {x});
    check([&](const std::vector<array>& p) { return logsumexp(p[0], {1, 2}, keep); }, {x});
  }
  // prod with an exact zero still gets the product of the others.
  check([&](const std::vector<array>& p) { return prod(p[0]); }, {array({0.0, 2.0, 3.0})});
  check([&](const std::vector<array>& p) { return softmax(p[0], -1); }, {x});
  check([&](const std::vector<array>& p) { return log_softmax(p[0], 1); }, {x});
  check([&](const std::vector<array>& p) { return cumsum(p[0], 1); }, {x});
  check([&](const std::vector<array>& p) { return cumsum(p[0], 0, true, false); }, {x});
}

TEST(GradCheck, MaxTiesSplitEvenly) {
  auto g = grad([](const array& x) { return max(x); })(array({1.0f, 3.0f, 3.0f}));
  loom::testing::expect_array(g, {3}, {0, 0.5, 0.5});
}

TEST(GradCheck, ShapesAndViews) {
  array x = rand_like_shape({2, 3, 4}, -1, 1, 7);
  check([&](const std::vector<array>& p) { return reshape(p[0], {4, -1}); }, {x});
  check([&](const std::vector<array>& p) { return transpose(p[0], {2, 0, 1}); }, {x});
  check([&](const std::vector<array>& p) { return broadcast_to(reshape(p[0], {2, 1, 3, 4}), {2, 5, 3, 4}); }, {x});
  check([&](const std::vector<array>& p) { return slice(p[0], {0, 2, 3}, {2, 0, 0}, {1, -1, -2}); }, {x});
  check([&](const std::vector<array>& p) { return slice(p[0], {1, 0, 1}, {2, 3, 4}, {1, 2, 2}); }, {x});
  // A negative step that runs to the first element (stop before index 0).
  check([&](const std::vector<array>& p) { return slice(p[0], {1, 2, 3}, {-3, -4, -5}, {-1, -1, -1}); }, {x});
  array u = rand_like_shape({2, 2, 2}, -1, 1, 8);
  check([&](const std::vector<array>& p) { return slice_update(p[0], p[1], {0, 1, 0}, {2, 3, 4}, {1, 1, 2}); },
        {x, u});
  check([&](const std::vector<array>& p) { return concatenate({p[0], p[1]}, 2); }, {x, rand_like_shape({2, 3, 1}, 0, 1, 9)});
  check([&](const std::vector<array>& p) { return stack({p[0], p[0] * 2.0}, 1); }, {x});
  check([&](const std::vector<array>& p) { return split(p[0], {1, 3}, -1)[1]; }, {x});
  // Every part of one Split node (an empty one too) reaches the gradient; decreasing indices take the
  // slice path.
  check([&](const std::vector<array>& p) {
    auto parts = split(p[0], {1, 1, 3}, -1);
    return sum(parts[0]) + sum(parts[2] * 3.0) - sum(square(parts[3])) + sum(parts[1]);
  }, {x});
  check([&](const std::vector<array>& p) {
    auto parts = split(p[0], {2, 1}, 1);
    return sum(parts[0] * 2.0) + sum(square(parts[2]));
  }, {x});
  // A flat bucket split back into shaped parts (one of them empty), read from a strided 1-D view.
  check([&](const std::vector<array>& p) {
    auto parts = split_flat(slice(reshape(p[0], {24}), {1}, {24}, {2}), {{2, 3}, {0, 4}, {1}, {5}});
    return sum(parts[0] * parts[0]) + sum(parts[1]) + sum(parts[2] * 3.0) - sum(exp(parts[3]));
  }, {x});
  check([&](const std::vector<array>& p) { return pad(p[0], {1, 2}, {1, 0}, {2, 1}, p[1]); }, {x, array(0.5)});
  check([&](const std::vector<array>& p) { return tile(p[0], {2, 1, 1}); }, {x});
  check([&](const std::vector<array>& p) { return repeat(p[0], 2, 1); }, {x});
  check([&](const std::vector<array>& p) { return squeeze(expand_dims(p[0], 0)); }, {x});
  // astype: the cotangent is cast back to the input's dtype.
  auto g = grad([](const array& a) { return sum(astype(a, float64) * 3.0); })(array({1.0f, 2.0f}));
  EXPECT_EQ(g.dtype(), float32);
  loom::testing::expect_array(g, {2}, {3, 3});
}

TEST(GradCheck, Matmul) {
  array a = rand_like_shape({2, 3, 4}, -1, 1, 10);
  array b = rand_like_shape({4, 5}, -1, 1, 11);
  check([&](const std::vector<array>& p) { return matmul(p[0], p[1]); }, {a, b});
  check([&](const std::vector<array>& p) { return matmul(swapaxes(p[0], -1, -2), p[1]); },
        {rand_like_shape({3, 4, 2}, -1, 1, 12), rand_like_shape({1, 4, 3}, -1, 1, 13)});
  check([&](const std::vector<array>& p) { return matmul(p[0], p[1]); },
        {rand_like_shape({4}, -1, 1, 14), rand_like_shape({4}, -1, 1, 15)});
  check([&](const std::vector<array>& p) { return addmm(p[2], p[0], p[1], 0.5f, 2.0f); },
        {rand_like_shape({2, 3}, -1, 1, 16), rand_like_shape({3, 2}, -1, 1, 17), rand_like_shape({2, 2}, -1, 1, 18)});
  // Batched, with a bias row broadcast over the batch and rows (one fused node), and with a 1-D
  // operand (the composition).
  check([&](const std::vector<array>& p) { return addmm(p[2], p[0], swapaxes(p[1], -1, -2), 1.5f, -0.5f); },
        {a, rand_like_shape({5, 4}, -1, 1, 19), rand_like_shape({5}, -1, 1, 20)});
  check([&](const std::vector<array>& p) { return addmm(p[2], p[0], p[1]); },
        {rand_like_shape({3}, -1, 1, 21), rand_like_shape({3, 2}, -1, 1, 22), rand_like_shape({2}, -1, 1, 23)});
  // A stack against one matrix with c the same for every row (folded into one product), and with a
  // c that differs between rows (one product per matrix of the stack).
  check([&](const std::vector<array>& p) { return addmm(p[2], p[0], p[1], 0.5f, 2.0f); },
        {a, b, rand_like_shape({1, 1, 5}, -1, 1, 24)});
  check([&](const std::vector<array>& p) { return addmm(p[2], p[0], p[1]); },
        {a, b, rand_like_shape({3, 5}, -1, 1, 25)});
}

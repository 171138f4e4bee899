// Finite-difference checks of the vjp and jvp of every indexing and sorting primitive, plus a few
// hand-computed gradients. Index arrays are integer primals, so check_grads holds them fixed.
#include "helpers.h"
#include "loom/autograd/check.h"
#include "loom/autograd/transforms.h"

using namespace loom;
using loom::testing::expect_array;

namespace {

// Distinct, well separated float64 values (a scrambled 0.1 ... 0.1 n plus a small offset), so sorts
// do not change order under the finite-difference steps.
array distinct(const Shape& shape, int seed) {
  int n = 1;
  for (int s : shape) n *= s;
  std::vector<double> v(n);
  for (int i = 0; i < n; ++i) v[i] = 0.1 * ((i * 7 + seed) % n) - 0.05 * n + 0.001 * seed;
  // 7 must not divide n for this to be a permutation; the shapes used here keep it so.
  return array(v, shape, float64);
}

void check(const std::function<array(const std::vector<array>&)>& f, const std::vector<array>& xs,
           const std::vector<int>& argnums = {}) {
  auto r = check_grads([&](const std::vector<array>& p) { return std::vector<array>{f(p)}; }, xs, argnums);
  EXPECT_TRUE(r.ok) << r.report;
}

}  // namespace

TEST(IndexingGrad, Take) {
  array a = distinct({3, 4}, 1);
  array idx({2, -1, 0, 2});  // repeats accumulate in the gradient
  check([](const std::vector<array>& p) { return take(p[0], p[1], 0); }, {a, idx});
  check([](const std::vector<array>& p) { return take(p[0], p[1], 1); }, {a, idx});
  check([](const std::vector<array>& p) { return take(p[0], p[1], -1); }, {a, array({1, 1, 0, 3}, {2, 2})});
  check([](const std::vector<array>& p) { return take(p[0], p[1]); }, {a, array({11, 0, 5, 5, -2}, {5})});
  check([](const std::vector<array>& p) { return take(p[0], p[1], 1); }, {distinct({2, 3, 2}, 3), array(1)});
  check([](const std::vector<array>& p) { return take(p[0], 2, 1); }, {a});
  // Through a transposed view.
  check([](const std::vector<array>& p) { return take(transpose(p[0]), p[1], 0); }, {a, idx});
}

TEST(IndexingGrad, TakeAlongAxis) {
  array a = distinct({3, 4}, 2);
  check([](const std::vector<array>& p) { return take_along_axis(p[0], p[1], 1); },
        {a, array({0, 3, 3, 1, 2, 2, -1, 0, 1}, {3, 3})});
  check([](const std::vector<array>& p) { return take_along_axis(p[0], p[1], 0); },
        {a, array({2, 0, 0, 1, 1, 1, 2, 0}, {2, 4})});
  // Broadcast array (1, 4) against indices (3, 2): the gradient sums over the broadcast rows.
  check([](const std::vector<array>& p) { return take_along_axis(p[0], p[1], 1); },
        {distinct({1, 4}, 3), array({0, 3, 1, 1, -1, 2}, {3, 2})});
}

TEST(IndexingGrad, PutAlongAxis) {
  array a = distinct({2, 3}, 4);
  // Distinct positions within each row; the values and the untouched entries of a both get gradients.
  check([](const std::vector<array>& p) { return put_along_axis(p[0], p[1], p[2], 1); },
        {a, array({2, 0, 1, 0}, {2, 2}), distinct({2, 2}, 5)});
  // Repeated positions: only the last write along the axis lands, and only it gets a gradient.
  check([](const std::vector<array>& p) { return put_along_axis(p[0], p[1], p[2], 1); },
        {a, array({1, 1, 2, 0, -3, 0}, {2, 3}), distinct({2, 3}, 19)});
  check([](const std::vector<array>& p) { return put_along_axis(p[0], p[1], p[2], 0); },
        {a, array({1, 0, 1, 1, 0, 1}, {2, 3}), distinct({2, 3}, 20)});
  // A value broadcast to two positions collects both cotangents.
  check([](const std::vector<array>& p) { return put_along_axis(p[0], p[1], p[2], 1); },
        {a, array({0, 2, 1, 0}, {2, 2}), distinct({2, 1}, 6)});
  check([](const std::vector<array>& p) { return put_along_axis(p[0], p[1], p[2], 0); },
        {a, array({1, 0, 1}, {1, 3}), distinct({1, 3}, 7)});
}

TEST(IndexingGrad, ScatterAddAxis) {
  array a = distinct({2, 3}, 8);
  check([](const std::vector<array>& p) { return scatter_add_axis(p[0], p[1], p[2], 1); },
        {a, array({0, 0, 2, 2, 1, 2, 1, 1}, {2, 4}), distinct({2, 4}, 9)});
  check([](const std::vector<array>& p) { return scatter_add_axis(p[0], p[1], p[2], 0); },
        {a, array({1, 1, 0}, {1, 3}), distinct({1, 3}, 10)});
}

TEST(IndexingGrad, ScatterAddTake) {
  // The embedding gradient shape: a (5, 3), indices (4,), updates (4, 3), with a repeat.
  check([](const std::vector<array>& p) { return scatter_add_take(p[0], p[1], p[2], 0); },
        {distinct({5, 3}, 11), array({4, 1, 4, -5}), distinct({4, 3}, 12)});
  // Inner axis with 2-D indices: updates (2, 2, 2).
  check([](const std::vector<array>& p) { return scatter_add_take(p[0], p[1], p[2], 1); },
        {distinct({2, 3}, 13), array({0, 2, 2, 2}, {2, 2}), distinct({2, 2, 2}, 15)});
  // Broadcast updates.
  check([](const std::vector<array>& p) { return scatter_add_take(p[0], p[1], p[2], 0); },
        {distinct({3, 2}, 16), array({2, 2, 0}), distinct({2}, 17)});
}

TEST(IndexingGrad, SortTopKPartition) {
  array a = distinct({3, 5}, 18);
  for (int axis : {0, 1, -1}) {
    check([axis](const std::vector<array>& p) { return sort(p[0], axis); }, {a});
  }
  check([](const std::vector<array>& p) { return topk(p[0], 2); }, {a});
  check([](const std::vector<array>& p) { return topk(p[0], 1, 0); }, {a});
  check([](const std::vector<array>& p) { return topk(p[0], 5); }, {a});
  check([](const std::vector<array>& p) { return partition(p[0], 2); }, {a});
  check([](const std::vector<array>& p) { return partition(p[0], -1, 0); }, {a});
  // argsort indices are constants: sort through take_along_axis matches sort.
  check([](const std::vector<array>& p) { return take_along_axis(p[0], argsort(p[0], 1), 1); }, {a});
  // Through a strided view.
  check([](const std::vector<array>& p) { return sort(transpose(p[0]), 1); }, {a});
}

TEST(IndexingGrad, HandComputedEmbeddingGradient) {
  // d/dW sum(take(W, [0, 0, 2])) counts how often each row is used.
  array w = zeros({3, 2});
  auto g = grad([](const std::vector<array>& p) { return sum(take(p[0], array({0, 0, 2}), 0)); })({w});
  expect_array(g[0], {3, 2}, {2, 2, 0, 0, 1, 1});
  // d/dx sum(topk(x, 2) * [1, 10]) = 1 at the second largest, 10 at the largest.
  array x({3.f, 9.f, 1.f, 7.f});
  auto gt = grad([](const std::vector<array>& p) { return sum(topk(p[0], 2) * array({1.f, 10.f})); })({x});
  expect_array(gt[0], {4}, {0, 10, 0, 1});
  // d/dx sum(sort(x) * [1, 2, 3]) puts weight i at the element of rank i.
  array y({5.f, -1.f, 2.f});
  auto gs = grad([](const std::vector<array>& p) { return sum(sort(p[0]) * array({1.f, 2.f, 3.f})); })({y});
  expect_array(gs[0], {3}, {3, 1, 2});
  // put_along_axis: the overwritten entry of a gets no gradient; the value gets it.
  auto gp = grad([](const std::vector<array>& p) {
    return sum(put_along_axis(p[0], array({1}, {1, 1}), p[1], 1) * array({1.f, 2.f, 3.f}, {1, 3}));
  }, {0, 1})({zeros({1, 3}), array({4.f}, {1, 1})});
  expect_array(gp[0], {1, 3}, {1, 0, 3});
  expect_array(gp[1], {1, 1}, {2});
  // Two values written to the same place: the later one wins and takes the whole gradient.
  auto gd = grad([](const std::vector<array>& p) {
    return sum(put_along_axis(p[0], array({2, 0, 2}, {1, 3}), p[1], 1) * array({1.f, 2.f, 3.f}, {1, 3}));
  }, {0, 1})({zeros({1, 3}), array({4.f, 5.f, 6.f}, {1, 3})});
  expect_array(gd[0], {1, 3}, {0, 2, 0});
  expect_array(gd[1], {1, 3}, {0, 1, 3});
}

TEST(IndexingGrad, JvpOfTakeIsTakeOfTangent) {
  array a({1.f, 2.f, 3.f});
  auto [out, t] = jvp([](const array& x) { return take(x, array({2, 2, 0}), 0); }, a, array({10.f, 20.f, 30.f}));
  expect_array(out, {3}, {3, 3, 1});
  expect_array(t, {3}, {30, 30, 10});
}

// ---- MLX's gather / scatter family, masked_scatter, as_strided, slice updates ----

TEST(IndexingGrad, Gather) {
  array a = distinct({3, 4}, 21);
  // Repeated whole rows: their cotangents add up.
  check([](const std::vector<array>& p) { return gather(p[0], p[1], 0, {1, 4}); }, {a, array({2, 0, 2})});
  // Overlapping (2, 2) windows at two axes, with broadcast index arrays.
  check([](const std::vector<array>& p) { return gather(p[0], {p[1], p[2]}, {0, 1}, {2, 2}); },
        {a, array({0, 1}, {2, 1}), array({1, 2, 1}, {1, 3})});
  // Negative axis and index, a transposed view, and no index arrays.
  check([](const std::vector<array>& p) { return gather(transpose(p[0]), p[1], -1, {2, 1}); }, {a, array({-1, 0})});
  check([](const std::vector<array>& p) { return gather(p[0], std::vector<array>{}, std::vector<int>{}, {2, 3}); }, {a});
}

TEST(IndexingGrad, Scatter) {
  array a = distinct({4, 3}, 22);
  // Distinct rows.
  check([](const std::vector<array>& p) { return scatter(p[0], p[1], p[2], 0); },
        {a, array({3, 0}), distinct({2, 1, 3}, 23)});
  // Repeated rows and overlapping windows: only the update that lands last gets a gradient.
  check([](const std::vector<array>& p) { return scatter(p[0], p[1], p[2], 0); },
        {a, array({1, 0, 1}), distinct({3, 2, 3}, 24)});
  // Points on two axes, broadcast indices, one point hit twice.
  check([](const std::vector<array>& p) { return scatter(p[0], {p[1], p[2]}, p[3], {0, -1}); },
        {a, array({0, 2}, {2, 1}), array({1, 1, 2}, {1, 3}), distinct({2, 3, 1, 1}, 25)});
}

TEST(IndexingGrad, ScatterAdd) {
  array a = distinct({4, 3}, 26);
  check([](const std::vector<array>& p) { return scatter_add(p[0], p[1], p[2], 0); },
        {a, array({1, 0, 1}), distinct({3, 2, 3}, 27)});
  check([](const std::vector<array>& p) { return scatter_add(p[0], {p[1], p[2]}, p[3], {0, 1}); },
        {a, array({3, 3}), array({0, 1}), distinct({2, 1, 2}, 28)});
}

TEST(IndexingGrad, ScatterMaxMin) {
  // Values kept apart (no ties), repeated indices: the largest (smallest) of each position wins.
  array a = distinct({5}, 29);
  array u = distinct({4, 1}, 30);
  for (int trial = 0; trial < 2; ++trial) {
    array idx = trial == 0 ? array({4, 1, 4, 0}) : array({2, 2, 3, 2});
    check([](const std::vector<array>& p) { return scatter_max(p[0], p[1], p[2], 0); }, {a, idx, u});
    check([](const std::vector<array>& p) { return scatter_min(p[0], p[1], p[2], 0); }, {a, idx, u});
  }
  check([](const std::vector<array>& p) { return scatter_max(p[0], p[1], p[2], 1); },
        {distinct({2, 3}, 31), array({0, 2}), distinct({2, 2, 1}, 32)});
}

TEST(IndexingGrad, ScatterProdHasNoGradientAsInMlx) {
  auto f = [](const std::vector<array>& p) { return std::vector<array>{scatter_prod(p[0], array({1}), p[1], 0)}; };
  std::vector<array> x{array({1.f, 2.f}), array({3.f}, {1, 1})};
  EXPECT_THROW_MSG(vjp(f, x, {array({1.f, 1.f})}), std::runtime_error, "[scatter_prod] has no vjp");
  EXPECT_THROW_MSG(jvp(f, x, {array({1.f, 1.f}), array({1.f}, {1, 1})}), std::runtime_error, "[scatter_prod] has no jvp");
}

TEST(IndexingGrad, MaskedScatter) {
  array a = distinct({2, 3}, 33);
  check([](const std::vector<array>& p) { return masked_scatter(p[0], p[1], p[2]); },
        {a, array({true, false, true, true, false, false}, {2, 3}), distinct({5}, 34)});
  // A mask over the leading dimension takes whole rows of src.
  check([](const std::vector<array>& p) { return masked_scatter(p[0], p[1], p[2]); },
        {a, array({false, true}), distinct({2, 3}, 35)});
}

TEST(IndexingGrad, AsStrided) {
  array a = distinct({3, 4}, 36);
  // Overlapping windows: elements used more than once collect every cotangent.
  check([](const std::vector<array>& p) { return as_strided(p[0], {4, 3}, {2, 1}, 1); }, {a});
  check([](const std::vector<array>& p) { return as_strided(transpose(p[0]), {2, 3}, {-1, 3}, 3); }, {a});
}

TEST(IndexingGrad, DynamicSlice) {
  check([](const std::vector<array>& p) { return slice(p[0], array({1, -3}), {0, 1}, {2, 2}); }, {distinct({3, 4}, 43)});
  check([](const std::vector<array>& p) { return slice(transpose(p[0]), array(2), {1}, {4, 1}); },
        {distinct({3, 4}, 44)});
}

TEST(IndexingGrad, DynamicSliceUpdate) {
  check([](const std::vector<array>& p) { return slice_update(p[0], p[1], array({1, -3}), {0, 1}); },
        {distinct({3, 4}, 37), distinct({2, 2}, 38)});
  check([](const std::vector<array>& p) { return slice_update(p[0], p[1], array(2), {1}); },
        {distinct({3, 4}, 39), distinct({2}, 40)});
}

TEST(IndexingGrad, SliceUpdateReduce) {
  array a = distinct({3, 4}, 41);
  array u = distinct({2, 2}, 42);
  check([](const std::vector<array>& p) { return slice_update_add(p[0], p[1], {0, 1}, {3, 4}, {2, 2}); }, {a, u});
  check([](const std::vector<array>& p) { return slice_update_prod(p[0], p[1], {1, 0}, {3, 2}); }, {a, u});
  check([](const std::vector<array>& p) { return slice_update_max(p[0], p[1], {-1, 3}, {-4, 0}, {-2, -2}); }, {a, u});
  check([](const std::vector<array>& p) { return slice_update_min(p[0], p[1], {0, 0}, {2, 2}); }, {a, u});
  // Broadcast update and a transposed source.
  check([](const std::vector<array>& p) { return slice_update_max(transpose(p[0]), p[1], {0, 0}, {2, 3}); },
        {a, distinct({1, 3}, 43)});
}

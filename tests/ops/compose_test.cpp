// MLX's composed ops (ops/compose.cpp): numpy's values, shapes, errors, and finite-difference
// gradients through the compositions.
#include "../test_utils.h"
#include "loom/autograd/check.h"

using namespace loom;
using loom::testing::expect_array;

namespace {

array m34() { return reshape(arange(0, 12), {3, 4}); }  // 0..11
array b234() { return reshape(arange(0, 24), {2, 3, 4}); }

std::vector<double> iota_d(int n, double from = 0) {
  std::vector<double> v(n);
  for (int i = 0; i < n; ++i) v[i] = from + i;
  return v;
}

void grad_ok(const std::function<array(const array&)>& f, const array& x, const char* what) {
  auto r = check_grads([&](const std::vector<array>& p) { return std::vector<array>{f(p[0])}; }, {x});
  EXPECT_TRUE(r.ok) << what << "\n" << r.report;
}

// Distinct float64 values (so that no composition's derivative is at a tie).
array values(const Shape& s) {
  size_t n = 1;
  for (int d : s) n *= d;
  std::vector<double> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = 0.37 * double((i * 7 + 3) % 13) - 1.1 + 0.01 * double(i);
  return array(v, s, float64);
}

}  // namespace

TEST(Compose, FlipAndRoll) {
  expect_array(flip(m34(), 0), {3, 4}, {8, 9, 10, 11, 4, 5, 6, 7, 0, 1, 2, 3});
  expect_array(flip(m34()), {3, 4}, {11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0});
  expect_array(flip(m34(), std::vector<int>{}), {3, 4}, iota_d(12));
  expect_array(flip(zeros({0, 2})), {0, 2}, {});
  expect_array(roll(m34(), 1), {3, 4}, {11, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10});
  expect_array(roll(m34(), -1, 1), {3, 4}, {1, 2, 3, 0, 5, 6, 7, 4, 9, 10, 11, 8});
  expect_array(roll(m34(), Shape{1, -5}, std::vector<int>{0, 1}), {3, 4}, {9, 10, 11, 8, 1, 2, 3, 0, 5, 6, 7, 4});
  expect_array(roll(m34(), 13), {3, 4}, {11, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10});  // 13 = 1 mod 12
  expect_array(roll(m34(), Shape{2, -1}, 1), {3, 4}, {3, 0, 1, 2, 7, 4, 5, 6, 11, 8, 9, 10});  // shifts add up
  expect_array(roll(zeros({0, 3}), 2, 0), {0, 3}, {});
  // A repeated axis rolls again, as numpy: np.roll(np.arange(5), (1, 2), axis=(0, 0)) = [2, 3, 4, 0, 1].
  expect_array(roll(arange(5), Shape{1, 2}, std::vector<int>{0, -1}), {5}, {2, 3, 4, 0, 1});
  EXPECT_THROW_MSG(flip(m34(), 2), std::out_of_range, "[flip] axis 2 is out of range");
  EXPECT_THROW_MSG(flip(m34(), std::vector<int>{0, -2}), std::invalid_argument, "[flip] axis -2 is repeated");
  EXPECT_THROW_MSG(roll(m34(), Shape{1}, std::vector<int>{0, 1}), std::invalid_argument,
                   "[roll] needs one shift per axis, got 1 shifts for 2 axes");
  grad_ok([](const array& x) { return flip(x, 1) * x; }, values({3, 4}), "flip");
  grad_ok([](const array& x) { return roll(x, Shape{1, -2}, std::vector<int>{0, 1}) * x; }, values({3, 4}), "roll");
}

TEST(Compose, Triangles) {
  array t = tri(3, 4, 1, float32);
  EXPECT_EQ(t.dtype(), float32);
  expect_array(t, {3, 4}, {1, 1, 0, 0, 1, 1, 1, 0, 1, 1, 1, 1});
  expect_array(tri(2), {2, 2}, {1, 0, 1, 1});
  expect_array(tril(m34(), -1), {3, 4}, {0, 0, 0, 0, 4, 0, 0, 0, 8, 9, 0, 0});
  expect_array(triu(m34(), 1), {3, 4}, {0, 1, 2, 3, 0, 0, 6, 7, 0, 0, 0, 11});
  // Batched over leading axes; tril + triu(k + 1) is the whole array.
  array b = b234();
  expect_array(tril(b) + triu(b, 1), {2, 3, 4}, iota_d(24));
  EXPECT_EQ(tril(b).dtype(), b.dtype());
  EXPECT_THROW_MSG(tril(arange(0, 3)), std::invalid_argument, "[tril] needs an array of at least 2 dimensions, got shape (3)");
  EXPECT_THROW_MSG(tri(-1, 2, 0, float32), std::invalid_argument, "[tri] needs n, m >= 0");
  grad_ok([](const array& x) { return tril(x, 1) * x; }, values({3, 4}), "tril");
  grad_ok([](const array& x) { return triu(x) * x; }, values({2, 3, 3}), "triu");
}

TEST(Compose, DiagonalDiagTrace) {
  expect_array(diagonal(m34(), 1), {3}, {1, 6, 11});
  expect_array(diagonal(m34(), -1), {2}, {4, 9});
  expect_array(diagonal(m34(), 4), {0}, {});
  expect_array(diagonal(b234(), 0, 1, 2), {2, 3}, {0, 5, 10, 12, 17, 22});
  expect_array(diagonal(b234(), 1, 0, 2), {3, 2}, {1, 14, 5, 18, 9, 22});
  expect_array(diagonal(b234(), 0, -1, -2), {2, 3}, {0, 5, 10, 12, 17, 22});  // axes swapped: same diagonal
  expect_array(diag(m34(), 1), {3}, {1, 6, 11});
  expect_array(diag(array({1, 2, 3}, {3}), 1), {4, 4}, {0, 1, 0, 0, 0, 0, 2, 0, 0, 0, 0, 3, 0, 0, 0, 0});
  expect_array(diag(array({1, 2}, {2}), -2), {4, 4}, {0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 2, 0, 0});
  expect_array(trace(m34()), {}, {15});
  expect_array(trace(m34(), 1, 0, 1), {}, {18});
  expect_array(trace(b234(), 0, 1, 2), {2}, {15, 51});
  array tf = trace(m34(), 0, 0, 1, float64);
  EXPECT_EQ(tf.dtype(), float64);
  EXPECT_EQ(tf.item<double>(), 15.0);
  EXPECT_THROW_MSG(diagonal(arange(0, 3)), std::invalid_argument, "[diagonal] needs an array of at least 2 dimensions");
  EXPECT_THROW_MSG(diagonal(m34(), 0, 1, -1), std::invalid_argument, "[diagonal] axis1 and axis2 are both 1");
  EXPECT_THROW_MSG(diag(b234()), std::invalid_argument, "[diag] needs a 1-d or 2-d array, got shape (2,3,4)");
  grad_ok([](const array& x) { return diagonal(x, 1, 0, 2); }, values({3, 2, 4}), "diagonal");
  grad_ok([](const array& x) { return diag(x, -1); }, values({3}), "diag of a vector");
  grad_ok([](const array& x) { return trace(x, 0, 1, 2) * 2.0; }, values({2, 3, 3}), "trace");
}

TEST(Compose, FullLikeAtleastUnstack) {
  array a = zeros({2, 3}, int32);
  array f = full_like(a, array(2.5f));
  EXPECT_EQ(f.dtype(), int32);  // a's dtype
  expect_array(f, {2, 3}, {2, 2, 2, 2, 2, 2});
  array g = full_like(a, array({1.5f, 2.5f, 3.5f}, {3}), float32);
  expect_array(g, {2, 3}, {1.5, 2.5, 3.5, 1.5, 2.5, 3.5});
  EXPECT_EQ(atleast_1d(array(3.0f)).shape(), (Shape{1}));
  EXPECT_EQ(atleast_2d(array(3.0f)).shape(), (Shape{1, 1}));
  EXPECT_EQ(atleast_2d(zeros({5})).shape(), (Shape{1, 5}));
  EXPECT_EQ(atleast_3d(zeros({5})).shape(), (Shape{1, 5, 1}));
  EXPECT_EQ(atleast_3d(zeros({4, 5})).shape(), (Shape{4, 5, 1}));
  EXPECT_EQ(atleast_3d(zeros({2, 4, 5, 6})).shape(), (Shape{2, 4, 5, 6}));
  auto many = atleast_2d(std::vector<array>{array(1.0f), zeros({3})});
  ASSERT_EQ(many.size(), 2u);
  EXPECT_EQ(many[1].shape(), (Shape{1, 3}));
  auto parts = unstack(m34(), 1);
  ASSERT_EQ(parts.size(), 4u);
  expect_array(parts[2], {3}, {2, 6, 10});
  auto rows = unstack(m34());
  expect_array(rows[1], {4}, {4, 5, 6, 7});
  EXPECT_EQ(unstack(zeros({0, 2})).size(), 0u);
  EXPECT_THROW_MSG(unstack(array(1.0f)), std::invalid_argument, "[unstack] cannot unstack a 0-d array");
  EXPECT_THROW_MSG(unstack(m34(), 2), std::out_of_range, "[unstack] axis 2");
}

TEST(Compose, Meshgrid) {
  array x = array({1, 2}, {2}), y = array({3, 4, 5}, {3});
  auto xy = meshgrid({x, y});
  expect_array(xy[0], {3, 2}, {1, 2, 1, 2, 1, 2});
  expect_array(xy[1], {3, 2}, {3, 3, 4, 4, 5, 5});
  auto ij = meshgrid({x, y}, false, "ij");
  expect_array(ij[0], {2, 3}, {1, 1, 1, 2, 2, 2});
  expect_array(ij[1], {2, 3}, {3, 4, 5, 3, 4, 5});
  auto sparse = meshgrid({x, y}, true);
  EXPECT_EQ(sparse[0].shape(), (Shape{1, 2}));
  EXPECT_EQ(sparse[1].shape(), (Shape{3, 1}));
  auto three = meshgrid({x, y, array({7}, {1})}, false, "ij");
  EXPECT_EQ(three[2].shape(), (Shape{2, 3, 1}));
  EXPECT_THROW_MSG(meshgrid({x}, false, "yx"), std::invalid_argument, "[meshgrid] indexing must be \"xy\" or \"ij\"");
}

TEST(Compose, KronAndTensordot) {
  expect_array(kron(array({1, 2, 3, 4}, {2, 2}), array({0, 1, 1, 0}, {2, 2})), {4, 4},
               {0, 1, 0, 2, 1, 0, 2, 0, 0, 3, 0, 4, 3, 0, 4, 0});
  expect_array(kron(array({1, 2}, {2}), array({1, 10}, {2, 1})), {2, 2}, {1, 2, 10, 20});
  EXPECT_EQ(kron(array(2.0f), array(3.0f)).item<float>(), 6.0f);
  array c = reshape(astype(arange(0, 6), float64), {2, 3}), d = reshape(astype(arange(0, 12), float64), {3, 4});
  expect_array(tensordot(c, d, 1), {2, 4}, {20, 23, 26, 29, 56, 68, 80, 92});
  array e = reshape(astype(arange(0, 24), float64), {2, 3, 4}), f = reshape(astype(arange(0, 24), float64), {4, 3, 2});
  expect_array(tensordot(e, f, {1, 2}, {1, 0}), {2, 2}, {880, 946, 2464, 2674});
  EXPECT_EQ(tensordot(e, f, 0).shape(), (Shape{2, 3, 4, 4, 3, 2}));  // the outer product
  EXPECT_THROW_MSG(tensordot(e, f, {1}, {0}), std::invalid_argument,
                   "[tensordot] axis 1 of a (3) and axis 0 of b (4) differ in length");
  EXPECT_THROW_MSG(tensordot(e, f, {1}, {0, 1}), std::invalid_argument, "needs as many axes of a as of b");
  EXPECT_THROW_MSG(tensordot(e, f, 4), std::invalid_argument, "[tensordot] axis must be in [0, min(a.ndim, b.ndim)] = [0, 3], got 4");
  grad_ok([](const array& x) { return kron(x, x * 2.0); }, values({2, 3}), "kron");
  auto r = check_grads(
      [](const std::vector<array>& p) { return std::vector<array>{tensordot(p[0], p[1], {1, 2}, {1, 0})}; },
      {values({2, 3, 4}), values({4, 3, 2})});
  EXPECT_TRUE(r.ok) << r.report;
}

// Ops added under MLX's names because MLX's own tests use them (scripts/mlx_compat.py): contiguous,
// unflatten, divmod, arange(start, stop, dtype), linspace(..., endpoint, dtype), full_like of a scalar.
// Expected values are numpy's (printed by /usr/bin/python3 with numpy; the calls are in comments).
#include "../test_utils.h"

using namespace loom;
using loom::testing::expect_array;

TEST(MlxCompatOps, ContiguousMakesRowMajorAndCopiesOnlyWhenNeeded) {
  // A broadcast is not contiguous: the result is a row-major copy with the broadcast values.
  array b = contiguous(broadcast_to(array({1, 2, 3}), {2, 2, 3}));
  eval(b);
  EXPECT_TRUE(b.flags().row_contiguous);
  EXPECT_EQ(b.strides(), (Strides{6, 3, 1}));
  EXPECT_EQ(b.to_vector<int>(), (std::vector<int>{1, 2, 3, 1, 2, 3, 1, 2, 3, 1, 2, 3}));

  // A transpose is column-contiguous: kept as it is when allowed, copied to row-major otherwise.
  array x = array({1, 2, 3, 4, 5, 6}, {2, 3});
  eval(x);
  array t = transpose(x);
  array col = contiguous(t, true);
  array row = contiguous(t);
  eval(col, row);
  EXPECT_TRUE(col.flags().col_contiguous);
  EXPECT_EQ(col.strides(), (Strides{1, 3}));
  EXPECT_EQ(col.raw_data(), x.raw_data()) << "a column-major input must not be copied when allowed";
  EXPECT_TRUE(row.flags().row_contiguous);
  EXPECT_EQ(row.strides(), (Strides{2, 1}));
  EXPECT_NE(row.raw_data(), x.raw_data());
  EXPECT_EQ(row.to_vector<int>(), (std::vector<int>{1, 4, 2, 5, 3, 6}));

  // Already row-contiguous: the same buffer, no copy.
  array same = contiguous(x);
  eval(same);
  EXPECT_EQ(same.raw_data(), x.raw_data());

  // A small row-contiguous slice of a big buffer is copied (MLX's rule), so the big buffer can go.
  array big = zeros({1 << 16});
  eval(big);
  array head = contiguous(slice(big, {0}, {4}));
  eval(head);
  EXPECT_NE(head.raw_data(), big.raw_data());
  EXPECT_EQ(head.to_vector<float>(), (std::vector<float>{0, 0, 0, 0}));
}

TEST(MlxCompatOps, ContiguousGradientIsTheIdentity) {
  // d/dx sum(w * contiguous(x^T)) = w^T.
  array x = array({1.0f, 2.0f, 3.0f, 4.0f, 5.0f, 6.0f}, {2, 3});
  array w = array({1.0f, 10.0f, 100.0f, 1000.0f, 1e4f, 1e5f}, {3, 2});
  auto g = grad([&](const array& p) { return sum(w * contiguous(transpose(p))); })(x);
  expect_array(g, {2, 3}, {1, 100, 1e4, 10, 1000, 1e5});
  auto [out, tan] = jvp([](const std::vector<array>& p) { return std::vector<array>{contiguous(transpose(p[0]))}; },
                        {x}, {full({2, 3}, 2.0f)});
  expect_array(tan[0], {3, 2}, {2, 2, 2, 2, 2, 2});
}

TEST(MlxCompatOps, Unflatten) {
  array x = arange(24);
  EXPECT_EQ(unflatten(x, 0, {2, 3, 4}).shape(), (Shape{2, 3, 4}));
  array y = reshape(x, {4, 6});
  array u = unflatten(y, -1, {3, -1});
  EXPECT_EQ(u.shape(), (Shape{4, 3, 2}));
  EXPECT_EQ(u.to_vector<int>(), x.to_vector<int>());
  EXPECT_EQ(flatten(unflatten(y, 1, {2, 3}), 1, 2).shape(), y.shape());
  EXPECT_THROW_MSG(unflatten(y, 1, {4, 2}), std::invalid_argument, "[unflatten] cannot unflatten axis 1 of length 6");
  EXPECT_THROW_MSG(unflatten(y, 1, {-1, -1}), std::invalid_argument, "only one dimension can be -1");
  EXPECT_THROW_MSG(unflatten(y, 1, {}), std::invalid_argument, "[unflatten] the shape to unflatten to is empty");
  EXPECT_THROW_MSG(unflatten(y, 2, {6}), std::out_of_range, "[unflatten] axis 2");
  EXPECT_THROW_MSG(unflatten(y, 1, {-1, 4}), std::invalid_argument, "[unflatten] cannot unflatten axis 1");
}

TEST(MlxCompatOps, DivmodIsFloorDivideAndRemainder) {
  // np.divmod(np.array([7,-7,7,-7], np.int32), np.array([2,2,-2,-2], np.int32))
  auto qr = divmod(array({7, -7, 7, -7}), array({2, 2, -2, -2}));
  ASSERT_EQ(qr.size(), 2u);
  EXPECT_EQ(qr[0].dtype(), int32);
  EXPECT_EQ(qr[0].to_vector<int>(), (std::vector<int>{3, -4, -4, 3}));
  EXPECT_EQ(qr[1].to_vector<int>(), (std::vector<int>{1, 1, -1, -1}));
  // np.divmod(np.array([5.5,-5.5,0.75], np.float32), np.array([2,2,-0.5], np.float32))
  qr = divmod(array({5.5f, -5.5f, 0.75f}), array({2.0f, 2.0f, -0.5f}));
  expect_array(qr[0], {3}, {2, -3, -2});
  expect_array(qr[1], {3}, {1.5, 0.5, -0.25});
  EXPECT_THROW(divmod(zeros({2}), zeros({3})), std::invalid_argument);
}

TEST(MlxCompatOps, ArangeAndLinspaceOverloads) {
  // np.arange(2, 6, dtype=np.float32)
  array a = arange(2, 6, float32);
  EXPECT_EQ(a.dtype(), float32);
  expect_array(a, {4}, {2, 3, 4, 5});
  EXPECT_EQ(arange(0.5, 3.0, float64).to_vector<double>(), (std::vector<double>{0.5, 1.5, 2.5}));
  EXPECT_THROW_MSG(arange(0, 3, bool_), std::invalid_argument, "[arange]");
  // np.linspace(0, 1, 5, endpoint=False) and np.linspace(-1, 2, 4, endpoint=False, dtype=np.float32)
  expect_array(linspace(0, 1, 5, false, float64), {5}, {0.0, 0.2, 0.4, 0.6000000000000001, 0.8}, 1e-15);
  expect_array(linspace(-1, 2, 4, false), {4}, {-1.0, -0.25, 0.5, 1.25});
  expect_array(linspace(-1, 2, 4, true), {4}, {-1, 0, 1, 2});
  expect_array(linspace(3, 9, 1, false), {1}, {3});
  EXPECT_EQ(linspace(0, 1, 0, false).size(), 0u);
  EXPECT_THROW_MSG(linspace(0, 1, -1, false), std::invalid_argument, "[linspace]");
}

TEST(MlxCompatOps, FullLikeOfAScalar) {
  array x = zeros({2, 2}, int32);
  array f = full_like(x, 2.5f, float32);
  EXPECT_EQ(f.dtype(), float32);
  expect_array(f, {2, 2}, {2.5, 2.5, 2.5, 2.5});
  array g = full_like(x, 7.9);  // in x's dtype, as MLX: the value is converted
  EXPECT_EQ(g.dtype(), int32);
  EXPECT_EQ(g.to_vector<int>(), (std::vector<int>{7, 7, 7, 7}));
}

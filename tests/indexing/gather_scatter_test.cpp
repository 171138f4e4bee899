// MLX's general gather and scatters (gather, scatter, scatter_add/prod/max/min), masked_scatter,
// as_strided and the dynamic slice_update. Expected values were computed once with numpy, with a
// direct loop over the index tuples and window positions of MLX's documented semantics (the script is
// short: for each index tuple b, start = indices[.][b] on the indexed axes and 0 elsewhere, and
// out[start + u] (op)= updates[b, u] for every window position u, in row-major order).
#include <cmath>
#include <limits>

#include "helpers.h"

using namespace loom;
using loom::testing::expect_array;
using loom::testing::iota;

namespace {
const float kNaN = std::numeric_limits<float>::quiet_NaN();
}

// ---- gather ----

TEST(Gather, WindowsAtIndexTuples) {
  array a = iota({3, 4});  // 0 ... 11
  // Whole rows: shape (2,) + (1, 4).
  expect_array(gather(a, array({2, 0}), 0, {1, 4}), {2, 1, 4}, {8, 9, 10, 11, 0, 1, 2, 3});
  // Two axes, windows of (1, 2).
  expect_array(gather(a, {array({0, 2, 1}), array({1, 0, 2})}, {0, 1}, {1, 2}), {3, 1, 2}, {1, 2, 8, 9, 6, 7});
  // Index arrays broadcast together: (2, 1) and (1, 3) make a (2, 3) grid of points.
  expect_array(gather(a, {array({0, 2}, {2, 1}), array({0, 1, 3}, {1, 3})}, {0, 1}, {1, 1}), {2, 3, 1, 1},
               {0, 1, 3, 8, 9, 11});
  // 2-d indices on one axis.
  expect_array(gather(a, array({1, 0, 2, 1}, {2, 2}), 0, {1, 2}), {2, 2, 1, 2}, {4, 5, 0, 1, 8, 9, 4, 5});
  // Negative axis and negative index: the last column.
  expect_array(gather(a, array({-1}), -1, {3, 1}), {1, 3, 1}, {3, 7, 11});
  // No index arrays: one window at the origin.
  expect_array(gather(a, std::vector<array>{}, std::vector<int>{}, {2, 2}), {2, 2}, {0, 1, 4, 5});
  // A 0-d index keeps no index dimension.
  expect_array(gather(a, array(1), 0, {1, 4}), {1, 4}, {4, 5, 6, 7});
  // 0-d array.
  expect_array(gather(array(5.f), std::vector<array>{}, std::vector<int>{}, {}), {}, {5});
}

TEST(Gather, NonContiguousInputsEveryDtypeAndIndexDtype) {
  array t = transpose(iota({3, 4}));  // (4, 3): t[1] = [1, 5, 9], t[3] = [3, 7, 11]
  expect_array(gather(t, array({1, 3}), 0, {1, 3}), {2, 1, 3}, {1, 5, 9, 3, 7, 11});
  // Sliced (strided) array and transposed indices.
  array s = slice(iota({4, 6}), {0, 1}, {4, 6}, {2, 2});  // rows 0, 2; cols 1, 3, 5
  array idx = transpose(array({1, 0, 0, 1}, {2, 2}));  // [[1, 0], [0, 1]]
  expect_array(gather(s, {idx, array(2)}, {0, 1}, {1, 1}), {2, 2, 1, 1}, {17, 5, 5, 17});
  for (Dtype dt : loom::testing::all_dtypes()) {
    for (Dtype it : loom::testing::index_dtypes()) {
      array out = gather(astype(array({0, 1, 1, 0}, {2, 2}), dt), astype(array({1, 0}), it), 0, {1, 2});
      EXPECT_EQ(out.dtype(), dt);
      expect_array(out, {2, 1, 2}, {1, 0, 0, 1});
    }
  }
}

TEST(Gather, EmptyArraysAndIndices) {
  array a = iota({3, 4});
  expect_array(gather(a, array(std::vector<int>{}, {0}), 0, {1, 4}), {0, 1, 4}, {});
  expect_array(gather(a, array({1, 2}), 0, {0, 4}), {2, 0, 4}, {});
  // An empty array: the indices or the window must be empty (as MLX).
  expect_array(gather(zeros({0, 3}), array(std::vector<int>{}, {0}), 0, {1, 3}), {0, 1, 3}, {});
  expect_array(gather(zeros({0, 3}), array({0, 0}), 0, {0, 3}), {2, 0, 3}, {});
  EXPECT_THROW_MSG(gather(zeros({0, 3}), array({0}), 0, {1, 3}), std::invalid_argument, "[gather] the array of shape (0,3) is empty");
}

TEST(Gather, MatchesTakeOnALargeArrayInParallel) {
  const int V = 3000, D = 24, N = 5000;
  array w = reshape(astype(arange(0, V * D), float32), {V, D});
  std::vector<int> idx(N);
  for (int i = 0; i < N; ++i) idx[i] = (i * 7919) % V - (i % 3 == 0 ? V : 0);
  array ix(idx, {N});
  auto got = reshape(gather(w, ix, 0, {1, D}), {N, D}).to_vector<float>();
  auto want = take(w, ix, 0).to_vector<float>();
  EXPECT_EQ(got, want);
}

TEST(Gather, OutOfRangeIndexOrWindowThrowsAtEval) {
  array a = iota({3, 4});
  array o = gather(a, array({0, 3}), 0, {1, 4});
  EXPECT_THROW_MSG(o.eval(), std::out_of_range, "[gather] index 3 is out of bounds for axis 0 of size 3");
  array n = gather(a, array({-4}), 0, {1, 4});
  EXPECT_THROW_MSG(n.eval(), std::out_of_range, "[gather] index -4 is out of bounds for axis 0 of size 3");
  // The window must fit: MLX would read past the row.
  array w = gather(a, array({2}), 1, {3, 3});
  EXPECT_THROW_MSG(w.eval(), std::out_of_range, "[gather] index 2 with a window of size 3 is out of bounds for axis 1 of size 4");
}

TEST(Gather, BadInput) {
  array a = iota({3, 4});
  EXPECT_THROW_MSG(gather(a, {array({0}), array({0}), array({0})}, {0, 1, 2}, {1, 1}), std::invalid_argument,
                   "[gather] got 3 index arrays for the array of shape (3,4) with 2 dimensions");
  EXPECT_THROW_MSG(gather(a, {array({0})}, {0, 1}, {1, 1}), std::invalid_argument,
                   "[gather] got 1 index arrays but 2 axes");
  EXPECT_THROW_MSG(gather(a, {array({0}), array({0})}, {1, -1}, {1, 1}), std::invalid_argument,
                   "[gather] axis 1 is given twice");
  EXPECT_THROW_MSG(gather(a, array({0}), 2, {1, 1}), std::out_of_range, "[gather] axis 2 is out of range");
  EXPECT_THROW_MSG(gather(a, array({0.f}), 0, {1, 1}), std::invalid_argument, "[gather] indices must have an integer dtype");
  EXPECT_THROW_MSG(gather(a, array({true}), 0, {1, 1}), std::invalid_argument, "[gather] indices must have an integer dtype");
  EXPECT_THROW_MSG(gather(a, array({0}), 0, {1}), std::invalid_argument, "[gather] got 1 slice sizes (1) for the array of shape (3,4)");
  EXPECT_THROW_MSG(gather(a, array({0}), 0, {1, 5}), std::invalid_argument, "[gather] slice sizes (1,5) must lie in [0, a.shape[d]]");
  EXPECT_THROW_MSG(gather(a, array({0}), 0, {-1, 4}), std::invalid_argument, "[gather] slice sizes (-1,4)");
  EXPECT_THROW_MSG(gather(a, {array({0, 1}), array({0, 1, 2})}, {0, 1}, {1, 1}), std::invalid_argument,
                   "[gather] index arrays of shapes (2), (3) do not broadcast together");
}

// ---- scatter family ----

TEST(Scatter, MlxDocumentationExamples) {
  // The three examples of `scatter` in mlx/ops.h.
  expect_array(scatter(zeros({4, 4}), array({2}), reshape(arange(1.0, 3.0, 1.0), {1, 1, 2}), 0), {4, 4},
               {0, 0, 0, 0, 0, 0, 0, 0, 1, 2, 0, 0, 0, 0, 0, 0});
  expect_array(scatter(zeros({4, 4}), array({2, 0}), reshape(arange(1.0, 5.0, 1.0), {2, 1, 2}), 0), {4, 4},
               {3, 4, 0, 0, 0, 0, 0, 0, 1, 2, 0, 0, 0, 0, 0, 0});
  expect_array(scatter(zeros({4, 4}), {array({2, 0}), array({1, 2})}, reshape(arange(1.0, 5.0, 1.0), {2, 1, 2}),
                       std::vector<int>{0, 1}),
               {4, 4}, {0, 0, 3, 4, 0, 0, 0, 0, 0, 1, 2, 0, 0, 0, 0, 0});
}

TEST(Scatter, RepeatedIndicesLastWinsOthersAccumulate) {
  array idx({0, 2, 0});
  array upd = array({1.f, 2.f, 3.f}, {3, 1});
  expect_array(scatter(zeros({3}), idx, upd, 0), {3}, {3, 0, 2});
  expect_array(scatter_add(zeros({3}), idx, upd, 0), {3}, {4, 0, 2});
  expect_array(scatter_prod(full({3}, 2.f), idx, upd, 0), {3}, {6, 2, 4});
  expect_array(scatter_max(full({3}, 2.f), idx, array({1.f, 5.f, 3.f}, {3, 1}), 0), {3}, {3, 2, 5});
  expect_array(scatter_min(full({3}, 2.f), idx, array({1.f, 5.f, 3.f}, {3, 1}), 0), {3}, {1, 2, 2});
  // Windows that overlap partly: (0, 1) then (1, 2).
  array w = array({1.f, 2.f, 3.f, 4.f}, {2, 2});
  expect_array(scatter(zeros({4}), array({0, 1}), w, 0), {4}, {1, 3, 4, 0});
  expect_array(scatter_add(zeros({4}), array({0, 1}), w, 0), {4}, {1, 5, 4, 0});
}

TEST(Scatter, BroadcastIndexArraysAndReductions) {
  array b = iota({2, 3});  // [[0, 1, 2], [3, 4, 5]]
  // rows (2, 1) x cols (1, 2): points (0,2) (0,0) (1,2) (1,0) get 10 11 12 13.
  std::vector<array> idx{array({0, 1}, {2, 1}), array({2, 0}, {1, 2})};
  array upd = reshape(arange(10.0, 14.0, 1.0), {2, 2, 1, 1});
  expect_array(scatter_max(b, idx, upd, {0, 1}), {2, 3}, {11, 1, 10, 13, 4, 12});
  expect_array(scatter_prod(b, idx, upd, {0, 1}), {2, 3}, {0, 1, 20, 39, 4, 60});
  // Whole rows with a negative index: rows 1, 0 (as -2), 1.
  array rows = array({-1.f, 7.f, 3.f, 4.f, -5.f, 6.f, 9.f, 0.f, -2.f}, {3, 1, 3});
  expect_array(scatter_min(b, array({1, -2, 1}), rows, 0), {2, 3}, {0, -5, 2, -1, 0, -2});
  expect_array(scatter_min(b, array({1, -2, 1}), rows, -2), {2, 3}, {0, -5, 2, -1, 0, -2});
  // A window narrower than the array: only its part is written.
  expect_array(scatter_add(b, array({1}), array({10.f, 20.f}, {1, 1, 2}), 0), {2, 3}, {0, 1, 2, 13, 24, 5});
  // 0-d: no indices, the update replaces the value.
  expect_array(scatter(array(1.f), std::vector<array>{}, array(5.f), std::vector<int>{}), {}, {5});
}

TEST(Scatter, SpecialValuesIntegersAndBools) {
  // NaN propagates through max and min from either side (as maximum / minimum).
  array m = scatter_max(array({kNaN, 1.f}), array({0, 1}), array({5.f, kNaN}, {2, 1}), 0);
  auto v = m.to_vector<float>();
  EXPECT_TRUE(std::isnan(v[0]) && std::isnan(v[1]));
  array n = scatter_min(array({kNaN, 1.f}), array({0, 1}), array({5.f, kNaN}, {2, 1}), 0);
  auto w = n.to_vector<float>();
  EXPECT_TRUE(std::isnan(w[0]) && std::isnan(w[1]));
  // Integer sums and products wrap (numpy).
  const int32_t big = std::numeric_limits<int32_t>::max();
  auto s = scatter_add(array(std::vector<int32_t>{big}, {1}), array({0, 0}), array({1, 1}, {2, 1}), 0).to_vector<int32_t>();
  EXPECT_EQ(s[0], std::numeric_limits<int32_t>::min() + 1);
  auto p = scatter_prod(array(std::vector<int64_t>{int64_t(1) << 62}, {1}), array({0}), array(std::vector<int64_t>{4}, {1, 1}), 0)
               .to_vector<int64_t>();
  EXPECT_EQ(p[0], 0);
  // bool: add is or, prod is and.
  array f = array({false, true, false}, bool_);
  expect_array(scatter_add(f, array({0, 0}), array({true, true}, {2, 1}), 0), {3}, {1, 1, 0});
  expect_array(scatter_prod(f, array({1, 2}), array({false, true}, {2, 1}), 0), {3}, {0, 0, 0});
  expect_array(scatter_max(f, array({2}), array({true}, {1, 1}), 0), {3}, {0, 1, 1});
}

TEST(Scatter, EveryDtypeIndexDtypeAndNonContiguousOperands) {
  for (Dtype dt : loom::testing::all_dtypes()) {
    for (Dtype it : loom::testing::index_dtypes()) {
      array upd = astype(array({1, 1}, {2, 1}), dt);
      array out = scatter(zeros({3}, dt), astype(array({2, 0}), it), upd, 0);
      EXPECT_EQ(out.dtype(), dt);
      expect_array(out, {3}, {1, 0, 1});
      expect_array(scatter_add(zeros({3}, dt), astype(array({2, 2}), it), upd, 0), {3},
                   {0, 0, dt == bool_ ? 1.0 : 2.0});
      expect_array(scatter_max(zeros({3}, dt), astype(array({1}), it), astype(array({1}, {1, 1}), dt), 0), {3}, {0, 1, 0});
      expect_array(scatter_min(ones({3}, dt), astype(array({1}), it), astype(array({0}, {1, 1}), dt), 0), {3}, {1, 0, 1});
      expect_array(scatter_prod(ones({3}, dt), astype(array({0}), it), astype(array({0}, {1, 1}), dt), 0), {3}, {0, 1, 1});
    }
  }
  // Updates are cast to the array's dtype.
  array c = scatter(zeros({2}, int32), array({1}), array({2.75f}, {1, 1}), 0);
  EXPECT_EQ(c.dtype(), int32);
  expect_array(c, {2}, {0, 2});
  // Transposed array, transposed updates and strided indices; the input is left intact.
  array t = transpose(iota({3, 2}));  // (2, 3): [[0, 2, 4], [1, 3, 5]]
  t.eval();
  array upd = reshape(transpose(array({10.f, 20.f, 30.f, 40.f}, {2, 2})), {2, 1, 2});  // [[10, 30]], [[20, 40]]
  array idx = slice(array({1, 9, 0, 9}), {0}, {4}, {2});                              // [1, 0]
  expect_array(scatter(t, idx, upd, 0), {2, 3}, {20, 40, 4, 10, 30, 5});
  expect_array(t, {2, 3}, {0, 2, 4, 1, 3, 5});
}

TEST(Scatter, EmptyUpdatesAndArrays) {
  array a = iota({2, 3});
  expect_array(scatter(a, array(std::vector<int>{}, {0}), zeros({0, 1, 3}), 0), {2, 3}, {0, 1, 2, 3, 4, 5});
  expect_array(scatter_add(a, array({5, 7}), zeros({2, 0, 3}), 0), {2, 3}, {0, 1, 2, 3, 4, 5});  // nothing is written
  expect_array(scatter(zeros({0, 3}), array({0}), zeros({1, 0, 3}), 0), {0, 3}, {});
}

TEST(Scatter, LargeScattersMatchTheSequentialOrder) {
  // Embedding-gradient shape, split across threads along the window.
  const int V = 50, D = 2000, N = 64;
  std::vector<int> idx(N);
  for (int i = 0; i < N; ++i) idx[i] = (i * 13) % V;
  array ix(idx, {N});
  array upd = reshape(astype(arange(0, N * D), float32), {N, D});
  auto got = scatter_add(zeros({V, D}), ix, reshape(upd, {N, 1, D}), 0).to_vector<float>();
  auto want = scatter_add_take(zeros({V, D}), ix, upd, 0).to_vector<float>();
  EXPECT_EQ(got, want);
  // Assignment: the last row written to each index wins, on every thread.
  auto last = scatter(zeros({V, D}), ix, reshape(upd, {N, 1, D}), 0).to_vector<float>();
  std::vector<float> expect(size_t(V) * D, 0.f);
  for (int i = 0; i < N; ++i)
    for (int d = 0; d < D; ++d) expect[size_t(idx[i]) * D + d] = float(i * D + d);
  EXPECT_EQ(last, expect);
}

TEST(Scatter, OutOfRangeIndexOrWindowThrowsAtEval) {
  array o = scatter(zeros({3, 2}), array({0, 3}), ones({2, 1, 2}), 0);
  EXPECT_THROW_MSG(o.eval(), std::out_of_range, "[scatter] index 3 is out of bounds for axis 0 of size 3");
  array n = scatter_add(zeros({3}), array({-4}), ones({1, 1}), 0);
  EXPECT_THROW_MSG(n.eval(), std::out_of_range, "[scatter_add] index -4 is out of bounds for axis 0 of size 3");
  array w = scatter_max(zeros({4}), array({3}), ones({1, 2}), 0);
  EXPECT_THROW_MSG(w.eval(), std::out_of_range, "[scatter_max] index 3 with a window of size 2 is out of bounds for axis 0 of size 4");
}

TEST(Scatter, BadInput) {
  array a = zeros({3, 4});
  EXPECT_THROW_MSG(scatter(a, array({0}), ones({1, 4}), 0), std::invalid_argument,
                   "[scatter] updates of shape (1,4) have 2 dimensions; they need 3");
  EXPECT_THROW_MSG(scatter_add(a, array({0, 1}), ones({3, 1, 4}), 0), std::invalid_argument,
                   "[scatter_add] updates of shape (3,1,4) do not start with the index shape (2)");
  EXPECT_THROW_MSG(scatter_prod(a, array({0}), ones({1, 1, 5}), 0), std::invalid_argument,
                   "[scatter_prod] updates of shape (1,1,5) have windows larger than the array of shape (3,4)");
  EXPECT_THROW_MSG(scatter_max(a, {array({0}), array({0})}, ones({1, 1, 1}), {0, 0}), std::invalid_argument,
                   "[scatter_max] axis 0 is given twice");
  EXPECT_THROW_MSG(scatter_min(a, {array({0})}, ones({1, 1, 1}), {0, 1}), std::invalid_argument,
                   "[scatter_min] got 1 index arrays but 2 axes");
  EXPECT_THROW_MSG(scatter(a, array({0.5f}), ones({1, 1, 4}), 0), std::invalid_argument,
                   "[scatter] indices must have an integer dtype");
  EXPECT_THROW_MSG(scatter(a, array({0}), ones({1, 1, 4}), -3), std::out_of_range, "[scatter] axis -3 is out of range");
  EXPECT_THROW_MSG(scatter(array(1.f), array({0}), ones({1}), 0), std::invalid_argument,
                   "[scatter] got 1 index arrays for the array of shape () with 0 dimensions");
}

// ---- masked_scatter ----

TEST(MaskedScatter, FillsMaskedPositionsInOrder) {
  // The cases of MLX's tests: a 1-d mask, an all-false mask, a mask over leading dimensions.
  expect_array(masked_scatter(zeros({4}, int32), array({true, true, false, true}), array({1, 2, 4})), {4}, {1, 2, 0, 4});
  expect_array(masked_scatter(zeros({4}, int32), array({false, false, false, false}), array({1, 2, 4})), {4}, {0, 0, 0, 0});
  expect_array(masked_scatter(zeros({2, 2}, int32), array({true, false}), array({5, 6, 7, 8}, {2, 2})), {2, 2},
               {5, 6, 0, 0});
  // A scalar fills every masked position; src is cast; extra src elements are unused.
  expect_array(masked_scatter(iota({2, 3}), array({true, false, true, false, false, true}, {2, 3}), array(9)), {2, 3},
               {9, 1, 9, 3, 4, 9});
  expect_array(masked_scatter(iota({2, 3}), array({false, true, true, false, true, false}, {2, 3}),
                              array({1.5f, 2.5f, 3.5f, 4.5f})),
               {2, 3}, {0, 1.5, 2.5, 3, 3.5, 5});
  // Non-contiguous a, mask and src.
  array t = transpose(iota({3, 2}));                                             // [[0, 2, 4], [1, 3, 5]]
  array mk = transpose(array({true, false, false, true, true, false}, {3, 2}));  // [[T, F, T], [F, T, F]]
  array src = slice(array({7.f, 0.f, 8.f, 0.f, 9.f}), {0}, {5}, {2});            // [7, 8, 9]
  expect_array(masked_scatter(t, mk, src), {2, 3}, {7, 2, 8, 1, 9, 5});
  // Empty and 0-d.
  expect_array(masked_scatter(zeros({0, 2}), zeros({0, 2}, bool_), array({1.f})), {0, 2}, {});
  expect_array(masked_scatter(array(1.f), array(true), array({4.f})), {}, {4});
  for (Dtype dt : loom::testing::all_dtypes()) {
    array out = masked_scatter(zeros({3}, dt), array({false, true, true}), astype(array({1, 0}), dt));
    EXPECT_EQ(out.dtype(), dt);
    expect_array(out, {3}, {0, 1, 0});
  }
}

TEST(MaskedScatter, TooFewSourceElementsThrowAtEval) {
  array o = masked_scatter(zeros({4}), array({true, true, false, true}), array({1.f, 2.f}));
  EXPECT_THROW_MSG(o.eval(), std::runtime_error, "[masked_scatter] the mask selects 3 positions but src has only 2 elements");
}

TEST(MaskedScatter, BadInput) {
  EXPECT_THROW_MSG(masked_scatter(array({1, 2}), array({1, 2}), array({1, 2})), std::invalid_argument,
                   "[masked_scatter] the mask must be bool");
  EXPECT_THROW_MSG(masked_scatter(iota({2, 2}), array({false, true, true, false}, {4, 1}), array({1, 2})),
                   std::invalid_argument, "[masked_scatter] the mask of shape (4,1) must match the leading dimensions");
  EXPECT_THROW_MSG(masked_scatter(iota({2}), array({false, true}), zeros({1, 1})), std::invalid_argument,
                   "[masked_scatter] src of shape (1,1) has more than 1 dimensions");
  EXPECT_THROW_MSG(masked_scatter(iota({2, 3}), array({false, true}), zeros({2, 2})), std::invalid_argument,
                   "[masked_scatter] src of shape (2,2) does not broadcast to rows of shape (3)");
}

// ---- as_strided ----

TEST(AsStrided, ViewsTheRowMajorElements) {
  array a = iota({3, 4});
  // Sliding windows of 3 over the flat data, step 2.
  expect_array(as_strided(a, {4, 3}, {2, 1}, 1), {4, 3}, {1, 2, 3, 3, 4, 5, 5, 6, 7, 7, 8, 9});
  // Broadcast (stride 0), negative strides and the diagonal.
  expect_array(as_strided(a, {2, 3}, {0, 1}, 2), {2, 3}, {2, 3, 4, 2, 3, 4});
  expect_array(as_strided(a, {4}, {-3}, 11), {4}, {11, 8, 5, 2});
  expect_array(as_strided(a, {3}, {5}, 0), {3}, {0, 5, 10});
  // A non-contiguous input is read in its row-major order.
  array t = transpose(a);  // (4, 3): 0 4 8 1 5 9 ...
  expect_array(as_strided(t, {2, 2}, {3, 1}, 1), {2, 2}, {4, 8, 5, 9});
  array s = slice(a, {0, 1}, {3, 4}, {2, 2});  // [[1, 3], [9, 11]]
  expect_array(as_strided(s, {3}, {1}, 1), {3}, {3, 9, 11});
  expect_array(as_strided(broadcast_to(array(7.f), {5}), {2, 2}, {1, 2}, 0), {2, 2}, {7, 7, 7, 7});
  // Overlapping windows whose span equals their size: a reduction must see the view's elements
  // (squares of 0 ... 8 at 0 2 4 / 2 4 6 / 4 6 8: sum 192), not the 9 elements in memory (204).
  array sq = square(iota({9}));
  array ov = as_strided(sq, {3, 3}, {2, 2}, 0);
  expect_array(ov, {3, 3}, {0, 4, 16, 4, 16, 36, 16, 36, 64});
  expect_array(sum(ov), {}, {192});
  expect_array(sum(ov, 0), {3}, {20, 56, 116});
  expect_array(exp(ov * 0.f) + ov, {3, 3}, {1, 5, 17, 5, 17, 37, 17, 37, 65});
  // 0-d and empty results; every dtype.
  expect_array(as_strided(a, {}, {}, 5), {}, {5});
  expect_array(as_strided(a, {0, 3}, {100, 1}, 50), {0, 3}, {});
  for (Dtype dt : loom::testing::all_dtypes()) {
    array out = as_strided(astype(array({0, 1, 1, 0}), dt), {2}, {3}, 0);
    EXPECT_EQ(out.dtype(), dt);
    expect_array(out, {2}, {0, 0});
  }
}

TEST(AsStrided, ReachOutsideTheDataThrows) {
  array a = iota({3, 4});
  EXPECT_THROW_MSG(as_strided(a, {4, 3}, {3, 1}, 1), std::out_of_range,
                   "[as_strided] shape (4,3) with strides (3,1) and offset 1 reaches elements 1 to 12, outside the 12 elements");
  EXPECT_THROW_MSG(as_strided(a, {4}, {-3}, 8), std::out_of_range, "reaches elements -1 to 8");
  EXPECT_THROW_MSG(as_strided(a, {}, {}, 12), std::out_of_range, "reaches elements 12 to 12");
  EXPECT_THROW_MSG(as_strided(zeros({0}), {1}, {1}, 0), std::out_of_range, "outside the 0 elements");
  EXPECT_THROW_MSG(as_strided(a, {2, 2}, {1}, 0), std::invalid_argument, "[as_strided] shape (2,2) has 2 dimensions but 1 strides");
  EXPECT_THROW_MSG(as_strided(a, {-1}, {1}, 0), std::invalid_argument, "[as_strided] negative dimension in shape (-1)");
}

// ---- slice with array start ----

TEST(DynamicSlice, ReadsTheBlockAtStart) {
  array a = array({0.f, 1.f, 2.f, 3.f, 4.f, 5.f, 6.f, 7.f, 8.f, 9.f, 10.f, 11.f}, {3, 4});
  // Row 1, column 2, a (2, 2) block.
  expect_array(slice(a, array({1, 2}), {0, 1}, {2, 2}), {2, 2}, {6, 7, 10, 11});
  // One axis with a 0-d start; the other axis starts at 0 and takes its slice size.
  expect_array(slice(a, array(1), {1}, {2, 3}), {2, 3}, {1, 2, 3, 5, 6, 7});
  // A negative start counts from the end; every index dtype works.
  expect_array(slice(a, array({-1}), {0}, {1, 4}), {1, 4}, {8, 9, 10, 11});
  for (Dtype it : loom::testing::index_dtypes()) {
    expect_array(slice(a, astype(array({2}), it), {1}, {1, 2}), {1, 2}, {2, 3});
  }
  // The same block as the static slice, for a start computed by the graph.
  array start = argmax(array({0, 5, 1}));  // 1
  expect_array(slice(a, start, {0}, {2, 4}), {2, 4}, {4, 5, 6, 7, 8, 9, 10, 11});
  EXPECT_EQ(slice(a, array({0}), {0}, {0, 4}).shape(), (Shape{0, 4}));
}

TEST(DynamicSlice, OutOfRangeAndBadInput) {
  array o = slice(zeros({3, 4}), array({2, 0}), {0, 1}, {2, 2});
  EXPECT_THROW_MSG(o.eval(), std::out_of_range, "index 2 with a window of size 2 is out of bounds for axis 0 of size 3");
  EXPECT_THROW_MSG(slice(zeros({3, 4}), array({0}), {0}, {2}), std::invalid_argument,
                   "[slice] 1 slice sizes (2) for an array of 2 dimensions");
  EXPECT_THROW_MSG(slice(zeros({3, 4}), array({0}), {0}, {4, 4}), std::invalid_argument,
                   "[slice] slice sizes (4,4) do not fit the array of shape (3,4)");
  EXPECT_THROW_MSG(slice(zeros({3, 4}), array({0, 0}, {1, 2}), {0, 1}, {1, 1}), std::invalid_argument,
                   "[slice] start of shape (1,2) must be 0-d or 1-d");
  EXPECT_THROW_MSG(slice(zeros({3, 4}), array({0, 0}), {0}, {1, 1}), std::invalid_argument,
                   "[slice] start of shape (2) gives 2 positions for 1 axes");
  EXPECT_THROW_MSG(slice(zeros({3, 4}), array({0.f}), {0}, {1, 1}), std::invalid_argument,
                   "[slice] indices must have an integer dtype");
  EXPECT_THROW_MSG(slice(zeros({3, 4}), array({0, 0}), {1, -1}, {1, 1}), std::invalid_argument,
                   "[slice] axis 1 is repeated");
  EXPECT_THROW_MSG(slice(zeros({3, 4}), array({0}), {2}, {1, 1}), std::out_of_range, "[slice] axis 2 is out of range");
}

// ---- slice_update with array start ----

TEST(DynamicSliceUpdate, WritesTheBlockAtStart) {
  array a = zeros({3, 4});
  // Start given by an array: row 1, col 2; the update's block (2, 2).
  expect_array(slice_update(a, array({1.f, 2.f, 3.f, 4.f}, {2, 2}), array({1, 2}), {0, 1}), {3, 4},
               {0, 0, 0, 0, 0, 0, 1, 2, 0, 0, 3, 4});
  // One axis; the other axes start at 0. A 0-d start works for one axis.
  expect_array(slice_update(a, array({5.f, 6.f}, {1, 2}), array(2), {0}), {3, 4}, {0, 0, 0, 0, 0, 0, 0, 0, 5, 6, 0, 0});
  // Fewer dimensions: the update is broadcast over src's leading dimensions (size 1 on an indexed one).
  expect_array(slice_update(a, array({7.f, 8.f}), array({-2}), {1}), {3, 4}, {0, 0, 7, 8, 0, 0, 7, 8, 0, 0, 7, 8});
  expect_array(slice_update(a, array({7.f, 8.f, 9.f, 1.f}), array({1}), {0}), {3, 4}, {0, 0, 0, 0, 7, 8, 9, 1, 0, 0, 0, 0});
  // Every index dtype; updates cast.
  for (Dtype it : loom::testing::index_dtypes()) {
    expect_array(slice_update(zeros({3}, int32), array({2.5f}), astype(array({1}), it), {0}), {3}, {0, 2, 0});
  }
}

TEST(DynamicSliceUpdate, OutOfRangeAndBadInput) {
  array o = slice_update(zeros({3, 4}), ones({2, 2}), array({2, 0}), {0, 1});
  EXPECT_THROW_MSG(o.eval(), std::out_of_range,
                   "[slice_update] index 2 with a window of size 2 is out of bounds for axis 0 of size 3");
  EXPECT_THROW_MSG(slice_update(zeros({3, 4}), ones({2}), array({0, 0}, {1, 2}), {0, 1}), std::invalid_argument,
                   "[slice_update] start of shape (1,2) must be 0-d or 1-d");
  EXPECT_THROW_MSG(slice_update(zeros({3, 4}), ones({2}), array({0, 0}), {0}), std::invalid_argument,
                   "[slice_update] start of shape (2) gives 2 positions for 1 axes");
  EXPECT_THROW_MSG(slice_update(zeros({3, 4}), ones({2}), array({0.f}), {0}), std::invalid_argument,
                   "[slice_update] indices must have an integer dtype");
  EXPECT_THROW_MSG(slice_update(zeros({3}), ones({1, 2}), array({0}), {0}), std::invalid_argument,
                   "[slice_update] the update of shape (1,2) has more dimensions than the array of shape (3)");
  EXPECT_THROW_MSG(slice_update(zeros({3, 4}), ones({3, 2}), array({0}), {0, 1}), std::invalid_argument,
                   "[slice_update] start of shape (1) gives 1 positions for 2 axes");
  EXPECT_THROW_MSG(slice_update(zeros({3, 4}), ones({2}), array({0, 0}), {1, 1}), std::invalid_argument,
                   "[slice_update] axis 1 is given twice");
  EXPECT_THROW_MSG(slice_update(zeros({3, 4}), ones({2}), array({0}), {2}), std::out_of_range,
                   "[slice_update] axis 2 is out of range");
}

// ---- slice_update_add / prod / max / min ----

TEST(SliceUpdateReduce, CombinesWithTheSlice) {
  array a = iota({2, 3});  // [[0, 1, 2], [3, 4, 5]]
  array u = array({10.f, 20.f}, {1, 2});
  expect_array(slice_update_add(a, u, {1, 0}, {2, 3}, {1, 2}), {2, 3}, {0, 1, 2, 13, 4, 25});
  expect_array(slice_update_prod(a, u, {1, 1}, {2, 3}), {2, 3}, {0, 1, 2, 3, 40, 100});
  expect_array(slice_update_max(a, array({4.f}), {0, 0}, {2, 3}, {1, 2}), {2, 3}, {4, 1, 4, 4, 4, 5});
  expect_array(slice_update_min(a, array({1.5f, -1.f}, {2, 1}), {0, 2}, {2, 3}), {2, 3}, {0, 1, 1.5, 3, 4, -1});
  // Negative steps and a whole-array slice.
  expect_array(slice_update_add(a, array({1.f, 2.f, 3.f}), {0, -1}, {1, -4}, {1, -1}), {2, 3}, {3, 3, 3, 3, 4, 5});
  expect_array(slice_update_prod(a, array(2.f), {0, 0}, {2, 3}), {2, 3}, {0, 2, 4, 6, 8, 10});
  // Transposed src, NaN, integers wrapping, bool, 0-d.
  array t = transpose(iota({3, 2}));  // [[0, 2, 4], [1, 3, 5]]
  expect_array(slice_update_add(t, array({100.f}), {0, 1}, {2, 2}), {2, 3}, {0, 102, 4, 1, 103, 5});
  auto mx = slice_update_max(array({kNaN, 1.f}), array({0.f, kNaN}), {0}, {2}).to_vector<float>();
  EXPECT_TRUE(std::isnan(mx[0]) && std::isnan(mx[1]));
  const int32_t big = std::numeric_limits<int32_t>::max();
  EXPECT_EQ(slice_update_add(array(std::vector<int32_t>{big}, {1}), array(1), {0}, {1}).to_vector<int32_t>()[0],
            std::numeric_limits<int32_t>::min());
  expect_array(slice_update_add(array({true, false}, bool_), array({true, false}, bool_), {0}, {2}), {2}, {1, 0});
  expect_array(slice_update_min(array(3.f), array(1.f), {}, {}), {}, {1});
  for (Dtype dt : loom::testing::all_dtypes()) {
    array out = slice_update_max(zeros({3}, dt), astype(array({1}), dt), {1}, {2});
    EXPECT_EQ(out.dtype(), dt);
    expect_array(out, {3}, {0, 1, 0});
  }
  // Empty slice: the source comes back.
  expect_array(slice_update_add(a, zeros({0, 3}), {1, 0}, {1, 3}), {2, 3}, {0, 1, 2, 3, 4, 5});
}

TEST(SliceUpdateReduce, BadInput) {
  array a = zeros({2, 3});
  EXPECT_THROW_MSG(slice_update_add(a, ones({2, 2}), {0, 0}, {1, 3}), std::invalid_argument,
                   "[slice_update_add] update of shape (2,2) does not broadcast to the slice shape (1,3)");
  EXPECT_THROW_MSG(slice_update_prod(a, ones({1}), {0}, {1}), std::invalid_argument,
                   "[slice_update_prod] start, stop and strides need one entry per dimension");
  EXPECT_THROW_MSG(slice_update_max(a, ones({1}), {0, 0}, {1, 1}, {1, 0}), std::invalid_argument,
                   "[slice_update_max] slice step of axis 1 is zero");
  EXPECT_THROW_MSG(slice_update_min(a, ones({5}), {0, 0}, {2, 3}), std::invalid_argument, "[slice_update_min]");
}

TEST(Scatter, MlxCallFormsCompileAndAgree) {
  // The argument forms MLX code uses: braced index lists and axes, empty lists, 0-d indices.
  array x = iota({6});
  expect_array(gather(x, {}, std::vector<int>{}, {3}), {3}, {0, 1, 2});
  auto idx = {array({1}), array({0})};
  auto axes = {0, 1};
  expect_array(scatter(zeros({2, 3}), idx, array({4.f, 5.f}, {1, 1, 2}), axes), {2, 3}, {0, 0, 0, 4, 5, 0});
  expect_array(scatter_max(array(1.f), {}, array(3.f), std::vector<int>{}), {}, {3});
  expect_array(scatter_min(array({4.f, 2.f}), array(0), array({3.f}, {1}), 0), {2}, {3, 2});
  expect_array(scatter_add(broadcast_to(array({1.f, 2.f}), {2, 2}), array({1, 1}), ones({2, 1, 1}), 0), {2, 2},
               {1, 2, 3, 2});
}

#include <cmath>

#include "helpers.h"

using namespace loom;
using loom::testing::expect_array;
using loom::testing::iota;

// ---- put_along_axis ----

TEST(PutAlongAxis, WritesOneValuePerRow) {
  array a = zeros({2, 3});
  expect_array(put_along_axis(a, array({1, 2}, {2, 1}), array({5.f, 7.f}, {2, 1}), 1), {2, 3}, {0, 5, 0, 0, 0, 7});
  expect_array(put_along_axis(a, array({1, -1}, {2, 1}), array({5.f, 7.f}, {2, 1}), -1), {2, 3}, {0, 5, 0, 0, 0, 7});
  // Along axis 0: one row index per column.
  expect_array(put_along_axis(a, array({1, 0, 1}, {1, 3}), array({1.f, 2.f, 3.f}, {1, 3}), 0), {2, 3},
               {0, 2, 0, 1, 0, 3});
}

TEST(PutAlongAxis, BroadcastsValuesAndIndices) {
  array a = iota({2, 3});
  // A scalar value.
  expect_array(put_along_axis(a, array({0, 2}, {2, 1}), array(-1.f), 1), {2, 3}, {-1, 1, 2, 3, 4, -1});
  // Indices (1, 2) broadcast over both rows; values (2, 1) broadcast along the indices.
  expect_array(put_along_axis(a, array({0, 2}, {1, 2}), array({8.f, 9.f}, {2, 1}), 1), {2, 3}, {8, 1, 8, 9, 4, 9});
  // Leading size-1 dimensions of values beyond a's rank are dropped.
  expect_array(put_along_axis(a, array({1}, {1, 1}), array({7.f}, {1, 1, 1}), 1), {2, 3}, {0, 7, 2, 3, 7, 5});
}

TEST(PutAlongAxis, LastDuplicateWinsAndInputIsUntouched) {
  array a = zeros({1, 3});
  expect_array(put_along_axis(a, array({0, 0, 2, 0}, {1, 4}), array({1.f, 2.f, 3.f, 4.f}, {1, 4}), 1), {1, 3},
               {4, 0, 3});
  array b = iota({2, 2});
  b.eval();
  array c = put_along_axis(b, array({0, 1}, {1, 2}), array(9.f), 0);
  expect_array(c, {2, 2}, {9, 1, 2, 9});
  expect_array(b, {2, 2}, {0, 1, 2, 3});
}

TEST(PutAlongAxis, NonContiguousInputsDtypesAndCasts) {
  array t = transpose(iota({2, 3}));  // (3, 2): [[0,3],[1,4],[2,5]]
  expect_array(put_along_axis(t, array({1, 0, 1}, {3, 1}), array(-1.f), 1), {3, 2}, {0, -1, -1, 4, 2, -1});
  array vals = transpose(array({1.f, 2.f, 3.f, 4.f, 5.f, 6.f}, {2, 3}));  // (3, 2)
  expect_array(put_along_axis(zeros({3, 3}), array({0, 2, 1, 0, 2, 1}, {3, 2}), vals, 1), {3, 3},
               {1, 0, 4, 5, 2, 0, 0, 6, 3});
  for (Dtype dt : loom::testing::all_dtypes()) {
    for (Dtype it : loom::testing::index_dtypes()) {
      array out = put_along_axis(zeros({2, 2}, dt), astype(array({1, 0}, {2, 1}), it), array({1, 1}, {2, 1}), 1);
      EXPECT_EQ(out.dtype(), dt);
      expect_array(out, {2, 2}, {0, 1, 1, 0});
    }
  }
  // Values are cast to the array's dtype.
  array ints = put_along_axis(zeros({3}, int32), array({1}), array({2.75f}), 0);
  EXPECT_EQ(ints.dtype(), int32);
  expect_array(ints, {3}, {0, 2, 0});
  expect_array(put_along_axis(zeros({2, 3}), array(std::vector<int>{}, {2, 0}), array(1.f), 1), {2, 3},
               {0, 0, 0, 0, 0, 0});
}

TEST(PutAlongAxis, BadInput) {
  array a = zeros({2, 3});
  EXPECT_THROW_MSG(put_along_axis(a, array({0, 1}), array(1.f), 1), std::invalid_argument,
                   "[put_along_axis] indices of shape (2) have 1 dimensions but the array of shape (2,3) has 2");
  EXPECT_THROW_MSG(put_along_axis(a, array({0, 1}, {2, 1}), array({1.f, 2.f, 3.f}, {3, 1}), 1),
                   std::invalid_argument, "[put_along_axis] indices of shape (2,1) and values of shape (3,1)");
  EXPECT_THROW_MSG(put_along_axis(a, array({0, 1, 0}, {3, 1}), array(1.f), 1), std::invalid_argument,
                   "do not broadcast together to the array of shape (2,3) outside axis 1");
  EXPECT_THROW_MSG(put_along_axis(a, array({0}, {1, 1}), array({1.f, 2.f}, {2, 1, 1}), 1), std::invalid_argument,
                   "values of shape (2,1,1)");
  EXPECT_THROW_MSG(put_along_axis(a, array({0.f}, {1, 1}), array(1.f), 1), std::invalid_argument,
                   "[put_along_axis] indices must have an integer dtype");
  EXPECT_THROW_MSG(put_along_axis(a, array({0}, {1, 1}), array(1.f), -3), std::out_of_range,
                   "[put_along_axis] axis -3");
  EXPECT_THROW_MSG(put_along_axis(zeros({2, 0}), array({0}, {1, 1}), array(1.f), 1), std::invalid_argument,
                   "axis 1 of size 0");
  array bad = put_along_axis(a, array({3}, {1, 1}), array(1.f), 1);
  EXPECT_THROW_MSG(bad.eval(), std::out_of_range, "[put_along_axis] index 3 is out of bounds for axis 1 of size 3");
}

// ---- scatter_add_axis ----

TEST(ScatterAddAxis, RepeatedIndicesAccumulate) {
  array a = ones({2, 3});
  expect_array(scatter_add_axis(a, array({0, 0, 2, 1}, {2, 2}), array({1.f, 2.f, 3.f, 4.f}, {2, 2}), 1), {2, 3},
               {4, 1, 1, 1, 5, 4});
  expect_array(scatter_add_axis(zeros({3, 2}), array({2, 2, -1, 0}, {2, 2}), array(1.f), 0), {3, 2},
               {0, 1, 0, 0, 2, 1});
  for (Dtype dt : loom::testing::all_dtypes()) {
    array out = scatter_add_axis(zeros({1, 3}, dt), array({2, 0, 2}, {1, 3}), array(1), 1);
    EXPECT_EQ(out.dtype(), dt);
    expect_array(out, {1, 3}, dt == bool_ ? std::vector<double>{1, 0, 1} : std::vector<double>{1, 0, 2});
  }
}

TEST(ScatterAddAxis, BadInput) {
  EXPECT_THROW_MSG(scatter_add_axis(zeros({2, 3}), array({0}), array(1.f), 1), std::invalid_argument,
                   "[scatter_add_axis] indices of shape (1) have 1 dimensions");
  EXPECT_THROW_MSG(scatter_add_axis(zeros({2, 3}), array({0}, {1, 1}), array(1.f), 2), std::out_of_range,
                   "[scatter_add_axis] axis 2");
  EXPECT_THROW_MSG(scatter_add_axis(zeros({2, 3}), array({true}, {1, 1}), array(1.f), 1), std::invalid_argument,
                   "integer dtype");
}

// ---- scatter_add_take (the adjoint of take) ----

TEST(ScatterAddTake, EmbeddingGradientAccumulatesRows) {
  array a = zeros({4, 3});
  array idx({1, 3, 1, 0});
  array upd({1.f, 2.f, 3.f, 10.f, 20.f, 30.f, 100.f, 200.f, 300.f, -1.f, -2.f, -3.f}, {4, 3});
  // row 0 = u3, row 1 = u0 + u2, row 2 = 0, row 3 = u1.
  expect_array(scatter_add_take(a, idx, upd, 0), {4, 3}, {-1, -2, -3, 101, 202, 303, 0, 0, 0, 10, 20, 30});
  // Adding into a non-zero array keeps its values.
  expect_array(scatter_add_take(ones({4, 3}), idx, upd, 0), {4, 3}, {0, -1, -2, 102, 203, 304, 1, 1, 1, 11, 21, 31});
}

TEST(ScatterAddTake, InnerAxisWithTwoDimIndices) {
  // a (2, 3), indices (2, 2) along axis 1: updates (2, 2, 2); out[p, idx[i, j]] += u[p, i, j].
  array idx({0, 2, 2, 2}, {2, 2});
  array upd({1.f, 2.f, 3.f, 4.f, 5.f, 6.f, 7.f, 8.f}, {2, 2, 2});
  expect_array(scatter_add_take(zeros({2, 3}), idx, upd, 1), {2, 3}, {1, 0, 9, 5, 0, 21});
  expect_array(scatter_add_take(zeros({2, 3}), idx, upd, -1), {2, 3}, {1, 0, 9, 5, 0, 21});
  // Middle axis of a 3-D array with negative indices: a (2, 3, 2), indices (2,), updates (2, 2, 2).
  array u3({1.f, 2.f, 3.f, 4.f, 5.f, 6.f, 7.f, 8.f}, {2, 2, 2});
  expect_array(scatter_add_take(zeros({2, 3, 2}), array({-1, 0}), u3, 1), {2, 3, 2},
               {3, 4, 0, 0, 1, 2, 7, 8, 0, 0, 5, 6});
  // A 0-d index drops the axis from the updates.
  expect_array(scatter_add_take(zeros({2, 3}), array(1), array({5.f, 6.f}), 1), {2, 3}, {0, 5, 0, 0, 6, 0});
}

TEST(ScatterAddTake, BroadcastUpdatesMakeAHistogram) {
  array counts = scatter_add_take(zeros({5}, int32), array({1, 4, 1, 1, -1}), array(1), 0);
  EXPECT_EQ(counts.dtype(), int32);
  expect_array(counts, {5}, {0, 3, 0, 0, 2});
  // Updates (3,) broadcast over the index axis of (N=2, 3).
  expect_array(scatter_add_take(zeros({2, 3}), array({1, 1}), array({1.f, 2.f, 3.f}), 0), {2, 3}, {0, 0, 0, 2, 4, 6});
}

TEST(ScatterAddTake, NonContiguousOperandsLeaveTheInputIntact) {
  array base = iota({3, 2});  // [[0,1],[2,3],[4,5]]
  base.eval();
  array t = transpose(base);  // (2, 3): [[0,2,4],[1,3,5]]
  array upd = transpose(array({1.f, 2.f, 3.f, 4.f}, {2, 2}));  // [[1,3],[2,4]]
  expect_array(scatter_add_take(t, array({2, 2}), upd, 1), {2, 3}, {0, 2, 8, 1, 3, 11});
  expect_array(base, {3, 2}, {0, 1, 2, 3, 4, 5});
  array idx = slice(array({0, 9, 2, 9, 0}), {0}, {5}, {2});  // [0, 2, 0]
  expect_array(scatter_add_take(zeros({3}), idx, array({1.f, 2.f, 4.f}), 0), {3}, {5, 0, 2});
}

TEST(ScatterAddTake, EveryDtypeAndIndexDtype) {
  for (Dtype dt : loom::testing::all_dtypes()) {
    for (Dtype it : loom::testing::index_dtypes()) {
      array out = scatter_add_take(zeros({3}, dt), astype(array({2, 0, 2}), it), astype(array({1, 1, 1}), dt), 0);
      EXPECT_EQ(out.dtype(), dt);
      expect_array(out, {3}, dt == bool_ ? std::vector<double>{1, 0, 1} : std::vector<double>{1, 0, 2});
    }
  }
  // float64 keeps precision that float32 would lose.
  array d = scatter_add_take(zeros({1}, float64), array({0, 0}), array({1.0, 1e-12}), 0);
  EXPECT_EQ(d.to_vector<double>()[0], 1.0 + 1e-12);
  // Half types accumulate exactly while the sums are representable.
  expect_array(scatter_add_take(zeros({1}, bfloat16), array({0, 0, 0}), array({0.5f, 0.25f, 2.f}), 0), {1}, {2.75});
}

TEST(ScatterAddTake, EmptyIndices) {
  expect_array(scatter_add_take(ones({2, 2}), array(std::vector<int>{}, {0}), zeros({0, 2}), 0), {2, 2}, {1, 1, 1, 1});
  expect_array(scatter_add_take(ones({2, 0}), array({1, 1}), zeros({2, 0}), 0), {2, 0}, {});
  expect_array(scatter_add_take(zeros({0, 2}), array(std::vector<int>{}, {0}), array(1.f), 0), {0, 2}, {});
}

TEST(ScatterAddTake, LargeEmbeddingGradientRunsInParallel) {
  const int V = 100, D = 64, N = 20000;
  std::vector<int> idx(N);
  for (int i = 0; i < N; ++i) idx[i] = (i * 37) % V;  // each row N / V = 200 times
  // updates[i, d] = d + 1: every row of the result is 200 * (d + 1), exact in float32.
  array col = astype(reshape(arange(1, D + 1), {1, D}), float32);
  array upd = copy(broadcast_to(col, {N, D}));
  auto got = scatter_add_take(zeros({V, D}), array(idx, {N}), upd, 0).to_vector<float>();
  for (int v = 0; v < V; ++v)
    for (int d = 0; d < D; ++d) ASSERT_EQ(got[v * D + d], 200.f * (d + 1)) << v << "," << d;
  // Many short rows along the last axis (parallel over the outer dimension).
  auto h = scatter_add_take(zeros({4096, 4}), array({3, 3, 0}), array(1.f), 1).to_vector<float>();
  for (int r = 0; r < 4096; ++r) {
    ASSERT_EQ(h[r * 4 + 0], 1.f);
    ASSERT_EQ(h[r * 4 + 1], 0.f);
    ASSERT_EQ(h[r * 4 + 3], 2.f);
  }
}

TEST(ScatterAddTake, OutOfRangeIndexThrowsAtEval) {
  array out = scatter_add_take(zeros({3, 2}), array({0, 3}), ones({2, 2}), 0);
  EXPECT_THROW_MSG(out.eval(), std::out_of_range, "[scatter_add_take] index 3 is out of bounds for axis 0 of size 3");
  array neg = scatter_add_take(zeros({3}), array({-4}), ones({1}), 0);
  EXPECT_THROW_MSG(neg.eval(), std::out_of_range, "index -4");
}

TEST(ScatterAddTake, BadInput) {
  array a = zeros({4, 3});
  EXPECT_THROW_MSG(scatter_add_take(a, array({0, 1}), ones({2, 4}), 0), std::invalid_argument,
                   "[scatter_add_take] updates of shape (2,4) do not broadcast to (2,3)");
  EXPECT_THROW_MSG(scatter_add_take(a, array({0, 1}), ones({3, 3}), 0), std::invalid_argument,
                   "indices of shape (2)");
  EXPECT_THROW_MSG(scatter_add_take(a, array({0, 1}), ones({1, 2, 3}), 0), std::invalid_argument,
                   "updates of shape (1,2,3)");
  EXPECT_THROW_MSG(scatter_add_take(a, array({0.f}), ones({1, 3}), 0), std::invalid_argument,
                   "[scatter_add_take] indices must have an integer dtype");
  EXPECT_THROW_MSG(scatter_add_take(a, array({0}), ones({1, 3}), 2), std::out_of_range, "[scatter_add_take] axis 2");
  EXPECT_THROW_MSG(scatter_add_take(zeros({0, 3}), array({0}), ones({1, 3}), 0), std::invalid_argument,
                   "axis 0 of size 0");
  EXPECT_THROW_MSG(scatter_add_take(array(1.f), array({0}), ones({1}), 0), std::out_of_range, "axis 0");
}

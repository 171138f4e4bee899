#include <cmath>

#include "helpers.h"

using namespace loom;
using loom::testing::expect_array;
using loom::testing::iota;

// ---- take ----

TEST(Take, OneDimWithNegativeIndices) {
  array a({10.f, 20.f, 30.f, 40.f, 50.f});
  array out = take(a, array({0, -1, 2, -5, 4}), 0);
  EXPECT_EQ(out.dtype(), float32);
  expect_array(out, {5}, {10, 50, 30, 10, 50});
}

TEST(Take, RowsAndColumnsOfAMatrix) {
  array a = iota({3, 4});  // [[0,1,2,3],[4,5,6,7],[8,9,10,11]]
  expect_array(take(a, array({2, 0}), 0), {2, 4}, {8, 9, 10, 11, 0, 1, 2, 3});
  expect_array(take(a, array({3, 0}), 1), {3, 2}, {3, 0, 7, 4, 11, 8});
  expect_array(take(a, array({3, 0}), -1), {3, 2}, {3, 0, 7, 4, 11, 8});
  expect_array(take(a, array({-1}), -2), {1, 4}, {8, 9, 10, 11});
}

TEST(Take, TwoDimIndicesGiveTheirShape) {
  array a = iota({3, 4});
  // (3, 2, 2): out[r, i, j] = a[r, idx[i, j]].
  array out = take(a, array({3, 0, 1, 1}, {2, 2}), 1);
  expect_array(out, {3, 2, 2}, {3, 0, 1, 1, 7, 4, 5, 5, 11, 8, 9, 9});
  // Along axis 0: (2, 2, 4).
  expect_array(take(a, array({2, 0, 1, 2}, {2, 2}), 0), {2, 2, 4},
               {8, 9, 10, 11, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11});
}

TEST(Take, ThreeDimArrayMiddleAxis) {
  array a = iota({2, 3, 4});
  expect_array(take(a, array({2, 0}), 1), {2, 2, 4},
               {8, 9, 10, 11, 0, 1, 2, 3, 20, 21, 22, 23, 12, 13, 14, 15});
  // 2-D indices into the middle axis: (2, 1, 2, 4).
  expect_array(take(a, array({1, -1}, {1, 2}), 1), {2, 1, 2, 4},
               {4, 5, 6, 7, 8, 9, 10, 11, 16, 17, 18, 19, 20, 21, 22, 23});
}

TEST(Take, ZeroDimIndexRemovesTheAxis) {
  array a = iota({3, 4});
  expect_array(take(a, array(1), 0), {4}, {4, 5, 6, 7});
  expect_array(take(a, array(-1), 1), {3}, {3, 7, 11});
  expect_array(take(a, 2, 1), {3}, {2, 6, 10});
  expect_array(take(a, -3, 0), {4}, {0, 1, 2, 3});
}

TEST(Take, FlattenedArray) {
  array a = iota({3, 4});
  expect_array(take(a, array({0, 11, 5, -1}, {2, 2})), {2, 2}, {0, 11, 5, 11});
  expect_array(take(a, 7), {}, {7});
  expect_array(take(a, -12), {}, {0});
  expect_array(take(array(5.f), array({0, 0, -1})), {3}, {5, 5, 5});
}

TEST(Take, TransposedInput) {
  array t = transpose(iota({3, 4}));  // (4, 3): t[i, j] = 4 j + i
  expect_array(take(t, array({1, 3}), 0), {2, 3}, {1, 5, 9, 3, 7, 11});
  expect_array(take(t, array({2, 2, 0}), 1), {4, 3}, {8, 8, 0, 9, 9, 1, 10, 10, 2, 11, 11, 3});
  array t3 = transpose(iota({2, 3, 4}), {2, 0, 1});  // (4, 2, 3): t3[k, i, j] = 12 i + 4 j + k
  expect_array(take(t3, array({1}), 1), {4, 1, 3}, {12, 16, 20, 13, 17, 21, 14, 18, 22, 15, 19, 23});
}

TEST(Take, SlicedAndReversedInput) {
  array a = iota({3, 4});
  array s = slice(a, {0, 1}, {3, 4}, {2, 2});  // [[1,3],[9,11]]
  expect_array(take(s, array({1, 0, 1}), 1), {2, 3}, {3, 1, 3, 11, 9, 11});
  array r = slice(a, {2, 0}, {-4, 4}, {-1, 1});  // rows reversed
  expect_array(take(r, array({0, 2}), 0), {2, 4}, {8, 9, 10, 11, 0, 1, 2, 3});
  array rc = slice(a, {0, 3}, {3, -5}, {1, -1});  // columns reversed
  expect_array(take(rc, array({0}), 1), {3, 1}, {3, 7, 11});
  expect_array(take(rc, array({2, 1}), 0), {2, 4}, {11, 10, 9, 8, 7, 6, 5, 4});
}

TEST(Take, BroadcastInputAndStridedIndices) {
  array b = broadcast_to(array({1.f, 2.f, 3.f}), {4, 3});
  expect_array(take(b, array({3, 1}), 0), {2, 3}, {1, 2, 3, 1, 2, 3});
  expect_array(take(b, array({2, 2}), 1), {4, 2}, {3, 3, 3, 3, 3, 3, 3, 3});
  array idx = transpose(array({0, 1, 2, 3, 0, 1}, {2, 3}));  // [[0,3],[1,0],[2,1]]
  expect_array(take(array({10.f, 11.f, 12.f, 13.f}), idx, 0), {3, 2}, {10, 13, 11, 10, 12, 11});
  array bidx = broadcast_to(array({2}), {3});
  expect_array(take(array({10.f, 11.f, 12.f}), bidx, 0), {3}, {12, 12, 12});
}

TEST(Take, EveryDtypeAndIndexDtype) {
  for (Dtype dt : loom::testing::all_dtypes()) {
    for (Dtype it : loom::testing::index_dtypes()) {
      array a = astype(array({0, 1, 2, 3, 4, 5}, {2, 3}), dt);
      array out = take(a, astype(array({2, 0}), it), 1);
      EXPECT_EQ(out.dtype(), dt);
      if (dt == bool_) {
        expect_array(out, {2, 2}, {1, 0, 1, 1});
      } else {
        expect_array(out, {2, 2}, {2, 0, 5, 3});
      }
    }
  }
  // Values that only the wide types hold survive the gather bit for bit.
  array big = array({int64_t(1) << 40, -(int64_t(1) << 50)});
  EXPECT_EQ(take(big, array({1, 0}), 0).to_vector<int64_t>(), (std::vector<int64_t>{-(int64_t(1) << 50), int64_t(1) << 40}));
  array d = array({0.1, 1e300}, float64);
  EXPECT_EQ(take(d, array({1, 0}), 0).to_vector<double>(), (std::vector<double>{1e300, 0.1}));
  array h = array({0.1f, 65504.f}, float16);
  expect_array(take(h, array({1}), 0), {1}, {65504});
  array n = array({1.f, NAN, INFINITY});
  expect_array(take(n, array({1, 2}), 0), {2}, {NAN, INFINITY});
}

TEST(Take, EmptyIndicesAndEmptyArrays) {
  array a = iota({3, 4});
  expect_array(take(a, array(std::vector<int>{}, {0}), 1), {3, 0}, {});
  expect_array(take(a, array(std::vector<int>{}, {2, 0}), 0), {2, 0, 4}, {});
  expect_array(take(zeros({0, 3}), array(std::vector<int>{}, {0}), 0), {0, 3}, {});
  expect_array(take(zeros({3, 0}), array({1, 2}), 0), {2, 0}, {});
  expect_array(take(zeros({0, 3}), array({1, 2}), 1), {0, 2}, {});
  expect_array(take(a, array(std::vector<int>{}, {0})), {0}, {});
}

TEST(Take, LargeGatherOfRowsMatchesFormula) {
  // Embedding-sized: a[i, j] = 64 i + j; out[r, j] = 64 idx[r] + j. Large enough to run in parallel.
  const int V = 1000, D = 64, N = 5000;
  array a = iota({V, D});
  std::vector<int> idx(N);
  for (int r = 0; r < N; ++r) idx[r] = (r * 7919) % V - (r % 3 == 0 ? V : 0);  // some negative
  array out = take(a, array(idx, {N}), 0);
  auto got = out.to_vector<float>();
  ASSERT_EQ(out.shape(), (Shape{N, D}));
  for (int r = 0; r < N; ++r) {
    int row = idx[r] < 0 ? idx[r] + V : idx[r];
    for (int j = 0; j < D; ++j) ASSERT_EQ(got[size_t(r) * D + j], float(row * D + j)) << r << "," << j;
  }
  // The same gather from a transposed (column-major) table.
  array at = transpose(iota({D, V}));  // at[i, j] = V j + i
  auto got_t = take(at, array(idx, {N}), 0).to_vector<float>();
  for (int r = 0; r < N; r += 97) {
    int row = idx[r] < 0 ? idx[r] + V : idx[r];
    for (int j = 0; j < D; ++j) ASSERT_EQ(got_t[size_t(r) * D + j], float(V * j + row));
  }
  // Along the last axis, many short rows.
  array cols = take(iota({4096, 16}), array({15, 0, -2}), 1);
  auto c = cols.to_vector<float>();
  for (int i = 0; i < 4096; ++i) {
    ASSERT_EQ(c[i * 3 + 0], float(16 * i + 15));
    ASSERT_EQ(c[i * 3 + 1], float(16 * i));
    ASSERT_EQ(c[i * 3 + 2], float(16 * i + 14));
  }
}

TEST(Take, OutOfRangeIndexThrowsAtEval) {
  array a({1.f, 2.f, 3.f});
  array out = take(a, array({0, 5}), 0);  // building is fine: the values are data
  EXPECT_THROW_MSG(out.eval(), std::out_of_range, "[take] index 5 is out of bounds for axis 0 of size 3");
  array neg = take(iota({2, 3}), array({-4}), 1);
  EXPECT_THROW_MSG(neg.eval(), std::out_of_range, "[take] index -4 is out of bounds for axis 1 of size 3");
  array ok = take(a, array({-3}), 0);
  expect_array(ok, {1}, {1});
  array u8 = take(iota({300}), array({255}, uint8), 0);
  expect_array(u8, {1}, {255});
  EXPECT_THROW_MSG(take(iota({3}), array({255}, uint8), 0).eval(), std::out_of_range, "index 255");
}

TEST(Take, BadInputThrowsAtBuild) {
  array a = iota({3, 4});
  EXPECT_THROW_MSG(take(a, array({1.f}), 0), std::invalid_argument, "[take] indices must have an integer dtype");
  EXPECT_THROW_MSG(take(a, array({1.f}), 0), std::invalid_argument, "float32");
  EXPECT_THROW_MSG(take(a, array({true}), 0), std::invalid_argument, "got bool");
  EXPECT_THROW_MSG(take(a, array({1.0}, float16)), std::invalid_argument, "[take] indices must have an integer dtype");
  EXPECT_THROW_MSG(take(a, array({1}), 2), std::out_of_range, "[take] axis 2 is out of range");
  EXPECT_THROW_MSG(take(a, array({1}), -3), std::out_of_range, "[take] axis -3");
  EXPECT_THROW_MSG(take(array(1.f), array({0}), 0), std::out_of_range, "[take] axis 0");
  EXPECT_THROW_MSG(take(zeros({0, 3}), array({0}), 0), std::invalid_argument, "axis 0 of size 0");
  EXPECT_THROW_MSG(take(a, 4, 0), std::out_of_range, "[take] index 4 is out of bounds for axis 0 of size 3");
  EXPECT_THROW_MSG(take(a, -5, 1), std::out_of_range, "index -5");
  EXPECT_THROW_MSG(take(a, 12), std::out_of_range, "index 12");
  EXPECT_THROW_MSG(take(a, 0, 2), std::out_of_range, "axis 2");
}

// ---- take_along_axis ----

TEST(TakeAlongAxis, SortsRowsWithArgsortIndices) {
  array a({10.f, 30.f, 20.f, 60.f, 40.f, 50.f}, {2, 3});
  array idx({0, 2, 1, 1, 2, 0}, {2, 3});
  expect_array(take_along_axis(a, idx, 1), {2, 3}, {10, 20, 30, 40, 50, 60});
  expect_array(take_along_axis(a, idx, -1), {2, 3}, {10, 20, 30, 40, 50, 60});
  // Along axis 0, a single row of indices.
  expect_array(take_along_axis(a, array({1, 0, 1}, {1, 3}), 0), {1, 3}, {60, 30, 50});
  // Repeats and negatives, more indices than the axis has.
  expect_array(take_along_axis(a, array({-1, -1, 0, 0, 1, 2, 2, -3}, {2, 4}), 1), {2, 4},
               {20, 20, 10, 10, 40, 50, 50, 60});
}

TEST(TakeAlongAxis, BroadcastsOutsideTheAxis) {
  array a({10.f, 30.f, 20.f, 60.f, 40.f, 50.f}, {2, 3});
  // Indices (2, 1): one per row.
  expect_array(take_along_axis(a, array({2, 0}, {2, 1}), 1), {2, 1}, {20, 60});
  // Indices (1, 2) broadcast over the rows.
  expect_array(take_along_axis(a, array({0, 2}, {1, 2}), 1), {2, 2}, {10, 20, 60, 50});
  // The array (1, 4) broadcast over rows of indices (3, 2).
  array row({1.f, 2.f, 3.f, 4.f}, {1, 4});
  expect_array(take_along_axis(row, array({0, 3, 1, 1, -1, 2}, {3, 2}), 1), {3, 2}, {1, 4, 2, 2, 4, 3});
}

TEST(TakeAlongAxis, ThreeDimAndNonContiguous) {
  array a = iota({2, 3, 4});
  // Along axis 1 with indices (2, 1, 4): out[i, 0, k] = a[i, idx[i, 0, k], k].
  array idx({0, 1, 2, 0, 2, 2, 1, 0}, {2, 1, 4});
  expect_array(take_along_axis(a, idx, 1), {2, 1, 4}, {0, 5, 10, 3, 20, 21, 18, 15});
  // A transposed input: t[i, j] = 4 j + i, shape (4, 3).
  array t = transpose(iota({3, 4}));
  expect_array(take_along_axis(t, array({2, 0, 1, 1}, {4, 1}), 1), {4, 1}, {8, 1, 6, 7});
  expect_array(take_along_axis(t, array({3, 0, 1}, {1, 3}), 0), {1, 3}, {3, 4, 9});
  // Transposed indices.
  array it = transpose(array({2, 1, 0, 0, 1, 2}, {2, 3}));  // (3, 2): [[2,0],[1,1],[0,2]]
  expect_array(take_along_axis(iota({3, 3}), it, 1), {3, 2}, {2, 0, 4, 4, 6, 8});
}

TEST(TakeAlongAxis, DtypesAndEmpty) {
  for (Dtype dt : loom::testing::all_dtypes()) {
    for (Dtype it : loom::testing::index_dtypes()) {
      array a = astype(array({0, 1, 2, 3}, {2, 2}), dt);
      array out = take_along_axis(a, astype(array({1, 1, 0, 1}, {2, 2}), it), 1);
      EXPECT_EQ(out.dtype(), dt);
      expect_array(out, {2, 2}, dt == bool_ ? std::vector<double>{1, 1, 1, 1} : std::vector<double>{1, 1, 2, 3});
    }
  }
  expect_array(take_along_axis(iota({2, 3}), array(std::vector<int>{}, {2, 0}), 1), {2, 0}, {});
  expect_array(take_along_axis(zeros({2, 0}), array(std::vector<int>{}, {2, 0}), 1), {2, 0}, {});
  expect_array(take_along_axis(zeros({0, 3}), array({1}, {1, 1}), 1), {0, 1}, {});
}

TEST(TakeAlongAxis, LargeLastAxisGather) {
  const int R = 3000, C = 32;
  array a = iota({R, C});
  // Reverse every row.
  std::vector<int> rev(R * C);
  for (int i = 0; i < R; ++i)
    for (int j = 0; j < C; ++j) rev[i * C + j] = C - 1 - j;
  auto got = take_along_axis(a, array(rev, {R, C}), 1).to_vector<float>();
  for (int i = 0; i < R; ++i)
    for (int j = 0; j < C; ++j) ASSERT_EQ(got[i * C + j], float(i * C + C - 1 - j));
}

TEST(TakeAlongAxis, BadInput) {
  array a = iota({2, 3});
  EXPECT_THROW_MSG(take_along_axis(a, array({0, 1}), 1), std::invalid_argument,
                   "[take_along_axis] indices of shape (2) have 1 dimensions but the array of shape (2,3) has 2");
  EXPECT_THROW_MSG(take_along_axis(a, array({0, 1, 0, 1, 0, 1}, {3, 2}), 1), std::invalid_argument,
                   "indices of shape (3,2) do not broadcast with the array of shape (2,3) outside axis 1");
  EXPECT_THROW_MSG(take_along_axis(a, array({0.5f}, {1, 1}), 1), std::invalid_argument, "integer dtype");
  EXPECT_THROW_MSG(take_along_axis(a, array({0}, {1, 1}), 2), std::out_of_range, "[take_along_axis] axis 2");
  EXPECT_THROW_MSG(take_along_axis(zeros({2, 0}), array({0, 0}, {2, 1}), 1), std::invalid_argument,
                   "axis 1 of size 0");
  array bad = take_along_axis(a, array({0, 3}, {2, 1}), 1);
  EXPECT_THROW_MSG(bad.eval(), std::out_of_range, "[take_along_axis] index 3 is out of bounds for axis 1 of size 3");
}

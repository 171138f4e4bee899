#include <algorithm>
#include <cmath>

#include "helpers.h"

using namespace loom;
using loom::testing::expect_array;
using loom::testing::iota;

// ---- sort / argsort ----

TEST(Sort, OneAndTwoDim) {
  expect_array(sort(array({3.f, 1.f, 2.f}), -1), {3}, {1, 2, 3});
  array a({3.f, 1.f, 2.f, -1.f, 5.f, 0.f}, {2, 3});
  expect_array(sort(a, -1), {2, 3}, {1, 2, 3, -1, 0, 5});
  expect_array(sort(a, 1), {2, 3}, {1, 2, 3, -1, 0, 5});
  expect_array(sort(a, 0), {2, 3}, {-1, 1, 0, 3, 5, 2});
  expect_array(sort(a, -2), {2, 3}, {-1, 1, 0, 3, 5, 2});
  EXPECT_EQ(argsort(a, -1).dtype(), int32);
  expect_array(argsort(a, -1), {2, 3}, {1, 2, 0, 0, 2, 1});
  expect_array(argsort(a, 0), {2, 3}, {1, 0, 1, 0, 1, 0});
}

TEST(Sort, ThreeDimMiddleAxis) {
  // a[i, j, k] with the middle axis reversed: sorting it gives back 12 i + 4 j + k.
  array a = slice(iota({2, 3, 4}), {0, 2, 0}, {2, -4, 4}, {1, -1, 1});
  expect_array(sort(a, 1), {2, 3, 4}, {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23});
  std::vector<double> idx;
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 3; ++j)
      for (int k = 0; k < 4; ++k) idx.push_back(2 - j);
  expect_array(argsort(a, 1), {2, 3, 4}, idx);
}

TEST(Sort, StableWithTies) {
  expect_array(argsort(array({2, 1, 2, 1, 0}), -1), {5}, {4, 1, 3, 0, 2});
  expect_array(argsort(array({1.f, 1.f, 1.f, 1.f}), -1), {4}, {0, 1, 2, 3});
  // -0.0 and 0.0 compare equal, so they keep their order.
  expect_array(argsort(array({0.f, -0.f, 0.f, -1.f}), -1), {4}, {3, 0, 1, 2});
  // Ties along axis 0 of a 2-D array.
  expect_array(argsort(array({5, 5, 1, 5, 5, 1}, {3, 2}), 0), {3, 2}, {1, 2, 0, 0, 2, 1});
}

TEST(Sort, NaNsGoLastInOrder) {
  array a({3.f, NAN, 1.f, NAN, 2.f, -INFINITY, INFINITY});
  expect_array(sort(a, -1), {7}, {-INFINITY, 1, 2, 3, INFINITY, NAN, NAN});
  expect_array(argsort(a, -1), {7}, {5, 2, 4, 0, 6, 1, 3});
  for (Dtype dt : {float16, bfloat16, float64}) {
    array h = astype(array({NAN, 2.f, -3.f}), dt);
    expect_array(sort(h, -1), {3}, {-3, 2, NAN});
    expect_array(argsort(h, -1), {3}, {2, 1, 0});
  }
  expect_array(sort(array({NAN, NAN}), -1), {2}, {NAN, NAN});
  expect_array(argsort(array({NAN, NAN}), -1), {2}, {0, 1});
}

TEST(Sort, EveryDtype) {
  for (Dtype dt : loom::testing::all_dtypes()) {
    array a = astype(array({3, 0, 2, 1, 0}), dt);
    array s = sort(a, -1);
    EXPECT_EQ(s.dtype(), dt);
    if (dt == bool_) {  // [1, 0, 1, 1, 0]
      expect_array(s, {5}, {0, 0, 1, 1, 1});
      expect_array(argsort(a, -1), {5}, {1, 4, 0, 2, 3});
    } else {
      expect_array(s, {5}, {0, 0, 1, 2, 3});
      expect_array(argsort(a, -1), {5}, {1, 4, 3, 2, 0});
    }
  }
  // Values beyond float precision sort exactly in int64, and uint8 is unsigned.
  array big({int64_t(1) << 53, (int64_t(1) << 53) + 1, int64_t(1) << 53, int64_t(-5)});
  EXPECT_EQ(sort(big, -1).to_vector<int64_t>(),
            (std::vector<int64_t>{-5, int64_t(1) << 53, int64_t(1) << 53, (int64_t(1) << 53) + 1}));
  expect_array(argsort(big, -1), {4}, {3, 0, 2, 1});
  expect_array(sort(array({200, 3, 255}, uint8), -1), {3}, {3, 200, 255});
}

TEST(Sort, NonContiguousInputs) {
  // Transposed: t = [[3, 1], [1, 2], [2, 0]]; sorted along axis 0 (a strided axis).
  array t = transpose(array({3.f, 1.f, 2.f, 1.f, 2.f, 0.f}, {2, 3}));
  expect_array(sort(t, 0), {3, 2}, {1, 0, 2, 1, 3, 2});
  expect_array(argsort(t, 0), {3, 2}, {1, 2, 2, 0, 0, 1});
  expect_array(sort(t, 1), {3, 2}, {1, 3, 1, 2, 0, 2});
  // A broadcast row repeated.
  expect_array(sort(broadcast_to(array({2, 0, 1}), {2, 3}), -1), {2, 3}, {0, 1, 2, 0, 1, 2});
  // Reversed with a negative stride.
  array r = slice(array({1.f, 2.f, 3.f, 4.f}), {3}, {-5}, {-1});
  expect_array(argsort(r, -1), {4}, {3, 2, 1, 0});
}

TEST(Sort, AlongOuterAxesInTiles) {
  // a[i, j] = (7 i + j) mod 5 for (5, 37): every column is a permutation of 0..4, so the sorted column
  // is 0..4 and value v sits at row 3 (v - j) mod 5. 37 columns make full and partial tiles.
  const int R = 5, C = 37;
  std::vector<float> v(R * C);
  for (int i = 0; i < R; ++i)
    for (int j = 0; j < C; ++j) v[i * C + j] = float((7 * i + j) % 5);
  array a(v, {R, C});
  std::vector<double> want_sort, want_arg, want_top;
  for (int i = 0; i < R; ++i)
    for (int j = 0; j < C; ++j) {
      want_sort.push_back(i);
      want_arg.push_back(((3 * (i - j)) % 5 + 5) % 5);
    }
  for (int i = 3; i < 5; ++i)
    for (int j = 0; j < C; ++j) want_top.push_back(i);
  expect_array(sort(a, 0), {R, C}, want_sort);
  expect_array(argsort(a, 0), {R, C}, want_arg);
  expect_array(topk(a, 2, 0), {2, C}, want_top);
  // 3-D, middle axis: a[p, i, j] = (3 i + j + p) mod 4, value v at i = 3 (v - j - p) mod 4.
  std::vector<int> w;
  for (int p = 0; p < 2; ++p)
    for (int i = 0; i < 4; ++i)
      for (int j = 0; j < 20; ++j) w.push_back((3 * i + j + p) % 4);
  std::vector<double> want3;
  for (int p = 0; p < 2; ++p)
    for (int vv = 0; vv < 4; ++vv)
      for (int j = 0; j < 20; ++j) want3.push_back(((3 * (vv - j - p)) % 4 + 4) % 4);
  expect_array(argsort(array(w, {2, 4, 20}), 1), {2, 4, 20}, want3);
  // NaNs along an outer axis: column j of (3, 18) holds [NaN, j, -j].
  std::vector<float> nv;
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 18; ++j) nv.push_back(i == 0 ? NAN : (i == 1 ? float(j) : -float(j)));
  std::vector<double> want_n;
  for (int j = 0; j < 18; ++j) want_n.push_back(-j);
  for (int j = 0; j < 18; ++j) want_n.push_back(j);
  for (int j = 0; j < 18; ++j) want_n.push_back(NAN);
  expect_array(sort(array(nv, {3, 18}), 0), {3, 18}, want_n);
}

TEST(Sort, EmptyAndLength1) {
  expect_array(sort(zeros({0}), -1), {0}, {});
  expect_array(sort(zeros({3, 0}), -1), {3, 0}, {});
  expect_array(argsort(zeros({0, 3}), 1), {0, 3}, {});
  expect_array(argsort(zeros({0, 3}), 0), {0, 3}, {});
  expect_array(sort(array({7.f}, {1, 1}), 0), {1, 1}, {7});
  expect_array(argsort(array({7.f, 8.f}, {2, 1}), 1), {2, 1}, {0, 0});
}

TEST(Sort, LargeManyRows) {
  const int R = 2000, C = 64;
  // Row r holds (r + 37 c) mod 64 + 64 r: a permutation of 64 r ... 64 r + 63.
  std::vector<float> v(R * C);
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c) v[r * C + c] = float((r + 37 * c) % C + C * r);
  array a(v, {R, C});
  auto s = sort(a, -1).to_vector<float>();
  auto ix = argsort(a, -1).to_vector<int>();
  for (int r = 0; r < R; ++r) {
    for (int c = 0; c < C; ++c) {
      ASSERT_EQ(s[r * C + c], float(C * r + c));
      ASSERT_EQ(v[r * C + ix[r * C + c]], float(C * r + c));
    }
  }
  // One long row.
  std::vector<int> w(100000);
  for (int i = 0; i < 100000; ++i) w[i] = (i * 7919) % 100000;
  auto sw = sort(array(w, {100000}), -1).to_vector<int>();
  for (int i = 0; i < 100000; ++i) ASSERT_EQ(sw[i], i);
}

TEST(Sort, BadInput) {
  EXPECT_THROW_MSG(sort(array(1.f), -1), std::out_of_range, "[sort] axis -1 is out of range for an array of 0 dimensions");
  EXPECT_THROW_MSG(sort(zeros({2, 3}), 2), std::out_of_range, "[sort] axis 2");
  EXPECT_THROW_MSG(argsort(zeros({2, 3}), -3), std::out_of_range, "[argsort] axis -3");
  EXPECT_THROW_MSG(argsort(array(1), -1), std::out_of_range, "[argsort]");
}

// ---- topk ----

TEST(TopK, LargestInAscendingOrder) {
  array a({5.f, 1.f, 4.f, 2.f, 3.f});
  expect_array(topk(a, 2, -1), {2}, {4, 5});
  expect_array(topk(a, 1, -1), {1}, {5});
  expect_array(topk(a, 5, -1), {5}, {1, 2, 3, 4, 5});
  expect_array(topk(a, 0, -1), {0}, {});
  array m({3.f, 9.f, 1.f, 7.f, 8.f, 2.f, 4.f, 6.f, 5.f}, {3, 3});
  expect_array(topk(m, 2, -1), {3, 2}, {3, 9, 7, 8, 5, 6});
  expect_array(topk(m, 1, 0), {1, 3}, {7, 9, 5});
  expect_array(topk(m, 2, -2), {2, 3}, {4, 8, 2, 7, 9, 5});
  // Ties and NaN (NaN counts as the largest).
  expect_array(topk(array({2, 7, 7, 1}), 3, -1), {3}, {2, 7, 7});
  expect_array(topk(array({1.f, NAN, 3.f, 2.f}), 2, -1), {2}, {3, NAN});
  expect_array(topk(array({NAN, 1.f, NAN}), 2, -1), {2}, {NAN, NAN});
}

TEST(TopK, DtypesAndNonContiguous) {
  for (Dtype dt : loom::testing::all_dtypes()) {
    array out = topk(astype(array({0, 3, 1, 2}), dt), 2, -1);
    EXPECT_EQ(out.dtype(), dt);
    expect_array(out, {2}, dt == bool_ ? std::vector<double>{1, 1} : std::vector<double>{2, 3});
  }
  array t = transpose(array({3.f, 1.f, 2.f, 1.f, 2.f, 0.f}, {2, 3}));  // [[3,1],[1,2],[2,0]]
  expect_array(topk(t, 2, 0), {2, 2}, {2, 1, 3, 2});
  expect_array(topk(zeros({0, 4}), 2, -1), {0, 2}, {});
  // Many rows (parallel): the top 3 of each row of (r + 37 c) mod 64 + 64 r are 64 r + 61 ... 63.
  const int R = 2000, C = 64;
  std::vector<float> v(R * C);
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c) v[r * C + c] = float((r + 37 * c) % C + C * r);
  auto got = topk(array(v, {R, C}), 3, -1).to_vector<float>();
  for (int r = 0; r < R; ++r)
    for (int j = 0; j < 3; ++j) ASSERT_EQ(got[r * 3 + j], float(C * r + 61 + j));
}

TEST(TopK, BadInput) {
  array a = zeros({2, 3});
  EXPECT_THROW_MSG(topk(a, 4, -1), std::invalid_argument, "[topk] k = 4 is not in [0, 3] for axis 1");
  EXPECT_THROW_MSG(topk(a, -1, -1), std::invalid_argument, "[topk] k = -1");
  EXPECT_THROW_MSG(topk(a, 3, 0), std::invalid_argument, "[topk] k = 3 is not in [0, 2] for axis 0");
  EXPECT_THROW_MSG(topk(a, 1, 2), std::out_of_range, "[topk] axis 2");
  EXPECT_THROW_MSG(topk(array(1.f), 1, -1), std::out_of_range, "[topk] axis -1");
}

// ---- partition / argpartition ----

namespace {
// Checks the partition property of `vals` (one row) around position k against the sorted row.
void expect_partitioned(std::vector<float> vals, int k, std::vector<float> sorted_row) {
  ASSERT_EQ(vals.size(), sorted_row.size());
  EXPECT_EQ(vals[k], sorted_row[k]);
  std::vector<float> lo(vals.begin(), vals.begin() + k), hi(vals.begin() + k + 1, vals.end());
  std::sort(lo.begin(), lo.end());
  std::sort(hi.begin(), hi.end());
  EXPECT_EQ(lo, std::vector<float>(sorted_row.begin(), sorted_row.begin() + k));
  EXPECT_EQ(hi, std::vector<float>(sorted_row.begin() + k + 1, sorted_row.end()));
}
}  // namespace

TEST(Partition, KthElementInSortedPlace) {
  array a({5.f, 1.f, 4.f, 2.f, 3.f, 0.f, 9.f});
  const std::vector<float> sorted{0, 1, 2, 3, 4, 5, 9};
  for (int k = -7; k < 7; ++k) {
    int kk = k < 0 ? k + 7 : k;
    expect_partitioned(partition(a, k, -1).to_vector<float>(), kk, sorted);
    array idx = argpartition(a, k, -1);
    EXPECT_EQ(idx.dtype(), int32);
    auto iv = idx.to_vector<int>();
    std::vector<float> via(7);
    auto av = a.to_vector<float>();
    for (int i = 0; i < 7; ++i) via[i] = av[iv[i]];
    expect_partitioned(via, kk, sorted);
    std::sort(iv.begin(), iv.end());
    EXPECT_EQ(iv, (std::vector<int>{0, 1, 2, 3, 4, 5, 6}));  // a permutation
  }
}

TEST(Partition, AlongAxisZeroWithNaNsAndInts) {
  // Columns of (3, 2): [4, 1, 2] and [NaN, 0, 5].
  array a({4.f, NAN, 1.f, 0.f, 2.f, 5.f}, {3, 2});
  auto p = partition(a, 1, 0).to_vector<float>();
  EXPECT_EQ(p[2], 2.f);   // column 0, position 1
  EXPECT_EQ(p[3], 5.f);   // column 1, position 1
  EXPECT_TRUE(std::isnan(p[5]));
  // kth = -1: the largest of each column (4 at row 0; NaN at row 0) comes last.
  auto iv = argpartition(a, -1, 0).to_vector<int>();
  EXPECT_EQ(iv[4], 0);
  EXPECT_EQ(iv[5], 0);
  EXPECT_EQ(std::min(iv[0], iv[2]), 1);
  EXPECT_EQ(std::max(iv[0], iv[2]), 2);
  EXPECT_EQ(std::min(iv[1], iv[3]), 1);
  EXPECT_EQ(std::max(iv[1], iv[3]), 2);
  // Integers, kth 0: the minimum first.
  expect_array(take(partition(array({7, 3, 9, 3}), 0, -1), 0), {}, {3});
}

TEST(Partition, BadInput) {
  EXPECT_THROW_MSG(partition(zeros({2, 3}), 3, -1), std::out_of_range, "[partition] kth 3 is out of range for axis 1 of size 3");
  EXPECT_THROW_MSG(argpartition(zeros({2, 3}), -4, -1), std::out_of_range, "[argpartition] kth -4");
  EXPECT_THROW_MSG(partition(zeros({2, 3}), 0, 2), std::out_of_range, "[partition] axis 2");
  EXPECT_THROW_MSG(argpartition(zeros({2, 0}), 0, -1), std::out_of_range, "of size 0");
}

// matmul (2-D, 1-D promotion, batches with broadcasting, transposed and strided operands, dtypes,
// empty dimensions), addmm, outer and inner, with hand-computed values and every bad input.
#include <array>
#include <cmath>
#include <limits>

#include "../test_utils.h"
#include "loom/core/primitive.h"

using namespace loom;
using loom::testing::expect_array;

namespace {

// A = [[1,2,3],[4,5,6]], B = [[7,8],[9,10],[11,12]], A @ B = [[58,64],[139,154]]
const std::vector<double> kA{1, 2, 3, 4, 5, 6};
const std::vector<double> kB{7, 8, 9, 10, 11, 12};
const std::vector<double> kAB{58, 64, 139, 154};

// Naive row-major reference product for the batched cases.
std::vector<double> ref_matmul(const std::vector<double>& a, const std::vector<double>& b, int M, int K, int N) {
  std::vector<double> c(M * N, 0.0);
  for (int i = 0; i < M; ++i)
    for (int j = 0; j < N; ++j)
      for (int k = 0; k < K; ++k) c[i * N + j] += a[i * K + k] * b[k * N + j];
  return c;
}

// Small integers, so every product is exact in float32.
std::vector<double> ints(int n, int seed) {
  std::vector<double> v(n);
  for (int i = 0; i < n; ++i) v[i] = ((i * 7 + seed * 3) % 11) - 5;
  return v;
}

std::vector<double> transposed(const std::vector<double>& v, int rows, int cols) {
  std::vector<double> t(v.size());
  for (int i = 0; i < rows; ++i)
    for (int j = 0; j < cols; ++j) t[j * rows + i] = v[i * cols + j];
  return t;
}

void* base_ptr(array a) {
  a.eval();
  return a.raw_data();
}

}  // namespace

TEST(Matmul, TwoD) {
  for (Dtype d : {float32, float64}) {
    SCOPED_TRACE(to_string(d));
    array a(kA, {2, 3}, d), b(kB, {3, 2}, d);
    array c = matmul(a, b);
    EXPECT_EQ(c.dtype(), d);
    expect_array(c, {2, 2}, kAB);
    expect_array(matmul(b, a), {3, 3}, {39, 54, 69, 49, 68, 87, 59, 82, 105});
  }
  // float64 keeps precision float32 would lose
  array x({1.0, 0x1p-40}, {1, 2}, float64), y({1.0, 1.0}, {2, 1});
  EXPECT_EQ(matmul(x, y).item<double>(), 1.0 + 0x1p-40);
  // mixed dtypes promote
  EXPECT_EQ(matmul(array(kA, {2, 3}, float16), array(kB, {3, 2}, float32)).dtype(), float32);
  EXPECT_EQ(matmul(array(kA, {2, 3}, float32), array(kB, {3, 2}, float64)).dtype(), float64);
  array ia(kA, {2, 3}, int32);
  EXPECT_EQ(matmul(ia, array(kB, {3, 2}, float32)).dtype(), float32);
  expect_array(matmul(ia, array(kB, {3, 2}, float32)), {2, 2}, kAB);
}

TEST(Matmul, OneDOperands) {
  array v({1.0f, 2.0f, 3.0f}), w({4.0f, 5.0f, 6.0f});
  array dot = matmul(v, w);
  EXPECT_EQ(dot.shape(), Shape{});
  EXPECT_EQ(dot.item<float>(), 32.0f);
  array a(kA, {2, 3}, float32);
  expect_array(matmul(array({1.0f, 2.0f}), a), {3}, {9, 12, 15});
  expect_array(matmul(a, array({1.0f, 0.0f, -1.0f})), {2}, {-2, -2});
  // 1-D against a batch: (3) @ (2,3,2) -> (2,2); (2,2,3) @ (3) -> (2,2)
  std::vector<double> b3 = kB;
  for (double x : kB) b3.push_back(-x);
  expect_array(matmul(array({1.0f, 0.0f, -1.0f}), array(b3, {2, 3, 2}, float32)), {2, 2}, {-4, -4, 4, 4});
  std::vector<double> a3 = kA;
  for (double x : kA) a3.push_back(2 * x);
  expect_array(matmul(array(a3, {2, 2, 3}, float32), array({1.0f, 1.0f, 1.0f})), {2, 2}, {6, 15, 12, 30});
  // strided 1-D operands
  array s = slice(array({1.0f, 9.0f, 2.0f, 9.0f, 3.0f}), {0}, {5}, {2});
  EXPECT_EQ(matmul(s, w).item<float>(), 32.0f);
  EXPECT_EQ(matmul(slice(w, {2}, {-100}, {-1}), v).item<float>(), 28.0f);  // [6,5,4].[1,2,3]
}

TEST(Matmul, BatchedWithBroadcasting) {
  const int M = 2, K = 3, N = 4;
  // a: (2,1,M,K), b: (3,K,N) -> (2,3,M,N)
  std::vector<double> av = ints(2 * M * K, 1), bv = ints(3 * K * N, 2);
  array c = matmul(array(av, {2, 1, M, K}, float32), array(bv, {3, K, N}, float32));
  ASSERT_EQ(c.shape(), (Shape{2, 3, M, N}));
  std::vector<double> want;
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 3; ++j) {
      std::vector<double> ai(av.begin() + i * M * K, av.begin() + (i + 1) * M * K);
      std::vector<double> bj(bv.begin() + j * K * N, bv.begin() + (j + 1) * K * N);
      auto r = ref_matmul(ai, bj, M, K, N);
      want.insert(want.end(), r.begin(), r.end());
    }
  expect_array(c, {2, 3, M, N}, want);
  // a batched a against one shared b (one stacked GEMM), and a transposed batched a (per batch)
  array shared_b(bv.data(), {K, N}, float32);
  std::vector<double> b0(bv.begin(), bv.begin() + K * N);
  std::vector<double> stacked;
  for (int i = 0; i < 2; ++i) {
    std::vector<double> ai(av.begin() + i * M * K, av.begin() + (i + 1) * M * K);
    auto r = ref_matmul(ai, b0, M, K, N);
    stacked.insert(stacked.end(), r.begin(), r.end());
  }
  expect_array(matmul(array(av, {2, M, K}, float32), shared_b), {2, M, N}, stacked);
  std::vector<double> avt;
  for (int i = 0; i < 2; ++i) {
    auto t = transposed(std::vector<double>(av.begin() + i * M * K, av.begin() + (i + 1) * M * K), M, K);
    avt.insert(avt.end(), t.begin(), t.end());
  }
  array at = swapaxes(array(avt, {2, K, M}, float32), 1, 2);  // (2,M,K) view
  expect_array(matmul(at, shared_b), {2, M, N}, stacked);
  // a 2-D a against a batched b broadcasts a
  std::vector<double> a0(av.begin(), av.begin() + M * K), bcast;
  for (int j = 0; j < 3; ++j) {
    auto r = ref_matmul(a0, std::vector<double>(bv.begin() + j * K * N, bv.begin() + (j + 1) * K * N), M, K, N);
    bcast.insert(bcast.end(), r.begin(), r.end());
  }
  expect_array(matmul(array(a0, {M, K}, float32), array(bv, {3, K, N}, float32)), {3, M, N}, bcast);
  // explicit batch broadcast of size-1 dims on both sides: (1,2,M,K) @ (3,1,K,N) -> (3,2,M,N)
  array c2 = matmul(array(av, {1, 2, M, K}, float64), array(std::vector<double>(bv.begin(), bv.begin() + 3 * K * N),
                                                            {3, 1, K, N}, float64));
  EXPECT_EQ(c2.shape(), (Shape{3, 2, M, N}));
  std::vector<double> want2;
  for (int j = 0; j < 3; ++j)
    for (int i = 0; i < 2; ++i) {
      auto r = ref_matmul(std::vector<double>(av.begin() + i * M * K, av.begin() + (i + 1) * M * K),
                          std::vector<double>(bv.begin() + j * K * N, bv.begin() + (j + 1) * K * N), M, K, N);
      want2.insert(want2.end(), r.begin(), r.end());
    }
  expect_array(c2, {3, 2, M, N}, want2);
}

TEST(Matmul, TransposedOperandsAreViews) {
  // stored transposed, used through transpose views (BLAS transpose flags, no copy needed)
  array at_store(transposed(kA, 2, 3), {3, 2});
  array bt_store(transposed(kB, 3, 2), {2, 3});
  array a = transpose(at_store), b = transpose(bt_store);
  EXPECT_EQ(base_ptr(a), base_ptr(at_store));
  EXPECT_EQ(base_ptr(b), base_ptr(bt_store));
  expect_array(matmul(a, array(kB, {3, 2}, float32)), {2, 2}, kAB);
  expect_array(matmul(array(kA, {2, 3}, float32), b), {2, 2}, kAB);
  expect_array(matmul(a, b), {2, 2}, kAB);
  // (A B)^T = B^T A^T from the stored transposes
  expect_array(matmul(bt_store, at_store), {2, 2}, {58, 139, 64, 154});
  // float64 and float16 with transposes
  expect_array(matmul(transpose(array(transposed(kA, 2, 3), {3, 2}, float64)), array(kB, {3, 2}, float64)), {2, 2},
               kAB);
  expect_array(matmul(transpose(array(transposed(kA, 2, 3), {3, 2}, float16)), array(kB, {3, 2}, float16)), {2, 2},
               kAB);
}

TEST(Matmul, NonContiguousOperands) {
  // every other column of a (2,6) buffer: inner stride 2 needs a copy
  std::vector<double> wide;
  for (double x : kA) {
    wide.push_back(x);
    wide.push_back(-100);
  }
  array a = slice(array(wide, {2, 6}, float32), {0, 0}, {2, 6}, {1, 2});
  ASSERT_EQ(a.shape(), (Shape{2, 3}));
  expect_array(matmul(a, array(kB, {3, 2}, float32)), {2, 2}, kAB);
  // every other row: a leading dimension larger than the row (no copy needed)
  std::vector<double> tall;
  for (int i = 0; i < 3; ++i) {
    tall.push_back(kB[2 * i]);
    tall.push_back(kB[2 * i + 1]);
    tall.push_back(-7);
    tall.push_back(-7);
  }
  array b = slice(array(tall, {6, 2}, float32), {0, 0}, {6, 2}, {2, 1});
  expect_array(matmul(array(kA, {2, 3}, float32), b), {2, 2}, kAB);
  // a column block of a wider matrix
  array big(std::vector<double>{1, 2, 3, 0, 4, 5, 6, 0}, {2, 4});
  expect_array(matmul(slice(big, {0, 0}, {2, 3}), array(kB, {3, 2}, float32)), {2, 2}, kAB);
  // negative strides on both operands
  array ar = slice(array(std::vector<double>{6, 5, 4, 3, 2, 1}, {2, 3}), {1, 2}, {-3, -4}, {-1, -1});
  array br = slice(array(std::vector<double>{12, 11, 10, 9, 8, 7}, {3, 2}), {2, 1}, {-4, -3}, {-1, -1});
  expect_array(matmul(ar, br), {2, 2}, kAB);
  // broadcast operands (stride 0 inside the matrix)
  array ones_row = broadcast_to(array({1.0f, 1.0f, 1.0f}, {1, 3}), {2, 3});
  expect_array(matmul(ones_row, array(kB, {3, 2}, float32)), {2, 2}, {27, 30, 27, 30});
  array col = broadcast_to(array({1.0f, 2.0f, 3.0f}, {3, 1}), {3, 2});
  expect_array(matmul(array(kA, {2, 3}, float32), col), {2, 2}, {14, 14, 32, 32});
  expect_array(matmul(broadcast_to(array(2.0f), {1, 3}), broadcast_to(array(3.0f), {3, 1})), {1, 1}, {18});
  // a batch dimension that is sliced with a step
  std::vector<double> a4;
  for (int i = 0; i < 4; ++i)
    for (double x : kA) a4.push_back(x * (i + 1));
  array sa = slice(array(a4, {4, 2, 3}, float32), {0, 0, 0}, {4, 2, 3}, {2, 1, 1});  // batches 0 and 2
  std::vector<double> want = kAB;
  for (double x : kAB) want.push_back(3 * x);
  expect_array(matmul(sa, array(kB, {3, 2}, float32)), {2, 2, 2}, want);
}

TEST(Matmul, HalfTypesComputeInFloat32) {
  // 2048 + 1 + 1: a float16 accumulator would stay at 2048
  array h({2048.0f, 1.0f, 1.0f}, {1, 3}, float16);
  array r = matmul(h, ones({3, 1}, float16));
  EXPECT_EQ(r.dtype(), float16);
  // One Matmul node on the half operands: its kernel converts them to float32 around the GEMM (no
  // astype nodes, and the graph keeps the operands in half precision for the backward pass).
  EXPECT_STREQ(r.primitive().name(), "Matmul");
  EXPECT_EQ(r.inputs()[0].dtype(), float16);
  EXPECT_EQ(r.inputs()[1].dtype(), float16);
  EXPECT_EQ(r.item<float>(), 2050.0f);
  EXPECT_EQ(addmm(ones({1, 1}, float16), h, ones({3, 1}, float16), 1.0f, 2.0f).item<float>(), 2052.0f);
  // 256 + 1 + 1 in bfloat16
  array bf({256.0f, 1.0f, 1.0f}, {1, 3}, bfloat16);
  array rb = matmul(bf, ones({3, 1}, bfloat16));
  EXPECT_EQ(rb.dtype(), bfloat16);
  EXPECT_EQ(rb.item<float>(), 258.0f);
  // the result is rounded to the half type once
  array x({1.0f, 0x1p-11f}, {1, 2}, float16);  // 1 + 2^-11 rounds (ties to even) to 1
  EXPECT_EQ(matmul(x, ones({2, 1}, float16)).item<float>(), 1.0f);
  // batched, 1-D and transposed half operands
  expect_array(matmul(array(kA, {2, 3}, float16), array(kB, {3, 2}, float16)), {2, 2}, kAB);
  expect_array(matmul(array({1.0f, 2.0f, 3.0f}, bfloat16), array({4.0f, 5.0f, 6.0f}, bfloat16)), {}, {32});
  expect_array(matmul(transpose(array(kB, {3, 2}, float16)), transpose(array(kA, {2, 3}, float16))), {2, 2},
               {58, 139, 64, 154});
  EXPECT_EQ(matmul(array(kA, {2, 3}, float16), array(kB, {3, 2}, bfloat16)).dtype(), float32);
}

TEST(Matmul, StackAgainstOneMatrixIsOneProduct) {
  // (2,2,3) @ (3,2): the stack's rows form one (4,3) x (3,2) product, and b's gradient is one
  // product over all rows (a^T g), not a product per matrix summed over the stack.
  array a = reshape(arange(12.0f), {2, 2, 3}), b(kB, {3, 2}, float32);
  array c = matmul(a, b);
  expect_array(c, {2, 2, 2}, {31, 34, 112, 124, 193, 214, 274, 304});
  auto db = grad([&](const array& w) { return sum(matmul(a, w)); })(b);
  EXPECT_EQ(std::string(db.primitive().name()), "Matmul");
  expect_array(db, {3, 2}, {18, 18, 22, 22, 26, 26});  // column sums of a's rows
  auto dbias = grad([&](const array& bias) { return sum(addmm(bias, a, b)); })(array({0.0f, 0.0f}));
  expect_array(dbias, {2}, {4, 4});
  expect_array(addmm(array({1.0f, -1.0f}, {1, 1, 2}), a, b), {2, 2, 2}, {32, 33, 113, 123, 194, 213, 275, 303});
  // a c that differs between rows of a matrix cannot fold, and still adds per row
  expect_array(addmm(array({1.0f, -1.0f, 2.0f, -2.0f}, {2, 2}), a, b), {2, 2, 2},
               {32, 33, 114, 122, 194, 213, 276, 302});
}

TEST(Matmul, LargeProductsSplitAcrossThreads) {
  // Products above the split threshold with a dimension below 512 run as one BLAS call per thread on
  // a share of C's rows (M >= N) or columns (M < N); every transpose layout, float32 and float64,
  // plain and addmm, against the exact product of small integers, at 2 threads and at 1.
  const int saved = get_num_threads();
  for (int threads : {2, 1}) {
    set_num_threads(threads);
    for (auto [M, N, K] : {std::array<int, 3>{301, 40, 97}, std::array<int, 3>{40, 301, 97}}) {
      const auto a = ints(M * K, 1), b = ints(K * N, 2), c = ints(N, 3);
      auto ab = ref_matmul(a, b, M, K, N);
      std::vector<double> abc(ab);
      for (int i = 0; i < M; ++i)
        for (int j = 0; j < N; ++j) abc[i * N + j] += c[j];
      for (Dtype d : {float32, float64}) {
        for (bool ta : {false, true}) {
          for (bool tb : {false, true}) {
            // A transposed operand is a view of its row-major transpose.
            array A = ta ? transpose(array(transposed(a, M, K), {K, M}, d)) : array(a, {M, K}, d);
            array B = tb ? transpose(array(transposed(b, K, N), {N, K}, d)) : array(b, {K, N}, d);
            expect_array(matmul(A, B), {M, N}, ab);
            expect_array(addmm(array(c, {N}, d), A, B), {M, N}, abc);
          }
        }
      }
    }
  }
  set_num_threads(saved);
}

TEST(Matmul, EmptyDimensions) {
  // K = 0: a sum of nothing is zero
  expect_array(matmul(zeros({2, 0}), zeros({0, 3})), {2, 3}, std::vector<double>(6, 0.0));
  expect_array(matmul(zeros({2, 2, 0}, float64), zeros({0, 1}, float64)), {2, 2, 1}, {0, 0, 0, 0});
  expect_array(matmul(zeros({0}), zeros({0})), {}, {0});
  expect_array(matmul(zeros({2, 0}, float16), zeros({0, 2}, float16)), {2, 2}, {0, 0, 0, 0});
  // M = 0, N = 0, batch = 0
  EXPECT_EQ(matmul(zeros({0, 3}), zeros({3, 2})).shape(), (Shape{0, 2}));
  EXPECT_EQ(matmul(zeros({2, 3}), zeros({3, 0})).shape(), (Shape{2, 0}));
  EXPECT_EQ(matmul(zeros({0, 2, 3}), zeros({3, 2})).shape(), (Shape{0, 2, 2}));
  expect_array(matmul(zeros({0, 3}), zeros({3, 2})), {0, 2}, {});
}

TEST(Matmul, Errors) {
  array a = zeros({2, 3});
  EXPECT_THROW_MSG(matmul(array(1.0f), a), std::invalid_argument, "[matmul] needs arrays of at least 1 dimension");
  EXPECT_THROW_MSG(matmul(a, array(1.0f)), std::invalid_argument, "[matmul]");
  EXPECT_THROW_MSG(matmul(a, zeros({2, 2})), std::invalid_argument, "[matmul] inner dimensions differ: shapes (2,3) and (2,2)");
  EXPECT_THROW_MSG(matmul(zeros({2}), zeros({3})), std::invalid_argument, "[matmul] inner dimensions differ");
  EXPECT_THROW_MSG(matmul(a, zeros({2})), std::invalid_argument, "[matmul]");
  EXPECT_THROW_MSG(matmul(zeros({3}), a), std::invalid_argument, "[matmul] inner dimensions differ: shapes (3) and (2,3)");
  EXPECT_THROW_MSG(matmul(zeros({2, 2, 3}), zeros({3, 3, 2})), std::invalid_argument, "[matmul] batch dimensions");
  EXPECT_THROW_MSG(matmul(zeros({2, 2, 3}), zeros({2, 2})), std::invalid_argument,
                   "[matmul] inner dimensions differ: shapes (2,2,3) and (2,2)");
  EXPECT_THROW_MSG(matmul(zeros({2, 3}, int32), zeros({3, 2}, int32)), std::invalid_argument,
                   "[matmul] needs floating-point or complex arrays; got int32 and int32");
  EXPECT_THROW_MSG(matmul(zeros({2, 3}, uint8), zeros({3, 2}, int64)), std::invalid_argument, "[matmul]");
  EXPECT_THROW_MSG(matmul(zeros({2, 3}, bool_), zeros({3, 2}, bool_)), std::invalid_argument, "bool");
}

TEST(Addmm, Values) {
  array a(kA, {2, 3}, float32), b(kB, {3, 2}, float32);
  array c({1.0f, 1.0f, 1.0f, 1.0f}, {2, 2});
  expect_array(addmm(c, a, b), {2, 2}, {59, 65, 140, 155});
  expect_array(addmm(c, a, b, 2.0f, 0.5f), {2, 2}, {116.5, 128.5, 278.5, 308.5});
  // c broadcasts
  expect_array(addmm(array({1.0f, 2.0f}), a, b), {2, 2}, {59, 66, 140, 156});
  expect_array(addmm(array(10.0f), a, b, 1.0f, -1.0f), {2, 2}, {48, 54, 129, 144});
  // beta = 0 ignores c, even NaN
  expect_array(addmm(full({2, 2}, std::nanf("")), a, b, 1.0f, 0.0f), {2, 2}, kAB);
  // dtypes: half stays half; an integer c scaled by a fractional beta
  array h = addmm(array({1.0f, 1.0f}, float16), array(kA, {2, 3}, float16), array(kB, {3, 2}, float16), 0.5f, 2.0f);
  EXPECT_EQ(h.dtype(), float16);
  expect_array(h, {2, 2}, {31, 34, 71.5, 79});
  expect_array(addmm(array({2, 4}), a, b, 1.0f, 0.5f), {2, 2}, {59, 66, 140, 156});
  // transposed operands and batches
  expect_array(addmm(c, transpose(b), transpose(a)), {2, 2}, {59, 140, 65, 155});
  // Batches against a shared matrix, c broadcast over them; the GEMM accumulates onto c.
  array a3 = reshape(arange(12.0f), {2, 2, 3});
  expect_array(addmm(array({1.0f, -1.0f}), a3, b, 2.0f, 3.0f), {2, 2, 2},
               {65, 65, 227, 245, 389, 425, 551, 605});  // 2 (a3 b) + 3 (1, -1)
  // An evaluated c, a c computed in the same graph (its buffer is reused), and K = 0.
  array c2 = full({2, 2}, 2.0f);
  eval(c2);
  expect_array(addmm(c2, a, b, 1.0f, 0.5f), {2, 2}, {59, 65, 140, 155});
  expect_array(c2, {2, 2}, {2, 2, 2, 2});  // untouched
  expect_array(addmm(c2 * 1.0f, a, b, 1.0f, 0.5f), {2, 2}, {59, 65, 140, 155});
  expect_array(addmm(c2, zeros({2, 0}), zeros({0, 2}), 1.0f, 0.5f), {2, 2}, {1, 1, 1, 1});
  EXPECT_THROW_MSG(addmm(zeros({3}), a, b), std::invalid_argument, "[addmm]");
  EXPECT_THROW_MSG(addmm(zeros({3}), a, b, 1.0f, 0.0f), std::invalid_argument, "[addmm]");
  EXPECT_THROW_MSG(addmm(c, a, a), std::invalid_argument, "[matmul]");
}

TEST(Outer, Values) {
  array o = outer(array({1.0f, 2.0f}), array({3.0f, 4.0f, 5.0f}));
  expect_array(o, {2, 3}, {3, 4, 5, 6, 8, 10});
  // inputs are flattened
  expect_array(outer(array({1.0f, 2.0f, 3.0f, 4.0f}, {2, 2}), array({1.0f, -1.0f})), {4, 2},
               {1, -1, 2, -2, 3, -3, 4, -4});
  expect_array(outer(transpose(array({1.0f, 2.0f, 3.0f, 4.0f}, {2, 2})), array({1.0f})), {4, 1}, {1, 3, 2, 4});
  EXPECT_EQ(outer(array({1, 2}), array({3})).dtype(), int32);
  EXPECT_EQ(outer(array({1, 2}), array({3})).to_vector<int>(), (std::vector<int>{3, 6}));
  EXPECT_EQ(outer(zeros({0}), zeros({3})).shape(), (Shape{0, 3}));
  expect_array(outer(array(2.0f), array({1.0f, 2.0f})), {1, 2}, {2, 4});
}

TEST(Inner, Values) {
  array v({1.0f, 2.0f, 3.0f}), w({4.0f, 5.0f, 6.0f});
  array d = inner(v, w);
  EXPECT_EQ(d.shape(), Shape{});
  EXPECT_EQ(d.item<float>(), 32.0f);
  array a(kA, {2, 3}, float32);
  array c({1.0f, 0.0f, 0.0f, 0.0f, 1.0f, 1.0f}, {2, 3});
  expect_array(inner(a, c), {2, 2}, {1, 5, 4, 11});
  expect_array(inner(array({1.0f, 0.0f, -1.0f}), a), {2}, {-2, -2});
  expect_array(inner(a, array({1.0f, 0.0f, -1.0f})), {2}, {-2, -2});
  expect_array(inner(reshape(a, {2, 1, 3}), v), {2, 1}, {14, 32});
  expect_array(inner(transpose(array(transposed(kA, 2, 3), {3, 2})), c), {2, 2}, {1, 5, 4, 11});
  // a scalar operand multiplies
  expect_array(inner(array(2.0f), a), {2, 3}, {2, 4, 6, 8, 10, 12});
  // empty last dimension: sums of nothing
  expect_array(inner(zeros({0}), zeros({0})), {}, {0});
  expect_array(inner(zeros({2, 0}), zeros({3, 0})), {2, 3}, std::vector<double>(6, 0.0));
  EXPECT_THROW_MSG(inner(a, zeros({2})), std::invalid_argument, "[inner] last dimensions differ");
}

// Large inputs (more than kParallelThreshold = 32768 elements) take the OpenMP paths. Each case is
// built and evaluated with 1 and with 2 threads; the results must be identical and match values
// computed by plain loops.
#include <cmath>
#include <functional>

#include "../test_utils.h"

using namespace loom;
using loom::testing::expect_array;

namespace {

// Builds a fresh graph with `threads` threads and returns its values.
std::vector<double> run_with(int threads, const std::function<array()>& build) {
  set_num_threads(threads);
  array r = build();
  r.eval();
  return r.to_vector<double>();
}

class Parallel : public ::testing::Test {
 protected:
  void SetUp() override { saved_ = get_num_threads(); }
  void TearDown() override { set_num_threads(saved_); }

  // Checks that 1 and 2 threads agree exactly and match `want` (within `tol`).
  void check(const char* what, const std::function<array()>& build, const std::vector<double>& want,
             double tol = 0.0) {
    SCOPED_TRACE(what);
    auto one = run_with(1, build);
    auto two = run_with(2, build);
    ASSERT_EQ(one.size(), want.size());
    ASSERT_EQ(two.size(), want.size());
    size_t mismatches = 0, wrong = 0;
    for (size_t i = 0; i < want.size(); ++i) {
      bool same = one[i] == two[i] || (std::isnan(one[i]) && std::isnan(two[i]));
      if (!same && mismatches++ < 5) ADD_FAILURE() << "1 vs 2 threads differ at " << i << ": " << one[i] << " vs " << two[i];
      bool ok = std::isnan(want[i]) ? std::isnan(one[i]) : std::abs(one[i] - want[i]) <= tol * (1 + std::abs(want[i]));
      if (!ok && wrong++ < 5) ADD_FAILURE() << "at " << i << ": got " << one[i] << ", want " << want[i];
    }
  }

  int saved_ = 1;
};

constexpr int kN = 100003;  // > 32768, prime

// x[i] = (i % 7) - 3
double xval(int64_t i) { return static_cast<double>(i % 7) - 3.0; }
array xarr(int n = kN, Dtype d = float32) {
  std::vector<double> v(n);
  for (int i = 0; i < n; ++i) v[i] = xval(i);
  return array(v, {n}, d);
}

}  // namespace

TEST_F(Parallel, ElementwiseContiguousAndStrided) {
  const array x = xarr();
  std::vector<double> want(kN);
  for (int i = 0; i < kN; ++i) want[i] = std::exp(xval(i));
  check("exp contiguous", [&] { return exp(x); }, want, 1e-6);
  for (int i = 0; i < kN; ++i) want[i] = xval(i) * 2 + 1;
  check("scalar broadcast", [&] { return x * 2.0f + 1.0f; }, want);
  for (int i = 0; i < kN; ++i) want[i] = xval(i) + xval(kN - 1 - i);
  check("reversed + contiguous", [&] { return x + slice(x, {-1}, {-kN - 1}, {-1}); }, want);
  // one long strided row (split across threads)
  const array x2 = xarr(2 * kN);
  for (int i = 0; i < kN; ++i) want[i] = -xval(2 * i);
  check("negative of a stride-2 view", [&] { return negative(slice(x2, {0}, {2 * kN}, {2})); }, want);
  for (int i = 0; i < kN; ++i) want[i] = std::abs(xval(2 * i)) > 1 ? 1.0 : 0.0;
  check("predicate on a stride-2 view", [&] { return greater(abs(slice(x2, {0}, {2 * kN}, {2})), array(1.0f)); }, want);
}

TEST_F(Parallel, ElementwiseTransposedAndBroadcast) {
  const int R = 257, C = 263;  // 67591 elements
  const array m = reshape(xarr(R * C), {R, C});
  std::vector<double> want(R * C);
  // transposed (C,R): t[j][i] = m[i][j]
  for (int j = 0; j < C; ++j)
    for (int i = 0; i < R; ++i) want[j * R + i] = xval(int64_t(i) * C + j) * xval(int64_t(i) * C + j);
  check("square of a transpose", [&] { return square(transpose(m)); }, want);
  for (int j = 0; j < C; ++j)
    for (int i = 0; i < R; ++i) want[j * R + i] = xval(int64_t(i) * C + j) - xval(int64_t(j) * R + i);
  check("transpose - contiguous", [&] { return transpose(m) - reshape(m, {C, R}); }, want);
  // row broadcast against a matrix
  std::vector<double> row(C);
  for (int j = 0; j < C; ++j) row[j] = j;
  const array r(row, {C}, float32);
  for (int i = 0; i < R; ++i)
    for (int j = 0; j < C; ++j) want[i * C + j] = std::max(xval(int64_t(i) * C + j), double(j) - 100);
  check("maximum with a broadcast row", [&] { return maximum(m, r - 100.0f); }, want);
  for (int i = 0; i < R; ++i)
    for (int j = 0; j < C; ++j) want[i * C + j] = xval(int64_t(i) * C + j) > 0 ? j : -1.0;
  check("where", [&] { return where(m > 0.0f, broadcast_to(r, {R, C}), array(-1.0f)); }, want);
  for (int i = 0; i < R; ++i)
    for (int j = 0; j < C; ++j) want[i * C + j] = std::trunc(xval(int64_t(i) * C + j) / 2.0);
  check("astype of a quotient", [&] { return astype(m / 2.0f, int32); }, want);
  for (int i = 0; i < R * C; ++i) want[i] = 0.5;
  check("full", [&] { return full({R, C}, array(0.5, float16)); }, want);
}

TEST_F(Parallel, Reductions) {
  const int R = 40000, C = 3;
  const array m = reshape(xarr(R * C), {R, C});  // m[i][j] = xval(3i + j)
  std::vector<double> rows(R), cols(C, 0.0), rmax(R), arg(R);
  for (int i = 0; i < R; ++i) {
    rows[i] = 0;
    rmax[i] = -1e9;
    for (int j = 0; j < C; ++j) {
      double v = xval(int64_t(i) * C + j);
      rows[i] += v;
      cols[j] += v;
      if (v > rmax[i]) {
        rmax[i] = v;
        arg[i] = j;
      }
    }
  }
  check("sum over the contiguous axis", [&] { return sum(m, 1); }, rows);
  check("sum over the leading axis", [&] { return sum(transpose(m), 0); }, rows);
  check("max over the contiguous axis", [&] { return max(m, -1); }, rmax);
  check("argmax", [&] { return argmax(m, 1); }, arg);
  check("mean of a transpose", [&] { return mean(transpose(m), 0, true); }, [&] {
    std::vector<double> v(rows);
    for (auto& x : v) x /= 3;
    return v;
  }(), 1e-6);
  check("column sums", [&] { return sum(m, 0); }, cols);
  // cumsum along the short axis, many rows
  std::vector<double> cs(R * C);
  for (int i = 0; i < R; ++i) {
    double acc = 0;
    for (int j = 0; j < C; ++j) cs[i * C + j] = (acc += xval(int64_t(i) * C + j));
  }
  check("cumsum", [&] { return cumsum(m, 1); }, cs);
  // a (3, 40000) matrix reduced over its leading axis: the row-accumulating path
  const array w = reshape(xarr(C * R), {C, R});
  std::vector<double> wsum(R, 0.0);
  for (int j = 0; j < C; ++j)
    for (int i = 0; i < R; ++i) wsum[i] += xval(int64_t(j) * R + i);
  check("sum over a short leading axis", [&] { return sum(w, 0); }, wsum);
  // a full reduction and NaN propagation in large arrays
  double total = 0;
  for (int i = 0; i < kN; ++i) total += xval(i);
  check("full sum", [&] { return sum(xarr(), true); }, {total});
  // Long rows split into chunks reduced in parallel (the result is independent of thread count).
  const int L = 1 << 20;
  check("full sum of 2^20 in float64", [] { return sum(arange(0.0, double(1 << 20), 1.0, float64)); },
        {double(L) * (L - 1) / 2});
  check("two long rows", [] { return sum(reshape(arange(0.0, double(1 << 20), 1.0, float64), {2, 1 << 19}), 1); },
        {double(L / 2) * (L / 2 - 1) / 2, double(L / 2) * (L / 2 - 1) / 2 + double(L / 2) * (L / 2)});
  check("max of a long row", [] { return max(arange(0.0, 300000.0, 1.0, float32)); }, {299999.0});
  check("float32 mean of ones", [] { return mean(ones({3 << 18})); }, {1.0});
  check("max with one NaN", [&] { return max(slice_update(m, array(std::nanf("")), {31234, 1}, {31235, 2}), 1); },
        [&] {
          std::vector<double> v(rmax);
          v[31234] = std::nan("");
          return v;
        }());
}

TEST_F(Parallel, CopiesAndShapes) {
  const int R = 300, C = 200;  // 60000
  const array m = reshape(xarr(R * C), {R, C});
  std::vector<double> want(R * C);
  for (int j = 0; j < C; ++j)
    for (int i = 0; i < R; ++i) want[j * R + i] = xval(int64_t(i) * C + j);
  check("reshape of a transpose (strided copy)", [&] { return reshape(transpose(m), {-1}); }, want);
  std::vector<double> cat;
  for (int i = 0; i < R * C; ++i) cat.push_back(xval(i));
  for (int i = 0; i < R * C; ++i) cat.push_back(xval(i) * 2);
  check("concatenate", [&] { return concatenate({m, m * 2.0f}); }, cat);
  std::vector<double> padded((R + 2) * (C + 2), 9.0);
  for (int i = 0; i < R; ++i)
    for (int j = 0; j < C; ++j) padded[(i + 1) * (C + 2) + j + 1] = xval(int64_t(i) * C + j);
  check("pad", [&] { return pad(m, 1, array(9.0f)); }, padded);
  std::vector<double> upd(R * C);
  for (int i = 0; i < R; ++i)
    for (int j = 0; j < C; ++j) upd[i * C + j] = (j % 2 == 0) ? 5.0 : xval(int64_t(i) * C + j);
  check("strided slice_update", [&] { return slice_update(m, array(5.0f), {0, 0}, {R, C}, {1, 2}); }, upd);
  std::vector<double> tiled;
  for (int rep = 0; rep < 2; ++rep)
    for (int i = 0; i < R * C; ++i) tiled.push_back(xval(i));
  check("tile", [&] { return tile(m, {2, 1}); }, tiled);
}

TEST_F(Parallel, Matmul) {
  const int M = 96, K = 80, N = 72;
  std::vector<double> a(M * K), b(K * N);
  for (int i = 0; i < M * K; ++i) a[i] = (i * 5 % 9) - 4;
  for (int i = 0; i < K * N; ++i) b[i] = (i * 3 % 7) - 3;
  std::vector<double> want(M * N, 0.0);
  for (int i = 0; i < M; ++i)
    for (int j = 0; j < N; ++j)
      for (int k = 0; k < K; ++k) want[i * N + j] += a[i * K + k] * b[k * N + j];
  const array A(a, {M, K}, float32), B(b, {K, N}, float32);
  check("sgemm", [&] { return matmul(A, B); }, want);
  const array Ad(a, {M, K}, float64), Bd(b, {K, N}, float64);
  check("dgemm with a transposed view", [&] { return matmul(transpose(transpose(Ad)), Bd); }, want);
}

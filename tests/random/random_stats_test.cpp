// Statistical sanity of every generator, and identical results for every thread count. Every test
// uses a fixed key, so it is deterministic; bounds are about 5 standard errors of the statistic, so
// a correct generator passes for any key and a wrong mean, spread or range fails.
#include <algorithm>
#include <cstring>
#include <map>
#include <numeric>
#include <set>

#include "../test_utils.h"
#include "loom/ops/random.h"

using namespace loom;

namespace {

struct Moments {
  double mean, var;
};
Moments moments(const std::vector<double>& x) {
  double m = 0;
  for (double v : x) m += v;
  m /= x.size();
  double s = 0;
  for (double v : x) s += (v - m) * (v - m);
  return {m, s / x.size()};
}

std::vector<double> vals(array a) { return a.to_vector<double>(); }

const double kPi = 3.141592653589793;
double phi(double x) { return std::exp(-0.5 * x * x) / std::sqrt(2 * kPi); }
// P(X > x) for a standard normal, accurate in the tails.
double upper_tail(double x) { return 0.5 * std::erfc(x / std::sqrt(2.0)); }

// Expect |got - want| <= 5 standard errors.
void expect_within(double got, double want, double stderr_, const char* what) {
  EXPECT_NEAR(got, want, 5 * stderr_) << what;
}

template <typename T>
bool stats_same_bits(array a, array b) {
  a.eval();
  b.eval();
  if (a.nbytes() != b.nbytes() || a.dtype() != b.dtype()) return false;
  return std::memcmp(a.raw_data(), b.raw_data(), a.nbytes()) == 0;
}

}  // namespace

TEST(RandomStats, UniformRangeMomentsHistogram) {
  const int n = 1000000;
  for (Dtype dt : {float32, float64}) {
    auto x = vals(random::uniform({n}, dt, random::key(1)));
    EXPECT_GE(*std::min_element(x.begin(), x.end()), 0.0);
    EXPECT_LT(*std::max_element(x.begin(), x.end()), 1.0);
    auto m = moments(x);
    expect_within(m.mean, 0.5, std::sqrt(1.0 / 12 / n), "uniform mean");
    expect_within(m.var, 1.0 / 12, std::sqrt(1.0 / 180 / n), "uniform variance");  // var of (u-1/2)^2 = 1/180
    std::vector<int> hist(10, 0);
    for (double v : x) hist[static_cast<int>(v * 10)]++;
    for (int h : hist) expect_within(h, n / 10.0, std::sqrt(n * 0.1 * 0.9), "uniform histogram bin");
  }
  auto y = vals(random::uniform(-2.0, 3.0, {n}, float32, random::key(2)));
  EXPECT_GE(*std::min_element(y.begin(), y.end()), -2.0);
  EXPECT_LT(*std::max_element(y.begin(), y.end()), 3.0);
  expect_within(moments(y).mean, 0.5, 5 * std::sqrt(1.0 / 12 / n), "uniform(-2, 3) mean");
  expect_within(moments(y).var, 25.0 / 12, 25 * std::sqrt(1.0 / 180 / n), "uniform(-2, 3) variance");
}

TEST(RandomStats, UniformHalfTypesAndBroadcastBounds) {
  const int n = 200000;
  for (Dtype dt : {float16, bfloat16}) {
    array u = random::uniform({n}, dt, random::key(3));
    EXPECT_EQ(u.dtype(), dt);
    auto x = vals(u);
    EXPECT_GE(*std::min_element(x.begin(), x.end()), 0.0);
    EXPECT_LT(*std::max_element(x.begin(), x.end()), 1.0);
    expect_within(moments(x).mean, 0.5, std::sqrt(1.0 / 12 / n) + 1e-3, "half uniform mean");
  }
  // low (3, 1) and high (1, 4), non-contiguous low: each element within its own bounds.
  array low = transpose(array({-5.f, 0.f, 10.f}, {1, 3}));  // (3, 1) view
  array high = array({20.f, 30.f, 40.f, 50.f}, {1, 4});
  array s = random::uniform(low, high, {3, 4}, float32, random::key(4));
  auto v = s.to_vector<float>();
  float lo[3] = {-5, 0, 10}, hi[4] = {20, 30, 40, 50};
  for (int i = 0; i < 3; ++i) {
    for (int j = 0; j < 4; ++j) {
      EXPECT_GE(v[i * 4 + j], lo[i]);
      EXPECT_LT(v[i * 4 + j], hi[j]);
    }
  }
  // Fully materialized non-contiguous bounds (a transposed (2, 4) array).
  array lows = transpose(array({0.f, 100.f, -7.f, 3.f, 50.f, -1.f, 8.f, 1e3f}, {2, 4}));  // (4, 2)
  array highs = add(lows, array(1.f));
  array w = random::uniform(lows, highs, {4, 2}, float32, random::key(5));
  auto wv = w.to_vector<float>();
  const float base[8] = {0.f, 50.f, 100.f, -1.f, -7.f, 8.f, 3.f, 1e3f};
  for (int i = 0; i < 8; ++i) {
    EXPECT_GE(wv[i], base[i]);
    EXPECT_LT(wv[i], base[i] + 1.f);
  }
}

// u is capped at the largest value below 1 of the output dtype, so uniform in [0, 1) never gives 1.
// Shifted bounds round as MLX's (high - low) * u + low does, which can reach `high`.
TEST(RandomStats, UniformUnitIntervalAndMLXRounding) {
  const int n = 1000000;
  for (Dtype dt : {float32, float16, bfloat16}) {
    auto u = vals(random::uniform({n}, dt, random::key(6)));
    EXPECT_LT(*std::max_element(u.begin(), u.end()), 1.0) << dt;
    EXPECT_GE(*std::min_element(u.begin(), u.end()), 0.0) << dt;
  }
  // float16 on [1, 2): u = 1 - 2^-11 gives 1 + u = 2 - 2^-11, a tie that rounds to 2 (as in MLX).
  auto h = vals(random::uniform(1.0, 2.0, {n}, float16, random::key(6)));
  EXPECT_EQ(*std::max_element(h.begin(), h.end()), 2.0);
  EXPECT_GE(*std::min_element(h.begin(), h.end()), 1.0);
  // float32 on [1, 2): u <= 1 - 2^-24, and 1 + (1 - 2^-24) is a tie that rounds to 2 as well.
  auto f = random::uniform(1.0, 2.0, {n}, float32, random::key(10)).to_vector<float>();
  EXPECT_LE(*std::max_element(f.begin(), f.end()), 2.0f);
  EXPECT_GE(*std::min_element(f.begin(), f.end()), 1.0f);
}

TEST(RandomStats, NormalMomentsAndTails) {
  const int n = 1000000;
  for (Dtype dt : {float32, float64}) {
    auto x = vals(random::normal({n}, dt, random::key(11)));
    auto m = moments(x);
    expect_within(m.mean, 0.0, 1.0 / std::sqrt(n), "normal mean");
    expect_within(m.var, 1.0, std::sqrt(2.0 / n), "normal variance");
    // P(|z| < 1) = erf(1 / sqrt 2), P(|z| < 2), P(z > 3).
    double in1 = 0, in2 = 0, over3 = 0;
    for (double v : x) {
      in1 += std::abs(v) < 1;
      in2 += std::abs(v) < 2;
      over3 += v > 3;
    }
    for (auto [got, p] : {std::pair{in1 / n, std::erf(1 / std::sqrt(2.0))}, std::pair{in2 / n, std::erf(2 / std::sqrt(2.0))},
                          std::pair{over3 / n, upper_tail(3)}}) {
      expect_within(got, p, std::sqrt(p * (1 - p) / n), "normal tail fraction");
    }
  }
  auto y = vals(random::normal({n}, float32, 3.0f, 2.0f, random::key(12)));
  expect_within(moments(y).mean, 3.0, 2.0 / std::sqrt(n), "normal(3, 2) mean");
  expect_within(moments(y).var, 4.0, 4.0 * std::sqrt(2.0 / n), "normal(3, 2) variance");
  for (Dtype dt : {float16, bfloat16}) {
    array h = random::normal({200000}, dt, random::key(13));
    EXPECT_EQ(h.dtype(), dt);
    auto m = moments(vals(h));
    expect_within(m.mean, 0.0, 1.0 / std::sqrt(200000.0) + 2e-3, "half normal mean");
    expect_within(m.var, 1.0, std::sqrt(2.0 / 200000) + 1e-2, "half normal variance");
  }
}

TEST(RandomStats, TruncatedNormalBoundsAndMeans) {
  const int n = 400000;
  // Mean of a standard normal truncated to [a, b]: (phi(a) - phi(b)) / (Phi(b) - Phi(a)).
  auto check = [&](double a, double b, Dtype dt, uint64_t seed) {
    auto x = vals(random::truncated_normal(a, b, {n}, dt, random::key(seed)));
    EXPECT_GE(*std::min_element(x.begin(), x.end()), a) << a << " " << b;
    EXPECT_LE(*std::max_element(x.begin(), x.end()), b) << a << " " << b;
    double mass = upper_tail(a) - upper_tail(b);
    double mean = (phi(a) - phi(b)) / mass;
    // Variance: 1 + (a phi(a) - b phi(b)) / mass - mean^2 (terms with infinite bounds vanish).
    double ta = std::isinf(a) ? 0 : a * phi(a), tb = std::isinf(b) ? 0 : b * phi(b);
    double var = 1 + (ta - tb) / mass - mean * mean;
    auto m = moments(x);
    // float32 rounding of the samples themselves.
    double scale = std::max(std::isinf(a) ? 0.0 : std::abs(a), std::isinf(b) ? 0.0 : std::abs(b));
    double tol = dt == float32 ? 1e-6 * std::max(scale, 1.0) : 0;
    expect_within(m.mean, mean, std::sqrt(var / n) + tol, "truncated normal mean");
    expect_within(m.var, var, var * std::sqrt(3.0 / n) + tol, "truncated normal variance");
  };
  const double inf = std::numeric_limits<double>::infinity();
  check(-1, 2, float32, 20);
  check(-1, 2, float64, 21);
  check(0, inf, float64, 22);     // half-normal
  check(5, inf, float64, 23);     // tail: mean 5.186
  // (MLX's inverse CDF through erf loses a far tail such as [10, 11]: erf(10 / sqrt 2) is 1 in
  // float64, so every draw clips to 11. Not checked.)
  check(-inf, -6, float64, 25);   // mirrored tail
  check(-0.5, 0.5, float32, 26);
  // Bounds broadcast per column.
  array lower = array({-1.f, 0.f, 3.f}, {1, 3});
  array upper = array({1.f, 0.5f, 8.f}, {1, 3});
  array t = random::truncated_normal(lower, upper, {1000, 3}, float32, random::key(27));
  auto v = t.to_vector<float>();
  float lo[3] = {-1, 0, 3}, hi[3] = {1, 0.5, 8};
  for (size_t i = 0; i < v.size(); ++i) {
    EXPECT_GE(v[i], lo[i % 3]);
    EXPECT_LE(v[i], hi[i % 3]);
  }
  EXPECT_EQ(random::truncated_normal(lower, upper, float32, random::key(1)).shape(), (Shape{1, 3}));
}

TEST(RandomStats, RandintBoundsAndCoverage) {
  const int n = 700000;
  auto x = random::randint(-3, 4, {n}, int32, random::key(30)).to_vector<int>();
  std::map<int, int> count;
  for (int v : x) count[v]++;
  ASSERT_EQ(count.size(), 7u);
  EXPECT_EQ(count.begin()->first, -3);
  EXPECT_EQ(count.rbegin()->first, 3);
  for (auto& [v, c] : count) expect_within(c, n / 7.0, std::sqrt(n * (1 / 7.0) * (6 / 7.0)), "randint count");

  array u8 = random::randint(0, 256, {100000}, uint8, random::key(31));
  EXPECT_EQ(u8.dtype(), uint8);
  std::set<int> seen;
  for (int v : u8.to_vector<int>()) seen.insert(v);
  EXPECT_EQ(seen.size(), 256u);

  // int64 over a range wider than 2^63, and the whole int64 range.
  const int64_t big = int64_t(1) << 62;
  auto w = random::randint(-big, big, {200000}, int64, random::key(32)).to_vector<int64_t>();
  double mean = 0;
  for (int64_t v : w) {
    EXPECT_GE(v, -big);
    EXPECT_LT(v, big);
    mean += static_cast<double>(v) / 200000;
  }
  expect_within(mean / big, 0.0, std::sqrt(1.0 / 3 / 200000), "randint int64 mean");
  auto all = random::randint(std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max(), {10000}, int64,
                             random::key(33))
                 .to_vector<int64_t>();
  EXPECT_LT(*std::max_element(all.begin(), all.end()), std::numeric_limits<int64_t>::max());
  int negative = 0;
  for (int64_t v : all) negative += v < 0;
  expect_within(negative, 5000, 50, "randint full range sign");

  // Broadcast bounds: row i in [lo[i], hi[j]).
  array lo = array({0, 10, 100}, {3, 1});
  array hi = array({1, 20, 200, 300}, {1, 4});
  array r = random::randint(lo, hi, {3, 4}, int64, random::key(34));
  auto rv = r.to_vector<int64_t>();
  int los[3] = {0, 10, 100}, his[4] = {1, 20, 200, 300};
  for (int i = 0; i < 3; ++i) {
    for (int j = 0; j < 4; ++j) {
      if (los[i] < his[j]) {
        EXPECT_GE(rv[i * 4 + j], los[i]);
        EXPECT_LT(rv[i * 4 + j], his[j]);
      }
    }
  }
  // A one-value range; float bounds truncate toward zero.
  for (int v : random::randint(5, 6, {100}, int32, random::key(35)).to_vector<int>()) EXPECT_EQ(v, 5);
  for (int v : random::randint(array(0.9f), array(2.7f), {100}, int32, random::key(36)).to_vector<int>()) EXPECT_TRUE(v == 0 || v == 1) << v;
}

TEST(RandomStats, BernoulliFrequencies) {
  const int n = 1000000;
  array b = random::bernoulli(0.3, {n}, random::key(40));
  EXPECT_EQ(b.dtype(), bool_);
  auto x = vals(b);
  expect_within(moments(x).mean, 0.3, std::sqrt(0.21 / n), "bernoulli(0.3)");
  for (double v : vals(random::bernoulli(0.0, {1000}, random::key(41)))) EXPECT_EQ(v, 0.0);
  for (double v : vals(random::bernoulli(1.0, {1000}, random::key(41)))) EXPECT_EQ(v, 1.0);
  // Per-column p, given as a non-contiguous float32 view.
  array p = transpose(array({0.1f, 0.5f, 0.95f}, {3, 1}));  // (1, 3)
  const int rows = 200000;
  auto y = vals(random::bernoulli(p, {rows, 3}, random::key(42)));
  double ps[3] = {0.1, 0.5, 0.95};
  for (int c = 0; c < 3; ++c) {
    double s = 0;
    for (int r = 0; r < rows; ++r) s += y[r * 3 + c];
    expect_within(s / rows, ps[c], std::sqrt(ps[c] * (1 - ps[c]) / rows), "bernoulli column");
  }
  EXPECT_EQ(random::bernoulli(array({0.5f, 0.5f}), random::key(1)).shape(), (Shape{2}));
  EXPECT_EQ(random::bernoulli().ndim(), 0u);
}

TEST(RandomStats, CategoricalMatchesSoftmax) {
  const double inf = std::numeric_limits<double>::infinity();
  // Probabilities softmax([0, 1, 2, -inf]).
  array logits = array({0.0, 1.0, 2.0, -inf});
  const double z = 1 + std::exp(1.0) + std::exp(2.0);
  const double p[4] = {1 / z, std::exp(1.0) / z, std::exp(2.0) / z, 0};
  const int n = 300000;
  array s = random::categorical(logits, -1, n, random::key(50));
  EXPECT_EQ(s.shape(), (Shape{n}));
  EXPECT_EQ(s.dtype(), int32);
  std::vector<int> count(4, 0);
  for (int v : s.to_vector<int>()) count.at(v)++;
  EXPECT_EQ(count[3], 0);
  for (int c = 0; c < 3; ++c) expect_within(count[c] / double(n), p[c], std::sqrt(p[c] * (1 - p[c]) / n), "categorical");

  // Two distributions along axis 0 of a (3, 2) array, shape (m, 2): column j uses logits[:, j].
  array l2 = array({0.f, 5.f, 0.f, 0.f, 0.f, -5.f}, {3, 2});
  const int m = 100000;
  array s2 = random::categorical(l2, 0, Shape{m, 2}, random::key(51));
  EXPECT_EQ(s2.shape(), (Shape{m, 2}));
  auto v2 = s2.to_vector<int>();
  for (int col = 0; col < 2; ++col) {
    double lv[3] = {0, 0, 0};
    for (int r = 0; r < 3; ++r) lv[r] = l2.to_vector<float>()[r * 2 + col];
    double zz = std::exp(lv[0]) + std::exp(lv[1]) + std::exp(lv[2]);
    std::vector<int> cnt(3, 0);
    for (int i = 0; i < m; ++i) cnt.at(v2[i * 2 + col])++;
    for (int r = 0; r < 3; ++r) {
      double pr = std::exp(lv[r]) / zz;
      expect_within(cnt[r] / double(m), pr, std::sqrt(pr * (1 - pr) / m) + 1e-9, "categorical axis 0");
    }
  }
  // One draw per row: shape of logits without the axis; num_samples appends an axis.
  EXPECT_EQ(random::categorical(zeros({5, 3}), -1, random::key(52)).shape(), (Shape{5}));
  EXPECT_EQ(random::categorical(zeros({5, 3}), 1, 7, random::key(52)).shape(), (Shape{5, 7}));
  EXPECT_EQ(random::categorical(zeros({5, 3}), 0, 7, random::key(52)).shape(), (Shape{3, 7}));
  // A certain category (others -inf) is always drawn.
  for (int v : random::categorical(array({-inf, 0.0, -inf}), -1, 50, random::key(53)).to_vector<int>()) EXPECT_EQ(v, 1);
}

TEST(RandomStats, GumbelMoments) {
  const int n = 1000000;
  for (Dtype dt : {float32, float64}) {
    auto x = vals(random::gumbel({n}, dt, random::key(60)));
    auto m = moments(x);
    const double var = kPi * kPi / 6;
    expect_within(m.mean, 0.5772156649015329, std::sqrt(var / n), "gumbel mean");     // Euler's gamma
    expect_within(m.var, var, var * std::sqrt((5.4 + 2) / n), "gumbel variance");  // excess kurtosis 12/5
  }
}

TEST(RandomStats, PermutationIsAPermutationAndUniform) {
  auto p = random::permutation(100000, random::key(70)).to_vector<int>();
  auto sorted = p;
  std::sort(sorted.begin(), sorted.end());
  for (int i = 0; i < 100000; ++i) ASSERT_EQ(sorted[i], i);
  int fixed = 0;
  for (int i = 0; i < 100000; ++i) fixed += p[i] == i;
  EXPECT_LT(fixed, 10);  // Poisson(1)

  // All 24 orders of 4 items, each about 2400 / 24 = 100 times.
  array keys = random::split(random::key(71), 2400);
  std::map<std::vector<int>, int> count;
  for (int i = 0; i < 2400; ++i) {
    array k = reshape(slice(keys, {i, 0}, {i + 1, 2}), {2});
    count[random::permutation(4, k).to_vector<int>()]++;
  }
  EXPECT_EQ(count.size(), 24u);
  for (auto& [perm, c] : count) expect_within(c, 100, std::sqrt(100 * 23.0 / 24), "permutation order");

  // Shuffling an array: rows (axis 0) move whole; axis 1 applies one shuffle to every row.
  array x = reshape(arange(0.0, 12.0, 1.0, float32), {3, 4});
  auto rows = random::permutation(x, 0, random::key(72)).to_vector<float>();
  std::vector<int> order;
  for (int r = 0; r < 3; ++r) {
    int src = static_cast<int>(rows[r * 4]) / 4;
    order.push_back(src);
    for (int c = 0; c < 4; ++c) EXPECT_EQ(rows[r * 4 + c], src * 4 + c);
  }
  std::sort(order.begin(), order.end());
  EXPECT_EQ(order, (std::vector<int>{0, 1, 2}));
  array k73 = random::key(73);
  auto idx = random::permutation(4, k73).to_vector<int>();
  auto cols = random::permutation(x, -1, k73).to_vector<float>();  // same key: same shuffle
  for (int r = 0; r < 3; ++r) {
    for (int c = 0; c < 4; ++c) EXPECT_EQ(cols[r * 4 + c], r * 4 + idx[c]);
  }
  // A transposed (non-contiguous) int input.
  array xt = transpose(reshape(arange(12), {3, 4}));  // (4, 3), xt[i][j] = 4 j + i
  auto pt = random::permutation(xt, 0, k73).to_vector<int>();
  for (int r = 0; r < 4; ++r) {
    for (int c = 0; c < 3; ++c) EXPECT_EQ(pt[r * 3 + c], 4 * c + idx[r]);
  }
}

// Element i depends only on (key, size, i): one thread and two threads give identical bits.
TEST(RandomThreads, ResultsIndependentOfThreadCount) {
  const int n = 100003;  // odd, and above every parallel threshold
  array k = random::key(80);
  auto draw = [&] {
    std::vector<array> out{random::uniform({n}, float32, k),
                           random::uniform({n}, float64, k),
                           random::uniform({n}, float16, k),
                           random::normal({n}, float32, k),
                           random::normal({n}, float64, k),
                           random::truncated_normal(-1.0, 2.0, {n}, float32, k),
                           random::randint(-50, 50, {n}, int32, k),
                           random::randint(0, 200, {n}, uint8, k),
                           random::bernoulli(0.4, {n}, k),
                           random::gumbel({n}, float32, k),
                           random::gumbel({n}, float64, k),
                           random::laplace({n}, float32, k),
                           random::categorical(array({0.f, 1.f, 2.f}), 0, n, k),
                           random::bits({n}, 1, k),
                           random::bits({n}, 2, k),
                           random::bits({n}, 4, k),
                           random::bits({n}, 8, k),
                           random::split(k, n),
                           random::permutation(n, k),
                           random::categorical(zeros({n / 7, 7}), -1, random::key(81)),
                           random::permutation(reshape(arange(0.0, 6.0 * n, 1.0, float32), {n, 6}), 0, k)};
    eval(out);
    return out;
  };
  const int saved = get_num_threads();
  set_num_threads(1);
  auto one = draw();
  set_num_threads(2);
  auto two = draw();
  set_num_threads(saved);
  ASSERT_EQ(one.size(), two.size());
  for (size_t i = 0; i < one.size(); ++i) EXPECT_TRUE(stats_same_bits<char>(one[i], two[i])) << "generator " << i;
}

TEST(RandomStats, MultivariateNormalMeanAndCovariance) {
  // cov = [[5, 4], [4, 5]] = R diag(9, 1) R^T (R a 45 degree rotation): sample covariance within 5
  // standard errors (var(x_i x_j) = cov_ii cov_jj + cov_ij^2 for a normal pair).
  const int n = 200000;
  array mean = array({1.0f, -2.0f});
  array cov = array({5.0f, 4.0f, 4.0f, 5.0f}, {2, 2});
  array x = random::multivariate_normal(mean, cov, {n}, float32, random::key(21));
  ASSERT_EQ(x.shape(), (Shape{n, 2}));
  auto v = vals(x);
  double m[2] = {0, 0}, c[2][2] = {{0, 0}, {0, 0}};
  for (int i = 0; i < n; ++i)
    for (int a = 0; a < 2; ++a) m[a] += v[2 * i + a] / n;
  for (int i = 0; i < n; ++i)
    for (int a = 0; a < 2; ++a)
      for (int b = 0; b < 2; ++b) c[a][b] += (v[2 * i + a] - m[a]) * (v[2 * i + b] - m[b]) / n;
  expect_within(m[0], 1.0, std::sqrt(5.0 / n), "mean 0");
  expect_within(m[1], -2.0, std::sqrt(5.0 / n), "mean 1");
  expect_within(c[0][0], 5.0, std::sqrt(50.0 / n), "var 0");
  expect_within(c[1][1], 5.0, std::sqrt(50.0 / n), "var 1");
  expect_within(c[0][1], 4.0, std::sqrt(41.0 / n), "covariance");
}

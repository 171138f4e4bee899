// hadamard_transform: known values from numpy, the explicit matrix product for every supported m,
// dtypes, batch axes and strided inputs, MLX's dtype and size rules, finite differences.
#include "../test_utils.h"
#include "loom/core/primitive.h"

namespace loom {
namespace {

using testing::expect_array;
using testing::lcg_uniform;

// y = H x / sqrt(N) for x = sin(0.37 i + 0.1), i < N, in float64, from numpy:
//   H = np.kron(Hm, S) with S the Sylvester matrix (S_1 = [[1]], S_2p = [[S, S], [S, -S]]) and Hm
//   the matrix of kH12 / kH20 / kH28 below (np.ones((1, 1)) for m = 1); y = H @ x / np.sqrt(N),
//   printed with "%.9g"; numpy also checked H @ H.T == N * I for every N here.
const std::vector<std::pair<int, std::vector<double>>> kNumpy = {
  {2, {0.390831849, -0.249646078}},
  {8, {1.88462579, -0.0626480546, -0.129843396, -0.136794904, -0.305671324, -0.322036243, -0.667447373, 0.0221870462}},
  {12,
   {0.794865457, 0.0674592386, -0.0413898507, -0.686889262, 1.48490641, -0.80472775, 0.682030399,
    -0.328629159, -0.863206276, 0.147310369, -0.237542842, 0.266564838}},
  {24,
   {0.315284041, 0.00799454954, -0.370665213, 0.07145807, 1.48192214, 0.182030122, -0.159891997, -0.171179098,
    -0.296208833, 0.0424623852, 0.377830265, -0.0843786607, -1.14389574, -0.172982524, 0.231201421,
    0.127443151, -0.0742481779, -0.350499812, -0.909321741, 0.11932231, 2.39659476, -0.295844848, -1.23605011,
    -0.197708885}},
  {20,
   {-0.878996885, -0.436946235, -0.909496232, -1.2706775, -0.796504165, 0.716921147, 0.229586342, 0.32935843,
    0.540493727, 0.141298551, 1.30283531, 0.748998515, 0.400339, 0.29613307, 0.132206479, 0.0494429441,
    -0.506110016, 0.222648102, 0.996209027, 0.650003781}},
  {40,
   {-0.25705481, -0.0912086349, 1.42069606, 0.0278762341, 0.104834379, 0.164269729, -1.35833068, 0.0989485396,
    -0.077721274, 0.0293355864, 0.0261867239, 0.300364869, -0.0797365269, 0.0251284953, 0.583650263,
    -0.0774411265, 1.44311154, -0.069475354, 2.29919781, -0.0691906188, 1.02403444, -0.19891613, 0.629073085,
    -0.0532624971, -0.62542497, -0.0876200754, -1.42803775, -0.271292325, -0.920924787, -0.416127548,
    -0.660428054, -0.129713791, 0.71274367, -0.265062505, 0.498214619, 0.0941839596, -0.954617627,
    0.332405587, -1.16957916, 0.039075482}},
  {28,
   {-0.552988909, -0.151754459, -1.18910604, -0.752570258, -0.21419265, -1.04640734, -0.643366145, 1.53696818,
    0.79676368, 0.437847541, 0.292201477, 0.242221785, 0.301018231, 0.0222028268, -0.0241067077, -0.843854681,
    -0.584010303, 0.111290593, 0.878148621, 1.25634465, 0.634319182, -0.474956633, -0.83036439, -0.860398556,
    -0.0279191182, 0.529463107, 0.125460826, -0.373280152}},
  {56,
   {-1.63642259, -0.203693963, -0.219354302, -0.383580818, 0.933216997, -0.300513464, 1.4176593, 0.0135362361,
    0.643844941, 0.306581967, -0.916079078, 0.318073827, -1.56739692, 0.0926256516, -0.589526662, 0.258441085,
    -1.6534277, 0.126888906, -1.93335861, -0.0882707859, -0.433251821, -0.261985493, 1.30044538, -0.200975668,
    1.42932025, 0.0423493537, 0.616032416, 0.222062441, -0.783633854, -0.0456781053, 0.262317088,
    -0.085452817, 0.147330797, 0.0876934975, 0.0797143922, 0.0729216139, 0.08300672, 0.0534807897,
    -0.48567918, 0.167665116, -0.286354675, 0.109692192, -0.450597256, 0.303988677, -1.07378142, 0.0499300179,
    -0.29643562, -0.0514618234, 0.221672785, -0.102074396, 0.786642888, -0.0740720933, 1.52422413,
    0.0917262645, 1.14936971, 0.142375973}},
};

// Sloane's Hadamard matrices of orders 12, 20 and 28 (http://neilsloane.com/hadamard/, the ones
// MLX uses), copied here independently of ops/hadamard.cpp: '+' is 1, '-' is -1, row-major.
const char* kH12 =
    "+-++++++++++--+-+-+-+-+-+++-++----++"
    "+---+--+-++-+++++-++----+-+---+--+-+"
    "++--+++-++--+--++---+--+++----+++-++"
    "+--+-++---+-++++----+++-+-+--+-++---";
const char* kH20 =
    "+----+----++--++-++--+----+---+++---+-++--+----+---+++-+-+-+"
    "---+----+---+++++-+-----+----++--++-++-+-+++++-----+--+++--+"
    "+-+++-+---+-+--+++--++-++--+---+-+--+++-+++-+---+---+-+--+++"
    "++++-----++--+-+--++--++-+-++-+-----++++---++-+-++-+---+-+++"
    "+---++-+-+--+--++-++++---++-+----+-+++-+-++---++-+----+++++-"
    "-+--+--++-+----+----+-+-----++-+----+----+-+-+---+--+----+--"
    "--+-+++------+----+-+--+--++------+----+";
const char* kH28 =
    "+------++----++-+--+-+--++---+-----+++-----+-+--+-+--++---+-----+++---+-+-+----+--++"
    "---+-----+++---+-+-+-+--+--+----+-----+++---+-+-+++--+-------+-----++++--+-+--++--+-"
    "------++----++-+--+-+--++--+--++++-+-------++--+++-+--+----++++-+-----+-++--+-+-+--+"
    "+---+++--+----++-++--+-+-+--++---++---+----++-++--+-+-+-+++---+----+----++-++--+-+-+"
    "++++--------+-+--++-++--+-+--++++--------+++--++--+--+-+-+-++-++--++--+--------++++-"
    "+-+-++--+--++--+--------++++-+-+-++--+--++--+----+---++++-+-+-++--+--+---+---++---++"
    "++-+-+-++--+------+--+++---+-++-+-+-++--+------+-++++---+-++-+---++--+------+-++++--"
    "-++--++-+-++-+++----++------+-++--++-+-++-+++-----+-----++-++---+-+-++-+++-----+----"
    "-++-++-+-+-+-+--+++-----+-----++-++++-+-+----+++-----+--+--++-+-++-+-+----+++-----+-"
    "++--++-+-++-+-+----++------+";

std::vector<double> odd_matrix(int m) {
  if (m == 1) return {1.0};
  const char* s = m == 12 ? kH12 : m == 20 ? kH20 : kH28;
  EXPECT_EQ(std::strlen(s), size_t(m * m));
  std::vector<double> h(m * m);
  for (int i = 0; i < m * m; ++i) h[i] = s[i] == '+' ? 1.0 : -1.0;
  return h;
}

// The explicit N x N matrix kron(H_m, S_p), N = m * p, built entry by entry.
std::vector<double> explicit_matrix(int m, int p) {
  const std::vector<double> hm = odd_matrix(m);
  const int n = m * p;
  std::vector<double> h(size_t(n) * n);
  for (int r = 0; r < n; ++r) {
    for (int c = 0; c < n; ++c) {
      // S_p[i][j] = (-1)^popcount(i & j) in Sylvester order.
      const double s = __builtin_popcount((r % p) & (c % p)) % 2 ? -1.0 : 1.0;
      h[size_t(r) * n + c] = hm[(r / p) * m + c / p] * s;
    }
  }
  return h;
}

TEST(Hadamard, OddMatricesAreHadamard) {
  for (int m : {12, 20, 28}) {
    const std::vector<double> h = odd_matrix(m);
    for (int i = 0; i < m; ++i) {
      for (int j = 0; j < m; ++j) {
        double dot = 0;
        for (int k = 0; k < m; ++k) dot += h[i * m + k] * h[j * m + k];
        EXPECT_EQ(dot, i == j ? m : 0) << "m=" << m << " rows " << i << ", " << j;
      }
    }
  }
}

TEST(Hadamard, KnownValuesFromNumpy) {
  for (const auto& [n, expected] : kNumpy) {
    SCOPED_TRACE("n=" + std::to_string(n));
    array x = sin(arange(0.0, double(n), 1.0, float64) * 0.37 + 0.1);
    // The scale is a float (MLX's signature): 1 / sqrt(n) rounded to float32 bounds the agreement.
    expect_array(hadamard_transform(x), {n}, expected, 1e-7);
    array y32 = hadamard_transform(astype(x, float32));
    EXPECT_EQ(y32.dtype(), float32);
    expect_array(y32, {n}, expected, 2e-6);
  }
}

// For every m and a few p: a [3, 2, N] batch against matmul with the explicit matrix, in every
// floating dtype, with the default and an explicit scale.
TEST(Hadamard, MatchesExplicitMatrixProduct) {
  for (int m : {1, 12, 20, 28}) {
    for (int p : {1, 2, 8, 32}) {
      const int n = m * p;
      if (n == 1) continue;
      SCOPED_TRACE("n=" + std::to_string(n));
      array h(explicit_matrix(m, p), {n, n}, float64);
      // H H^T = n I for the matrix the test compares with.
      expect_array(matmul(h, transpose(h)), {n, n}, (eye(n, float64) * double(n)).to_vector<double>(), 0);
      array x = lcg_uniform({3, 2, n}, -1, 1, n);
      for (std::optional<float> scale : {std::optional<float>(), std::optional<float>(0.25f)}) {
        const double s = scale ? *scale : double(float(1.0 / std::sqrt(double(n))));  // a float, as the op's
        const std::vector<double> want = (matmul(x, transpose(h)) * s).to_vector<double>();
        for (auto [dt, tol] : {std::pair<Dtype, double>{float64, 1e-12}, {float32, 1e-5}, {float16, 4e-3},
                               {bfloat16, 2e-2}}) {
          SCOPED_TRACE(to_string(dt));
          array xd = astype(x, dt);
          array y = hadamard_transform(xd, scale);
          EXPECT_EQ(y.dtype(), dt);
          // Half inputs are rounded first: compare with the exact transform of the rounded input.
          const std::vector<double> w =
              dt == float64 ? want : (matmul(astype(xd, float64), transpose(h)) * s).to_vector<double>();
          const double mag = dt == float64 || dt == float32 ? 1.0 : std::sqrt(double(n)) * (scale ? s : 1.0) + 1;
          expect_array(y, {3, 2, n}, w, tol * mag);
        }
      }
    }
  }
}

TEST(Hadamard, StridedInputs) {
  array base = astype(lcg_uniform({24, 6}, -2, 2, 3), float32);
  array t = transpose(base);  // [6, 24], column-major
  expect_array(hadamard_transform(t), {6, 24}, hadamard_transform(copy(t)).to_vector<double>(), 1e-6);
  array s = slice(reshape(astype(lcg_uniform({5, 40}, -1, 1, 4), float32), {5, 40}), {0, 0}, {5, 40}, {2, 2});
  ASSERT_EQ(s.shape(), (Shape{3, 20}));
  expect_array(hadamard_transform(s), {3, 20}, hadamard_transform(copy(s)).to_vector<double>(), 1e-6);
  array b = broadcast_to(astype(lcg_uniform({1, 8}, -1, 1, 5), float32), {4, 8});
  array y = hadamard_transform(b);
  const auto row = hadamard_transform(astype(lcg_uniform({1, 8}, -1, 1, 5), float32)).to_vector<double>();
  std::vector<double> rows;
  for (int i = 0; i < 4; ++i) rows.insert(rows.end(), row.begin(), row.end());
  expect_array(y, {4, 8}, rows, 1e-6);
}

// Enough rows to split over threads; the default scale makes H / sqrt(n) orthogonal, and kron(H_12,
// S) is symmetric, so transforming twice gives the input back.
TEST(Hadamard, ManyRowsRoundTrip) {
  array x = astype(lcg_uniform({300, 768}, -1, 1, 6), float32);
  expect_array(hadamard_transform(hadamard_transform(x)), {300, 768}, x.to_vector<double>(), 1e-5);
}

TEST(Hadamard, DtypeRules) {
  // Integers transform as float32 (MLX): S_4 [1, 2, 3, 4] / 2 = [5, -1, -2, 0].
  array y = hadamard_transform(array({1, 2, 3, 4}, {4}, int32));
  EXPECT_EQ(y.dtype(), float32);
  expect_array(y, {4}, {5, -1, -2, 0}, 1e-6);
  array yb = hadamard_transform(array({true, false}, {2}), 1.0f);
  EXPECT_EQ(yb.dtype(), float32);
  expect_array(yb, {2}, {1, 1}, 0);
  // n = 1: the input itself for scale 1 (dtype kept), else a * scale.
  array i1 = array({3, 4}, {2, 1}, int32);
  EXPECT_EQ(hadamard_transform(i1).id(), i1.id());
  array s1 = hadamard_transform(i1, 0.5f);
  EXPECT_EQ(s1.dtype(), float32);
  expect_array(s1, {2, 1}, {1.5, 2}, 0);
  expect_array(hadamard_transform(array(2.0f), 3.0f), {}, {6}, 0);
  // MLX's test_hadamard: a 0-d 5 stays 5, with scale 0.2 becomes 1; a last axis of 1 is the identity.
  expect_array(hadamard_transform(array(5)), {}, {5}, 0);
  expect_array(hadamard_transform(array(5), 0.2f), {}, {1}, 1e-7);
  array x = astype(lcg_uniform({8, 8, 1}, -1, 1, 8), float32);
  expect_array(hadamard_transform(x), {8, 8, 1}, x.to_vector<double>(), 0);
}

TEST(Hadamard, Errors) {
  EXPECT_THROW_MSG(hadamard_transform(zeros({0, 4})), std::invalid_argument, "[hadamard_transform]");
  EXPECT_THROW_MSG(hadamard_transform(zeros({2, 3})), std::invalid_argument, "size 3");
  EXPECT_THROW_MSG(hadamard_transform(zeros({2, 36})), std::invalid_argument, "(2,36)");  // 12 * 3
  EXPECT_THROW_MSG(hadamard_transform(zeros({240})), std::invalid_argument, "m in {1, 12, 20, 28}");
  EXPECT_NO_THROW(hadamard_transform(zeros({2, 48})));
}

// vjp (the transposed transform) and jvp against central differences, for every m: H_20 and H_28
// are not symmetric, so a vjp applying H itself (as MLX's) fails here.
TEST(Hadamard, GradientsMatchFiniteDifferences) {
  for (int n : {2, 8, 12, 24, 20, 40, 28}) {
    SCOPED_TRACE("n=" + std::to_string(n));
    array x = lcg_uniform({3, n}, -1, 1, 100 + n);
    auto f = [](const std::vector<array>& p) { return std::vector<array>{hadamard_transform(p[0])}; };
    auto r = check_grads(f, {x});
    EXPECT_TRUE(r.ok) << r.report;
    auto g = [](const std::vector<array>& p) { return std::vector<array>{hadamard_transform(p[0], 0.3f) * p[0]}; };
    r = check_grads(g, {x});
    EXPECT_TRUE(r.ok) << r.report;
  }
}

}  // namespace
}  // namespace loom

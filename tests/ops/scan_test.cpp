// cumprod, cummax, cummin and logcumsumexp (the Scan primitive's other kinds): values against numpy /
// PyTorch (computed once with /usr/bin/python3, noted at each case) or by hand, dtypes, empty and 0-d
// arrays, views, bad arguments, and finite-difference checks of their vjps and jvps.
#include <cmath>
#include <functional>
#include <limits>

#include "../test_utils.h"

using namespace loom;
using loom::testing::kInf;
using loom::testing::kNaN;
using loom::testing::expect_array;

namespace {


// Finite differences of f at x. The identity an exclusive scan starts from (+-inf for cummax,
// cummin and logcumsumexp) is clipped to a constant so that the differences stay finite.
void check_scan_grads(const std::function<array(const array&)>& f, const array& x) {
  auto finite = [&](const array& y) { return clip(y, array(-100.0, y.dtype()), array(100.0, y.dtype())); };
  auto r = check_grads([&](const std::vector<array>& p) { return std::vector<array>{finite(f(p[0]))}; }, {x});
  EXPECT_TRUE(r.ok) << r.report;
}

array rand_values(const Shape& s, unsigned seed, double lo = -2, double hi = 2) {
  return loom::testing::lcg_uniform(s, lo, hi, seed, 3);
}

}  // namespace

TEST(Scan, CumProdValues) {
  array m({1.0f, 2.0f, 3.0f, 4.0f, 5.0f, 6.0f}, {2, 3});
  expect_array(cumprod(m, 1), {2, 3}, {1, 2, 6, 4, 20, 120});
  expect_array(cumprod(m, 0), {2, 3}, {1, 2, 3, 4, 10, 18});
  expect_array(cumprod(m, -1, true), {2, 3}, {6, 6, 3, 120, 30, 6});
  expect_array(cumprod(m, 1, false, false), {2, 3}, {1, 1, 2, 1, 4, 20});
  expect_array(cumprod(m, 1, true, false), {2, 3}, {6, 3, 1, 30, 6, 1});
  expect_array(cumprod(m), {6}, {1, 2, 6, 24, 120, 720});  // flattened
  expect_array(cumprod(m, true), {6}, {720, 720, 360, 120, 30, 6});
  expect_array(cumprod(m, false, false), {6}, {1, 1, 2, 6, 24, 120});
  // Views: a transpose and a reversed slice.
  expect_array(cumprod(transpose(m), 0), {3, 2}, {1, 4, 2, 20, 6, 120});
  expect_array(cumprod(slice(m, {0, 2}, {2, -4}, {1, -1}), 1), {2, 3}, {3, 6, 6, 6, 30, 120});
  // Zeros and NaN.
  expect_array(cumprod(array({2.0, 0.0, 3.0, kNaN}, float64), 0), {4}, {2, 0, 0, kNaN});
}

TEST(Scan, CumSumFlattenedFlags) {
  // MLX's flattened cumsum(a, reverse, inclusive).
  array m({1, 2, 3, 4}, {2, 2}, int32);
  expect_array(cumsum(m, true), {4}, {10, 9, 7, 4});
  expect_array(cumsum(m, false, false), {4}, {0, 1, 3, 6});
  expect_array(cumsum(m, true, false), {4}, {9, 7, 4, 0});
  EXPECT_EQ(cumsum(array({true, true}), false).dtype(), int32);
}

TEST(Scan, CumProdDtypes) {
  // As MLX: the dtype is kept. bool is a running "and"; uint8 wraps (16 * 16 = 256 = 0 mod 256).
  array b({true, true, false, true});
  EXPECT_EQ(cumprod(b, 0).dtype(), bool_);
  expect_array(cumprod(b, 0), {4}, {1, 1, 0, 0});
  expect_array(cumprod(b, 0, true), {4}, {0, 0, 0, 1});
  expect_array(cumprod(b, 0, false, false), {4}, {1, 1, 1, 0});
  array u({16, 16, 2}, uint8);
  EXPECT_EQ(cumprod(u, 0).dtype(), uint8);
  expect_array(cumprod(u, 0), {3}, {16, 0, 0});
  array i({3, -2, 5}, int32);
  EXPECT_EQ(cumprod(i, 0).dtype(), int32);
  expect_array(cumprod(i, 0), {3}, {3, -6, -30});
  array l({int64_t(1) << 20, int64_t(1) << 20}, int64);
  EXPECT_EQ(cumprod(l, 0).to_vector<int64_t>(), (std::vector<int64_t>{int64_t(1) << 20, int64_t(1) << 40}));
  array h({1.5f, 2.0f, 4.0f}, float16);
  EXPECT_EQ(cumprod(h, 0).dtype(), float16);
  expect_array(cumprod(h, 0), {3}, {1.5, 3, 12});
  EXPECT_EQ(cumprod(array({1.5f, 2.0f}, bfloat16), 0).dtype(), bfloat16);
}

TEST(Scan, CumMaxCumMinValues) {
  array x({3.0f, 1.0f, 4.0f, 1.0f, 5.0f, 9.0f, 2.0f, 6.0f});
  expect_array(cummax(x, 0), {8}, {3, 3, 4, 4, 5, 9, 9, 9});
  expect_array(cummin(x, 0), {8}, {3, 1, 1, 1, 1, 1, 1, 1});
  expect_array(cummax(x, 0, true), {8}, {9, 9, 9, 9, 9, 9, 6, 6});
  expect_array(cummin(x, 0, true), {8}, {1, 1, 1, 1, 2, 2, 2, 6});
  // Exclusive scans start from the identity: -inf for max, +inf for min.
  expect_array(cummax(x, 0, false, false), {8}, {-kInf, 3, 3, 4, 4, 5, 9, 9});
  expect_array(cummin(x, 0, true, false), {8}, {1, 1, 1, 2, 2, 2, 6, kInf});
  // Flattened forms.
  array m({2.0f, 7.0f, 1.0f, 8.0f, 2.0f, 8.0f}, {2, 3});
  expect_array(cummax(m), {6}, {2, 7, 7, 8, 8, 8});
  expect_array(cummin(m, true), {6}, {1, 1, 1, 2, 2, 8});
  // Along axis 0, and on a transposed view.
  expect_array(cummax(m, 0), {2, 3}, {2, 7, 1, 8, 7, 8});
  expect_array(cummin(transpose(m), 1), {3, 2}, {2, 2, 7, 2, 1, 1});
  // A NaN makes every later value NaN (numpy's maximum.accumulate, MLX's CPU backend), also in reverse.
  expect_array(cummax(array({1.0, kNaN, 3.0}, float64), 0), {3}, {1, kNaN, kNaN});
  expect_array(cummin(array({1.0, kNaN, 3.0}, float64), 0, true), {3}, {kNaN, kNaN, 3});
  expect_array(cummin(array({kNaN, -1.0}, float64), 0), {2}, {kNaN, kNaN});
  // Infinities are ordinary values.
  expect_array(cummax(array({-kInf, 2.0, kInf, 3.0}, float64), 0), {4}, {-kInf, 2, kInf, kInf});
}

TEST(Scan, CumMaxCumMinDtypes) {
  array i({5, -3, 7, 2}, int32);
  EXPECT_EQ(cummax(i, 0).dtype(), int32);
  expect_array(cummin(i, 0), {4}, {5, -3, -3, -3});
  // Exclusive: the dtype's lowest / largest value first (MLX).
  EXPECT_EQ(cummax(i, 0, false, false).to_vector<int32_t>(),
            (std::vector<int32_t>{std::numeric_limits<int32_t>::min(), 5, 5, 7}));
  EXPECT_EQ(cummin(i, 0, false, false).to_vector<int32_t>(),
            (std::vector<int32_t>{std::numeric_limits<int32_t>::max(), 5, -3, -3}));
  array u({3, 200, 1}, uint8);
  EXPECT_EQ(cummax(u, 0).dtype(), uint8);
  expect_array(cummax(u, 0), {3}, {3, 200, 200});
  expect_array(cummax(u, 0, false, false), {3}, {0, 3, 200});
  array l({int64_t(1) << 40, -(int64_t(1) << 41), int64_t(0)}, int64);
  EXPECT_EQ(cummin(l, 0).to_vector<int64_t>(),
            (std::vector<int64_t>{int64_t(1) << 40, -(int64_t(1) << 41), -(int64_t(1) << 41)}));
  // bool: max is a running "or", min a running "and".
  array b({false, true, false});
  EXPECT_EQ(cummax(b, 0).dtype(), bool_);
  expect_array(cummax(b, 0), {3}, {0, 1, 1});
  expect_array(cummin(array({true, true, false, true}), 0), {4}, {1, 1, 0, 0});
  expect_array(cummax(b, 0, false, false), {3}, {0, 0, 1});
  expect_array(cummin(b, 0, false, false), {3}, {1, 0, 0});
  array h({1.0f, 3.0f, 2.0f}, float16);
  EXPECT_EQ(cummax(h, 0).dtype(), float16);
  expect_array(cummax(h, 0), {3}, {1, 3, 3});
  expect_array(cummin(array({1.0f, -3.0f, 2.0f}, bfloat16), 0), {3}, {1, -3, -3});
}

TEST(Scan, LogCumSumExpValues) {
  // numpy: np.logaddexp.accumulate(x) (and x[::-1] for reverse), float64.
  array x({0.5, -1.0, 2.0, 3.0, -0.25}, float64);
  expect_array(logcumsumexp(x, 0), {5},
               {0.5, 0.7014132779827524, 2.241311296657157, 3.3840917012886904, 3.410156941899197}, 1e-12);
  expect_array(logcumsumexp(x, 0, true), {5},
               {3.410156941899197, 3.354150261131796, 3.3412135850738363, 3.038041371687783, -0.25}, 1e-12);
  expect_array(logcumsumexp(x, 0, false, false), {5},
               {-kInf, 0.5, 0.7014132779827524, 2.241311296657157, 3.3840917012886904}, 1e-12);
  expect_array(logcumsumexp(x, -1, true, false), {5},
               {3.354150261131796, 3.3412135850738363, 3.038041371687783, -0.25, -kInf}, 1e-12);
  array m({1.0, 2.0, 3.0, 4.0, 5.0, 6.0}, {2, 3}, float64);
  expect_array(logcumsumexp(m, 0), {2, 3},
               {1, 2, 3, 4.048587351573742, 5.048587351573742, 6.048587351573742}, 1e-12);
  expect_array(logcumsumexp(m, 1), {2, 3},
               {1, 2.313261687518223, 3.4076059644443806, 4, 5.313261687518223, 6.407605964444381}, 1e-12);
  expect_array(logcumsumexp(transpose(m), 1), {3, 2},
               {1, 4.048587351573742, 2, 5.048587351573742, 3, 6.048587351573742}, 1e-12);
  expect_array(logcumsumexp(m), {6},
               {1, 2.313261687518223, 3.4076059644443806, 4.440189698561196, 5.451914395937593, 6.456193316018123},
               1e-12);  // np.logaddexp.accumulate(np.arange(1., 7.))
}

TEST(Scan, LogCumSumExpIsStable) {
  // No overflow: np.logaddexp.accumulate([1000., 1000., 1000.]) = 1000, 1000 + log 2, 1000 + log 3.
  expect_array(logcumsumexp(array({1000.0f, 1000.0f, 1000.0f}), 0), {3}, {1000, 1000.6931471805599, 1001.098612288668});
  expect_array(logcumsumexp(array({-1000.0f, -1000.0f}), 0), {2}, {-1000, -999.3068528194401});
  // -inf adds nothing; a run of -inf stays -inf (never NaN).
  expect_array(logcumsumexp(array({-kInf, -kInf, 0.0, -kInf}, float64), 0), {4}, {-kInf, -kInf, 0, 0});
  expect_array(logcumsumexp(array({-kInf, -kInf}), 0, true, false), {2}, {-kInf, -kInf});
  // +inf wins; NaN propagates.
  expect_array(logcumsumexp(array({1.0, kInf, kInf, 2.0}, float64), 0), {4}, {1, kInf, kInf, kInf});
  expect_array(logcumsumexp(array({1.0, kNaN, 2.0}, float64), 0), {3}, {1, kNaN, kNaN});
  expect_array(logcumsumexp(array({kInf, -kInf}), 0), {2}, {kInf, kInf});
}

TEST(Scan, LogCumSumExpDtypes) {
  // Integers and bool compute in float32 (torch.logcumsumexp of [1., 2., 3.]).
  array i({1, 2, 3}, int32);
  EXPECT_EQ(logcumsumexp(i, 0).dtype(), float32);
  expect_array(logcumsumexp(i, 0), {3}, {1.0, 2.3132617473602295, 3.4076058864593506});
  EXPECT_EQ(logcumsumexp(array({true, false}), 0).dtype(), float32);
  expect_array(logcumsumexp(array({true, false}), 0), {2}, {1.0, 1.3132616875182228});
  // The half types keep their dtype and compute in float32: logaddexp(60000, 60000) is finite.
  array h({60000.0f, 60000.0f}, float16);
  EXPECT_EQ(logcumsumexp(h, 0).dtype(), float16);
  expect_array(logcumsumexp(h, 0), {2}, {60000, 60000}, 1e-3);
  EXPECT_EQ(logcumsumexp(array({1.0f, 2.0f}, bfloat16), 0).dtype(), bfloat16);
  EXPECT_EQ(logcumsumexp(array({1.0, 2.0}, float64), 0).dtype(), float64);
}

TEST(Scan, EmptyAndZeroDim) {
  for (auto f : {+[](const array& a, int ax) { return cumprod(a, ax); }, +[](const array& a, int ax) { return cummax(a, ax); },
                 +[](const array& a, int ax) { return cummin(a, ax); },
                 +[](const array& a, int ax) { return logcumsumexp(a, ax); }}) {
    expect_array(f(zeros({0}), 0), {0}, {});
    expect_array(f(zeros({2, 0}), 0), {2, 0}, {});
    expect_array(f(zeros({0, 3}), 1), {0, 3}, {});
  }
  // A 0-d array has no axis; the flattened forms give one element.
  expect_array(cumprod(array(3.0f)), {1}, {3});
  expect_array(cummax(array(3.0f)), {1}, {3});
  expect_array(cummin(array(3.0f), true, false), {1}, {kInf});
  expect_array(logcumsumexp(array(3.0f)), {1}, {3});
  // A size-1 axis.
  expect_array(cummax(array({4.0f, 5.0f}, {2, 1}), 1), {2, 1}, {4, 5});
  expect_array(logcumsumexp(array({4.0f, 5.0f}, {2, 1}), 1, false, false), {2, 1}, {-kInf, -kInf});
}

TEST(Scan, LargeArraysAcrossThreads) {
  // Many rows (the parallel path) along each axis agree with a hand-rolled loop.
  const int R = 300, C = 257;
  array x = rand_values({R, C}, 11);
  auto xv = x.to_vector<double>();
  auto y1 = cummax(x, 1).to_vector<double>();
  auto y0 = logcumsumexp(x, 0, true).to_vector<double>();
  for (int r = 0; r < R; r += 37) {
    double run = -kInf;
    for (int c = 0; c < C; ++c) {
      run = std::max(run, xv[r * C + c]);
      ASSERT_EQ(y1[r * C + c], run);
    }
  }
  for (int c = 0; c < C; c += 41) {
    double run = -kInf;
    for (int r = R - 1; r >= 0; --r) {
      const double v = xv[r * C + c];
      run = std::max(run, v) + std::log1p(std::exp(-std::abs(run - v)));
      ASSERT_NEAR(y0[r * C + c], run, 1e-12 * std::abs(run) + 1e-12);
    }
  }
}

TEST(Scan, StridedAxisMatchesContiguousAxis) {
  // A scan along a strided axis runs 64 neighbouring rows at a time; it must equal the one-row-at-a-time
  // scan of the same values laid out with the scan axis contiguous (130 rows: two full blocks and a
  // remainder), for every kind, direction and inclusiveness.
  array x = rand_values({37, 130}, 12);
  array xt = copy(transpose(x));  // (130, 37), contiguous
  using F = std::function<array(const array&, int, bool, bool)>;
  const F scans[] = {[](const array& a, int ax, bool r, bool i) { return cumsum(a, ax, r, i); },
                     [](const array& a, int ax, bool r, bool i) { return cumprod(a, ax, r, i); },
                     [](const array& a, int ax, bool r, bool i) { return cummax(a, ax, r, i); },
                     [](const array& a, int ax, bool r, bool i) { return cummin(a, ax, r, i); },
                     [](const array& a, int ax, bool r, bool i) { return logcumsumexp(a, ax, r, i); }};
  for (const F& f : scans) {
    for (bool reverse : {false, true}) {
      for (bool inclusive : {true, false}) {
        auto a = f(x, 0, reverse, inclusive).to_vector<double>();
        auto b = transpose(f(xt, 1, reverse, inclusive)).to_vector<double>();
        ASSERT_EQ(a.size(), b.size());
        for (size_t i = 0; i < a.size(); ++i) ASSERT_EQ(a[i], b[i]) << i;
      }
    }
  }
}

TEST(Scan, BadArguments) {
  array x = zeros({2, 3});
  EXPECT_THROW_MSG(cumprod(x, 2), std::out_of_range, "[cumprod]");
  EXPECT_THROW_MSG(cummax(x, -3), std::out_of_range, "[cummax]");
  EXPECT_THROW_MSG(cummin(x, 5), std::out_of_range, "[cummin]");
  EXPECT_THROW_MSG(logcumsumexp(x, 2), std::out_of_range, "[logcumsumexp]");
  EXPECT_THROW_MSG(cummax(array(1.0f), 0), std::out_of_range, "[cummax]");
  EXPECT_THROW_MSG(logcumsumexp(array(1), 0), std::out_of_range, "[logcumsumexp]");
}

TEST(ScanGrad, CumProd) {
  array x = rand_values({3, 4}, 1, 0.5, 1.5);
  for (bool reverse : {false, true}) {
    for (bool inclusive : {true, false}) {
      check_scan_grads([&](const array& a) { return cumprod(a, 1, reverse, inclusive); }, x);
      check_scan_grads([&](const array& a) { return cumprod(a, 0, reverse, inclusive); }, x);
    }
  }
  // Zeros (the exact path past the first zero) and a view.
  check_scan_grads([&](const array& a) { return cumprod(a, 0); }, array({2.0, 0.0, 3.0, 0.0, 1.5}, float64));
  check_scan_grads([&](const array& a) { return cumprod(transpose(a), 1, true, false); }, x);
  check_scan_grads([&](const array& a) { return cumprod(a); }, x);
}

TEST(ScanGrad, CumMaxCumMin) {
  array x = rand_values({3, 5}, 2);
  for (bool reverse : {false, true}) {
    for (bool inclusive : {true, false}) {
      check_scan_grads([&](const array& a) { return cummax(a, 1, reverse, inclusive); }, x);
      check_scan_grads([&](const array& a) { return cummin(a, 1, reverse, inclusive); }, x);
      check_scan_grads([&](const array& a) { return cummax(a, 0, reverse, inclusive); }, x);
      check_scan_grads([&](const array& a) { return cummin(a, -2, reverse, inclusive); }, x);
    }
  }
  check_scan_grads([&](const array& a) { return cummax(transpose(a), 1); }, x);
  check_scan_grads([&](const array& a) { return cummin(a); }, x);
  check_scan_grads([&](const array& a) { return cummax(a, 0); }, array({1.0}, float64));
}

TEST(ScanGrad, CumMaxTiesGoToTheLatest) {
  // The cotangent of each output goes to the element holding the running extreme; on ties the latest
  // one in scan order (MLX; PyTorch's cummax indices are [0, 1, 2, 2] here).
  auto g = grad([](const array& x) { return sum(cummax(x, 0)); })(array({1.0f, 3.0f, 3.0f, 2.0f}));
  expect_array(g, {4}, {1, 1, 2, 0});
  g = grad([](const array& x) { return sum(cummax(x, 0, true)); })(array({2.0f, 3.0f, 3.0f, 1.0f}));
  expect_array(g, {4}, {0, 2, 1, 1});
  g = grad([](const array& x) { return sum(cummin(x, 0, false, false)); })(array({2.0f, 1.0f, 5.0f}));
  expect_array(g, {3}, {1, 1, 0});  // outputs: +inf (constant), 2, 1
  // The jvp carries the tangent of the element held.
  auto [y, t] = jvp([](const array& x) { return cummax(x, 0, false, false); }, array({1.0f, 3.0f, 2.0f}),
                    array({10.0f, 20.0f, 30.0f}));
  expect_array(t, {3}, {0, 10, 20});
  // Second order through the owners (a constant index map): d2/dx2 of sum(cummax(x)^2) is 2 per use.
  auto gg = grad([](const array& x) { return sum(grad([](const array& z) { return sum(square(cummax(z, 0))); })(x)); });
  expect_array(gg(array({1.0f, 3.0f, 2.0f})), {3}, {2, 4, 0});
}

TEST(ScanGrad, LogCumSumExp) {
  array x = rand_values({3, 4}, 3);
  for (bool reverse : {false, true}) {
    for (bool inclusive : {true, false}) {
      check_scan_grads([&](const array& a) { return logcumsumexp(a, 1, reverse, inclusive); }, x);
      check_scan_grads([&](const array& a) { return logcumsumexp(a, 0, reverse, inclusive); }, x);
    }
  }
  check_scan_grads([&](const array& a) { return logcumsumexp(transpose(a), -1, true); }, x);
  check_scan_grads([&](const array& a) { return logcumsumexp(a); }, x);
  // Second order: the vjp is itself made of differentiable ops.
  check_scan_grads([&](const array& a) { return grad([](const array& z) { return sum(square(logcumsumexp(z, 0))); })(a); },
        rand_values({5}, 4));
}

TEST(ScanGrad, LogCumSumExpLargeInputs) {
  // torch: x = [1000, 1001, 999, -5] (float64), c = [1, -2, 0.5, 3]; (logcumsumexp(x, 0) * c).sum().backward().
  array x({1000.0, 1001.0, 999.0, -5.0}, float64);
  array c({1.0, -2.0, 0.5, 3.0}, float64);
  auto [out, g] = vjp([](const array& a) { return logcumsumexp(a, 0); }, x, c);
  expect_array(g, {4}, {1.318666805951866, 0.8662261879521589, 0.31510700609636344, 0.0}, 1e-12);
  // -inf inputs: the outputs that are still -inf are constant and pass nothing back (no NaN).
  auto [out2, g2] = vjp([](const array& a) { return logcumsumexp(a, 0); }, array({-kInf, 0.0, 1.0}, float64), array({1.0, 1.0, 1.0}, float64));
  auto gv = g2.to_vector<double>();
  EXPECT_EQ(gv[0], 0.0);
  EXPECT_TRUE(std::isfinite(gv[1]) && std::isfinite(gv[2]));
  // The exclusive scan's first output (-inf) has zero tangent.
  auto [y3, t3] = jvp([](const array& a) { return logcumsumexp(a, 0, false, false); }, array({1.0, 2.0}, float64), array({1.0, 1.0}, float64));
  expect_array(t3, {2}, {0, 1});
}

// Finite-difference checks that fill the gaps of the per-primitive suites: strided, broadcast, 0-d and
// empty inputs, both-sided broadcasting, keepdims and negative axes, the primitives that only appear
// inside other rules (CumProd, Pooling(max_gather), PermuteAxisInverse), and the collectives, whose
// rules run only with several processes. registry_test.cpp points at these tests.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "../test_utils.h"
#include "loom/autograd/check.h"
#include "loom/autograd/transforms.h"
#include "loom/distributed/distributed.h"
#include "loom/ops/conv.h"
#include "loom/ops/random.h"

using namespace loom;
using loom::testing::expect_array;

namespace {

array uniform(const Shape& s, double lo, double hi, unsigned seed) {
  return loom::testing::lcg_uniform(s, lo, hi, seed, 7);
}

// Values 0.1 apart in a scrambled order (no ties within a finite-difference step).
array distinct(const Shape& s, unsigned seed) {
  size_t n = 1;
  for (int d : s) n *= d;
  std::vector<double> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = 0.1 * double((i * 11 + seed) % n) - 0.05 * double(n);
  return array(v, s, float64);  // 11 must not divide n
}

void check_coverage_grads(const std::function<array(const std::vector<array>&)>& f, const std::vector<array>& xs,
           const std::string& what = "", double eps = 1e-6, double rtol = 1e-5, double atol = 1e-6) {
  auto r = check_grads([&](const std::vector<array>& p) { return std::vector<array>{f(p)}; }, xs, {}, eps, rtol, atol);
  EXPECT_TRUE(r.ok) << what << "\n" << r.report;
}

// The ops themselves: each takes MLX's trailing StreamOrDevice, passed as {} (the default stream).
using UnaryF = array (*)(const array&, StreamOrDevice);
using BinaryF = array (*)(const array&, const array&, StreamOrDevice);

}  // namespace

TEST(CoverageGrad, UnaryOnViews) {
  // Inputs within (0.2, 0.9): inside every domain (log, rsqrt, erfinv).
  array x = uniform({4, 3}, 0.2, 0.9, 1);
  array s = uniform({}, 0.2, 0.9, 2);
  array empty = uniform({0, 3}, 0.2, 0.9, 3);
  struct Named {
    const char* name;
    UnaryF f;
  };
  for (Named u : {Named{"negative", negative}, {"abs", abs}, {"square", square}, {"sqrt", sqrt}, {"rsqrt", rsqrt},
                  {"reciprocal", reciprocal}, {"exp", exp}, {"expm1", expm1}, {"log", log}, {"log1p", log1p},
                  {"log2", log2}, {"log10", log10}, {"sin", sin}, {"cos", cos}, {"tan", tan}, {"tanh", tanh},
                  {"sigmoid", sigmoid}, {"erf", erf}, {"erfinv", erfinv}, {"arcsin", arcsin}, {"arccos", arccos},
                  {"arctan", arctan}, {"sinh", sinh}, {"cosh", cosh}, {"arcsinh", arcsinh}, {"arctanh", arctanh}}) {
    auto f = [g = u.f](const array& v) { return g(v, {}); };
    std::string n = u.name;
    check_coverage_grads([f](const std::vector<array>& p) { return f(transpose(p[0])); }, {x}, n + " of a transpose");
    check_coverage_grads([f](const std::vector<array>& p) { return f(slice(p[0], {3, 0}, {-5, 3}, {-2, 2})); }, {x},
          n + " of a negative-step slice");
    check_coverage_grads([f](const std::vector<array>& p) { return f(broadcast_to(reshape(p[0], {1, 4, 3}), {2, 4, 3})); }, {x},
          n + " of a broadcast (stride 0)");
    check_coverage_grads([f](const std::vector<array>& p) { return f(p[0]); }, {s}, n + " of a 0-d array");
    check_coverage_grads([f](const std::vector<array>& p) { return f(p[0]); }, {empty}, n + " of an empty array");
  }
}

TEST(CoverageGrad, BinaryBroadcastAndViews) {
  array a = uniform({2, 1, 3}, 0.5, 2.0, 4);
  array b = uniform({4, 1}, 0.5, 2.0, 5);
  array s = uniform({}, 0.5, 2.0, 6);
  array m = uniform({3, 4}, 0.5, 2.0, 7);
  struct Named {
    const char* name;
    BinaryF f;
  };
  for (Named op : {Named{"add", add}, {"subtract", subtract}, {"multiply", multiply}, {"divide", divide},
                   {"power", power}, {"maximum", maximum}, {"minimum", minimum}, {"arctan2", arctan2},
                   {"logaddexp", logaddexp}}) {
    auto f = [g = op.f](const array& l, const array& r) { return g(l, r, {}); };
    std::string n = op.name;
    // Both operands broadcast: (2,1,3) with (4,1) gives (2,4,3).
    check_coverage_grads([f](const std::vector<array>& p) { return f(p[0], p[1]); }, {a, b}, n + " (2,1,3) x (4,1)");
    check_coverage_grads([f](const std::vector<array>& p) { return f(p[1], p[0]); }, {a, b}, n + " (4,1) x (2,1,3)");
    // A 0-d operand on either side, against a transposed view.
    check_coverage_grads([f](const std::vector<array>& p) { return f(transpose(p[0]), p[1]); }, {m, s}, n + " view x scalar");
    check_coverage_grads([f](const std::vector<array>& p) { return f(p[1], transpose(p[0])); }, {m, s}, n + " scalar x view");
    // The same array on both sides.
    check_coverage_grads([f](const std::vector<array>& p) { return f(p[0], p[0]); }, {b}, n + " x with itself");
  }
}

TEST(CoverageGrad, PiecewiseConstantBinary) {
  // floor_divide has zero derivative away from its jumps; remainder has slope 1 in a and
  // -floor(a / b) in b. The quotients here stay well away from integers.
  array a = array({0.7, 1.9, 2.6, -1.3, 3.55, -0.45}, {2, 3}, float64);
  array b = array({0.4, 1.1, -0.6}, {3}, float64);
  check_coverage_grads([](const std::vector<array>& p) { return floor_divide(p[0], p[1]) * p[0] + p[1]; }, {a, b}, "floor_divide");
  check_coverage_grads([](const std::vector<array>& p) { return floor_divide(transpose(p[0]), reshape(p[1], {3, 1})); }, {a, b},
        "floor_divide of views");
  check_coverage_grads([](const std::vector<array>& p) { return remainder(p[0], p[1]); }, {a, b}, "remainder");
  check_coverage_grads([](const std::vector<array>& p) { return remainder(transpose(p[0]), reshape(p[1], {3, 1})); }, {a, b},
        "remainder of views");
}

TEST(CoverageGrad, WhereBroadcastsAllThree) {
  array c = array({true, false, true, false, true, true}, {2, 1, 3});
  array x = uniform({1, 4, 1}, -1, 1, 8), y = uniform({4, 3}, -1, 1, 9);
  check_coverage_grads([&](const std::vector<array>& p) { return where(c, p[0], p[1]); }, {x, y}, "where (2,1,3) (1,4,1) (4,3)");
  check_coverage_grads([&](const std::vector<array>& p) { return where(c, transpose(p[1]), p[0]); }, {uniform({}, -1, 1, 10),
        uniform({3, 4}, -1, 1, 11)}, "where with a 0-d y and a transposed x");
}

TEST(CoverageGrad, CreationAndCopies) {
  array v = uniform({}, -1, 1, 12);
  check_coverage_grads([](const std::vector<array>& p) { return full({2, 3}, p[0]) * p[1]; }, {v, uniform({2, 3}, -1, 1, 13)},
        "full of a 0-d value");
  check_coverage_grads([](const std::vector<array>& p) { return full({4}, reshape(p[0], {1})); }, {uniform({1}, -1, 1, 14)},
        "full of a one-element value");
  array x = uniform({3, 2}, 0.5, 1.5, 15);
  check_coverage_grads([](const std::vector<array>& p) { return copy(p[0]) * p[0]; }, {x}, "copy");
  check_coverage_grads([](const std::vector<array>& p) { return copy(transpose(p[0])); }, {x}, "copy of a view");
  check_coverage_grads([](const std::vector<array>& p) { return contiguous(transpose(p[0])); }, {x}, "contiguous of a view (a copy)");
  check_coverage_grads([](const std::vector<array>& p) { return contiguous(p[0], true) * p[0]; }, {x}, "contiguous sharing its input");
  // Through float32 and back: a quadratic, so central differences are exact up to float32 rounding.
  check_coverage_grads([](const std::vector<array>& p) { return astype(astype(p[0], float32), float64) * p[0]; }, {x},
        "astype", 1e-2, 1e-4, 1e-5);
  check_coverage_grads([](const std::vector<array>& p) { return astype(transpose(p[0]), float32); }, {x}, "astype of a view", 1e-2,
        1e-4, 1e-5);
}

TEST(CoverageGrad, ReductionsOnViews) {
  array x = uniform({3, 4, 2}, 0.5, 1.5, 16);
  for (bool keep : {false, true}) {
    std::string k = keep ? " keepdims" : "";
    check_coverage_grads([keep](const std::vector<array>& p) { return sum(transpose(p[0], {2, 0, 1}), {-1, 0}, keep); }, {x},
          "sum of a transpose" + k);
    check_coverage_grads([keep](const std::vector<array>& p) { return prod(slice(p[0], {2, 0, 0}, {-4, 4, 2}, {-1, 2, 1}), -2, keep); },
          {x}, "prod of a strided slice" + k);
    check_coverage_grads([keep](const std::vector<array>& p) { return max(transpose(p[0]), keep); }, {x}, "max of everything" + k);
    check_coverage_grads([keep](const std::vector<array>& p) { return min(p[0], {-3, -1}, keep); }, {x}, "min, negative axes" + k);
    // A broadcast input: the gradient sums over the broadcast axis too.
    check_coverage_grads([keep](const std::vector<array>& p) { return sum(broadcast_to(p[0], {3, 5, 4}), 1, keep); },
          {uniform({3, 1, 4}, -1, 1, 17)}, "sum of a broadcast" + k);
    check_coverage_grads([keep](const std::vector<array>& p) { return max(broadcast_to(p[0], {2, 3}), 1, keep); },
          {uniform({3}, -1, 1, 18)}, "max of a broadcast (ties along the axis)" + k);
    check_coverage_grads([keep](const std::vector<array>& p) { return prod(p[0], 0, keep); }, {uniform({1, 3}, 0.5, 1.5, 19)},
          "prod over a size-1 axis" + k);
  }
  for (bool rev : {false, true}) {
    for (bool inc : {false, true}) {
      check_coverage_grads([rev, inc](const std::vector<array>& p) { return cumsum(transpose(p[0], {1, 2, 0}), -1, rev, inc); }, {x},
            "cumsum of a transpose");
    }
  }
  check_coverage_grads([](const std::vector<array>& p) { return sum(p[0], 1); }, {uniform({2, 0, 3}, -1, 1, 20)},
        "sum over an empty axis");
}

TEST(CoverageGrad, SecondOrderOfProdGoesThroughCumProd) {
  // prod's vjp multiplies exclusive running products (CumProd) from both ends; differentiating that
  // gradient again checks CumProd's own vjp and jvp, with and without zeros.
  for (int axis : {0, 1, -1}) {
    auto g = grad([axis](const std::vector<array>& p) { return sum(prod(p[0], axis) * p[1]); }, 0);
    auto r = check_grads([&](const std::vector<array>& p) { return g(p); },
                         {uniform({3, 4}, 0.5, 1.5, 21), uniform(axis == 0 ? Shape{4} : Shape{3}, -1, 1, 22)});
    EXPECT_TRUE(r.ok) << "axis " << axis << "\n" << r.report;
  }
  auto g = grad([](const std::vector<array>& p) { return prod(transpose(p[0])); }, 0);
  auto r = check_grads([&](const std::vector<array>& p) { return g(p); }, {uniform({2, 3}, 0.5, 1.5, 23)});
  EXPECT_TRUE(r.ok) << r.report;
  // Hand-computed: the Hessian of x0 x1 x2 at (1, 2, 3) applied to ones is (5, 4, 3); at (0, 2, 3)
  // it is (5, 3, 2) (the second derivatives stay exact at a zero).
  auto h = grad([](const array& x) { return sum(grad([](const array& y) { return prod(y); })(x)); });
  expect_array(h(array({1.0, 2.0, 3.0})), {3}, {5, 4, 3});
  expect_array(h(array({0.0, 2.0, 3.0})), {3}, {5, 3, 2});
  // Zeros: one, two, first or last along the reduced axes, several axes at once.
  array zs = array({0.0, 1.5, -0.5, 2.0, 1.2, 0.0, 0.7, 0.0, 0.9, 1.1, 0.0, -1.3, 0.8, 1.4, 0.6, 0.0}, {4, 4}, float64);
  for (std::vector<int> axes : {std::vector<int>{1}, {0}, {0, 1}}) {
    auto gz = grad([axes](const std::vector<array>& p) { return sum(prod(p[0], axes) * 1.5); }, 0);
    auto rz = check_grads([&](const std::vector<array>& p) { return gz(p); }, {zs});
    EXPECT_TRUE(rz.ok) << "prod over " << axes.size() << " axes with zeros\n" << rz.report;
  }
}

TEST(CoverageGrad, SliceUpdateBroadcastAndViews) {
  array src = uniform({4, 5}, -1, 1, 24);
  // A 0-d update broadcast over a negative-step slice; the source as a transposed view.
  check_coverage_grads([](const std::vector<array>& p) { return slice_update(p[0], p[1], {3, 4}, {0, 0}, {-2, -3}); },
        {src, uniform({}, -1, 1, 25)}, "0-d update over a negative-step slice");
  check_coverage_grads([](const std::vector<array>& p) { return slice_update(transpose(p[0]), p[1], {1, 0}, {3, 4}, {1, 2}); },
        {src, uniform({1, 2}, -1, 1, 26)}, "row update broadcast into a transposed source");
}

TEST(CoverageGrad, MaxPoolForwardTangentNode) {
  // The jvp of max_pool2d is a Pooling(max_gather) node of (x, t); checking it as a function of
  // both checks max_gather's own vjp (a max_scatter) and jvp.
  auto f = [](const std::vector<array>& p) {
    auto fn = [](const array& x) { return max_pool2d(x, {2, 2}, {1, 2}); };
    return jvp(fn, p[0], p[1]).second;
  };
  check_coverage_grads(f, {distinct({2, 4, 5, 3}, 27), uniform({2, 4, 5, 3}, -1, 1, 28)}, "max_pool2d tangent");
}

TEST(CoverageGrad, PermutationSecondOrderGoesThroughTheInverse) {
  // The vjp of a permutation is the inverse permutation; a gradient of a gradient runs its rules.
  array k = random::key(4);
  for (int axis : {0, 1}) {
    auto g = grad([&, axis](const std::vector<array>& p) {
      return sum(power(random::permutation(p[0], axis, k), array(3.0)) * reshape(arange(1.0, 13.0, 1.0, float64), {3, 4}));
    }, 0);
    auto r = check_grads([&](const std::vector<array>& p) { return g(p); }, {uniform({3, 4}, -1, 1, 29 + axis)});
    EXPECT_TRUE(r.ok) << "axis " << axis << "\n" << r.report;
  }
}

namespace {

// Runs inside each process of `mpirun -np 2`. The derivative of a collective is taken for the loss
// summed over ranks, L = sum_r <u_r, f_r(x_1..x_P)>, which is what the rules assume.
// Returns a description of every disagreement.
std::string distributed_worker() {
  namespace dist = loom::distributed;
  auto world = dist::init(true);
  const int rank = world.rank(), size = world.size();
  std::ostringstream bad;
  if (size < 2) return "the worker runs with a single process";
  const double eps = 1e-6, tol = 1e-6;
  const Shape shape{2, 3};
  const int n = 6;
  // Per-rank values, distinct across ranks so max/min pick one rank per element (which rank varies).
  std::vector<double> xv(n), uv(n), tv(n);
  for (int i = 0; i < n; ++i) {
    xv[i] = std::sin(1.3 * i + 2.1 * rank);
    uv[i] = std::cos(0.7 * i + 1.7 * rank);
    tv[i] = std::sin(0.9 * i - 1.1 * rank + 0.3);
  }
  array x(xv, shape, float64), u0(uv, shape, float64), t(tv, shape, float64);
  struct Named {
    const char* name;
    std::function<array(const array&)> f;
  };
  std::vector<Named> fns = {
      {"all_sum", [&](const array& a) { return dist::all_sum(a * a, world); }},
      {"all_mean", [&](const array& a) { return dist::all_mean(exp(a), world); }},
      {"all_max", [&](const array& a) { return dist::all_max(a, world); }},
      {"all_min", [&](const array& a) { return dist::all_min(a * 2.0, world); }},
      {"all_gather", [&](const array& a) { return sin(dist::all_gather(transpose(a), world)); }},
      {"sum_scatter", [&](const array& a) { return cos(dist::sum_scatter(a * a, world)); }},
      // all_to_all in its two forms: blocks of axis 0 kept there, and moved to axis 1.
      {"all_to_all", [&](const array& a) { return dist::all_to_all(a * a, world); }},
      {"all_to_all(0, 1)", [&](const array& a) { return sin(dist::all_to_all(a, 0, 1, world)); }},
      {"broadcast", [&](const array& a) { return exp(dist::broadcast(a * 3.0, size - 1, world)); }},
      // The flat forms: one collective over several arrays (one a strided view), as a 1-D result.
      {"all_sum_flat", [&](const array& a) { return dist::all_sum_flat({a * a, transpose(a)}, world); }},
      {"all_mean_flat", [&](const array& a) { return dist::all_mean_flat({exp(a), sum(a, 0), a}, world); }},
  };
  for (auto& [name, f] : fns) {
    array y = f(x);
    y.eval();
    // Cotangents of the output's shape (all_gather's is larger), different per rank.
    std::vector<double> cv(y.size());
    for (size_t i = 0; i < cv.size(); ++i) cv[i] = uv[i % n] + 0.1 * double(i);
    array u(cv, y.shape(), float64);
    auto loss = [&, &f = f](const array& a) {
      array l = sum(f(a) * u);
      return dist::all_sum(l, world).item<double>();
    };
    // vjp: rank q's gradient against central differences of L in x_q (one rank moves at a time).
    auto g = vjp(f, x, u).second.to_vector<double>();
    for (int q = 0; q < size; ++q) {
      for (int k = 0; k < n; ++k) {
        std::vector<double> p = xv, m = xv;
        if (rank == q) {
          p[k] += eps;
          m[k] -= eps;
        }
        double num = (loss(array(p, shape, float64)) - loss(array(m, shape, float64))) / (2 * eps);
        if (rank == q && std::abs(num - g[k]) > tol * (1 + std::abs(num))) {
          bad << name << " vjp, rank " << rank << " element " << k << ": " << g[k] << " vs " << num << "\n";
        }
      }
    }
    // jvp: every rank moves along its own tangent at once; each rank's output tangent is checked.
    auto jt = jvp(f, x, t).second.to_vector<double>();
    std::vector<double> p = xv, m = xv;
    for (int k = 0; k < n; ++k) {
      p[k] += eps * tv[k];
      m[k] -= eps * tv[k];
    }
    auto yp = f(array(p, shape, float64)).to_vector<double>(), ym = f(array(m, shape, float64)).to_vector<double>();
    for (size_t e = 0; e < jt.size(); ++e) {
      double num = (yp[e] - ym[e]) / (2 * eps);
      if (std::abs(num - jt[e]) > tol * (1 + std::abs(num))) {
        bad << name << " jvp, rank " << rank << " element " << e << ": " << jt[e] << " vs " << num << "\n";
      }
    }
  }
  return bad.str();
}

}  // namespace

TEST(DistributedGrad, CollectivesUnderMpirun) {
  if (std::getenv("LOOM_DISTRIBUTED_GRAD_WORKER")) {
    std::string bad = distributed_worker();
    EXPECT_TRUE(bad.empty()) << bad;
    return;
  }
  if (!loom::distributed::is_available() || std::system("command -v mpirun > /dev/null 2>&1") != 0) {
    GTEST_SKIP() << "no MPI launcher: the collectives' rules cannot run in one process";
  }
  char exe[4096];
  ssize_t len = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
  ASSERT_GT(len, 0);
  exe[len] = 0;
  std::string log = ::testing::TempDir() + "loom_distributed_grad_" + std::to_string(getpid()) + ".log";
  // OpenMPI's components leak at MPI_Finalize (see tests/CMakeLists.txt): no leak check_coverage_grads in the workers.
  std::string cmd = std::string("mpirun -np 2 --oversubscribe --bind-to none ") +
                    (getuid() == 0 ? "--allow-run-as-root " : "") + "-x LOOM_DISTRIBUTED_GRAD_WORKER=1 -x ASAN_OPTIONS=detect_leaks=0 " + exe +
                    " --gtest_color=no --gtest_filter=DistributedGrad.CollectivesUnderMpirun > " + log + " 2>&1";
  int rc = std::system(cmd.c_str());
  std::ifstream f(log);
  std::stringstream out;
  out << f.rdbuf();
  std::remove(log.c_str());
  EXPECT_EQ(rc, 0) << cmd << "\n" << out.str();
  // Both ranks ran the worker and passed.
  std::string s = out.str();
  size_t passed = 0;
  for (size_t pos = s.find("[  PASSED  ] 1 test"); pos != std::string::npos; pos = s.find("[  PASSED  ] 1 test", pos + 1)) {
    ++passed;
  }
  EXPECT_EQ(passed, 2u) << s;
}

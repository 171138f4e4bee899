// fast::softmax / fast::log_softmax: the same forward as loom::softmax, and a fused backward that
// agrees with the gradient loom::softmax writes with ops; derivatives of every order by finite
// differences.
#include "../test_utils.h"
#include "loom/core/primitive.h"

namespace loom {
namespace {

using testing::lcg_uniform;

array fast_fn(const array& x, bool take_log) { return take_log ? fast::log_softmax(x) : fast::softmax(x); }
array ops_fn(const array& x, bool take_log) { return take_log ? log_softmax(x, -1) : softmax(x, -1); }

void expect_bits(array a, array b) {
  ASSERT_EQ(a.shape(), b.shape());
  ASSERT_EQ(a.dtype(), b.dtype());
  auto x = a.to_vector<double>(), y = b.to_vector<double>();
  for (size_t i = 0; i < x.size(); ++i) {
    if (std::isnan(y[i])) {
      EXPECT_TRUE(std::isnan(x[i])) << "at " << i;
    } else {
      EXPECT_EQ(x[i], y[i]) << "at " << i;
    }
  }
}

void expect_softmax_close(array a, array b, double tol) {
  ASSERT_EQ(a.shape(), b.shape());
  auto x = a.to_vector<double>(), y = b.to_vector<double>();
  for (size_t i = 0; i < x.size(); ++i) EXPECT_NEAR(x[i], y[i], tol * (1 + std::abs(y[i]))) << "at " << i;
}

TEST(FastSoftmax, KnownValuesAndDtypes) {
  array x({1.0f, 2.0f, 3.0f}, {1, 3});
  testing::expect_array(fast::softmax(x), {1, 3}, {0.09003057317038043, 0.24472847105479759, 0.6652409557748217}, 1e-6);
  testing::expect_array(fast::log_softmax(x), {1, 3}, {-2.4076059644443806, -1.4076059644443806, -0.4076059644443806},
                        1e-6);
  EXPECT_EQ(fast::softmax(array({1, 2, 3})).dtype(), float32);
  EXPECT_EQ(fast::softmax(astype(x, float16)).dtype(), float16);
  EXPECT_EQ(fast::log_softmax(astype(x, float64)).dtype(), float64);
  testing::expect_array(fast::softmax(zeros({0, 3})), {0, 3}, {});
  EXPECT_THROW_MSG(fast::softmax(array(1.0f)), std::invalid_argument, "[softmax] needs an array with at least one axis");
}

TEST(FastSoftmax, SameValuesAsTheOpAndTheSameGradients) {
  for (bool take_log : {false, true}) {
    SCOPED_TRACE(take_log ? "log_softmax" : "softmax");
    // Rows of 130 (not a multiple of the 16 lanes), enough of them to split over threads; a
    // transposed input; float64; special values.
    array t = transpose(astype(lcg_uniform({130, 7}, -4, 4, 3), float32));
    std::vector<array> xs = {astype(lcg_uniform({3, 100, 130}, -6, 6, 1), float32), t, lcg_uniform({5, 33}, -8, 8, 7),
                             array({-INFINITY, 0.0f, 1.0f, INFINITY, NAN, 2.0f}, {2, 3})};
    for (const array& x : xs) {
      expect_bits(fast_fn(x, take_log), ops_fn(x, take_log));
      array g = astype(lcg_uniform(x.shape(), -1, 1, 2), x.dtype());
      auto grad_of = [&](bool use_fast) {
        return vjp([&](const array& z) { return use_fast ? fast_fn(z, take_log) : ops_fn(z, take_log); }, x, g).second;
      };
      array gf = grad_of(true), go = grad_of(false);
      if (x.size() == 6) {
        expect_bits(isnan(gf), isnan(go));
      } else {
        expect_softmax_close(gf, go, x.dtype() == float64 ? 1e-14 : 2e-6);
      }
      EXPECT_EQ(std::string(vjp([&](const array& z) { return fast_fn(z, take_log); }, x, g).second.primitive().name()),
                take_log ? "LogSoftmaxBackward" : "SoftmaxBackward");
    }
  }
}

TEST(FastSoftmax, GradientsMatchFiniteDifferences) {
  array x = lcg_uniform({3, 5}, -2, 2, 10), g = lcg_uniform({3, 5}, -1, 1, 11);
  for (bool take_log : {false, true}) {
    SCOPED_TRACE(take_log ? "log_softmax" : "softmax");
    VectorFn f = [take_log](const std::vector<array>& p) { return std::vector<array>{fast_fn(p[0], take_log)}; };
    auto r = check_grads(f, {x});
    EXPECT_TRUE(r.ok) << r.report;
    // The fused backward as a function of x and the cotangent: its vjp and jvp (through the reference).
    auto backward = [f](const std::vector<array>& p) { return vjp(f, {p[0]}, {p[1]}).second; };
    r = check_grads(backward, {x, g});
    EXPECT_TRUE(r.ok) << r.report;
  }
}

}  // namespace
}  // namespace loom

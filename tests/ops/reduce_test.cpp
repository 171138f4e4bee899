// Reductions, arg-reductions, var/std, logsumexp, softmax and cumsum: hand-computed values, axes
// (negative, multiple, keepdims, repeated), dtypes, empty arrays, NaN and infinities, strided inputs.
#include <cmath>
#include <limits>

#include "../test_utils.h"

using namespace loom;
using loom::testing::kInf;
using loom::testing::kNaN;
using loom::testing::kInfF;
using loom::testing::kNaNF;
using loom::testing::expect_array;

namespace {


// x[i][j][k] = 12 i + 4 j + k, shape (2,3,4)
array iota234(Dtype d = float32) { return reshape(arange(0.0, 24.0, 1.0, d), {2, 3, 4}); }

}  // namespace

TEST(Reduce, SumAxes) {
  array x = iota234();
  EXPECT_EQ(sum(x).item<double>(), 276.0);
  EXPECT_EQ(sum(x).shape(), Shape{});
  std::vector<double> s0;
  for (int i = 0; i < 12; ++i) s0.push_back(2 * i + 12);
  expect_array(sum(x, 0), {3, 4}, s0);
  expect_array(sum(x, -3), {3, 4}, s0);
  expect_array(sum(x, -1), {2, 3}, {6, 22, 38, 54, 70, 86});
  expect_array(sum(x, 2, true), {2, 3, 1}, {6, 22, 38, 54, 70, 86});
  expect_array(sum(x, {0, 2}), {3}, {60, 92, 124});
  expect_array(sum(x, {2, 0}), {3}, {60, 92, 124});
  expect_array(sum(x, {-3, -1}, true), {1, 3, 1}, {60, 92, 124});
  expect_array(sum(x, {0, 1}), {4}, {60, 66, 72, 78});
  expect_array(sum(x, {0, 1, 2}, true), {1, 1, 1}, {276});
  expect_array(sum(x, true), {1, 1, 1}, {276});
  // an empty axes list reduces nothing
  expect_array(sum(x, std::vector<int>{}), {2, 3, 4}, x.to_vector<double>());
  // 0-d input
  expect_array(sum(array(5.0f)), {}, {5});
  expect_array(sum(array(5.0f), true), {}, {5});
}

TEST(Reduce, NothingToReduceKeepsTheReductionDtype) {
  // The result dtype must not depend on whether any axis is reduced.
  array f({0.5f, 0.0f, -2.0f});
  array a = all(f, std::vector<int>{});
  EXPECT_EQ(a.dtype(), bool_);
  expect_array(a, {3}, {1, 0, 1});
  EXPECT_EQ(any(array(2.0f)).dtype(), bool_);
  EXPECT_EQ(any(array(2.0f)).item<bool>(), true);
  EXPECT_EQ(all(array(0)).dtype(), bool_);
  EXPECT_EQ(all(array(0)).item<bool>(), false);
  EXPECT_EQ(sum(array({true, false}), std::vector<int>{}).dtype(), int32);
  EXPECT_EQ(sum(array(true)).dtype(), int32);
  EXPECT_EQ(sum(array(true)).item<int>(), 1);
  EXPECT_EQ(prod(array(7, uint8)).dtype(), uint32);  // MLX: unsigned up to 32 bits sum and multiply in uint32
  EXPECT_EQ(max(array(7, uint8)).dtype(), uint8);
  EXPECT_EQ(sum(array(3.0f)).dtype(), float32);
  EXPECT_EQ(mean(array(3)).dtype(), float32);
  expect_array(mean(array(3)), {}, {3});
  expect_array(var(array(3.0f)), {}, {0});
  expect_array(logsumexp(array(3.0f)), {}, {3});
  expect_array(softmax(array({2.0f}), 0), {1}, {1});
}

TEST(Reduce, SumStridedInputs) {
  array x = iota234();
  // transposed (4,3,2): sum over the middle axis = sum over j of x[i][j][k] for the (k, i) cells
  array t = transpose(x);
  std::vector<double> want;
  for (int k = 0; k < 4; ++k)
    for (int i = 0; i < 2; ++i) want.push_back(36 * i + 12 + 3 * k);
  expect_array(sum(t, 1), {4, 2}, want);
  expect_array(sum(t, {0, 1}), {2}, {66, 210});
  // negative steps: reverse the last axis and take every other j
  array r = slice(x, {0, 0, 3}, {2, 3, -5}, {1, 2, -1});  // (2,2,4): j in {0,2}, k reversed
  ASSERT_EQ(r.shape(), (Shape{2, 2, 4}));
  expect_array(sum(r, -1), {2, 2}, {6, 38, 54, 86});
  expect_array(sum(r, 0), {2, 4}, {18, 16, 14, 12, 34, 32, 30, 28});
  expect_array(sum(r), {}, {184});
  // broadcast input: each row sums a broadcast value
  array b = broadcast_to(array({1.0f, 2.0f, 3.0f}, {3, 1}), {3, 5});
  expect_array(sum(b, 1), {3}, {5, 10, 15});
  expect_array(sum(b, 0), {5}, {6, 6, 6, 6, 6});
  expect_array(sum(broadcast_to(array(2.0f), {7, 9})), {}, {126});
  // a longer reduction, not a multiple of the 8 accumulation lanes, on a sliced view
  array big = arange(0.0, 1000.0, 1.0, float64);
  expect_array(sum(slice(big, {3}, {1000}, {7})), {}, {71500});  // 3 + 10 + ... + 997 (143 terms)
}

TEST(Reduce, SumDtypes) {
  // bool and uint8 sum into int32 (no wraparound)
  array b({true, true, false, true});
  EXPECT_EQ(sum(b).dtype(), int32);
  EXPECT_EQ(sum(b).item<int>(), 3);
  array u({200, 100, 250}, uint8);
  EXPECT_EQ(sum(u).dtype(), uint32);
  EXPECT_EQ(sum(u).item<int>(), 550);
  EXPECT_EQ(prod(array({16, 16, 2}, uint8)).dtype(), uint32);
  EXPECT_EQ(prod(array({16, 16, 2}, uint8)).item<int>(), 512);
  EXPECT_EQ(prod(b).dtype(), int32);
  EXPECT_EQ(prod(b).item<int>(), 0);
  array i64(std::vector<int64_t>{int64_t(1) << 40, int64_t(1) << 40, 3}, {3});
  EXPECT_EQ(sum(i64).dtype(), int64);
  EXPECT_EQ(sum(i64).item<int64_t>(), (int64_t(1) << 41) + 3);
  EXPECT_EQ(sum(array({-5, 7, 1})).dtype(), int32);
  EXPECT_EQ(sum(array({-5, 7, 1})).item<int>(), 3);
  // half types accumulate in float32: 4096 ones (float16 alone stalls at 2048), 1000 ones (bfloat16 alone
  // stalls at 256)
  array h = ones({4096}, float16);
  EXPECT_EQ(sum(h).dtype(), float16);
  EXPECT_EQ(sum(h).item<float>(), 4096.0f);
  EXPECT_EQ(sum(ones({1000}, bfloat16)).item<float>(), 1000.0f);
  EXPECT_EQ(sum(reshape(ones({4096}, float16), {64, 64}), 0).to_vector<float>(), std::vector<float>(64, 64.0f));
  EXPECT_EQ(sum(array({0.1, 0.2, 0.3}, float64)).dtype(), float64);
  EXPECT_NEAR(sum(array({0.1, 0.2, 0.3}, float64)).item<double>(), 0.6, 1e-15);
  // infinities and NaN
  expect_array(sum(array({1.0f, kInfF, 2.0f})), {}, {kInf});
  expect_array(sum(array({kInf, -kInf})), {}, {kNaN});
  expect_array(sum(array({1.0, kNaN}, float64)), {}, {kNaN});
}

TEST(Reduce, EmptyArrays) {
  // sum, prod, all and any have identities
  expect_array(sum(zeros({0, 3}), 0), {3}, {0, 0, 0});
  expect_array(sum(zeros({0})), {}, {0});
  expect_array(prod(zeros({0, 2}), 0), {2}, {1, 1});
  expect_array(sum(zeros({3, 0}), 0), {0}, {});
  expect_array(sum(zeros({3, 0}), 1), {3}, {0, 0, 0});
  expect_array(sum(zeros({3, 0}), 1, true), {3, 1}, {0, 0, 0});
  EXPECT_EQ(sum(zeros({0}, uint8)).dtype(), uint32);
  EXPECT_EQ(all(zeros({0})).item<bool>(), true);
  EXPECT_EQ(any(zeros({0})).item<bool>(), false);
  expect_array(all(zeros({2, 0}), 1), {2}, {1, 1});
  // max and min over an empty axis have no identity; over a non-empty one the result is just empty
  EXPECT_THROW_MSG(max(zeros({0, 3}), 0), std::invalid_argument, "[max]");
  EXPECT_THROW_MSG(min(zeros({0, 3})), std::invalid_argument, "[min]");
  EXPECT_THROW_MSG(max(zeros({0, 3}), 0), std::invalid_argument, "(0,3)");
  expect_array(max(zeros({0, 3}), 1), {0}, {});
  // mean and var of nothing are NaN
  expect_array(mean(zeros({0})), {}, {kNaN});
  expect_array(mean(zeros({0, 2}), 0), {2}, {kNaN, kNaN});
  expect_array(var(zeros({0})), {}, {kNaN});
  // logsumexp of nothing is log(0)
  expect_array(logsumexp(zeros({0})), {}, {-kInf});
  expect_array(logsumexp(zeros({2, 0}), 1), {2}, {-kInf, -kInf});
  // argmax over an empty axis
  EXPECT_THROW_MSG(argmax(zeros({0})), std::invalid_argument, "[argmax]");
  EXPECT_THROW_MSG(argmin(zeros({2, 0}), 1), std::invalid_argument, "[argmin]");
  expect_array(argmax(zeros({0, 3}), 1), {0}, {});
  // cumsum of nothing
  expect_array(cumsum(zeros({0}), 0), {0}, {});
  expect_array(cumsum(zeros({2, 0}), 0), {2, 0}, {});
  expect_array(softmax(zeros({0, 3})), {0, 3}, {});
  expect_array(softmax(zeros({3, 0})), {3, 0}, {});
  expect_array(log_softmax(zeros({3, 0}), 1), {3, 0}, {});
  EXPECT_EQ(softmax(zeros({2, 0}, int32)).dtype(), float32);
}

TEST(Reduce, ProdMeanAllAny) {
  array x({1.0f, 2.0f, 3.0f, 4.0f, -0.5f, 2.0f}, {2, 3});
  expect_array(prod(x), {}, {-24});
  expect_array(prod(x, 0), {3}, {4, -1, 6});
  expect_array(prod(x, -1, true), {2, 1}, {6, -4});
  expect_array(prod(transpose(x), 0), {2}, {6, -4});
  EXPECT_EQ(prod(array({3, -4, 5})).item<int>(), -60);
  expect_array(mean(x), {}, {11.5 / 6});
  expect_array(mean(x, 0), {3}, {2.5, 0.75, 2.5});
  expect_array(mean(x, {-1}, true), {2, 1}, {2, 11.0 / 6});
  expect_array(mean(transpose(x), 1), {3}, {2.5, 0.75, 2.5});
  // integer and bool means are float32
  EXPECT_EQ(mean(array({1, 2})).dtype(), float32);
  expect_array(mean(array({1, 2})), {}, {1.5});
  expect_array(mean(array({true, false, false, false})), {}, {0.25});
  EXPECT_EQ(mean(array({1.0f, 2.0f}, float16)).dtype(), float16);
  expect_array(mean(array({1.0f, 2.0f}, float16)), {}, {1.5});
  EXPECT_EQ(mean(array({1.0, 2.0}, float64)).dtype(), float64);
  // all / any (NaN is truthy)
  array b({1.0f, 0.0f, kNaNF, 2.0f}, {2, 2});
  EXPECT_EQ(all(b).dtype(), bool_);
  expect_array(all(b), {}, {0});
  expect_array(any(b), {}, {1});
  expect_array(all(b, 1), {2}, {0, 1});
  expect_array(any(b, 0, true), {1, 2}, {1, 1});
  expect_array(all(transpose(b), 1), {2}, {1, 0});
  expect_array(any(array({0, 0, 3})), {}, {1});
  expect_array(all(array({1, 1, 0}, uint8)), {}, {0});
  expect_array(any(zeros({2, 3}, bool_), {0, 1}), {}, {0});
}

TEST(Reduce, MaxMinNaNAndInfinities) {
  for (Dtype d : {float32, float64, float16, bfloat16}) {
    SCOPED_TRACE(to_string(d));
    expect_array(max(array({1.0, kNaN, 3.0}, d)), {}, {kNaN});
    expect_array(min(array({1.0, kNaN, 3.0}, d)), {}, {kNaN});
    expect_array(max(array({kNaN, 1.0}, d)), {}, {kNaN});
    expect_array(min(array({1.0, kNaN}, d)), {}, {kNaN});
    expect_array(max(array({-kInf, -kInf}, d)), {}, {-kInf});
    expect_array(min(array({kInf, 5.0}, d)), {}, {5});
    expect_array(max(array({-3.0, -1.0, -2.0}, d)), {}, {-1});
    // NaN in one accumulation lane of a longer row
    std::vector<double> v(21);
    for (int i = 0; i < 21; ++i) v[i] = i;
    v[13] = kNaN;
    expect_array(max(array(v, {21}, d)), {}, {kNaN});
    expect_array(min(array(v, {21}, d)), {}, {kNaN});
    v[13] = 13;
    expect_array(max(array(v, {21}, d)), {}, {20});
    expect_array(min(array(v, {21}, d)), {}, {0});
    // per-row NaN: only the row that holds it
    array m(std::vector<double>{1, kNaN, 2, 3, 4, 5}, {2, 3}, d);
    expect_array(max(m, 1), {2}, {kNaN, 5});
    expect_array(min(m, 0), {3}, {1, kNaN, 2});
    expect_array(max(transpose(m), 0), {2}, {kNaN, 5});
  }
}

TEST(Reduce, MaxMinAxesAndDtypes) {
  array x = iota234();
  expect_array(max(x, 0), {3, 4}, {12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23});
  expect_array(max(x, {0, 2}), {3}, {15, 19, 23});
  expect_array(min(x, {-1, -2}, true), {2, 1, 1}, {0, 12});
  expect_array(max(x, true), {1, 1, 1}, {23});
  expect_array(min(slice(x, {1, 2, 3}, {-3, -4, -5}, {-1, -1, -1}), 2), {2, 3}, {20, 16, 12, 8, 4, 0});
  EXPECT_EQ(max(array({-5, 7, 3})).dtype(), int32);
  EXPECT_EQ(max(array({-5, 7, 3})).item<int>(), 7);
  EXPECT_EQ(min(array({200, 7, 255}, uint8)).item<int>(), 7);
  EXPECT_EQ(max(array({200, 7, 255}, uint8)).dtype(), uint8);
  EXPECT_EQ(max(array({200, 7, 255}, uint8)).item<int>(), 255);
  array i64(std::vector<int64_t>{std::numeric_limits<int64_t>::min(), -1}, {2});
  EXPECT_EQ(max(i64).item<int64_t>(), -1);
  EXPECT_EQ(min(i64).item<int64_t>(), std::numeric_limits<int64_t>::min());
  array b({false, true, false});
  EXPECT_EQ(max(b).dtype(), bool_);
  EXPECT_EQ(max(b).item<bool>(), true);
  EXPECT_EQ(min(b).item<bool>(), false);
  EXPECT_EQ(max(array({1.5f, -2.0f}, float16)).dtype(), float16);
}

TEST(Reduce, BadAxes) {
  array x = iota234();
  EXPECT_THROW_MSG(sum(x, 3), std::out_of_range, "[sum]");
  EXPECT_THROW_MSG(sum(x, -4), std::out_of_range, "axis -4");
  EXPECT_THROW_MSG(sum(x, {0, -3}), std::invalid_argument, "[sum] axis 0 is repeated");
  EXPECT_THROW_MSG(prod(x, {1, 1}), std::invalid_argument, "[prod]");
  EXPECT_THROW_MSG(max(x, 5), std::out_of_range, "[max]");
  EXPECT_THROW_MSG(min(x, {2, -1}), std::invalid_argument, "[min]");
  EXPECT_THROW_MSG(all(x, 3), std::out_of_range, "[all]");
  EXPECT_THROW_MSG(any(x, {0, 0}), std::invalid_argument, "[any]");
  EXPECT_THROW_MSG(mean(x, 3), std::out_of_range, "[mean]");
  EXPECT_THROW_MSG(mean(x, {1, -2}), std::invalid_argument, "[mean]");
  EXPECT_THROW_MSG(var(x, 3), std::out_of_range, "[var]");
  EXPECT_THROW_MSG(var(x, {0, 0}), std::invalid_argument, "[var]");
  EXPECT_THROW_MSG(loom::std(x, -4), std::out_of_range, "[std]");
  EXPECT_THROW_MSG(logsumexp(x, 3), std::out_of_range, "[logsumexp]");
  EXPECT_THROW_MSG(logsumexp(x, {1, 1}), std::invalid_argument, "[logsumexp]");
  EXPECT_THROW_MSG(softmax(x, 3), std::out_of_range, "[softmax]");
  EXPECT_THROW_MSG(softmax(x, {0, 0}), std::invalid_argument, "[softmax]");
  EXPECT_THROW_MSG(log_softmax(x, -4), std::out_of_range, "[log_softmax]");
  EXPECT_THROW_MSG(argmax(x, 3), std::out_of_range, "[argmax]");
  EXPECT_THROW_MSG(argmin(x, -4), std::out_of_range, "[argmin]");
  EXPECT_THROW_MSG(cumsum(x, 3), std::out_of_range, "[cumsum]");
  EXPECT_THROW_MSG(sum(array(1.0f), 0), std::out_of_range, "[sum]");
  EXPECT_THROW_MSG(argmax(array(1.0f), 0), std::out_of_range, "[argmax]");
}

TEST(Reduce, VarStd) {
  array x({1.0f, 2.0f, 3.0f, 4.0f});
  expect_array(var(x), {}, {1.25});
  expect_array(var(x, false, 1), {}, {5.0 / 3});
  expect_array(loom::std(x), {}, {1.118033988749895});
  expect_array(loom::std(x, false, 1), {}, {1.2909944487358056});
  array m({1.0f, 2.0f, 3.0f, 4.0f, 6.0f, 8.0f}, {2, 3});
  expect_array(var(m, 1), {2}, {2.0 / 3, 8.0 / 3});
  expect_array(var(m, -1, true, 1), {2, 1}, {1, 4});
  expect_array(var(m, 0), {3}, {2.25, 4, 6.25});
  expect_array(loom::std(m, 0, false, 1), {3}, {2.1213203435596424, 2.8284271247461903, 3.5355339059327378});
  expect_array(var(m, {0, 1}), {}, {(1 + 4 + 9 + 16 + 36 + 64) / 6.0 - 4.0 * 4.0});
  expect_array(var(transpose(m), 1, true), {3, 1}, {2.25, 4, 6.25});
  // two-pass: a large common offset does not destroy the result
  expect_array(var(array({1e8 + 1, 1e8 + 2, 1e8 + 3, 1e8 + 4}, float64)), {}, {1.25}, 1e-9);
  // integer input gives float32; half stays half
  EXPECT_EQ(var(array({1, 2, 3, 4})).dtype(), float32);
  expect_array(var(array({1, 2, 3, 4})), {}, {1.25});
  EXPECT_EQ(loom::std(array({1.0f, 3.0f}, bfloat16)).dtype(), bfloat16);
  expect_array(loom::std(array({1.0f, 3.0f}, bfloat16)), {}, {1});
  expect_array(var(array({1.0f, 2.0f, 3.0f, 4.0f}, float16)), {}, {1.25}, 1e-3);
  // a single element has zero variance; ddof >= n has no defined variance
  expect_array(var(array({7.0f})), {}, {0});
  EXPECT_FALSE(std::isfinite(var(array({7.0f}), false, 1).item<float>()));
  EXPECT_FALSE(std::isfinite(var(array({1.0f, 2.0f}), false, 2).item<float>()));
}

TEST(Reduce, LogSumExp) {
  expect_array(logsumexp(array({1.0f, 2.0f, 3.0f})), {}, {3.4076059644443806});
  // huge values do not overflow, tiny ones do not underflow to -inf
  expect_array(logsumexp(array({1000.0f, 1000.0f})), {}, {1000.6931471805599});
  expect_array(logsumexp(array({-1000.0f, -1000.0f})), {}, {-999.3068528194401});
  expect_array(logsumexp(array({1e308, 1e308}, float64)), {}, {1e308}, 1e-12);
  // infinities
  expect_array(logsumexp(array({-kInf, -kInf})), {}, {-kInf});
  expect_array(logsumexp(array({-kInf, 0.0}, float64)), {}, {0}, 1e-12);
  expect_array(logsumexp(array({kInf, 1.0}, float64)), {}, {kInf});
  expect_array(logsumexp(array({kInf, -kInf})), {}, {kInf});
  expect_array(logsumexp(array({kNaN, 1.0}, float64)), {}, {kNaN});
  // axes
  array x = reshape(arange(0.0, 8.0, 1.0, float64), {2, 4});
  expect_array(logsumexp(x, 1), {2}, {3.4401896985611953, 7.440189698561196}, 1e-12);
  expect_array(logsumexp(x, -1, true), {2, 1}, {3.4401896985611953, 7.440189698561196}, 1e-12);
  expect_array(logsumexp(transpose(x), 0), {2}, {3.4401896985611953, 7.440189698561196}, 1e-12);
  expect_array(logsumexp(reshape(x, {2, 2, 2}), {1, 2}), {2}, {3.4401896985611953, 7.440189698561196}, 1e-12);
  // a row of -inf next to a normal row
  array r({-kInf, -kInf, 1.0, 2.0}, {2, 2}, float64);
  expect_array(logsumexp(r, 1), {2}, {-kInf, 2.3132616875182228}, 1e-12);
  // dtypes
  EXPECT_EQ(logsumexp(array({1, 2, 3})).dtype(), float32);
  expect_array(logsumexp(array({1, 2, 3})), {}, {3.4076059644443806});
  EXPECT_EQ(logsumexp(array({10.0f, 10.0f}, float16)).dtype(), float16);
  expect_array(logsumexp(array({10.0f, 10.0f}, float16)), {}, {10.693147180559945}, 2e-3);
  expect_array(logsumexp(array({1000.0f, 1000.0f}, bfloat16)), {}, {1000.6931471805599}, 1e-2);
}

TEST(Reduce, SoftmaxStability) {
  expect_array(softmax(array({1.0f, 2.0f, 3.0f})), {3}, {0.09003057317038043, 0.24472847105479759, 0.6652409557748217});
  expect_array(softmax(array({1000.0f, 1000.0f})), {2}, {0.5, 0.5});
  expect_array(softmax(array({1000.0f, 0.0f})), {2}, {1, 0});
  expect_array(softmax(array({-1000.0f, -1000.0f, -1000.0f, -1000.0f})), {4}, {0.25, 0.25, 0.25, 0.25});
  expect_array(softmax(array({-kInfF, 0.0f, -kInfF})), {3}, {0, 1, 0});
  expect_array(log_softmax(array({1.0f, 2.0f, 3.0f})), {3},
               {-2.4076059644443806, -1.4076059644443806, -0.4076059644443806});
  expect_array(log_softmax(array({1000.0f, 0.0f})), {2}, {0, -1000});
  expect_array(log_softmax(array({1000.0f, 1000.0f})), {2}, {-0.6931471805599453, -0.6931471805599453});
  expect_array(log_softmax(array({-kInfF, 0.0f})), {2}, {-kInf, 0});
  // axes
  array x({0.5f, 1000.0f, -1.5f, 1000.0f}, {2, 2});
  expect_array(softmax(x, 0), {2, 2}, {0.8807970779778824, 0.5, 0.11920292202211753, 0.5});
  expect_array(log_softmax(x, 0), {2, 2}, {-0.12692801104297258, -0.6931471805599453, -2.1269280110429727, -0.6931471805599453});
  expect_array(softmax(transpose(x), 1), {2, 2}, {0.8807970779778824, 0.11920292202211753, 0.5, 0.5});
  expect_array(softmax(x, {0, 1}), {2, 2}, {0, 0.5, 0, 0.5});
  expect_array(softmax(reshape(array({1.0f, 2.0f, 3.0f, 1.0f, 2.0f, 3.0f}), {2, 3}), -1), {2, 3},
               {0.09003057317038043, 0.24472847105479759, 0.6652409557748217, 0.09003057317038043,
                0.24472847105479759, 0.6652409557748217});
  // dtypes: int logits give float32; half logits of 1000 stay finite
  EXPECT_EQ(softmax(array({1, 1})).dtype(), float32);
  expect_array(softmax(array({1, 1})), {2}, {0.5, 0.5});
  array h({1000.0f, 1000.0f, 999.0f}, float16);
  EXPECT_EQ(softmax(h).dtype(), float16);
  expect_array(softmax(h), {3}, {0.42231879825, 0.42231879825, 0.15536240349}, 3e-3);
  expect_array(log_softmax(h), {3}, {-0.8619948040, -0.8619948040, -1.8619948040}, 3e-3);
  expect_array(softmax(array({1000.0, 1000.0}, bfloat16)), {2}, {0.5, 0.5});
}

TEST(Reduce, ArgMaxArgMin) {
  array v({1.0f, 3.0f, 3.0f, 2.0f});
  array a = argmax(v);
  EXPECT_EQ(a.dtype(), int32);
  EXPECT_EQ(a.shape(), Shape{});
  EXPECT_EQ(a.item<int>(), 1);  // the first of the ties
  EXPECT_EQ(argmin(v).item<int>(), 0);
  EXPECT_EQ(argmin(array({2, 1, 5, 1})).item<int>(), 1);
  // NaN wins (the first one)
  EXPECT_EQ(argmax(array({1.0f, kNaNF, 5.0f, kNaNF})).item<int>(), 1);
  EXPECT_EQ(argmin(array({1.0f, kNaNF, -5.0f})).item<int>(), 1);
  EXPECT_EQ(argmax(array({kNaN, 7.0}, float64)).item<int>(), 0);
  EXPECT_EQ(argmax(array({-kInf, -kInf})).item<int>(), 0);
  EXPECT_EQ(argmin(array({kInfF, 1.0f, -kInfF})).item<int>(), 2);
  // axes and keepdims
  array m({3, 9, 1, 4, 9, 8}, {2, 3});
  expect_array(argmax(m, 1), {2}, {1, 1});
  expect_array(argmax(m, 0), {3}, {1, 0, 1});
  expect_array(argmin(m, -1, true), {2, 1}, {2, 0});
  expect_array(argmax(m, true), {1, 1}, {1});
  expect_array(argmin(m), {}, {2});
  // flattened index of a transposed view follows the view's logical order
  array t = transpose(m);  // [[3,4],[9,9],[1,8]]
  expect_array(argmax(t), {}, {2});
  expect_array(argmin(t), {}, {4});
  expect_array(argmax(t, 1), {3}, {1, 0, 1});
  expect_array(argmin(slice(m, {1, 2}, {-3, -4}, {-1, -1}), 1), {2}, {2, 0});  // rows [8,9,4],[1,9,3]
  // dtypes
  EXPECT_EQ(argmax(array({false, true, true})).item<int>(), 1);
  EXPECT_EQ(argmin(array({200, 7, 255}, uint8)).item<int>(), 1);
  EXPECT_EQ(argmax(array(std::vector<int64_t>{-1, int64_t(1) << 40, 3}, {3})).item<int>(), 1);
  EXPECT_EQ(argmax(array({1.0f, 2.5f, 2.0f}, float16)).item<int>(), 1);
  EXPECT_EQ(argmax(array({1.0f, 2.5f, 2.0f}, bfloat16)).item<int>(), 1);
  EXPECT_EQ(argmax(array(5.0f)).item<int>(), 0);
  EXPECT_EQ(argmax(array(5.0f), true).shape(), Shape{});
}

TEST(Reduce, CumSum) {
  array x({1.0f, 2.0f, 3.0f, 4.0f});
  expect_array(cumsum(x, 0), {4}, {1, 3, 6, 10});
  expect_array(cumsum(x, 0, true), {4}, {10, 9, 7, 4});
  expect_array(cumsum(x, 0, false, false), {4}, {0, 1, 3, 6});
  expect_array(cumsum(x, -1, true, false), {4}, {9, 7, 4, 0});
  array m({1, 2, 3, 4, 5, 6}, {2, 3});
  EXPECT_EQ(cumsum(m, 0).dtype(), int32);
  expect_array(cumsum(m, 0), {2, 3}, {1, 2, 3, 5, 7, 9});
  expect_array(cumsum(m, 1), {2, 3}, {1, 3, 6, 4, 9, 15});
  expect_array(cumsum(m, -1, true), {2, 3}, {6, 5, 3, 15, 11, 6});
  expect_array(cumsum(m, 0, true, false), {2, 3}, {4, 5, 6, 0, 0, 0});
  expect_array(cumsum(m), {6}, {1, 3, 6, 10, 15, 21});  // flattened
  // strided inputs
  expect_array(cumsum(transpose(m), 1), {3, 2}, {1, 5, 2, 7, 3, 9});
  expect_array(cumsum(slice(m, {0, 2}, {2, -4}, {1, -1}), 1), {2, 3}, {3, 5, 6, 6, 11, 15});
  expect_array(cumsum(broadcast_to(array({1.0f, 2.0f}), {3, 2}), 0), {3, 2}, {1, 2, 2, 4, 3, 6});
  // dtypes: bool and uint8 count in int32
  array b({true, false, true, true});
  EXPECT_EQ(cumsum(b, 0).dtype(), int32);
  expect_array(cumsum(b, 0), {4}, {1, 1, 2, 3});
  EXPECT_EQ(cumsum(array({200, 100}, uint8), 0).dtype(), int32);
  expect_array(cumsum(array({200, 100}, uint8), 0), {2}, {200, 300});
  array i64(std::vector<int64_t>{int64_t(1) << 40, int64_t(1) << 40}, {2});
  EXPECT_EQ(cumsum(i64, 0).to_vector<int64_t>(), (std::vector<int64_t>{int64_t(1) << 40, int64_t(1) << 41}));
  // half types accumulate in float32
  array h = ones({3000}, float16);
  EXPECT_EQ(cumsum(h, 0).dtype(), float16);
  auto hv = cumsum(h, 0).to_vector<float>();
  EXPECT_EQ(hv[2047], 2048.0f);
  EXPECT_EQ(hv[2999], 3000.0f);  // 3000 is a float16 value; a half accumulator would stall at 2048
  expect_array(cumsum(array({1.0, kNaN, 1.0}, float64), 0), {3}, {1, kNaN, kNaN});
  expect_array(cumsum(array(3.0f)), {1}, {3});
}

TEST(Reduce, AllAndAnyOfLongBoolRowsAcrossThreads) {
  // A long row is reduced in chunks by several threads; all/any once kept the chunks' results in a
  // std::vector<bool>, whose bits share words, and lost a write now and then (found by vmap's check
  // in the differential tester). Repeated, so that the race, if back, shows.
  const int saved = get_num_threads();
  set_num_threads(2);
  const array t = full({300000}, array(true)), f = full({300000}, array(false));
  const array one_false = slice_update(t, array(false), {299999}, {300000});
  eval(t, f, one_false);
  int wrong = 0;
  for (int i = 0; i < 2000; ++i) {
    wrong += !all(t).item<bool>() + any(f).item<bool>() + all(one_false).item<bool>() + !any(one_false).item<bool>();
  }
  set_num_threads(saved);
  EXPECT_EQ(wrong, 0);
}

TEST(Reduce, FewColumnsOverManyRowsAreSummedInBlocksAcrossThreads) {
  // (5000, 37) summed over its rows (a bias gradient's shape): the rows in fixed blocks reduced in
  // parallel, so the result is the same at 1 and 2 threads, bit for bit, and within float32's
  // rounding of the float64 sums; a max through the same path; an integer sum exactly.
  const int saved = get_num_threads();
  const int R = 5000, C = 37;
  array x = loom::testing::lcg_uniform({R, C}, -1, 1, 71);
  array xi = astype(multiply(x, array(1000.0f)), int32);
  eval(x, xi);
  const std::vector<double> xv = astype(x, float64).to_vector<double>();
  const std::vector<int> iv = xi.to_vector<int>();
  std::vector<double> want(C, 0.0), want_max(C, -1e300);
  std::vector<long long> want_i(C, 0);
  for (int r = 0; r < R; ++r) {
    for (int c = 0; c < C; ++c) {
      want[c] += xv[size_t(r) * C + c];
      want_max[c] = std::max(want_max[c], xv[size_t(r) * C + c]);
      want_i[c] += iv[size_t(r) * C + c];
    }
  }
  std::vector<std::vector<float>> got;
  for (int t : {1, 2}) {
    set_num_threads(t);
    got.push_back(sum(x, 0).to_vector<float>());
    const std::vector<float> mx = max(x, 0).to_vector<float>();
    const std::vector<int> si = sum(xi, 0).to_vector<int>();
    for (int c = 0; c < C; ++c) {
      EXPECT_NEAR(got.back()[c], want[c], 1e-4) << t << " threads, column " << c;
      EXPECT_EQ(mx[c], float(want_max[c])) << t << " threads, column " << c;
      EXPECT_EQ(si[c], want_i[c]) << t << " threads, column " << c;
    }
  }
  set_num_threads(saved);
  EXPECT_EQ(got[0], got[1]);
}

#include <limits>

#include "../test_utils.h"
#include "conv_ref.h"
#include "loom/core/primitive.h"
#include "loom/ops/conv.h"

using namespace loom;
using loom::testing::expect_array;

namespace {
array pool_arr(const std::vector<double>& v, const Shape& s, Dtype d = float32) { return array(v, s, d); }
const double kInf = std::numeric_limits<double>::infinity();

// Cotangent of each input for a pooling node, through its own vjp.
array pool_vjp(const array& y, const array& cot) { return y.primitive().vjp(y.inputs(), {cot}, {0}, {y})[0]; }
array pool_jvp(const array& y, const array& t) { return y.primitive().jvp(y.inputs(), {t}, {0})[0]; }
}  // namespace

TEST(Pool, MaxPool1dKnownValues) {
  array x = pool_arr({1, 3, 2, 5, 4, 0}, {1, 6, 1});
  expect_array(max_pool1d(x, 2), {1, 3, 1}, {3, 5, 4});
  expect_array(max_pool1d(x, 2, 1), {1, 5, 1}, {3, 3, 5, 5, 4});
  // padded [-inf, 1, 3, 2, 5, 4, 0, -inf], windows of 3 at 0, 2, 4
  expect_array(max_pool1d(x, 3, 2, 1), {1, 3, 1}, {3, 5, 5});
  expect_array(max_pool1d(x, 3), {1, 2, 1}, {3, 5});
  // Every window is all padding but one element: values stay finite.
  expect_array(max_pool1d(pool_arr({-7, -8}, {1, 2, 1}), 2, 1, 1), {1, 3, 1}, {-7, -7, -8});
}

TEST(Pool, AvgPool1dKnownValues) {
  array x = pool_arr({1, 3, 2, 5, 4, 0}, {1, 6, 1});
  expect_array(avg_pool1d(x, 2), {1, 3, 1}, {2, 3.5, 2});
  expect_array(avg_pool1d(x, 3, 1), {1, 4, 1}, {2, 10.0 / 3, 11.0 / 3, 3});
  // Zero padding counts toward the divisor (count_include_pad=True).
  expect_array(avg_pool1d(x, 3, 2, 1), {1, 3, 1}, {4.0 / 3, 10.0 / 3, 3}, 1e-6);
}

TEST(Pool, Pool2dKnownValuesTwoChannels) {
  // Channel 0 holds 0..15 (4x4), channel 1 holds its negation.
  std::vector<double> v;
  for (int i = 0; i < 16; ++i) {
    v.push_back(i);
    v.push_back(-i);
  }
  array x = pool_arr(v, {1, 4, 4, 2});
  expect_array(max_pool2d(x, {2, 2}), {1, 2, 2, 2}, {5, 0, 7, -2, 13, -8, 15, -10});
  expect_array(avg_pool2d(x, {2, 2}), {1, 2, 2, 2}, {2.5, -2.5, 4.5, -4.5, 10.5, -10.5, 12.5, -12.5});
  // 3x3 windows, stride 1: maxima at the bottom-right / top-left corners of each window.
  expect_array(max_pool2d(x, {3, 3}, {1, 1}), {1, 2, 2, 2}, {10, 0, 11, -1, 14, -4, 15, -5});
  // 2x3 windows with stride (2, 1) and padding (1, 1): rows -1..0 and 1..2, columns -1..1, 0..2, ...
  expect_array(max_pool2d(x, {2, 3}, {2, 1}, {1, 1}), {1, 3, 4, 2},
               {1, 0, 2, -0, 3, -1, 3, -2,     //
                9, -4, 10, -4, 11, -5, 11, -6,  //
                13, -12, 14, -12, 15, -13, 15, -14},
               1e-6);
  expect_array(avg_pool2d(x, {2, 2}, {2, 2}, {1, 1}), {1, 3, 3, 2},
               {0, 0, (1 + 2) / 4.0, -(1 + 2) / 4.0, 3 / 4.0, -3 / 4.0,                                   //
                (4 + 8) / 4.0, -(4 + 8) / 4.0, (5 + 6 + 9 + 10) / 4.0, -(5 + 6 + 9 + 10) / 4.0, (7 + 11) / 4.0, -(7 + 11) / 4.0,  //
                12 / 4.0, -12 / 4.0, (13 + 14) / 4.0, -(13 + 14) / 4.0, 15 / 4.0, -15 / 4.0});
  // Batch > 1: the second image is the first plus 100.
  std::vector<double> v2 = v;
  for (double e : v) v2.push_back(e + 100);
  expect_array(max_pool2d(pool_arr(v2, {2, 4, 4, 2}), {2, 2}), {2, 2, 2, 2},
               {5, 0, 7, -2, 13, -8, 15, -10, 105, 100, 107, 98, 113, 92, 115, 90});
}

TEST(Pool, GeneralAndStridedInputs) {
  std::vector<double> v(16);
  for (int i = 0; i < 16; ++i) v[i] = i;
  array x = pool_arr(v, {1, 4, 4, 1});
  // Transposed view: the pooled values of the transposed image.
  array xt = transpose(x, {0, 2, 1, 3});
  expect_array(max_pool2d(xt, {2, 2}), {1, 2, 2, 1}, {5, 13, 7, 15});
  expect_array(avg_pool2d(xt, {2, 2}), {1, 2, 2, 1}, {2.5, 10.5, 4.5, 12.5});
  // Negative strides: the image reversed along both axes.
  array xr = slice(x, {0, 3, 3, 0}, {1, -5, -5, 1}, {1, -1, -1, 1});
  expect_array(max_pool2d(xr, {2, 2}), {1, 2, 2, 1}, {15, 13, 7, 5});
  // The N-d entry points with one value for every axis, and 3 spatial axes.
  expect_array(max_pool(x, {2}), {1, 2, 2, 1}, {5, 7, 13, 15});
  expect_array(avg_pool(x, {2}, {2}, {0}), {1, 2, 2, 1}, {2.5, 4.5, 10.5, 12.5});
  array x3 = pool_arr(std::vector<double>(v.begin(), v.begin() + 8), {1, 2, 2, 2, 1});
  expect_array(max_pool(x3, {2, 2, 2}), {1, 1, 1, 1, 1}, {7});
  expect_array(avg_pool(x3, {2, 1, 2}, {1, 1, 1}), {1, 1, 2, 1, 1}, {2.5, 4.5});
}

TEST(Pool, NanInfAndDtypes) {
  array x = pool_arr({1, NAN, 2, 3, -kInf, -kInf}, {1, 6, 1});
  expect_array(max_pool1d(x, 2), {1, 3, 1}, {NAN, 3, -kInf});
  expect_array(avg_pool1d(x, 2), {1, 3, 1}, {NAN, 2.5, -kInf});
  for (Dtype d : {float16, bfloat16, float64}) {
    array h = pool_arr({1, 3, 2, 5, 4, 0.5}, {1, 6, 1}, d);
    array m = max_pool1d(h, 2), a = avg_pool1d(h, 2);
    EXPECT_EQ(m.dtype(), d);
    EXPECT_EQ(a.dtype(), d);
    expect_array(m, {1, 3, 1}, {3, 5, 4});
    expect_array(a, {1, 3, 1}, {2, 3.5, 2.25});
  }
  // Empty batch.
  array e = max_pool2d(zeros({0, 4, 4, 3}), {2, 2});
  EXPECT_EQ(e.shape(), (Shape{0, 2, 2, 3}));
  e.eval();
  expect_array(avg_pool2d(zeros({0, 4, 4, 3}), {2, 2}), {0, 2, 2, 3}, {});
  // A zero-length spatial axis with padding: the one window holds padding only.
  array z = zeros({1, 0, 2});
  array mz = max_pool1d(z, 2, 1, 1);
  array gz = pool_vjp(mz, ones({1, 1, 2}));
  array jz = pool_jvp(mz, z);
  expect_array(mz, {1, 1, 2}, {-kInf, -kInf});
  expect_array(gz, {1, 0, 2}, {});
  expect_array(jz, {1, 1, 2}, {0, 0});
  expect_array(avg_pool1d(z, 2, 1, 1), {1, 1, 2}, {0, 0});
}

TEST(Pool, MaxPoolGradientGoesToFirstMaximum) {
  // Windows [1, 3], [3, 2] (stride 1) and a window of ties [4, 4].
  array x = pool_arr({1, 3, 2, 4, 4}, {1, 5, 1});
  array y = max_pool1d(x, 2, 1);
  array dx = pool_vjp(y, pool_arr({10, 20, 30, 40}, {1, 4, 1}));
  array ty = pool_jvp(y, pool_arr({1, 2, 3, 4, 5}, {1, 5, 1}));
  expect_array(y, {1, 4, 1}, {3, 3, 4, 4});
  // 3 is the max of the first two windows; the tie [4, 4] sends its gradient to the first 4; the
  // window [2, 4] picks the 4 at index 3 too.
  expect_array(dx, {1, 5, 1}, {0, 30, 0, 70, 0});
  // jvp: the tangent read at each argmax.
  expect_array(ty, {1, 4, 1}, {2, 2, 4, 4});
  // With padding and two channels in 2-d.
  std::vector<double> v;
  for (int i = 0; i < 9; ++i) {
    v.push_back(i);
    v.push_back(8 - i);
  }
  array x2 = pool_arr(v, {1, 3, 3, 2});
  array y2 = max_pool2d(x2, {2, 2}, {2, 2}, {1, 1});  // windows cover {0}, {1,2}, {3,6}, {4,5,7,8}
  array dx2 = pool_vjp(y2, pool_arr({1, 10, 2, 20, 3, 30, 4, 40}, {1, 2, 2, 2}));
  expect_array(y2, {1, 2, 2, 2}, {0, 8, 2, 7, 6, 5, 8, 4});
  std::vector<double> g(18, 0.0);
  // channel 0 maxima at 0, 2, 6, 8; channel 1 maxima at 0, 1, 3, 4
  g[0 * 2] += 1; g[2 * 2] += 2; g[6 * 2] += 3; g[8 * 2] += 4;
  g[0 * 2 + 1] += 10; g[1 * 2 + 1] += 20; g[3 * 2 + 1] += 30; g[4 * 2 + 1] += 40;
  expect_array(dx2, {1, 3, 3, 2}, g);
}

TEST(Pool, MaxPoolSecondOrderNodes) {
  array x = pool_arr({1, 3, 2, 4, 4}, {1, 5, 1}, float64);
  array y = max_pool1d(x, 2, 1);
  array dx = pool_vjp(y, pool_arr({10, 20, 30, 40}, {1, 4, 1}, float64));
  // dx = scatter(x, cot): linear in cot with the adjoint gather; zero derivative in x.
  auto g = dx.primitive().vjp(dx.inputs(), {pool_arr({1, 2, 3, 4, 5}, {1, 5, 1}, float64)}, {0, 1}, {dx});
  expect_array(g[0], {1, 5, 1}, {0, 0, 0, 0, 0});
  expect_array(g[1], {1, 4, 1}, {2, 2, 4, 4});
  auto t = dx.primitive().jvp(dx.inputs(), {pool_arr({1, 1, 1, 1, 1}, {1, 5, 1}, float64), pool_arr({1, 2, 3, 4}, {1, 4, 1}, float64)},
                              {0, 1});
  expect_array(t[0], {1, 5, 1}, {0, 3, 0, 7, 0});
  // The jvp node (a gather) has the scatter as its vjp.
  array tj = pool_jvp(y, pool_arr({1, 2, 3, 4, 5}, {1, 5, 1}, float64));
  auto gj = tj.primitive().vjp(tj.inputs(), {pool_arr({1, 1, 1, 1}, {1, 4, 1}, float64)}, {1}, {tj});
  expect_array(gj[0], {1, 5, 1}, {0, 2, 0, 2, 0});
}

TEST(Pool, AvgPoolGradients) {
  array x = pool_arr({1, 3, 2, 5, 4, 0}, {1, 6, 1}, float64);
  array y = avg_pool1d(x, 3, 2, 1);  // windows [-1..1], [1..3], [3..5]
  expect_array(pool_vjp(y, pool_arr({3, 6, 9}, {1, 3, 1}, float64)), {1, 6, 1}, {1, 1 + 2, 2, 2 + 3, 3, 3});
  expect_array(pool_jvp(y, pool_arr({3, 0, 0, 0, 0, 3}, {1, 6, 1}, float64)), {1, 3, 1}, {1, 0, 1});
  // The vjp node's own vjp is the average pool again.
  array dx = pool_vjp(y, pool_arr({3, 6, 9}, {1, 3, 1}, float64));
  auto g = dx.primitive().vjp(dx.inputs(), {pool_arr({1, 3, 2, 5, 4, 0}, {1, 6, 1}, float64)}, {0}, {dx});
  expect_array(g[0], {1, 3, 1}, {4.0 / 3, 10.0 / 3, 3}, 1e-12);
  // 2-d with overlapping windows: every interior element of a 3x3 input under 2x2 stride-1 windows.
  array x2 = ones({1, 3, 3, 1}, float64);
  array y2 = avg_pool2d(x2, {2, 2}, {1, 1});
  expect_array(pool_vjp(y2, ones({1, 2, 2, 1}, float64)), {1, 3, 3, 1},
               {0.25, 0.5, 0.25, 0.5, 1.0, 0.5, 0.25, 0.5, 0.25});
}

TEST(Pool, ScatterParallelSplitsChannels) {
  // A single large image: the scatter splits channels across threads. Compare against direct loops.
  const int H = 64, W = 64, C = 48;
  auto xv = convref::random_values(size_t(H) * W * C, 77);
  auto cv = convref::random_values(size_t(H / 2) * (W / 2) * C, 78);
  array x = pool_arr(xv, {1, H, W, C}, float64);
  array y = max_pool2d(x, {3, 3}, {2, 2}, {1, 1});
  const int OH = y.shape(1), OW = y.shape(2);
  ASSERT_EQ(OH, 32);
  std::vector<double> ym(size_t(OH) * OW * C), gm(xv.size(), 0.0), ga(xv.size(), 0.0);
  for (int oh = 0; oh < OH; ++oh)
    for (int ow = 0; ow < OW; ++ow)
      for (int c = 0; c < C; ++c) {
        double best = -kInf;
        size_t at = 0;
        for (int kh = 0; kh < 3; ++kh)
          for (int kw = 0; kw < 3; ++kw) {
            int h = oh * 2 - 1 + kh, w = ow * 2 - 1 + kw;
            if (h < 0 || w < 0 || h >= H || w >= W) continue;
            size_t i = (size_t(h) * W + w) * C + c;
            if (xv[i] > best) {
              best = xv[i];
              at = i;
            }
            ga[i] += cv[(size_t(oh) * OW + ow) * C + c] / 9.0;
          }
        ym[(size_t(oh) * OW + ow) * C + c] = best;
        gm[at] += cv[(size_t(oh) * OW + ow) * C + c];
      }
  array gy = pool_vjp(y, pool_arr(cv, {1, OH, OW, C}, float64));
  expect_array(y, {1, OH, OW, C}, ym, 1e-12);
  expect_array(gy, {1, H, W, C}, gm, 1e-12);
  array ya = avg_pool2d(x, {3, 3}, {2, 2}, {1, 1});
  expect_array(pool_vjp(ya, pool_arr(cv, {1, OH, OW, C}, float64)), {1, H, W, C}, ga, 1e-12);
}

TEST(Pool, BadInputs) {
  array x = zeros({2, 4, 4, 3});
  EXPECT_THROW_MSG(max_pool2d(zeros({4, 4, 3}), {2, 2}), std::invalid_argument,
                   "[max_pool2d] input must have 4 dimensions (N, H, W, C); got shape (4,4,3)");
  EXPECT_THROW_MSG(avg_pool1d(x, 2), std::invalid_argument, "[avg_pool1d] input must have 3 dimensions");
  EXPECT_THROW_MSG(max_pool(zeros({4, 3}), {2}), std::invalid_argument, "[max_pool] input must have at least 3");
  EXPECT_THROW_MSG(max_pool2d(zeros({2, 4, 4, 3}, int32), {2, 2}), std::invalid_argument,
                   "[max_pool2d] needs a floating-point input; got int32");
  EXPECT_THROW_MSG(max_pool2d(x, {0, 2}), std::invalid_argument, "kernel_size must be positive; got (0,2)");
  EXPECT_THROW_MSG(avg_pool2d(x, {2, 2}, {1, 0}), std::invalid_argument, "[avg_pool2d] stride must be positive");
  EXPECT_THROW_MSG(max_pool1d(zeros({1, 4, 1}), 2, -1), std::invalid_argument, "stride must be positive; got (-1)");
  EXPECT_THROW_MSG(max_pool2d(x, {2, 2}, {2, 2}, {-1, 0}), std::invalid_argument, "padding must be non-negative");
  EXPECT_THROW_MSG(max_pool2d(x, {2, 2}, {2, 2}, {2, 0}), std::invalid_argument,
                   "padding (2,0) must be at most half of kernel_size (2,2)");
  EXPECT_THROW_MSG(avg_pool2d(x, {5, 2}), std::invalid_argument,
                   "[avg_pool2d] kernel_size (5,2) is larger than the padded input (input (2,4,4,3)");
  EXPECT_THROW_MSG(max_pool(x, {2, 2, 2}), std::invalid_argument,
                   "[max_pool] kernel_size has 3 entries but the input has 2 spatial dimensions");
  EXPECT_THROW_MSG(max_pool(x, {}), std::invalid_argument, "kernel_size is empty");
}

TEST(Pool, MaxPoolGradientsOverWideChannelsMatchABruteForceArgmax) {
  // 37 channels (two vectors and a tail), overlapping padded windows (3x3, stride 2, padding 1),
  // values with ties, a NaN and infinities; one image (the channels split between threads) and three.
  for (int N : {1, 3}) {
    const int H = 6, W = 7, C = 37, OH = 3, OW = 4;
    std::vector<float> xv(size_t(N) * H * W * C), cv(size_t(N) * OH * OW * C), tv(xv.size());
    for (size_t i = 0; i < xv.size(); ++i) {
      xv[i] = float(((i / C) * 5 + (i % C)) % 4);  // four values: ties in most windows
      tv[i] = float(i % 13) + 0.5f;
    }
    for (size_t i = 0; i < cv.size(); ++i) cv[i] = float(i % 17) - 8.0f;
    xv[5 * C + 3] = std::numeric_limits<float>::quiet_NaN();
    xv[(2 * W + 3) * C + 20] = std::numeric_limits<float>::infinity();
    xv[(4 * W + 6) * C + 36] = -std::numeric_limits<float>::infinity();
    array x(xv, {N, H, W, C}), cot(cv, {N, OH, OW, C}), tan(tv, {N, H, W, C});
    array y = max_pool2d(x, {3, 3}, {2, 2}, {1, 1});
    ASSERT_EQ(y.shape(), (Shape{N, OH, OW, C}));
    // The first maximum of each window in row-major order (a NaN counts as the maximum).
    std::vector<double> dx(xv.size(), 0.0), jt(cv.size(), 0.0);
    for (int n = 0; n < N; ++n) {
      for (int oh = 0; oh < OH; ++oh) {
        for (int ow = 0; ow < OW; ++ow) {
          for (int c = 0; c < C; ++c) {
            int64_t at = -1;
            for (int kh = 0; kh < 3; ++kh) {
              for (int kw = 0; kw < 3; ++kw) {
                const int h = oh * 2 - 1 + kh, w = ow * 2 - 1 + kw;
                if (h < 0 || h >= H || w < 0 || w >= W) continue;
                const int64_t i = ((int64_t(n) * H + h) * W + w) * C + c;
                if (at < 0 || (!(xv[i] <= xv[at]) && xv[at] == xv[at])) at = i;
              }
            }
            const int64_t o = ((int64_t(n) * OH + oh) * OW + ow) * C + c;
            dx[at] += cv[o];
            jt[o] = tv[at];
          }
        }
      }
    }
    expect_array(pool_vjp(y, cot), {N, H, W, C}, dx);
    expect_array(pool_jvp(y, tan), {N, OH, OW, C}, jt);
  }
}

#include <array>

#include "../test_utils.h"
#include "conv_ref.h"
#include "loom/core/primitive.h"
#include "loom/ops/conv.h"

using namespace loom;
using convref::Case2d;
using loom::testing::expect_array;

namespace {

array arr(const std::vector<double>& v, const Shape& s, Dtype d = float64) { return array(v, s, d); }

// conv_general arguments for a 2-d case.
array run_general(const Case2d& c, const array& x, const array& w, bool flip = false) {
  return conv_general(x, w, {c.sh, c.sw}, {c.plh, c.plw}, {c.phh, c.phw}, {c.dh, c.dw}, {c.ih, c.iw}, c.groups, flip);
}

// Cases covering stride, padding (symmetric and not), dilation, groups and batch > 1.
std::vector<Case2d> sweep_cases() {
  std::vector<Case2d> cs;
  auto add = [&](Case2d c) { cs.push_back(c); };
  Case2d c;
  c = {};  c.N = 2; c.H = 5; c.W = 6; c.Cin = 3; c.Cout = 4; c.KH = 3; c.KW = 3; add(c);
  c.sh = 2; c.sw = 2; add(c);
  c.sh = 1; c.sw = 2; c.plh = c.phh = 1; c.plw = c.phw = 1; add(c);
  c.sw = 1; c.dh = 2; c.dw = 2; c.plh = c.phh = 2; c.plw = c.phw = 2; add(c);
  c = {};  c.N = 3; c.H = 7; c.W = 5; c.Cin = 4; c.Cout = 6; c.KH = 2; c.KW = 3; c.groups = 2; add(c);
  c.sh = 2; c.sw = 3; c.plh = c.phh = 1; c.plw = c.phw = 2; c.dh = 2; c.dw = 1; add(c);
  c = {};  c.N = 2; c.H = 6; c.W = 6; c.Cin = 4; c.Cout = 4; c.KH = 3; c.KW = 3; c.groups = 4;  // depthwise
  c.plh = c.phh = c.plw = c.phw = 1; add(c);
  c = {};  c.N = 2; c.H = 4; c.W = 5; c.Cin = 6; c.Cout = 3; c.KH = 1; c.KW = 1; c.groups = 3; add(c);  // 1x1
  c = {};  c.N = 1; c.H = 5; c.W = 5; c.Cin = 2; c.Cout = 2; c.KH = 5; c.KW = 5; add(c);  // kernel == input
  // Dilated rows only, ungrouped: most windows lie inside the image (im2col's interior rows).
  c = {};  c.N = 2; c.H = 9; c.W = 7; c.Cin = 3; c.Cout = 2; c.KH = 3; c.KW = 2; c.dh = 2; c.plh = c.phh = 1; add(c);
  return cs;
}

}  // namespace

TEST(Conv, Conv1dKnownValues) {
  array x = arr({1, 2, 3, 4, 5}, {1, 5, 1}, float32);
  array w = arr({1, 0, -1}, {1, 3, 1}, float32);
  expect_array(conv1d(x, w), {1, 3, 1}, {-2, -2, -2});
  expect_array(conv1d(x, w, 1, 1), {1, 5, 1}, {-2, -2, -2, -2, 4});
  expect_array(conv1d(x, w, 2), {1, 2, 1}, {-2, -2});
  expect_array(conv1d(x, w, 1, 0, 2), {1, 1, 1}, {-4});
  expect_array(conv1d(x, w, 2, 1, 2), {1, 2, 1}, {-4, 2});  // taps at -1,1,3 and 1,3,5 (5 is padding)
  EXPECT_EQ(conv1d(x, w).dtype(), float32);
}

TEST(Conv, Conv2dKnownValues) {
  array x = arr({1, 2, 3, 4, 5, 6, 7, 8, 9}, {1, 3, 3, 1}, float32);
  array w = arr({1, 2, 3, 4}, {1, 2, 2, 1}, float32);
  expect_array(conv2d(x, w), {1, 2, 2, 1}, {37, 47, 67, 77});
  // Two input channels (the second is 10x the first) and two output channels.
  std::vector<double> xv;
  for (int i = 1; i <= 9; ++i) {
    xv.push_back(i);
    xv.push_back(10 * i);
  }
  array x2 = arr(xv, {1, 3, 3, 2}, float32);
  // out 0 uses channel 0 only with the kernel above; out 1 sums both channels with all-ones taps.
  array w2 = arr({1, 0, 2, 0, 3, 0, 4, 0, 1, 1, 1, 1, 1, 1, 1, 1}, {2, 2, 2, 2}, float32);
  expect_array(conv2d(x2, w2), {1, 2, 2, 2}, {37, 11 * 12, 47, 11 * 16, 67, 11 * 24, 77, 11 * 28});
  // Padding 1 with stride 2 on the 3x3 input: corners of the padded 5x5.
  // windows [[0,0],[0,1]], [[0,0],[2,3]], [[0,4],[0,7]], [[5,6],[8,9]]
  expect_array(conv2d(x, w, {2, 2}, {1, 1}), {1, 2, 2, 1}, {4, 18, 36, 77});
}

TEST(Conv, Conv2dMatchesDirectLoops) {
  int seed = 1;
  for (const Case2d& c : sweep_cases()) {
    SCOPED_TRACE(::testing::Message() << "case " << seed);
    auto xv = convref::random_values(c.N * c.H * c.W * c.Cin, seed++);
    auto wv = convref::random_values(c.Cout * c.KH * c.KW * (c.Cin / c.groups), seed++);
    auto ref = convref::forward(c, xv, wv);
    for (Dtype d : {float64, float32}) {
      array y = conv2d(arr(xv, c.xshape(), d), arr(wv, c.wshape(), d), {c.sh, c.sw}, {c.plh, c.plw}, {c.dh, c.dw},
                       c.groups);
      EXPECT_EQ(y.dtype(), d);
      expect_array(y, c.yshape(), ref, d == float64 ? 1e-12 : 1e-5);
    }
  }
}

TEST(Conv, Conv1dMatchesDirectLoops) {
  // A 1-d convolution is the 2-d reference with H = 1.
  std::vector<std::array<int, 7>> params = {// L, K, stride, pad, dil, groups, N
                                            {9, 3, 1, 0, 1, 1, 2}, {9, 3, 2, 1, 1, 1, 3}, {10, 2, 3, 2, 3, 2, 2},
                                            {8, 4, 1, 2, 2, 4, 1}, {5, 5, 1, 0, 1, 1, 2}};
  int seed = 100;
  for (auto [L, K, s, p, dl, g, N] : params) {
    Case2d c;
    c.N = N; c.W = L; c.KW = K; c.sw = s; c.plw = c.phw = p; c.dw = dl; c.groups = g;
    c.Cin = 4; c.Cout = 4;
    auto xv = convref::random_values(c.N * c.W * c.Cin, seed++);
    auto wv = convref::random_values(c.Cout * c.KW * (c.Cin / g), seed++);
    array y = conv1d(arr(xv, {N, L, 4}), arr(wv, {4, K, 4 / g}), s, p, dl, g);
    expect_array(y, {N, c.OW(), 4}, convref::forward(c, xv, wv), 1e-12);
  }
}

TEST(Conv, GeneralAsymmetricPaddingInputDilationAndFlip) {
  Case2d c;
  c.N = 2; c.H = 4; c.W = 5; c.Cin = 2; c.Cout = 3; c.KH = 3; c.KW = 2;
  c.plh = 2; c.phh = 0; c.plw = 0; c.phw = 1; c.ih = 2; c.iw = 3; c.sh = 1; c.sw = 2;
  auto xv = convref::random_values(c.N * c.H * c.W * c.Cin, 7);
  auto wv = convref::random_values(c.Cout * c.KH * c.KW * c.Cin, 8);
  expect_array(run_general(c, arr(xv, c.xshape()), arr(wv, c.wshape())), c.yshape(), convref::forward(c, xv, wv), 1e-12);
  // flip: the same as the cross-correlation with spatially reversed taps.
  std::vector<double> flipped(wv.size());
  for (int co = 0; co < c.Cout; ++co)
    for (int kh = 0; kh < c.KH; ++kh)
      for (int kw = 0; kw < c.KW; ++kw)
        for (int ci = 0; ci < c.Cin; ++ci)
          flipped[((co * c.KH + kh) * c.KW + kw) * c.Cin + ci] =
              wv[((co * c.KH + (c.KH - 1 - kh)) * c.KW + (c.KW - 1 - kw)) * c.Cin + ci];
  expect_array(run_general(c, arr(xv, c.xshape()), arr(wv, c.wshape()), true), c.yshape(),
               convref::forward(c, xv, flipped), 1e-12);
  // One value applies to every dimension; padding_hi defaults to padding_lo.
  array x = arr(xv, c.xshape()), w = arr(wv, c.wshape());
  Case2d d = c;
  d.sh = d.sw = 1; d.plh = d.phh = d.plw = d.phw = 1; d.ih = d.iw = 1; d.dh = d.dw = 2;
  expect_array(conv_general(x, w, {1}, {1}, {}, {2}), d.yshape(), convref::forward(d, xv, wv), 1e-12);
}

TEST(Conv, General3dKnownValues) {
  // x (1, 2, 3, 2, 1) holds 0..11; one all-ones 2x2x2 kernel sums each 2x2x2 block.
  std::vector<double> xv(12);
  for (int i = 0; i < 12; ++i) xv[i] = i;
  array x = arr(xv, {1, 2, 3, 2, 1}, float32);
  array w = ones({1, 2, 2, 2, 1});
  // blocks start at (0,0,0) and (0,1,0): indices {0,1,2,3,6,7,8,9} and {2,3,4,5,8,9,10,11}
  expect_array(conv_general(x, w), {1, 1, 2, 1, 1}, {36, 52});
  // stride 2 along the middle axis keeps the first block only.
  expect_array(conv_general(x, w, {1, 2, 1}), {1, 1, 1, 1, 1}, {36});
}

TEST(Conv, NonContiguousInputs) {
  Case2d c;
  c.N = 2; c.H = 5; c.W = 4; c.Cin = 3; c.Cout = 2; c.KH = 2; c.KW = 3; c.plh = c.phh = 1; c.sw = 2;
  auto xv = convref::random_values(c.N * c.H * c.W * c.Cin, 21);
  auto wv = convref::random_values(c.Cout * c.KH * c.KW * c.Cin, 22);
  auto ref = convref::forward(c, xv, wv);
  array x = arr(xv, c.xshape(), float32), w = arr(wv, c.wshape(), float32);
  // Transposed views of row-contiguous buffers holding the values in permuted order.
  auto permuted = [](const array& a, const std::vector<int>& perm) {
    array t = transpose(a, perm);
    return array(t.to_vector<double>(), t.shape(), a.dtype());
  };
  array xt = transpose(permuted(x, {0, 2, 1, 3}), {0, 2, 1, 3});
  array wt = transpose(permuted(w, {3, 1, 2, 0}), {3, 1, 2, 0});
  xt.eval();
  wt.eval();
  ASSERT_FALSE(xt.flags().row_contiguous);
  ASSERT_FALSE(wt.flags().row_contiguous);
  expect_array(conv2d(xt, wt, {c.sh, c.sw}, {1, 0}), c.yshape(), ref, 1e-5);
  // A reversed slice (negative strides) of a reversed copy.
  Shape s0(4, 0), rev_stop{-c.N - 1, -c.H - 1, -c.W - 1, -c.Cin - 1}, rev{-1, -1, -1, -1};
  Shape start{c.N - 1, c.H - 1, c.W - 1, c.Cin - 1};
  array xr = slice(permuted(slice(x, start, rev_stop, rev), {0, 1, 2, 3}), start, rev_stop, rev);
  xr.eval();
  ASSERT_LT(xr.strides()[1], 0);
  expect_array(conv2d(xr, w, {c.sh, c.sw}, {1, 0}), c.yshape(), ref, 1e-5);
  // A weight broadcast along C_out (stride 0): every output channel equals channel 0's result.
  array w0 = broadcast_to(slice(w, {0, 0, 0, 0}, {1, c.KH, c.KW, c.Cin}), c.wshape());
  std::vector<double> wv0 = wv;
  for (size_t i = wv.size() / 2; i < wv.size(); ++i) wv0[i] = wv[i - wv.size() / 2];
  expect_array(conv2d(x, w0, {c.sh, c.sw}, {1, 0}), c.yshape(), convref::forward(c, xv, wv0), 1e-5);
}

TEST(Conv, HalfTypesAndPromotion) {
  Case2d c;
  c.N = 2; c.H = 5; c.W = 5; c.Cin = 4; c.Cout = 3; c.KH = 3; c.KW = 3; c.plh = c.phh = c.plw = c.phw = 1;
  auto xv = convref::random_values(c.N * c.H * c.W * c.Cin, 31);
  auto wv = convref::random_values(c.Cout * c.KH * c.KW * c.Cin, 32);
  for (Dtype d : {float16, bfloat16}) {
    array x = arr(xv, c.xshape(), d), w = arr(wv, c.wshape(), d);
    // Reference on the values as stored in the half type.
    auto ref = convref::forward(c, x.to_vector<double>(), w.to_vector<double>());
    array y = conv2d(x, w, {1, 1}, {1, 1});
    EXPECT_EQ(y.dtype(), d);
    expect_array(y, c.yshape(), ref, d == float16 ? 4e-3 : 3e-2);
  }
  array y = conv2d(arr(xv, c.xshape(), float32), arr(wv, c.wshape(), float64), {1, 1}, {1, 1});
  EXPECT_EQ(y.dtype(), float64);
  array yh = conv2d(arr(xv, c.xshape(), float16), arr(wv, c.wshape(), float32), {1, 1}, {1, 1});
  EXPECT_EQ(yh.dtype(), float32);
}

TEST(Conv, EmptyBatch) {
  array x = zeros({0, 5, 5, 2});
  array w = ones({3, 3, 3, 2});
  array y = conv2d(x, w);
  EXPECT_EQ(y.shape(), (Shape{0, 3, 3, 3}));
  y.eval();
  EXPECT_EQ(y.size(), 0u);
  // The weight gradient of an empty batch is zero.
  array y2 = conv2d(x, w);
  auto grads = y2.primitive().vjp(y2.inputs(), {zeros({0, 3, 3, 3})}, {0, 1}, {y2});
  EXPECT_EQ(grads[0].shape(), (Shape{0, 5, 5, 2}));
  expect_array(grads[1], {3, 3, 3, 2}, std::vector<double>(54, 0.0));
  // A zero-length spatial axis with padding sees padding only; no input channels gives zeros too.
  expect_array(conv1d(zeros({2, 0, 3}), ones({4, 1, 3}), 1, 1), {2, 2, 4}, std::vector<double>(16, 0.0));
  expect_array(conv1d(zeros({1, 3, 0}), ones({2, 2, 0})), {1, 2, 2}, {0, 0, 0, 0});
}

TEST(Conv, LargeBatchRunsInChunksOnAnyThreadCount) {
  // One image's im2col matrix has 64*64 rows x 9*28 columns (~1M elements), so the 2^21-element
  // chunk limit runs the three images as chunks of 2 and 1: the weight gradient accumulates across
  // chunks, and col2im streams whole images per thread or (fewer images than threads) gathers per
  // input element. Every path must give the direct-loop values.
  Case2d c;
  c.N = 3; c.H = 64; c.W = 64; c.Cin = 28; c.Cout = 3; c.KH = 3; c.KW = 3; c.plh = c.phh = c.plw = c.phw = 1;
  auto xv = convref::random_values(size_t(c.N) * c.H * c.W * c.Cin, 41);
  auto wv = convref::random_values(size_t(c.Cout) * c.KH * c.KW * c.Cin, 42);
  auto dyv = convref::random_values(size_t(c.N) * c.OH() * c.OW() * c.Cout, 43);
  auto ry = convref::forward(c, xv, wv), rdx = convref::input_grad(c, dyv, wv), rdw = convref::weight_grad(c, xv, dyv);
  const int saved = get_num_threads();
  for (int threads : {1, 2, 4}) {
    SCOPED_TRACE(::testing::Message() << threads << " threads");
    set_num_threads(threads);
    array x = arr(xv, c.xshape(), float32), w = arr(wv, c.wshape(), float32), dy = arr(dyv, c.yshape(), float32);
    array y = conv2d(x, w, {1, 1}, {1, 1});
    auto grads = y.primitive().vjp(y.inputs(), {dy}, {0, 1}, {y});
    expect_array(y, c.yshape(), ry, 1e-4);
    expect_array(grads[0], c.xshape(), rdx, 1e-4);
    expect_array(grads[1], c.wshape(), rdw, 1e-3);
  }
  set_num_threads(saved);
}

// Gradients through the primitive's own vjp/jvp, against the direct-loop references.
TEST(Conv, VjpAndJvpMatchDirectLoops) {
  int seed = 200;
  std::vector<Case2d> cases = sweep_cases();
  Case2d c;  // input dilation and asymmetric padding too
  c.N = 2; c.H = 4; c.W = 3; c.Cin = 4; c.Cout = 2; c.KH = 2; c.KW = 2; c.ih = 2; c.iw = 2; c.sh = 2;
  c.plh = 1; c.phh = 0; c.plw = 0; c.phw = 2; c.groups = 2;
  cases.push_back(c);
  for (const Case2d& c : cases) {
    SCOPED_TRACE(::testing::Message() << "case " << seed);
    auto xv = convref::random_values(c.N * c.H * c.W * c.Cin, seed++);
    auto wv = convref::random_values(c.Cout * c.KH * c.KW * (c.Cin / c.groups), seed++);
    auto dyv = convref::random_values(c.N * c.OH() * c.OW() * c.Cout, seed++);
    auto txv = convref::random_values(xv.size(), seed++);
    auto twv = convref::random_values(wv.size(), seed++);
    array x = arr(xv, c.xshape()), w = arr(wv, c.wshape()), dy = arr(dyv, c.yshape());
    array y = run_general(c, x, w);
    auto Gx = convref::random_values(xv.size(), seed++);
    auto Gw = convref::random_values(wv.size(), seed++);
    // Build every node before evaluating any (evaluation detaches a node from its primitive).
    auto g = y.primitive().vjp(y.inputs(), {dy}, {0, 1}, {y});
    auto t = y.primitive().jvp(y.inputs(), {arr(txv, c.xshape()), arr(twv, c.wshape())}, {0, 1});
    // Second order: the gradient nodes' own vjps and jvps. For dx = input_grad(dy, w):
    //   d<dx, G>/d dy = conv(G, w),  d<dx, G>/dw = weight_grad(G, dy).
    array dx = g[0], dw = g[1];
    auto gx = dx.primitive().vjp(dx.inputs(), {arr(Gx, c.xshape())}, {0, 1}, {dx});
    auto tx = dx.primitive().jvp(dx.inputs(), {arr(twv, c.wshape())}, {1});
    // For dw = weight_grad(x, dy): d<dw, G>/dx = input_grad(dy, G),  d<dw, G>/d dy = conv(x, G).
    auto gw = dw.primitive().vjp(dw.inputs(), {arr(Gw, c.wshape())}, {0, 1}, {dw});
    auto tw = dw.primitive().jvp(dw.inputs(), {arr(txv, c.xshape())}, {0});

    expect_array(g[0], c.xshape(), convref::input_grad(c, dyv, wv), 1e-12);
    expect_array(g[1], c.wshape(), convref::weight_grad(c, xv, dyv), 1e-12);
    auto r1 = convref::forward(c, txv, wv), r2 = convref::forward(c, xv, twv);
    for (size_t i = 0; i < r1.size(); ++i) r1[i] += r2[i];
    expect_array(t[0], c.yshape(), r1, 1e-12);
    expect_array(gx[0], c.yshape(), convref::forward(c, Gx, wv), 1e-12);
    expect_array(gx[1], c.wshape(), convref::weight_grad(c, Gx, dyv), 1e-12);
    expect_array(tx[0], c.xshape(), convref::input_grad(c, dyv, twv), 1e-12);
    expect_array(gw[0], c.xshape(), convref::input_grad(c, dyv, Gw), 1e-12);
    expect_array(gw[1], c.yshape(), convref::forward(c, xv, Gw), 1e-12);
    expect_array(tw[0], c.wshape(), convref::weight_grad(c, txv, dyv), 1e-12);
  }
}

TEST(Conv, GradientsInFloat32AndHalf) {
  Case2d c;
  c.N = 2; c.H = 6; c.W = 5; c.Cin = 4; c.Cout = 4; c.KH = 3; c.KW = 3; c.sh = 2; c.plh = c.phh = 1; c.groups = 2;
  auto xv = convref::random_values(c.N * c.H * c.W * c.Cin, 300);
  auto wv = convref::random_values(c.Cout * c.KH * c.KW * (c.Cin / c.groups), 301);
  auto dyv = convref::random_values(c.N * c.OH() * c.OW() * c.Cout, 302);
  for (Dtype d : {float32, bfloat16}) {
    array x = arr(xv, c.xshape(), d), w = arr(wv, c.wshape(), d), dy = arr(dyv, c.yshape(), d);
    array y = conv2d(x, w, {c.sh, c.sw}, {1, 0}, {1, 1}, c.groups);
    auto g = y.primitive().vjp(y.inputs(), {dy}, {0, 1}, {y});
    EXPECT_EQ(g[0].dtype(), d);
    EXPECT_EQ(g[1].dtype(), d);
    double tol = d == float32 ? 1e-5 : 3e-2;
    auto xs = x.to_vector<double>(), ws = w.to_vector<double>(), dys = dy.to_vector<double>();
    expect_array(g[0], c.xshape(), convref::input_grad(c, dys, ws), tol);
    expect_array(g[1], c.wshape(), convref::weight_grad(c, xs, dys), tol);
  }
}

TEST(Conv, BadInputs) {
  array x = zeros({2, 5, 5, 4});
  array w = zeros({8, 3, 3, 4});
  EXPECT_THROW_MSG(conv2d(zeros({5, 5, 4}), w), std::invalid_argument, "[conv2d] input must have 4 dimensions");
  EXPECT_THROW_MSG(conv2d(zeros({5, 5, 4}), w), std::invalid_argument, "(5,5,4)");
  EXPECT_THROW_MSG(conv1d(x, zeros({8, 3, 4})), std::invalid_argument, "[conv1d] input must have 3 dimensions");
  EXPECT_THROW_MSG(conv2d(x, zeros({8, 3, 4})), std::invalid_argument, "[conv2d] weight must have 4 dimensions");
  EXPECT_THROW_MSG(conv2d(x, zeros({8, 3, 3, 3})), std::invalid_argument, "[conv2d] channel mismatch: input (2,5,5,4)");
  EXPECT_THROW_MSG(conv2d(x, zeros({8, 3, 3, 3})), std::invalid_argument, "weight (8,3,3,3)");
  EXPECT_THROW_MSG(conv2d(x, zeros({8, 3, 3, 4}), {1, 1}, {0, 0}, {1, 1}, 2), std::invalid_argument,
                   "channel mismatch");
  EXPECT_THROW_MSG(conv2d(x, zeros({8, 3, 3, 1}), {1, 1}, {0, 0}, {1, 1}, 3), std::invalid_argument,
                   "groups=3 must divide both C_in=4");
  EXPECT_THROW_MSG(conv2d(x, zeros({6, 3, 3, 1}), {1, 1}, {0, 0}, {1, 1}, 4), std::invalid_argument,
                   "C_out=6");
  EXPECT_THROW_MSG(conv2d(x, w, {1, 1}, {0, 0}, {1, 1}, 0), std::invalid_argument, "groups must be positive");
  EXPECT_THROW_MSG(conv2d(x, w, {0, 1}), std::invalid_argument, "[conv2d] stride must be positive; got (0,1)");
  EXPECT_THROW_MSG(conv2d(x, w, {1, -2}), std::invalid_argument, "stride must be positive");
  EXPECT_THROW_MSG(conv2d(x, w, {1, 1}, {0, 0}, {1, 0}), std::invalid_argument, "dilation must be positive; got (1,0)");
  EXPECT_THROW_MSG(conv2d(x, w, {1, 1}, {-1, 0}), std::invalid_argument, "padding must be non-negative");
  EXPECT_THROW_MSG(conv2d(x, zeros({8, 6, 3, 4})), std::invalid_argument,
                   "[conv2d] kernel of extent 6 (weight (8,6,3,4), dilation 1) is larger than the padded input");
  EXPECT_THROW_MSG(conv2d(x, w, {1, 1}, {0, 0}, {3, 1}), std::invalid_argument, "kernel of extent 7");
  EXPECT_NO_THROW(conv2d(x, zeros({8, 6, 3, 4}), {1, 1}, {1, 0}));  // padding makes it fit
  EXPECT_THROW_MSG(conv2d(x, zeros({8, 0, 3, 4})), std::invalid_argument, "kernel spatial sizes must be positive");
  EXPECT_THROW_MSG(conv2d(zeros({2, 5, 5, 4}, int32), w), std::invalid_argument,
                   "[conv2d] needs floating-point input and weight; got int32 and float32");
  EXPECT_THROW_MSG(conv1d(zeros({2, 5, 4}), zeros({2, 3, 4}, bool_)), std::invalid_argument, "bool");
  EXPECT_THROW_MSG(conv_general(zeros({2, 4}), zeros({2, 4})), std::invalid_argument,
                   "[conv_general] input must have at least 3 dimensions");
  EXPECT_THROW_MSG(conv_general(x, w, {1, 1, 1}), std::invalid_argument,
                   "[conv_general] stride has 3 entries but the convolution has 2 spatial dimensions");
  EXPECT_THROW_MSG(conv_general(x, w, {}, {}, {}, {}, {0}), std::invalid_argument, "input_dilation must be positive");
  EXPECT_THROW_MSG(conv_general(x, w, {}, {0}, {-1}), std::invalid_argument, "padding must be non-negative");
}

TEST(Conv, SizesBeyondInt32AreOverflowErrors) {
  const int imax = std::numeric_limits<int>::max();
  array in = zeros({1, 8, 8, 1}), wt = zeros({1, 3, 3, 1});
  // Padding and input dilation that would make an output axis longer than a shape holds.
  EXPECT_THROW_MSG(conv_general(in, wt, {1, 1}, {imax, imax}, {imax, imax}, {1, 1}, {1, 1}), std::overflow_error,
                   "[conv_general] the output's spatial axis 0 would have 4294967300 elements");
  EXPECT_THROW_MSG(conv_general(in, wt, {1, 1}, {imax, 0}, {0, 0}, {1, 1}, {1, 1}), std::overflow_error,
                   "beyond the int32 sizes");
  EXPECT_THROW_MSG(conv_general(in, wt, {1, 1}, {0, 0}, {0, 0}, {1, 1}, {imax, imax}), std::overflow_error,
                   "input_dilation 2147483647");
  EXPECT_THROW_MSG(conv_transpose2d(zeros({1, 4, 4, 1}), wt, {1, 1}, {0, 0}, {imax, imax}, {0, 0}),
                   std::overflow_error, "[conv_transpose2d] output size along spatial axis 0 is too large");
  // A kernel dilated past the input is the kernel-extent error.
  EXPECT_THROW_MSG(conv_general(in, wt, {1, 1}, {0, 0}, {0, 0}, {imax, imax}, {1, 1}), std::invalid_argument,
                   "is larger than the padded input");
}

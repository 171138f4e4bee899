// fft (ops/fft.h): numpy's values, a double-precision DFT computed here at many lengths (the
// Stockham radices 2, 3, 4, 5, 8, the generic odd radix, Bluestein, and every lane path of the
// kernel), round trips, Parseval, n padding and truncation, every norm, non-last and several axes,
// batches, views, the shifts and sample frequencies, derivatives (finite differences, MLX's own
// expectations), vmap, export, shapeless compile, threads and every bad input.
#include <complex>
#include <sstream>
#include <thread>

#include "../test_utils.h"

using namespace loom;
using loom::testing::expect_array;
using loom::testing::expect_export_roundtrip;
using loom::testing::expect_vmap_matches_loop;
using loom::testing::lcg_uniform;

namespace {

using fft_c = complex64_t;
using fft_cd = std::complex<double>;

// Deterministic complex64 values with parts in [-1, 1).
array fft_random_complex(const Shape& shape, unsigned seed) {
  return astype(lcg_uniform(shape, -1, 1, seed), complex64) +
         astype(lcg_uniform(shape, -1, 1, seed, 99), complex64) * array(fft_c(0, 1));
}

std::vector<fft_cd> fft_host(const array& a_in) {
  array a = astype(a_in, complex64);
  std::vector<fft_cd> out;
  for (const fft_c& v : a.to_vector<fft_c>()) out.emplace_back(v.real(), v.imag());
  return out;
}

// Shape, dtype and values within tol * (1 + |want|) per part.
void fft_expect_complex(const array& got, const Shape& shape, const std::vector<fft_c>& want, double tol = 1e-5) {
  ASSERT_EQ(got.shape(), shape);
  ASSERT_EQ(got.dtype(), complex64);
  const std::vector<fft_cd> g = fft_host(got);
  ASSERT_EQ(g.size(), want.size());
  for (size_t i = 0; i < g.size(); ++i) {
    EXPECT_NEAR(g[i].real(), want[i].real(), tol * (1 + std::abs(want[i].real()))) << "at " << i;
    EXPECT_NEAR(g[i].imag(), want[i].imag(), tol * (1 + std::abs(want[i].imag()))) << "at " << i;
  }
}

// max |a - b| / max |b| over two complex arrays of one shape.
double fft_rel_error(const std::vector<fft_cd>& a, const std::vector<fft_cd>& b) {
  double err = 0, scale = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    err = std::max(err, std::abs(a[i] - b[i]));
    scale = std::max(scale, std::abs(b[i]));
  }
  return scale > 0 ? err / scale : err;
}

// The DFT in double: y_k = sum_j x_j exp(-+2 pi i j k / n), with exact angle indices (j k mod n).
std::vector<fft_cd> fft_naive(const fft_cd* x, int n, bool inverse) {
  std::vector<double> wr(n), wi(n);
  for (int t = 0; t < n; ++t) {
    const double a = 2 * loom::testing::kPi * t / n;
    wr[t] = std::cos(a);
    wi[t] = inverse ? std::sin(a) : -std::sin(a);
  }
  std::vector<fft_cd> y(n);
  for (int k = 0; k < n; ++k) {
    double sr = 0, si = 0;
    int t = 0;  // j k mod n
    for (int j = 0; j < n; ++j) {
      const double xr = x[j].real(), xi = x[j].imag();
      sr += xr * wr[t] - xi * wi[t];
      si += xr * wi[t] + xi * wr[t];
      t += k;
      if (t >= n) t -= n;
    }
    y[k] = fft_cd(sr, si);
  }
  return y;
}

// The bound on max |error| / max |value| of a float32 transform of length n.
double fft_bound(int n) { return 2e-6 * (1 + std::log2(double(n))); }

// The lengths the tests sweep: every radix, the generic odd radix (7, 17), Bluestein (97, 1021,
// 4093), smooth composites.
const std::vector<int> kFftLengths = {1, 2, 3, 5, 7, 8, 12, 17, 64, 97, 100, 128, 1000, 1021, 4093, 4096};

}  // namespace

// ---------------------------------------------------------------- values

// MLX's C++ tests (fft_tests.cpp, "test fft basics", "test real ffts", "test fftn"): exact values.
TEST(FFT, ExactSmallValuesAsMlx) {
  array x = array({0.0f, 1.0f, 2.0f, 3.0f});
  array y = fft::fft(x);
  EXPECT_EQ(y.dtype(), complex64);
  EXPECT_TRUE(array_equal(y, array({fft_c(6, 0), fft_c(-2, 2), fft_c(-2, 0), fft_c(-2, -2)})).item<bool>());
  EXPECT_TRUE(array_equal(fft::ifft(x), array({fft_c(1.5, 0), fft_c(-0.5, -0.5), fft_c(-0.5, 0), fft_c(-0.5, 0.5)}))
                  .item<bool>());
  const array z = array({fft_c(1, 1), fft_c(2, 1), fft_c(1, 2), fft_c(2, 2)});
  const array zf = fft::fft(z);
  EXPECT_TRUE(array_equal(zf, array({fft_c(6, 6), fft_c(-1, -1), fft_c(-2, 0), fft_c(1, -1)})).item<bool>());
  EXPECT_TRUE(array_equal(fft::ifft(zf), z).item<bool>());
  EXPECT_TRUE(array_equal(fft::rfft(x), array({fft_c(6, 0), fft_c(-2, 2), fft_c(-2, 0)})).item<bool>());
  const array h = fft::irfft(array({fft_c(0, 1), fft_c(1, 0)}));
  EXPECT_EQ(h.dtype(), float32);
  EXPECT_TRUE(array_equal(h, array({0.5f, -0.5f})).item<bool>());
  const array m = array({0.0f, 1.0f, 2.0f, 3.0f}, {2, 2});
  EXPECT_TRUE(
      array_equal(fft::fft(m, 0), array({fft_c(2, 0), fft_c(4, 0), fft_c(-2, 0), fft_c(-2, 0)}, {2, 2})).item<bool>());
  EXPECT_TRUE(
      array_equal(fft::fft2(m), array({fft_c(6, 0), fft_c(-2, 0), fft_c(-4, 0), fft_c(0, 0)}, {2, 2})).item<bool>());
  EXPECT_TRUE(array_equal(fft::ifft2(fft::fft2(m)), m).item<bool>());
  const array cube = reshape(arange(8, float32), {2, 2, 2});
  EXPECT_TRUE(array_equal(fft::fftn(cube), array({fft_c(28, 0), fft_c(-4, 0), fft_c(-8, 0), fft_c(0, 0), fft_c(-16, 0),
                                                  fft_c(0, 0), fft_c(0, 0), fft_c(0, 0)},
                                                 {2, 2, 2}))
                  .item<bool>());
  EXPECT_EQ(fft::fft(array({1.0f})).item<fft_c>(), fft_c(1, 0));
  EXPECT_EQ(fft::ifft(array({fft_c(1, 1)})).item<fft_c>(), fft_c(1, 1));
}

TEST(FFT, ValuesMatchNumpy) {
  const array x5 = array({1.0f, 2.5f, -1.0f, 0.5f, 3.0f});
  const array z4 = array({fft_c(1, 2), fft_c(-0.5, 1), fft_c(3, -1), fft_c(0.25, -2)});
  // numpy.fft.fft(x5)
  fft_expect_complex(fft::fft(x5), {5},
                     {fft_c(6, 0), fft_c(3.10410197f, 1.35720614f), fft_c(-3.60410197f, -1.13269215f),
                      fft_c(-3.60410197f, 1.13269215f), fft_c(3.10410197f, -1.35720614f)});
  // numpy.fft.rfft(x5)
  fft_expect_complex(fft::rfft(x5), {3},
                     {fft_c(6, 0), fft_c(3.10410197f, 1.35720614f), fft_c(-3.60410197f, -1.13269215f)});
  // numpy.fft.ifft(z4)
  fft_expect_complex(fft::ifft(z4), {4},
                     {fft_c(0.9375f, 0), fft_c(-1.25f, 0.5625f), fft_c(1.0625f, 0.5f), fft_c(0.25f, 0.9375f)});
  // numpy.fft.irfft(z4): n = 6; the imaginary parts of z4[0] and z4[3] (the zero and n / 2
  // frequencies) are ignored.
  expect_array(fft::irfft(z4), {6}, {1.04166667, -0.458333333, -0.785683603, 1.29166667, 0.369016936, -0.458333333},
               1e-6);
  // numpy.fft.irfft(z4, 7): odd n reads the first 4 frequencies, all of them complex but the first.
  expect_array(fft::irfft(z4, 7, -1), {7},
               {0.928571429, 0.101803997, -1.40235666, 0.999846917, 0.580338001, 0.296200266, -0.504403951}, 1e-6);
  // numpy.fft.fft2([[1, 2, -1], [0.5, -2, 3]])
  fft_expect_complex(fft::fft2(array({1.0f, 2.0f, -1.0f, 0.5f, -2.0f, 3.0f}, {2, 3})), {2, 3},
                     {fft_c(3.5f, 0), fft_c(0.5f, 1.73205081f), fft_c(0.5f, -1.73205081f), fft_c(0.5f, 0),
                      fft_c(0.5f, -6.92820323f), fft_c(0.5f, 6.92820323f)});
}

TEST(FFT, PaddingAndTruncationMatchNumpy) {
  const array x5 = array({1.0f, 2.5f, -1.0f, 0.5f, 3.0f});
  const array z4 = array({fft_c(1, 2), fft_c(-0.5, 1), fft_c(3, -1), fft_c(0.25, -2)});
  // numpy.fft.fft(x5, 8): zero-padded
  fft_expect_complex(fft::fft(x5, 8, 0), {8},
                     {fft_c(6, 0), fft_c(-0.585786438f, -1.12132034f), fft_c(5, -2), fft_c(-3.41421356f, -3.12132034f),
                      fft_c(0, 0), fft_c(-3.41421356f, 3.12132034f), fft_c(5, 2), fft_c(-0.585786438f, 1.12132034f)});
  // numpy.fft.fft(x5, 3): cropped
  fft_expect_complex(fft::fft(x5, 3, -1), {3}, {fft_c(2.5f, 0), fft_c(0.25f, -3.03108891f), fft_c(0.25f, 3.03108891f)});
  // numpy.fft.rfft(x5, 8)
  fft_expect_complex(
      fft::rfft(x5, 8, 0), {5},
      {fft_c(6, 0), fft_c(-0.585786438f, -1.12132034f), fft_c(5, -2), fft_c(-3.41421356f, -3.12132034f), fft_c(0, 0)});
  // numpy.fft.ifft(z4, 6)
  fft_expect_complex(
      fft::ifft(z4, 6, 0), {6},
      {fft_c(0.625f, 0), fft_c(-0.166666667f, 1.19417725f), fft_c(-0.288675135f, -0.505181486f),
       fft_c(0.708333333f, 0.333333333f), fft_c(0.288675135f, 0.505181486f), fft_c(-0.166666667f, 0.472489415f)});
  // numpy.fft.irfft(z4, 4): reads 3 of the 4 frequencies
  expect_array(fft::irfft(z4, 4, 0), {4}, {0.75, -1, 1.25, 0}, 1e-6);
  // Padding along one axis and cropping along another of a 2-d array: fft2 with s = (3, 2).
  const array m = reshape(arange(6, float32), {2, 3});
  const array cropped = fft::fft2(m, {3, 2}, {0, 1});
  EXPECT_EQ(cropped.shape(), (Shape{3, 2}));
  const array ref = fft::fft2(slice(pad(m, std::vector<int>{0}, {0}, {1}), {0, 0}, {3, 2}));
  EXPECT_TRUE(allclose(cropped, ref, 1e-6, 1e-6).item<bool>());
}

TEST(FFT, EveryNormMatchesNumpy) {
  const array x5 = array({1.0f, 2.5f, -1.0f, 0.5f, 3.0f});
  const array z4 = array({fft_c(1, 2), fft_c(-0.5, 1), fft_c(3, -1), fft_c(0.25, -2)});
  using fft::FFTNorm;
  // numpy.fft.fft(x5, norm="ortho"), numpy.fft.fft(x5, norm="forward")
  fft_expect_complex(fft::fft(x5, -1, FFTNorm::Ortho), {5},
                     {fft_c(2.68328157f, 0), fft_c(1.3881966f, 0.606961036f), fft_c(-1.6118034f, -0.506555328f),
                      fft_c(-1.6118034f, 0.506555328f), fft_c(1.3881966f, -0.606961036f)});
  fft_expect_complex(fft::fft(x5, -1, FFTNorm::Forward), {5},
                     {fft_c(1.2f, 0), fft_c(0.620820393f, 0.271441227f), fft_c(-0.720820393f, -0.22653843f),
                      fft_c(-0.720820393f, 0.22653843f), fft_c(0.620820393f, -0.271441227f)});
  // numpy.fft.ifft(z4, norm="ortho" / "forward")
  fft_expect_complex(fft::ifft(z4, -1, FFTNorm::Ortho), {4},
                     {fft_c(1.875f, 0), fft_c(-2.5f, 1.125f), fft_c(2.125f, 1), fft_c(0.5f, 1.875f)});
  fft_expect_complex(fft::ifft(z4, -1, FFTNorm::Forward), {4},
                     {fft_c(3.75f, 0), fft_c(-5, 2.25f), fft_c(4.25f, 2), fft_c(1, 3.75f)});
  // numpy.fft.rfft(x5, norm=...)
  fft_expect_complex(fft::rfft(x5, -1, FFTNorm::Ortho), {3},
                     {fft_c(2.68328157f, 0), fft_c(1.3881966f, 0.606961036f), fft_c(-1.6118034f, -0.506555328f)});
  fft_expect_complex(fft::rfft(x5, -1, FFTNorm::Forward), {3},
                     {fft_c(1.2f, 0), fft_c(0.620820393f, 0.271441227f), fft_c(-0.720820393f, -0.22653843f)});
  // numpy.fft.irfft(z4, 7, norm=...)
  expect_array(fft::irfft(z4, 7, -1, FFTNorm::Ortho), {7},
               {2.45676907, 0.269348058, -3.71028697, 2.64534629, 1.53543003, 0.783672241, -1.33452741}, 1e-6);
  expect_array(fft::irfft(z4, 7, -1, FFTNorm::Forward), {7},
               {6.5, 0.712627976, -9.8164966, 6.99892842, 4.06236601, 2.07340186, -3.53082766}, 1e-6);
  // Several axes: the norm counts every transformed point (n = 4 * 6 = 24 here).
  const array a = fft_random_complex({4, 6}, 3);
  const array back = fft::fft2(a);
  EXPECT_TRUE(allclose(fft::fft2(a, {-2, -1}, FFTNorm::Ortho), back * array(float(1 / std::sqrt(24.0))), 1e-5, 1e-6)
                  .item<bool>());
  EXPECT_TRUE(allclose(fft::fft2(a, {-2, -1}, FFTNorm::Forward), back * array(1.0f / 24), 1e-5, 1e-6).item<bool>());
  EXPECT_TRUE(
      allclose(fft::ifft2(a, {-2, -1}, FFTNorm::Forward), fft::ifft2(a) * array(24.0f), 1e-5, 1e-5).item<bool>());
  const array r = real(a);
  EXPECT_TRUE(allclose(fft::rfftn(r, FFTNorm::Ortho), fft::rfftn(r) * array(float(1 / std::sqrt(24.0))), 1e-5, 1e-6)
                  .item<bool>());
  const array h = fft::rfftn(r);
  EXPECT_TRUE(allclose(fft::irfftn(h, FFTNorm::Forward), fft::irfftn(h) * array(24.0f), 1e-5, 1e-5).item<bool>());
  EXPECT_TRUE(
      allclose(fft::irfftn(h, {0, 1}, FFTNorm::Ortho), fft::irfftn(h) * array(float(std::sqrt(24.0))), 1e-5, 1e-5)
          .item<bool>());
  EXPECT_THROW_MSG(fft::ifft(a, -1, static_cast<FFTNorm>(7)), std::invalid_argument,
                   "[fft::ifft] invalid normalization");
}

// ---------------------------------------------------------------- the kernel against a DFT in double

TEST(FFT, MatchesDoublePrecisionDftAtManyLengths) {
  for (int n : kFftLengths) {
    // Batches of 33 lines go through the kernel's 16-lane path (and a last group of one line); long
    // lines alone through its one-lane path.
    const int lines = n <= 128 ? 33 : 1;
    SCOPED_TRACE("n = " + std::to_string(n) + ", lines = " + std::to_string(lines));
    const array z = fft_random_complex({lines, n}, 11 + n);
    const array x = real(z);
    const array y = fft::fft(z), yi = fft::ifft(z), yr = fft::rfft(x);
    eval(y, yi, yr);
    const std::vector<fft_cd> zv = fft_host(z), xv = fft_host(x), got = fft_host(y), goti = fft_host(yi),
                              gotr = fft_host(yr);
    const int m = n / 2 + 1;
    for (int l = 0; l < lines; ++l) {
      const std::vector<fft_cd> f = fft_naive(zv.data() + size_t(l) * n, n, false);
      std::vector<fft_cd> g = fft_naive(zv.data() + size_t(l) * n, n, true);
      for (auto& v : g) v /= double(n);
      const std::vector<fft_cd> h = fft_naive(xv.data() + size_t(l) * n, n, false);
      EXPECT_LE(fft_rel_error({got.begin() + size_t(l) * n, got.begin() + size_t(l + 1) * n}, f), fft_bound(n))
          << "fft line " << l;
      EXPECT_LE(fft_rel_error({goti.begin() + size_t(l) * n, goti.begin() + size_t(l + 1) * n}, g), fft_bound(n))
          << "ifft line " << l;
      EXPECT_LE(
          fft_rel_error({gotr.begin() + size_t(l) * m, gotr.begin() + size_t(l + 1) * m}, {h.begin(), h.begin() + m}),
          fft_bound(n))
          << "rfft line " << l;
    }
  }
}

// irfft against the DFT of the Hermitian extension of a random half spectrum (whose zero and n / 2
// frequencies have imaginary parts, which irfft ignores), for even and odd n.
TEST(FFT, IrfftMatchesDoublePrecisionDft) {
  for (int n : {1, 2, 3, 7, 8, 12, 17, 97, 100, 1000, 1021}) {
    const int m = n / 2 + 1, lines = n <= 100 ? 20 : 1;
    SCOPED_TRACE("n = " + std::to_string(n));
    const array half = fft_random_complex({lines, m}, 5 + n);
    const array out = fft::irfft(half, n, -1);
    ASSERT_EQ(out.shape(), (Shape{lines, n}));
    ASSERT_EQ(out.dtype(), float32);
    const std::vector<fft_cd> hv = fft_host(half), got = fft_host(out);
    for (int l = 0; l < lines; ++l) {
      std::vector<fft_cd> full(n);
      for (int k = 0; k < n; ++k) {
        full[k] = k < m ? hv[size_t(l) * m + k] : std::conj(hv[size_t(l) * m + (n - k)]);
      }
      full[0] = full[0].real();
      if (n % 2 == 0) full[n / 2] = full[n / 2].real();
      std::vector<fft_cd> want = fft_naive(full.data(), n, true);
      for (auto& v : want) v = v.real() / double(n);
      EXPECT_LE(fft_rel_error({got.begin() + size_t(l) * n, got.begin() + size_t(l + 1) * n}, want), fft_bound(n))
          << "line " << l;
    }
  }
}

// The kernel's paths (16 lines in vector lanes, a full group or not, or one line at a time; rows
// through transposes, columns side by side; real lines of even length as half-length complex lines,
// of odd length as complex ones; lines of Bluestein lengths) give each line what it gives alone.
TEST(FFT, EveryLanePathAgreesWithSingleLines) {
  for (int n : {5, 16, 17, 97, 360, 1000, 4096, 5000}) {
    for (int lines : {3, 5, 12, 40}) {
      SCOPED_TRACE("n = " + std::to_string(n) + ", lines = " + std::to_string(lines));
      const array z = fft_random_complex({lines, n}, 7 * n + lines);
      const array x = real(z);
      const array y = fft::fft(z), yt = fft::fft(transpose(z), 0), yr = fft::rfft(x), yrt = fft::rfft(transpose(x), 0);
      const array back = fft::irfft(yr, n, -1), backt = fft::irfft(transpose(yr), n, 0);
      eval(y, yt, yr, yrt, back, backt);
      for (int l = 0; l < lines; l += (lines > 5 ? 7 : 1)) {
        const array one = fft::fft(take(z, l, 0)), one_r = fft::rfft(take(x, l, 0));
        EXPECT_TRUE(allclose(take(y, l, 0), one, 1e-5, 1e-4).item<bool>()) << "fft line " << l;
        EXPECT_TRUE(allclose(take(yt, l, 1), one, 1e-5, 1e-4).item<bool>()) << "fft column " << l;
        EXPECT_TRUE(allclose(take(yr, l, 0), one_r, 1e-5, 1e-4).item<bool>()) << "rfft line " << l;
        EXPECT_TRUE(allclose(take(yrt, l, 1), one_r, 1e-5, 1e-4).item<bool>()) << "rfft column " << l;
        EXPECT_TRUE(allclose(take(back, l, 0), take(x, l, 0), 1e-4, 1e-5).item<bool>()) << "irfft line " << l;
        EXPECT_TRUE(allclose(take(backt, l, 1), take(x, l, 0), 1e-4, 1e-5).item<bool>()) << "irfft column " << l;
      }
    }
  }
}

// Each line is transformed in a lane of its own: a line of zeros beside lines a million times larger
// comes out exactly zero, and a small line keeps its own relative accuracy.
TEST(FFT, LinesDoNotLeakIntoEachOther) {
  for (int n : {8, 9, 97, 1000, 1001}) {
    SCOPED_TRACE("n = " + std::to_string(n));
    const array big = real(fft_random_complex({40, n}, n)) * array(1e6f);
    const array small = real(fft_random_complex({1, n}, n + 1)) * array(1e-3f);
    const array mixed = concatenate({slice(big, {0, 0}, {3, n}), zeros({1, n}), small, slice(big, {3, 0}, {40, n})}, 0);
    const array cmixed = astype(mixed, complex64) * array(fft_c(1, -2));
    const array yr = fft::rfft(mixed), y = fft::fft(cmixed), back = fft::irfft(yr, n, -1);
    const array yt = fft::rfft(transpose(mixed), 0);
    eval(yr, y, back, yt);
    EXPECT_TRUE(array_equal(take(yr, 3, 0), zeros({n / 2 + 1}, complex64)).item<bool>());
    EXPECT_TRUE(array_equal(take(y, 3, 0), zeros({n}, complex64)).item<bool>());
    EXPECT_TRUE(array_equal(take(back, 3, 0), zeros({n})).item<bool>());
    EXPECT_TRUE(array_equal(take(yt, 3, 1), zeros({n / 2 + 1}, complex64)).item<bool>());
    const std::vector<fft_cd> xs = fft_host(take(mixed, 4, 0));
    const std::vector<fft_cd> want = fft_naive(xs.data(), n, false);
    EXPECT_LE(fft_rel_error(fft_host(take(yr, 4, 0)), {want.begin(), want.begin() + n / 2 + 1}), fft_bound(n));
    EXPECT_LE(fft_rel_error(fft_host(take(yt, 4, 1)), {want.begin(), want.begin() + n / 2 + 1}), fft_bound(n));
    EXPECT_TRUE(allclose(take(back, 4, 0), take(mixed, 4, 0), 1e-4, 1e-8).item<bool>());
  }
}

TEST(FFT, RoundTripsAndParseval) {
  for (int n : kFftLengths) {
    SCOPED_TRACE("n = " + std::to_string(n));
    const array z = fft_random_complex({3, n}, n);
    const array x = real(z);
    const double tol = 1e-5 * (1 + std::log2(double(n)));
    EXPECT_TRUE(allclose(fft::ifft(fft::fft(z)), z, tol, tol).item<bool>());
    EXPECT_TRUE(allclose(fft::fft(fft::ifft(z)), z, tol, tol).item<bool>());
    const array back = fft::irfft(fft::rfft(x), n, -1);
    EXPECT_EQ(back.dtype(), float32);
    EXPECT_TRUE(allclose(back, x, tol, tol).item<bool>());
    // Parseval: sum |x|^2 = sum |X|^2 / n; with the orthonormal norm, the sums are equal.
    const double energy = sum(square(abs(z))).item<float>();
    EXPECT_NEAR(sum(square(abs(fft::fft(z)))).item<float>() / n, energy, 1e-5 * energy * (1 + std::log2(double(n))));
    EXPECT_NEAR(sum(square(abs(fft::fft(z, -1, fft::FFTNorm::Ortho)))).item<float>(), energy,
                1e-5 * energy * (1 + std::log2(double(n))));
  }
  // Several axes, odd and even last lengths.
  const array cube = real(fft_random_complex({4, 5, 7}, 21));
  EXPECT_TRUE(allclose(fft::irfftn(fft::rfftn(cube), {4, 5, 7}, {0, 1, 2}), cube, 1e-5, 1e-5).item<bool>());
  EXPECT_TRUE(allclose(fft::irfftn(fft::rfftn(cube, {2, 0}), {7, 4}, {2, 0}), cube, 1e-5, 1e-5).item<bool>());
  const array zc = fft_random_complex({4, 5, 7}, 22);
  EXPECT_TRUE(allclose(fft::ifftn(fft::fftn(zc)), zc, 1e-5, 1e-5).item<bool>());
}

// ---------------------------------------------------------------- axes, batches, views

TEST(FFT, NonLastAndSeveralAxesMatchNumpy) {
  const array a = array({-1.0f, 2.5f, 0.5f, -1.5f, 1.0f, 4.5f,  2.5f, 0.5f, 3.0f, 6.5f,  4.5f,  2.5f,
                         5.0f,  8.5f, 6.5f, 4.5f,  7.0f, 10.5f, 8.5f, 6.5f, 9.0f, 12.5f, 10.5f, 8.5f},
                        {2, 3, 4});
  const std::vector<fft_c> f02 = {fft_c(25, 0),  fft_c(-3, -8), fft_c(-3, 0),  fft_c(-3, 8), fft_c(41, 0),
                                  fft_c(-3, -8), fft_c(-3, 0),  fft_c(-3, 8),  fft_c(57, 0), fft_c(-3, -8),
                                  fft_c(-3, 0),  fft_c(-3, 8),  fft_c(-24, 0), fft_c(0, 0),  fft_c(0, 0),
                                  fft_c(0, 0),   fft_c(-24, 0), fft_c(0, 0),   fft_c(0, 0),  fft_c(0, 0),
                                  fft_c(-24, 0), fft_c(0, 0),   fft_c(0, 0),   fft_c(0, 0)};
  // numpy.fft.fftn(a, axes=(0, 2)); numpy.fft.rfftn(a, axes=(2, 0)) is the same: its real axis (the
  // last listed, 0) keeps 2 / 2 + 1 = 2 frequencies. rfftn over (0, 2) keeps 4 / 2 + 1 = 3 along axis 2.
  fft_expect_complex(fft::fftn(a, {0, 2}), {2, 3, 4}, f02);
  fft_expect_complex(fft::fftn(a, {2, 0}), {2, 3, 4}, f02);
  fft_expect_complex(fft::rfftn(a, {2, 0}), {2, 3, 4}, f02);
  std::vector<fft_c> r02;
  for (int i = 0; i < 24; ++i) {
    if (i % 4 < 3) r02.push_back(f02[i]);
  }
  fft_expect_complex(fft::rfftn(a, {0, 2}), {2, 3, 3}, r02);
  // numpy.fft.rfftn(a, s=(3, 5), axes=(1, 2)): axis 2 padded to 5 (3 frequencies).
  fft_expect_complex(fft::rfftn(a, {3, 5}, {1, 2}), {2, 3, 3},
                     {fft_c(25.5f, 0), fft_c(-0.109423525f, -16.3659745f), fft_c(-5.14057647f, -2.22876181f),
                      fft_c(-12, 6.92820323f), fft_c(2.57432919f, 2.31793641f), fft_c(-1.40897706f, 3.1646143f),
                      fft_c(-12, -6.92820323f), fft_c(-0.720227224f, 3.38840268f), fft_c(-3.4451249f, 0.362097218f),
                      fft_c(97.5f, 0), fft_c(-5.67172942f, -33.4849918f), fft_c(9.42172942f, -12.8088963f),
                      fft_c(-12, 6.92820323f), fft_c(2.57432919f, 2.31793641f), fft_c(-1.40897706f, 3.1646143f),
                      fft_c(-12, -6.92820323f), fft_c(-0.720227224f, 3.38840268f), fft_c(-3.4451249f, 0.362097218f)});
  // b = numpy.fft.rfftn(a, axes=(1, 2)); numpy.fft.irfftn(b, s=(3, 5), axes=(1, 2)): an odd last length.
  const array b = fft::rfft2(a);
  ASSERT_EQ(b.shape(), (Shape{2, 3, 3}));
  expect_array(
      fft::irfftn(b, {3, 5}, {1, 2}), {2, 3, 5},
      {-1.1, 1.92169043, 1.3404564, -0.540456404, -1.12169043, 0.5, 3.52169043, 2.9404564, 1.0595436, 0.478309574,
       2.1,  5.12169043, 4.5404564, 2.6595436,    2.07830957,  3.7, 6.72169043, 6.1404564, 4.2595436, 3.67830957,
       5.3,  8.32169043, 7.7404564, 5.8595436,    5.27830957,  6.9, 9.92169043, 9.3404564, 7.4595436, 6.87830957},
      1e-5);
  // numpy.fft.irfft2(b) gives a back.
  expect_array(fft::irfft2(b), {2, 3, 4}, array(a).to_vector<double>(), 1e-5);
  EXPECT_EQ(fft::irfft2(b, {3, 5}, {-2, -1}).shape(), (Shape{2, 3, 5}));
  EXPECT_EQ(fft::rfft2(a, {3, 5}, {-2, -1}).shape(), (Shape{2, 3, 3}));
  // Every order of axes gives a composition of one-axis transforms.
  const array z = fft_random_complex({3, 4, 5}, 4);
  const array want = fft::fft(fft::fft(fft::fft(z, 0), 1), 2);
  EXPECT_TRUE(allclose(fft::fftn(z), want, 1e-5, 1e-5).item<bool>());
  EXPECT_TRUE(allclose(fft::fftn(z, {2, 0, 1}), want, 1e-5, 1e-5).item<bool>());
  EXPECT_TRUE(allclose(fft::ifftn(z, {1, 2}), fft::ifft(fft::ifft(z, 1), 2), 1e-5, 1e-6).item<bool>());
  // MLX's shapes (fft_tests.cpp "test fftn"): rfftn / irfftn of a (5, 4) array over both axes.
  const array f = reshape(arange(20, float32), {5, 4});
  EXPECT_EQ(fft::rfftn(f).shape(), (Shape{5, 3}));
  EXPECT_EQ(fft::rfftn(f, {1, 0}).shape(), (Shape{3, 4}));
  EXPECT_EQ(fft::irfftn(f).shape(), (Shape{5, 6}));
  EXPECT_EQ(fft::irfftn(f, {1, 0}).shape(), (Shape{8, 4}));
}

TEST(FFT, BatchedAndNonContiguousInputs) {
  const array z = fft_random_complex({4, 6, 10}, 8);
  // Transposed: the transformed axis is not the last in memory.
  const array t = transpose(z, {2, 0, 1});
  EXPECT_TRUE(allclose(fft::fft(t), fft::fft(copy(t)), 1e-6, 1e-6).item<bool>());
  EXPECT_TRUE(allclose(fft::fftn(t, {0, 2}), fft::fftn(contiguous(t), {0, 2}), 1e-6, 1e-6).item<bool>());
  // Sliced with steps, along and across the transformed axis.
  const array s = slice(z, {0, 1, 0}, {4, 6, 10}, {1, 2, 3});
  EXPECT_EQ(s.shape(), (Shape{4, 3, 4}));
  EXPECT_TRUE(allclose(fft::fft(s), fft::fft(copy(s)), 1e-6, 1e-6).item<bool>());
  EXPECT_TRUE(allclose(fft::fft(s, 1), fft::fft(copy(s), 1), 1e-6, 1e-6).item<bool>());
  const array r = real(z);
  const array rs = slice(r, {0, 0, 1}, {4, 6, 10}, {1, 1, 2});
  EXPECT_TRUE(allclose(fft::rfft(rs), fft::rfft(copy(rs)), 1e-6, 1e-6).item<bool>());
  EXPECT_TRUE(allclose(fft::rfftn(transpose(r)), fft::rfftn(copy(transpose(r))), 1e-5, 1e-5).item<bool>());
  const array h = fft::rfft(r);
  EXPECT_TRUE(
      allclose(fft::irfft(transpose(h, {0, 2, 1}), 10, 1), fft::irfft(copy(transpose(h, {0, 2, 1})), 10, 1), 1e-6, 1e-6)
          .item<bool>());
  // Broadcast (stride 0): every row is the same line.
  const array line = fft_random_complex({12}, 9);
  const array wide = broadcast_to(line, {7, 12});
  const array fw = fft::fft(wide);
  for (int i = 0; i < 7; ++i) EXPECT_TRUE(allclose(take(fw, i, 0), fft::fft(line), 1e-6, 1e-6).item<bool>());
  EXPECT_TRUE(allclose(fft::fft(broadcast_to(reshape(line, {12, 1}), {12, 20}), 0),
                       broadcast_to(reshape(fft::fft(line), {12, 1}), {12, 20}), 1e-6, 1e-6)
                  .item<bool>());
  // A batch of independent lines is the stack of their transforms.
  std::vector<array> rows;
  for (int i = 0; i < 4; ++i) rows.push_back(fft::fft(take(reshape(z, {24, 10}), 5 * i, 0)));
  const array batch = fft::fft(reshape(z, {24, 10}));
  for (int i = 0; i < 4; ++i) EXPECT_TRUE(allclose(take(batch, 5 * i, 0), rows[i], 1e-6, 1e-6).item<bool>());
  // A computed input the kernel may transform in place (its buffer donated).
  const array doubled = z * array(2.0f);
  const array kept = copy(doubled);
  eval(kept);
  EXPECT_TRUE(allclose(fft::fft(z * array(2.0f)), fft::fft(kept), 1e-6, 1e-6).item<bool>());
}

TEST(FFT, DtypesEmptyAndLengthOne) {
  const array i = array({1, 2, 3, 4}, int32);
  EXPECT_EQ(fft::fft(i).dtype(), complex64);
  EXPECT_TRUE(array_equal(fft::fft(i), fft::fft(array({1.0f, 2.0f, 3.0f, 4.0f}))).item<bool>());
  EXPECT_EQ(fft::fft(astype(i, float64)).dtype(), complex64);
  EXPECT_EQ(fft::rfft(i).dtype(), complex64);
  EXPECT_EQ(fft::rfft(astype(i, float16)).dtype(), complex64);
  EXPECT_TRUE(array_equal(fft::rfft(astype(i, float64)), fft::rfft(astype(i, float32))).item<bool>());
  EXPECT_EQ(fft::irfft(i).dtype(), float32);
  EXPECT_EQ(fft::irfft(astype(i, complex64)).shape(), (Shape{6}));
  EXPECT_EQ(fft::fft(array({true, false, true})).dtype(), complex64);
  // Empty batches, an empty axis padded by n.
  EXPECT_EQ(fft::fft(zeros({0, 4}, complex64)).shape(), (Shape{0, 4}));
  EXPECT_EQ(fft::rfft(zeros({0, 4})).shape(), (Shape{0, 3}));
  EXPECT_EQ(fft::irfft(zeros({3, 0, 4}, complex64)).shape(), (Shape{3, 0, 6}));
  fft_expect_complex(fft::fft(zeros({0}), 3, 0), {3}, {fft_c(0, 0), fft_c(0, 0), fft_c(0, 0)});
  // Length one: the identity (rfft: the value; irfft: the real part).
  const array one = fft_random_complex({5, 1}, 2);
  EXPECT_TRUE(array_equal(fft::fft(one), one).item<bool>());
  EXPECT_TRUE(array_equal(fft::ifft(one), one).item<bool>());
  EXPECT_TRUE(array_equal(fft::irfft(one, 1, -1), real(one)).item<bool>());
  EXPECT_TRUE(array_equal(fft::rfft(real(one)), astype(real(one), complex64)).item<bool>());
  // Empty axes: the input as it is (MLX).
  const array r = array({1.0f, 2.0f});
  EXPECT_EQ(fft::fftn(r, Shape{}, std::vector<int>{}).dtype(), float32);
}

// ---------------------------------------------------------------- shifts and frequencies

TEST(FFT, ShiftsMatchNumpy) {
  const array e = reshape(arange(12, float32), {3, 4});
  const array o = reshape(arange(15, float32), {3, 5});
  // numpy.fft.fftshift / ifftshift of arange(12).reshape(3, 4) and arange(15).reshape(3, 5)
  expect_array(fft::fftshift(e), {3, 4}, {10, 11, 8, 9, 2, 3, 0, 1, 6, 7, 4, 5});
  expect_array(fft::ifftshift(e), {3, 4}, {6, 7, 4, 5, 10, 11, 8, 9, 2, 3, 0, 1});
  expect_array(fft::fftshift(o), {3, 5}, {13, 14, 10, 11, 12, 3, 4, 0, 1, 2, 8, 9, 5, 6, 7});
  expect_array(fft::ifftshift(o), {3, 5}, {7, 8, 9, 5, 6, 12, 13, 14, 10, 11, 2, 3, 4, 0, 1});
  expect_array(fft::fftshift(o, {1}), {3, 5}, {3, 4, 0, 1, 2, 8, 9, 5, 6, 7, 13, 14, 10, 11, 12});
  expect_array(fft::ifftshift(o, {0}), {3, 5}, {5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 0, 1, 2, 3, 4});
  expect_array(fft::fftshift(o, {-1, 0}), {3, 5}, {13, 14, 10, 11, 12, 3, 4, 0, 1, 2, 8, 9, 5, 6, 7});
  // MLX's 1-d cases: [4 5 6 7 0 1 2 3] for 8 either way; for 7, [4 5 6 0 1 2 3] and [3 4 5 6 0 1 2].
  expect_array(fft::fftshift(arange(7, float32)), {7}, {4, 5, 6, 0, 1, 2, 3});
  expect_array(fft::ifftshift(arange(7, float32)), {7}, {3, 4, 5, 6, 0, 1, 2});
  expect_array(fft::ifftshift(arange(8, float32)), {8}, {4, 5, 6, 7, 0, 1, 2, 3});
  // Inverse of each other, complex values, 0-d and empty arrays.
  const array z = fft_random_complex({5, 6, 3}, 1);
  EXPECT_TRUE(array_equal(fft::ifftshift(fft::fftshift(z)), z).item<bool>());
  EXPECT_TRUE(array_equal(fft::fftshift(fft::ifftshift(z, {0, 2}), {0, 2}), z).item<bool>());
  EXPECT_EQ(fft::fftshift(array(3.0f)).item<float>(), 3.0f);
  EXPECT_EQ(fft::fftshift(zeros({0})).shape(), (Shape{0}));
  EXPECT_TRUE(array_equal(fft::fftshift(e, std::vector<int>{}), e).item<bool>());
  // The shift's derivative is the opposite shift.
  EXPECT_TRUE(
      array_equal(grad([](const array& x) { return sum(fft::fftshift(x) * arange(5, float32)); })(arange(5, float32)),
                  fft::ifftshift(arange(5, float32)))
          .item<bool>());
}

TEST(FFT, FrequenciesMatchNumpy) {
  // numpy.fft.fftfreq(n, d).astype(float32) and numpy.fft.rfftfreq(n, d).astype(float32)
  expect_array(fft::fftfreq(1), {1}, {0});
  expect_array(fft::fftfreq(4, 0.5), {4}, {0, 0.5, -1, -0.5}, 0);
  expect_array(fft::fftfreq(5, 0.25), {5}, {0, 0.800000012, 1.60000002, -1.60000002, -0.800000012}, 1e-7);
  expect_array(fft::fftfreq(8, -0.5), {8}, {-0.0, -0.25, -0.5, -0.75, 1, 0.75, 0.5, 0.25}, 0);
  expect_array(fft::fftfreq(6), {6}, {0, 0.166666672, 0.333333343, -0.5, -0.333333343, -0.166666672}, 1e-7);
  expect_array(fft::rfftfreq(1), {1}, {0});
  expect_array(fft::rfftfreq(4, 0.5), {3}, {0, 0.5, 1}, 0);
  expect_array(fft::rfftfreq(5, 0.25), {3}, {0, 0.800000012, 1.60000002}, 1e-7);
  expect_array(fft::rfftfreq(8, -0.5), {5}, {-0.0, -0.25, -0.5, -0.75, -1}, 0);
  expect_array(fft::rfftfreq(6), {4}, {0, 0.166666672, 0.333333343, 0.5}, 1e-7);
  EXPECT_EQ(fft::fftfreq(6).dtype(), float32);
  EXPECT_EQ(fft::rfftfreq(6).dtype(), float32);
}

// ---------------------------------------------------------------- derivatives

// Finite differences (autograd/check.h) of every transform, as functions of the real and imaginary
// parts of their input (complex64 is computed in float32, so steps are large: the maps are linear).
TEST(FFT, GradientsMatchFiniteDifferences) {
  using fft::FFTNorm;
  auto complex_in = [](const std::vector<array>& v) {
    return astype(v[0], complex64) + astype(v[1], complex64) * array(fft_c(0, 1));
  };
  auto parts = [](const array& y) {
    return y.dtype() == complex64 ? std::vector<array>{real(y), imag(y)} : std::vector<array>{y};
  };
  struct Case {
    const char* name;
    bool complex_input;
    Shape shape;
    std::function<array(const array&)> f;
  };
  const std::vector<Case> cases = {
      {"fft", true, {2, 6}, [](const array& z) { return fft::fft(z); }},
      {"fft odd", true, {7}, [](const array& z) { return fft::fft(z); }},
      {"fft padded", true, {2, 5}, [](const array& z) { return fft::fft(z, 8, -1); }},
      {"fft cropped axis 0", true, {5, 2}, [](const array& z) { return fft::fft(z, 3, 0); }},
      {"fft ortho", true, {6}, [](const array& z) { return fft::fft(z, -1, FFTNorm::Ortho); }},
      {"fft forward", true, {6}, [](const array& z) { return fft::fft(z, -1, FFTNorm::Forward); }},
      {"fft2", true, {3, 4}, [](const array& z) { return fft::fft2(z); }},
      {"fftn 0 2",
       true,
       {2, 3, 3},
       [](const array& z) {
         return fft::fftn(z, {2, 0});
       }},
      {"ifft", true, {2, 6}, [](const array& z) { return fft::ifft(z); }},
      {"ifft ortho", true, {5}, [](const array& z) { return fft::ifft(z, -1, FFTNorm::Ortho); }},
      {"ifft forward", true, {5}, [](const array& z) { return fft::ifft(z, -1, FFTNorm::Forward); }},
      {"ifftn", true, {3, 4}, [](const array& z) { return fft::ifftn(z); }},
      {"rfft even", false, {2, 6}, [](const array& x) { return fft::rfft(x); }},
      {"rfft odd", false, {7}, [](const array& x) { return fft::rfft(x); }},
      {"rfft padded", false, {6}, [](const array& x) { return fft::rfft(x, 9, 0); }},
      {"rfft ortho", false, {8}, [](const array& x) { return fft::rfft(x, -1, FFTNorm::Ortho); }},
      {"rfft forward", false, {5}, [](const array& x) { return fft::rfft(x, -1, FFTNorm::Forward); }},
      {"rfft2", false, {3, 4}, [](const array& x) { return fft::rfft2(x); }},
      {"rfftn 2 0",
       false,
       {3, 2, 5},
       [](const array& x) {
         return fft::rfftn(x, {2, 0});
       }},
      {"irfft even", true, {2, 4}, [](const array& z) { return fft::irfft(z); }},
      {"irfft odd", true, {4}, [](const array& z) { return fft::irfft(z, 7, -1); }},
      {"irfft cropped", true, {5}, [](const array& z) { return fft::irfft(z, 4, 0); }},
      {"irfft ortho", true, {4}, [](const array& z) { return fft::irfft(z, 6, -1, FFTNorm::Ortho); }},
      {"irfft forward", true, {4}, [](const array& z) { return fft::irfft(z, 7, -1, FFTNorm::Forward); }},
      {"irfft2", true, {3, 3}, [](const array& z) { return fft::irfft2(z); }},
      {"irfftn odd",
       true,
       {3, 3},
       [](const array& z) {
         return fft::irfftn(z, {3, 5}, {0, 1});
       }},
      {"irfftn axis 0 last",
       true,
       {4, 3},
       [](const array& z) {
         return fft::irfftn(z, {5, 3}, {1, 0});
       }},
  };
  for (const Case& cs : cases) {
    SCOPED_TRACE(cs.name);
    const array re = lcg_uniform(cs.shape, -1, 1, 3), im = lcg_uniform(cs.shape, -1, 1, 4);
    GradCheck r;
    if (cs.complex_input) {
      r = check_grads([&](const std::vector<array>& v) { return parts(cs.f(complex_in(v))); }, {re, im}, {}, 0.25, 2e-3,
                      2e-3);
    } else {
      r = check_grads([&](const std::vector<array>& v) { return parts(cs.f(astype(v[0], float32))); }, {re}, {}, 0.25,
                      2e-3, 2e-3);
    }
    EXPECT_TRUE(r.ok) << r.report;
  }
}

// MLX's C++ test (fft_tests.cpp, "test fft grads"): the vjps and jvps as MLX writes them, bit for bit.
TEST(FFT, VjpAndJvpAsMlx) {
  auto fft_fn = [](const array& x) { return fft::fft(x); };
  array cot = astype(arange(10, float32), complex64);
  EXPECT_TRUE(array_equal(fft::ifft(cot) * array(10.0f), vjp(fft_fn, zeros_like(cot), cot).second).item<bool>());
  EXPECT_TRUE(array_equal(fft::fft(cot), jvp(fft_fn, zeros_like(cot), cot).second).item<bool>());
  auto ifft_fn = [](const array& x) { return fft::ifft(x); };
  EXPECT_TRUE(array_equal(fft::fft(cot) * array(0.1f), vjp(ifft_fn, zeros_like(cot), cot).second).item<bool>());
  EXPECT_TRUE(array_equal(fft::ifft(cot), jvp(ifft_fn, zeros_like(cot), cot).second).item<bool>());
  auto rfft_fn = [](const array& x) { return fft::rfft(x); };
  const array c6 = astype(arange(6, float32), complex64);
  const array half = array({1.0f, 0.5f, 0.5f, 0.5f, 0.5f, 1.0f}, complex64);
  EXPECT_TRUE(
      array_equal(fft::irfft(c6 * half, 10, 0) * array(10.0f), vjp(rfft_fn, zeros({10}), c6).second).item<bool>());
  const array t10 = arange(10, float32);
  EXPECT_TRUE(array_equal(fft::rfft(t10), jvp(rfft_fn, zeros_like(t10), t10).second).item<bool>());
  auto irfft_fn = [](const array& x) { return fft::irfft(x); };
  const array mask = array({0.1f, 0.2f, 0.2f, 0.2f, 0.2f, 0.1f});
  EXPECT_TRUE(
      array_equal(fft::rfft(t10) * mask, vjp(irfft_fn, astype(zeros({6}), complex64), t10).second).item<bool>());
  EXPECT_TRUE(array_equal(fft::irfft(c6), jvp(irfft_fn, zeros_like(c6), c6).second).item<bool>());
  // n-dimensional vjps keep the primal's shape.
  EXPECT_EQ(vjp([](const array& x) { return fft::fftn(x); }, zeros({5, 5}, complex64), zeros({5, 5}, complex64))
                .second.shape(),
            (Shape{5, 5}));
  EXPECT_EQ(vjp([](const array& x) { return fft::rfftn(x); }, zeros({5, 9}), zeros({5, 5}, complex64)).second.shape(),
            (Shape{5, 9}));
  EXPECT_EQ(vjp([](const array& x) { return fft::irfftn(x); }, zeros({5, 5}, complex64), zeros({5, 8})).second.shape(),
            (Shape{5, 5}));
  // An odd output length: the jvp and the vjp keep it (MLX's jvp would give 2 (m - 1)).
  auto odd = [](const array& x) { return fft::irfft(x, 7, -1); };
  const array c4 = astype(arange(4, float32), complex64);
  EXPECT_EQ(jvp(odd, zeros_like(c4), c4).second.shape(), (Shape{7}));
  EXPECT_TRUE(array_equal(jvp(odd, zeros_like(c4), c4).second, fft::irfft(c4, 7, -1)).item<bool>());
  EXPECT_EQ(vjp(odd, zeros_like(c4), arange(7, float32)).second.shape(), (Shape{4}));
  // Gradients of a real loss (MLX's Python test_fft_grads, against its PyTorch reference): the gradient
  // of sum |fft(x)|^2 is 2 n x, of sum |ifft(x)|^2 is 2 x / n (Parseval).
  const array z = fft_random_complex({6}, 12);
  const array g = grad([](const array& x) { return sum(square(abs(fft::fft(x)))); })(z);
  EXPECT_TRUE(allclose(g, z * array(12.0f), 1e-5, 1e-5).item<bool>());
  const array gi = grad([](const array& x) { return sum(square(abs(fft::ifft(x)))); })(z);
  EXPECT_TRUE(allclose(gi, z * array(2.0f / 6), 1e-5, 1e-6).item<bool>());
}

// ---------------------------------------------------------------- transforms of the graph

TEST(FFT, VmapMatchesLoop) {
  const array z = fft_random_complex({3, 4, 6}, 1);
  const array x = real(z);
  const array h = fft_random_complex({3, 4, 4}, 2);
  using fft::FFTNorm;
  const std::vector<std::pair<const char*, std::function<array(const array&)>>> complex_ops = {
      {"fft", [](const array& a) { return fft::fft(a); }},
      {"fft axis 0", [](const array& a) { return fft::fft(a, 0); }},
      {"fft padded", [](const array& a) { return fft::fft(a, 9, -1); }},
      {"ifft ortho", [](const array& a) { return fft::ifft(a, 0, FFTNorm::Ortho); }},
      {"fft2", [](const array& a) { return fft::fft2(a); }},
      {"ifftn 1 0",
       [](const array& a) {
         return fft::ifftn(a, {1, 0});
       }},
  };
  for (const auto& op : complex_ops) {
    SCOPED_TRACE(op.first);
    for (int axis : {0, 1, 2}) expect_vmap_matches_loop(loom::testing::as_vector_fn(op.second), {z}, {axis});
  }
  const std::vector<std::pair<const char*, std::function<array(const array&)>>> real_ops = {
      {"rfft", [](const array& a) { return fft::rfft(a); }},
      {"rfft axis 0 odd", [](const array& a) { return fft::rfft(a, 5, 0); }},
      {"rfft2",
       [](const array& a) {
         return fft::rfft2(a, {1, 0});
       }},
  };
  for (const auto& op : real_ops) {
    SCOPED_TRACE(op.first);
    for (int axis : {0, 1, 2}) expect_vmap_matches_loop(loom::testing::as_vector_fn(op.second), {x}, {axis});
  }
  const std::vector<std::pair<const char*, std::function<array(const array&)>>> inverse_real_ops = {
      {"irfft", [](const array& a) { return fft::irfft(a); }},
      {"irfft odd", [](const array& a) { return fft::irfft(a, 7, -1); }},
      {"irfft2 odd",
       [](const array& a) {
         return fft::irfft2(a, {3, 5}, {0, 1});
       }},
  };
  for (const auto& op : inverse_real_ops) {
    SCOPED_TRACE(op.first);
    for (int axis : {0, 1, 2}) expect_vmap_matches_loop(loom::testing::as_vector_fn(op.second), {h}, {axis});
  }
  // The vjp and the jvp under vmap (per-example gradients of a spectral loss).
  auto loss = [](const array& a) { return sum(square(abs(fft::rfft(a, 10, -1)))); };
  expect_vmap_matches_loop([&](const std::vector<array>& v) { return std::vector<array>{grad(loss)(v[0])}; }, {x}, {1});
  expect_vmap_matches_loop(
      [](const std::vector<array>& v) {
        return jvp([](const std::vector<array>& a) { return std::vector<array>{fft::irfft(a[0], 5, -1)}; }, {v[0]},
                   {v[0]})
            .second;
      },
      {h}, {2});
}

TEST(FFT, ExportRoundtrip) {
  const array z = fft_random_complex({3, 8}, 1);
  using fft::FFTNorm;
  expect_export_roundtrip(fft::fft(z));
  expect_export_roundtrip(fft::ifftn(z, {1, 0}, FFTNorm::Ortho));
  expect_export_roundtrip(fft::rfft(real(z), 5, 0, FFTNorm::Forward));
  expect_export_roundtrip(fft::irfftn(z, {3, 7}, {0, 1}));
  expect_export_roundtrip(fft::irfft(z, 9, -1, FFTNorm::Ortho));
}

// The profiler's name for each kind.
TEST(FFT, PrintNamesTheKind) {
  auto printed = [](const array& a) {
    std::ostringstream os;
    a.primitive().print(os);
    return os.str();
  };
  const array z = fft_random_complex({3, 8}, 1);
  EXPECT_EQ(printed(fft::fft(z)), "FFT(fft, axes=[1], norm=backward)");
  EXPECT_EQ(printed(fft::ifft2(z, {0, 1}, fft::FFTNorm::Ortho)), "FFT(ifft, axes=[0, 1], norm=ortho)");
  EXPECT_EQ(printed(fft::rfft(real(z), 0)), "FFT(rfft, axes=[0], norm=backward)");
  EXPECT_EQ(printed(fft::irfft(z, 7, -1, fft::FFTNorm::Forward)), "FFT(irfft, axes=[1], norm=forward)");
}

TEST(FFT, ShapelessCompileInfersShapes) {
  auto f = compile(
      [](const std::vector<array>& v) {
        return std::vector<array>{fft::rfft(v[0]), fft::fft2(v[1]), fft::irfft(v[2], -1, fft::FFTNorm::Ortho)};
      },
      true);
  for (int n : {6, 9}) {
    const array x = real(fft_random_complex({2, n}, n)), z = fft_random_complex({3, n}, n + 1),
                h = fft_random_complex({4, n}, n + 2);
    const std::vector<array> got = f({x, z, h});
    EXPECT_EQ(got[0].shape(), (Shape{2, n / 2 + 1}));
    EXPECT_TRUE(allclose(got[0], fft::rfft(x), 1e-6, 1e-6).item<bool>());
    EXPECT_TRUE(allclose(got[1], fft::fft2(z), 1e-6, 1e-6).item<bool>());
    EXPECT_EQ(got[2].shape(), (Shape{4, 2 * (n - 1)}));
    EXPECT_TRUE(allclose(got[2], fft::irfft(h, -1, fft::FFTNorm::Ortho), 1e-6, 1e-6).item<bool>());
  }
}

// ---------------------------------------------------------------- threads

TEST(FFT, ThreadCountsGiveTheSameBits) {
  const int saved = get_num_threads();
  const array z = fft_random_complex({64, 360}, 1);
  std::vector<array> per;
  for (int threads : {1, 2}) {
    set_num_threads(threads);
    const array a = fft::fft(z), b = fft::fft2(z), c = fft::rfft(real(z), 0), d = fft::irfft(z, 700, -1);
    eval(a, b, c, d);
    per.insert(per.end(), {a, b, c, d});
  }
  set_num_threads(saved);
  for (int k = 0; k < 4; ++k) EXPECT_TRUE(array_equal(per[k], per[k + 4]).item<bool>()) << k;
}

// Plans are made once per length and shared: threads asking for the same new lengths at once get
// the same results as one thread.
TEST(FFT, ConcurrentPlansAgree) {
  const std::vector<int> lengths = {4099, 1155, 1031, 2 * 4099, 3 * 29 * 31, 4099 * 2 - 1};
  std::vector<array> want;
  std::vector<array> inputs;
  for (int n : lengths) inputs.push_back(fft_random_complex({2, n}, n));
  eval(inputs);
  std::vector<std::vector<array>> got(4);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (size_t i = 0; i < lengths.size(); ++i) {
        const size_t k = (i + t) % lengths.size();
        array y = fft::fft(inputs[k]);
        y.eval();
        got[t].push_back(y);
      }
    });
  }
  for (auto& th : threads) th.join();
  for (size_t k = 0; k < lengths.size(); ++k) want.push_back(fft::fft(inputs[k]));
  eval(want);
  for (int t = 0; t < 4; ++t) {
    for (size_t i = 0; i < lengths.size(); ++i) {
      const size_t k = (i + t) % lengths.size();
      EXPECT_TRUE(array_equal(got[t][i], want[k]).item<bool>()) << "thread " << t << " length " << lengths[k];
    }
  }
}

// ---------------------------------------------------------------- errors

TEST(FFT, BadInputsNameTheOp) {
  const array x = zeros({5, 5, 5});
  const array s = array(1.0f);
  EXPECT_THROW_MSG(fft::fft(s), std::invalid_argument, "[fft::fft] needs an array of at least one dimension");
  EXPECT_THROW_MSG(fft::ifft(s), std::invalid_argument, "[fft::ifft]");
  EXPECT_THROW_MSG(fft::irfftn(s), std::invalid_argument, "[fft::irfftn]");
  EXPECT_THROW_MSG(fft::rfftn(s, {1}, {0}), std::invalid_argument, "[fft::rfftn]");
  // n and axes of different sizes.
  EXPECT_THROW_MSG(fft::fftn(x, {5, 5, 5}, {0}), std::invalid_argument,
                   "[fft::fftn] got 3 lengths (5,5,5) for 1 axes [0]");
  EXPECT_THROW_MSG(fft::fftn(x, {}, {0, 3}), std::invalid_argument, "[fft::fftn] got 0 lengths");
  EXPECT_THROW_MSG(fft::rfft2(x, {4}, {0, 1}), std::invalid_argument, "[fft::rfft2]");
  // Axes out of range (std::out_of_range, as every op's) and duplicated.
  EXPECT_THROW_MSG(fft::fftn(x, {5, 5}, {0, 3}), std::out_of_range,
                   "[fft::fftn] axis 3 is out of range for an array of 3");
  EXPECT_THROW_MSG(fft::fftn(x, {5, 5}, {0, -4}), std::out_of_range, "[fft::fftn] axis -4");
  EXPECT_THROW_MSG(fft::fft(x, 3), std::out_of_range, "[fft::fft] axis 3");
  EXPECT_THROW_MSG(fft::fft2(zeros({4})), std::out_of_range, "[fft::fft2] axis -2");
  EXPECT_THROW_MSG(fft::irfftn(x, {5, 5}, {1, -2}), std::invalid_argument,
                   "[fft::irfftn] axes [1, -2] name axis 1 twice");
  EXPECT_THROW_MSG(fft::fftn(x, {0, 0}), std::invalid_argument, "[fft::fftn] axes [0, 0] name axis 0 twice");
  // Lengths that are not positive, given or implied (irfft of one frequency: 2 (1 - 1) = 0).
  EXPECT_THROW_MSG(fft::fftn(x, {0}, {0}), std::invalid_argument,
                   "[fft::fftn] transform lengths must be positive; got (0)");
  EXPECT_THROW_MSG(fft::fft(x, -2, 1), std::invalid_argument, "[fft::fft] transform lengths must be positive");
  EXPECT_THROW_MSG(fft::rfft(x, 0, 1), std::invalid_argument, "[fft::rfft] transform lengths must be positive");
  EXPECT_THROW_MSG(fft::irfft(zeros({3, 1}, complex64)), std::invalid_argument,
                   "[fft::irfft] transform lengths must be positive");
  EXPECT_THROW_MSG(fft::ifft2(x, {3, -1}, {0, 1}), std::invalid_argument, "[fft::ifft2]");
  // A complex input to a real transform.
  EXPECT_THROW_MSG(fft::rfft(zeros({4}, complex64)), std::invalid_argument,
                   "[fft::rfft] takes a real input; got complex64");
  EXPECT_THROW_MSG(fft::rfftn(zeros({4, 4}, complex64)), std::invalid_argument, "[fft::rfftn] takes a real input");
  // Shifts: axes out of range.
  EXPECT_THROW_MSG(fft::fftshift(zeros({4, 4}), {2}), std::out_of_range, "[fft::fftshift] axis 2");
  EXPECT_THROW_MSG(fft::ifftshift(zeros({4, 4}), {-3}), std::out_of_range, "[fft::ifftshift] axis -3");
  // Frequencies.
  EXPECT_THROW_MSG(fft::fftfreq(0), std::invalid_argument, "[fft::fftfreq] n must be positive; got 0");
  EXPECT_THROW_MSG(fft::fftfreq(4, 0.0), std::invalid_argument, "[fft::fftfreq] the sample spacing d must not be 0");
  EXPECT_THROW_MSG(fft::rfftfreq(-1), std::invalid_argument, "[fft::rfftfreq] n must be positive; got -1");
  EXPECT_THROW_MSG(fft::rfftfreq(4, 0.0), std::invalid_argument, "[fft::rfftfreq]");
}

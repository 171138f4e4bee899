// The FFT kernel (ops/kernels/fft.h): Loom's own, MIT like the rest (FFTW is GPL; Debian packages no
// pocketfft).
//
// A complex transform of length n runs as Stockham passes, each a radix-R butterfly over every
// group of R values n / R apart, after multiplying them by the pass's twiddles, written so that the
// result comes out in natural order (no bit reversal): pass t reads x[j + r n/R] and writes
// y[(j / ns) ns R + j % ns + r ns], ns being the product of the radices of the passes before it.
// Radix 8 and 4 take the powers of two (at most one radix 2), then 3, 5 and a generic odd radix for
// the other primes up to kMaxGenericRadix; longer primes go through Bluestein's chirp-z transform,
// two transforms of a smooth length m >= 2n - 1. Twiddles are computed in double (reduced to the
// first octant, so that they are exact at multiples of pi / 4) and kept in float.
//
// Values live in split form (real parts, then imaginary parts) in per-thread scratch buffers. When
// there are enough lines, V = 16 lines are transformed together, element j of lane v at
// [j V + v]: every butterfly then works on whole vectors of V lanes (GCC / Clang vector types),
// whatever the radix and the pass. Sixteen rows come in and go out through 16 x 16 transposes in
// registers; sixteen lines side by side (an axis that is not the last) as whole vectors at each
// element. A line on its own (or few lines) runs with V = 1, where the passes vectorize along their
// inner loop. Threads take groups of lines.
//
// Real transforms: a line of even length n is transformed as n / 2 complex values (its even and odd
// samples), whose spectrum one pass of twiddles turns into the line's; the inverse (c2r) runs the
// same steps backwards. A line of odd length is transformed as complex values with no imaginary
// parts. Each line keeps a lane of its own: packing two real lines into one complex line (as real and
// imaginary parts) would halve the work for odd n, but would leak one line's rounding errors, at its
// magnitude, into the other (a line of zeros beside large values would not come out zero).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

#include "loom/core/loops.h"
#include "loom/core/parallel.h"
#include "loom/kernels/fft.h"

namespace loom::kernels::fft {

namespace {

// ---------------------------------------------------------------- twiddles

// cos and sin of 2 pi k / n, computed on an angle reduced to [0, pi / 4] by the symmetries of the
// circle: exact (0, +-1) at multiples of pi / 2, and w^k, w^(n-k) conjugates of each other to the bit.
void cos_sin(int64_t k, int64_t n, double& c, double& s) {
  k %= n;
  if (k < 0) k += n;
  bool neg_s = false, neg_c = false, swap = false;
  int64_t num = k, den = n;  // angle = 2 pi num / den
  if (2 * num > den) {       // (pi, 2 pi): 2 pi - angle, sin changes sign
    num = den - num;
    neg_s = true;
  }
  if (4 * num > den) {  // (pi / 2, pi]: pi - angle, cos changes sign
    num = den - 2 * num;
    den *= 2;
    neg_c = true;
  }
  if (8 * num > den) {  // (pi / 4, pi / 2]: pi / 2 - angle, cos and sin swap
    num = den - 4 * num;
    den *= 4;
    swap = true;
  }
  const double a = 6.283185307179586476925286766559 * double(num) / double(den);
  double cc = std::cos(a), ss = std::sin(a);
  if (swap) std::swap(cc, ss);
  c = neg_c ? -cc : cc;
  s = neg_s ? -ss : ss;
}

// ---------------------------------------------------------------- lanes and complex arithmetic

// Lanes of V lines as one value: float (V = 1) or a GCC / Clang vector of V floats. The vectors are
// only ever passed between functions of this file, which are inlined: GCC's note that 64-byte
// vectors are passed differently without AVX-512 (-Wpsabi) concerns calls across libraries.
#pragma GCC diagnostic ignored "-Wpsabi"
typedef float Vec16 __attribute__((vector_size(64)));
template <int V>
struct LaneType;
template <>
struct LaneType<1> {
  using T = float;
};
template <>
struct LaneType<16> {
  using T = Vec16;
};
template <typename T>
constexpr int kLanes = int(sizeof(T) / sizeof(float));

#define LOOM_FFT_INLINE inline __attribute__((always_inline))

template <typename T>
LOOM_FFT_INLINE T load(const float* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}
template <typename T>
LOOM_FFT_INLINE void store(float* p, const T& v) {
  std::memcpy(p, &v, sizeof(T));
}

template <typename T>
struct Cx {
  T r, i;
};
struct Cf {  // a scalar (twiddle) factor
  float r, i;
};
template <typename T>
LOOM_FFT_INLINE Cx<T> add(const Cx<T>& a, const Cx<T>& b) {
  return {a.r + b.r, a.i + b.i};
}
template <typename T>
LOOM_FFT_INLINE Cx<T> sub(const Cx<T>& a, const Cx<T>& b) {
  return {a.r - b.r, a.i - b.i};
}
template <typename T>
LOOM_FFT_INLINE Cx<T> mul(const Cx<T>& a, Cf w) {
  return {a.r * w.r - a.i * w.i, a.r * w.i + a.i * w.r};
}
template <typename T>
LOOM_FFT_INLINE Cx<T> scl(const Cx<T>& a, float s) {
  return {a.r * s, a.i * s};
}
// a times -i (forward) or +i (inverse): the sign of the exponent.
template <bool Inv, typename T>
LOOM_FFT_INLINE Cx<T> rot(const Cx<T>& a) {
  if constexpr (Inv) {
    return {-a.i, a.r};
  } else {
    return {a.i, -a.r};
  }
}

// ---------------------------------------------------------------- butterflies (in place)

template <bool Inv, typename T>
LOOM_FFT_INLINE void dft2(Cx<T>* a) {
  const Cx<T> t = a[0];
  a[0] = add(t, a[1]);
  a[1] = sub(t, a[1]);
}

template <bool Inv, typename T>
LOOM_FFT_INLINE void dft4(Cx<T>& a0, Cx<T>& a1, Cx<T>& a2, Cx<T>& a3) {
  const Cx<T> t0 = add(a0, a2), t1 = sub(a0, a2), t2 = add(a1, a3), t3 = rot<Inv>(sub(a1, a3));
  a0 = add(t0, t2);
  a2 = sub(t0, t2);
  a1 = add(t1, t3);
  a3 = sub(t1, t3);
}
template <bool Inv, typename T>
LOOM_FFT_INLINE void dft4(Cx<T>* a) {
  dft4<Inv>(a[0], a[1], a[2], a[3]);
}

template <bool Inv, typename T>
LOOM_FFT_INLINE void dft8(Cx<T>* a) {
  constexpr float h = 0.70710678118654752440f;
  Cx<T> b0 = add(a[0], a[4]), b1 = add(a[1], a[5]), b2 = add(a[2], a[6]), b3 = add(a[3], a[7]);
  Cx<T> c0 = sub(a[0], a[4]), c1 = sub(a[1], a[5]), c2 = sub(a[2], a[6]), c3 = sub(a[3], a[7]);
  // c_r times w8^r (w8 = exp(-+ 2 pi i / 8)).
  if constexpr (Inv) {
    c1 = {(c1.r - c1.i) * h, (c1.r + c1.i) * h};
    c3 = {-(c3.r + c3.i) * h, (c3.r - c3.i) * h};
  } else {
    c1 = {(c1.r + c1.i) * h, (c1.i - c1.r) * h};
    c3 = {(c3.i - c3.r) * h, -(c3.r + c3.i) * h};
  }
  c2 = rot<Inv>(c2);
  dft4<Inv>(b0, b1, b2, b3);
  dft4<Inv>(c0, c1, c2, c3);
  a[0] = b0, a[2] = b1, a[4] = b2, a[6] = b3;
  a[1] = c0, a[3] = c1, a[5] = c2, a[7] = c3;
}

template <bool Inv, typename T>
LOOM_FFT_INLINE void dft3(Cx<T>* a) {
  constexpr float s = 0.86602540378443864676f;
  const Cx<T> t1 = add(a[1], a[2]), t2 = sub(a[0], scl(t1, 0.5f)), d = scl(rot<Inv>(sub(a[1], a[2])), s);
  a[0] = add(a[0], t1);
  a[1] = add(t2, d);
  a[2] = sub(t2, d);
}

template <bool Inv, typename T>
LOOM_FFT_INLINE void dft5(Cx<T>* a) {
  constexpr float c1 = 0.30901699437494742410f, c2 = -0.80901699437494742410f;
  constexpr float s1 = 0.95105651629515357212f, s2 = 0.58778525229247312917f;
  const Cx<T> b1 = add(a[1], a[4]), b2 = add(a[2], a[3]), d1 = sub(a[1], a[4]), d2 = sub(a[2], a[3]);
  const Cx<T> a0 = a[0];
  const Cx<T> t1 = add(a0, add(scl(b1, c1), scl(b2, c2))), t2 = add(a0, add(scl(b1, c2), scl(b2, c1)));
  const Cx<T> u1 = rot<Inv>(add(scl(d1, s1), scl(d2, s2))), u2 = rot<Inv>(sub(scl(d1, s2), scl(d2, s1)));
  a[0] = add(a0, add(b1, b2));
  a[1] = add(t1, u1);
  a[4] = sub(t1, u1);
  a[2] = add(t2, u2);
  a[3] = sub(t2, u2);
}

template <int R, bool Inv, typename T>
LOOM_FFT_INLINE void butterfly(Cx<T>* a) {
  if constexpr (R == 2) dft2<Inv>(a);
  if constexpr (R == 3) dft3<Inv>(a);
  if constexpr (R == 4) dft4<Inv>(a);
  if constexpr (R == 5) dft5<Inv>(a);
  if constexpr (R == 8) dft8<Inv>(a);
}

// ---------------------------------------------------------------- plans

struct Plan {
  struct Pass {
    int radix;
    int ns;      // product of the radices before this pass
    size_t tw;   // offset of its (radix - 1) x ns twiddles in twr / twi
    size_t gen;  // generic radix: offset of its cos / sin table (radix values) in gcos / gsin
  };
  int n = 1;
  std::vector<Pass> passes;
  std::vector<float> twr, twi;  // exp(-2 pi i r k / (ns R)), row r - 1 of ns values per pass
  std::vector<float> gcos, gsin;
  // Bluestein (passes empty, n > 1): chirp c_k = exp(-i pi k^2 / n) and bk = FFT_m(conj chirp) / m.
  bool bluestein = false;
  int m = 0;
  std::shared_ptr<const Plan> sub;
  std::vector<float> chr, chi, bkr, bki;

  // Floats of the work buffer a transform of V lanes needs beside its data (2 n V floats).
  size_t work_floats(int V) const { return bluestein ? 4 * size_t(m) * V : 2 * size_t(n) * V; }
};

// Half-length real plan for a line of even length n: the complex plan of n / 2 and exp(-2 pi i k / n).
struct RealPlan {
  int n = 0;
  std::shared_ptr<const Plan> half;
  std::vector<float> wr, wi;  // k = 0 .. n / 2
};

// The radices of n, or an empty list when n has a prime factor above kMaxGenericRadix.
std::vector<int> factorize(int n) {
  std::vector<int> f;
  int k2 = 0;
  while (n % 2 == 0) n /= 2, ++k2;
  int eights = k2 / 3, fours = 0, twos = 0;
  if (k2 % 3 == 1) {
    if (eights > 0) {
      --eights;
      fours = 2;
    } else {
      twos = 1;
    }
  } else if (k2 % 3 == 2) {
    fours = 1;
  }
  f.insert(f.end(), eights, 8);
  f.insert(f.end(), fours, 4);
  f.insert(f.end(), twos, 2);
  for (int p = 3; p <= kMaxGenericRadix; p += 2) {
    while (n % p == 0) f.push_back(p), n /= p;
  }
  if (n != 1) return {};
  return f;
}

// The smallest 2^a 3^b 5^c >= n.
int smooth_at_least(int64_t n) {
  int64_t best = 1;
  while (best < n) best *= 2;
  for (int64_t p5 = 1; p5 < 2 * n; p5 *= 5) {
    for (int64_t p35 = p5; p35 < 2 * n; p35 *= 3) {
      int64_t v = p35;
      while (v < n) v *= 2;
      best = std::min(best, v);
    }
  }
  return static_cast<int>(best);
}

std::shared_ptr<const Plan> make_plan(int n);
float* run_plan_v1(const Plan& p, float* data, float* work, bool inverse);

std::mutex g_plans_mu;
std::map<int, std::shared_ptr<const Plan>>& plan_cache() {
  static auto* c = new std::map<int, std::shared_ptr<const Plan>>;
  return *c;
}
std::map<int, std::shared_ptr<const RealPlan>>& real_plan_cache() {
  static auto* c = new std::map<int, std::shared_ptr<const RealPlan>>;
  return *c;
}
// A program that transforms many different lengths keeps at most this many plans of each kind
// (a plan in use stays alive through its shared_ptr).
constexpr size_t kMaxCachedPlans = 256;

std::shared_ptr<const Plan> get_plan(int n) {
  {
    std::lock_guard<std::mutex> lock(g_plans_mu);
    auto it = plan_cache().find(n);
    if (it != plan_cache().end()) return it->second;
  }
  // Built outside the lock: a Bluestein plan asks for the plan of its own length m.
  std::shared_ptr<const Plan> p = make_plan(n);
  std::lock_guard<std::mutex> lock(g_plans_mu);
  auto& cache = plan_cache();
  if (cache.size() >= kMaxCachedPlans) cache.clear();
  return cache.emplace(n, std::move(p)).first->second;  // another thread's, if it got there first
}

std::shared_ptr<const RealPlan> get_real_plan(int n) {
  {
    std::lock_guard<std::mutex> lock(g_plans_mu);
    auto it = real_plan_cache().find(n);
    if (it != real_plan_cache().end()) return it->second;
  }
  auto rp = std::make_shared<RealPlan>();
  rp->n = n;
  rp->half = get_plan(n / 2);
  rp->wr.resize(n / 2 + 1);
  rp->wi.resize(n / 2 + 1);
  for (int k = 0; k <= n / 2; ++k) {
    double c, s;
    cos_sin(k, n, c, s);
    rp->wr[k] = float(c);
    rp->wi[k] = float(-s);
  }
  std::lock_guard<std::mutex> lock(g_plans_mu);
  auto& cache = real_plan_cache();
  if (cache.size() >= kMaxCachedPlans) cache.clear();
  return cache.emplace(n, std::move(rp)).first->second;
}

std::shared_ptr<const Plan> make_plan(int n) {
  auto p = std::make_shared<Plan>();
  p->n = n;
  if (n == 1) return p;
  const std::vector<int> radices = factorize(n);
  if (!radices.empty()) {
    int ns = 1;
    for (int r : radices) {
      Plan::Pass pass{r, ns, p->twr.size(), p->gcos.size()};
      for (int q = 1; q < r; ++q) {
        for (int k = 0; k < ns; ++k) {
          double c, s;
          cos_sin(int64_t(q) * k, int64_t(ns) * r, c, s);
          p->twr.push_back(float(c));
          p->twi.push_back(float(-s));
        }
      }
      if (r != 2 && r != 3 && r != 4 && r != 5 && r != 8) {
        for (int t = 0; t < r; ++t) {
          double c, s;
          cos_sin(t, r, c, s);
          p->gcos.push_back(float(c));
          p->gsin.push_back(float(s));
        }
      }
      p->passes.push_back(pass);
      ns *= r;
    }
    return p;
  }
  // Bluestein: X_k = c_k sum_j (x_j c_j) conj(c_{k-j}), a convolution done by transforms of length m.
  p->bluestein = true;
  if (n > (1 << 29)) {
    throw std::runtime_error("[fft] a transform of length " + std::to_string(n) + " (a prime factor above " +
                             std::to_string(kMaxGenericRadix) +
                             ") would need a Bluestein transform longer than 2^30 elements per line");
  }
  p->m = smooth_at_least(2 * int64_t(n) - 1);
  p->sub = get_plan(p->m);
  const int m = p->m;
  p->chr.resize(n);
  p->chi.resize(n);
  for (int64_t k = 0; k < n; ++k) {
    double c, s;
    cos_sin(k * k % (2 * int64_t(n)), 2 * int64_t(n), c, s);
    p->chr[k] = float(c);
    p->chi[k] = float(-s);
  }
  // b_j = conj(c_j) for j in (-n, n), wrapped to length m; its transform, divided by m (the inverse
  // transform of the convolution is then unnormalized).
  std::vector<float> buf(2 * size_t(m), 0.0f), work(p->sub->work_floats(1));
  for (int j = 0; j < n; ++j) {
    buf[j] = p->chr[j];
    buf[m + j] = -p->chi[j];
    if (j > 0) {
      buf[m - j] = p->chr[j];
      buf[2 * m - j] = -p->chi[j];
    }
  }
  const float* res = run_plan_v1(*p->sub, buf.data(), work.data(), false);
  p->bkr.resize(m);
  p->bki.resize(m);
  for (int k = 0; k < m; ++k) {
    p->bkr[k] = res[k] / float(m);
    p->bki[k] = res[m + k] / float(m);
  }
  return p;
}

// ---------------------------------------------------------------- passes
// Buffers hold n complex values of V lanes in split form: real parts [j V + v], then imaginary
// parts at an offset of n V. T holds V lanes.

// The first pass (ns = 1): no twiddles.
template <typename T, bool Inv, int R>
void first_pass(int n, const float* __restrict xr, const float* __restrict xi, float* __restrict yr,
                float* __restrict yi) {
  constexpr int V = kLanes<T>;
  const int q = n / R;
  const size_t qs = size_t(q) * V;
  LOOM_IVDEP
  for (int j = 0; j < q; ++j) {
    const size_t i = size_t(j) * V, o = size_t(j) * R * V;
    Cx<T> a[R];
    for (int r = 0; r < R; ++r) a[r] = {load<T>(xr + i + r * qs), load<T>(xi + i + r * qs)};
    butterfly<R, Inv>(a);
    for (int r = 0; r < R; ++r) store(yr + o + size_t(r) * V, a[r].r), store(yi + o + size_t(r) * V, a[r].i);
  }
}

template <typename T, bool Inv, int R>
void pass(int n, int ns, const float* __restrict xr, const float* __restrict xi, float* __restrict yr,
          float* __restrict yi, const float* __restrict twr, const float* __restrict twi) {
  constexpr int V = kLanes<T>;
  const int q = n / R, blocks = q / ns;
  const size_t qs = size_t(q) * V, os = size_t(ns) * V;
  for (int b = 0; b < blocks; ++b) {
    const size_t ib = size_t(b) * ns * V, ob = size_t(b) * ns * R * V;
    LOOM_IVDEP
    for (int k = 0; k < ns; ++k) {
      const size_t i = ib + size_t(k) * V, o = ob + size_t(k) * V;
      Cx<T> a[R];
      a[0] = {load<T>(xr + i), load<T>(xi + i)};
      for (int r = 1; r < R; ++r) {
        const float wr = twr[(r - 1) * ns + k], wi = twi[(r - 1) * ns + k];
        a[r] = mul(Cx<T>{load<T>(xr + i + r * qs), load<T>(xi + i + r * qs)}, Cf{wr, Inv ? -wi : wi});
      }
      butterfly<R, Inv>(a);
      for (int r = 0; r < R; ++r) store(yr + o + r * os, a[r].r), store(yi + o + r * os, a[r].i);
    }
  }
}

// A generic odd radix p: y_u = t_0 + sum_r cos(2 pi r u / p) (t_r + t_{p-r}) -+ i sin(...) (t_r - t_{p-r}).
template <typename T, bool Inv>
void pass_generic(int p, int n, int ns, const float* __restrict xr, const float* __restrict xi, float* __restrict yr,
                  float* __restrict yi, const float* __restrict twr, const float* __restrict twi, const float* gc,
                  const float* gs) {
  constexpr int V = kLanes<T>;
  constexpr int P = kMaxGenericRadix + 1;
  const int q = n / p, blocks = q / ns, h = (p - 1) / 2;
  const size_t qs = size_t(q) * V, os = size_t(ns) * V;
  Cx<T> t[P];
  for (int b = 0; b < blocks; ++b) {
    for (int k = 0; k < ns; ++k) {
      const size_t i = (size_t(b) * ns + k) * V;
      const size_t o = (size_t(b) * ns * p + k) * V;
      t[0] = {load<T>(xr + i), load<T>(xi + i)};
      for (int r = 1; r < p; ++r) {
        const float wr = twr[(r - 1) * ns + k], wi = twi[(r - 1) * ns + k];
        t[r] = mul(Cx<T>{load<T>(xr + i + r * qs), load<T>(xi + i + r * qs)}, Cf{wr, Inv ? -wi : wi});
      }
      // y_0, then the sums (in slot r) and differences (in slot p - r) of each pair.
      Cx<T> y0 = t[0];
      for (int r = 1; r <= h; ++r) {
        const Cx<T> s = add(t[r], t[p - r]), d = sub(t[r], t[p - r]);
        t[r] = s, t[p - r] = d;
        y0 = add(y0, s);
      }
      store(yr + o, y0.r), store(yi + o, y0.i);
      for (int u = 1; u <= h; ++u) {
        Cx<T> a = t[0], bsum{T{}, T{}};
        for (int r = 1; r <= h; ++r) {
          const int e = int(int64_t(r) * u % p);
          a = add(a, scl(t[r], gc[e]));
          bsum = add(bsum, scl(t[p - r], gs[e]));
        }
        // Forward: y_u = a - i b, y_{p-u} = a + i b; inverse: the other way round.
        const Cx<T> ib = rot<false>(bsum);  // -i b
        const Cx<T> lo = add(a, ib), hi = sub(a, ib);
        const size_t ou = o + size_t(u) * os, ol = o + size_t(p - u) * os;
        store(yr + (Inv ? ol : ou), lo.r), store(yi + (Inv ? ol : ou), lo.i);
        store(yr + (Inv ? ou : ol), hi.r), store(yi + (Inv ? ou : ol), hi.i);
      }
    }
  }
}

template <typename T, bool Inv>
void run_pass(const Plan& p, const Plan::Pass& ps, const float* x, float* y) {
  constexpr int V = kLanes<T>;
  const int n = p.n;
  const float *xr = x, *xi = x + size_t(n) * V;
  float *yr = y, *yi = y + size_t(n) * V;
  const float *twr = p.twr.data() + ps.tw, *twi = p.twi.data() + ps.tw;
  if (ps.ns == 1) {
    switch (ps.radix) {
      case 2:
        return first_pass<T, Inv, 2>(n, xr, xi, yr, yi);
      case 3:
        return first_pass<T, Inv, 3>(n, xr, xi, yr, yi);
      case 4:
        return first_pass<T, Inv, 4>(n, xr, xi, yr, yi);
      case 5:
        return first_pass<T, Inv, 5>(n, xr, xi, yr, yi);
      case 8:
        return first_pass<T, Inv, 8>(n, xr, xi, yr, yi);
      default:
        break;
    }
  } else {
    switch (ps.radix) {
      case 2:
        return pass<T, Inv, 2>(n, ps.ns, xr, xi, yr, yi, twr, twi);
      case 3:
        return pass<T, Inv, 3>(n, ps.ns, xr, xi, yr, yi, twr, twi);
      case 4:
        return pass<T, Inv, 4>(n, ps.ns, xr, xi, yr, yi, twr, twi);
      case 5:
        return pass<T, Inv, 5>(n, ps.ns, xr, xi, yr, yi, twr, twi);
      case 8:
        return pass<T, Inv, 8>(n, ps.ns, xr, xi, yr, yi, twr, twi);
      default:
        break;
    }
  }
  pass_generic<T, Inv>(ps.radix, n, ps.ns, xr, xi, yr, yi, twr, twi, p.gcos.data() + ps.gen, p.gsin.data() + ps.gen);
}

template <typename T, bool Inv>
float* run_plan(const Plan& p, float* data, float* work);

// Bluestein's transform of `data` (n values of V lanes), in place; work holds 4 m V floats. The
// inverse is conj(forward(conj(x))).
template <typename T, bool Inv>
void bluestein(const Plan& p, float* data, float* work) {
  constexpr int V = kLanes<T>;
  const int n = p.n, m = p.m;
  float *dr = data, *di = data + size_t(n) * V;
  float* a = work;
  float* b = work + 2 * size_t(m) * V;
  float *ar = a, *ai = a + size_t(m) * V;
  for (int j = 0; j < n; ++j) {
    const size_t e = size_t(j) * V;
    Cx<T> x{load<T>(dr + e), load<T>(di + e)};
    if (Inv) x.i = -x.i;
    const Cx<T> y = mul(x, Cf{p.chr[j], p.chi[j]});
    store(ar + e, y.r), store(ai + e, y.i);
  }
  std::fill(ar + size_t(n) * V, ar + size_t(m) * V, 0.0f);
  std::fill(ai + size_t(n) * V, ai + size_t(m) * V, 0.0f);
  float* f = run_plan<T, false>(*p.sub, a, b);
  float *fr = f, *fi = f + size_t(m) * V;
  for (int k = 0; k < m; ++k) {
    const size_t e = size_t(k) * V;
    const Cx<T> y = mul(Cx<T>{load<T>(fr + e), load<T>(fi + e)}, Cf{p.bkr[k], p.bki[k]});
    store(fr + e, y.r), store(fi + e, y.i);
  }
  float* g = run_plan<T, true>(*p.sub, f, f == a ? b : a);
  const float *gr = g, *gi = g + size_t(m) * V;
  for (int k = 0; k < n; ++k) {
    const size_t e = size_t(k) * V;
    Cx<T> y = mul(Cx<T>{load<T>(gr + e), load<T>(gi + e)}, Cf{p.chr[k], p.chi[k]});
    if (Inv) y.i = -y.i;
    store(dr + e, y.r), store(di + e, y.i);
  }
}

// Transforms `data` (2 n V floats); `work` holds p.work_floats(V). Returns the buffer holding the
// result: data or work.
template <typename T, bool Inv>
float* run_plan(const Plan& p, float* data, float* work) {
  if (p.bluestein) {
    bluestein<T, Inv>(p, data, work);
    return data;
  }
  float *x = data, *y = work;
  for (const Plan::Pass& ps : p.passes) {
    run_pass<T, Inv>(p, ps, x, y);
    std::swap(x, y);
  }
  return x;
}

float* run_plan_v1(const Plan& p, float* data, float* work, bool inverse) {
  return inverse ? run_plan<float, true>(p, data, work) : run_plan<float, false>(p, data, work);
}

// ---------------------------------------------------------------- lines

// The lines of one transform step: their element offsets in src and dst, and the strides along the axis.
struct Lines {
  int64_t count = 0;
  std::vector<int64_t> src, dst;
  int64_t src_step = 0, dst_step = 0;
};

Lines make_lines(int axis, const Shape& shape, const Strides& ss, const Strides& ds) {
  Lines L;
  L.src_step = ss[axis];
  L.dst_step = ds[axis];
  std::vector<int> dims;
  for (int d = 0; d < int(shape.size()); ++d) {
    if (d != axis && shape[d] != 1) dims.push_back(d);
  }
  // The axis with the smallest source stride varies fastest: adjacent lines sit side by side.
  std::stable_sort(dims.begin(), dims.end(), [&](int a, int b) { return std::abs(ss[a]) > std::abs(ss[b]); });
  L.count = 1;
  for (int d : dims) L.count *= shape[d];
  L.src.resize(L.count);
  L.dst.resize(L.count);
  std::vector<int> idx(dims.size(), 0);
  int64_t so = 0, dof = 0;
  for (int64_t l = 0; l < L.count; ++l) {
    L.src[l] = so;
    L.dst[l] = dof;
    for (int e = int(dims.size()) - 1; e >= 0; --e) {
      const int d = dims[e];
      so += ss[d];
      dof += ds[d];
      if (++idx[e] < shape[d]) break;
      so -= ss[d] * shape[d];
      dof -= ds[d] * shape[d];
      idx[e] = 0;
    }
  }
  return L;
}

// One thread's scratch: its data and work buffers (kept between calls up to 4 MB).
struct Scratch {
  std::unique_ptr<float[]> own;
  float* p = nullptr;
  explicit Scratch(size_t floats) {
    constexpr size_t kKeep = size_t(1) << 20;
    thread_local std::vector<float> kept;
    if (floats <= kKeep) {
      if (kept.size() < floats) kept.resize(std::max(floats, std::min(kKeep, 2 * kept.size())));
      p = kept.data();
    } else {
      own.reset(new float[floats]);
      p = own.get();
    }
  }
};

// ---------------------------------------------------------------- moving lines in and out of lanes
// gather: `len` values of each of `lines` (<= V) lines (line v at element offset off[v], `step`
// apart) into lanes [j V + v]; missing lanes are zero. scatter: the other way, times `scale`.
// Sixteen whole lines take vector paths: rows (step 1) go through 16 x 16 transposes, lines side by
// side (a non-last axis) are whole vectors at each j.

// Transposes the 16 x 16 floats held as 16 rows (its own inverse).
#define LOOM_FFT_IDX(...) __VA_ARGS__
LOOM_FFT_INLINE void transpose16(Vec16* r) {
#define LOOM_FFT_STAGE(D, LO, HI)                 \
  for (int i = 0; i < 16; ++i) {                  \
    if (i & D) continue;                          \
    const Vec16 a = r[i], b = r[i + D];           \
    r[i] = __builtin_shufflevector(a, b, LO);     \
    r[i + D] = __builtin_shufflevector(a, b, HI); \
  }
  LOOM_FFT_STAGE(8, LOOM_FFT_IDX(0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19, 20, 21, 22, 23),
                 LOOM_FFT_IDX(8, 9, 10, 11, 12, 13, 14, 15, 24, 25, 26, 27, 28, 29, 30, 31))
  LOOM_FFT_STAGE(4, LOOM_FFT_IDX(0, 1, 2, 3, 16, 17, 18, 19, 8, 9, 10, 11, 24, 25, 26, 27),
                 LOOM_FFT_IDX(4, 5, 6, 7, 20, 21, 22, 23, 12, 13, 14, 15, 28, 29, 30, 31))
  LOOM_FFT_STAGE(2, LOOM_FFT_IDX(0, 1, 16, 17, 4, 5, 20, 21, 8, 9, 24, 25, 12, 13, 28, 29),
                 LOOM_FFT_IDX(2, 3, 18, 19, 6, 7, 22, 23, 10, 11, 26, 27, 14, 15, 30, 31))
  LOOM_FFT_STAGE(1, LOOM_FFT_IDX(0, 16, 2, 18, 4, 20, 6, 22, 8, 24, 10, 26, 12, 28, 14, 30),
                 LOOM_FFT_IDX(1, 17, 3, 19, 5, 21, 7, 23, 9, 25, 11, 27, 13, 29, 15, 31))
#undef LOOM_FFT_STAGE
#undef LOOM_FFT_IDX
}

// Interleaved complex (16 values in two vectors) <-> real and imaginary parts.
LOOM_FFT_INLINE void deinterleave(const Vec16& a, const Vec16& b, Vec16& re, Vec16& im) {
  re = __builtin_shufflevector(a, b, 0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
  im = __builtin_shufflevector(a, b, 1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
}
LOOM_FFT_INLINE void interleave(const Vec16& re, const Vec16& im, Vec16& a, Vec16& b) {
  a = __builtin_shufflevector(re, im, 0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
  b = __builtin_shufflevector(re, im, 8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31);
}

enum class Layout { other, rows, side_by_side };
template <int V>
Layout layout_of(const int64_t* off, int lines, int64_t step) {
  if (V != 16 || lines != 16) return Layout::other;
  if (step == 1) return Layout::rows;
  for (int v = 1; v < 16; ++v) {
    if (off[v] != off[0] + v) return Layout::other;
  }
  return Layout::side_by_side;
}

// Complex lines.
template <int V>
void gather_c(const float* src, const int64_t* off, int lines, int64_t step, int len, float* re, float* im) {
  int j0 = 0;
  if constexpr (V == 16) {
    const Layout lay = layout_of<V>(off, lines, step);
    if (lay == Layout::rows) {
      for (; j0 + 8 <= len; j0 += 8) {
        Vec16 r[16];
        for (int v = 0; v < 16; ++v) r[v] = load<Vec16>(src + 2 * (off[v] + j0));
        transpose16(r);
        for (int t = 0; t < 8; ++t)
          store(re + size_t(j0 + t) * 16, r[2 * t]), store(im + size_t(j0 + t) * 16, r[2 * t + 1]);
      }
    } else if (lay == Layout::side_by_side) {
      for (; j0 < len; ++j0) {
        const float* s = src + 2 * (off[0] + int64_t(j0) * step);
        Vec16 a, b;
        deinterleave(load<Vec16>(s), load<Vec16>(s + 16), a, b);
        store(re + size_t(j0) * 16, a), store(im + size_t(j0) * 16, b);
      }
    }
  }
  for (int j = j0; j < len; ++j) {
    for (int v = 0; v < V; ++v) {
      const bool have = v < lines;
      const float* s = src + 2 * (have ? off[v] + int64_t(j) * step : 0);
      re[size_t(j) * V + v] = have ? s[0] : 0.0f;
      im[size_t(j) * V + v] = have ? s[1] : 0.0f;
    }
  }
}

template <int V>
void scatter_c(const float* re, const float* im, int len, float* dst, const int64_t* off, int lines, int64_t step,
               float scale) {
  int j0 = 0;
  if constexpr (V == 16) {
    const Layout lay = layout_of<V>(off, lines, step);
    if (lay == Layout::rows) {
      for (; j0 + 8 <= len; j0 += 8) {
        Vec16 r[16];
        for (int t = 0; t < 8; ++t) {
          r[2 * t] = load<Vec16>(re + size_t(j0 + t) * 16) * scale;
          r[2 * t + 1] = load<Vec16>(im + size_t(j0 + t) * 16) * scale;
        }
        transpose16(r);
        for (int v = 0; v < 16; ++v) store(dst + 2 * (off[v] + j0), r[v]);
      }
    } else if (lay == Layout::side_by_side) {
      for (; j0 < len; ++j0) {
        float* d = dst + 2 * (off[0] + int64_t(j0) * step);
        Vec16 a, b;
        interleave(load<Vec16>(re + size_t(j0) * 16) * scale, load<Vec16>(im + size_t(j0) * 16) * scale, a, b);
        store(d, a), store(d + 16, b);
      }
    }
  }
  for (int j = j0; j < len; ++j) {
    for (int v = 0; v < lines; ++v) {
      float* d = dst + 2 * (off[v] + int64_t(j) * step);
      d[0] = re[size_t(j) * V + v] * scale;
      d[1] = im[size_t(j) * V + v] * scale;
    }
  }
}

// Real lines. Without `im`, element j goes to re[j V + v]; with it, to the real parts (j even) or
// imaginary parts (j odd) of complex value j / 2: a line of even length as half as many complex values.
template <int V>
LOOM_FFT_INLINE float* real_slot(float* re, float* im, int j) {
  return im ? ((j & 1) ? im : re) + size_t(j >> 1) * V : re + size_t(j) * V;
}

template <int V>
void gather_r(const float* src, const int64_t* off, int lines, int64_t step, int len, float* re, float* im) {
  int j0 = 0;
  if constexpr (V == 16) {
    const Layout lay = layout_of<V>(off, lines, step);
    if (lay == Layout::rows) {
      for (; j0 + 16 <= len; j0 += 16) {
        Vec16 r[16];
        for (int v = 0; v < 16; ++v) r[v] = load<Vec16>(src + off[v] + j0);
        transpose16(r);
        for (int t = 0; t < 16; ++t) store(real_slot<V>(re, im, j0 + t), r[t]);
      }
    } else if (lay == Layout::side_by_side) {
      for (; j0 < len; ++j0) store(real_slot<V>(re, im, j0), load<Vec16>(src + off[0] + int64_t(j0) * step));
    }
  }
  for (int j = j0; j < len; ++j) {
    float* d = real_slot<V>(re, im, j);
    for (int v = 0; v < V; ++v) d[v] = v < lines ? src[off[v] + int64_t(j) * step] : 0.0f;
  }
}

template <int V>
void scatter_r(const float* re, const float* im, int len, float* dst, const int64_t* off, int lines, int64_t step,
               float scale) {
  auto slot = [&](int j) { return real_slot<V>(const_cast<float*>(re), const_cast<float*>(im), j); };
  int j0 = 0;
  if constexpr (V == 16) {
    const Layout lay = layout_of<V>(off, lines, step);
    if (lay == Layout::rows) {
      for (; j0 + 16 <= len; j0 += 16) {
        Vec16 r[16];
        for (int t = 0; t < 16; ++t) r[t] = load<Vec16>(slot(j0 + t)) * scale;
        transpose16(r);
        for (int v = 0; v < 16; ++v) store(dst + off[v] + j0, r[v]);
      }
    } else if (lay == Layout::side_by_side) {
      for (; j0 < len; ++j0) store(dst + off[0] + int64_t(j0) * step, load<Vec16>(slot(j0)) * scale);
    }
  }
  for (int j = j0; j < len; ++j) {
    const float* s = slot(j);
    for (int v = 0; v < lines; ++v) dst[off[v] + int64_t(j) * step] = s[v] * scale;
  }
}

// ---------------------------------------------------------------- the steps

struct Step {
  Kind kind;
  bool inverse;
  int n;
  const float* src;
  float* dst;
  float scale;
  const Lines* lines;
  const Plan* plan;      // c2c and odd real lengths: the plan of n
  const RealPlan* real;  // even real lengths: the plan of n / 2 and the twiddles that join its halves
};

// Groups of V lines, each in a lane of its own (a line's rounding never depends on its neighbours).
template <int V, bool Inv>
void run_lane_groups(const Step& st, int64_t g0, int64_t g1) {
  using T = typename LaneType<V>::T;
  const int n = st.n, m = n / 2 + 1;
  const Lines& L = *st.lines;
  const bool half = st.real != nullptr;  // an even real length, as n / 2 complex values
  const Plan& plan = half ? *st.real->half : *st.plan;
  const int len = plan.n;
  const size_t lv = size_t(len) * V, mv = size_t(m) * V;
  Scratch scratch(2 * lv + plan.work_floats(V) + (st.kind == Kind::c2c ? 0 : 2 * mv));
  float* data = scratch.p;
  float* work = data + 2 * lv;
  float *hr = work + plan.work_floats(V), *hi = hr + mv;  // a Hermitian half spectrum: m values
  float *dr = data, *di = data + lv;
  for (int64_t g = g0; g < g1; ++g) {
    const int64_t first = g * V;
    const int lines = int(std::min<int64_t>(V, L.count - first));
    const int64_t *so = L.src.data() + first, *dofs = L.dst.data() + first;
    if (st.kind == Kind::c2c) {
      gather_c<V>(st.src, so, lines, L.src_step, n, dr, di);
      const float* res = run_plan<T, Inv>(plan, data, work);
      scatter_c<V>(res, res + lv, n, st.dst, dofs, lines, L.dst_step, st.scale);
    } else if (st.kind == Kind::r2c && half) {
      // z_j = x_{2j} + i x_{2j+1}; X_k = E_k + w^k O_k with E = (Z_k + conj Z_{h-k}) / 2 and
      // O = -i (Z_k - conj Z_{h-k}) / 2 (h = n / 2, Z_h = Z_0), scaled on the way.
      gather_r<V>(st.src, so, lines, L.src_step, n, dr, di);
      const float* res = run_plan<T, false>(plan, data, work);
      const float *fr = res, *fi = res + lv;
      const float s = 0.5f * st.scale;
      for (int k = 0; k < m; ++k) {
        const size_t a = size_t(k == len ? 0 : k) * V, c = size_t(k == 0 ? 0 : len - k) * V;
        const T ar = load<T>(fr + a), ai = load<T>(fi + a), cr = load<T>(fr + c), ci = load<T>(fi + c);
        const Cx<T> e{ar + cr, ai - ci}, o{ai + ci, cr - ar};  // 2 E, 2 O
        const Cx<T> x = add(e, mul(o, Cf{st.real->wr[k], st.real->wi[k]}));
        store(hr + size_t(k) * V, x.r * s), store(hi + size_t(k) * V, x.i * s);
      }
      scatter_c<V>(hr, hi, m, st.dst, dofs, lines, L.dst_step, 1.0f);
    } else if (st.kind == Kind::r2c) {  // odd n: the line as complex values with no imaginary parts
      gather_r<V>(st.src, so, lines, L.src_step, n, dr, nullptr);
      std::fill(di, di + lv, 0.0f);
      const float* res = run_plan<T, false>(plan, data, work);
      scatter_c<V>(res, res + lv, m, st.dst, dofs, lines, L.dst_step, st.scale);
    } else if (half) {
      // c2r, even n: Z'_k = (X_k + conj X_{h-k}) + i (X_k - conj X_{h-k}) exp(+2 pi i k / n), k < h,
      // the imaginary parts of X_0 and X_h taken as zero; its inverse holds x_{2j} + i x_{2j+1}.
      gather_c<V>(st.src, so, lines, L.src_step, m, hr, hi);
      for (int k = 0; k < len; ++k) {
        const size_t a = size_t(k) * V, c = size_t(len - k) * V;
        const T ar = load<T>(hr + a), cr = load<T>(hr + c);
        const T ai = k == 0 ? T{} : load<T>(hi + a), ci = k == 0 ? T{} : load<T>(hi + c);
        const Cx<T> t = mul(Cx<T>{ar - cr, ai + ci}, Cf{st.real->wr[k], -st.real->wi[k]});
        store(dr + a, ar + cr - t.i), store(di + a, ai - ci + t.r);
      }
      const float* res = run_plan<T, true>(plan, data, work);
      scatter_r<V>(res, res + lv, n, st.dst, dofs, lines, L.dst_step, st.scale);
    } else {
      // c2r, odd n: the Hermitian spectrum whole (X_{n-k} = conj X_k, X_0 real), inverted; the real parts.
      gather_c<V>(st.src, so, lines, L.src_step, m, hr, hi);
      for (int k = 0; k < m; ++k) {
        const size_t a = size_t(k) * V;
        const T xr = load<T>(hr + a), xi = k == 0 ? T{} : load<T>(hi + a);
        store(dr + a, xr), store(di + a, xi);
        if (k > 0) store(dr + size_t(n - k) * V, xr), store(di + size_t(n - k) * V, -xi);
      }
      const float* res = run_plan<T, true>(plan, data, work);
      scatter_r<V>(res, nullptr, n, st.dst, dofs, lines, L.dst_step, st.scale);
    }
  }
}

// Lines per group: 16 whenever there are 8 lines or more (measured on AVX-512: 16-wide butterflies
// match a line alone on long rows and beat it on short ones (3.5x at 128), on real lines (1.6x at
// 1024) and on lines side by side, which only lanes read whole cache lines of; a group of 4 never
// won). Fewer lines, and lines longer than 65536 (a group's buffers would pass tens of megabytes),
// run one at a time, vectorized along the line.
int lanes_for(int64_t count, int len) { return count >= 8 && len <= 65536 ? 16 : 1; }

template <int V>
void run_lanes(const Step& st, int64_t g0, int64_t g1) {
  if (st.inverse) {
    run_lane_groups<V, true>(st, g0, g1);
  } else {
    run_lane_groups<V, false>(st, g0, g1);
  }
}

}  // namespace

size_t cached_plans() {
  std::lock_guard<std::mutex> lock(g_plans_mu);
  return plan_cache().size() + real_plan_cache().size();
}

void transform_axis(Kind kind, bool inverse, int n, int axis, const Shape& shape, const void* src,
                    const Strides& src_strides, void* dst, const Strides& dst_strides, float scale) {
  if (n < 1) throw std::logic_error("[fft] the kernel got a transform of length " + std::to_string(n));
  for (int d : shape) {
    if (d == 0) return;
  }
  const Lines lines = make_lines(axis, shape, src_strides, dst_strides);
  const int64_t count = lines.count;
  std::shared_ptr<const Plan> plan;
  std::shared_ptr<const RealPlan> real;
  if (kind != Kind::c2c && n % 2 == 0) {
    real = get_real_plan(n);
  } else {
    plan = get_plan(n);
  }
  const auto* in = static_cast<const float*>(src);
  auto* out = static_cast<float*>(dst);
  const Step st{kind, inverse, n, in, out, scale, &lines, plan.get(), real.get()};
  const int V = lanes_for(count, real ? n / 2 : n);
  const int64_t groups = (count + V - 1) / V;
  auto body = [&](int64_t b, int64_t e) {
    if (V == 16) {
      run_lanes<16>(st, b, e);
    } else {
      run_lanes<1>(st, b, e);
    }
  };
  // Threads for the whole step's work, split over groups of lines.
  const int nt = threads_for(size_t(count) * size_t(n) * 4);
  if (nt > 1 && groups > 1) {
    loom::detail::run_parts(size_t(groups), loom::detail::parts_for(groups, nt), nt,
                            [&](size_t b, size_t e) { body(int64_t(b), int64_t(e)); });
  } else {
    body(0, groups);
  }
}

}  // namespace loom::kernels::fft

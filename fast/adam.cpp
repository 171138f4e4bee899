// The fused Adam / AdamW update of one parameter.
//
// Contraction of a * b + c into one fused multiply-add is turned off in this file (here for GCC, and
// by -ffp-contract=off in CMakeLists.txt for every compiler), so that every operation rounds as the
// separate ops (and PyTorch's float32 kernels) round it.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("fp-contract=off")
#endif

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <optional>
#include <stdexcept>

#include "loom/core/serialize.h"
#include "loom/fast/custom.h"
#include "loom/fast/fast.h"
#include "loom/kernels/elementwise.h"
#include "loom/ops/ops.h"
#include "loom/ops/utils.h"

namespace loom::fast {

using loom::detail::msg;
using loom::detail::shape_str;

namespace {

// The host-side scalars of one step, computed in double as PyTorch computes them in Python.
struct AdamScalars {
  double p_mul;      // 1 - lr * wd (decoupled), else 1
  double l2;         // wd (coupled), else 0
  double w1;         // 1 - beta1: the lerp weight
  double beta2;      // v's decay
  double omb2;       // 1 - beta2
  double bc2_sqrt;   // sqrt(1 - beta2^t), or 1
  double eps;
  double neg_step;   // -lr / (1 - beta1^t), or -lr
};

AdamScalars scalars_of(const AdamStep& hp) {
  AdamScalars s{};
  const double t = static_cast<double>(hp.step);
  s.p_mul = hp.decoupled ? 1.0 - hp.lr * hp.weight_decay : 1.0;
  s.l2 = hp.decoupled ? 0.0 : hp.weight_decay;
  s.w1 = 1.0 - hp.beta1;
  s.beta2 = hp.beta2;
  s.omb2 = 1.0 - hp.beta2;
  const double bc1 = hp.bias_correction ? 1.0 - std::pow(hp.beta1, t) : 1.0;
  s.bc2_sqrt = hp.bias_correction ? std::sqrt(1.0 - std::pow(hp.beta2, t)) : 1.0;
  s.eps = hp.eps;
  s.neg_step = -(hp.lr / bc1);
  return s;
}

// GCC 12 warns inside its own AVX-512 headers that the "undefined" pass-through operand of the
// sqrt intrinsics may be uninitialized (GCC bug 105593).
#pragma GCC diagnostic push
#if !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#pragma GCC diagnostic ignored "-Wuninitialized"
// sqrt of n values. std::sqrt must set errno for negative inputs, which keeps GCC from vectorizing
// it unless the whole build uses -fno-math-errno; the intrinsics give the same correctly rounded
// results (a negative input gives NaN, without errno).
inline void sqrt_block(const float* x, float* y, size_t n) {
  size_t j = 0;
#if defined(__AVX512F__) && (defined(__x86_64__) || defined(__i386__))
  for (; j + 16 <= n; j += 16) _mm512_storeu_ps(y + j, _mm512_sqrt_ps(_mm512_loadu_ps(x + j)));
#endif
#if defined(__AVX__) && (defined(__x86_64__) || defined(__i386__))
  for (; j + 8 <= n; j += 8) _mm256_storeu_ps(y + j, _mm256_sqrt_ps(_mm256_loadu_ps(x + j)));
#elif defined(__SSE2__) && (defined(__x86_64__) || defined(__i386__))
  for (; j + 4 <= n; j += 4) _mm_storeu_ps(y + j, _mm_sqrt_ps(_mm_loadu_ps(x + j)));
#endif
  for (; j < n; ++j) y[j] = std::sqrt(x[j]);
}
inline void sqrt_block(const double* x, double* y, size_t n) {
  size_t j = 0;
#if defined(__AVX512F__) && (defined(__x86_64__) || defined(__i386__))
  for (; j + 8 <= n; j += 8) _mm512_storeu_pd(y + j, _mm512_sqrt_pd(_mm512_loadu_pd(x + j)));
#endif
#if defined(__AVX__) && (defined(__x86_64__) || defined(__i386__))
  for (; j + 4 <= n; j += 4) _mm256_storeu_pd(y + j, _mm256_sqrt_pd(_mm256_loadu_pd(x + j)));
#elif defined(__SSE2__) && (defined(__x86_64__) || defined(__i386__))
  for (; j + 2 <= n; j += 2) _mm_storeu_pd(y + j, _mm_sqrt_pd(_mm_loadu_pd(x + j)));
#endif
  for (; j < n; ++j) y[j] = std::sqrt(x[j]);
}
#pragma GCC diagnostic pop

// s / c, rounded as the division rounds, given r = 1 / c (rounded): q = s r is within an ulp of s / c,
// the FMA gives its remainder s - q c exactly, and one correction step then rounds to the nearest
// (Markstein's theorem; checked bit for bit against the division for every float significand of s
// and 6,000 divisors). Where FMA is a single instruction this costs two FMAs and a multiply instead
// of a division (the divisions and the square root bound the update): AdamW over 670K float32
// parameters, 1 thread, 157-167 -> 141-152 us. s = sqrt(v) is never subnormal; s = inf (an
// overflowed v) keeps its quotient, as its remainder would be inf - inf.
template <typename C>
inline __attribute__((always_inline)) C over_bc2(C s, C c, C r) {
#if defined(__FMA__)
  const C q = s * r;
  const C e = std::fma(-q, c, s);
  return q < std::numeric_limits<C>::infinity() ? std::fma(e, r, q) : q;
#else
  (void)r;
  return s / c;
#endif
}

// One pass over n elements: p, g, m, v in; p', m', v' out. An output may be its input's buffer,
// but only at the same index (each element is read before it is written), so no iteration depends
// on another: `ivdep` lets the compiler vectorize without run-time alias checks. Each block of
// elements runs in three vectorized loops (moments, sqrt, parameter) through small local buffers,
// computing exactly what one loop per element would. The options are template parameters so that
// the loops have no branches.
template <typename T, bool Decay, bool L2, bool SmallW>
void adam_loop(const T* p, const T* g, const T* m, const T* v, T* po, T* mo, T* vo, size_t n, const AdamScalars& s) {
  using C = compute_t<T>;
  const C p_mul = static_cast<C>(s.p_mul), l2c = static_cast<C>(s.l2), w1 = static_cast<C>(s.w1);
  const C one_minus_w1 = C(1) - w1;  // torch.lerp's large-weight branch computes 1 - w in C
  const C b2 = static_cast<C>(s.beta2), omb2 = static_cast<C>(s.omb2), bc2 = static_cast<C>(s.bc2_sqrt);
  const C eps = static_cast<C>(s.eps), neg_step = static_cast<C>(s.neg_step);
  kernels::parallel_for(
      n,
      [&](size_t lo, size_t hi) {
        // Locals rather than the closure's members, which the stores below could otherwise alias.
        const T* pp = p;
        const T* gp = g;
        const T* mp = m;
        const T* vp = v;
        T* pop = po;
        T* mop = mo;
        T* vop = vo;
        const C c_p_mul = p_mul, c_l2 = l2c, c_w1 = w1, c_omw1 = one_minus_w1, c_b2 = b2, c_omb2 = omb2, c_bc2 = bc2,
                c_rbc2 = C(1) / bc2, c_eps = eps, c_step = neg_step;
        constexpr size_t kBlock = 256;
        alignas(64) C pb[kBlock], mb[kBlock], vb[kBlock], sb[kBlock];
        for (size_t b = lo; b < hi; b += kBlock) {
          const size_t len = std::min(kBlock, hi - b);
          LOOM_IVDEP
          for (size_t j = 0; j < len; ++j) {
            C pc = static_cast<C>(pp[b + j]);
            C gc = static_cast<C>(gp[b + j]);
            if constexpr (Decay) pc = pc * c_p_mul;
            if constexpr (L2) gc = gc + c_l2 * pc;
            C mc = static_cast<C>(mp[b + j]);
            if constexpr (SmallW) {
              mc = mc + c_w1 * (gc - mc);
            } else {
              mc = gc - (gc - mc) * c_omw1;
            }
            C vc = static_cast<C>(vp[b + j]) * c_b2;
            vc = vc + (c_omb2 * gc) * gc;
            pb[j] = pc;
            mb[j] = mc;
            vb[j] = vc;
            mop[b + j] = static_cast<T>(mc);
            vop[b + j] = static_cast<T>(vc);
          }
          sqrt_block(vb, sb, len);
          LOOM_IVDEP
          for (size_t j = 0; j < len; ++j) {
            const C denom = over_bc2(sb[j], c_bc2, c_rbc2) + c_eps;
            pop[b + j] = static_cast<T>(pb[j] + (c_step * mb[j]) / denom);
          }
        }
      },
      kernels::kParallelThreshold / 4);  // ~15 flops, a sqrt and a divide per element
}

// Picks the loop for the options (decoupled decay and L2 decay are never both on).
template <typename T>
void adam_kernel(const T* p, const T* g, const T* m, const T* v, T* po, T* mo, T* vo, size_t n, const AdamScalars& s,
                 bool decay, bool l2) {
  const bool small_w = std::abs(static_cast<compute_t<T>>(s.w1)) < compute_t<T>(0.5);
  if (decay) {
    return small_w ? adam_loop<T, true, false, true>(p, g, m, v, po, mo, vo, n, s)
                   : adam_loop<T, true, false, false>(p, g, m, v, po, mo, vo, n, s);
  }
  if (l2) {
    return small_w ? adam_loop<T, false, true, true>(p, g, m, v, po, mo, vo, n, s)
                   : adam_loop<T, false, true, false>(p, g, m, v, po, mo, vo, n, s);
  }
  return small_w ? adam_loop<T, false, false, true>(p, g, m, v, po, mo, vo, n, s)
                 : adam_loop<T, false, false, false>(p, g, m, v, po, mo, vo, n, s);
}

// torch.optim.Adam(W)'s single-tensor step, one op per PyTorch call (inputs p, g, m, v; outputs p',
// m', v'), every scalar rounded to the array's dtype as PyTorch rounds a Python number.
Composition reference(const AdamStep& hp) {
  return [hp](const std::vector<array>& in) {
    array p = in[0], g = in[1], m = in[2], v = in[3];
    const Dtype d = p.dtype();
    auto c = [d](double x) { return array(x, d); };
    const double t = static_cast<double>(hp.step);
    if (hp.decoupled) {
      if (hp.weight_decay != 0) p = multiply(p, c(1 - hp.lr * hp.weight_decay));
    } else if (hp.weight_decay != 0) {
      g = add(g, multiply(c(hp.weight_decay), p));
    }
    const double w = 1 - hp.beta1;
    // torch.lerp: m + w (g - m) for small weights, g - (g - m)(1 - w) otherwise, with 1 - w in m's dtype.
    m = w < 0.5 ? add(m, multiply(c(w), subtract(g, m)))
                : subtract(g, multiply(subtract(g, m), subtract(c(1.0), c(w))));
    v = add(multiply(v, c(hp.beta2)), multiply(multiply(c(1 - hp.beta2), g), g));
    const double bc1 = hp.bias_correction ? 1 - std::pow(hp.beta1, t) : 1.0;
    const double bc2s = hp.bias_correction ? std::sqrt(1 - std::pow(hp.beta2, t)) : 1.0;
    const array denom = add(divide(sqrt(v), c(bc2s)), c(hp.eps));
    p = add(p, divide(multiply(c(-(hp.lr / bc1)), m), denom));
    return std::vector<array>{p, m, v};
  };
}

class AdamUpdate : public Custom {
 public:
  explicit AdamUpdate(AdamStep hp) : Custom(reference(hp)), hp_(hp), s_(scalars_of(hp)) {}
  void save(detail::Writer& w) const override {
    w.put(hp_.lr, hp_.beta1, hp_.beta2, hp_.eps, hp_.weight_decay, hp_.decoupled, hp_.bias_correction, hp_.step);
  }

  void eval_cpu(const std::vector<array>& inputs, std::vector<array>& outputs) override {
    // p', m', v' take p's, m's and v's buffers when nothing else reads them (donors). An operand that
    // is not dense row-major (fresh zeros, a transposed gradient) is first copied into its output and
    // updated there; the gradient into a copy of its own.
    const array* in[4];
    constexpr int kFrom[3] = {0, 2, 3};
    for (int o = 0; o < 3; ++o) {
      const array& x = inputs[kFrom[o]];
      outputs[o].alloc();
      if (x.flags().row_contiguous) {
        in[kFrom[o]] = &x;
      } else {
        kernels::copy_into(x, outputs[o]);
        in[kFrom[o]] = &outputs[o];
      }
    }
    const array g = kernels::row_contiguous(inputs[1]);
    in[1] = &g;
    const size_t n = outputs[0].size();
    if (n == 0) return;
    const bool decay = hp_.decoupled && hp_.weight_decay != 0.0;
    const bool l2 = !hp_.decoupled && hp_.weight_decay != 0.0;
    LOOM_DISPATCH_FLOAT(outputs[0].dtype(), T, {
      adam_kernel<T>(kernels::ptr<T>(*in[0]), kernels::ptr<T>(*in[1]), kernels::ptr<T>(*in[2]), kernels::ptr<T>(*in[3]),
                     kernels::ptr<T>(outputs[0]), kernels::ptr<T>(outputs[1]), kernels::ptr<T>(outputs[2]), n, s_,
                     decay, l2);
    });
  }

  uint64_t donors(const std::vector<array>& in, int o) const override {
    return row_contiguous_donors(in, {o == 0 ? 0 : o + 1});
  }
  const char* name() const override { return "AdamUpdate"; }
  void print(std::ostream& os) const override {
    os << "AdamUpdate(lr=" << hp_.lr << ", betas=(" << hp_.beta1 << ", " << hp_.beta2 << "), eps=" << hp_.eps
       << ", weight_decay=" << hp_.weight_decay << (hp_.decoupled ? " decoupled" : " L2")
       << (hp_.bias_correction ? ", bias_correction" : "") << ", step=" << hp_.step << ")";
  }

 private:
  AdamStep hp_;
  AdamScalars s_;
};
const bool kAdamUpdateLoads =
    detail::register_primitive("AdamUpdate", [](detail::Reader& r) -> std::shared_ptr<Primitive> {
      AdamStep hp;
      r.get(hp.lr, hp.beta1, hp.beta2, hp.eps, hp.weight_decay, hp.decoupled, hp.bias_correction, hp.step);
      return std::make_shared<AdamUpdate>(hp);
    });

void check_adam_hp(const AdamStep& hp) {
  auto bad = [](const std::string& what, double v) {
    throw std::invalid_argument(msg("[adam_update] ", what, ", got ", v));
  };
  if (!(hp.lr >= 0.0) || !std::isfinite(hp.lr)) bad("lr must be finite and >= 0", hp.lr);
  if (!(hp.beta1 >= 0.0 && hp.beta1 < 1.0)) bad("beta1 must be in [0, 1)", hp.beta1);
  if (!(hp.beta2 >= 0.0 && hp.beta2 < 1.0)) bad("beta2 must be in [0, 1)", hp.beta2);
  if (!(hp.eps >= 0.0) || !std::isfinite(hp.eps)) bad("eps must be finite and >= 0", hp.eps);
  if (!(hp.weight_decay >= 0.0) || !std::isfinite(hp.weight_decay)) bad("weight_decay must be finite and >= 0", hp.weight_decay);
  if (hp.step < 1) bad("step must be >= 1", static_cast<double>(hp.step));
}

}  // namespace

std::array<array, 3> adam_update(const array& p, const array& g, const array& m, const array& v, const AdamStep& hp) {
  check_adam_hp(hp);
  if (!is_floating_point(p.dtype())) {
    throw std::invalid_argument(msg("[adam_update] the parameter must be floating point, got ", p.dtype()));
  }
  for (const auto& [what, a] : {std::pair<const char*, const array*>{"gradient", &g}, {"m", &m}, {"v", &v}}) {
    if (a->shape() != p.shape()) {
      throw std::invalid_argument(msg("[adam_update] the ", what, " has shape ", shape_str(a->shape()),
                                      " but the parameter has shape ", shape_str(p.shape())));
    }
  }
  const Dtype dt = p.dtype();
  auto outs = array::make_arrays({p.shape(), p.shape(), p.shape()}, {dt, dt, dt}, std::make_shared<AdamUpdate>(hp),
                                 {p, astype(g, dt), astype(m, dt), astype(v, dt)});
  return {outs[0], outs[1], outs[2]};
}

}  // namespace loom::fast

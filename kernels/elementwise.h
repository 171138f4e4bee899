// The one elementwise driver: unary, binary and ternary kernels over any strides (internal).
// Inputs arrive broadcast to the output shape (as views). Contiguous operands with one layout run as a
// flat loop and keep that layout; everything else walks rows of collapsed dimensions.
#pragma once

#include <complex>
#include <type_traits>

#include "loom/core/dispatch.h"
#include "loom/core/copy.h"
#include "loom/core/loops.h"

namespace loom::kernels {

/// The unsigned type integer arithmetic on T wraps in: T's own unsigned type, or unsigned int for
/// types narrower than int (C++ promotes those to signed int, where uint16 * uint16 overflows).
template <class T>
struct wrap_type {
  using type = std::make_unsigned_t<T>;
};
template <>
struct wrap_type<bool> {
  using type = unsigned;
};
template <class T>
using wrap_t = std::conditional_t<(sizeof(T) < sizeof(unsigned)), unsigned, typename wrap_type<T>::type>;

/// a + b, a - b and a * b that wrap around at an integer type's limits, as numpy's do: signed
/// overflow is undefined behaviour in C++, and the unsigned type's arithmetic is the same
/// instructions. Other types (bool, floats) compute as usual.
template <class T, class F>
T wrapping(T a, T b, F f) {
  if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
    using U = wrap_t<T>;
    return static_cast<T>(f(static_cast<U>(a), static_cast<U>(b)));
  } else {
    return static_cast<T>(f(a, b));
  }
}
template <class T>
T wrapping_add(T a, T b) {
  return wrapping(a, b, [](auto x, auto y) { return x + y; });
}
template <class T>
T wrapping_sub(T a, T b) {
  return wrapping(a, b, [](auto x, auto y) { return x - y; });
}
template <class T>
T wrapping_mul(T a, T b) {
  if constexpr (std::is_base_of_v<std::complex<float>, T>) {
    // A float complex product in double, then rounded: each float product is exact in double, so
    // the one rounding of each part is the same whether or not the compiler fuses a multiply into
    // an add. It fuses differently in each loop (a scalar operand's, the fused path's), and the
    // same product must not depend on which loop computed it (compile is bit for bit). The plain
    // formula, as numpy, PyTorch and MLX compute it (no C99 Annex G recovery of infinities).
    const double ar = a.real(), ai = a.imag(), br = b.real(), bi = b.imag();
    return T(static_cast<float>(ar * br - ai * bi), static_cast<float>(ar * bi + ai * br));
  } else {
    return wrapping(a, b, [](auto x, auto y) { return x * y; });
  }
}

/// Gives `out` the layout of contiguous `like`, so that element i of `like`'s data goes to element i
/// of `out`'s: a fresh buffer of `itemsize`-byte elements, or the one eval gave it (a donated
/// input's, laid out as that input). False when eval's buffer is laid out differently: the caller
/// then takes its strided path.
inline bool alloc_like(array& out, const array& like, size_t itemsize) {
  if (out.is_placed()) {
    return like.data_size() == out.data_size() &&
           ((like.flags().row_contiguous && out.flags().row_contiguous) || like.strides() == out.strides());
  }
  out.set_data(allocator::malloc(like.data_size() * itemsize), like.data_size(), like.strides(), like.flags());
  return true;
}

/// How an elementwise kernel runs, decided once for all dtypes and ops (out of line, so that each
/// (op, dtype) instantiates only its loops): over the flat data of operands that share one layout
/// (`n` elements; a size-1 operand as a scalar), or, when `flat` is `strided`, row by row over a
/// `RowPlan`. The two are apart so that the common flat case builds no shapes or strides.
struct ElementwisePlan {
  enum Flat { strided, all, scalar_first, scalar_second } flat = strided;
  size_t n = 0;
};

/// Collapsed `shape` and its strides: the inputs' and then the output's.
struct RowPlan {
  Shape shape;
  std::array<Strides, 3> st;
};

/// For y = f(x): allocates `out` (`itemsize`-byte elements) when the flat path applies, and plans.
__attribute__((noinline)) inline ElementwisePlan plan_unary(const array& in, array& out, size_t itemsize) {
  ElementwisePlan p;
  if (in.flags().contiguous && alloc_like(out, in, itemsize)) {
    p.flat = ElementwisePlan::all;
    p.n = in.data_size();
  }
  return p;
}

/// The strided path of y = f(x): allocates `out` and collapses.
__attribute__((noinline)) inline RowPlan rows_unary(const array& in, array& out) {
  out.alloc();
  RowPlan p{in.shape(), {}};
  std::array<Strides, 2> st{in.strides(), out.strides()};
  collapse(p.shape, st);
  p.st[0] = std::move(st[0]);
  p.st[1] = std::move(st[1]);
  return p;
}

/// For y = f(a, b), with a and b broadcast to out's shape.
__attribute__((noinline)) inline ElementwisePlan plan_binary(const array& a, const array& b, array& out,
                                                             size_t itemsize) {
  ElementwisePlan p;
  const bool as = a.data_size() == 1, bs = b.data_size() == 1;
  const bool ac = a.flags().contiguous, bc = b.flags().contiguous;
  const array& like = (as && !bs) ? b : a;
  if (out.size() == 1) out.alloc();
  if (out.size() == 1 ||
      (((ac && bc && a.strides() == b.strides()) || (as && bc) || (bs && ac)) && alloc_like(out, like, itemsize))) {
    p.n = out.size() == 1 ? 1 : like.data_size();
    p.flat = (as && !bs) ? ElementwisePlan::scalar_first : (bs && !as) ? ElementwisePlan::scalar_second : ElementwisePlan::all;
  }
  return p;
}

/// The strided path of y = f(a, b).
__attribute__((noinline)) inline RowPlan rows_binary(const array& a, const array& b, array& out) {
  out.alloc();
  RowPlan p{out.shape(), {a.strides(), b.strides(), out.strides()}};
  collapse(p.shape, p.st);
  return p;
}

// The span loops: one out-of-line loop per (op, dtype) and operand pattern, which the contiguous
// path (per thread's range), the strided path (per row whose operands are contiguous) and the fused
// path (per block) all call. Inlining a copy of each loop into every path made ops/elementwise.cpp
// most of a build's compile time, and a call per row or range costs nothing measurable. The
// operands arrive as parameters, so a store through y cannot alias them (no reloads; zv is a float
// like y's elements), and y is a fresh buffer or an input's own at the same index: `ivdep` is safe.

/// y[i] = f(x[i]) over n contiguous elements.
template <typename In, typename Out, typename F>
__attribute__((noinline)) void unary_span(const In* x, Out* y, size_t n, F f) {
  using C = compute_t<In>;
  LOOM_IVDEP
  for (size_t i = 0; i < n; ++i) y[i] = static_cast<Out>(f(static_cast<C>(x[i])));
}

/// y[i] = f(x[i], z[i]).
template <typename In, typename Out, typename F>
__attribute__((noinline)) void binary_span(const In* x, const In* z, Out* y, size_t n, F f) {
  using C = compute_t<In>;
  LOOM_IVDEP
  for (size_t i = 0; i < n; ++i) y[i] = static_cast<Out>(f(static_cast<C>(x[i]), static_cast<C>(z[i])));
}

/// y[i] = f(xv, z[i]): a scalar first operand.
template <typename In, typename Out, typename F>
__attribute__((noinline)) void binary_span_sv(compute_t<In> xv, const In* z, Out* y, size_t n, F f) {
  using C = compute_t<In>;
  LOOM_IVDEP
  for (size_t i = 0; i < n; ++i) y[i] = static_cast<Out>(f(xv, static_cast<C>(z[i])));
}

/// y[i] = f(x[i], zv): a scalar second operand.
template <typename In, typename Out, typename F>
__attribute__((noinline)) void binary_span_vs(const In* x, compute_t<In> zv, Out* y, size_t n, F f) {
  using C = compute_t<In>;
  LOOM_IVDEP
  for (size_t i = 0; i < n; ++i) y[i] = static_cast<Out>(f(static_cast<C>(x[i]), zv));
}

template <typename In, typename Out, typename F>
void unary(const array& in, array& out, F f) {
  using C = compute_t<In>;
  const ElementwisePlan p = plan_unary(in, out, sizeof(Out));
  const In* x = ptr<In>(in);
  Out* y = ptr<Out>(out);
  if (p.flat != ElementwisePlan::strided) {
    parallel_for(p.n, [&](size_t b, size_t e) { unary_span<In, Out>(x + b, y + b, e - b, f); });
    return;
  }
  const RowPlan r = rows_unary(in, out);
  y = ptr<Out>(out);
  for_each_row<2>(r.shape, {r.st[0], r.st[1]},
                  [&](const std::array<int64_t, 2>& o, int n, const std::array<int64_t, 2>& s) {
                    const In* xp = x + o[0];
                    Out* yp = y + o[1];
                    if (s[0] == 1 && s[1] == 1) return unary_span<In, Out>(xp, yp, size_t(n), f);
                    for (int i = 0; i < n; ++i) yp[i * s[1]] = static_cast<Out>(f(static_cast<C>(xp[i * s[0]])));
                  });
}

template <typename In, typename Out, typename F>
void binary(const array& a, const array& b, array& out, F f) {
  using C = compute_t<In>;
  const ElementwisePlan p = plan_binary(a, b, out, sizeof(Out));
  const In* x = ptr<In>(a);
  const In* z = ptr<In>(b);
  Out* y = ptr<Out>(out);
  switch (p.flat) {
    case ElementwisePlan::scalar_first: {
      const C xv = static_cast<C>(x[0]);
      return parallel_for(p.n, [&](size_t lo, size_t hi) { binary_span_sv<In, Out>(xv, z + lo, y + lo, hi - lo, f); });
    }
    case ElementwisePlan::scalar_second: {
      const C zv = static_cast<C>(z[0]);
      return parallel_for(p.n, [&](size_t lo, size_t hi) { binary_span_vs<In, Out>(x + lo, zv, y + lo, hi - lo, f); });
    }
    case ElementwisePlan::all:
      return parallel_for(p.n, [&](size_t lo, size_t hi) { binary_span<In, Out>(x + lo, z + lo, y + lo, hi - lo, f); });
    case ElementwisePlan::strided:
      break;
  }
  const RowPlan r = rows_binary(a, b, out);
  y = ptr<Out>(out);
  for_each_row<3>(r.shape, r.st, [&](const std::array<int64_t, 3>& o, int n, const std::array<int64_t, 3>& s) {
    const In* xp = x + o[0];
    const In* zp = z + o[1];
    Out* yp = y + o[2];
    const size_t m = static_cast<size_t>(n);
    if (s[2] == 1 && s[0] == 1 && s[1] == 1) return binary_span<In, Out>(xp, zp, yp, m, f);
    if (s[2] == 1 && s[0] == 0 && s[1] == 1) return binary_span_sv<In, Out>(static_cast<C>(xp[0]), zp, yp, m, f);
    if (s[2] == 1 && s[0] == 1 && s[1] == 0) return binary_span_vs<In, Out>(xp, static_cast<C>(zp[0]), yp, m, f);
    for (int i = 0; i < n; ++i)
      yp[i * s[2]] = static_cast<Out>(f(static_cast<C>(xp[i * s[0]]), static_cast<C>(zp[i * s[1]])));
  });
}

/// y[i] = f(x[i]) over one contiguous block (the fused path).
template <typename In, typename Out, typename F>
void unary_block(const void* x, void* y, size_t n, F f) {
  unary_span<In, Out>(static_cast<const In*>(x), static_cast<Out*>(y), n, f);
}

/// y[i] = f(a[i], b[i]) over one contiguous block (the fused path).
template <typename In, typename Out, typename F>
void binary_block(const void* a, const void* b, void* y, size_t n, F f) {
  binary_span<In, Out>(static_cast<const In*>(a), static_cast<const In*>(b), static_cast<Out*>(y), n, f);
}

/// out = f(c, a, b) with c of type Cond and a, b, out of type T.
template <typename Cond, typename T, typename F>
void ternary(const array& c, const array& a, const array& b, array& out, F f) {
  const Cond* cp = ptr<Cond>(c);
  const T* x = ptr<T>(a);
  const T* z = ptr<T>(b);
  if (a.flags().contiguous && b.flags().contiguous && c.flags().contiguous && a.strides() == b.strides() &&
      a.strides() == c.strides() && alloc_like(out, a, sizeof(T))) {
    T* y = ptr<T>(out);
    parallel_for(a.data_size(), [&](size_t lo, size_t hi) {
      // Locals, as in binary above; a bool condition is read as bytes (GCC vectorizes no bool loads).
      using Load = std::conditional_t<std::is_same_v<Cond, bool>, uint8_t, Cond>;
      const Load* cq = reinterpret_cast<const Load*>(cp);
      const T* xp = x;
      const T* zp = z;
      T* yp = y;
      const F fn = f;
      LOOM_IVDEP
      for (size_t i = lo; i < hi; ++i) yp[i] = fn(static_cast<Cond>(cq[i]), xp[i], zp[i]);
    });
    return;
  }
  out.alloc();
  Shape shape = out.shape();
  std::array<Strides, 4> st{c.strides(), a.strides(), b.strides(), out.strides()};
  collapse(shape, st);
  T* y = ptr<T>(out);
  for_each_row<4>(shape, st, [&](const std::array<int64_t, 4>& o, int n, const std::array<int64_t, 4>& s) {
    for (int i = 0; i < n; ++i)
      y[o[3] + i * s[3]] = f(cp[o[0] + i * s[0]], x[o[1] + i * s[1]], z[o[2] + i * s[2]]);
  });
}


}  // namespace loom::kernels

// The one elementwise driver: unary, binary and ternary kernels over any strides (internal).
// Inputs arrive broadcast to the output shape (as views). Contiguous operands with one layout run as a
// flat loop and keep that layout; everything else walks rows of collapsed dimensions.
#pragma once

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
  return wrapping(a, b, [](auto x, auto y) { return x * y; });
}

/// Gives `out` the layout of contiguous `like`, so that element i of `like`'s data goes to element i
/// of `out`'s: a fresh buffer, or the one eval gave it (a donated input's, laid out as that input).
/// False when eval's buffer is laid out differently: the caller then takes its strided path.
template <typename Out>
bool alloc_like(array& out, const array& like) {
  if (out.is_placed()) {
    return like.data_size() == out.data_size() &&
           ((like.flags().row_contiguous && out.flags().row_contiguous) || like.strides() == out.strides());
  }
  out.set_data(allocator::malloc(like.data_size() * sizeof(Out)), like.data_size(), like.strides(), like.flags());
  return true;
}

template <typename In, typename Out, typename F>
void unary(const array& in, array& out, F f) {
  using C = compute_t<In>;
  if (in.flags().contiguous && alloc_like<Out>(out, in)) {
    const In* x = ptr<In>(in);
    Out* y = ptr<Out>(out);
    parallel_for(in.data_size(), [&](size_t b, size_t e) {
      const In* xp = x;  // locals, as in binary below
      Out* yp = y;
      const F fn = f;
      LOOM_IVDEP
      for (size_t i = b; i < e; ++i) yp[i] = static_cast<Out>(fn(static_cast<C>(xp[i])));
    });
    return;
  }
  out.alloc();
  Shape shape = in.shape();
  std::array<Strides, 2> st{in.strides(), out.strides()};
  collapse(shape, st);
  const In* x = ptr<In>(in);
  Out* y = ptr<Out>(out);
  for_each_row<2>(shape, st, [&](const std::array<int64_t, 2>& o, int n, const std::array<int64_t, 2>& s) {
    const In* xp = x + o[0];
    Out* yp = y + o[1];
    for (int i = 0; i < n; ++i) yp[i * s[1]] = static_cast<Out>(f(static_cast<C>(xp[i * s[0]])));
  });
}

template <typename In, typename Out, typename F>
void binary(const array& a, const array& b, array& out, F f) {
  using C = compute_t<In>;
  const In* x = ptr<In>(a);
  const In* z = ptr<In>(b);
  const bool as = a.data_size() == 1, bs = b.data_size() == 1;
  const bool ac = a.flags().contiguous, bc = b.flags().contiguous;
  const array& like = (as && !bs) ? b : a;
  if (out.size() == 1) out.alloc();
  if (out.size() == 1 ||
      (((ac && bc && a.strides() == b.strides()) || (as && bc) || (bs && ac)) && alloc_like<Out>(out, like))) {
    Out* y = ptr<Out>(out);
    size_t n = out.size() == 1 ? 1 : like.data_size();
    // The loops read their operands from locals: a store through y could otherwise alias a
    // captured scalar (zv is a float like y's elements), and the reloads and run-time checks that
    // guard against it keep some ops (maximum, so relu) from vectorizing. y is either a fresh buffer or
    // an input's own (same index), so `ivdep` is safe.
    if (as && !bs) {
      const C xv0 = static_cast<C>(x[0]);
      parallel_for(n, [&](size_t lo, size_t hi) {
        const In* zp = z;
        Out* yp = y;
        const C xv = xv0;
        const F fn = f;
        LOOM_IVDEP
        for (size_t i = lo; i < hi; ++i) yp[i] = static_cast<Out>(fn(xv, static_cast<C>(zp[i])));
      });
    } else if (bs && !as) {
      const C zv0 = static_cast<C>(z[0]);
      parallel_for(n, [&](size_t lo, size_t hi) {
        const In* xp = x;
        Out* yp = y;
        const C zv = zv0;
        const F fn = f;
        LOOM_IVDEP
        for (size_t i = lo; i < hi; ++i) yp[i] = static_cast<Out>(fn(static_cast<C>(xp[i]), zv));
      });
    } else {
      parallel_for(n, [&](size_t lo, size_t hi) {
        const In* xp = x;
        const In* zp = z;
        Out* yp = y;
        const F fn = f;
        LOOM_IVDEP
        for (size_t i = lo; i < hi; ++i) yp[i] = static_cast<Out>(fn(static_cast<C>(xp[i]), static_cast<C>(zp[i])));
      });
    }
    return;
  }
  out.alloc();
  Shape shape = out.shape();
  std::array<Strides, 3> st{a.strides(), b.strides(), out.strides()};
  collapse(shape, st);
  Out* y = ptr<Out>(out);
  for_each_row<3>(shape, st, [&](const std::array<int64_t, 3>& o, int n, const std::array<int64_t, 3>& s) {
    const In* xp = x + o[0];
    const In* zp = z + o[1];
    Out* yp = y + o[2];
    if (s[0] == 1 && s[1] == 1 && s[2] == 1) {
      for (int i = 0; i < n; ++i) yp[i] = static_cast<Out>(f(static_cast<C>(xp[i]), static_cast<C>(zp[i])));
    } else if (s[0] == 0 && s[1] == 1 && s[2] == 1) {
      const C xv = static_cast<C>(xp[0]);
      for (int i = 0; i < n; ++i) yp[i] = static_cast<Out>(f(xv, static_cast<C>(zp[i])));
    } else if (s[0] == 1 && s[1] == 0 && s[2] == 1) {
      const C zv = static_cast<C>(zp[0]);
      for (int i = 0; i < n; ++i) yp[i] = static_cast<Out>(f(static_cast<C>(xp[i]), zv));
    } else {
      for (int i = 0; i < n; ++i)
        yp[i * s[2]] = static_cast<Out>(f(static_cast<C>(xp[i * s[0]]), static_cast<C>(zp[i * s[1]])));
    }
  });
}

/// y[i] = f(x[i]) over one contiguous block (the fused path; the same conversions as `unary`).
template <typename In, typename Out, typename F>
void unary_block(const void* x, void* y, size_t n, F f) {
  using C = compute_t<In>;
  const In* xp = static_cast<const In*>(x);
  Out* yp = static_cast<Out*>(y);
  for (size_t i = 0; i < n; ++i) yp[i] = static_cast<Out>(f(static_cast<C>(xp[i])));
}

/// y[i] = f(a[i], b[i]) over one contiguous block (the fused path; the same conversions as `binary`).
template <typename In, typename Out, typename F>
void binary_block(const void* a, const void* b, void* y, size_t n, F f) {
  using C = compute_t<In>;
  const In* ap = static_cast<const In*>(a);
  const In* bp = static_cast<const In*>(b);
  Out* yp = static_cast<Out*>(y);
  for (size_t i = 0; i < n; ++i) yp[i] = static_cast<Out>(f(static_cast<C>(ap[i]), static_cast<C>(bp[i])));
}

/// out = f(c, a, b) with c of type Cond and a, b, out of type T.
template <typename Cond, typename T, typename F>
void ternary(const array& c, const array& a, const array& b, array& out, F f) {
  const Cond* cp = ptr<Cond>(c);
  const T* x = ptr<T>(a);
  const T* z = ptr<T>(b);
  if (a.flags().contiguous && b.flags().contiguous && c.flags().contiguous && a.strides() == b.strides() &&
      a.strides() == c.strides() && alloc_like<T>(out, a)) {
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

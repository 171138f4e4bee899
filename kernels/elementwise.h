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

/// The dtypes whose elementwise loops are one strided loop per op: int8, int16, uint16, uint32 and
/// uint64, which no workload computes in bulk. Their kernels skip the unit-stride and scalar-operand
/// loops (the strided loop serves those layouts too, unvectorized): each (op, dtype) of theirs
/// costs one loop of compile time instead of four.
template <typename T>
inline constexpr bool generic_loops_v = std::is_same_v<T, int8_t> || std::is_same_v<T, int16_t> ||
                                        std::is_same_v<T, uint16_t> || std::is_same_v<T, uint32_t> ||
                                        std::is_same_v<T, uint64_t>;

// The loops of one (op, dtype) pair, behind function pointers: the one driver (unary_run and
// binary_run, kernels/elementwise.cpp) plans the layout, allocates, splits the work over threads
// and walks strided rows once for every op and dtype, and calls these for each contiguous range or
// row. Each (op, dtype) then compiles only its loops. `f` is the op's functor.

/// y = f(x): `span` over unit strides (null: `strided` with strides 1), `strided` over any.
struct UnaryLoops {
  void (*span)(const void* f, const void* x, void* y, size_t n);
  void (*strided)(const void* f, const void* x, int64_t sx, void* y, int64_t sy, size_t n);
  size_t out_size;
};

/// y = f(x, z): unit strides, a one-element x (`span_sv`) or z (`span_vs`), and any strides (a null
/// loop: `strided` with those strides).
struct BinaryLoops {
  void (*span)(const void* f, const void* x, const void* z, void* y, size_t n);
  void (*span_sv)(const void* f, const void* x, const void* z, void* y, size_t n);
  void (*span_vs)(const void* f, const void* x, const void* z, void* y, size_t n);
  void (*strided)(const void* f, const void* x, int64_t sx, const void* z, int64_t sz, void* y, int64_t sy,
                  size_t n);
  size_t out_size;
};

/// out = f(in) over any layout (allocates out).
void unary_run(const array& in, array& out, const UnaryLoops& k, const void* f);
/// out = f(a, b), a and b broadcast to out's shape (allocates out).
void binary_run(const array& a, const array& b, array& out, const BinaryLoops& k, const void* f);

// The span loops. The operands arrive as parameters, so a store through y cannot alias them (no
// reloads; zv is a float like y's elements), and y is a fresh buffer or an input's own at the same
// index: `ivdep` is safe.

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

namespace erased {
template <typename In, typename Out, typename F>
void unary_span_fn(const void* f, const void* x, void* y, size_t n) {
  unary_span<In, Out>(static_cast<const In*>(x), static_cast<Out*>(y), n, *static_cast<const F*>(f));
}
template <typename In, typename Out, typename F>
void unary_strided_fn(const void* f, const void* xv, int64_t sx, void* yv, int64_t sy, size_t n) {
  using C = compute_t<In>;
  const F fn = *static_cast<const F*>(f);
  const In* x = static_cast<const In*>(xv);
  Out* y = static_cast<Out*>(yv);
  for (size_t i = 0; i < n; ++i) y[int64_t(i) * sy] = static_cast<Out>(fn(static_cast<C>(x[int64_t(i) * sx])));
}
template <typename In, typename Out, typename F>
void binary_span_fn(const void* f, const void* x, const void* z, void* y, size_t n) {
  binary_span<In, Out>(static_cast<const In*>(x), static_cast<const In*>(z), static_cast<Out*>(y), n,
                       *static_cast<const F*>(f));
}
template <typename In, typename Out, typename F>
void binary_sv_fn(const void* f, const void* xv, const void* zv, void* yv, size_t n) {
  using C = compute_t<In>;
  const F fn = *static_cast<const F*>(f);
  const C x0 = static_cast<C>(*static_cast<const In*>(xv));
  const In* z = static_cast<const In*>(zv);
  Out* y = static_cast<Out*>(yv);
  LOOM_IVDEP
  for (size_t i = 0; i < n; ++i) y[i] = static_cast<Out>(fn(x0, static_cast<C>(z[i])));
}
template <typename In, typename Out, typename F>
void binary_vs_fn(const void* f, const void* xv, const void* zv, void* yv, size_t n) {
  using C = compute_t<In>;
  const F fn = *static_cast<const F*>(f);
  const In* x = static_cast<const In*>(xv);
  const C z0 = static_cast<C>(*static_cast<const In*>(zv));
  Out* y = static_cast<Out*>(yv);
  LOOM_IVDEP
  for (size_t i = 0; i < n; ++i) y[i] = static_cast<Out>(fn(static_cast<C>(x[i]), z0));
}
template <typename In, typename Out, typename F>
void binary_strided_fn(const void* f, const void* xv, int64_t sx, const void* zv, int64_t sz, void* yv, int64_t sy,
                       size_t n) {
  using C = compute_t<In>;
  const F fn = *static_cast<const F*>(f);
  const In* x = static_cast<const In*>(xv);
  const In* z = static_cast<const In*>(zv);
  Out* y = static_cast<Out*>(yv);
  for (size_t i = 0; i < n; ++i) {
    const int64_t j = static_cast<int64_t>(i);
    y[j * sy] = static_cast<Out>(fn(static_cast<C>(x[j * sx]), static_cast<C>(z[j * sz])));
  }
}
}  // namespace erased

/// The loops of y = f(x) for In -> Out.
template <typename In, typename Out, typename F>
UnaryLoops unary_loops() {
  if constexpr (generic_loops_v<In> || generic_loops_v<Out>) {
    return {nullptr, &erased::unary_strided_fn<In, Out, F>, sizeof(Out)};
  } else {
    return {&erased::unary_span_fn<In, Out, F>, &erased::unary_strided_fn<In, Out, F>, sizeof(Out)};
  }
}

/// The loops of y = f(x, z).
template <typename In, typename Out, typename F>
BinaryLoops binary_loops() {
  if constexpr (generic_loops_v<In>) {
    return {nullptr, nullptr, nullptr, &erased::binary_strided_fn<In, Out, F>, sizeof(Out)};
  } else {
    return {&erased::binary_span_fn<In, Out, F>, &erased::binary_sv_fn<In, Out, F>, &erased::binary_vs_fn<In, Out, F>,
            &erased::binary_strided_fn<In, Out, F>, sizeof(Out)};
  }
}

template <typename In, typename Out, typename F>
void unary(const array& in, array& out, F f) {
  unary_run(in, out, unary_loops<In, Out, F>(), &f);
}

template <typename In, typename Out, typename F>
void binary(const array& a, const array& b, array& out, F f) {
  binary_run(a, b, out, binary_loops<In, Out, F>(), &f);
}

/// y[i] = f(x[i]) over one contiguous block (the fused path).
template <typename In, typename Out, typename F>
void unary_block(const void* x, void* y, size_t n, F f) {
  if constexpr (generic_loops_v<In> || generic_loops_v<Out>) erased::unary_strided_fn<In, Out, F>(&f, x, 1, y, 1, n);
  else unary_span<In, Out>(static_cast<const In*>(x), static_cast<Out*>(y), n, f);
}

/// y[i] = f(a[i], b[i]) over one contiguous block (the fused path).
template <typename In, typename Out, typename F>
void binary_block(const void* a, const void* b, void* y, size_t n, F f) {
  if constexpr (generic_loops_v<In>) erased::binary_strided_fn<In, Out, F>(&f, a, 1, b, 1, y, 1, n);
  else binary_span<In, Out>(static_cast<const In*>(a), static_cast<const In*>(b), static_cast<Out*>(y), n, f);
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

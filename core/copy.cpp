#include "loom/core/copy.h"

#include <algorithm>
#include <cstring>

#include "loom/core/dispatch.h"
#include "loom/core/eval.h"
#include "loom/core/loops.h"

namespace loom::kernels {

namespace {

// A transposing copy: the source is contiguous along some dimension `b` other than the innermost
// one `a`. Walking rows of `a` would touch a new source cache line per element, so the copy goes
// tile by tile over (b, a): within a 32 x 32 tile both the reads and the writes stay in cache.
// `row(i, x, xs, y, ys, n)` copies n elements at element offsets x and y with strides xs and ys.
template <typename Row>
bool copy_tiled(const Shape& shape, const std::array<Strides, 2>& st, Row row) {
  constexpr int T = 32;
  const int nd = static_cast<int>(shape.size());
  const int a = nd - 1;
  if (nd < 2 || st[0][a] == 1 || st[0][a] == -1 || shape[a] < T / 2) return false;
  int b = -1;
  for (int d = 0; d < a; ++d) {
    if (st[0][d] == 1 && shape[d] >= T / 2) b = d;
  }
  if (b < 0) return false;
  // The dimensions other than a and b, walked tile row by tile row.
  Shape outer_shape;
  std::array<Strides, 2> outer_st;
  int64_t outer = 1;
  for (int d = 0; d < a; ++d) {
    if (d == b) continue;
    outer_shape.push_back(shape[d]);
    for (int k = 0; k < 2; ++k) outer_st[k].push_back(st[k][d]);
    outer *= shape[d];
  }
  const int64_t nbi = (shape[b] + T - 1) / T, nbj = (shape[a] + T - 1) / T;
  const int64_t xa = st[0][a], ya = st[1][a], xb = st[0][b], yb = st[1][b];
  parallel_for(
      static_cast<size_t>(outer * nbi * nbj),
      [&](size_t begin, size_t end) {
        int64_t at = static_cast<int64_t>(begin) / (nbi * nbj);  // the walker's outer position
        Walker<2> w(outer_shape, outer_st, at);
        for (size_t t = begin; t < end; ++t) {
          int64_t rest = static_cast<int64_t>(t);
          const int64_t bj = rest % nbj;
          rest /= nbj;
          const int64_t bi = rest % nbi;
          rest /= nbi;
          if (rest != at) w.advance(rest - at), at = rest;
          const int64_t xo = w.off[0], yo = w.off[1];
          const int64_t i1 = std::min<int64_t>(shape[b], (bi + 1) * T), j1 = std::min<int64_t>(shape[a], (bj + 1) * T);
          for (int64_t i = bi * T; i < i1; ++i)
            row(xo + i * xb + bj * T * xa, xa, yo + i * yb + bj * T * ya, ya, j1 - bj * T);
        }
      },
      kParallelThreshold / (T * T));
  return true;
}

// Copies between two layouts of the collapsed `shape`: tile by tile when that pays, else row by row.
template <typename Row>
void copy_rows(const Shape& shape, const std::array<Strides, 2>& st, Row row) {
  if (copy_tiled(shape, st, row)) return;
  for_each_row<2>(shape, st, [&](const std::array<int64_t, 2>& o, int n, const std::array<int64_t, 2>& s) {
    row(o[0], s[0], o[1], s[1], int64_t(n));
  });
}

// Moves elements of U (an item size's unsigned integer): every same-dtype copy.
template <typename U>
void move_strided(const Shape& shape, const std::array<Strides, 2>& st, const void* src, void* dst) {
  const U* x = static_cast<const U*>(src);
  U* y = static_cast<U*>(dst);
  copy_rows(shape, st, [x, y](int64_t xo, int64_t xs, int64_t yo, int64_t ys, int64_t n) {
    const U* xp = x + xo;
    U* yp = y + yo;
    if (xs == 1 && ys == 1) {
      std::memcpy(static_cast<void*>(yp), static_cast<const void*>(xp), sizeof(U) * size_t(n));
      return;
    }
    for (int64_t i = 0; i < n; ++i) yp[i * ys] = xp[i * xs];
  });
}

}  // namespace

namespace {
template <typename In, typename Out>
constexpr bool half_and_float32() {
  constexpr bool in_half = std::is_same_v<In, float16_t> || std::is_same_v<In, bfloat16_t>;
  constexpr bool out_half = std::is_same_v<Out, float16_t> || std::is_same_v<Out, bfloat16_t>;
  return (in_half && std::is_same_v<Out, float>) || (out_half && std::is_same_v<In, float>);
}
}  // namespace

void widen(const bfloat16_t* x, float* y, size_t n) {
  LOOM_IVDEP
  for (size_t i = 0; i < n; ++i) y[i] = static_cast<float>(x[i]);
}
void widen(const float16_t* x, float* y, size_t n) {
  LOOM_IVDEP
  for (size_t i = 0; i < n; ++i) y[i] = static_cast<float>(x[i]);
}
void narrow(const float* x, bfloat16_t* y, size_t n) {
  LOOM_IVDEP
  for (size_t i = 0; i < n; ++i) y[i] = bfloat16_t(x[i]);
}
void narrow(const float* x, float16_t* y, size_t n) {
  LOOM_IVDEP
  for (size_t i = 0; i < n; ++i) y[i] = float16_t(x[i]);
}

namespace {
// n elements of In at x (stride xs) as Out at y (stride ys): a converting copy's rows, one function
// per dtype pair behind a pointer, so that each of the 182 pairs compiles one loop and not the walk
// around it. A contiguous half <-> float32 row goes through widen / narrow (the autocast policy's
// casts of float32 weights and activations).
using ConvertRow = void (*)(const void* x, int64_t xs, void* y, int64_t ys, int64_t n);

template <typename In, typename Out>
void convert_row(const void* xv, int64_t xs, void* yv, int64_t ys, int64_t n) {
  const In* x = static_cast<const In*>(xv);
  Out* y = static_cast<Out*>(yv);
  if constexpr (half_and_float32<In, Out>()) {
    if (xs == 1 && ys == 1) {
      if constexpr (std::is_same_v<Out, float>) widen(x, y, size_t(n));
      else narrow(x, y, size_t(n));
      return;
    }
  }
  for (int64_t i = 0; i < n; ++i) y[i * ys] = cast_value<Out>(x[i * xs]);
}

ConvertRow convert_row_for(Dtype from, Dtype to) {
  ConvertRow f = nullptr;
  LOOM_DISPATCH_ALL(from, In, { LOOM_DISPATCH_ALL(to, Out, { f = &convert_row<In, Out>; }); });
  return f;
}
}  // namespace

void copy_strided(const array& src, void* dst, Dtype dst_dtype, const Strides& dst_strides) {
  if (src.size() == 0) return;
  Shape shape = src.shape();
  std::array<Strides, 2> st{src.strides(), dst_strides};
  collapse(shape, st);
  if (src.dtype() == dst_dtype) {
    LOOM_DISPATCH_ITEMSIZE(src.itemsize(), U, move_strided<U>(shape, st, src.raw_data(), dst));
    return;
  }
  const ConvertRow f = convert_row_for(src.dtype(), dst_dtype);
  const char* x = static_cast<const char*>(src.raw_data());
  char* y = static_cast<char*>(dst);
  const int64_t xb = int64_t(src.itemsize()), yb = int64_t(size_of(dst_dtype));
  copy_rows(shape, st, [=](int64_t xo, int64_t xs, int64_t yo, int64_t ys, int64_t n) {
    f(x + xo * xb, xs, y + yo * yb, ys, n);
  });
}

void fill(void* dst, size_t n, size_t itemsize, const void* value) {
  LOOM_DISPATCH_ITEMSIZE(itemsize, U, {
    U v;
    std::memcpy(&v, value, sizeof(U));
    U* y = static_cast<U*>(dst);
    parallel_for(n, [&](size_t b, size_t e) { std::fill(y + b, y + e, v); });
  });
}

array row_contiguous(const array& src) { return row_contiguous(src, src.dtype()); }

array row_contiguous(const array& src, Dtype dtype) {
  if (src.dtype() == dtype && src.flags().row_contiguous) return src;
  array out(allocator::malloc(src.size() * dtype.size), src.shape(), dtype);
  copy_strided(src, out.raw_data(), out.dtype(), out.strides());
  return out;
}

array evaluated_row_contiguous(const array& a) {
  array x = a;
  x.eval();
  return row_contiguous(x);
}

}  // namespace loom::kernels

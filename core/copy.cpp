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
template <typename In, typename Out>
bool copy_tiled(const Shape& shape, const std::array<Strides, 2>& st, const In* x, Out* y) {
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
          for (int64_t i = bi * T; i < i1; ++i) {
            const In* xp = x + xo + i * xb;
            Out* yp = y + yo + i * yb;
            for (int64_t j = bj * T; j < j1; ++j) yp[j * ya] = cast_value<Out>(xp[j * xa]);
          }
        }
      },
      kParallelThreshold / (T * T));
  return true;
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
// A contiguous run of a half <-> float32 pair through widen / narrow (any other pair by element).
template <typename In, typename Out>
void convert_run(const In* x, Out* y, size_t n) {
  if constexpr (std::is_same_v<Out, float> && is_half_v<In>) {
    widen(x, y, n);
  } else if constexpr (std::is_same_v<In, float> && is_half_v<Out>) {
    narrow(x, y, n);
  } else {
    for (size_t i = 0; i < n; ++i) y[i] = cast_value<Out>(x[i]);
  }
}
}  // namespace

void copy_strided(const array& src, void* dst, Dtype dst_dtype, const Strides& dst_strides) {
  if (src.size() == 0) return;
  Shape shape = src.shape();
  std::array<Strides, 2> st{src.strides(), dst_strides};
  collapse(shape, st);
  LOOM_DISPATCH_ALL(src.dtype(), In, {
    const In* x = ptr<In>(src);
    LOOM_DISPATCH_ALL(dst_dtype, Out, {
      Out* y = static_cast<Out*>(dst);
      if (copy_tiled(shape, st, x, y)) return;
      for_each_row<2>(shape, st, [&](const std::array<int64_t, 2>& o, int n, const std::array<int64_t, 2>& s) {
        const In* xp = x + o[0];
        Out* yp = y + o[1];
        if constexpr (std::is_same_v<In, Out>) {
          if (s[0] == 1 && s[1] == 1) {
            std::memcpy(static_cast<void*>(yp), static_cast<const void*>(xp), sizeof(In) * n);
            return;
          }
        } else if constexpr (half_and_float32<In, Out>()) {
          // Contiguous rows through the vector conversion loops: the autocast policy's casts of float32
          // weights and activations go this way. Only these pairs, for compile time.
          if (s[0] == 1 && s[1] == 1) {
            convert_run(xp, yp, size_t(n));
            return;
          }
        }
        for (int i = 0; i < n; ++i) yp[i * s[1]] = cast_value<Out>(xp[i * s[0]]);
      });
    });
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

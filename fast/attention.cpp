// Fused scaled dot-product attention: per (batch, head) the scores, the masked softmax and the
// weighted sum run block by block in cache, and the backward recomputes the softmax from q and k
// instead of keeping the (L, S) weights. Trailing masked columns (a causal mask's upper triangle)
// are skipped, not computed and then zeroed.
#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <optional>
#include <type_traits>
#ifdef __AVX512F__
#include <immintrin.h>
#endif

#include "loom/core/serialize.h"
#include "loom/fast/custom.h"
#include "loom/fast/fast.h"
#include "loom/ops/autocast.h"
#include "loom/kernels/elementwise.h"
#include "loom/kernels/fast_math.h"
#include "loom/kernels/gemm.h"
#include "loom/kernels/rows.h"
#include "loom/ops/ops.h"
#include "loom/ops/utils.h"

namespace loom::fast {

using loom::detail::msg;
using loom::detail::shape_str;
using kernels::dispatch_real;
using kernels::gemm;

namespace {

// Query rows per block (the scores block is kRowBlock x S): 32 for float products, whose OpenBLAS
// calls cost 11 ns; 64 for half ones, whose oneDNN calls cost about 1 us each, so that a head makes
// half as many (forward + backward of (32, 4, 128, 32) bf16 heads: 7.2 -> 5.1 ms; 128 rows were
// slower again). G is the products' operand type.
template <typename T, typename G>
constexpr int kRowBlock = std::is_same_v<T, G> ? 32 : 64;

// One (batch, head)'s operands as its products read them (G): the rows of q, k and v with their row
// strides, and q transposed (E x L) for float products (null for half ones, which read q's rows as
// a transposed operand).
template <typename G>
struct Head {
  const G *q = nullptr, *k = nullptr, *v = nullptr, *qt = nullptr;
  int64_t lq = 0, lk = 0, lv = 0;
};

// A mask entry at or below this (or -inf) counts as masked: its weight is exactly 0. Half of the
// storage type's lowest value, which is what a boolean mask's masked entries hold.
template <typename T, typename St = T>
constexpr T masked_below() {
  if constexpr (std::is_same_v<St, float16_t>) {
    return T(-32752);
  } else {
    return std::numeric_limits<T>::lowest() / 2;
  }
}

// The leading ("batch") axes of an attention operand: offsets of each batch's (rows, cols) matrix.
std::vector<int64_t> batch_offsets(const array& a) {
  const int nd = static_cast<int>(a.ndim());
  size_t n = 1;
  for (int d = 0; d < nd - 2; ++d) n *= a.shape()[d];
  std::vector<int64_t> off(n, 0);
  kernels::Walker<1> w(a.shape(), a.strides(), 0, std::max(nd - 2, 0));
  for (size_t i = 0; i < n; ++i, w.next()) off[i] = w.off[0];
  return off;
}

// An operand BLAS can read as (rows, cols) matrices: contiguous rows (column stride 1) at a row
// stride of at least the row length (BLAS's leading dimension), copied otherwise. Negative-step rows,
// broadcast rows (stride 0) and overlapping ones are copied: as a leading dimension SGEMM rejects
// them ("parameter 8 had an illegal value") and computes nothing.
array rows_contiguous(const array& a) {
  const int nd = static_cast<int>(a.ndim());
  const int64_t cols = a.shape()[nd - 1], rows = nd >= 2 ? a.shape()[nd - 2] : 1;
  const int64_t row_stride = nd >= 2 ? a.strides()[nd - 2] : cols;
  const bool cols_ok = a.strides()[nd - 1] == 1 || cols == 1;
  if (cols_ok && (rows <= 1 || row_stride >= std::max<int64_t>(cols, 1))) return a;
  return kernels::row_contiguous(a);
}

// The row stride of a (..., rows, cols) operand as BLAS's leading dimension. A single row's stride
// is never stepped by, so it may be anything, even in a row-contiguous array (the transpose of a
// (cols, 1) matrix has row stride 1; a broadcast row, 0), but BLAS rejects a leading dimension below
// cols whatever the row count ("parameter 8 had an illegal value") and then computes nothing,
// leaving the output uninitialized: such rows get cols instead.
int64_t leading_dim(const array& a) {
  const int nd = static_cast<int>(a.ndim());
  const int64_t cols = a.shape()[nd - 1], rows = nd >= 2 ? a.shape()[nd - 2] : 1;
  return rows > 1 ? a.strides()[nd - 2] : std::max<int64_t>(cols, 1);
}

// Strides of (..., H, L, E) laid out in memory as (..., L, H, E) when there are 4 axes, so that the
// transpose back to (B, L, H, E) a multi-head layer makes next is row-contiguous; row-major otherwise.
Strides head_major_strides(const Shape& s) {
  Strides st = kernels::row_major_strides(s);
  if (s.size() != 4) return st;
  const int64_t H = s[1], L = s[2], E = s[3];
  return {L * H * E, E, H * E, 1};
}

void alloc_head_major(array& out) {
  Strides st = head_major_strides(out.shape());
  size_t data_size = 0;
  array::Flags f = array::layout_flags(out.shape(), st, &data_size);
  out.set_data(allocator::malloc(out.nbytes()), data_size, st, f);
}

// dq, dk and dv of self-attention, (B, H, L, E) each, as views of one buffer laid out (B, L, 3, H, E)
// when q, k and v are laid out so themselves: split from one qkv projection, whose gradient the
// split's backward concatenates along the features, and that gradient is then this buffer as it
// stands (Concatenate takes adjacent views of one buffer without copying). Other inputs keep
// head-major gradients, which reshape back into row-contiguous (B, L, H E) blocks.
bool alloc_qkv_interleaved(const std::vector<array>& in, std::vector<array>& outs) {
  const Shape& s = outs[0].shape();
  if (s.size() != 4 || outs[1].shape() != s || outs[2].shape() != s || outs[0].size() == 0 ||
      3 * outs[0].size() > size_t(std::numeric_limits<int>::max())) {
    return false;
  }
  const int64_t H = s[1], L = s[2], E = s[3];
  const Strides st{L * 3 * H * E, E, 3 * H * E, 1};
  for (int k = 0; k < 3; ++k) {
    const array& x = in[k];
    const auto at = static_cast<const char*>(in[0].raw_data()) + k * H * E * int64_t(x.itemsize());
    if (x.shape() != s || x.dtype() != outs[0].dtype() || !kernels::is_view_at(x, in[0], at, st)) return false;
  }
  array base(allocator::malloc(3 * outs[0].nbytes()), Shape{static_cast<int>(3 * outs[0].size())}, outs[0].dtype());
  size_t data_size = 0;
  const array::Flags f = array::layout_flags(s, st, &data_size);
  for (int k = 0; k < 3; ++k) outs[k].copy_shared_buffer(base, st, f, data_size, k * H * E);
  return true;
}

// Everything one kernel call needs, with every operand's batch offsets. Operands (and the mask) are
// stored as St: T itself, or a half type that the GEMM seam reads as it is while the softmax and the
// accumulations run in T (float).
template <typename T, typename St = T>
struct Problem {
  int L, S, E, Ev;
  size_t batches;
  std::vector<int64_t> oq, ok, ov, om;
  int64_t lq, lk, lv, lm_row = 0, lm_col = 0;  // row strides (and the mask's column stride)
  const St *q, *k, *v, *m = nullptr;
  // Per distinct mask slice (by offset): each query row's extent, 1 + its last unmasked column, and
  // whether the slice adds anything within the extents (a causal mask is 0 there and is not added).
  struct MaskSlice {
    std::vector<int> ext;
    bool adds = false;
  };
  std::map<int64_t, MaskSlice> slices;

  Problem(const array& qa, const array& ka, const array& va, const array* mask) {
    const int nd = static_cast<int>(qa.ndim());
    L = qa.shape()[nd - 2], E = qa.shape()[nd - 1], S = ka.shape()[nd - 2], Ev = va.shape()[nd - 1];
    oq = batch_offsets(qa), ok = batch_offsets(ka), ov = batch_offsets(va);
    batches = oq.size();
    lq = leading_dim(qa), lk = leading_dim(ka), lv = leading_dim(va);
    q = kernels::ptr<St>(qa), k = kernels::ptr<St>(ka), v = kernels::ptr<St>(va);
    if (!mask) {
      slices[0].ext.assign(L, S);
      om.assign(batches, 0);
      return;
    }
    om = batch_offsets(*mask);
    lm_row = mask->strides()[nd - 2], lm_col = mask->strides()[nd - 1];
    m = kernels::ptr<St>(*mask);
    for (int64_t o : om) {
      if (slices.count(o)) continue;
      MaskSlice& slice = slices[o];
      slice.ext.assign(L, S);
      for (int r = 0; r < L; ++r) {
        const St* row = m + o + r * lm_row;
        int j = S;
        while (j > 0 && !(T(row[(j - 1) * lm_col]) > masked_below<T, St>())) --j;
        slice.ext[r] = j == 0 ? S : j;  // a fully masked row keeps every column (the softmax of its mask)
        for (int c = 0; c < slice.ext[r] && !slice.adds; ++c) slice.adds = T(row[c * lm_col]) != T(0);
      }
    }
  }
  const MaskSlice& slice(size_t b) const { return slices.at(om[b]); }
  const std::vector<int>& ext(size_t b) const { return slice(b).ext; }
  // Columns a block of rows needs: the largest extent among them.
  int width(size_t b, int r0, int r1) const {
    const auto& e = ext(b);
    return *std::max_element(e.begin() + r0, e.begin() + r1);
  }

  // Pt = softmax(scale q k^T + mask)^T for the queries [r0, r1) (at most kRowBlock) and the keys
  // [0, n): Pt[j * kRowBlock + i] is the weight of key j for query r0 + i, 0 past the query's extent.
  // Queries run along the vector lanes, so the max, the exponentials, the sums and the scaling are
  // elementwise over whole key rows: no horizontal reductions and no row tails (rows under a causal
  // mask are 64 keys long on average, where those would cost as much as the vectors). Lanes past the
  // block's queries are 0. The product reads h.qt, batch b's q transposed (E x L), or where that is
  // null q's rows as its transposed operand (half products: oneDNN takes it at the same speed, and
  // the transposed copies cost more than the products of a small head).
  template <typename G>
  void weights_block(size_t b, int r0, int r1, int n, T scale, const Head<G>& h, T* Pt) const {
    constexpr int R = kRowBlock<T, G>;
    const MaskSlice& sl = slice(b);
    if (h.qt) {
      gemm<G, T>(false, false, n, r1 - r0, E, scale, h.k, h.lk, h.qt + r0, L, T(0), Pt, R);
    } else {
      gemm<G, T>(false, true, n, r1 - r0, E, scale, h.k, h.lk, h.q + r0 * h.lq, h.lq, T(0), Pt, R);
    }
    int ext[R];
    for (int i = 0; i < R; ++i) ext[i] = r0 + i < r1 ? std::min(sl.ext[r0 + i], n) : 0;
    if (sl.adds) {
      for (int i = 0; i < r1 - r0; ++i) {
        const St* mr = m + om[b] + int64_t(r0 + i) * lm_row;
        for (int j = 0; j < ext[i]; ++j) Pt[j * R + i] += T(mr[j * lm_col]);
      }
    }
    T mx[R], sum[R];
    for (int i = 0; i < R; ++i) mx[i] = -std::numeric_limits<T>::infinity(), sum[i] = 0;
    for (int j = 0; j < n; ++j) {
      const T* s = Pt + j * R;
      for (int i = 0; i < R; ++i) mx[i] = std::max(mx[i], j < ext[i] ? s[i] : -std::numeric_limits<T>::infinity());
    }
    for (int i = 0; i < R; ++i) mx[i] = std::isfinite(mx[i]) ? mx[i] : T(0);
    for (int j = 0; j < n; ++j) {
      T* s = Pt + j * R;
      for (int i = 0; i < R; ++i) s[i] = detail::exp_of<T>(s[i] - mx[i]);
      for (int i = 0; i < R; ++i) s[i] = j < ext[i] ? s[i] : T(0);
      for (int i = 0; i < R; ++i) sum[i] += s[i];
    }
    for (int i = 0; i < R; ++i) sum[i] = sum[i] > 0 ? T(1) / sum[i] : T(0);
    for (int j = 0; j < n; ++j) {
      T* s = Pt + j * R;
      for (int i = 0; i < R; ++i) s[i] *= sum[i];
    }
  }
};

#ifdef __AVX512F__
// GCC 12 warns inside its own AVX-512 headers that the "undefined" pass-through operand of the
// shuffles is uninitialized (GCC bug 105593).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
// dst[j * ld + i] = src[i * ls + j] for i, j < 16: sixteen rows through four rounds of shuffles.
inline void transpose16(const float* src, int64_t ls, float* dst, int64_t ld) {
  __m512 r[16], t[16];
  for (int i = 0; i < 16; ++i) r[i] = _mm512_loadu_ps(src + i * ls);
  for (int i = 0; i < 16; i += 2) {
    t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);
    t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
  }
  auto lo = [](__m512 x, __m512 y) { return _mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(x), _mm512_castps_pd(y))); };
  auto hi = [](__m512 x, __m512 y) { return _mm512_castpd_ps(_mm512_unpackhi_pd(_mm512_castps_pd(x), _mm512_castps_pd(y))); };
  for (int i = 0; i < 16; i += 4) {
    r[i] = lo(t[i], t[i + 2]);
    r[i + 1] = hi(t[i], t[i + 2]);
    r[i + 2] = lo(t[i + 1], t[i + 3]);
    r[i + 3] = hi(t[i + 1], t[i + 3]);
  }
  for (int i = 0; i < 4; ++i) {
    t[i] = _mm512_shuffle_f32x4(r[i], r[i + 4], 0x88);
    t[i + 4] = _mm512_shuffle_f32x4(r[i], r[i + 4], 0xdd);
    t[i + 8] = _mm512_shuffle_f32x4(r[i + 8], r[i + 12], 0x88);
    t[i + 12] = _mm512_shuffle_f32x4(r[i + 8], r[i + 12], 0xdd);
  }
  for (int i = 0; i < 8; ++i) {
    _mm512_storeu_ps(dst + i * ld, _mm512_shuffle_f32x4(t[i], t[i + 8], 0x88));
    _mm512_storeu_ps(dst + (i + 8) * ld, _mm512_shuffle_f32x4(t[i], t[i + 8], 0xdd));
  }
}
#pragma GCC diagnostic pop
#endif

// dst (cols x rows, leading dimension rows) = src (rows x cols, row stride ls) transposed: the
// kernels multiply by q^T and dout^T through these copies, whose blocks of columns are then plain
// row-major operands (OpenBLAS's small-matrix path runs at half speed on transposed right operands).
// Each tile of rows prefetches the next tile's: a head's rows lie one activation row apart (1.5 KB
// in a qkv projection's output), a stride the hardware prefetcher does not follow.
template <typename T>
void transpose(const T* src, int64_t ls, int rows, int cols, T* dst) {
  constexpr int kLine = 64 / sizeof(T);
  auto prefetch_rows = [&](int i0, int i1) {
    for (int i = i0; i < std::min(rows, i1); ++i) {
      for (int j = 0; j < cols; j += kLine) __builtin_prefetch(src + int64_t(i) * ls + j);
    }
  };
  int i0 = 0;
#ifdef __AVX512F__
  if constexpr (std::is_same_v<T, float>) {
    for (; i0 + 16 <= rows; i0 += 16) {
      prefetch_rows(i0 + 16, i0 + 32);
      int j = 0;
      for (; j + 16 <= cols; j += 16) transpose16(src + int64_t(i0) * ls + j, ls, dst + int64_t(j) * rows + i0, rows);
      for (; j < cols; ++j) {
        for (int i = i0; i < i0 + 16; ++i) dst[int64_t(j) * rows + i] = src[int64_t(i) * ls + j];
      }
    }
  }
#endif
  constexpr int kTile = 8;  // 8 source rows at a time: their cache lines stay in L1 across the columns
  for (; i0 < rows; i0 += kTile) {
    const int i1 = std::min(rows, i0 + kTile);
    prefetch_rows(i1, i1 + kTile);
    for (int j = 0; j < cols; ++j) {
      for (int i = i0; i < i1; ++i) dst[int64_t(j) * rows + i] = src[int64_t(i) * ls + j];
    }
  }
}

// One (batch, head) per task; each thread has its own scores block.
template <typename Body>
void for_each_batch(size_t batches, size_t work_per_batch, Body body) {
  kernels::parallel_for(
      batches, [&](size_t b, size_t e) { body(b, e); },
      std::max<size_t>(1, kernels::kParallelThreshold / std::max<size_t>(work_per_batch, 1)));
}

// A block of weights (or of their gradients) as G for a product with G operands: itself when G is
// T, else rounded into `buf`.
template <typename T, typename G>
const G* as_storage(const T* block, size_t n, std::vector<G>& buf) {
  if constexpr (std::is_same_v<T, G>) {
    return block;
  } else {
    for (size_t i = 0; i < n; ++i) buf[i] = G(block[i]);
    return buf.data();
  }
}

// dst (rows x cols, row stride ld) = src (row stride ls), converted to To (widened, or rounded once).
template <typename From, typename To>
void convert_rows(const From* src, int64_t ls, int rows, int cols, To* dst, int64_t ld) {
  for (int i = 0; i < rows; ++i) {
    const From* s = src + int64_t(i) * ls;
    To* d = dst + int64_t(i) * ld;
    for (int j = 0; j < cols; ++j) d[j] = To(s[j]);
  }
}

// Rows (rows x cols, row stride ls) of one (batch, head) as products of G read them: the stored rows
// where G is St and they are float or dense, else a dense copy in `buf` (widened for float products
// of half storage); `ld` gets their row stride.
template <typename St, typename G>
const G* head_rows(const St* src, int64_t ls, int rows, int cols, std::vector<G>& buf, int64_t& ld) {
  if constexpr (std::is_same_v<G, St>) {
    if (std::is_floating_point_v<St> || ls == cols || rows <= 1) {
      ld = ls;
      return src;
    }
  }
  convert_rows(src, ls, rows, cols, buf.data(), cols);
  ld = cols;
  return buf.data();
}

// P (or dS) of a block, held transposed (n x R, as weights_block leaves it), as a dense rows x n G
// operand: half products read it so (oneDNN's AMX kernels take no transposed A).
template <int R, typename T, typename G>
const G* block_rows(const T* Pt, int rows, int n, std::vector<G>& buf) {
  for (int i = 0; i < rows; ++i) {
    for (int j = 0; j < n; ++j) buf[size_t(i) * n + j] = G(Pt[size_t(j) * R + i]);
  }
  return buf.data();
}

// out (rows x cols of St, row stride ldo) = X^T Y for a block X held transposed (n x R, as
// weights_block leaves P, and the backward dS) and Y (n x cols, row stride ly): half products read
// X's rows rounded (block_rows), float ones X^T as it is; half storage computes into `buf` (T) and
// rounds once into out.
template <int R, typename T, typename G, typename St>
void block_times(const T* Xt, int rows, int n, const G* Y, int64_t ly, int cols, std::vector<G>& xrows,
                 std::vector<T>& buf, St* out, int64_t ldo) {
  constexpr bool kHalf = !std::is_same_v<T, St>;
  if constexpr (!std::is_same_v<T, G>) {
    gemm<G, T>(false, false, rows, cols, n, T(1), block_rows<R>(Xt, rows, n, xrows), n, Y, ly, T(0), buf.data(), cols);
  } else if constexpr (kHalf) {
    gemm<T>(true, false, rows, cols, n, T(1), Xt, R, Y, ly, T(0), buf.data(), cols);
  } else {
    gemm<T>(true, false, rows, cols, n, T(1), Xt, R, Y, ly, T(0), out, ldo);
  }
  if constexpr (kHalf) convert_rows(buf.data(), cols, rows, cols, out, ldo);
}

// The operands of one (batch, head) for products of G, from storage of St. Float storage: the stored
// rows, and their transpose. Half products: the stored rows where they are dense, else a dense copy
// (oneDNN's AMX kernels take dense operands only: a head's rows one activation row apart ran on its
// slower gemm:jit, 17 us for a 128 x 32 x 64 product against 2 us). Float products of half storage
// (a CPU without half kernels): widened copies and their transpose, made in cache per head.
// `rows` is q's (or dout's) row count, `cols` its width.
template <typename T, typename St, typename G>
class HeadOperand {
 public:
  HeadOperand(int rows, int cols)
      : t_(std::is_same_v<G, T> ? size_t(rows) * cols : 0),
        r_(std::is_same_v<St, T> ? 0 : size_t(rows) * cols),
        rows_(rows),
        cols_(cols) {}
  // Rows of G (pointer, row stride) and their transpose (null for half products).
  struct View {
    const G* rows;
    int64_t ld;
    const G* t;
  };
  View load(const St* src, int64_t ls) {
    int64_t ld = 0;
    const G* rows = head_rows(src, ls, rows_, cols_, r_, ld);
    if constexpr (std::is_same_v<G, T>) {
      transpose(rows, ld, rows_, cols_, t_.data());
      return {rows, ld, t_.data()};
    } else {
      return {rows, ld, nullptr};
    }
  }

 private:
  std::vector<G> t_, r_;
  int rows_, cols_;
};


template <typename T, typename St = T, typename G = St>
void forward_kernel(const array& qa, const array& ka, const array& va, const array* mask, array& out, T scale) {
  static_assert(std::is_same_v<G, St> || std::is_same_v<G, T>, "products of the storage type or of T");
  constexpr bool kHalf = !std::is_same_v<T, St>, kHalfProducts = !std::is_same_v<T, G>;
  Problem<T, St> p(qa, ka, va, mask);
  const std::vector<int64_t> oo = batch_offsets(out);
  const int64_t lo = leading_dim(out);
  St* o = kernels::ptr<St>(out);
  kernels::note_gemm_backend(kernels::gemm_dtype<G>(), kernels::gemm_dtype<G>());
  for_each_batch(p.batches, size_t(p.L) * p.S * (p.E + p.Ev), [&](size_t b0, size_t b1) {
    constexpr int R = kRowBlock<T, G>;
    // Half storage: each block's output rows in T, rounded once into the output.
    std::vector<T> Pt(size_t(R) * p.S), ob(kHalf ? size_t(R) * p.Ev : 0);
    std::vector<G> Pr(kHalfProducts ? Pt.size() : 0), kc(kHalf ? size_t(p.S) * p.E : 0), vc(kHalf ? size_t(p.S) * p.Ev : 0);
    HeadOperand<T, St, G> qop(p.L, p.E);
    for (size_t b = b0; b < b1; ++b) {
      Head<G> h;
      const auto qv = qop.load(p.q + p.oq[b], p.lq);
      h.q = qv.rows, h.lq = qv.ld, h.qt = qv.t;
      h.k = head_rows(p.k + p.ok[b], p.lk, p.S, p.E, kc, h.lk);
      h.v = head_rows(p.v + p.ov[b], p.lv, p.S, p.Ev, vc, h.lv);
      for (int r0 = 0; r0 < p.L; r0 += R) {
        const int r1 = std::min(p.L, r0 + R), n = p.width(b, r0, r1), rows = r1 - r0;
        p.weights_block(b, r0, r1, n, scale, h, Pt.data());
        // out[r0:r1] = P v[0:n]
        block_times<R>(Pt.data(), rows, n, h.v, h.lv, p.Ev, Pr, ob, o + oo[b] + r0 * lo, lo);
      }
    }
  });
}

// dq, dk, dv of sum(dout * attention(q, k, v, mask)). With P the weights and dP = dout v^T:
// dv = P^T dout, dS = P * (dP - rowsum(P * dP)), dq = scale dS k, dk = scale dS^T q. Each block
// works on the transposes (keys by queries), as weights_block leaves them. With half products, P
// and dS are rounded to the half type for them; with half storage, dk and dv, which add up over the
// blocks of queries, accumulate in T and are rounded once per (batch, head), as dq's rows are.
template <typename T, typename St = T, typename G = St>
void backward_kernel(const array& qa, const array& ka, const array& va, const array* mask, const array& g,
                     std::vector<array>& outs, T scale) {
  static_assert(std::is_same_v<G, St> || std::is_same_v<G, T>, "products of the storage type or of T");
  constexpr int R = kRowBlock<T, G>;
  constexpr bool kHalf = !std::is_same_v<T, St>, kHalfProducts = !std::is_same_v<T, G>;
  Problem<T, St> p(qa, ka, va, mask);
  const std::vector<int64_t> og = batch_offsets(g), odq = batch_offsets(outs[0]), odk = batch_offsets(outs[1]),
                             odv = batch_offsets(outs[2]);
  const int64_t lg = leading_dim(g), ldq = leading_dim(outs[0]), ldk = leading_dim(outs[1]),
                ldv = leading_dim(outs[2]);
  const St* gp = kernels::ptr<St>(g);
  kernels::note_gemm_backend(kernels::gemm_dtype<G>(), kernels::gemm_dtype<G>());
  St *dq = kernels::ptr<St>(outs[0]), *dk = kernels::ptr<St>(outs[1]), *dv = kernels::ptr<St>(outs[2]);
  for_each_batch(p.batches, size_t(p.L) * p.S * (2 * p.E + 2 * p.Ev), [&](size_t b0, size_t b1) {
    std::vector<T> Pt(size_t(R) * p.S), dPt(size_t(R) * p.S), dqb(kHalf ? size_t(R) * p.E : 0);
    std::vector<G> Ps(kHalfProducts ? Pt.size() : 0), dPs(Ps.size()), dSr(Ps.size()),
        kc(kHalf ? size_t(p.S) * p.E : 0), vc(kHalf ? size_t(p.S) * p.Ev : 0);
    // q and dout: float products read their transposed copies (see transpose), half ones their rows.
    HeadOperand<T, St, G> qop(p.L, p.E), gop(p.L, p.Ev);
    // dk and dv of one (batch, head): the outputs themselves, or T accumulators with half storage.
    std::vector<T> dkT(kHalf ? size_t(p.S) * p.E : 0), dvT(kHalf ? size_t(p.S) * p.Ev : 0);
    for (size_t b = b0; b < b1; ++b) {
      Head<G> h;
      const auto qv = qop.load(p.q + p.oq[b], p.lq), gv = gop.load(gp + og[b], lg);
      h.q = qv.rows, h.lq = qv.ld, h.qt = qv.t;
      h.k = head_rows(p.k + p.ok[b], p.lk, p.S, p.E, kc, h.lk);
      h.v = head_rows(p.v + p.ov[b], p.lv, p.S, p.Ev, vc, h.lv);
      T* dkb;
      T* dvb;
      int64_t lk_acc, lv_acc;
      if constexpr (kHalf) {
        dkb = dkT.data(), dvb = dvT.data(), lk_acc = p.E, lv_acc = p.Ev;
        std::fill(dkT.begin(), dkT.end(), T(0));
        std::fill(dvT.begin(), dvT.end(), T(0));
      } else {
        dkb = dk + odk[b], dvb = dv + odv[b], lk_acc = ldk, lv_acc = ldv;
        for (int s = 0; s < p.S; ++s) {
          std::fill(dkb + s * ldk, dkb + s * ldk + p.E, T(0));
          std::fill(dvb + s * ldv, dvb + s * ldv + p.Ev, T(0));
        }
      }
      for (int r0 = 0; r0 < p.L; r0 += R) {
        const int r1 = std::min(p.L, r0 + R), n = p.width(b, r0, r1), rows = r1 - r0;
        p.weights_block(b, r0, r1, n, scale, h, Pt.data());
        // dv[0:n] += P^T dout
        gemm<G, T>(false, false, n, p.Ev, rows, T(1), as_storage(Pt.data(), size_t(n) * R, Ps), R, gv.rows + r0 * gv.ld,
                   gv.ld, T(1), dvb, lv_acc);
        // dP^T = v[0:n] dout^T
        if (gv.t) {
          gemm<G, T>(false, false, n, rows, p.Ev, T(1), h.v, h.lv, gv.t + r0, p.L, T(0), dPt.data(), R);
        } else {
          gemm<G, T>(false, true, n, rows, p.Ev, T(1), h.v, h.lv, gv.rows + r0 * gv.ld, gv.ld, T(0), dPt.data(), R);
        }
        T dot[R] = {};
        for (int j = 0; j < n; ++j) {
          const T *pj = Pt.data() + j * R, *dj = dPt.data() + j * R;
          for (int i = 0; i < R; ++i) dot[i] += pj[i] * dj[i];
        }
        for (int j = 0; j < n; ++j) {
          const T* pj = Pt.data() + j * R;
          T* dj = dPt.data() + j * R;
          for (int i = 0; i < R; ++i) dj[i] = pj[i] * (dj[i] - dot[i]) * scale;
        }
        // dq = dS k[0:n], dk[0:n] += dS^T q
        block_times<R>(dPt.data(), rows, n, h.k, h.lk, p.E, dSr, dqb, dq + odq[b] + r0 * ldq, ldq);
        gemm<G, T>(false, false, n, p.E, rows, T(1), as_storage(dPt.data(), size_t(n) * R, dPs), R, h.q + r0 * h.lq,
                   h.lq, T(1), dkb, lk_acc);
      }
      if constexpr (kHalf) {  // the accumulated dk and dv, rounded once
        convert_rows(dkT.data(), p.E, p.S, p.E, dk + odk[b], ldk);
        convert_rows(dvT.data(), p.Ev, p.S, p.Ev, dv + odv[b], ldv);
      }
    }
  });
}

// Whether half q, k and v run their products on half operands (the GEMM seam's half kernels) or on
// float32 copies of each head, made in cache: the latter where the seam has no half kernels, and for
// heads narrower than 64, whose products are too small for the half kernels to pay: a 128-query,
// 32-wide head's forward and backward took 13.3 ms half against 8.6 ms float32 per layer of the
// benchmark's transformer on one AMX Xeon core, and the step's attention 71 against 40 ms on one
// AVX512-BF16 Zen 4 core; 64 and wider ran 1.3-2.4x faster half on AMX (benchmarks/README.md).
bool half_products(const array& q, const array& v) {
  const Dtype d = q.dtype();
  if ((d != bfloat16 && d != float16) || !kernels::gemm_reads_half(d)) return false;
  return std::max(q.shape(-1), v.shape(-1)) >= 64;
}

// inputs q, k, v[, mask]: the composition the fused kernels replace; its derivatives are those of
// the fused op.
Composition reference(double scale) {
  return [scale](const std::vector<array>& x) {
    array s = matmul(multiply(x[0], array(scale, x[0].dtype())), swapaxes(x[1], -1, -2));
    if (x.size() > 3) s = add(s, x[3]);
    return std::vector<array>{matmul(loom::softmax(s, -1), x[2])};
  };
}

// inputs: q, k, v[, mask], dout; outputs: dq, dk, dv.
// The multiply-adds of `qk` products of q (..., L, D) with k (..., S, D) and `pv` of the scores with
// v (..., S, Dv), over the heads of the broadcast batch, for the profiler.
double attention_flops(const array& q, const array& k, const array& v, int qk, int pv) {
  const int r = static_cast<int>(q.ndim());
  if (r < 2 || k.ndim() < 2 || v.ndim() < 2) return -1;
  const double l = q.shape()[r - 2], d = q.shape()[r - 1], s = k.shape()[k.ndim() - 2], dv = v.shape()[v.ndim() - 1];
  double heads = 1;
  for (int i = 0; i < r - 2; ++i) heads *= std::max(q.shape()[i], i < int(k.ndim()) - 2 ? k.shape()[i] : 1);
  return 2.0 * heads * l * s * (qk * d + pv * dv);
}

class ScaledDotProductAttentionBackward : public CustomBackward {
 public:
  ScaledDotProductAttentionBackward(double scale, bool has_mask)
      : CustomBackward(reference(scale), has_mask ? 4 : 3, 1, {0, 1, 2}), scale_(scale), has_mask_(has_mask) {}
  void save(detail::Writer& w) const override { w.put(scale_, has_mask_); }
  void eval_cpu(const std::vector<array>& in, std::vector<array>& outs) override {
    const bool has_mask = in.size() == 5;
    array q = rows_contiguous(in[0]), k = rows_contiguous(in[1]), v = rows_contiguous(in[2]);
    array g = rows_contiguous(in.back());
    if (!alloc_qkv_interleaved(in, outs)) {
      for (auto& o : outs) alloc_head_major(o);
    }
    if (q.size() == 0 || k.size() == 0) {
      for (auto& o : outs) std::fill_n(static_cast<char*>(o.raw_data()), o.nbytes(), 0);
      return;
    }
    const array* mask = has_mask ? &in[3] : nullptr;
    const bool hp = half_products(q, v);
    if (q.dtype() == bfloat16) {
      hp ? backward_kernel<float, bfloat16_t>(q, k, v, mask, g, outs, float(scale_))
         : backward_kernel<float, bfloat16_t, float>(q, k, v, mask, g, outs, float(scale_));
    } else if (q.dtype() == float16) {
      hp ? backward_kernel<float, float16_t>(q, k, v, mask, g, outs, float(scale_))
         : backward_kernel<float, float16_t, float>(q, k, v, mask, g, outs, float(scale_));
    } else {
      dispatch_real(q.dtype(), [&](auto tag) {
        using T = decltype(tag);
        backward_kernel<T>(q, k, v, mask, g, outs, static_cast<T>(scale_));
      });
    }
  }
  const char* name() const override { return "ScaledDotProductAttentionBackward"; }
  // Every input has the same leading axes, and the kernel runs per leading index.
  Batching batching(const std::vector<int>&) const override { return Batching::same_shape; }
  // Scores again, then dV, dP, dQ and dK: five products of the forward's sizes.
  double flops(const std::vector<array>& in, const std::vector<array>&) const override {
    return attention_flops(in[0], in[1], in[2], 3, 2);
  }

 private:
  double scale_;
  bool has_mask_;
};
std::shared_ptr<Primitive> load_attention_backward(detail::Reader& r) {
  double scale;
  bool has_mask;
  r.get(scale, has_mask);
  return std::make_shared<ScaledDotProductAttentionBackward>(scale, has_mask);
}
const bool kScaledDotProductAttentionBackwardLoads =
    detail::register_primitive("ScaledDotProductAttentionBackward", load_attention_backward);

// inputs: q, k, v[, mask] (the mask broadcast to (..., L, S)).
class ScaledDotProductAttention : public Custom {
 public:
  explicit ScaledDotProductAttention(double scale) : Custom(reference(scale)), scale_(scale) {}
  void save(detail::Writer& w) const override { w.put(scale_); }
  void eval_cpu(const std::vector<array>& in, std::vector<array>& outs) override {
    array& out = outs[0];
    array q = rows_contiguous(in[0]), k = rows_contiguous(in[1]), v = rows_contiguous(in[2]);
    alloc_head_major(out);
    if (out.size() == 0) return;
    if (k.shape()[k.ndim() - 2] == 0) {  // no keys: a sum over nothing
      std::fill_n(static_cast<char*>(out.raw_data()), out.nbytes(), 0);
      return;
    }
    const array* mask = in.size() == 4 ? &in[3] : nullptr;
    const bool hp = half_products(q, v);
    if (q.dtype() == bfloat16) {
      hp ? forward_kernel<float, bfloat16_t>(q, k, v, mask, out, float(scale_))
         : forward_kernel<float, bfloat16_t, float>(q, k, v, mask, out, float(scale_));
    } else if (q.dtype() == float16) {
      hp ? forward_kernel<float, float16_t>(q, k, v, mask, out, float(scale_))
         : forward_kernel<float, float16_t, float>(q, k, v, mask, out, float(scale_));
    } else {
      dispatch_real(q.dtype(), [&](auto tag) {
        using T = decltype(tag);
        forward_kernel<T>(q, k, v, mask, out, static_cast<T>(scale_));
      });
    }
  }
  const char* name() const override { return "ScaledDotProductAttention"; }
  // The batch as one more leading axis of every input (unbatched ones broadcast): the kernel itself,
  // not the composition, whose half-precision scores would round where the kernel's do not.
  Batching batching(const std::vector<int>&) const override { return Batching::same_shape; }
  double flops(const std::vector<array>& in, const std::vector<array>&) const override {
    return attention_flops(in[0], in[1], in[2], 1, 1);
  }

 protected:
  // dq, dk and dv from one fused kernel; the mask's gradient through the composition.
  std::vector<array> fused_vjp(const std::vector<array>& p, const std::vector<array>& cot, const std::vector<int>& argnums,
                               const std::vector<array>&) override {
    auto grads = backward(std::make_shared<ScaledDotProductAttentionBackward>(scale_, p.size() == 4), p, cot, {0, 1, 2});
    std::vector<array> out;
    for (int a : argnums) out.push_back(a < 3 ? grads[a] : reference_vjp(p, cot, {a})[0]);
    return out;
  }

 private:
  double scale_;
};
const bool kScaledDotProductAttentionLoads =
    detail::register_primitive("ScaledDotProductAttention", [](detail::Reader& r) -> std::shared_ptr<Primitive> {
      return std::make_shared<ScaledDotProductAttention>(r.get<double>());
    });

}  // namespace

array scaled_dot_product_attention(const array& queries_cast, const array& keys_cast, const array& values_cast,
                                   double scale, const std::optional<array>& mask_cast, StreamOrDevice s) {
  OnStream on(s);
  using loom::detail::autocast_lower;  // a matrix-product op of Autocast's policy
  const array queries = autocast_lower(queries_cast), keys = autocast_lower(keys_cast), values = autocast_lower(values_cast);
  const std::optional<array> mask = autocast_lower(mask_cast);
  const char* op = "scaled_dot_product_attention";
  const size_t nd = queries.ndim();
  auto shapes = [&] {
    return msg("queries ", shape_str(queries.shape()), ", keys ", shape_str(keys.shape()), " and values ",
               shape_str(values.shape()));
  };
  if (nd < 2 || keys.ndim() != nd || values.ndim() != nd) {
    throw std::invalid_argument(msg("[", op, "] expected queries (..., L, E), keys (..., S, E) and values (..., S, Ev) "
                                    "with the same number of axes (at least 2), got ", shapes()));
  }
  const Shape lead(queries.shape().begin(), queries.shape().end() - 2);
  const bool ok = Shape(keys.shape().begin(), keys.shape().end() - 2) == lead &&
                  Shape(values.shape().begin(), values.shape().end() - 2) == lead &&
                  keys.shape(-1) == queries.shape(-1) && values.shape(-2) == keys.shape(-2);
  if (!ok) {
    throw std::invalid_argument(msg("[", op, "] expected queries (..., L, E), keys (..., S, E) and values (..., S, Ev) "
                                    "with equal leading axes, got ", shapes()));
  }
  Dtype d = promote_types(promote_types(queries.dtype(), keys.dtype()), values.dtype());
  if (!is_floating_point(d)) {
    throw std::invalid_argument(msg("[", op, "] needs floating-point queries, keys and values, got ", queries.dtype(),
                                    ", ", keys.dtype(), " and ", values.dtype()));
  }
  // Half types stay half (half the bytes): the kernels compute the softmax and the sums in float32,
  // and their products on half operands or on float32 copies of each head (half_products).
  const Dtype cd = d == bfloat16 || d == float16 || d == float64 ? d : float32;
  Shape scores = lead;
  scores.push_back(queries.shape(-2));
  scores.push_back(keys.shape(-2));
  std::vector<array> in{astype(queries, cd), astype(keys, cd), astype(values, cd)};
  if (mask) {
    if (!detail::broadcasts_to(mask->shape(), scores)) {
      throw std::invalid_argument(msg("[", op, "] the mask of shape ", shape_str(mask->shape()),
                                      " does not broadcast to the scores (..., L, S) = ", shape_str(scores)));
    }
    array m = *mask;
    if (m.dtype() == bool_) {
      // Masked entries hold cd's lowest finite value (a fully masked row is then the reference's
      // uniform softmax, not NaN).
      const double lowest = cd == float64    ? std::numeric_limits<double>::lowest()
                            : cd == float16  ? -65504.0
                            : cd == bfloat16 ? -3.3895313892515355e38
                                             : double(std::numeric_limits<float>::lowest());
      m = where(m, array(0.0, cd), array(lowest, cd));
    } else if (!is_floating_point(m.dtype())) {
      throw std::invalid_argument(msg("[", op, "] the mask must be boolean or floating point, got ", m.dtype()));
    }
    in.push_back(broadcast_to(astype(m, cd), scores));
  }
  Shape out = lead;
  out.push_back(queries.shape(-2));
  out.push_back(values.shape(-1));
  array r(out, cd, std::make_shared<ScaledDotProductAttention>(scale), in);
  return r.dtype() == d ? r : astype(r, d);
}

}  // namespace loom::fast

// Convolutions: the op functions and the one primitive behind them (forward, input gradient and
// weight gradient of a channels-last N-d convolution), computed with im2col / col2im and the GEMM seam (kernels/gemm.h).
#include "loom/ops/conv.h"

#include <algorithm>
#include <cstring>
#include <memory>
#include <limits>
#include <optional>

#include "loom/core/primitive.h"
#include "loom/core/serialize.h"
#include "loom/ops/batching.h"
#include "loom/ops/autocast.h"
#include "loom/kernels/elementwise.h"
#include "loom/kernels/gemm.h"
#include "loom/ops/ops.h"
#include "loom/ops/utils.h"

namespace loom {

using detail::msg;
using detail::shape_str;
using kernels::gemm;

namespace {

// Per spatial dimension; every list has one entry per spatial dimension.
struct ConvParams {
  std::vector<int> stride, pad_lo, pad_hi, kdil, idil;
  int groups = 1;
  bool flip = false;  // the kernel's spatial axes are reversed (a true convolution)
};

// x (N, S.., C_in), w (C_out, K.., C_in/groups), y (N, O.., C_out) are bound by the trilinear form
//   T(x, w, y) = sum y[n, o, co] * w[co, k, ci] * xd[n, o * stride + k * kdil - pad_lo, ci]
// (xd: x with input dilation and zero padding, ci in co's group; with `flip`, w's taps are reversed).
// Each role computes the derivative of T with respect to the array it outputs, from the other two.
enum class ConvRole {
  forward,      // inputs (x, w) -> y
  input_grad,   // inputs (y, w) -> x  (a transposed convolution)
  weight_grad,  // inputs (x, y) -> w
};

// Output size along one dimension, or -1 when the kernel does not fit.
int64_t conv_out_size(int64_t S, int64_t K, int stride, int lo, int hi, int kdil, int idil) {
  int64_t eff = (S == 0 ? 0 : (S - 1) * idil + 1) + lo + hi;
  int64_t ext = (K - 1) * kdil + 1;
  if (eff < ext) return -1;
  return (eff - ext) / stride + 1;
}

// ---------------------------------------------------------------------------------------------
// Kernels on row-contiguous buffers of T (float or double).
// ---------------------------------------------------------------------------------------------

struct ConvGeom {
  int D = 0;
  int64_t N = 0, Cin = 0, Cout = 0, G = 1, Cg = 0, Cog = 0;
  std::vector<int64_t> S, K, O;
  int64_t in_sp = 1, out_sp = 1, kt = 1;
  const ConvParams* p = nullptr;
  int64_t kc() const { return kt * Cg; }   // im2col columns of one group
  int64_t row() const { return kt * Cin; }  // im2col columns of all groups

  ConvGeom(const Shape& xs, const Shape& ws, const Shape& ys, const ConvParams& params) : p(&params) {
    D = static_cast<int>(xs.size()) - 2;
    N = xs[0];
    Cin = xs.back();
    Cout = ws[0];
    Cg = ws.back();
    G = params.groups;
    Cog = Cout / G;
    for (int d = 0; d < D; ++d) {
      S.push_back(xs[d + 1]);
      K.push_back(ws[d + 1]);
      O.push_back(ys[d + 1]);
      in_sp *= S.back();
      out_sp *= O.back();
      kt *= K.back();
    }
  }
  // im2col would copy x unchanged: a pointwise convolution.
  bool pointwise() const {
    if (kt != 1) return false;
    for (int d = 0; d < D; ++d) {
      if (p->stride[d] != 1 || p->pad_lo[d] != 0 || p->pad_hi[d] != 0 || p->idil[d] != 1) return false;
    }
    return true;
  }
};

// A scratch buffer from Loom's caching allocator.
template <typename T>
struct Scratch {
  allocator::Buffer buf;
  explicit Scratch(size_t n) : buf(allocator::malloc(n * sizeof(T))) {}
  ~Scratch() { allocator::free(buf); }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  T* get() { return static_cast<T*>(buf.ptr); }
};

// Upper bound on im2col buffer elements (8 MiB of float32, so the matrix is still in cache when the
// GEMM reads it or col2im walks it); larger batches run in chunks of whole images.
constexpr int64_t kColLimit = int64_t(1) << 21;

int64_t images_per_chunk(const ConvGeom& g) {
  int64_t per = std::max<int64_t>(1, g.out_sp * g.row());
  return std::clamp<int64_t>(kColLimit / per, 1, std::max<int64_t>(g.N, 1));
}

// Walks rows [r0, r1) of the im2col matrix of images starting at n0 (row (n - n0) * out_sp + o) and
// pairs each column entry with its input element. Row layout: [group][tap][channel in group].
// Forward (kAdd = false): copies x into `col`, writing zeros for padding and dilation holes.
// Adjoint (kAdd = true): adds `col` back into x at the same places (col2im).
template <bool kAdd, typename T>
class RowWalker {
 public:
  explicit RowWalker(const ConvGeom& g) : g_(g), p_(*g.p), idx_(g.D), kk_(g.D), xs_(g.D), o_(g.D) {
    for (int d = 0; d < g.D; ++d) idx_[d].resize(g.K[d]);
    for (int64_t d = g.D - 1, s = g.Cin; d >= 0; --d) {
      xs_[d] = s;
      s *= g.S[d];
    }
    // One contiguous block per innermost kernel row when its taps are adjacent in memory.
    fast_last_ = g.G == 1 && p_.kdil[g.D - 1] == 1 && p_.idil[g.D - 1] == 1;
    // Rows whose window lies inside the image (most of them) copy those blocks from fixed offsets,
    // without the per-tap bounds work: run_off_[ko] is innermost kernel row ko's offset from the
    // window's first tap.
    interior_ = fast_last_;
    for (int d = 0; d < g.D; ++d) interior_ = interior_ && p_.idil[d] == 1;
    if (interior_) {
      const int64_t kouter = g.kt / g.K[g.D - 1];
      run_off_.resize(kouter);
      // The taps of the kernel's axes before the last, walked row-major.
      Shape kshape;
      Strides kstrides;
      for (int d = 0; d + 1 < g.D; ++d) {
        kshape.push_back(static_cast<int>(g.K[d]));
        kstrides.push_back(p_.kdil[d] * xs_[d]);
      }
      kernels::Walker<1> w(kshape, kstrides);
      for (int64_t ko = 0; ko < kouter; ++ko, w.next()) run_off_[ko] = w.off[0];
    }
  }

  void run(std::conditional_t<kAdd, T*, const T*> x, std::conditional_t<kAdd, const T*, T*> col, int64_t n0,
           int64_t r0, int64_t r1) {
    const int D = g_.D;
    // The row's output position, decoded once and then advanced like an odometer.
    int64_t n = n0 + r0 / g_.out_sp;
    for (int64_t d = D - 1, rem = r0 % g_.out_sp; d >= 0; --d) {
      o_[d] = rem % g_.O[d];
      rem /= g_.O[d];
    }
    for (int64_t r = r0; r < r1; ++r) {
      if (!interior_ || !interior_row(x, col, n, r)) generic_row(x, col, n, r);
      for (int d = D - 1; d >= 0; --d) {
        if (++o_[d] < g_.O[d]) break;
        o_[d] = 0;
        if (d == 0) ++n;
      }
    }
  }

 private:
  using XPtr = std::conditional_t<kAdd, T*, const T*>;
  using ColPtr = std::conditional_t<kAdd, const T*, T*>;

  // Row r when its whole window is inside image n: kouter blocks of KL * Cin from fixed offsets.
  bool interior_row(XPtr x, ColPtr col, int64_t n, int64_t r) {
    const int D = g_.D;
    int64_t base = 0;
    for (int d = 0; d < D; ++d) {
      const int64_t start = o_[d] * p_.stride[d] - p_.pad_lo[d];
      if (start < 0 || start + (g_.K[d] - 1) * p_.kdil[d] >= g_.S[d]) return false;
      base += start * xs_[d];
    }
    const int64_t block = g_.K[D - 1] * g_.Cin;
    auto row = col + r * g_.row();
    auto src = x + n * g_.in_sp * g_.Cin + base;
    for (size_t ko = 0; ko < run_off_.size(); ++ko) move(src + run_off_[ko], row + int64_t(ko) * block, block);
    return true;
  }

  void generic_row(XPtr x, ColPtr col, int64_t n, int64_t r) {
    const int D = g_.D;
    const int64_t rl = g_.row(), kc = g_.kc(), Cin = g_.Cin, Cg = g_.Cg, G = g_.G;
    const int64_t img = g_.in_sp * Cin, KL = g_.K[D - 1], kouter = g_.kt / KL;
    for (int d = 0; d < D; ++d) {
      const int64_t st = p_.stride[d], kd = p_.kdil[d], id = p_.idil[d], lo = p_.pad_lo[d], S = g_.S[d];
      int64_t v = o_[d] * st - lo;
      int64_t* out = idx_[d].data();
      if (id == 1) {
        for (int64_t k = 0; k < g_.K[d]; ++k, v += kd) out[k] = (v >= 0 && v < S) ? v : -1;
      } else {
        for (int64_t k = 0; k < g_.K[d]; ++k, v += kd) out[k] = (v >= 0 && v % id == 0 && v / id < S) ? v / id : -1;
      }
    }
    auto row = col + r * rl;
    auto image = x + n * img;
    std::fill(kk_.begin(), kk_.end(), 0);
    for (int64_t ko = 0; ko < kouter; ++ko) {
      bool valid = true;
      int64_t base = 0;
      for (int d = 0; d < D - 1; ++d) {
        int64_t i = idx_[d][kk_[d]];
        if (i < 0) {
          valid = false;
          break;
        }
        base += i * xs_[d];
      }
      const int64_t k0 = ko * KL;  // flat index of the first tap of this innermost kernel row
      const auto& il = idx_[D - 1];
      if (!valid) {
        if constexpr (!kAdd) {
          for (int64_t gi = 0; gi < G; ++gi) std::fill_n(row + gi * kc + k0 * Cg, KL * Cg, T(0));
        }
      } else if (fast_last_ && il[0] >= 0 && il[KL - 1] >= 0) {
        move(image + base + il[0] * Cin, row + k0 * Cin, KL * Cin);
      } else {
        for (int64_t k = 0; k < KL; ++k) {
          const int64_t i = il[k];
          for (int64_t gi = 0; gi < G; ++gi) {
            auto c = row + gi * kc + (k0 + k) * Cg;
            if (i >= 0) move(image + base + i * Cin + gi * Cg, c, Cg);
            else if constexpr (!kAdd) std::fill_n(c, Cg, T(0));
          }
        }
      }
      for (int d = D - 2; d >= 0; --d) {
        if (++kk_[d] < g_.K[d]) break;
        kk_[d] = 0;
      }
    }
  }

  static void move(const T* __restrict src, T* __restrict dst, int64_t n) {
    if (n >= 32) {
      std::memcpy(dst, src, sizeof(T) * n);
    } else {
      for (int64_t j = 0; j < n; ++j) dst[j] = src[j];
    }
  }
  static void move(T* __restrict dst, const T* __restrict src, int64_t n) {
    for (int64_t j = 0; j < n; ++j) dst[j] += src[j];
  }

  const ConvGeom& g_;
  const ConvParams& p_;
  std::vector<std::vector<int64_t>> idx_;  // per dimension and tap: input index, or -1 for padding/holes
  std::vector<int64_t> kk_, xs_, o_;       // kernel odometer; element strides of x's spatial axes; output position
  std::vector<int64_t> run_off_;           // see interior_row
  bool fast_last_ = false, interior_ = false;
};

// Unfolds images [n0, n1) of x into rows of `col`, parallel over rows.
template <typename T>
void im2col(const T* x, T* col, const ConvGeom& g, int64_t n0, int64_t n1) {
  const int64_t rows = (n1 - n0) * g.out_sp;
  size_t threshold = static_cast<size_t>(
      std::max<int64_t>(1, int64_t(kernels::kParallelThreshold) / std::max<int64_t>(g.row(), 1)));
  kernels::parallel_for(
      static_cast<size_t>(rows),
      [&](size_t b, size_t e) { RowWalker<false, T>(g).run(x, col, n0, int64_t(b), int64_t(e)); }, threshold);
}

// col2im by gathering: each input element of images [n0, n1) sums every column entry that im2col
// copied from it. Parallel over input elements.
template <typename T>
void col2im_gather(const T* col, T* dx, const ConvGeom& g, int64_t n0, int64_t n1) {
  const int D = g.D;
  const ConvParams& p = *g.p;
  const int64_t positions = (n1 - n0) * g.in_sp, rl = g.row(), kc = g.kc(), Cin = g.Cin, Cg = g.Cg, G = g.G;
  std::vector<int64_t> os(D);  // row strides of output positions
  for (int64_t d = D - 1, s = 1; d >= 0; --d) {
    os[d] = s;
    s *= g.O[d];
  }
  size_t threshold = static_cast<size_t>(
      std::max<int64_t>(1, int64_t(kernels::kParallelThreshold) / std::max<int64_t>(g.kt * Cin, 1)));
  kernels::parallel_for(
      static_cast<size_t>(positions),
      [&](size_t b, size_t e) {
        std::vector<std::vector<int64_t>> idx(D);  // per dimension and tap: output index or -1
        for (int d = 0; d < D; ++d) idx[d].resize(g.K[d]);
        std::vector<int64_t> kk(D);
        for (size_t q = b; q < e; ++q) {
          int64_t nl = static_cast<int64_t>(q) / g.in_sp, sp = static_cast<int64_t>(q) % g.in_sp, rem = sp;
          for (int d = D - 1; d >= 0; --d) {
            int64_t i = rem % g.S[d];
            rem /= g.S[d];
            for (int64_t k = 0; k < g.K[d]; ++k) {
              int64_t v = i * p.idil[d] + p.pad_lo[d] - k * p.kdil[d];
              int64_t o = -1;
              if (v >= 0 && v % p.stride[d] == 0 && v / p.stride[d] < g.O[d]) o = v / p.stride[d];
              idx[d][k] = o;
            }
          }
          T* out = dx + (n0 + nl) * g.in_sp * Cin + sp * Cin;
          std::fill_n(out, Cin, T(0));
          const T* img_col = col + nl * g.out_sp * rl;
          std::fill(kk.begin(), kk.end(), 0);
          for (int64_t kf = 0; kf < g.kt; ++kf) {
            int64_t orow = 0;
            bool valid = true;
            for (int d = 0; d < D; ++d) {
              int64_t o = idx[d][kk[d]];
              if (o < 0) {
                valid = false;
                break;
              }
              orow += o * os[d];
            }
            if (valid) {
              const T* src = img_col + orow * rl + kf * Cg;
              for (int64_t gi = 0; gi < G; ++gi) {
                const T* __restrict sg = src + gi * kc;
                T* __restrict og = out + gi * Cg;
                for (int64_t c = 0; c < Cg; ++c) og[c] += sg[c];
              }
            }
            for (int d = D - 1; d >= 0; --d) {
              if (++kk[d] < g.K[d]) break;
              kk[d] = 0;
            }
          }
        }
      },
      threshold);
}

// The adjoint of im2col: images [n0, n1) of dx are the sums of the column entries copied from each
// element. With at least as many images as threads, each thread zeroes its images and streams their
// rows of `col` in order, adding into them (the image stays in cache). Otherwise every input element
// gathers its entries, parallel over elements, so no two threads write the same place.
template <typename T>
void col2im(const T* col, T* dx, const ConvGeom& g, int64_t n0, int64_t n1) {
  const int64_t img = g.in_sp * g.Cin, images = n1 - n0;
  const int nt = kernels::threads_for(static_cast<size_t>(images * g.out_sp * g.row()));
  if (images >= nt) {
    kernels::parallel_for(
        static_cast<size_t>(images),
        [&](size_t b, size_t e) {
          RowWalker<true, T> walker(g);
          for (size_t i = b; i < e; ++i) {
            std::fill_n(dx + (n0 + int64_t(i)) * img, img, T(0));
            walker.run(dx, col, n0, int64_t(i) * g.out_sp, (int64_t(i) + 1) * g.out_sp);
          }
        },
        nt > 1 ? 1 : images + 1);
    return;
  }
  col2im_gather(col, dx, g, n0, n1);
}

// The three roles on row-contiguous buffers: operands of In (float, double, or a half type the GEMM
// seam reads as it is), results of Out / Acc. The half roles keep their operands half (half the
// bytes through im2col) and accumulate in float: the input gradient's col2im sums and the weight
// gradient's sums over image chunks are float, rounded once by the caller.
template <typename In, typename Out>
void conv_forward(const In* x, const In* w, Out* y, const ConvGeom& g) {
  const int64_t kc = g.kc(), rl = g.row();
  const int64_t total = g.N * g.out_sp * g.Cout;
  if (total == 0) return;
  if (kc == 0) {
    std::fill_n(y, total, Out(0.0f));
    return;
  }
  if (g.pointwise()) {
    for (int64_t gi = 0; gi < g.G; ++gi) {
      gemm<In, Out>(false, true, g.N * g.out_sp, g.Cog, kc, 1.0, x + gi * kc, rl, w + gi * g.Cog * kc, kc, 0.0,
                    y + gi * g.Cog, g.Cout);
    }
    return;
  }
  const int64_t nb = images_per_chunk(g);
  Scratch<In> col(static_cast<size_t>(nb * g.out_sp * rl));
  for (int64_t n0 = 0; n0 < g.N; n0 += nb) {
    int64_t n1 = std::min(g.N, n0 + nb);
    im2col(x, col.get(), g, n0, n1);
    for (int64_t gi = 0; gi < g.G; ++gi) {
      gemm<In, Out>(false, true, (n1 - n0) * g.out_sp, g.Cog, kc, 1.0, col.get() + gi * kc, rl, w + gi * g.Cog * kc,
                    kc, 0.0, y + n0 * g.out_sp * g.Cout + gi * g.Cog, g.Cout);
    }
  }
}

template <typename In, typename Acc>
void conv_input_grad(const In* dy, const In* w, Acc* dx, const ConvGeom& g) {
  const int64_t kc = g.kc(), rl = g.row();
  const int64_t total = g.N * g.in_sp * g.Cin;
  if (total == 0) return;
  if (kc == 0 || g.Cog == 0 || g.out_sp == 0) {
    std::fill_n(dx, total, Acc(0));
    return;
  }
  if (g.pointwise()) {
    for (int64_t gi = 0; gi < g.G; ++gi) {
      gemm<In, Acc>(false, false, g.N * g.in_sp, kc, g.Cog, 1.0, dy + gi * g.Cog, g.Cout, w + gi * g.Cog * kc, kc, 0.0,
                    dx + gi * kc, rl);
    }
    return;
  }
  const int64_t nb = images_per_chunk(g);
  Scratch<Acc> col(static_cast<size_t>(nb * g.out_sp * rl));
  for (int64_t n0 = 0; n0 < g.N; n0 += nb) {
    int64_t n1 = std::min(g.N, n0 + nb);
    for (int64_t gi = 0; gi < g.G; ++gi) {
      gemm<In, Acc>(false, false, (n1 - n0) * g.out_sp, kc, g.Cog, 1.0, dy + n0 * g.out_sp * g.Cout + gi * g.Cog,
                    g.Cout, w + gi * g.Cog * kc, kc, 0.0, col.get() + gi * kc, rl);
    }
    col2im(col.get(), dx, g, n0, n1);
  }
}

template <typename In, typename Acc>
void conv_weight_grad(const In* x, const In* dy, Acc* dw, const ConvGeom& g) {
  const int64_t kc = g.kc(), rl = g.row();
  const int64_t total = g.Cout * kc;
  if (total == 0) return;
  if (g.N * g.out_sp == 0) {
    std::fill_n(dw, total, Acc(0));
    return;
  }
  if (g.pointwise()) {
    for (int64_t gi = 0; gi < g.G; ++gi) {
      gemm<In, Acc>(true, false, g.Cog, kc, g.N * g.out_sp, 1.0, dy + gi * g.Cog, g.Cout, x + gi * kc, rl, 0.0,
                    dw + gi * g.Cog * kc, kc);
    }
    return;
  }
  const int64_t nb = images_per_chunk(g);
  Scratch<In> col(static_cast<size_t>(nb * g.out_sp * rl));
  for (int64_t n0 = 0; n0 < g.N; n0 += nb) {
    int64_t n1 = std::min(g.N, n0 + nb);
    im2col(x, col.get(), g, n0, n1);
    for (int64_t gi = 0; gi < g.G; ++gi) {
      gemm<In, Acc>(true, false, g.Cog, kc, (n1 - n0) * g.out_sp, 1.0, dy + n0 * g.out_sp * g.Cout + gi * g.Cog,
                    g.Cout, col.get() + gi * kc, rl, n0 == 0 ? 0.0 : 1.0, dw + gi * g.Cog * kc, kc);
    }
  }
}

// Reverses the spatial taps of a row-contiguous (C_out, taps, C_g) weight: reversing every spatial
// axis of a row-major block reverses its flat tap order. `src` and `dst` may not overlap unless equal.
template <typename T>
void flip_taps(const T* src, T* dst, int64_t cout, int64_t kt, int64_t cg) {
  for (int64_t co = 0; co < cout; ++co) {
    const T* s = src + co * kt * cg;
    T* d = dst + co * kt * cg;
    if (s == d) {
      for (int64_t k = 0; k < kt / 2; ++k) std::swap_ranges(d + k * cg, d + (k + 1) * cg, d + (kt - 1 - k) * cg);
    } else {
      for (int64_t k = 0; k < kt; ++k) std::copy_n(s + (kt - 1 - k) * cg, cg, d + k * cg);
    }
  }
}

// ---------------------------------------------------------------------------------------------
// The primitive.
// ---------------------------------------------------------------------------------------------

array make_conv(ConvRole role, const array& a, const array& b, const ConvParams& p, Shape out_shape);

// ---- vmap: the batch folds into the images (axis 0), or into the channels of a grouped convolution ----

// (B, N, S.., G*c) -> (N, S.., G*B*c): within each of the `groups` groups, the channels of every batch
// entry side by side, so the same grouped convolution sees B times the channels in each group.
array batch_into_groups(const array& a, int groups) {
  const int nd = static_cast<int>(a.ndim()), B = a.shape(0), C = a.shape(nd - 1);
  Shape split = a.shape();
  split.back() = groups;
  split.push_back(C / groups);
  Shape out(a.shape().begin() + 1, a.shape().end());
  out.back() = B * C;
  return reshape(moveaxis(reshape(a, split), 0, nd - 1), out);
}

// The inverse on an output: (N, S.., G*B*c) -> (N, S.., B, G*c), the batch just before the channels.
array batch_out_of_groups(const array& a, int B, int groups) {
  const int nd = static_cast<int>(a.ndim()), C = a.shape(nd - 1) / B;
  Shape split = a.shape();
  split.back() = groups;
  split.push_back(B);
  split.push_back(C / groups);
  Shape out = a.shape();
  out.back() = B;
  out.push_back(C);
  return reshape(swapaxes(reshape(a, split), nd - 1, nd), out);
}

// (B, N, S.., C) -> (N, S.., B*C): each batch entry its own block of groups (a convolution with B
// times the groups).
array batch_as_groups(const array& a) {
  const int nd = static_cast<int>(a.ndim());
  return flatten(moveaxis(a, 0, nd - 2), nd - 2, nd - 1);
}

// Weights (B, G*co, K.., cg) -> (G*B*co, K.., cg): the output channels of every batch entry side by
// side within each group.
array weights_into_groups(const array& w, int groups) {
  Shape split = w.shape();
  split[1] = w.shape(1) / groups;
  split.insert(split.begin() + 1, groups);
  Shape out(w.shape().begin() + 1, w.shape().end());
  out[0] *= w.shape(0);
  return reshape(swapaxes(reshape(w, split), 0, 1), out);
}

// The inverse on a weight-shaped output: (G*B*co, K.., cg) -> (B, G*co, K.., cg).
array weights_out_of_groups(const array& w, int B, int groups) {
  Shape split = w.shape();
  split[0] = w.shape(0) / (B * groups);
  split.insert(split.begin(), B);
  split.insert(split.begin(), groups);
  Shape out = w.shape();
  out[0] /= B;
  out.insert(out.begin(), B);
  return reshape(swapaxes(reshape(w, split), 0, 1), out);
}

class Convolution : public UnaryPrimitive {
 public:
  Convolution(ConvRole role, ConvParams p, Shape out_shape)
      : role_(role), p_(std::move(p)), out_shape_(std::move(out_shape)) {}
  void save(detail::Writer& w) const override {
    w.put(role_, p_.stride, p_.pad_lo, p_.pad_hi, p_.kdil, p_.idil, p_.groups, p_.flip, out_shape_);
  }
  // Every role does the forward's work: a multiply-add per output element per weight element of
  // its output channel (each gradient is the same sum of products, taken another way).
  double flops(const std::vector<array>& in, const std::vector<array>& out) const override {
    const array& y = role_ == ConvRole::forward ? out[0] : role_ == ConvRole::input_grad ? in[0] : in[1];
    const array& w = role_ == ConvRole::weight_grad ? out[0] : in[1];
    return w.shape()[0] ? 2.0 * double(y.size()) * double(w.size() / size_t(w.shape()[0])) : 0.0;
  }

  void eval_cpu(const std::vector<array>& in, array& out) override {
    const Dtype d = out.dtype();
    // Half operands stay half where the GEMM seam reads them as they are (oneDNN's half kernels);
    // elsewhere they are converted once, here, and the roles compute in float32 (float64 in float64).
    // A half forward writes its half result directly; half gradients accumulate in float32.
    const bool half = (d == bfloat16 || d == float16) && kernels::gemm_reads_half(d);
    const Dtype ct = half ? d : d == float64 ? float64 : float32;
    const Dtype rt = half && role_ == ConvRole::forward ? d : ct == float64 ? float64 : float32;
    array a = kernels::row_contiguous(in[0], ct), b = kernels::row_contiguous(in[1], ct);
    const bool direct = out.dtype() == rt;
    std::optional<array> tmp;
    if (direct) out.alloc();
    else tmp = array(allocator::malloc(out.size() * rt.size), out.shape(), rt);
    array& res = direct ? out : *tmp;
    const Shape& xs = role_ == ConvRole::input_grad ? out.shape() : a.shape();
    const Shape& ws = role_ == ConvRole::weight_grad ? out.shape() : b.shape();
    const Shape& ys = role_ == ConvRole::forward ? out.shape() : (role_ == ConvRole::input_grad ? a.shape() : b.shape());
    ConvGeom g(xs, ws, ys, p_);
    auto run = [&](auto in_tag, auto res_tag) {
      using T = decltype(in_tag);
      using R = decltype(res_tag);
      const T* ap = kernels::ptr<T>(a);
      const T* bp = kernels::ptr<T>(b);
      R* o = kernels::ptr<R>(res);
      std::optional<array> wflip;
      if (p_.flip && role_ != ConvRole::weight_grad) {
        wflip = array(allocator::malloc(b.nbytes()), b.shape(), ct);
        flip_taps<T>(bp, kernels::ptr<T>(*wflip), g.Cout, g.kt, g.Cg);
        bp = kernels::ptr<T>(*wflip);
      }
      // Only the (operand, result) pairs above are instantiated: a half forward, float gradients.
      constexpr bool kSame = std::is_same_v<T, R>, kWide = std::is_same_v<R, float> || std::is_same_v<R, double>;
      if constexpr (kSame) {
        if (role_ == ConvRole::forward) conv_forward<T, R>(ap, bp, o, g);
      }
      if constexpr (kWide) {
        if (role_ == ConvRole::input_grad) conv_input_grad<T, R>(ap, bp, o, g);
        if (role_ == ConvRole::weight_grad) {
          conv_weight_grad<T, R>(ap, bp, o, g);
          if (p_.flip) flip_taps<R>(o, o, g.Cout, g.kt, g.Cg);
        }
      }
    };
    if (ct == float64) {
      run(double{}, double{});
    } else if (ct == float32) {
      run(float{}, float{});
    } else if (ct == bfloat16) {
      if (rt == bfloat16) run(bfloat16_t{}, bfloat16_t{});
      else run(bfloat16_t{}, float{});
    } else {
      if (rt == float16) run(float16_t{}, float16_t{});
      else run(float16_t{}, float{});
    }
    if (!direct) {
      out.alloc();
      kernels::copy_strided(res, out.raw_data(), out.dtype(), out.strides());
    }
  }

  std::vector<array> vjp(const std::vector<array>& p, const std::vector<array>& cot, const std::vector<int>& argnums,
                         const std::vector<array>&) override {
    const array& c = cot[0];
    std::vector<array> out;
    for (int arg : argnums) {
      switch (role_) {
        case ConvRole::forward:  // p = (x, w)
          out.push_back(arg == 0 ? make_conv(ConvRole::input_grad, c, p[1], p_, p[0].shape())
                                 : make_conv(ConvRole::weight_grad, p[0], c, p_, p[1].shape()));
          break;
        case ConvRole::input_grad:  // p = (y, w), c has x's shape
          out.push_back(arg == 0 ? make_conv(ConvRole::forward, c, p[1], p_, p[0].shape())
                                 : make_conv(ConvRole::weight_grad, c, p[0], p_, p[1].shape()));
          break;
        case ConvRole::weight_grad:  // p = (x, y), c has w's shape
          out.push_back(arg == 0 ? make_conv(ConvRole::input_grad, p[1], c, p_, p[0].shape())
                                 : make_conv(ConvRole::forward, p[0], c, p_, p[1].shape()));
          break;
      }
    }
    return out;
  }

  // Bilinear: the tangent is the sum of the role applied with one input replaced by its tangent.
  std::vector<array> jvp(const std::vector<array>& p, const std::vector<array>& t,
                         const std::vector<int>& argnums) override {
    const Shape& shape = out_shape_;
    std::optional<array> acc;
    for (size_t i = 0; i < argnums.size(); ++i) {
      array term = argnums[i] == 0 ? make_conv(role_, t[i], p[1], p_, shape) : make_conv(role_, p[0], t[i], p_, shape);
      acc = acc ? add(*acc, term) : term;
    }
    return {*acc};
  }

  std::pair<std::vector<array>, std::vector<int>> vmap(const std::vector<array>& in, const std::vector<int>& axes,
                                                       const std::vector<array>& outs) override;
  // A shapeless call: the forward's output follows x's batch and spatial sizes. A gradient role
  // gives x or w, whose spatial sizes y does not determine (a stride rounds down): its output is the
  // traced one with y's batch, checked against the forward's shape rule.
  std::vector<Shape> output_shapes(const std::vector<Shape>& in) const override {
    Shape x = in.at(0), w = in.at(1), y;
    if (role_ == ConvRole::input_grad) {
      y = in[0];
      x = out_shape_;
      x[0] = y[0];
    } else if (role_ == ConvRole::weight_grad) {
      y = in[1];
      w = out_shape_;
    }
    Shape fwd{x[0]};
    bool ok = x.size() == w.size() && x.back() == w.back() * p_.groups;
    for (size_t d = 0; ok && d + 2 < x.size(); ++d) {
      const int64_t o = conv_out_size(x[d + 1], w[d + 1], p_.stride[d], p_.pad_lo[d], p_.pad_hi[d], p_.kdil[d], p_.idil[d]);
      ok = o >= 1 && o <= std::numeric_limits<int>::max();
      fwd.push_back(static_cast<int>(o));
    }
    fwd.push_back(w[0]);
    if (!ok || (role_ != ConvRole::forward && fwd != y)) {
      throw std::invalid_argument(msg("[compile] Convolution (", role_ == ConvRole::forward ? "forward" : "gradient",
                                      ") cannot take inputs of shapes ", shape_str(in[0]), " and ", shape_str(in[1]),
                                      " (traced output ", shape_str(out_shape_), ")"));
    }
    return {role_ == ConvRole::forward ? fwd : role_ == ConvRole::input_grad ? x : w};
  }
  const char* name() const override { return "Convolution"; }
  void print(std::ostream& os) const override {
    static const char* roles[] = {"forward", "input_grad", "weight_grad"};
    os << "Convolution(" << roles[static_cast<int>(role_)] << ", groups=" << p_.groups << (p_.flip ? ", flip" : "")
       << ")";
  }


 private:
  ConvRole role_;
  ConvParams p_;
  Shape out_shape_;
};
const bool kConvolutionLoads =
    detail::register_primitive("Convolution", [](detail::Reader& r) -> std::shared_ptr<Primitive> {
      ConvRole role;
      ConvParams p;
      Shape out_shape;
      r.get(role, p.stride, p.pad_lo, p.pad_hi, p.kdil, p.idil, p.groups, p.flip, out_shape);
      if (role < ConvRole::forward || role > ConvRole::weight_grad) r.fail("not a convolution role");
      return std::make_shared<Convolution>(role, std::move(p), std::move(out_shape));
    });

// Inputs a and b are (x, w), (y, w) or (x, y) by role. For forward and input_grad, images batched
// alone fold the batch into the images (axis 0); for weight_grad, which sums over the images, one
// input batched alone folds it into the channels within each group, as does a weight batched alone
// for the others. Both inputs batched make each batch entry its own block of groups.
std::pair<std::vector<array>, std::vector<int>> Convolution::vmap(const std::vector<array>& in,
                                                                  const std::vector<int>& axes,
                                                                  const std::vector<array>& outs) {
  const int B = detail::vmap_size(in, axes), G = p_.groups;
  const array a = detail::batch_first(in[0], axes[0]), b = detail::batch_first(in[1], axes[1]);
  const Shape& out = outs[0].shape();
  const int nd = static_cast<int>(out.size());
  const bool images_out = role_ != ConvRole::weight_grad;
  Shape shape = out;
  if (axes[0] >= 0 && axes[1] >= 0) {
    ConvParams q = p_;
    q.groups = B * G;
    const array b2 = images_out ? flatten(b, 0, 1) : batch_as_groups(b);
    (images_out ? shape.back() : shape[0]) *= B;
    const array r = make_conv(role_, batch_as_groups(a), b2, q, shape);
    if (images_out) return {{reshape(r, detail::insert_axis(out, nd - 1, B))}, {nd - 1}};
    return {{reshape(r, detail::insert_axis(out, 0, B))}, {0}};
  }
  if (images_out && axes[0] >= 0) {  // images alone: more images
    shape[0] *= B;
    const array r = make_conv(role_, flatten(a, 0, 1), b, p_, shape);
    return {{reshape(r, detail::insert_axis(out, 0, B))}, {0}};
  }
  if (images_out) {  // the weight alone: forward into its output channels, input_grad into its input ones
    shape.back() *= B;
    const array w = role_ == ConvRole::forward ? weights_into_groups(b, G) : batch_as_groups(b);
    return {{batch_out_of_groups(make_conv(role_, a, w, p_, shape), B, G)}, {nd - 1}};
  }
  if (axes[0] >= 0) {  // weight_grad of batched images x: more input channels per group
    shape.back() *= B;
    const array r = make_conv(role_, batch_into_groups(a, G), b, p_, shape);
    return {{reshape(r, detail::insert_axis(out, nd - 1, B))}, {nd - 1}};
  }
  // weight_grad of batched output gradients y: more output channels per group.
  shape[0] *= B;
  const array r = make_conv(role_, a, batch_into_groups(b, G), p_, shape);
  return {{weights_out_of_groups(r, B, G)}, {0}};
}

// Records one convolution node. The inputs are cast to a common floating dtype.
array make_conv(ConvRole role, const array& a, const array& b, const ConvParams& p, Shape out_shape) {
  Dtype d = promote_types(a.dtype(), b.dtype());
  detail::reject_complex(d, "conv");
  if (!is_floating_point(d)) d = float32;
  auto prim = std::make_shared<Convolution>(role, p, out_shape);
  return array(std::move(out_shape), d, std::move(prim), {astype(a, d), astype(b, d)});
}

// Expands a per-dimension list: empty -> `def` everywhere, one value -> that value everywhere.
std::vector<int> expand(const std::vector<int>& v, int D, int def, const char* what, const char* op) {
  if (v.empty()) return std::vector<int>(D, def);
  if (v.size() == 1) return std::vector<int>(D, v[0]);
  if (static_cast<int>(v.size()) != D) {
    throw std::invalid_argument(msg("[", op, "] ", what, " has ", v.size(), " entries but the convolution has ", D,
                                    " spatial dimensions"));
  }
  return v;
}

std::string list_str(const std::vector<int>& v) { return shape_str(v); }

array conv_impl(const char* op, const array& input_cast, const array& weight_cast, const std::vector<int>& stride,
                const std::vector<int>& pad_lo, const std::vector<int>& pad_hi, const std::vector<int>& kdil,
                const std::vector<int>& idil, int groups, bool flip, int want_spatial) {
  const array input = detail::autocast_lower(input_cast), weight = detail::autocast_lower(weight_cast);
  const int nd = static_cast<int>(input.ndim());
  const std::string in_s = shape_str(input.shape()), w_s = shape_str(weight.shape());
  if (want_spatial > 0 && nd != want_spatial + 2) {
    throw std::invalid_argument(msg("[", op, "] input must have ", want_spatial + 2, " dimensions (N, ",
                                    want_spatial == 1 ? "L" : want_spatial == 2 ? "H, W" : "D, H, W",
                                    ", C_in); got shape ", in_s));
  }
  if (nd < 3) {
    throw std::invalid_argument(
        msg("[", op, "] input must have at least 3 dimensions (N, spatial..., C_in); got shape ", in_s));
  }
  const int D = nd - 2;
  if (static_cast<int>(weight.ndim()) != nd) {
    throw std::invalid_argument(msg("[", op, "] weight must have ", nd, " dimensions (C_out, kernel spatial..., ",
                                    "C_in / groups) to match input ", in_s, "; got shape ", w_s));
  }
  if (!is_floating_point(input.dtype()) || !is_floating_point(weight.dtype())) {
    throw std::invalid_argument(msg("[", op, "] needs floating-point input and weight; got ", input.dtype(), " and ",
                                    weight.dtype()));
  }
  ConvParams p;
  p.stride = expand(stride, D, 1, "stride", op);
  p.pad_lo = expand(pad_lo, D, 0, "padding_lo", op);
  p.pad_hi = expand(pad_hi, D, 0, "padding_hi", op);
  p.kdil = expand(kdil, D, 1, "kernel_dilation", op);
  p.idil = expand(idil, D, 1, "input_dilation", op);
  p.groups = groups;
  for (int d = 0; d < D; ++d) {
    if (p.stride[d] < 1) throw std::invalid_argument(msg("[", op, "] stride must be positive; got ", list_str(p.stride)));
    if (p.kdil[d] < 1) {
      throw std::invalid_argument(msg("[", op, "] dilation must be positive; got ", list_str(p.kdil)));
    }
    if (p.idil[d] < 1) {
      throw std::invalid_argument(msg("[", op, "] input_dilation must be positive; got ", list_str(p.idil)));
    }
    if (p.pad_lo[d] < 0 || p.pad_hi[d] < 0) {
      throw std::invalid_argument(msg("[", op, "] padding must be non-negative; got ", list_str(p.pad_lo), " and ",
                                      list_str(p.pad_hi)));
    }
  }
  const int cin = input.shape(-1), cout = weight.shape(0), cg = weight.shape(-1);
  if (groups < 1) throw std::invalid_argument(msg("[", op, "] groups must be positive; got ", groups));
  if (cin % groups != 0 || cout % groups != 0) {
    throw std::invalid_argument(msg("[", op, "] groups=", groups, " must divide both C_in=", cin, " (input ", in_s,
                                    ") and C_out=", cout, " (weight ", w_s, ")"));
  }
  if (cg * groups != cin) {
    throw std::invalid_argument(msg("[", op, "] channel mismatch: input ", in_s, " has C_in=", cin, " but weight ", w_s,
                                    " expects C_in/groups=", cg, " with groups=", groups));
  }
  Shape out_shape{input.shape(0)};
  for (int d = 0; d < D; ++d) {
    int S = input.shape(d + 1), K = weight.shape(d + 1);
    if (K < 1) {
      throw std::invalid_argument(msg("[", op, "] kernel spatial sizes must be positive; got weight ", w_s));
    }
    int64_t o = conv_out_size(S, K, p.stride[d], p.pad_lo[d], p.pad_hi[d], p.kdil[d], p.idil[d]);
    if (o < 1) {
      throw std::invalid_argument(msg("[", op, "] kernel of extent ", int64_t(K - 1) * p.kdil[d] + 1,
                                      " (weight ", w_s, ", dilation ", p.kdil[d], ") is larger than the padded input ",
                                      "along spatial axis ", d, " (input ", in_s, ", padding ", p.pad_lo[d], "+",
                                      p.pad_hi[d], ")"));
    }
    if (o > std::numeric_limits<int>::max()) {
      throw std::overflow_error(msg("[", op, "] the output's spatial axis ", d, " would have ", o,
                                    " elements, beyond the int32 sizes of shapes (input ", in_s, ", padding ",
                                    p.pad_lo[d], "+", p.pad_hi[d], ", input_dilation ", p.idil[d], ")"));
    }
    out_shape.push_back(static_cast<int>(o));
  }
  out_shape.push_back(cout);
  p.flip = flip;
  return make_conv(ConvRole::forward, input, weight, p, std::move(out_shape));
}

}  // namespace

array conv_general(const array& input, const array& weight, std::vector<int> stride, std::vector<int> padding_lo,
                   std::vector<int> padding_hi, std::vector<int> kernel_dilation, std::vector<int> input_dilation,
                   int groups, bool flip, StreamOrDevice s) {
  OnStream on(s);
  if (padding_hi.empty()) padding_hi = padding_lo;
  return conv_impl("conv_general", input, weight, stride, padding_lo, padding_hi, kernel_dilation, input_dilation,
                   groups, flip, 0);
}

array conv1d(const array& input, const array& weight, int stride, int padding, int dilation, int groups,
             StreamOrDevice s) {
  OnStream on(s);
  return conv_impl("conv1d", input, weight, {stride}, {padding}, {padding}, {dilation}, {1}, groups, false, 1);
}

array conv2d(const array& input, const array& weight, const std::pair<int, int>& stride,
             const std::pair<int, int>& padding, const std::pair<int, int>& dilation, int groups, StreamOrDevice s) {
  OnStream on(s);
  return conv_impl("conv2d", input, weight, {stride.first, stride.second}, {padding.first, padding.second},
                   {padding.first, padding.second}, {dilation.first, dilation.second}, {1, 1}, groups, false, 2);
}

namespace {
std::vector<int> triple(const std::tuple<int, int, int>& t) { return {std::get<0>(t), std::get<1>(t), std::get<2>(t)}; }
std::vector<int> pair2(const std::pair<int, int>& p) { return {p.first, p.second}; }

// The transposed convolution as MLX defines it: conv_general of the input dilated by `stride`, with the
// kernel flipped and padded by lo = extent - 1 - padding before and lo + output_padding after, where
// extent = dilation * (K - 1) + 1; the output is (S - 1) * stride - 2 * padding + extent +
// output_padding long (PyTorch's). A padding beyond extent - 1 would make lo negative: we pad by
// max(lo, 0) and crop the output instead, which is what PyTorch computes. (MLX slices the undilated
// input by -lo, which differs from this when stride > 1.) Being a conv_general and a slice, its
// gradients are theirs.
array conv_transpose_impl(const char* op, const array& input, const array& weight, const std::vector<int>& stride,
                          const std::vector<int>& padding, const std::vector<int>& dilation,
                          const std::vector<int>& output_padding, int groups) {
  const int D = static_cast<int>(stride.size());
  const std::string in_s = shape_str(input.shape()), w_s = shape_str(weight.shape());
  if (static_cast<int>(input.ndim()) != D + 2 || static_cast<int>(weight.ndim()) != D + 2) {
    throw std::invalid_argument(msg("[", op, "] input and weight must have ", D + 2,
                                    " dimensions (N, spatial..., C_in) and (C_out, kernel..., C_in / groups); got ",
                                    in_s, " and ", w_s));
  }
  std::vector<int> lo(D), hi(D);
  Shape crop_start(D + 2, 0), crop_stop(D + 2, 0);
  bool crop = false;
  for (int d = 0; d < D; ++d) {
    if (stride[d] < 1 || dilation[d] < 1) {
      throw std::invalid_argument(msg("[", op, "] stride and dilation must be positive; got stride ",
                                      list_str(stride), " and dilation ", list_str(dilation)));
    }
    if (padding[d] < 0 || output_padding[d] < 0) {
      throw std::invalid_argument(msg("[", op, "] padding and output_padding must be non-negative; got padding ",
                                      list_str(padding), " and output_padding ", list_str(output_padding)));
    }
    // As PyTorch: the extra positions must be ones that some shift of the input could reach.
    if (output_padding[d] >= stride[d] && output_padding[d] >= dilation[d]) {
      throw std::invalid_argument(msg("[", op, "] output_padding must be smaller than stride or dilation; got ",
                                      "output_padding ", list_str(output_padding), ", stride ", list_str(stride),
                                      " and dilation ", list_str(dilation)));
    }
    if (input.shape(d + 1) < 1) {  // as PyTorch: (S - 1) * stride has no meaning for S = 0
      throw std::invalid_argument(msg("[", op, "] input spatial sizes must be positive; got input ", in_s));
    }
    const int K = weight.shape(d + 1);
    if (K < 1) throw std::invalid_argument(msg("[", op, "] kernel spatial sizes must be positive; got weight ", w_s));
    const int64_t extent = int64_t(dilation[d]) * (K - 1) + 1;
    const int64_t out = int64_t(input.shape(d + 1) - 1) * stride[d] - 2 * int64_t(padding[d]) + extent +
                        output_padding[d];
    if (out < 1) {
      throw std::invalid_argument(msg("[", op, "] the output would be empty along spatial axis ", d, ": input ",
                                      in_s, ", weight ", w_s, ", stride ", stride[d], ", padding ", padding[d],
                                      ", dilation ", dilation[d], ", output_padding ", output_padding[d]));
    }
    const int64_t l = extent - 1 - padding[d], h = l + output_padding[d];
    if (h > std::numeric_limits<int>::max() || out > std::numeric_limits<int>::max()) {
      throw std::overflow_error(msg("[", op, "] output size along spatial axis ", d, " is too large: input ", in_s,
                                    ", weight ", w_s, ", stride ", stride[d], ", padding ", padding[d], ", dilation ",
                                    dilation[d], ", output_padding ", output_padding[d]));
    }
    lo[d] = static_cast<int>(std::max<int64_t>(l, 0));
    hi[d] = static_cast<int>(std::max<int64_t>(h, 0));
    crop_start[d + 1] = static_cast<int>(lo[d] - l);
    crop_stop[d + 1] = static_cast<int>(crop_start[d + 1] + out);
    crop = crop || l < 0 || h < 0;
  }
  array y = conv_impl(op, input, weight, std::vector<int>(D, 1), lo, hi, dilation, stride, groups, true, D);
  if (!crop) return y;
  crop_stop[0] = y.shape(0);
  crop_stop[D + 1] = y.shape(D + 1);
  return slice(y, crop_start, crop_stop, Shape(D + 2, 1));
}
}  // namespace

array conv3d(const array& input, const array& weight, const std::tuple<int, int, int>& stride,
             const std::tuple<int, int, int>& padding, const std::tuple<int, int, int>& dilation, int groups,
             StreamOrDevice s) {
  OnStream on(s);
  return conv_impl("conv3d", input, weight, triple(stride), triple(padding), triple(padding), triple(dilation),
                   {1, 1, 1}, groups, false, 3);
}

array conv_transpose1d(const array& input, const array& weight, int stride, int padding, int dilation,
                       int output_padding, int groups, StreamOrDevice s) {
  OnStream on(s);
  return conv_transpose_impl("conv_transpose1d", input, weight, {stride}, {padding}, {dilation}, {output_padding},
                             groups);
}

array conv_transpose2d(const array& input, const array& weight, const std::pair<int, int>& stride,
                       const std::pair<int, int>& padding, const std::pair<int, int>& dilation,
                       const std::pair<int, int>& output_padding, int groups, StreamOrDevice s) {
  OnStream on(s);
  return conv_transpose_impl("conv_transpose2d", input, weight, pair2(stride), pair2(padding), pair2(dilation),
                             pair2(output_padding), groups);
}

array conv_transpose3d(const array& input, const array& weight, const std::tuple<int, int, int>& stride,
                       const std::tuple<int, int, int>& padding, const std::tuple<int, int, int>& dilation,
                       const std::tuple<int, int, int>& output_padding, int groups, StreamOrDevice s) {
  OnStream on(s);
  return conv_transpose_impl("conv_transpose3d", input, weight, triple(stride), triple(padding), triple(dilation),
                             triple(output_padding), groups);
}

}  // namespace loom

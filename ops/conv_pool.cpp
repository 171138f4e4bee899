// Max and average pooling over the spatial axes of channels-last arrays, with their gradients.
//
// Five roles of one primitive: the two forward poolings and three linear maps for the gradients.
// Max pooling routes values through the argmax of each window (first maximum in row-major window
// order; a NaN counts as the maximum): `max_scatter` adds a y-shaped array into the argmax positions
// (the vjp) and `max_gather` reads an x-shaped array at them (the jvp). They are adjoint to each other,
// so gradients of any order close over these roles; the argmax itself is piecewise constant in x.
// Average pooling is linear; `avg_scatter` is its adjoint.
#include <algorithm>
#include <cstdint>
#include <limits>
#include <memory>
#include <optional>

#include "loom/core/primitive.h"
#include "loom/core/serialize.h"
#include "loom/ops/batching.h"
#include "loom/ops/conv.h"
#include "loom/kernels/elementwise.h"
#include "loom/ops/ops.h"
#include "loom/ops/utils.h"

namespace loom {

using detail::msg;
using detail::shape_str;

namespace {

enum class PoolRole {
  max,          // (x) -> y
  avg,          // (x) -> y
  max_scatter,  // (x, v: y-shaped) -> x-shaped: v added at each window's argmax
  max_gather,   // (x, u: x-shaped) -> y-shaped: u read at each window's argmax
  avg_scatter,  // (v: y-shaped) -> x-shaped: v / window size added over each window
};

struct PoolParams {
  std::vector<int> kernel, stride, pad;
};

struct PoolGeom {
  int D = 0;
  int64_t N = 0, C = 0, in_sp = 1, out_sp = 1, kt = 1;
  std::vector<int64_t> S, O, K, st, pad, xs;  // xs: element strides of x's spatial axes
  PoolGeom(const Shape& x, const Shape& y, const PoolParams& p) {
    D = static_cast<int>(x.size()) - 2;
    N = x[0];
    C = x.back();
    for (int d = 0; d < D; ++d) {
      S.push_back(x[d + 1]);
      O.push_back(y[d + 1]);
      K.push_back(p.kernel[d]);
      st.push_back(p.stride[d]);
      pad.push_back(p.pad[d]);
      in_sp *= S.back();
      out_sp *= O.back();
      kt *= K.back();
    }
    xs.resize(D);
    for (int64_t d = D - 1, s = C; d >= 0; --d) {
      xs[d] = s;
      s *= S[d];
    }
  }
};

// Walks the in-bounds taps of one window in row-major order; `off` is the tap's element offset
// within its image.
struct Window {
  const PoolGeom& g;
  std::vector<int64_t> lo, hi, k;
  int64_t off = 0;
  explicit Window(const PoolGeom& geom) : g(geom), lo(geom.D), hi(geom.D), k(geom.D) {}
  // Moves to the first tap of flat output position `o`; false when the window has no in-bounds tap.
  bool reset(int64_t o) {
    off = 0;
    for (int d = g.D - 1; d >= 0; --d) {
      int64_t od = o % g.O[d];
      o /= g.O[d];
      int64_t start = od * g.st[d] - g.pad[d];
      lo[d] = std::max<int64_t>(0, -start);
      hi[d] = std::min<int64_t>(g.K[d], g.S[d] - start);
      if (lo[d] >= hi[d]) return false;
      k[d] = lo[d];
      off += (start + lo[d]) * g.xs[d];
    }
    return true;
  }
  bool next() {
    for (int d = g.D - 1; d >= 0; --d) {
      if (++k[d] < hi[d]) {
        off += g.xs[d];
        return true;
      }
      off -= (hi[d] - 1 - lo[d]) * g.xs[d];
      k[d] = lo[d];
    }
    return false;
  }
};

size_t row_threshold(int64_t work_per_row) {
  return static_cast<size_t>(std::max<int64_t>(1, int64_t(kernels::kParallelThreshold) / std::max<int64_t>(work_per_row, 1)));
}

// Per-channel argmax of one window, as the number of its tap (0, 1, ... in the row-major walk of
// the window's in-bounds taps): best[c - c0] / tap[c - c0] for channels [c0, c1), and offsets[t] the
// element offset of tap t within image `xi`. Returns the number of taps, 0 when the window holds
// padding only (possible only for an input with a zero-sized spatial axis). Selects rather than
// branches, and a 32-bit tap number beside a float, so that the channel loop vectorizes.
template <typename T>
int32_t window_argmax(const T* xi, Window& w, int64_t o, int64_t c0, int64_t c1, T* best, int32_t* tap,
                      int64_t* offsets) {
  if (!w.reset(o)) return 0;
  const int64_t n = c1 - c0;
  const T* x0 = xi + w.off + c0;
  for (int64_t c = 0; c < n; ++c) best[c] = x0[c], tap[c] = 0;
  offsets[0] = w.off;
  int32_t t = 0;
  while (w.next()) {
    offsets[++t] = w.off;
    const T* xp = xi + w.off + c0;
    for (int64_t c = 0; c < n; ++c) {
      const T v = xp[c], m = best[c];
      const bool take = !(v <= m) && m == m;  // larger, or the first NaN; ties keep the first
      best[c] = take ? v : m;
      tap[c] = take ? t : tap[c];
    }
  }
  return t + 1;
}

template <typename T>
void pool_forward(const T* x, T* y, const PoolGeom& g, bool is_max) {
  const int64_t rows = g.N * g.out_sp, C = g.C, img = g.in_sp * C;
  const T inv = T(1) / static_cast<T>(g.kt);
  kernels::parallel_for(
      static_cast<size_t>(rows),
      [&](size_t b, size_t e) {
        Window w(g);
        for (size_t r = b; r < e; ++r) {
          const int64_t n = static_cast<int64_t>(r) / g.out_sp, o = static_cast<int64_t>(r) % g.out_sp;
          const T* xi = x + n * img;
          T* yr = y + static_cast<int64_t>(r) * C;
          if (!w.reset(o)) {
            std::fill_n(yr, C, is_max ? -std::numeric_limits<T>::infinity() : T(0));
            continue;
          }
          std::copy_n(xi + w.off, C, yr);
          while (w.next()) {
            const T* xp = xi + w.off;
            if (is_max) {
              for (int64_t c = 0; c < C; ++c) yr[c] = (xp[c] > yr[c] || xp[c] != xp[c]) ? xp[c] : yr[c];
            } else {
              for (int64_t c = 0; c < C; ++c) yr[c] += xp[c];
            }
          }
          if (!is_max) {
            for (int64_t c = 0; c < C; ++c) yr[c] *= inv;
          }
        }
      },
      row_threshold(g.kt * C));
}

// Scatters run over (image, channel block) units: no two units touch the same element of dx.
template <typename Body>
void for_scatter_units(const PoolGeom& g, Body body) {
  const int64_t nt = get_num_threads();
  int64_t blocks = g.N >= 2 * nt ? 1 : std::min<int64_t>(std::max<int64_t>(g.C, 1), (2 * nt + g.N - 1) / std::max<int64_t>(g.N, 1));
  const int64_t width = (g.C + blocks - 1) / std::max<int64_t>(blocks, 1);
  blocks = width == 0 ? 1 : (g.C + width - 1) / width;
  const int64_t units = g.N * blocks;
  kernels::parallel_for(
      static_cast<size_t>(units),
      [&](size_t b, size_t e) {
        for (size_t u = b; u < e; ++u) {
          int64_t n = static_cast<int64_t>(u) / blocks, blk = static_cast<int64_t>(u) % blocks;
          int64_t c0 = blk * width, c1 = std::min(g.C, c0 + width);
          body(n, c0, c1);
        }
      },
      row_threshold(g.out_sp * g.kt * std::max<int64_t>(width, 1)));
}

template <typename T>
void max_scatter(const T* x, const T* v, T* dx, const PoolGeom& g) {
  const int64_t C = g.C, img = g.in_sp * C;
  for_scatter_units(g, [&](int64_t n, int64_t c0, int64_t c1) {
    Window w(g);
    std::vector<T> best(c1 - c0);
    std::vector<int32_t> tap(c1 - c0);
    std::vector<int64_t> offsets(g.kt);
    const T* xi = x + n * img;
    T* di = dx + n * img;
    // The unit's part of dx is zeroed just before its windows add into it, so it is still in cache.
    if (c1 - c0 == C) {
      std::fill_n(di, img, T(0));
    } else {
      for (int64_t q = 0; q < g.in_sp; ++q) std::fill(di + q * C + c0, di + q * C + c1, T(0));
    }
    for (int64_t o = 0; o < g.out_sp; ++o) {
      const int32_t taps = window_argmax(xi, w, o, c0, c1, best.data(), tap.data(), offsets.data());
      const T* vr = v + (n * g.out_sp + o) * C + c0;
      // Tap by tap, each channel adds where its maximum is: contiguous vector adds, no scattered ones.
      for (int32_t t = 0; t < taps; ++t) {
        T* dp = di + offsets[t] + c0;
        for (int64_t c = 0; c < c1 - c0; ++c) dp[c] += tap[c] == t ? vr[c] : T(0);
      }
    }
  });
}

template <typename T>
void max_gather(const T* x, const T* u, T* y, const PoolGeom& g) {
  const int64_t rows = g.N * g.out_sp, C = g.C, img = g.in_sp * C;
  kernels::parallel_for(
      static_cast<size_t>(rows),
      [&](size_t b, size_t e) {
        Window w(g);
        std::vector<T> best(C);
        std::vector<int32_t> tap(C);
        std::vector<int64_t> offsets(g.kt);
        for (size_t r = b; r < e; ++r) {
          const int64_t n = static_cast<int64_t>(r) / g.out_sp, o = static_cast<int64_t>(r) % g.out_sp;
          T* yr = y + static_cast<int64_t>(r) * C;
          std::fill_n(yr, C, T(0));
          const int32_t taps = window_argmax(x + n * img, w, o, 0, C, best.data(), tap.data(), offsets.data());
          const T* ui = u + n * img;
          for (int32_t t = 0; t < taps; ++t) {
            const T* up = ui + offsets[t];
            for (int64_t c = 0; c < C; ++c) yr[c] = tap[c] == t ? up[c] : yr[c];
          }
        }
      },
      row_threshold(g.kt * C));
}

template <typename T>
void avg_scatter(const T* v, T* dx, const PoolGeom& g) {
  const int64_t C = g.C, img = g.in_sp * C;
  const T inv = T(1) / static_cast<T>(g.kt);
  std::fill_n(dx, g.N * img, T(0));
  for_scatter_units(g, [&](int64_t n, int64_t c0, int64_t c1) {
    Window w(g);
    T* di = dx + n * img;
    for (int64_t o = 0; o < g.out_sp; ++o) {
      if (!w.reset(o)) continue;
      const T* vr = v + (n * g.out_sp + o) * C;
      do {
        T* dp = di + w.off;
        for (int64_t c = c0; c < c1; ++c) dp[c] += vr[c] * inv;
      } while (w.next());
    }
  });
}

array make_pool(PoolRole role, const std::vector<array>& inputs, const PoolParams& p, Shape out_shape);

class Pooling : public UnaryPrimitive {
 public:
  Pooling(PoolRole role, PoolParams p, Shape out_shape)
      : role_(role), p_(std::move(p)), out_shape_(std::move(out_shape)) {}
  void save(detail::Writer& w) const override { w.put(role_, p_.kernel, p_.stride, p_.pad, out_shape_); }

  void eval_cpu(const std::vector<array>& in, array& out) override {
    const Dtype ct = out.dtype() == float64 ? float64 : float32;
    std::vector<array> a;
    for (auto& x : in) a.push_back(kernels::row_contiguous(x, ct));
    const bool direct = out.dtype() == ct;
    std::optional<array> tmp;
    if (direct) out.alloc();
    else tmp = array(allocator::malloc(out.size() * ct.size), out.shape(), ct);
    array& res = direct ? out : *tmp;
    const Shape& xs = role_ == PoolRole::avg_scatter ? out.shape() : a[0].shape();
    const Shape& ys = role_ == PoolRole::max_scatter  ? a[1].shape()
                      : role_ == PoolRole::avg_scatter ? a[0].shape()
                                                       : out.shape();
    PoolGeom g(xs, ys, p_);
    if (out.size() > 0) {
      auto run = [&](auto tag) {
        using T = decltype(tag);
        T* o = kernels::ptr<T>(res);
        switch (role_) {
          case PoolRole::max:
            pool_forward<T>(kernels::ptr<T>(a[0]), o, g, true);
            break;
          case PoolRole::avg:
            pool_forward<T>(kernels::ptr<T>(a[0]), o, g, false);
            break;
          case PoolRole::max_scatter:
            max_scatter<T>(kernels::ptr<T>(a[0]), kernels::ptr<T>(a[1]), o, g);
            break;
          case PoolRole::max_gather:
            max_gather<T>(kernels::ptr<T>(a[0]), kernels::ptr<T>(a[1]), o, g);
            break;
          case PoolRole::avg_scatter:
            avg_scatter<T>(kernels::ptr<T>(a[0]), o, g);
            break;
        }
      };
      if (ct == float64) run(double{});
      else run(float{});
    }
    if (!direct) {
      out.alloc();
      kernels::copy_strided(res, out.raw_data(), out.dtype(), out.strides());
    }
  }

  // A shapeless call: y follows x's batch and spatial sizes; a role whose output is x-shaped keeps
  // the traced spatial sizes (y does not determine them) with the call's batch, checked against y.
  std::vector<Shape> output_shapes(const std::vector<Shape>& in) const override {
    auto pooled = [&](const Shape& x) {
      Shape y{x[0]};
      for (size_t d = 0; d < p_.kernel.size(); ++d) {
        const int64_t padded = int64_t(x[d + 1]) + 2 * p_.pad[d];
        if (padded < p_.kernel[d]) {
          throw std::invalid_argument(msg("[compile] Pooling of kernel ", shape_str(p_.kernel),
                                          " cannot take an input of shape ", shape_str(x)));
        }
        y.push_back(static_cast<int>((padded - p_.kernel[d]) / p_.stride[d] + 1));
      }
      y.push_back(x.back());
      return y;
    };
    const Shape* y_in = role_ == PoolRole::max_scatter ? &in.at(1) : role_ == PoolRole::avg_scatter ? &in.at(0) : nullptr;
    if (!y_in) {  // max, avg, max_gather: y-shaped, from x
      if (role_ == PoolRole::max_gather && in.at(1) != in[0]) {
        throw std::invalid_argument(msg("[compile] Pooling cannot take inputs of shapes ", shape_str(in[0]), " and ",
                                        shape_str(in[1])));
      }
      return {pooled(in.at(0))};
    }
    Shape x = role_ == PoolRole::max_scatter ? in[0] : out_shape_;
    x[0] = (*y_in)[0];
    if (pooled(x) != *y_in) {
      throw std::invalid_argument(msg("[compile] Pooling (gradient) cannot take inputs of shapes ", shape_str(in[0]),
                                      in.size() > 1 ? " and " + shape_str(in[1]) : std::string(), " (traced output ",
                                      shape_str(out_shape_), ")"));
    }
    return {x};
  }

  std::vector<array> vjp(const std::vector<array>& p, const std::vector<array>& cot, const std::vector<int>& argnums,
                         const std::vector<array>&) override {
    const array& c = cot[0];
    std::vector<array> out;
    for (int arg : argnums) {
      switch (role_) {
        case PoolRole::max:
          out.push_back(make_pool(PoolRole::max_scatter, {p[0], c}, p_, p[0].shape()));
          break;
        case PoolRole::avg:
          out.push_back(make_pool(PoolRole::avg_scatter, {c}, p_, p[0].shape()));
          break;
        case PoolRole::max_scatter:
          out.push_back(arg == 0 ? zeros_like(p[0]) : make_pool(PoolRole::max_gather, {p[0], c}, p_, p[1].shape()));
          break;
        case PoolRole::max_gather:
          out.push_back(arg == 0 ? zeros_like(p[0]) : make_pool(PoolRole::max_scatter, {p[0], c}, p_, p[1].shape()));
          break;
        case PoolRole::avg_scatter:
          out.push_back(make_pool(PoolRole::avg, {c}, p_, p[0].shape()));
          break;
      }
    }
    return out;
  }

  std::vector<array> jvp(const std::vector<array>& p, const std::vector<array>& t,
                         const std::vector<int>& argnums) override {
    std::optional<array> acc;
    for (size_t i = 0; i < argnums.size(); ++i) {
      std::optional<array> term;
      switch (role_) {
        case PoolRole::max:
          term = make_pool(PoolRole::max_gather, {p[0], t[i]}, p_, out_shape_);
          break;
        case PoolRole::avg:
        case PoolRole::avg_scatter:
          term = make_pool(role_, {t[i]}, p_, out_shape_);
          break;
        case PoolRole::max_scatter:
        case PoolRole::max_gather:
          if (argnums[i] == 1) term = make_pool(role_, {p[0], t[i]}, p_, out_shape_);
          break;  // the argmax does not move under a small change of x
      }
      if (term) acc = acc ? add(*acc, *term) : *term;
    }
    if (!acc) acc = zeros(out_shape_, p.back().dtype());
    return {*acc};
  }

  // Every role treats the images along axis 0 alike and apart: the batch joins them.
  std::pair<std::vector<array>, std::vector<int>> vmap(const std::vector<array>& in, const std::vector<int>& axes,
                                                       const std::vector<array>& outs) override {
    const int size = detail::vmap_size(in, axes);
    std::vector<array> x;
    for (const array& a : detail::all_batch_first(in, axes)) x.push_back(flatten(a, 0, 1));
    Shape shape = outs[0].shape();
    shape[0] *= size;
    array y(shape, outs[0].dtype(), std::make_shared<Pooling>(role_, p_, shape), std::move(x));
    return {{reshape(y, detail::insert_axis(outs[0].shape(), 0, size))}, {0}};
  }
  const char* name() const override { return "Pooling"; }
  void print(std::ostream& os) const override {
    static const char* roles[] = {"max", "avg", "max_scatter", "max_gather", "avg_scatter"};
    os << "Pooling(" << roles[static_cast<int>(role_)] << ")";
  }

 private:
  PoolRole role_;
  PoolParams p_;
  Shape out_shape_;
};
const bool kPoolingLoads = detail::register_primitive("Pooling", [](detail::Reader& r) -> std::shared_ptr<Primitive> {
  PoolRole role;
  PoolParams p;
  Shape out_shape;
  r.get(role, p.kernel, p.stride, p.pad, out_shape);
  if (role < PoolRole::max || role > PoolRole::avg_scatter) r.fail("not a pooling role");
  return std::make_shared<Pooling>(role, std::move(p), std::move(out_shape));
});

array make_pool(PoolRole role, const std::vector<array>& inputs, const PoolParams& p, Shape out_shape) {
  Dtype d = inputs[0].dtype();
  for (auto& x : inputs) d = promote_types(d, x.dtype());
  detail::reject_complex(d, "pool");
  if (!is_floating_point(d)) d = float32;
  std::vector<array> ins;
  for (auto& x : inputs) ins.push_back(astype(x, d));
  auto prim = std::make_shared<Pooling>(role, p, out_shape);
  return array(std::move(out_shape), d, std::move(prim), std::move(ins));
}

std::vector<int> expand(const std::vector<int>& v, int D, const std::vector<int>& def, const char* what,
                        const char* op) {
  if (v.empty()) return def;
  if (v.size() == 1) return std::vector<int>(D, v[0]);
  if (static_cast<int>(v.size()) != D) {
    throw std::invalid_argument(msg("[", op, "] ", what, " has ", v.size(), " entries but the input has ", D,
                                    " spatial dimensions"));
  }
  return v;
}

array pool_impl(const char* op, PoolRole role, const array& x, const std::vector<int>& kernel,
                const std::vector<int>& stride, const std::vector<int>& padding, int want_spatial) {
  const int nd = static_cast<int>(x.ndim());
  const std::string xs = shape_str(x.shape());
  if (want_spatial > 0 && nd != want_spatial + 2) {
    throw std::invalid_argument(msg("[", op, "] input must have ", want_spatial + 2, " dimensions (N, ",
                                    want_spatial == 1 ? "L" : "H, W", ", C); got shape ", xs));
  }
  if (nd < 3) {
    throw std::invalid_argument(msg("[", op, "] input must have at least 3 dimensions (N, spatial..., C); got shape ", xs));
  }
  if (!is_floating_point(x.dtype())) {
    throw std::invalid_argument(msg("[", op, "] needs a floating-point input; got ", x.dtype()));
  }
  const int D = nd - 2;
  if (kernel.empty()) throw std::invalid_argument(msg("[", op, "] kernel_size is empty"));
  PoolParams p;
  p.kernel = expand(kernel, D, {}, "kernel_size", op);
  p.stride = expand(stride, D, p.kernel, "stride", op);
  p.pad = expand(padding, D, std::vector<int>(D, 0), "padding", op);
  Shape out{x.shape(0)};
  for (int d = 0; d < D; ++d) {
    const int K = p.kernel[d], s = p.stride[d], pd = p.pad[d], S = x.shape(d + 1);
    if (K < 1) throw std::invalid_argument(msg("[", op, "] kernel_size must be positive; got ", shape_str(p.kernel)));
    if (s < 1) throw std::invalid_argument(msg("[", op, "] stride must be positive; got ", shape_str(p.stride)));
    if (pd < 0) throw std::invalid_argument(msg("[", op, "] padding must be non-negative; got ", shape_str(p.pad)));
    if (2 * pd > K) {
      throw std::invalid_argument(msg("[", op, "] padding ", shape_str(p.pad), " must be at most half of kernel_size ",
                                      shape_str(p.kernel)));
    }
    if (S + 2 * pd < K) {
      throw std::invalid_argument(msg("[", op, "] kernel_size ", shape_str(p.kernel), " is larger than the padded input (",
                                      "input ", xs, ", padding ", shape_str(p.pad), ")"));
    }
    out.push_back((S + 2 * pd - K) / s + 1);
  }
  out.push_back(x.shape(-1));
  return make_pool(role, {x}, p, std::move(out));
}

}  // namespace

array max_pool(const array& input, const std::vector<int>& kernel_size, const std::vector<int>& stride,
               const std::vector<int>& padding, StreamOrDevice s) {
  OnStream on(s);
  return pool_impl("max_pool", PoolRole::max, input, kernel_size, stride, padding, 0);
}
array avg_pool(const array& input, const std::vector<int>& kernel_size, const std::vector<int>& stride,
               const std::vector<int>& padding, StreamOrDevice s) {
  OnStream on(s);
  return pool_impl("avg_pool", PoolRole::avg, input, kernel_size, stride, padding, 0);
}

array max_pool1d(const array& input, int kernel_size, std::optional<int> stride, int padding, StreamOrDevice s) {
  OnStream on(s);
  return pool_impl("max_pool1d", PoolRole::max, input, {kernel_size}, {stride.value_or(kernel_size)}, {padding}, 1);
}
array avg_pool1d(const array& input, int kernel_size, std::optional<int> stride, int padding, StreamOrDevice s) {
  OnStream on(s);
  return pool_impl("avg_pool1d", PoolRole::avg, input, {kernel_size}, {stride.value_or(kernel_size)}, {padding}, 1);
}

array max_pool2d(const array& input, const std::pair<int, int>& kernel_size, StreamOrDevice s) {
  OnStream on(s);
  return max_pool2d(input, kernel_size, kernel_size);
}
array max_pool2d(const array& input, const std::pair<int, int>& kernel_size, const std::pair<int, int>& stride,
                 const std::pair<int, int>& padding, StreamOrDevice s) {
  OnStream on(s);
  return pool_impl("max_pool2d", PoolRole::max, input, {kernel_size.first, kernel_size.second},
                   {stride.first, stride.second}, {padding.first, padding.second}, 2);
}
array avg_pool2d(const array& input, const std::pair<int, int>& kernel_size, StreamOrDevice s) {
  OnStream on(s);
  return avg_pool2d(input, kernel_size, kernel_size);
}
array avg_pool2d(const array& input, const std::pair<int, int>& kernel_size, const std::pair<int, int>& stride,
                 const std::pair<int, int>& padding, StreamOrDevice s) {
  OnStream on(s);
  return pool_impl("avg_pool2d", PoolRole::avg, input, {kernel_size.first, kernel_size.second},
                   {stride.first, stride.second}, {padding.first, padding.second}, 2);
}

}  // namespace loom

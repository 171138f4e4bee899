// fft: the op functions of ops/fft.h and their one primitive, FFT (a complex, real-to-complex or
// complex-to-real transform over a list of axes, with its normalization), whose kernel is
// ops/fft_kernel.cpp.
//
// Derivatives, as MLX's: the transforms are linear, so the jvp is the same transform of the tangent;
// the vjp is the adjoint, the transform the other way with the adjoint normalization (Backward and
// Forward trade places, Ortho is its own). The real transforms count the frequencies k and n - k as
// one: rfft's adjoint halves the cotangent of every frequency but 0 and n / 2 before an irfft, and
// irfft's doubles them after an rfft. Where MLX multiplies by n after an inverse transform (the vjp
// of fft and rfft with the default norm) Loom does the same, which gives MLX's values to the bit.
#include "loom/ops/fft.h"

#include <cmath>
#include <memory>
#include <numeric>
#include <ostream>
#include <string>
#include <vector>

#include "loom/core/primitive.h"
#include "loom/core/serialize.h"
#include "loom/ops/batching.h"
#include "loom/kernels/fft.h"
#include "loom/ops/ops.h"
#include "loom/ops/utils.h"

namespace loom::fft {

using detail::msg;
using detail::shape_str;

namespace {

namespace k = loom::kernels::fft;

std::string axes_str(const std::vector<int>& axes) {
  std::string s = "[";
  for (size_t i = 0; i < axes.size(); ++i) s += (i ? ", " : "") + std::to_string(axes[i]);
  return s + "]";
}

const char* norm_name(FFTNorm norm) {
  switch (norm) {
    case FFTNorm::Backward:
      return "backward";
    case FFTNorm::Ortho:
      return "ortho";
    case FFTNorm::Forward:
      return "forward";
  }
  return "?";
}

// The normalization of the adjoint transform.
FFTNorm adjoint_norm(FFTNorm norm) {
  return norm == FFTNorm::Backward ? FFTNorm::Forward : norm == FFTNorm::Forward ? FFTNorm::Backward : FFTNorm::Ortho;
}

// The factor a transform over `elements` points multiplies its sum by.
double scale_factor(FFTNorm norm, bool inverse, double elements) {
  switch (norm) {
    case FFTNorm::Backward:
      return inverse ? 1.0 / elements : 1.0;
    case FFTNorm::Ortho:
      return 1.0 / std::sqrt(elements);
    case FFTNorm::Forward:
      return inverse ? 1.0 : 1.0 / elements;
  }
  return 1.0;
}

// A transform over `axes` (non-negative, distinct; for a real transform the last one is the real
// axis). Input: complex64 (c2c, c2r) or float32 (r2c), with n (c2c, r2c) or n / 2 + 1 (c2r) values
// along each axis; output complex64 (c2c, r2c, n / 2 + 1 along the real axis) or float32 (c2r).
// `odd_last` (c2r): the output's real axis has 2 (m - 1) + 1 values rather than 2 (m - 1).
class FFT : public UnaryPrimitive {
 public:
  FFT(std::vector<int> axes, bool inverse, bool real, FFTNorm norm, bool odd_last)
      : axes_(std::move(axes)), inverse_(inverse), real_(real), norm_(norm), odd_last_(real && inverse && odd_last) {}

  void save(detail::Writer& w) const override { w.put(axes_, inverse_, real_, norm_, odd_last_); }

  void eval_cpu(const std::vector<array>& in, array& out) override {
    const array& x = in[0];
    out.alloc();
    if (out.size() == 0) return;
    const int last = axes_.back();
    double elements = 1;
    for (int ax : axes_) elements *= (real_ && inverse_ ? out.shape(ax) : x.shape(ax));
    const float scale = static_cast<float>(scale_factor(norm_, inverse_, elements));
    const int steps = static_cast<int>(axes_.size());
    if (!real_) {
      // Last axis first; the first step reads the input, the others work in place on the output.
      for (int i = steps - 1; i >= 0; --i) {
        const bool first = i == steps - 1;
        k::transform_axis(k::Kind::c2c, inverse_, x.shape(axes_[i]), axes_[i], out.shape(),
                          first ? x.raw_data() : out.raw_data(), first ? x.strides() : out.strides(), out.raw_data(),
                          out.strides(), i == 0 ? scale : 1.0f);
      }
      return;
    }
    if (!inverse_) {
      k::transform_axis(k::Kind::r2c, false, x.shape(last), last, out.shape(), x.raw_data(), x.strides(),
                        out.raw_data(), out.strides(), steps == 1 ? scale : 1.0f);
      for (int i = steps - 2; i >= 0; --i) {
        k::transform_axis(k::Kind::c2c, false, out.shape(axes_[i]), axes_[i], out.shape(), out.raw_data(),
                          out.strides(), out.raw_data(), out.strides(), i == 0 ? scale : 1.0f);
      }
      return;
    }
    // c2r: the complex axes first, into a buffer of the input's shape, then the real axis.
    const void* src = x.raw_data();
    Strides src_strides = x.strides();
    std::unique_ptr<float[]> tmp;
    if (steps > 1) {
      tmp.reset(new float[2 * x.size()]);
      Strides row(x.ndim(), 1);
      for (int d = static_cast<int>(x.ndim()) - 2; d >= 0; --d) row[d] = row[d + 1] * x.shape(d + 1);
      for (int i = steps - 2; i >= 0; --i) {
        const bool first = i == steps - 2;
        k::transform_axis(k::Kind::c2c, true, x.shape(axes_[i]), axes_[i], x.shape(), first ? x.raw_data() : tmp.get(),
                          first ? x.strides() : row, tmp.get(), row, 1.0f);
      }
      src = tmp.get();
      src_strides = row;
    }
    k::transform_axis(k::Kind::c2r, true, out.shape(last), last, out.shape(), src, src_strides, out.raw_data(),
                      out.strides(), scale);
  }

  // The transforms read each line whole before writing it: a complex transform can take its input's buffer.
  uint64_t donors(const std::vector<array>& in, int) const override {
    return real_ ? 0 : row_contiguous_donors(in, {0});
  }

  std::vector<array> vjp(const std::vector<array>& primals, const std::vector<array>& cotangents,
                         const std::vector<int>&, const std::vector<array>&) override {
    const array& x = primals[0];
    const array& c = cotangents[0];
    const int last = axes_.back();
    float elements = 1;
    for (int ax : axes_) elements *= static_cast<float>(inverse_ ? c.shape(ax) : x.shape(ax));
    const FFTNorm adj = adjoint_norm(norm_);
    if (!real_) {
      if (!inverse_ && norm_ == FFTNorm::Backward) return {multiply(ifftn(c, axes_), array(elements))};
      return {inverse_ ? fftn(c, axes_, adj) : ifftn(c, axes_, adj)};
    }
    if (!inverse_) {
      // rfft: the frequencies k and n - k both came from each input; irfft counts them twice.
      Shape n;
      for (int ax : axes_) n.push_back(x.shape(ax));
      const array g = irfftn(multiply(c, edge_mask(c.shape(last), x.shape(last) % 2 == 0, 0.5f, x.ndim())), n, axes_,
                             norm_ == FFTNorm::Backward ? FFTNorm::Backward : adj);
      return {norm_ == FFTNorm::Backward ? multiply(g, array(elements)) : g};
    }
    // irfft: each frequency but 0 (and n / 2 for even n) stands for two.
    return {multiply(rfftn(c, axes_, adj), edge_mask(x.shape(last), c.shape(last) % 2 == 0, 2.0f, x.ndim()))};
  }

  std::vector<array> jvp(const std::vector<array>& primals, const std::vector<array>& tangents,
                         const std::vector<int>&) override {
    const array t = astype(tangents[0], primals[0].dtype());
    return {array(output_shapes({primals[0].shape()})[0], out_dtype(), same(), {t})};
  }

  // Every line of the batch is one more line: the transformed axes move past the batch axis.
  std::pair<std::vector<array>, std::vector<int>> vmap(const std::vector<array>& in, const std::vector<int>& axes,
                                                       const std::vector<array>& outs) override {
    const int b = axes[0];
    if (b < 0) return {{array(outs[0].shape(), out_dtype(), same(), {in[0]})}, {-1}};
    std::vector<int> moved;
    for (int ax : axes_) moved.push_back(detail::batched_axis(ax, b));
    auto p = std::make_shared<FFT>(moved, inverse_, real_, norm_, odd_last_);
    return {{array(detail::insert_axis(outs[0].shape(), b, in[0].shape(b)), out_dtype(), p, {in[0]})}, {b}};
  }

  std::vector<Shape> output_shapes(const std::vector<Shape>& in) const override {
    Shape s = in.at(0);
    for (int ax : axes_) {
      if (ax >= static_cast<int>(s.size())) {
        throw std::invalid_argument(
            msg("[compile] ", kind(), " over axes ", axes_str(axes_), " cannot take an input of shape ", shape_str(s)));
      }
    }
    int& len = s[axes_.back()];
    if (real_ && !inverse_) len = len / 2 + 1;
    if (real_ && inverse_) {
      len = 2 * (len - 1) + (odd_last_ ? 1 : 0);
      if (len <= 0) {
        throw std::invalid_argument(msg("[compile] ", kind(), " over axes ", axes_str(axes_),
                                        " cannot take an input of shape ", shape_str(in.at(0))));
      }
    }
    return {s};
  }

  // 5 n log2(n) per complex line of n (2.5 for a real one), the usual count.
  double flops(const std::vector<array>& in, const std::vector<array>& out) const override {
    const array& big = real_ && inverse_ ? out[0] : in[0];  // the shape with the full lengths
    double total = 0;
    for (size_t i = 0; i < axes_.size(); ++i) {
      const double n = big.shape(axes_[i]);
      if (n <= 1) continue;
      const bool real_axis = real_ && i + 1 == axes_.size();
      total += (real_axis ? 2.5 : 5.0) * double(big.size()) * std::log2(n);
    }
    return total;
  }

  bool is_equivalent(const Primitive& other) const override {
    const FFT* o = detail::same_primitive(this, other);
    return o && o->axes_ == axes_ && o->inverse_ == inverse_ && o->real_ == real_ && o->norm_ == norm_ &&
           o->odd_last_ == odd_last_;
  }
  bool supports_complex() const override { return true; }
  const char* name() const override { return "FFT"; }
  void print(std::ostream& os) const override {
    os << "FFT(" << kind() << ", axes=" << axes_str(axes_) << ", norm=" << norm_name(norm_) << ")";
  }

 private:
  const char* kind() const { return real_ ? (inverse_ ? "irfft" : "rfft") : (inverse_ ? "ifft" : "fft"); }
  Dtype out_dtype() const { return real_ && inverse_ ? float32 : complex64; }
  std::shared_ptr<FFT> same() const { return std::make_shared<FFT>(axes_, inverse_, real_, norm_, odd_last_); }
  // 1 at index 0 of the real axis and (when `even`) at its last index m - 1, `value` elsewhere, in the
  // shape (1, ..., m, ..., 1) of an `ndim`-d array whose real axis has m values.
  array edge_mask(int m, bool even, float value, size_t ndim) const {
    std::vector<float> v(m, value);
    v[0] = 1.0f;
    if (even) v[m - 1] = 1.0f;
    Shape shape(ndim, 1);
    shape[axes_.back()] = m;
    return array(v, shape);
  }

  std::vector<int> axes_;
  bool inverse_, real_;
  FFTNorm norm_;
  bool odd_last_;
};
const bool kFFTLoads = detail::register_primitive("FFT", [](detail::Reader& r) -> std::shared_ptr<Primitive> {
  std::vector<int> axes;
  bool inverse, real, odd_last;
  FFTNorm norm;
  r.get(axes, inverse, real, norm, odd_last);
  return std::make_shared<FFT>(std::move(axes), inverse, real, norm, odd_last);
});

// The op functions: numpy's checks, then crop / pad to the transform's input shape, cast, one node.
array fft_impl(const char* op, const array& a, Shape n, const std::vector<int>& axes, bool real, bool inverse,
               FFTNorm norm) {
  if (norm != FFTNorm::Backward && norm != FFTNorm::Ortho && norm != FFTNorm::Forward) {
    throw std::invalid_argument(msg("[", op, "] invalid normalization ", static_cast<int>(norm)));
  }
  const int ndim = static_cast<int>(a.ndim());
  if (ndim < 1) {
    throw std::invalid_argument(msg("[", op, "] needs an array of at least one dimension; got a 0-d array"));
  }
  if (n.size() != axes.size()) {
    throw std::invalid_argument(
        msg("[", op, "] got ", n.size(), " lengths ", shape_str(n), " for ", axes.size(), " axes ", axes_str(axes)));
  }
  if (axes.empty()) return a;
  std::vector<int> ax;
  for (int axis : axes) ax.push_back(detail::normalize_axis(axis, ndim, op));
  for (size_t i = 0; i < ax.size(); ++i) {
    for (size_t j = 0; j < i; ++j) {
      if (ax[i] == ax[j]) {
        throw std::invalid_argument(msg("[", op, "] axes ", axes_str(axes), " name axis ", ax[i], " twice"));
      }
    }
  }
  for (int v : n) {
    if (v <= 0) {
      throw std::invalid_argument(
          msg("[", op, "] transform lengths must be positive; got ", shape_str(n), " for axes ", axes_str(axes)));
    }
  }
  if (real && !inverse && is_complex(a.dtype())) {
    throw std::invalid_argument(msg("[", op,
                                    "] takes a real input; got complex64 (rfft of complex values would "
                                    "drop their imaginary parts: use fft)"));
  }
  Shape in_shape = a.shape();
  for (size_t i = 0; i < ax.size(); ++i) in_shape[ax[i]] = n[i];
  if (real && inverse) in_shape[ax.back()] = n.back() / 2 + 1;
  array in = a;
  Shape stop = a.shape();
  bool crop = false, grow = false;
  for (int d = 0; d < ndim; ++d) {
    crop |= in_shape[d] < stop[d];
    grow |= in_shape[d] > stop[d];
    stop[d] = std::min(stop[d], in_shape[d]);
  }
  if (crop) in = slice(in, Shape(ndim, 0), stop);
  if (grow) {
    std::vector<int> all(ndim);
    std::iota(all.begin(), all.end(), 0);
    Shape low(ndim, 0), high(ndim, 0);
    for (int d = 0; d < ndim; ++d) high[d] = in_shape[d] - stop[d];
    in = pad(in, all, low, high);
  }
  Shape out_shape = in_shape;
  if (real) out_shape[ax.back()] = inverse ? n.back() : n.back() / 2 + 1;
  const Dtype in_type = real && !inverse ? float32 : complex64;
  const Dtype out_type = real && inverse ? float32 : complex64;
  return array(out_shape, out_type, std::make_shared<FFT>(ax, inverse, real, norm, n.back() % 2 == 1),
               {astype(in, in_type)});
}

// The lengths of `axes` as they are (irfft: 2 (m - 1) for the last).
array fft_impl(const char* op, const array& a, const std::vector<int>& axes, bool real, bool inverse, FFTNorm norm) {
  if (a.ndim() < 1) {
    throw std::invalid_argument(msg("[", op, "] needs an array of at least one dimension; got a 0-d array"));
  }
  Shape n;
  for (int axis : axes) n.push_back(a.shape(detail::normalize_axis(axis, static_cast<int>(a.ndim()), op)));
  if (real && inverse && !n.empty()) n.back() = 2 * (n.back() - 1);
  return fft_impl(op, a, n, axes, real, inverse, norm);
}

std::vector<int> all_axes(const array& a) {
  std::vector<int> axes(a.ndim());
  std::iota(axes.begin(), axes.end(), 0);
  return axes;
}

array shift_impl(const char* op, const array& a, const std::vector<int>& axes, bool inverse) {
  if (axes.empty()) return a;
  Shape shifts;
  for (int axis : axes) {
    const int d = a.shape(detail::normalize_axis(axis, static_cast<int>(a.ndim()), op)) / 2;
    shifts.push_back(inverse ? -d : d);
  }
  return roll(a, shifts, axes);
}

}  // namespace

array fftn(const array& a, const Shape& n, const std::vector<int>& axes, FFTNorm norm, StreamOrDevice s) {
  OnStream on(s);
  return fft_impl("fft::fftn", a, n, axes, false, false, norm);
}
array fftn(const array& a, const std::vector<int>& axes, FFTNorm norm, StreamOrDevice s) {
  OnStream on(s);
  return fft_impl("fft::fftn", a, axes, false, false, norm);
}
array fftn(const array& a, FFTNorm norm, StreamOrDevice s) {
  OnStream on(s);
  return fft_impl("fft::fftn", a, all_axes(a), false, false, norm);
}

array ifftn(const array& a, const Shape& n, const std::vector<int>& axes, FFTNorm norm, StreamOrDevice s) {
  OnStream on(s);
  return fft_impl("fft::ifftn", a, n, axes, false, true, norm);
}
array ifftn(const array& a, const std::vector<int>& axes, FFTNorm norm, StreamOrDevice s) {
  OnStream on(s);
  return fft_impl("fft::ifftn", a, axes, false, true, norm);
}
array ifftn(const array& a, FFTNorm norm, StreamOrDevice s) {
  OnStream on(s);
  return fft_impl("fft::ifftn", a, all_axes(a), false, true, norm);
}

array fft(const array& a, int n, int axis, FFTNorm norm, StreamOrDevice s) {
  OnStream on(s);
  return fft_impl("fft::fft", a, {n}, {axis}, false, false, norm);
}
array fft(const array& a, int axis, FFTNorm norm, StreamOrDevice s) {
  OnStream on(s);
  return fft_impl("fft::fft", a, {axis}, false, false, norm);
}
array ifft(const array& a, int n, int axis, FFTNorm norm, StreamOrDevice s) {
  OnStream on(s);
  return fft_impl("fft::ifft", a, {n}, {axis}, false, true, norm);
}
array ifft(const array& a, int axis, FFTNorm norm, StreamOrDevice s) {
  OnStream on(s);
  return fft_impl("fft::ifft", a, {axis}, false, true, norm);
}

array fft2(const array& a, const Shape& n, const std::vector<int>& axes, FFTNorm norm, StreamOrDevice s) {
  OnStream on(s);
  return fft_impl("fft::fft2", a, n, axes, false, false, norm);
}
array fft2(const array& a, const std::vector<int>& axes, FFTNorm norm, StreamOrDevice s) {
  OnStream on(s);
  return fft_impl("fft::fft2", a, axes, false, false, norm);
}
array ifft2(const array& a, const Shape& n, const std::vector<int>& axes, FFTNorm norm, StreamOrDevice s) {
  OnStream on(s);
  return fft_impl("fft::ifft2", a, n, axes, false, true, norm);
}
array ifft2(const array& a, const std::vector<int>& axes, FFTNorm norm, StreamOrDevice s) {
  OnStream on(s);
  return fft_impl("fft::ifft2", a, axes, false, true, norm);
}

array rfftn(const array& a, const Shape& n, const std::vector<int>& axes, FFTNorm norm, StreamOrDevice s) {
  OnStream on(s);
  return fft_impl("fft::rfftn", a, n, axes, true, false, norm);
}
array rfftn(const array& a, const std::vector<int>& axes, FFTNorm norm, StreamOrDevice s) {
  OnStream on(s);
  return fft_impl("fft::rfftn", a, axes, true, false, norm);
}
array rfftn(const array& a, FFTNorm norm, StreamOrDevice s) {
  OnStream on(s);
  return fft_impl("fft::rfftn", a, all_axes(a), true, false, norm);
}

array irfftn(const array& a, const Shape& n, const std::vector<int>& axes, FFTNorm norm, StreamOrDevice s) {
  OnStream on(s);
  return fft_impl("fft::irfftn", a, n, axes, true, true, norm);
}
array irfftn(const array& a, const std::vector<int>& axes, FFTNorm norm, StreamOrDevice s) {
  OnStream on(s);
  return fft_impl("fft::irfftn", a, axes, true, true, norm);
}
array irfftn(const array& a, FFTNorm norm, StreamOrDevice s) {
  OnStream on(s);
  return fft_impl("fft::irfftn", a, all_axes(a), true, true, norm);
}

array rfft(const array& a, int n, int axis, FFTNorm norm, StreamOrDevice s) {
  OnStream on(s);
  return fft_impl("fft::rfft", a, {n}, {axis}, true, false, norm);
}
array rfft(const array& a, int axis, FFTNorm norm, StreamOrDevice s) {
  OnStream on(s);
  return fft_impl("fft::rfft", a, {axis}, true, false, norm);
}
array irfft(const array& a, int n, int axis, FFTNorm norm, StreamOrDevice s) {
  OnStream on(s);
  return fft_impl("fft::irfft", a, {n}, {axis}, true, true, norm);
}
array irfft(const array& a, int axis, FFTNorm norm, StreamOrDevice s) {
  OnStream on(s);
  return fft_impl("fft::irfft", a, {axis}, true, true, norm);
}

array rfft2(const array& a, const Shape& n, const std::vector<int>& axes, FFTNorm norm, StreamOrDevice s) {
  OnStream on(s);
  return fft_impl("fft::rfft2", a, n, axes, true, false, norm);
}
array rfft2(const array& a, const std::vector<int>& axes, FFTNorm norm, StreamOrDevice s) {
  OnStream on(s);
  return fft_impl("fft::rfft2", a, axes, true, false, norm);
}
array irfft2(const array& a, const Shape& n, const std::vector<int>& axes, FFTNorm norm, StreamOrDevice s) {
  OnStream on(s);
  return fft_impl("fft::irfft2", a, n, axes, true, true, norm);
}
array irfft2(const array& a, const std::vector<int>& axes, FFTNorm norm, StreamOrDevice s) {
  OnStream on(s);
  return fft_impl("fft::irfft2", a, axes, true, true, norm);
}

array fftfreq(int n, double d, StreamOrDevice s) {
  OnStream on(s);
  if (n <= 0) throw std::invalid_argument(msg("[fft::fftfreq] n must be positive; got ", n));
  if (d == 0.0) throw std::invalid_argument("[fft::fftfreq] the sample spacing d must not be 0");
  const array f = concatenate({arange(0, (n + 1) / 2, float32), arange(-(n / 2), 0, float32)}, 0);
  return multiply(f, array(static_cast<float>(1.0 / (double(n) * d))));
}

array rfftfreq(int n, double d, StreamOrDevice s) {
  OnStream on(s);
  if (n <= 0) throw std::invalid_argument(msg("[fft::rfftfreq] n must be positive; got ", n));
  if (d == 0.0) throw std::invalid_argument("[fft::rfftfreq] the sample spacing d must not be 0");
  return multiply(arange(0, n / 2 + 1, float32), array(static_cast<float>(1.0 / (double(n) * d))));
}

array fftshift(const array& a, StreamOrDevice s) {
  OnStream on(s);
  return shift_impl("fft::fftshift", a, all_axes(a), false);
}
array fftshift(const array& a, const std::vector<int>& axes, StreamOrDevice s) {
  OnStream on(s);
  return shift_impl("fft::fftshift", a, axes, false);
}
array ifftshift(const array& a, StreamOrDevice s) {
  OnStream on(s);
  return shift_impl("fft::ifftshift", a, all_axes(a), true);
}
array ifftshift(const array& a, const std::vector<int>& axes, StreamOrDevice s) {
  OnStream on(s);
  return shift_impl("fft::ifftshift", a, axes, true);
}

}  // namespace loom::fft

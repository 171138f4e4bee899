// linalg's functions that are compositions of other ops (ops/linalg.h): norms, pinv, cholesky_inv,
// cross, det and slogdet. Their derivatives are those of the ops they are made of.
#include <cmath>
#include <limits>
#include <numeric>

#include "loom/ops/linalg.h"
#include "loom/ops/ops.h"
#include "loom/ops/utils.h"

namespace loom::linalg {

std::pair<array, array> slogdet_lu(const array& a);  // ops/lapack.cpp
array det_lu(const array& a);

using detail::msg;
using detail::shape_str;

namespace {

Dtype at_least_float(Dtype d) { return is_floating_point(d) || d == complex64 ? d : promote_types(d, float32); }
Dtype real_of(Dtype d) { return d == complex64 ? float32 : d; }

std::string axes_str(const std::vector<int>& ax) {
  std::string s = "(";
  for (size_t i = 0; i < ax.size(); ++i) s += (i ? ", " : "") + std::to_string(ax[i]);
  return s + ")";
}

// The axes a norm reduces, normalized; two must differ.
std::vector<int> norm_axes(const array& a, const std::vector<int>& axis) {
  std::vector<int> out;
  for (int ax : axis) out.push_back(detail::normalize_axis(ax, static_cast<int>(a.ndim()), "linalg::norm"));
  if (out.size() > 2) {
    throw std::invalid_argument(msg("[linalg::norm] takes one axis (a vector norm) or two (a matrix norm); got ",
                                    axes_str(axis)));
  }
  if (out.size() == 2 && out[0] == out[1]) {
    throw std::invalid_argument(msg("[linalg::norm] a matrix norm needs two different axes; got ", axes_str(axis)));
  }
  return out;
}

array l2_norm(const array& a, const std::vector<int>& axes, bool keepdims) {
  const array sq = a.dtype() == complex64 ? square(abs(a)) : square(astype(a, at_least_float(a.dtype())));
  return sqrt(sum(sq, axes, keepdims));
}

array vector_norm(const array& a, double ord, const std::vector<int>& axes, bool keepdims) {
  const Dtype d = real_of(at_least_float(a.dtype()));
  const double inf = std::numeric_limits<double>::infinity();
  if (ord == 0.0) return astype(sum(not_equal(a, array(0)), axes, keepdims), d);
  if (ord == 1.0) return astype(sum(abs(a), axes, keepdims), d);
  if (ord == 2.0) return l2_norm(a, axes, keepdims);
  if (ord == inf) return astype(max(abs(a), axes, keepdims), d);
  if (ord == -inf) return astype(min(abs(a), axes, keepdims), d);
  if (std::isnan(ord)) throw std::invalid_argument("[linalg::norm] ord must be a number; got NaN");
  const array m = astype(abs(a), d);
  return power(sum(power(m, array(ord, d)), axes, keepdims), array(1.0 / ord, d));
}

// The singular values of the matrices whose rows and columns are axes r and c, stacked over the others.
array singular_values(const array& a, int r, int c) {
  const array mat = r > c ? moveaxis(moveaxis(a, r, -1), c, -1) : moveaxis(moveaxis(a, c, -1), r, -2);
  return svd(mat, false)[0];
}

array keep_matrix_axes(const array& x, int r, int c, bool keepdims) {
  return keepdims ? expand_dims(x, std::vector<int>{std::min(r, c), std::max(r, c)}) : x;
}

array matrix_norm(const array& a, double ord, int r, int c, bool keepdims) {
  const Dtype d = real_of(at_least_float(a.dtype()));
  const double inf = std::numeric_limits<double>::infinity();
  if (ord == 1.0 || ord == -1.0) {  // the largest (smallest) column sum
    const int col = c - (!keepdims && c > r);
    const array sums = sum(abs(a), r, keepdims);
    return astype(ord > 0 ? max(sums, col, keepdims) : min(sums, col, keepdims), d);
  }
  if (ord == inf || ord == -inf) {  // the largest (smallest) row sum
    const int row = r - (!keepdims && r > c);
    const array sums = sum(abs(a), c, keepdims);
    return astype(ord > 0 ? max(sums, row, keepdims) : min(sums, row, keepdims), d);
  }
  if (ord == 2.0 || ord == -2.0) {
    const array sv = singular_values(astype(a, at_least_float(a.dtype())), r, c);
    return astype(keep_matrix_axes(ord > 0 ? max(sv, -1) : min(sv, -1), r, c, keepdims), d);
  }
  throw std::invalid_argument(msg("[linalg::norm] ord ", ord, " is not a matrix norm (1, -1, 2, -2, inf, -inf, ",
                                  "\"fro\" or \"nuc\")"));
}

std::vector<int> all_axes(const array& a) {
  std::vector<int> ax(a.ndim());
  std::iota(ax.begin(), ax.end(), 0);
  return ax;
}

}  // namespace

array norm(const array& a, const std::optional<std::vector<int>>& axis, bool keepdims, StreamOrDevice s) {
  OnStream on(s);
  if (!axis) {
    array out = l2_norm(flatten(a), {0}, keepdims);
    return keepdims ? reshape(out, Shape(a.ndim(), 1)) : out;
  }
  return l2_norm(a, norm_axes(a, *axis), keepdims);
}

array norm(const array& a, double ord, const std::optional<std::vector<int>>& axis, bool keepdims, StreamOrDevice s) {
  OnStream on(s);
  if (!axis && a.ndim() > 2) {
    throw std::invalid_argument(msg("[linalg::norm] an ord needs a vector or a matrix, or axes; got shape ",
                                    shape_str(a.shape())));
  }
  const std::vector<int> ax = norm_axes(a, axis ? *axis : all_axes(a));
  if (ax.empty()) throw std::invalid_argument("[linalg::norm] an ord needs at least one axis");
  return ax.size() == 1 ? vector_norm(a, ord, ax, keepdims) : matrix_norm(a, ord, ax[0], ax[1], keepdims);
}

array norm(const array& a, const std::string& ord, const std::optional<std::vector<int>>& axis, bool keepdims,
           StreamOrDevice s) {
  OnStream on(s);
  const std::vector<int> ax = axis ? norm_axes(a, *axis) : all_axes(a);
  if (ax.size() != 2) {
    throw std::invalid_argument(msg("[linalg::norm] ord \"", ord, "\" is a matrix norm: it needs two axes; got ",
                                    ax.size(), " (shape ", shape_str(a.shape()), ")"));
  }
  if (ord == "f" || ord == "fro") return l2_norm(a, ax, keepdims);
  if (ord == "nuc") {
    const array sv = singular_values(astype(a, at_least_float(a.dtype())), ax[0], ax[1]);
    return keep_matrix_axes(sum(sv, -1), ax[0], ax[1], keepdims);
  }
  throw std::invalid_argument(msg("[linalg::norm] ord \"", ord, "\" is not a norm (\"fro\", \"f\" or \"nuc\")"));
}

array pinv(const array& a, StreamOrDevice s) {
  OnStream on(s);
  if (a.dtype() != float32 && a.dtype() != float64 && a.dtype() != complex64) {
    throw std::invalid_argument(msg("[linalg::pinv] arrays must be float32, float64 or complex64; got ", a.dtype()));
  }
  if (a.ndim() < 2) {
    throw std::invalid_argument(msg("[linalg::pinv] needs an array of at least 2 dimensions; got shape ",
                                    shape_str(a.shape())));
  }
  const int m = a.shape(-2), n = a.shape(-1), k = std::min(m, n);
  Shape out_shape = a.shape();
  std::swap(out_shape[a.ndim() - 1], out_shape[a.ndim() - 2]);
  if (a.size() == 0) return zeros(out_shape, a.dtype());  // nothing to compute; numpy's shape
  const std::vector<array> usv = svd(a, true);
  Shape start(a.ndim(), 0), stop = a.shape();
  stop[a.ndim() - 2] = m;
  stop[a.ndim() - 1] = k;
  const array u = slice(usv[0], start, stop);  // (m, k)
  stop[a.ndim() - 2] = k;
  stop[a.ndim() - 1] = n;
  const array vt = slice(usv[2], start, stop);  // (k, n)
  const array sv = expand_dims(usv[1], -2);
  const Dtype rd = real_of(a.dtype());
  const double rcond = 10.0 * std::max(m, n) * finfo(rd).eps;
  const array cutoff = multiply(array(rcond, rd), max(sv, -1, true));
  const array inv_s = where(greater(sv, cutoff), reciprocal(sv), array(0.0, rd));
  auto h = [](const array& x) { return x.dtype() == complex64 ? conjugate(swapaxes(x, -1, -2)) : swapaxes(x, -1, -2); };
  return matmul(multiply(h(vt), astype(inv_s, a.dtype())), h(u));
}

array cholesky_inv(const array& L, bool upper, StreamOrDevice s) {
  OnStream on(s);
  const array l_inv = tri_inv(L, upper);
  const array l_inv_h = L.dtype() == complex64 ? conjugate(swapaxes(l_inv, -1, -2)) : swapaxes(l_inv, -1, -2);
  // (L L^H)^-1 = L^-H L^-1; (U^H U)^-1 = U^-1 U^-H.
  return upper ? matmul(l_inv, l_inv_h) : matmul(l_inv_h, l_inv);
}

array cross(const array& a, const array& b, int axis, StreamOrDevice s) {
  OnStream on(s);
  auto size_at = [&](const array& x, const char* which) {
    const int ax = detail::normalize_axis(axis, static_cast<int>(x.ndim()), "linalg::cross");
    const int n = x.shape()[ax];
    if (n != 2 && n != 3) {
      throw std::invalid_argument(msg("[linalg::cross] ", which, " of shape ", shape_str(x.shape()), " has ", n,
                                      " entries along axis ", axis, "; cross products need 2 or 3"));
    }
    return n;
  };
  const int na = size_at(a, "a"), nb = size_at(b, "b");
  const Dtype d = promote_types(a.dtype(), b.dtype());
  // Broadcast with the axis at 3, then give each operand its own length there.
  Shape as = a.shape(), bs = b.shape();
  as[detail::normalize_axis(axis, int(as.size()), "linalg::cross")] = 3;
  bs[detail::normalize_axis(axis, int(bs.size()), "linalg::cross")] = 3;
  Shape out;
  try {
    out = broadcast_shapes(as, bs);
  } catch (const std::invalid_argument&) {
    throw std::invalid_argument(msg("[linalg::cross] a of shape ", shape_str(a.shape()), " and b of shape ",
                                    shape_str(b.shape()), " do not broadcast outside axis ", axis));
  }
  const int ax = axis < 0 ? axis + static_cast<int>(out.size()) : axis;
  Shape sa = out, sb = out;
  sa[ax] = na;
  sb[ax] = nb;
  const std::vector<array> x = split(broadcast_to(astype(a, d), sa), na, ax);
  const std::vector<array> y = split(broadcast_to(astype(b, d), sb), nb, ax);
  auto mul = [](const array& p, const array& q) { return multiply(p, q); };
  std::vector<array> parts;
  if (na == 2 && nb == 2) {
    const array z = zeros_like(x[0]);
    parts = {z, z};
  } else if (nb == 2) {
    parts = {negative(mul(x[2], y[1])), mul(x[2], y[0])};
  } else if (na == 2) {
    parts = {mul(x[1], y[2]), negative(mul(x[0], y[2]))};
  } else {
    parts = {subtract(mul(x[1], y[2]), mul(x[2], y[1])), subtract(mul(x[2], y[0]), mul(x[0], y[2]))};
  }
  parts.push_back(subtract(mul(x[0], y[1]), mul(x[1], y[0])));
  return concatenate(parts, ax);
}

namespace {

array check_det_input(const array& a, const char* op) {
  if (a.dtype() == complex64) throw std::invalid_argument(msg("[linalg::", op, "] complex inputs are not supported (as MLX)"));
  if (a.ndim() < 2) {
    throw std::invalid_argument(msg("[linalg::", op, "] needs an array of at least 2 dimensions; got shape ",
                                    shape_str(a.shape())));
  }
  if (a.shape(-1) != a.shape(-2)) {
    throw std::invalid_argument(msg("[linalg::", op, "] needs square matrices; got shape ", shape_str(a.shape())));
  }
  const Dtype d = at_least_float(a.dtype());
  if (d != float32 && d != float64) {
    throw std::invalid_argument(msg("[linalg::", op, "] arrays must be float32 or float64 (or integers); got ", a.dtype()));
  }
  return astype(a, d);
}

// Matrices up to 3 x 3 by their explicit formula (as MLX): exact, and differentiable where singular.
array det_small(const array& a) {
  const int n = a.shape(-1);
  if (n == 0) return ones(Shape(a.shape().begin(), a.shape().end() - 2), a.dtype());
  auto e = [&](int i, int j) {
    Shape start(a.ndim(), 0), stop = a.shape();
    start[a.ndim() - 2] = i;
    stop[a.ndim() - 2] = i + 1;
    start[a.ndim() - 1] = j;
    stop[a.ndim() - 1] = j + 1;
    return squeeze(slice(a, start, stop), std::vector<int>{-2, -1});
  };
  if (n == 1) return e(0, 0);
  if (n == 2) return subtract(multiply(e(0, 0), e(1, 1)), multiply(e(0, 1), e(1, 0)));
  auto minor = [&](int r1, int c1, int r2, int c2) {
    return subtract(multiply(e(r1, c1), e(r2, c2)), multiply(e(r1, c2), e(r2, c1)));
  };
  return add(subtract(multiply(e(0, 0), minor(1, 1, 2, 2)), multiply(e(0, 1), minor(1, 0, 2, 2))),
             multiply(e(0, 2), minor(1, 0, 2, 1)));
}

}  // namespace

std::pair<array, array> slogdet(const array& a_in, StreamOrDevice s) {
  OnStream on(s);
  const array a = check_det_input(a_in, "slogdet");
  if (a.shape(-1) <= 3) {
    const array d = det_small(a);
    return {sign(d), log(abs(d))};
  }
  return slogdet_lu(a);
}

array det(const array& a_in, StreamOrDevice s) {
  OnStream on(s);
  const array a = check_det_input(a_in, "det");
  if (a.shape(-1) <= 3) return det_small(a);
  return det_lu(a);
}

}  // namespace loom::linalg

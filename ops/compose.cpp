// Ops that MLX defines as compositions of other ops, composed the same way here: their gradients
// come from the ops they are made of. flip, roll, tri / tril / triu, diagonal / diag / trace,
// full_like, atleast_1d/2d/3d, unstack, meshgrid, kron, tensordot.
#include <algorithm>
#include <numeric>
#include <set>
#include <string>

#include "loom/ops/indexing.h"
#include "loom/ops/ops.h"
#include "loom/ops/utils.h"

namespace loom {

namespace {

// Distinct axes in [0, ndim), or an error naming `op`.
std::vector<int> normalized_axes(const std::vector<int>& axes, int ndim, const char* op) {
  std::vector<int> out;
  std::set<int> seen;
  for (int a : axes) {
    const int ax = detail::normalize_axis(a, ndim, op);
    if (!seen.insert(ax).second) {
      throw std::invalid_argument(detail::msg("[", op, "] axis ", a, " is repeated"));
    }
    out.push_back(ax);
  }
  return out;
}

}  // namespace

// ---- flip, roll ----

array flip(const array& a, const std::vector<int>& axes, StreamOrDevice s) {
  OnStream on(s);
  const int nd = static_cast<int>(a.ndim());
  const std::vector<int> ax = normalized_axes(axes, nd, "flip");
  Shape start(nd, 0), stop = a.shape(), step(nd, 1);
  for (int d : ax) {
    // A negative-step view: start at the last element, stop before the first.
    start[d] = -1;
    stop[d] = -a.shape(d) - 1;
    step[d] = -1;
  }
  return ax.empty() ? a : slice(a, start, stop, step);
}

array flip(const array& a, int axis, StreamOrDevice s) { OnStream on(s); return flip(a, std::vector<int>{axis}); }

array flip(const array& a, StreamOrDevice s) {
  OnStream on(s);
  std::vector<int> all(a.ndim());
  std::iota(all.begin(), all.end(), 0);
  return flip(a, all);
}

array roll(const array& a, const Shape& shift, const std::vector<int>& axes, StreamOrDevice stream) {
  OnStream on(stream);
  if (shift.size() != axes.size()) {
    throw std::invalid_argument(detail::msg("[roll] needs one shift per axis, got ", shift.size(), " shifts for ",
                                            axes.size(), " axes"));
  }
  // A repeated axis rolls again (the shifts add up), as numpy and MLX.
  std::vector<int> ax;
  for (int x : axes) ax.push_back(detail::normalize_axis(x, static_cast<int>(a.ndim()), "roll"));
  array out = a;
  for (size_t i = 0; i < ax.size(); ++i) {
    const int64_t n = a.shape(ax[i]);
    if (n == 0) continue;
    const int64_t s = ((int64_t(shift[i]) % n) + n) % n;  // in [0, n)
    if (s == 0) continue;
    // The last s elements move to the front.
    auto parts = split(out, std::vector<int>{static_cast<int>(n - s)}, ax[i]);
    out = concatenate({parts[1], parts[0]}, ax[i]);
  }
  return out;
}

array roll(const array& a, int shift, const std::vector<int>& axes, StreamOrDevice s) {
  OnStream on(s);
  return roll(a, Shape(axes.size(), shift), axes);
}

array roll(const array& a, int shift, int axis, StreamOrDevice s) {
  OnStream on(s);
  return roll(a, Shape{shift}, std::vector<int>{axis});
}

array roll(const array& a, const Shape& shift, int axis, StreamOrDevice stream) {
  OnStream on(stream);
  int64_t total = 0;
  for (int s : shift) total += s;
  const int64_t n = a.ndim() == 0 ? 1 : a.shape(detail::normalize_axis(axis, static_cast<int>(a.ndim()), "roll"));
  return roll(a, Shape{static_cast<int>(n == 0 ? 0 : total % n)}, std::vector<int>{axis});
}

array roll(const array& a, int shift, StreamOrDevice s) {
  OnStream on(s);
  // Over the flattened array, as numpy without an axis.
  return reshape(roll(reshape(a, {static_cast<int>(a.size())}), shift, 0), a.shape());
}

array roll(const array& a, const Shape& shift, StreamOrDevice stream) {
  OnStream on(stream);
  int64_t total = 0;
  for (int s : shift) total += s;
  const int64_t n = a.size();
  return roll(a, static_cast<int>(n == 0 ? 0 : total % n));
}

// ---- triangles ----

array tri(int n, int m, int k, Dtype dtype, StreamOrDevice s) {
  OnStream on(s);
  if (n < 0 || m < 0) throw std::invalid_argument(detail::msg("[tri] needs n, m >= 0, got ", n, " and ", m));
  // Row i keeps columns j <= i + k.
  array rows = reshape(arange(0, n), {n, 1}), cols = reshape(arange(0, m), {1, m});
  return astype(greater_equal(rows + k, cols), dtype);
}

array tri(int n, Dtype dtype, StreamOrDevice s) { OnStream on(s); return tri(n, n, 0, dtype); }

namespace {
array triangle(const array& x, int k, bool lower, const char* op) {
  if (x.ndim() < 2) {
    throw std::invalid_argument(detail::msg("[", op, "] needs an array of at least 2 dimensions, got shape ",
                                            detail::shape_str(x.shape())));
  }
  const int n = x.shape(-2), m = x.shape(-1);
  array keep = lower ? tri(n, m, k, bool_) : logical_not(tri(n, m, k - 1, bool_));
  return where(keep, x, zeros({}, x.dtype()));
}
}  // namespace

array tril(const array& x, int k, StreamOrDevice s) { OnStream on(s); return triangle(x, k, true, "tril"); }
array triu(const array& x, int k, StreamOrDevice s) { OnStream on(s); return triangle(x, k, false, "triu"); }

// ---- diagonals ----

array diagonal(const array& a, int offset, int axis1, int axis2, StreamOrDevice s) {
  OnStream on(s);
  const int nd = static_cast<int>(a.ndim());
  if (nd < 2) {
    throw std::invalid_argument(detail::msg("[diagonal] needs an array of at least 2 dimensions, got shape ",
                                            detail::shape_str(a.shape())));
  }
  const int ax1 = detail::normalize_axis(axis1, nd, "diagonal"), ax2 = detail::normalize_axis(axis2, nd, "diagonal");
  if (ax1 == ax2) throw std::invalid_argument(detail::msg("[diagonal] axis1 and axis2 are both ", ax1));
  // The two axes last (axis1 then axis2), flattened; the diagonal is every (n2 + 1)-th element from
  // the offset's start.
  std::vector<int> perm;
  for (int d = 0; d < nd; ++d) {
    if (d != ax1 && d != ax2) perm.push_back(d);
  }
  perm.push_back(ax1);
  perm.push_back(ax2);
  const int n1 = a.shape(ax1), n2 = a.shape(ax2);
  const int64_t len = std::max<int64_t>(0, offset >= 0 ? std::min<int64_t>(n1, int64_t(n2) - offset)
                                                      : std::min<int64_t>(int64_t(n1) + offset, n2));
  Shape lead;
  for (size_t i = 0; i + 2 < perm.size(); ++i) lead.push_back(a.shape(perm[i]));
  if (len == 0) {
    Shape out = lead;
    out.push_back(0);
    return zeros(out, a.dtype());
  }
  Shape flat_shape = lead;
  flat_shape.push_back(detail::axis_length(int64_t(n1) * n2, "diagonal", static_cast<int>(lead.size())));
  array flat = reshape(transpose(a, perm), flat_shape);
  const int64_t first = offset >= 0 ? offset : int64_t(-offset) * n2;
  array idx = arange(static_cast<double>(first), static_cast<double>(first + len * (int64_t(n2) + 1)),
                     static_cast<double>(int64_t(n2) + 1), int32);
  return take(flat, idx, -1);
}

array diag(const array& a, int k, StreamOrDevice s) {
  OnStream on(s);
  if (a.ndim() == 2) return diagonal(a, k, 0, 1);
  if (a.ndim() != 1) {
    throw std::invalid_argument(detail::msg("[diag] needs a 1-d or 2-d array, got shape ", detail::shape_str(a.shape())));
  }
  // A square matrix of side size + |k| with `a` on diagonal k.
  const int len = a.shape(0), n = len + std::abs(k);
  array padded = pad(a, std::vector<int>{0}, Shape{0}, Shape{std::abs(k)});
  array rows = reshape(arange(0, n), {n, 1}), cols = reshape(arange(0, n), {1, n});
  array on_k = equal(rows + k, cols);
  // Row i holds a[i] when k >= 0; column j holds a[j] when k < 0.
  array values = k >= 0 ? reshape(padded, {n, 1}) : reshape(padded, {1, n});
  return where(on_k, values, zeros({}, a.dtype()));
}

array trace(const array& a, int offset, int axis1, int axis2, Dtype dtype, StreamOrDevice s) {
  OnStream on(s);
  return sum(astype(diagonal(a, offset, axis1, axis2), dtype), -1);
}

array trace(const array& a, int offset, int axis1, int axis2, StreamOrDevice s) {
  OnStream on(s);
  return sum(diagonal(a, offset, axis1, axis2), -1);
}

array trace(const array& a, StreamOrDevice s) { OnStream on(s); return trace(a, 0, 0, 1); }

// ---- creation and shape helpers ----

array full_like(const array& a, const array& vals, Dtype dtype, StreamOrDevice s) {
  OnStream on(s);
  return full(a.shape(), vals, dtype);
}
array full_like(const array& a, const array& vals, StreamOrDevice s) {
  OnStream on(s);
  return full(a.shape(), vals, a.dtype());
}

array atleast_1d(const array& a, StreamOrDevice s) { OnStream on(s); return a.ndim() >= 1 ? a : reshape(a, {1}); }
array atleast_2d(const array& a, StreamOrDevice s) {
  OnStream on(s);
  if (a.ndim() >= 2) return a;
  return a.ndim() == 0 ? reshape(a, {1, 1}) : reshape(a, {1, a.shape(0)});
}
array atleast_3d(const array& a, StreamOrDevice s) {
  OnStream on(s);
  if (a.ndim() >= 3) return a;
  if (a.ndim() == 0) return reshape(a, {1, 1, 1});
  if (a.ndim() == 1) return reshape(a, {1, a.shape(0), 1});
  return reshape(a, {a.shape(0), a.shape(1), 1});
}
std::vector<array> atleast_1d(const std::vector<array>& a, StreamOrDevice s) {
  OnStream on(s);
  std::vector<array> out;
  for (const auto& x : a) out.push_back(atleast_1d(x));
  return out;
}
std::vector<array> atleast_2d(const std::vector<array>& a, StreamOrDevice s) {
  OnStream on(s);
  std::vector<array> out;
  for (const auto& x : a) out.push_back(atleast_2d(x));
  return out;
}
std::vector<array> atleast_3d(const std::vector<array>& a, StreamOrDevice s) {
  OnStream on(s);
  std::vector<array> out;
  for (const auto& x : a) out.push_back(atleast_3d(x));
  return out;
}

std::vector<array> unstack(const array& a, int axis, StreamOrDevice s) {
  OnStream on(s);
  if (a.ndim() == 0) throw std::invalid_argument("[unstack] cannot unstack a 0-d array");
  const int ax = detail::normalize_axis(axis, static_cast<int>(a.ndim()), "unstack");
  std::vector<array> out;
  const int n = a.shape(ax);
  for (int i = 0; i < n; ++i) out.push_back(take(a, i, ax));
  return out;
}

std::vector<array> meshgrid(const std::vector<array>& arrays, bool sparse, const std::string& indexing,
                            StreamOrDevice s) {
  OnStream on(s);
  if (indexing != "xy" && indexing != "ij") {
    throw std::invalid_argument("[meshgrid] indexing must be \"xy\" or \"ij\", got \"" + indexing + "\"");
  }
  const int nd = static_cast<int>(arrays.size());
  std::vector<array> out;
  for (int i = 0; i < nd; ++i) {
    // Cartesian ("xy") indexing swaps the first two axes of the grid.
    int at = i;
    if (indexing == "xy" && nd > 1 && i < 2) at = 1 - i;
    Shape shape(nd, 1);
    shape[at] = static_cast<int>(arrays[i].size());
    out.push_back(reshape(arrays[i], shape));
  }
  return sparse ? out : broadcast_arrays(out);
}

// ---- products ----

array kron(const array& a, const array& b, StreamOrDevice s) {
  OnStream on(s);
  // Both to the same rank, then a's axes interleaved with b's: out[(i, j)...] = a[i...] * b[j...].
  const int nd = static_cast<int>(std::max(a.ndim(), b.ndim()));
  Shape sa(nd - a.ndim(), 1), sb(nd - b.ndim(), 1);
  for (int d : a.shape()) sa.push_back(d);
  for (int d : b.shape()) sb.push_back(d);
  Shape ia, ib, out;
  for (int d = 0; d < nd; ++d) {
    ia.push_back(sa[d]);
    ia.push_back(1);
    ib.push_back(1);
    ib.push_back(sb[d]);
    out.push_back(detail::axis_length(int64_t(sa[d]) * sb[d], "kron", d));
  }
  return reshape(multiply(reshape(a, ia), reshape(b, ib)), out);
}

array tensordot(const array& a, const array& b, const std::vector<int>& axes_a, const std::vector<int>& axes_b,
                StreamOrDevice s) {
  OnStream on(s);
  if (axes_a.size() != axes_b.size()) {
    throw std::invalid_argument(detail::msg("[tensordot] needs as many axes of a as of b, got ", axes_a.size(),
                                            " and ", axes_b.size()));
  }
  const std::vector<int> ca = normalized_axes(axes_a, static_cast<int>(a.ndim()), "tensordot");
  const std::vector<int> cb = normalized_axes(axes_b, static_cast<int>(b.ndim()), "tensordot");
  int64_t k = 1;
  for (size_t i = 0; i < ca.size(); ++i) {
    if (a.shape(ca[i]) != b.shape(cb[i])) {
      throw std::invalid_argument(detail::msg("[tensordot] axis ", axes_a[i], " of a (", a.shape(ca[i]),
                                              ") and axis ", axes_b[i], " of b (", b.shape(cb[i]),
                                              ") differ in length; shapes ", detail::shape_str(a.shape()), " and ",
                                              detail::shape_str(b.shape())));
    }
    k *= a.shape(ca[i]);
  }
  // a as (free, contracted) and b as (contracted, free): one matmul.
  std::vector<int> pa, pb;
  Shape out;
  int64_t m = 1, n = 1;
  for (int d = 0; d < static_cast<int>(a.ndim()); ++d) {
    if (std::find(ca.begin(), ca.end(), d) == ca.end()) {
      pa.push_back(d);
      out.push_back(a.shape(d));
      m *= a.shape(d);
    }
  }
  pa.insert(pa.end(), ca.begin(), ca.end());
  pb.insert(pb.end(), cb.begin(), cb.end());
  for (int d = 0; d < static_cast<int>(b.ndim()); ++d) {
    if (std::find(cb.begin(), cb.end(), d) == cb.end()) {
      pb.push_back(d);
      out.push_back(b.shape(d));
      n *= b.shape(d);
    }
  }
  array am = reshape(transpose(a, pa), {detail::axis_length(m, "tensordot", 0), detail::axis_length(k, "tensordot", 1)});
  array bm = reshape(transpose(b, pb), {detail::axis_length(k, "tensordot", 0), detail::axis_length(n, "tensordot", 1)});
  return reshape(matmul(am, bm), out);
}

array tensordot(const array& a, const array& b, int axis, StreamOrDevice s) {
  OnStream on(s);
  if (axis < 0 || axis > static_cast<int>(std::min(a.ndim(), b.ndim()))) {
    throw std::invalid_argument(detail::msg("[tensordot] axis must be in [0, min(a.ndim, b.ndim)] = [0, ",
                                            std::min(a.ndim(), b.ndim()), "], got ", axis));
  }
  std::vector<int> aa, bb;
  for (int i = 0; i < axis; ++i) {
    aa.push_back(static_cast<int>(a.ndim()) - axis + i);
    bb.push_back(i);
  }
  return tensordot(a, b, aa, bb);
}

array positive(const array& a, StreamOrDevice s) { OnStream on(s); return a; }

}  // namespace loom

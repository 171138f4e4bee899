#include "loom/core/serialize.h"
#include "loom/core/primitive.h"
#include "loom/ops/batching.h"
#include "loom/kernels/elementwise.h"
#include "loom/ops/autocast.h"
#include "loom/ops/indexing.h"
#include "loom/kernels/gemm.h"
#include "loom/ops/ops.h"
#include "loom/ops/utils.h"

namespace loom {

using detail::msg;
using detail::shape_str;
using kernels::gemm;

namespace {

// How a matrix operand is handed to BLAS: transposed or not, and its leading dimension.
struct MatLayout {
  bool trans = false;
  int64_t ld = 0;
  bool ok = false;
};

MatLayout mat_layout(const array& a) {
  int nd = static_cast<int>(a.ndim());
  int rows = a.shape()[nd - 2], cols = a.shape()[nd - 1];
  int64_t rs = a.strides()[nd - 2], cs = a.strides()[nd - 1];
  if ((cs == 1 || cols == 1) && rs >= std::max(cols, 1)) return {false, rs, true};
  if ((rs == 1 || rows == 1) && cs >= std::max(rows, 1)) return {true, cs, true};
  if (rows == 1 && cols == 1) return {false, 1, true};
  return {};
}

// out = alpha a b (+ beta c when `c` is given, already broadcast to out's shape), in out's dtype:
// float32, float64, complex64, or bfloat16 / float16, which the GEMM seam reads as they are (oneDNN's
// half kernels where the CPU has them). c is copied into out first (or out takes c's buffer when
// nothing else holds it) and the GEMM accumulates onto it: no zeroing of out and no separate pass to
// add c.
void matmul_impl(const array& a_in, const array& b_in, const array* c_in, array& out, double alpha, double beta) {
  out.alloc();  // c's own buffer when nothing else reads it (Matmul::donors)
  if (out.size() == 0) return;
  char* c = static_cast<char*>(out.raw_data());
  if (c_in) kernels::copy_into(*c_in, out);
  if (!c_in) beta = 0;
  const int nd = static_cast<int>(out.ndim());
  const int64_t M = out.shape()[nd - 2], N = out.shape()[nd - 1], K = a_in.shape()[nd - 1];
  const Dtype d = out.dtype();
  if (K == 0) {  // out = beta c (or 0) as one matrix of rows: a and b have no data to offset into
    gemm(kernels::Gemm{d, d, false, false, int64_t(out.size() / size_t(N)), N, 0, nullptr, 1, nullptr, 1, c, N, alpha,
                       beta});
    return;
  }
  MatLayout la = mat_layout(a_in), lb = mat_layout(b_in);
  array a = la.ok ? a_in : kernels::row_contiguous(a_in);
  array b = lb.ok ? b_in : kernels::row_contiguous(b_in);
  if (!la.ok) la = mat_layout(a);
  if (!lb.ok) lb = mat_layout(b);
  const char* ap = static_cast<const char*>(a.raw_data());
  const char* bp = static_cast<const char*>(b.raw_data());
  const size_t item = out.itemsize(), batch = out.size() / size_t(M * N);

  // A batched, row-major `a` against one shared `b`: a single GEMM with batch*M rows.
  bool b_shared = true;
  for (int i = 0; i < nd - 2; ++i) b_shared &= b.strides()[i] == 0 || b.shape()[i] == 1;
  const bool a_stacked = !la.trans && (batch == 1 || a.flags().row_contiguous);
  if (batch == 1 || (b_shared && a_stacked)) {
    gemm(kernels::Gemm{d, d, la.trans, lb.trans, int64_t(batch) * M, N, K, ap, la.ld, bp, lb.ld, c, N, alpha, beta});
    return;
  }
  // One GEMM per batch position: the batch axes (a's and b's broadcast to out's) walked row-major.
  const std::array<Strides, 2> bst{a.strides(), b.strides()};
  kernels::Walker<2> w(out.shape(), bst, 0, std::max(nd - 2, 0));
  for (size_t i = 0; i < batch; ++i, w.next()) {
    gemm(kernels::Gemm{d, d, la.trans, lb.trans, M, N, K, ap + w.off[0] * int64_t(item), la.ld,
                       bp + w.off[1] * int64_t(item), lb.ld, c + i * size_t(M * N) * item, N, alpha, beta});
  }
}

// inputs: a, b -> a b; or a, b, c (c of the output's shape) -> alpha a b + beta c (addmm).
class Matmul : public UnaryPrimitive {
 public:
  void save(detail::Writer& w) const override { w.put(alpha_, beta_); }
  // The operands were broadcast to one batch shape when the node was built, and c (addmm's) to the
  // result's shape: other shapes must keep it so.
  std::vector<Shape> output_shapes(const std::vector<Shape>& in) const override {
    const Shape &a = in.at(0), &b = in.at(1);
    Shape s;
    if (a.size() >= 2 && a.size() == b.size() && a[a.size() - 1] == b[b.size() - 2] &&
        std::equal(a.begin(), a.end() - 2, b.begin())) {
      s = Shape(a.begin(), a.end() - 1);
      s.push_back(b.back());
    }
    if (s.empty() || (in.size() > 2 && in[2] != s)) {
      throw std::invalid_argument(msg("[compile] Matmul of shapes ", shape_str(a), " and ", shape_str(b),
                                      in.size() > 2 ? " onto " + shape_str(in[2]) : std::string()));
    }
    return {s};
  }
  bool is_equivalent(const Primitive& other) const override {
    auto* p = detail::same_primitive(this, other);
    return p && (alpha_ == p->alpha_ && beta_ == p->beta_);
  }
  bool supports_complex() const override { return true; }
  Matmul(float alpha = 1.0f, float beta = 0.0f) : alpha_(alpha), beta_(beta) {}
  // A multiply and an add per output element per term of the inner dimension (four of each for
  // complex).
  double flops(const std::vector<array>& in, const std::vector<array>& out) const override {
    const double k = in[0].ndim() ? in[0].shape()[in[0].ndim() - 1] : 1;
    return 2.0 * k * double(out[0].size()) * (out[0].dtype() == complex64 ? 4 : 1);
  }
  void eval_cpu(const std::vector<array>& in, array& out) override {
    matmul_impl(in[0], in[1], in.size() > 2 ? &in[2] : nullptr, out, alpha_, beta_);
  }
  std::vector<array> vjp(const std::vector<array>& p, const std::vector<array>& cot, const std::vector<int>& argnums,
                         const std::vector<array>&) override {
    std::vector<array> out;
    for (int arg : argnums) {
      if (arg == 2) {
        out.push_back(scaled(cot[0], beta_));
      } else {
        // Complex operands: cot conj(b)^T and conj(a)^T cot (conjugate is the identity on real arrays).
        out.push_back(scaled(arg == 0 ? matmul(cot[0], conjugate(swapaxes(p[1], -1, -2)))
                                      : matmul(conjugate(swapaxes(p[0], -1, -2)), cot[0]),
                             alpha_));
      }
    }
    return out;
  }
  std::vector<array> jvp(const std::vector<array>& p, const std::vector<array>& t,
                         const std::vector<int>& argnums) override {
    std::optional<array> acc;
    for (size_t i = 0; i < argnums.size(); ++i) {
      array term = argnums[i] == 2 ? scaled(t[i], beta_)
                                   : scaled(argnums[i] == 0 ? matmul(t[i], p[1]) : matmul(p[0], t[i]), alpha_);
      acc = acc ? add(*acc, term) : term;
    }
    return {*acc};
  }
  // The product accumulates onto c, in c's own buffer when nothing else reads it (and it is not a or b).
  uint64_t donors(const std::vector<array>& in, int) const override {
    return in.size() > 2 && listed_once(in, 2) ? row_contiguous_donors(in, {2}) : 0;
  }
  const char* name() const override { return "Matmul"; }
  // A batch on one operand only folds into its rows (of a) or columns (of b): one GEMM for the whole
  // batch against the shared operand, as per-example gradients of a linear layer need.
  std::pair<std::vector<array>, std::vector<int>> vmap(const std::vector<array>& in, const std::vector<int>& axes,
                                                       const std::vector<array>& outs) override {
    const Shape& out = outs[0].shape();
    const int n = static_cast<int>(out.size()), B = detail::vmap_size(in, axes);
    auto prim = outs[0].primitive_ptr();
    if (in.size() == 2 && (axes[0] < 0 || axes[1] < 0)) {
      const bool rows = axes[0] >= 0;
      const array& x = in[rows ? 0 : 1];
      Shape shape = x.shape();  // the batch next to the rows (columns), then merged with them
      shape.erase(shape.begin() + axes[rows ? 0 : 1]);
      shape[n - (rows ? 2 : 1)] *= B;
      array folded = reshape(moveaxis(x, axes[rows ? 0 : 1], n - (rows ? 2 : 1)), shape);
      Shape fout = out;
      fout[n - (rows ? 2 : 1)] *= B;
      array r(std::move(fout), outs[0].dtype(), prim, rows ? std::vector<array>{folded, in[1]}
                                                             : std::vector<array>{in[0], folded});
      return {{reshape(r, detail::insert_axis(out, n - (rows ? 2 : 1), B))}, {n - (rows ? 2 : 1)}};
    }
    return {{array(detail::insert_axis(out, 0, B), outs[0].dtype(), prim, detail::all_batch_first(in, axes))}, {0}};
  }

 private:
  static array scaled(const array& x, float s) { return s == 1.0f ? x : multiply(x, array(s, x.dtype())); }
  float alpha_, beta_;
};
const bool kMatmulLoads = detail::register_primitive("Matmul", [](detail::Reader& r) -> std::shared_ptr<Primitive> {
  float alpha, beta;
  r.get(alpha, beta);
  return std::make_shared<Matmul>(alpha, beta);
});

// a's last axis against b's rows (b's only axis when b is 1-D).
void check_inner(const array& a, const array& b) {
  if (a.shape(-1) != b.shape(b.ndim() == 1 ? 0 : -2)) {
    throw std::invalid_argument(
        msg("[matmul] inner dimensions differ: shapes ", shape_str(a.shape()), " and ", shape_str(b.shape())));
  }
}

// A stack of matrices against one matrix (nn::Linear on a batch of sequences) runs as a single
// matrix product with the stack's rows: the forward is one GEMM either way, but this way b's gradient
// is one GEMM over all rows too, instead of a product per matrix of the stack summed afterwards.
bool folds(const array& a, const array& b) { return a.ndim() > 2 && b.ndim() == 2; }

// a's leading axes merged: (..., M, K) -> (rows, K).
array fold_rows(const array& a) {
  int rows = 1;
  for (size_t i = 0; i + 1 < a.ndim(); ++i) rows *= a.shape()[i];
  return reshape(a, {rows, a.shape(-1)});
}

// The operands of a Matmul node for matmul(a_in, b_in): 1-D operands as matrices, batch axes
// broadcast, both in the promoted dtype. Validates with matmul's messages.
struct MatmulOperands {
  array a, b;
  Shape out;
  Dtype dtype;
};

// The Matmul node of `inputs` (a, b[, c]) with result `dtype` (half types accumulate in float32
// inside the GEMM seam: kernels/gemm.h).
array matmul_node(const Shape& out, Dtype dtype, float alpha, float beta, std::vector<array> inputs) {
  return array(out, dtype, std::make_shared<Matmul>(alpha, beta), std::move(inputs));
}

MatmulOperands matmul_operands(const array& a_in, const array& b_in) {
  if (a_in.ndim() == 0 || b_in.ndim() == 0) {
    throw std::invalid_argument(msg("[matmul] needs arrays of at least 1 dimension; got shapes ",
                                    shape_str(a_in.shape()), " and ", shape_str(b_in.shape())));
  }
  Dtype d = promote_types(a_in.dtype(), b_in.dtype());
  if (!is_inexact(d)) {
    throw std::invalid_argument(msg("[matmul] needs floating-point or complex arrays; got ", a_in.dtype(), " and ", b_in.dtype()));
  }
  array a = a_in.ndim() == 1 ? reshape(a_in, {1, a_in.shape()[0]}) : a_in;
  array b = b_in.ndim() == 1 ? reshape(b_in, {b_in.shape()[0], 1}) : b_in;
  check_inner(a_in, b_in);
  int K = a.shape(-1);
  Shape abatch(a.shape().begin(), a.shape().end() - 2), bbatch(b.shape().begin(), b.shape().end() - 2);
  Shape batch;
  try {
    batch = broadcast_shapes(abatch, bbatch);
  } catch (const std::invalid_argument&) {
    throw std::invalid_argument(msg("[matmul] batch dimensions of shapes ", shape_str(a_in.shape()), " and ",
                                    shape_str(b_in.shape()), " do not broadcast"));
  }
  Shape ashape = batch, bshape = batch;
  ashape.push_back(a.shape(-2));
  ashape.push_back(K);
  bshape.push_back(K);
  bshape.push_back(b.shape(-1));
  Shape out = batch;
  out.push_back(ashape[ashape.size() - 2]);
  out.push_back(bshape.back());
  return {broadcast_to(astype(a, d), ashape), broadcast_to(astype(b, d), bshape), out, d};
}

}  // namespace

array matmul(const array& a_cast, const array& b_cast, StreamOrDevice s) {
  OnStream on(s);
  const array a_in = detail::autocast_lower(a_cast), b_in = detail::autocast_lower(b_cast);
  if (folds(a_in, b_in)) {
    check_inner(a_in, b_in);
    Shape out = a_in.shape();
    out.back() = b_in.shape(1);
    // A shapeless trace (autograd/compile.h) leaves the first axis to the rows: any batch then fits.
    if (detail::shapeless_tracing()) out[0] = -1;
    return reshape(matmul(fold_rows(a_in), b_in), std::move(out));
  }
  MatmulOperands m = matmul_operands(a_in, b_in);
  array c = matmul_node(m.out, m.dtype, 1.0f, 0.0f, {m.a, m.b});
  if (a_in.ndim() == 1 && b_in.ndim() == 1) return reshape(c, {});
  if (a_in.ndim() == 1) return squeeze(c, -2);
  if (b_in.ndim() == 1) return squeeze(c, -1);
  return c;
}

array addmm(const array& c_cast, const array& a_cast, const array& b_cast, float alpha, float beta, StreamOrDevice s) {
  OnStream on(s);
  // A matrix product of Autocast's policy, its bias included (as torch.autocast's linear).
  const array c = detail::autocast_lower(c_cast), a = detail::autocast_lower(a_cast), b = detail::autocast_lower(b_cast);
  array ab = matmul(a, b);
  bool ok = true;
  try {
    ok = broadcast_shapes(c.shape(), ab.shape()) == ab.shape();
  } catch (const std::invalid_argument&) {
    ok = false;
  }
  if (!ok) {
    throw std::invalid_argument(msg("[addmm] c of shape ", shape_str(c.shape()),
                                    " does not broadcast to the shape of a @ b ", shape_str(ab.shape())));
  }
  if (beta == 0.0f) return alpha == 1.0f ? ab : multiply(ab, array(alpha, ab.dtype()));
  // One node for matrices (the GEMM accumulates onto c); the composition where matmul squeezes a
  // 1-D operand's axis or c would promote the result.
  // (Not in a shapeless trace: c broadcast to the product's traced shape would fix it; the
  // composition's add broadcasts against the product whatever its shape.)
  if (a.ndim() >= 2 && b.ndim() >= 2 && promote_types(c.dtype(), ab.dtype()) == ab.dtype() &&
      !detail::shapeless_tracing()) {
    // Folded (see folds) when c is the same for every row, a bias: c's shape is (..., 1, N) or (N,).
    bool per_row = true;
    for (size_t i = 0; i + 1 < c.ndim(); ++i) per_row &= c.shape()[i] == 1;
    const bool fold = folds(a, b) && per_row;
    MatmulOperands m = matmul_operands(fold ? fold_rows(a) : a, b);
    array cc = fold && c.ndim() > 1 ? reshape(c, {c.shape(-1)}) : c;
    array cb = broadcast_to(astype(cc, m.dtype), m.out);
    array r = matmul_node(m.out, m.dtype, alpha, beta, {m.a, m.b, cb});
    return fold ? reshape(r, ab.shape()) : r;
  }
  if (alpha != 1.0f) ab = multiply(ab, array(alpha, ab.dtype()));
  // Scale c in the result dtype: beta in an integer c's dtype would truncate (0.5 -> 0).
  array cc = astype(c, promote_types(c.dtype(), ab.dtype()));
  return add(beta == 1.0f ? cc : multiply(cc, array(beta, cc.dtype())), ab);
}

array outer(const array& a, const array& b, StreamOrDevice s) {
  OnStream on(s);
  return multiply(reshape(flatten(a), {-1, 1}), reshape(flatten(b), {1, -1}));
}

array inner(const array& a, const array& b, StreamOrDevice s) {
  OnStream on(s);
  if (a.ndim() == 0 || b.ndim() == 0) return multiply(a, b);
  if (a.shape(-1) != b.shape(-1)) {
    throw std::invalid_argument(msg("[inner] last dimensions differ: shapes ", shape_str(a.shape()), " and ",
                                    shape_str(b.shape())));
  }
  int K = a.shape(-1);
  Shape out(a.shape().begin(), a.shape().end() - 1);
  out.insert(out.end(), b.shape().begin(), b.shape().end() - 1);
  // Leading sizes spelled out: reshape cannot infer a -1 next to K = 0.
  int ma = 1, mb = 1;
  for (size_t i = 0; i + 1 < a.ndim(); ++i) ma *= a.shape()[i];
  for (size_t i = 0; i + 1 < b.ndim(); ++i) mb *= b.shape()[i];
  array r = matmul(reshape(a, {ma, K}), transpose(reshape(b, {mb, K})));
  return reshape(r, out);
}


// ---- gather_mm / block_masked_mm (MLX), as compositions ----

namespace {

// Shared by gather_mm and block_masked_mm: 1-d operands become a row and a column, K must agree and
// the result must be floating. Returns the output dtype.
Dtype prepare_mm_operands(array& a, array& b, const char* op) {
  if (a.ndim() == 0 || b.ndim() == 0) {
    throw std::invalid_argument(msg("[", op, "] operands of shapes ", shape_str(a.shape()), " and ",
                                    shape_str(b.shape()), " must have at least one dimension"));
  }
  if (a.ndim() == 1) a = expand_dims(a, 0);
  if (b.ndim() == 1) b = expand_dims(b, 1);
  if (a.shape()[a.ndim() - 1] != b.shape()[b.ndim() - 2]) {
    throw std::invalid_argument(msg("[", op, "] the last dimension of a ", shape_str(a.shape()),
                                    " must match the second to last of b ", shape_str(b.shape())));
  }
  const Dtype dt = promote_types(a.dtype(), b.dtype());
  if (!is_floating_point(dt)) {
    throw std::invalid_argument(msg("[", op, "] only floating operands are supported; ", a.dtype(), " and ",
                                    b.dtype(), " give ", dt));
  }
  a = astype(a, dt);
  b = astype(b, dt);
  return dt;
}

// Drops the dimensions a 1-d operand was given.
array squeeze_vector_dims(const array& out, size_t a_nd, size_t b_nd) {
  std::vector<int> axes;
  const int nd = static_cast<int>(out.ndim());
  if (a_nd == 1) axes.push_back(nd - 2);
  if (b_nd == 1) axes.push_back(nd - 1);
  return axes.empty() ? out : squeeze(out, axes);
}

}  // namespace

array gather_mm(array a, array b, std::optional<array> lhs_indices, std::optional<array> rhs_indices,
                bool /*sorted_indices*/, StreamOrDevice s) {
  OnStream on(s);
  a = detail::autocast_lower(a);
  b = detail::autocast_lower(b);
  if (!lhs_indices && !rhs_indices) return matmul(a, b);
  const size_t a_nd = a.ndim(), b_nd = b.ndim();
  prepare_mm_operands(a, b, "gather_mm");
  auto indices = [](const std::optional<array>& given, const array& x) {
    if (given) {
      if (!is_integral(given->dtype())) {
        throw std::invalid_argument(msg("[gather_mm] indices must have an integer dtype; got ", given->dtype(),
                                        " indices of shape ", shape_str(given->shape())));
      }
      return *given;
    }
    Shape batch(x.shape().begin(), x.shape().end() - 2);
    int64_t n = 1;
    for (int d : batch) n *= d;
    return reshape(arange(0, static_cast<int>(n)), batch);
  };
  array li = indices(lhs_indices, a), ri = indices(rhs_indices, b);
  Shape ishape;
  try {
    ishape = broadcast_shapes(li.shape(), ri.shape());
  } catch (const std::invalid_argument&) {
    throw std::invalid_argument(msg("[gather_mm] lhs indices of shape ", shape_str(li.shape()),
                                    " and rhs indices of shape ", shape_str(ri.shape()), " do not broadcast together"));
  }
  const int M = a.shape()[a.ndim() - 2], K = a.shape()[a.ndim() - 1], N = b.shape()[b.ndim() - 1];
  auto batch_count = [](const array& x) {
    int n = 1;
    for (size_t d = 0; d + 2 < x.ndim(); ++d) n *= x.shape()[d];
    return n;
  };
  array af = reshape(a, {batch_count(a), M, K}), bf = reshape(b, {batch_count(b), K, N});
  array ga = take(af, flatten(broadcast_to(li, ishape)), 0);
  array gb = take(bf, flatten(broadcast_to(ri, ishape)), 0);
  Shape out = ishape;
  out.push_back(M);
  out.push_back(N);
  return squeeze_vector_dims(reshape(matmul(ga, gb), out), a_nd, b_nd);
}

array block_masked_mm(array a, array b, int block_size, std::optional<array> mask_out,
                      std::optional<array> mask_lhs, std::optional<array> mask_rhs, StreamOrDevice s) {
  OnStream on(s);
  a = detail::autocast_lower(a);
  b = detail::autocast_lower(b);
  // A float mask scales the product: the same dtype as the operands.
  for (auto* m : {&mask_out, &mask_lhs, &mask_rhs}) *m = detail::autocast_lower(*m);
  if (!mask_out && !mask_lhs && !mask_rhs) return matmul(a, b);
  if (block_size < 1) {
    throw std::invalid_argument(msg("[block_masked_mm] block_size must be at least 1; got ", block_size));
  }
  const size_t a_nd = a.ndim(), b_nd = b.ndim();
  const Dtype dt = prepare_mm_operands(a, b, "block_masked_mm");
  Shape batch;
  try {
    batch = broadcast_shapes(Shape(a.shape().begin(), a.shape().end() - 2), Shape(b.shape().begin(), b.shape().end() - 2));
  } catch (const std::invalid_argument&) {
    throw std::invalid_argument(msg("[block_masked_mm] the batch dimensions of a ", shape_str(a.shape()), " and b ",
                                    shape_str(b.shape()), " do not broadcast together"));
  }
  const int M = a.shape()[a.ndim() - 2], K = a.shape()[a.ndim() - 1], N = b.shape()[b.ndim() - 1];
  auto tiles = [&](int n) { return (n + block_size - 1) / block_size; };
  // The mask broadcast to batch + (tiles of rows, tiles of cols), then spread over the blocks' elements.
  auto spread = [&](array m, int rows, int cols, const char* which) {
    Shape target = batch;
    target.push_back(tiles(rows));
    target.push_back(tiles(cols));
    try {
      m = broadcast_to(m, target);
    } catch (const std::invalid_argument&) {
      throw std::invalid_argument(msg("[block_masked_mm] ", which, " of shape ", shape_str(m.shape()),
                                      " does not broadcast to ", shape_str(target), " (blocks of ", block_size, ")"));
    }
    const int nd = static_cast<int>(target.size());
    m = repeat(repeat(m, block_size, nd - 2), block_size, nd - 1);
    Shape start(nd, 0), stop = m.shape();
    stop[nd - 2] = rows;
    stop[nd - 1] = cols;
    return slice(m, start, stop);
  };
  auto apply = [&](const array& x, const array& m) {
    return m.dtype() == bool_ ? where(m, x, zeros({}, x.dtype())) : multiply(x, astype(m, x.dtype()));
  };
  if (mask_lhs || mask_rhs) {
    array ml = mask_lhs.value_or(array(true)), mr = mask_rhs.value_or(array(true));
    // As MLX: bool only when both are; otherwise both multiply.
    if (ml.dtype() != bool_ || mr.dtype() != bool_) {
      ml = astype(ml, dt);
      mr = astype(mr, dt);
    }
    if (a_nd == 1) ml = expand_dims(ml, -2);
    if (b_nd == 1) mr = expand_dims(mr, -1);
    a = apply(a, spread(ml, M, K, "mask_lhs"));
    b = apply(b, spread(mr, K, N, "mask_rhs"));
  }
  array out = matmul(a, b);
  if (mask_out) {
    array mo = *mask_out;
    std::vector<int> ex;
    if (a_nd == 1) ex.push_back(-2);
    if (b_nd == 1) ex.push_back(-1);
    if (!ex.empty()) mo = expand_dims(mo, ex);
    if (mo.dtype() != bool_) mo = astype(mo, dt);
    out = apply(out, spread(mo, M, N, "mask_out"));
  }
  return squeeze_vector_dims(out, a_nd, b_nd);
}

}  // namespace loom

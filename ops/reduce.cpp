#include <algorithm>
#include <cstring>
#include <numeric>

#include "loom/core/serialize.h"
#include "loom/core/primitive.h"
#include "loom/ops/batching.h"
#include "loom/ops/autocast.h"
#include "loom/ops/indexing.h"
#include "loom/kernels/elementwise.h"
#include "loom/ops/ops.h"
#include "loom/ops/utils.h"

namespace loom {

using detail::msg;
using detail::shape_str;

namespace {

enum class ReduceType { sum, prod, max, min, all, any };

// The dtype mean, var, logsumexp and softmax compute in: float32 for the half types, whose sums of more
// than 65,504 ones would overflow (the result is rounded back once, at the end), else a's own
// floating dtype (integers: float32).
Dtype accumulation_dtype(Dtype d) {
  return d == float16 || d == bfloat16 || !is_inexact(d) ? float32 : d;
}
Dtype result_dtype(Dtype d) { return is_inexact(d) ? d : float32; }

const char* reduce_name(ReduceType t) {
  switch (t) {
    case ReduceType::sum: return "sum";
    case ReduceType::prod: return "prod";
    case ReduceType::max: return "max";
    case ReduceType::min: return "min";
    case ReduceType::all: return "all";
    case ReduceType::any: return "any";
  }
  return "reduce";
}

// Splits the dimensions of `in` into kept ones (with input and output strides) and reduced ones
// (with input strides), each collapsed.
struct ReducePlan {
  Shape kept_shape;
  std::array<Strides, 2> kept_strides;  // input, output
  Shape red_shape;
  Strides red_strides;
};

ReducePlan plan_reduce(const array& in, const array& out, const std::vector<int>& axes) {
  ReducePlan p;
  std::vector<std::pair<int64_t, int>> red;  // (input stride, size)
  size_t k = 0;
  for (int i = 0; i < static_cast<int>(in.ndim()); ++i) {
    if (k < axes.size() && axes[k] == i) {
      ++k;
      if (in.shape()[i] != 1) red.push_back({in.strides()[i], in.shape()[i]});
    } else {
      p.kept_shape.push_back(in.shape()[i]);
      p.kept_strides[0].push_back(in.strides()[i]);
      p.kept_strides[1].push_back(out.strides()[i]);
    }
  }
  kernels::collapse(p.kept_shape, p.kept_strides);
  // Reduction order does not matter, so sort by stride (largest first) before merging.
  std::stable_sort(red.begin(), red.end(), [](auto& a, auto& b) { return std::abs(a.first) > std::abs(b.first); });
  for (auto& [st, n] : red) {
    if (!p.red_shape.empty() && p.red_strides.back() == st * n) {
      p.red_shape.back() *= n;
      p.red_strides.back() = st;
    } else {
      p.red_shape.push_back(n);
      p.red_strides.push_back(st);
    }
  }
  return p;
}

// The loops of one reduction (input In, accumulator Acc, output Out, operation Op) behind
// pointers: reduce_run plans, splits the work over threads and walks the kept and the reduced
// dimensions once for every reduction and dtype, and each instantiation compiles only these loops.
// `op` is the operation's functor; `acc` points to Acc values.
struct ReduceLoops {
  // *acc = the reduction of n contiguous elements from init, in eight lanes (the whole-row loop).
  void (*span)(const void* op, const void* x, int64_t n, void* acc);
  // *acc = op(*acc, x[i * s]) for i < n, in order.
  void (*strided)(const void* op, const void* x, int64_t s, int64_t n, void* acc);
  // acc[j] = op(acc[j], x[i * s + j]) for i < n, j < cnt: leading axes reduced into contiguous rows.
  void (*columns)(const void* op, const void* x, int64_t s, int64_t n, void* acc, int64_t cnt);
  void (*combine)(const void* op, void* acc, const void* v);  // *acc = op(*acc, *v)
  void (*store)(const void* acc, void* y, int64_t i);         // y[i] = Out(*acc)
  size_t acc_size;
  alignas(16) unsigned char init[16];  // the Acc the reduction starts from
};

template <typename In, typename Acc, typename Op>
void reduce_span_fn(const void* op, const void* xv, int64_t len, void* acc) {
  const Op f = *static_cast<const Op*>(op);
  const In* xp = static_cast<const In*>(xv);
  Acc init;
  std::memcpy(static_cast<void*>(&init), acc, sizeof(Acc));
  Acc r;
  if constexpr (std::is_integral_v<Acc>) {
    // One running value: the compiler vectorizes integer reductions itself. (GCC 12 at -O3
    // -march=native miscompiled the eight lanes below for uint8 summed in int32: sum of 16 ones
    // was 8, found by tests/diff.)
    r = init;
    for (int64_t i = 0; i < len; ++i) r = f(r, cast_value<Acc>(xp[i]));
  } else {
    Acc lanes[8] = {init, init, init, init, init, init, init, init};
    int64_t i = 0;
    for (; i + 8 <= len; i += 8) {
      for (int l = 0; l < 8; ++l) lanes[l] = f(lanes[l], cast_value<Acc>(xp[i + l]));
    }
    r = init;
    for (int l = 0; l < 8; ++l) r = f(r, lanes[l]);
    for (; i < len; ++i) r = f(r, cast_value<Acc>(xp[i]));
  }
  std::memcpy(acc, static_cast<const void*>(&r), sizeof(Acc));
}

template <typename In, typename Acc, typename Op>
void reduce_strided_fn(const void* op, const void* xv, int64_t s, int64_t n, void* acc) {
  const Op f = *static_cast<const Op*>(op);
  const In* x = static_cast<const In*>(xv);
  Acc r;
  std::memcpy(static_cast<void*>(&r), acc, sizeof(Acc));
  for (int64_t i = 0; i < n; ++i) r = f(r, cast_value<Acc>(x[i * s]));
  std::memcpy(acc, static_cast<const void*>(&r), sizeof(Acc));
}

template <typename In, typename Acc, typename Op>
void reduce_columns_fn(const void* op, const void* xv, int64_t s, int64_t n, void* accv, int64_t cnt) {
  const Op f = *static_cast<const Op*>(op);
  Acc* acc = static_cast<Acc*>(accv);
  for (int64_t i = 0; i < n; ++i) {
    const In* xp = static_cast<const In*>(xv) + i * s;
    for (int64_t j = 0; j < cnt; ++j) acc[j] = f(acc[j], cast_value<Acc>(xp[j]));
  }
}

template <typename Acc, typename Op>
void reduce_combine_fn(const void* op, void* acc, const void* v) {
  *static_cast<Acc*>(acc) = (*static_cast<const Op*>(op))(*static_cast<const Acc*>(acc), *static_cast<const Acc*>(v));
}

template <typename Acc, typename Out>
void reduce_store_fn(const void* acc, void* y, int64_t i) {
  static_cast<Out*>(y)[i] = static_cast<Out>(*static_cast<const Acc*>(acc));
}

template <typename In, typename Out, typename Acc, typename Op>
ReduceLoops reduce_loops(Acc init) {
  static_assert(sizeof(Acc) <= 16 && alignof(Acc) <= 16, "a reduction's accumulator fits ReduceLoops::init");
  ReduceLoops k{&reduce_span_fn<In, Acc, Op>, &reduce_strided_fn<In, Acc, Op>, &reduce_columns_fn<In, Acc, Op>,
                &reduce_combine_fn<Acc, Op>,  &reduce_store_fn<Acc, Out>,    sizeof(Acc),
                {}};
  std::memcpy(k.init, static_cast<const void*>(&init), sizeof(Acc));
  return k;
}

// n accumulators, each at init.
std::vector<unsigned char> accumulators(const ReduceLoops& k, size_t n) {
  std::vector<unsigned char> acc(n * k.acc_size);
  for (size_t i = 0; i < n; ++i) std::memcpy(acc.data() + i * k.acc_size, k.init, k.acc_size);
  return acc;
}

void reduce_run(const array& in, array& out, const std::vector<int>& axes, const ReduceLoops& k, const void* op) {
  out.alloc();
  if (out.size() == 0) return;
  const char* x = static_cast<const char*>(in.raw_data());
  void* y = out.raw_data();
  const int64_t xs = static_cast<int64_t>(in.itemsize());
  if (in.size() == 0) {
    for (size_t i = 0; i < out.size(); ++i) k.store(k.init, y, int64_t(i));
    return;
  }
  ReducePlan p = plan_reduce(in, out, axes);
  const int nr = static_cast<int>(p.red_shape.size());
  const bool inner_contig = nr == 1 && p.red_strides[0] == 1;
  if (inner_contig) {
    const int64_t n = p.red_shape[0];
    // Few long rows (a full sum, say): split each row into fixed chunks reduced in parallel and
    // combined in order. The choice depends on the shape alone, so the result does not depend on
    // the thread count.
    constexpr int64_t kChunk = 1 << 14;
    int64_t rows = 1;
    for (int d : p.kept_shape) rows *= d;
    if (rows < 8 && n >= 2 * kChunk) {
      const int64_t chunks = (n + kChunk - 1) / kChunk;
      // Bytes, not std::vector<bool> (all / any): threads write neighbouring chunks' results.
      std::vector<unsigned char> partial(static_cast<size_t>(chunks) * k.acc_size);
      kernels::for_each_row<2>(p.kept_shape, p.kept_strides,
                               [&](const std::array<int64_t, 2>& o, int cnt, const std::array<int64_t, 2>& s) {
                                 for (int j = 0; j < cnt; ++j) {
                                   const char* xp = x + (o[0] + j * s[0]) * xs;
                                   kernels::parallel_for(static_cast<size_t>(chunks), [&](size_t b, size_t e) {
                                     for (size_t c = b; c < e; ++c) {
                                       const int64_t start = static_cast<int64_t>(c) * kChunk;
                                       unsigned char* slot = partial.data() + c * k.acc_size;
                                       std::memcpy(slot, k.init, k.acc_size);
                                       k.span(op, xp + start * xs, std::min(kChunk, n - start), slot);
                                     }
                                   }, 2);
                                   alignas(16) unsigned char acc[16];
                                   std::memcpy(acc, k.init, k.acc_size);
                                   for (int64_t c = 0; c < chunks; ++c) k.combine(op, acc, partial.data() + c * k.acc_size);
                                   k.store(acc, y, o[1] + j * s[1]);
                                 }
                               });
      return;
    }
    kernels::for_each_row<2>(p.kept_shape, p.kept_strides,
                             [&](const std::array<int64_t, 2>& o, int cnt, const std::array<int64_t, 2>& s) {
                               alignas(16) unsigned char acc[16];
                               for (int j = 0; j < cnt; ++j) {
                                 std::memcpy(acc, k.init, k.acc_size);
                                 k.span(op, x + (o[0] + j * s[0]) * xs, n, acc);
                                 k.store(acc, y, o[1] + j * s[1]);
                               }
                             });
    return;
  }
  // The reduced dimensions but the last, walked; the last is one strided run per position, in the
  // order an element-by-element walk would visit them.
  // (No reduced dimension longer than 1: one element per output.)
  const int64_t last_n = nr ? p.red_shape[nr - 1] : 1, last_s = nr ? p.red_strides[nr - 1] : 0;
  int64_t walked = 1;
  for (int d = 0; d < nr - 1; ++d) walked *= p.red_shape[d];
  const bool outer = p.kept_shape.size() == 1 && p.kept_strides[0][0] == 1 && p.kept_strides[1][0] == 1;
  if (outer) {
    const int64_t kept = p.kept_shape[0];
    // Few columns over many rows (a bias gradient, (4096, 384) summed over its rows): blocks of rows
    // reduced in parallel and combined in order. The blocks depend on the shape alone, so the result
    // does not depend on the thread count.
    constexpr int64_t kRowBlock = 256;
    if (nr == 1 && kept < 4096 && last_n >= 2 * kRowBlock && kept * last_n >= (int64_t(1) << 16)) {
      const int64_t blocks = (last_n + kRowBlock - 1) / kRowBlock;
      std::vector<unsigned char> partial = accumulators(k, size_t(blocks * kept));
      kernels::parallel_for(static_cast<size_t>(blocks), [&](size_t b, size_t e) {
        for (size_t c = b; c < e; ++c) {
          const int64_t r0 = int64_t(c) * kRowBlock;
          k.columns(op, x + r0 * last_s * xs, last_s, std::min(kRowBlock, last_n - r0),
                    partial.data() + size_t(c) * size_t(kept) * k.acc_size, kept);
        }
      }, 1);
      for (int64_t j = 0; j < kept; ++j) {
        unsigned char* a = partial.data() + size_t(j) * k.acc_size;
        for (int64_t c = 1; c < blocks; ++c) k.combine(op, a, partial.data() + size_t(c * kept + j) * k.acc_size);
        k.store(a, y, j);
      }
      return;
    }
    // Reduce the leading axes: accumulate whole rows into the (contiguous) output.
    kernels::parallel_for(static_cast<size_t>(kept), [&](size_t b, size_t e) {
      std::vector<unsigned char> acc = accumulators(k, e - b);
      kernels::Walker<1> w(p.red_shape, p.red_strides, 0, std::max(nr - 1, 0));
      for (int64_t i = 0; i < walked; ++i, w.next())
        k.columns(op, x + (w.off[0] + int64_t(b)) * xs, last_s, last_n, acc.data(), int64_t(e - b));
      for (size_t j = b; j < e; ++j) k.store(acc.data() + (j - b) * k.acc_size, y, int64_t(j));
    }, 4096);
    return;
  }
  kernels::for_each_row<2>(p.kept_shape, p.kept_strides,
                           [&](const std::array<int64_t, 2>& o, int cnt, const std::array<int64_t, 2>& s) {
                             alignas(16) unsigned char acc[16];
                             for (int j = 0; j < cnt; ++j) {
                               const char* xp = x + (o[0] + j * s[0]) * xs;
                               std::memcpy(acc, k.init, k.acc_size);
                               kernels::Walker<1> w(p.red_shape, p.red_strides, 0, std::max(nr - 1, 0));
                               for (int64_t i = 0; i < walked; ++i, w.next())
                                 k.strided(op, xp + w.off[0] * xs, last_s, last_n, acc);
                               k.store(acc, y, o[1] + j * s[1]);
                             }
                           });
}

template <typename In, typename Out, typename Acc, typename Op>
void reduce_kernel(const array& in, array& out, const std::vector<int>& axes, Acc init, Op op) {
  reduce_run(in, out, axes, reduce_loops<In, Out, Acc, Op>(init), &op);
}

// One step of cumsum / cumprod; on bool they are "or" and "and".
template <typename A>
A scan_combine(bool is_sum, A a, A b) {
  if constexpr (std::is_same_v<A, bool>) {
    return is_sum ? (a || b) : (a && b);
  } else {
    return is_sum ? kernels::wrapping_add(a, b) : kernels::wrapping_mul(a, b);
  }
}

// The start of a running max / min: below / above every value. complex64 orders lexicographically
// (real part, then imaginary part), as MLX and numpy.
template <typename T>
T lowest() {
  constexpr float inf = std::numeric_limits<float>::infinity();
  if constexpr (is_complex_v<T>) return T(std::complex<float>(-inf, -inf));
  else if constexpr (std::is_floating_point_v<T>) return -std::numeric_limits<T>::infinity();
  else return std::numeric_limits<T>::lowest();
}
template <typename T>
T highest() {
  constexpr float inf = std::numeric_limits<float>::infinity();
  if constexpr (is_complex_v<T>) return T(std::complex<float>(inf, inf));
  else if constexpr (std::is_floating_point_v<T>) return std::numeric_limits<T>::infinity();
  else return std::numeric_limits<T>::max();
}
// Values that can be NaN (x != x): the floating types and complex64 (a NaN in either part).
template <typename T>
inline constexpr bool has_nan_v = std::is_floating_point_v<T> || is_complex_v<T>;

class Reduce : public UnaryPrimitive {
 public:
  void save(detail::Writer& w) const override { w.put(type_, axes_); }
  std::vector<Shape> output_shapes(const std::vector<Shape>& in) const override {
    Shape s = in.at(0);
    for (int ax : axes_) s.at(ax) = 1;  // the kept axes (a reshape drops them where asked)
    return {s};
  }
  bool is_equivalent(const Primitive& other) const override {
    auto* p = detail::same_primitive(this, other);
    return p && (type_ == p->type_ && axes_ == p->axes_);
  }
  Reduce(ReduceType t, std::vector<int> axes) : type_(t), axes_(std::move(axes)) {}
  double flops(const std::vector<array>& in, const std::vector<array>&) const override { return double(in[0].size()); }
  void eval_cpu(const std::vector<array>& in, array& out) override {
    const array& x = in[0];
    switch (type_) {
      case ReduceType::all:
        LOOM_DISPATCH_ALL(x.dtype(), T, {
          reduce_kernel<T, bool, bool>(x, out, axes_, true, [](bool a, bool b) { return a && b; });
        });
        return;
      case ReduceType::any:
        LOOM_DISPATCH_ALL(x.dtype(), T, {
          reduce_kernel<T, bool, bool>(x, out, axes_, false, [](bool a, bool b) { return a || b; });
        });
        return;
      default:
        break;
    }
    LOOM_DISPATCH_ALL(x.dtype(), T, run<T>(x, out));
  }
  // The sum, prod, max and min kernels for storage type T (a template, so that `if constexpr` drops
  // the branches T has no use for).
  template <typename T>
  void run(const array& x, array& out) {
    if constexpr (is_complex_v<T>) {
      switch (type_) {
        case ReduceType::sum: reduce_kernel<T, T, T>(x, out, axes_, T(0), [](T a, T b) { return a + b; }); break;
        case ReduceType::prod: reduce_kernel<T, T, T>(x, out, axes_, T(1), [](T a, T b) { return a * b; }); break;
        case ReduceType::max:
          reduce_kernel<T, T, T>(x, out, axes_, lowest<T>(), [](T a, T b) { return (a != a || !(b > a || b != b)) ? a : b; });
          break;
        case ReduceType::min:
          reduce_kernel<T, T, T>(x, out, axes_, highest<T>(), [](T a, T b) { return (a != a || !(b < a || b != b)) ? a : b; });
          break;
        default: break;
      }
    } else if constexpr (!std::is_same_v<T, bool>) {
      using A = std::conditional_t<is_half_v<T>, float, T>;
      // Sums and products of integers narrower than 32 bits are (u)int32 (MLX's rule).
      using S = std::conditional_t<std::is_integral_v<T> && (sizeof(T) < 4),
                                   std::conditional_t<std::is_signed_v<T>, int32_t, uint32_t>, T>;
      using SA = std::conditional_t<is_half_v<T>, float, S>;
      switch (type_) {
        case ReduceType::sum:
          if constexpr (is_half_v<T>) {
            if (out.dtype() == float32) {  // Autocast's sum of a half array: float32 out, no float32 copy in
              reduce_kernel<T, float, float>(x, out, axes_, 0.0f, [](float a, float b) { return a + b; });
              break;
            }
          }
          reduce_kernel<T, S, SA>(x, out, axes_, SA(0), [](SA a, SA b) { return kernels::wrapping_add(a, b); });
          break;
        case ReduceType::prod:
          reduce_kernel<T, S, SA>(x, out, axes_, SA(1), [](SA a, SA b) { return kernels::wrapping_mul(a, b); });
          break;
        case ReduceType::max:
          reduce_kernel<T, T, A>(x, out, axes_, lowest<A>(), [](A a, A b) {
            if constexpr (std::is_floating_point_v<A>) {
              if (std::isnan(a)) return a;
            }
            return (b > a || b != b) ? b : a;
          });
          break;
        case ReduceType::min:
          reduce_kernel<T, T, A>(x, out, axes_, highest<A>(), [](A a, A b) {
            if constexpr (std::is_floating_point_v<A>) {
              if (std::isnan(a)) return a;
            }
            return (b < a || b != b) ? b : a;
          });
          break;
        default:
          break;
      }
    } else {
      // bool: sum and prod count in int32; max/min are any/all.
      switch (type_) {
        case ReduceType::sum:
          reduce_kernel<bool, int32_t, int32_t>(x, out, axes_, 0, [](int32_t a, int32_t b) { return kernels::wrapping_add(a, b); });
          break;
        case ReduceType::prod:
          reduce_kernel<bool, int32_t, int32_t>(x, out, axes_, 1, [](int32_t a, int32_t b) { return kernels::wrapping_mul(a, b); });
          break;
        case ReduceType::max:
          reduce_kernel<bool, bool, bool>(x, out, axes_, false, [](bool a, bool b) { return a || b; });
          break;
        default:
          reduce_kernel<bool, bool, bool>(x, out, axes_, true, [](bool a, bool b) { return a && b; });
          break;
      }
    }
  }
  bool supports_complex() const override { return true; }
  std::vector<array> vjp(const std::vector<array>& p, const std::vector<array>& cot, const std::vector<int>&,
                         const std::vector<array>& outputs) override {
    // Complex: c conj(d out / d x) (input_grad is linear in the cotangent and holomorphic in x).
    if (is_complex(p[0].dtype())) return {conjugate(input_grad(p[0], outputs[0], conjugate(cot[0])))};
    const array g = input_grad(p[0], outputs[0], cot[0]);
    // A half input summed into float32 (Autocast) gets its gradient in its own dtype.
    return {g.dtype() != p[0].dtype() && is_floating_point(p[0].dtype()) ? astype(g, p[0].dtype()) : g};
  }
  std::vector<array> jvp(const std::vector<array>& p, const std::vector<array>& t, const std::vector<int>&) override {
    const array& x = p[0];
    if (type_ == ReduceType::sum) return {sum(t[0], axes_, true)};
    array y(shape_with_ones(x.shape()), x.dtype(), std::make_shared<Reduce>(type_, axes_), {x});
    // Both prod and max/min are linear in the tangent with the weights the vjp uses.
    return {sum(multiply(t[0], input_grad(x, y, ones_like(y))), axes_, true)};
  }
  std::pair<std::vector<array>, std::vector<int>> vmap(const std::vector<array>& in, const std::vector<int>& axes,
                                                       const std::vector<array>& outs) override {
    const int b = axes[0];
    std::vector<int> ax;
    for (int a : axes_) ax.push_back(detail::batched_axis(a, b));
    Shape shape = detail::insert_axis(outs[0].shape(), b, in[0].shape(b));
    return {{array(std::move(shape), outs[0].dtype(), std::make_shared<Reduce>(type_, std::move(ax)), {in[0]})}, {b}};
  }
  const char* name() const override { return "Reduce"; }
  void print(std::ostream& os) const override { os << "Reduce(" << reduce_name(type_) << ")"; }
  bool is_differentiable() const override { return type_ != ReduceType::all && type_ != ReduceType::any; }

 private:
  Shape shape_with_ones(Shape s) const {
    for (int a : axes_) s[a] = 1;
    return s;
  }
  // d out / d x weighted by the (keepdims-shaped) cotangent v.
  array input_grad(const array& x, const array& y, const array& v) const {
    switch (type_) {
      case ReduceType::sum:
        return broadcast_to(v, x.shape());
      case ReduceType::prod: {
        // Product of all other elements, exact when some elements are zero: move the reduced axes
        // last, flatten them, and multiply exclusive running products from both ends.
        if (x.size() == 0) return zeros_like(x);  // (the flattening could not infer its -1)
        int nd = static_cast<int>(x.ndim());
        std::vector<int> perm, inv(nd);
        for (int i = 0; i < nd; ++i) {
          if (!std::binary_search(axes_.begin(), axes_.end(), i)) perm.push_back(i);
        }
        perm.insert(perm.end(), axes_.begin(), axes_.end());
        for (int i = 0; i < nd; ++i) inv[perm[i]] = i;
        array xt = transpose(x, perm);
        Shape tshape = xt.shape();
        int lead = nd - static_cast<int>(axes_.size());
        Shape flat(tshape.begin(), tshape.begin() + lead);
        flat.push_back(-1);
        array xf = reshape(xt, flat);
        array others = multiply(cumprod(xf, -1, false, false), cumprod(xf, -1, true, false));
        array g = transpose(reshape(others, tshape), inv);
        return multiply(broadcast_to(v, x.shape()), g);
      }
      case ReduceType::max:
      case ReduceType::min: {
        // Ties share the gradient evenly.
        array mask = astype(equal(x, y), v.dtype());
        return multiply(broadcast_to(v, x.shape()), divide(mask, sum(mask, axes_, true)));
      }
      default:
        return zeros_like(x);
    }
  }
  static array cumprod(const array& a, int axis, bool reverse, bool inclusive);

  ReduceType type_;
  std::vector<int> axes_;
};
const bool kReduceLoads = detail::register_primitive("Reduce", [](detail::Reader& r) -> std::shared_ptr<Primitive> {
  ReduceType t;
  std::vector<int> axes;
  r.get(t, axes);
  return std::make_shared<Reduce>(t, std::move(axes));
});

// ---- scans ----
// One primitive for every running reduction along an axis: cumsum, cumprod, cummax, cummin and
// logcumsumexp (MLX's Scan with its ReduceType).
enum class ScanType { sum, prod, max, min, logaddexp };

const char* scan_name(ScanType t) {
  switch (t) {
    case ScanType::sum: return "CumSum";
    case ScanType::prod: return "CumProd";
    case ScanType::max: return "CumMax";
    case ScanType::min: return "CumMin";
    case ScanType::logaddexp: return "LogCumSumExp";
  }
  return "Scan";
}

// The value a scan starts from (and the first output of an exclusive scan).
template <typename A>
A scan_init(ScanType t) {
  switch (t) {
    case ScanType::sum: return A(0);
    case ScanType::prod: return A(1);
    default:
      return t == ScanType::min ? highest<A>() : lowest<A>();  // logaddexp: -inf (floating only)
  }
}

// One step of a scan: the running value `a` combined with the next element `b`. On bool, sum and
// max are "or", prod and min "and". max/min propagate NaN; logaddexp is log(exp(a) + exp(b)) without
// overflow (as logaddexp).
template <typename A, ScanType kType>
inline A scan_step(A a, A b) {
  if constexpr (kType == ScanType::sum || kType == ScanType::prod) {
    return scan_combine(kType == ScanType::sum, a, b);
  } else if constexpr (kType == ScanType::max || kType == ScanType::min) {
    if constexpr (has_nan_v<A>) {
      if (a != a) return a;
      if (b != b) return b;
    }
    if constexpr (kType == ScanType::max) return b > a ? b : a;
    else return b < a ? b : a;
  } else {
    if constexpr (std::is_floating_point_v<A>) {
      if (a != a || b != b) return a + b;  // NaN
      const A hi = a > b ? a : b, lo = a > b ? b : a;
      // -inf with anything, and equal infinities, give the larger one (hi - hi would be NaN).
      if (hi == std::numeric_limits<A>::infinity() || lo == -std::numeric_limits<A>::infinity()) return hi;
      return hi + std::log1p(std::exp(lo - hi));
    } else {
      return a;  // unreachable: logcumsumexp casts integers to float32 first
    }
  }
}

// The sizes and the (x, out) strides of every axis of x but `axis`: where the rows of a scan or an
// arg-reduction along `axis` start.
void other_axes(const array& x, const array& out, int axis, Shape& kept, std::array<Strides, 2>& st) {
  for (int i = 0; i < static_cast<int>(x.ndim()); ++i) {
    if (i == axis) continue;
    kept.push_back(x.shape()[i]);
    st[0].push_back(x.strides()[i]);
    st[1].push_back(out.strides()[i]);
  }
}

// Scans every row of `x` along `axis` into `out` (any strides); S is the input type, T the output's.
template <typename S, typename T, ScanType kType>
void scan_rows(const array& x, array& out, int axis, bool reverse, bool inclusive) {
  using A = std::conditional_t<std::is_floating_point_v<compute_t<T>>, compute_t<T>, T>;
  Shape kept;
  std::array<Strides, 2> st;
  other_axes(x, out, axis, kept, st);
  kernels::collapse(kept, st);
  const int n = x.shape()[axis];
  const int64_t xs = x.strides()[axis], ys = out.strides()[axis];
  const S* xp0 = kernels::ptr<S>(x);
  T* yp0 = kernels::ptr<T>(out);
  const A init = scan_init<A>(kType);
  // Rows whose scan axis is contiguous are scanned one after another; otherwise B neighbouring rows
  // (along the innermost other axis) are scanned together, so each step reads and writes B adjacent
  // elements instead of one per cache line.
  const bool one_by_one = xs == 1 || n == 1;
  constexpr int B = 64;
  kernels::for_each_row<2>(kept, st, [&](const std::array<int64_t, 2>& o, int cnt, const std::array<int64_t, 2>& s) {
    if (one_by_one) {
      for (int j = 0; j < cnt; ++j) {
        const S* xp = xp0 + o[0] + j * s[0];
        T* yp = yp0 + o[1] + j * s[1];
        A acc = init;
        for (int k = 0; k < n; ++k) {
          const int64_t i = reverse ? n - 1 - k : k;
          const A v = cast_value<A>(xp[i * xs]);
          if (inclusive) acc = k == 0 ? v : scan_step<A, kType>(acc, v);
          yp[i * ys] = cast_value<T>(acc);
          if (!inclusive) acc = k == 0 ? v : scan_step<A, kType>(acc, v);
        }
      }
      return;
    }
    A acc[B];
    for (int j0 = 0; j0 < cnt; j0 += B) {
      const int m = std::min(B, cnt - j0);
      const S* xp = xp0 + o[0] + j0 * s[0];
      T* yp = yp0 + o[1] + j0 * s[1];
      for (int k = 0; k < n; ++k) {
        const int64_t i = reverse ? n - 1 - k : k;
        const S* xr = xp + i * xs;
        T* yr = yp + i * ys;
        for (int jj = 0; jj < m; ++jj) {
          const A v = cast_value<A>(xr[jj * s[0]]);
          if (inclusive) {
            acc[jj] = k == 0 ? v : scan_step<A, kType>(acc[jj], v);
            yr[jj * s[1]] = cast_value<T>(acc[jj]);
          } else {
            yr[jj * s[1]] = cast_value<T>(k == 0 ? init : acc[jj]);
            acc[jj] = k == 0 ? v : scan_step<A, kType>(acc[jj], v);
          }
        }
      }
    }
  });
}

template <typename S, typename T>
void scan_dispatch(ScanType t, const array& x, array& out, int axis, bool reverse, bool inclusive) {
  if constexpr (is_complex_v<T>) {  // no logaddexp (Scan::supports_complex)
    switch (t) {
      case ScanType::sum: scan_rows<S, T, ScanType::sum>(x, out, axis, reverse, inclusive); break;
      case ScanType::prod: scan_rows<S, T, ScanType::prod>(x, out, axis, reverse, inclusive); break;
      case ScanType::max: scan_rows<S, T, ScanType::max>(x, out, axis, reverse, inclusive); break;
      case ScanType::min: scan_rows<S, T, ScanType::min>(x, out, axis, reverse, inclusive); break;
      case ScanType::logaddexp: break;
    }
  } else {
    switch (t) {
      case ScanType::sum: scan_rows<S, T, ScanType::sum>(x, out, axis, reverse, inclusive); break;
      case ScanType::prod: scan_rows<S, T, ScanType::prod>(x, out, axis, reverse, inclusive); break;
      case ScanType::max: scan_rows<S, T, ScanType::max>(x, out, axis, reverse, inclusive); break;
      case ScanType::min: scan_rows<S, T, ScanType::min>(x, out, axis, reverse, inclusive); break;
      case ScanType::logaddexp:
        if constexpr (std::is_floating_point_v<compute_t<T>>) {
          scan_rows<S, T, ScanType::logaddexp>(x, out, axis, reverse, inclusive);
        }
        break;
    }
  }
}

class Scan : public UnaryPrimitive {
 public:
  void save(detail::Writer& w) const override { w.put(type_, axis_, reverse_, inclusive_); }
  std::vector<Shape> output_shapes(const std::vector<Shape>& in) const override { return same_shape_output(in); }
  bool is_equivalent(const Primitive& other) const override {
    auto* p = detail::same_primitive(this, other);
    return p && (type_ == p->type_ && axis_ == p->axis_ && reverse_ == p->reverse_ && inclusive_ == p->inclusive_);
  }
  Scan(ScanType t, int axis, bool reverse, bool inclusive)
      : type_(t), axis_(axis), reverse_(reverse), inclusive_(inclusive) {}
  void eval_cpu(const std::vector<array>& in, array& out) override {
    const array& x = in[0];
    out.alloc();
    if (out.size() == 0) return;
    LOOM_DISPATCH_ALL(x.dtype(), S, {
      if (out.dtype() == x.dtype()) {
        scan_dispatch<S, S>(type_, x, out, axis_, reverse_, inclusive_);
      } else if constexpr (std::is_same_v<S, bool> || std::is_same_v<S, uint8_t>) {
        // cumsum of bool and uint8 counts in int32 (the only scan whose dtype changes).
        scan_dispatch<S, int32_t>(type_, x, out, axis_, reverse_, inclusive_);
      } else {
        throw std::invalid_argument(msg("[", scan_name(type_), "] a ", to_string(x.dtype()), " scan has no ",
                                        to_string(out.dtype()), " result"));
      }
    });
  }
  bool supports_complex() const override { return type_ != ScanType::logaddexp; }
  std::vector<array> vjp(const std::vector<array>& p, const std::vector<array>& cot, const std::vector<int>& argnums,
                         const std::vector<array>& outputs) override {
    // Complex: c conj(J) = conj(J^T conj(c)) for these holomorphic scans.
    if (is_complex(p[0].dtype())) return {conjugate(transpose_vjp(p, {conjugate(cot[0])}, outputs)[0])};
    return transpose_vjp(p, cot, outputs);
  }
  // J^T c.
  std::vector<array> transpose_vjp(const std::vector<array>& p, const std::vector<array>& cot,
                                   const std::vector<array>& outputs) {
    const array& x = p[0];
    switch (type_) {
      case ScanType::sum:
        return {cumsum(cot[0], axis_, !reverse_, inclusive_)};
      case ScanType::prod: {
        // d y_j / d x_i = y_j / x_i for the terms that include x_i, when x_i is nonzero. Exact with
        // zeros: past the first zero (in scan order) every such term is zero, and at the first zero
        // the terms are those of the scan with that zero replaced by one.
        ZeroSplit zs = split_zeros(x);
        array general = divide(cumsum(multiply(cot[0], outputs[0]), axis_, !reverse_, inclusive_), zs.safe_x);
        array at_first = cumsum(multiply(cot[0], scan(ScanType::prod, add(x, zs.first))), axis_, !reverse_, inclusive_);
        return {where(zs.is_zero, multiply(zs.first, at_first), general)};
      }
      case ScanType::max:
      case ScanType::min: {
        // Each output's cotangent goes to the element that holds the running extreme there (ties: the
        // latest one in scan order, as MLX and PyTorch's cummax). An element holding the extreme over
        // many outputs sums their cotangents: in float32 for the half types, rounded once.
        if (x.shape()[axis_] == 0) return {zeros_like(x)};
        array c = inclusive_ ? cot[0] : unshift(cot[0]);
        const Dtype acc = accumulation_dtype(x.dtype());
        return {astype(scatter_add_axis(zeros(x.shape(), acc), owners(x), astype(c, acc), axis_), x.dtype())};
      }
      case ScanType::logaddexp: {
        // d y_j / d x_i = exp(x_i - y_j) over the outputs j whose sum holds x_i, which is the scan
        // the other way: g = exp(x) * rscan(c * exp(-y)). In logs, with the cotangent's positive and
        // negative parts apart: g = exp(x + rlogcumsumexp(log c+ - y)) - (the same for c-). An output
        // of -inf (nothing but -inf summed, or the empty start of an exclusive scan) is constant
        // there and passes nothing back. The half types compute in float32 (x + the scan cancels).
        const Dtype acc = accumulation_dtype(x.dtype());
        const array xa = astype(x, acc), y = astype(outputs[0], acc), c = astype(cot[0], acc);
        array ninf(-std::numeric_limits<double>::infinity(), acc);
        array y_void = equal(y, ninf);
        auto part = [&](const array& mask) {
          array lc = where(logical_or(logical_not(mask), y_void), ninf, subtract(log(abs(c)), y));
          return exp(add(xa, scan(ScanType::logaddexp, lc, /*flip=*/true)));
        };
        return {astype(subtract(part(greater(c, zeros_like(c))), part(less(c, zeros_like(c)))), x.dtype())};
      }
    }
    return {zeros_like(x)};
  }
  std::vector<array> jvp(const std::vector<array>& p, const std::vector<array>& t, const std::vector<int>&) override {
    const array& x = p[0];
    switch (type_) {
      case ScanType::sum:
        return {cumsum(t[0], axis_, reverse_, inclusive_)};
      case ScanType::prod: {
        // y_j * sum of t_i / x_i over its factors; once a factor is zero only the first zero's term
        // is left: t_z times the product of the other factors.
        ZeroSplit zs = split_zeros(x);
        array general = multiply(scan(ScanType::prod, x), cumsum(divide(t[0], zs.safe_x), axis_, reverse_, inclusive_));
        array t_first = sum(multiply(t[0], zs.first), std::vector<int>{axis_}, true);
        array has_zero = greater(cumsum(astype(zs.is_zero, x.dtype()), axis_, reverse_, inclusive_), zeros_like(x));
        return {where(has_zero, multiply(t_first, scan(ScanType::prod, add(x, zs.first))), general)};
      }
      case ScanType::max:
      case ScanType::min: {
        // The tangent of the element each output holds; the empty start of an exclusive scan is 0.
        if (x.shape()[axis_] == 0) return {zeros_like(x)};
        array held = take_along_axis(astype(t[0], x.dtype()), owners(x), axis_);
        return {inclusive_ ? held : shift(held)};
      }
      case ScanType::logaddexp: {
        // dy_j = sum of exp(x_i - y_j) t_i over the x_i in y_j: softmax weights of the scanned
        // prefix, computed in logs (tangent split into its positive and negative parts; the half
        // types in float32).
        const Dtype acc = accumulation_dtype(x.dtype());
        const array xa = astype(x, acc), tt = astype(t[0], acc);
        array y = scan(ScanType::logaddexp, xa);
        array ninf(-std::numeric_limits<double>::infinity(), acc);
        auto part = [&](const array& mask) {
          array lx = where(mask, add(xa, log(abs(tt))), ninf);
          return exp(subtract(scan(ScanType::logaddexp, lx), y));
        };
        array d = subtract(part(greater(tt, zeros_like(tt))), part(less(tt, zeros_like(tt))));
        return {astype(where(equal(y, ninf), zeros_like(y), d), x.dtype())};
      }
    }
    return {zeros_like(x)};
  }
  std::pair<std::vector<array>, std::vector<int>> vmap(const std::vector<array>& in, const std::vector<int>& axes,
                                                       const std::vector<array>& outs) override {
    const int b = axes[0];
    auto prim = std::make_shared<Scan>(type_, detail::batched_axis(axis_, b), reverse_, inclusive_);
    return {{array(in[0].shape(), outs[0].dtype(), std::move(prim), {in[0]})}, {b}};
  }
  const char* name() const override { return scan_name(type_); }

 private:
  struct ZeroSplit {
    array is_zero;  // bool
    array first;    // 1 at the first zero along the scan, 0 elsewhere (x's dtype)
    array safe_x;   // x with its zeros replaced by one
  };
  ZeroSplit split_zeros(const array& x) const {
    array is_zero = equal(x, zeros_like(x));
    array z = astype(is_zero, x.dtype());
    array none_before = equal(cumsum(z, axis_, reverse_, false), zeros_like(x));
    return {is_zero, multiply(z, astype(none_before, x.dtype())), where(is_zero, ones_like(x), x)};
  }
  // This scan's kind `t` over x (same axis; direction flipped when `flip`, same inclusiveness).
  array scan(ScanType t, const array& x, bool flip = false) const {
    return array(x.shape(), x.dtype(), std::make_shared<Scan>(t, axis_, reverse_ != flip, inclusive_), {x});
  }
  // For cummax/cummin: at each position, the index along the axis of the element that holds the
  // inclusive running extreme there: the latest element (in scan order) equal to the extreme when it
  // came (or a NaN, which holds every NaN output after it, as in PyTorch).
  array owners(const array& x) const {
    const int n = x.shape()[axis_];
    array y = array(x.shape(), x.dtype(), std::make_shared<Scan>(type_, axis_, reverse_, true), {x});
    array holds = logical_or(equal(x, y), logical_and(isnan(x), isnan(y)));
    Shape ishape(x.ndim(), 1);
    ishape[axis_] = n;
    array iota = reshape(arange(0, n), ishape);
    array masked = where(holds, iota, array(reverse_ ? n : -1, int32));
    ScanType pick = reverse_ ? ScanType::min : ScanType::max;
    return stop_gradient(array(masked.shape(), int32, std::make_shared<Scan>(pick, axis_, reverse_, true), {masked}));
  }
  // An inclusive scan's values moved one step along the scan (exclusive positions): the first
  // position in scan order gets 0.
  array shift(const array& a) const {
    const int n = a.shape()[axis_];
    Shape start(a.ndim(), 0), stop = a.shape();
    if (reverse_) start[axis_] = 1;
    else stop[axis_] = n - 1;
    return pad(slice(a, start, stop), {axis_}, {reverse_ ? 0 : 1}, {reverse_ ? 1 : 0}, array(0, a.dtype()));
  }
  // The inverse direction for cotangents: position j of the inclusive scan is read by the exclusive
  // output one step later in scan order (the last inclusive position by none).
  array unshift(const array& a) const {
    const int n = a.shape()[axis_];
    Shape start(a.ndim(), 0), stop = a.shape();
    if (reverse_) stop[axis_] = n - 1;
    else start[axis_] = 1;
    return pad(slice(a, start, stop), {axis_}, {reverse_ ? 1 : 0}, {reverse_ ? 0 : 1}, array(0, a.dtype()));
  }
  ScanType type_;
  int axis_;
  bool reverse_, inclusive_;
};
const detail::PrimitiveLoader kScanLoad = [](detail::Reader& r) -> std::shared_ptr<Primitive> {
  ScanType t;
  int axis;
  bool reverse, inclusive;
  r.get(t, axis, reverse, inclusive);
  return std::make_shared<Scan>(t, axis, reverse, inclusive);
};
// Registered under each name the class goes by.
const bool kScanLoads = detail::register_primitive("CumSum", kScanLoad) &&
                        detail::register_primitive("CumProd", kScanLoad) &&
                        detail::register_primitive("CumMax", kScanLoad) &&
                        detail::register_primitive("CumMin", kScanLoad) &&
                        detail::register_primitive("LogCumSumExp", kScanLoad);

array Reduce::cumprod(const array& a, int axis, bool reverse, bool inclusive) {
  int ax = detail::normalize_axis(axis, static_cast<int>(a.ndim()), "cumprod");
  return array(a.shape(), a.dtype(), std::make_shared<Scan>(ScanType::prod, ax, reverse, inclusive), {a});
}

// ---- arg reductions ----
class ArgReduce : public UnaryPrimitive {
 public:
  void save(detail::Writer& w) const override { w.put(is_max_, axis_); }
  std::vector<Shape> output_shapes(const std::vector<Shape>& in) const override {
    Shape s = in.at(0);
    s.at(axis_) = 1;
    return {s};
  }
  bool is_equivalent(const Primitive& other) const override {
    auto* p = detail::same_primitive(this, other);
    return p && (is_max_ == p->is_max_ && axis_ == p->axis_);
  }
  ArgReduce(bool is_max, int axis) : is_max_(is_max), axis_(axis) {}
  void eval_cpu(const std::vector<array>& in, array& out) override {
    const array& x = in[0];
    out.alloc();
    Shape kept;
    std::array<Strides, 2> st;
    other_axes(x, out, axis_, kept, st);
    if (out.size() == 0) return;
    kernels::collapse(kept, st);
    const int n = x.shape()[axis_];
    const int64_t xs = x.strides()[axis_];
    int32_t* y = kernels::ptr<int32_t>(out);
    LOOM_DISPATCH_ALL(x.dtype(), T, {
      using C = compute_t<T>;
      const T* x0 = kernels::ptr<T>(x);
      kernels::for_each_row<2>(kept, st, [&](const std::array<int64_t, 2>& o, int cnt, const std::array<int64_t, 2>& s) {
        for (int j = 0; j < cnt; ++j) {
          const T* xp = x0 + o[0] + j * s[0];
          int32_t best = 0;
          C bv = static_cast<C>(xp[0]);
          for (int i = 1; i < n; ++i) {
            C v = static_cast<C>(xp[i * xs]);
            if constexpr (has_nan_v<C>) {
              if (bv != bv) break;  // the first NaN wins
              if (v != v) {
                best = i;
                break;
              }
            }
            if (is_max_ ? (v > bv) : (v < bv)) {
              bv = v;
              best = i;
            }
          }
          y[o[1] + j * s[1]] = best;
        }
      });
    });
  }
  std::pair<std::vector<array>, std::vector<int>> vmap(const std::vector<array>& in, const std::vector<int>& axes,
                                                       const std::vector<array>& outs) override {
    const int b = axes[0];
    Shape shape = detail::insert_axis(outs[0].shape(), b, in[0].shape(b));
    auto prim = std::make_shared<ArgReduce>(is_max_, detail::batched_axis(axis_, b));
    return {{array(std::move(shape), int32, std::move(prim), {in[0]})}, {b}};
  }
  const char* name() const override { return is_max_ ? "ArgMax" : "ArgMin"; }
  bool is_differentiable() const override { return false; }
  bool supports_complex() const override { return true; }

 private:
  bool is_max_;
  int axis_;
};
const detail::PrimitiveLoader kArgReduceLoad = [](detail::Reader& r) -> std::shared_ptr<Primitive> {
  bool is_max;
  int axis;
  r.get(is_max, axis);
  return std::make_shared<ArgReduce>(is_max, axis);
};
// Registered under each name the class goes by.
const bool kArgReduceLoads = detail::register_primitive("ArgMax", kArgReduceLoad) &&
                             detail::register_primitive("ArgMin", kArgReduceLoad);

std::vector<int> all_axes(const array& a) {
  std::vector<int> axes(a.ndim());
  std::iota(axes.begin(), axes.end(), 0);
  return axes;
}

// MLX's dtype for a sum or product: bool and signed integers up to 32 bits give int32, unsigned
// ones up to 32 bits uint32; 64-bit integers and floats keep their dtype.
Dtype sum_dtype(Dtype d) {
  if (d == bool_) return int32;
  if (is_integral(d) && d.size < 4) return is_signed_integer(d) ? int32 : uint32;
  return d;
}

// `widen`: a half input's sum in float32 (Autocast's float32 list, see reduce_autocast), read as it is.
array reduce(const array& a, const std::vector<int>& axes_in, bool keepdims, ReduceType type, bool widen = false) {
  const char* name = reduce_name(type);
  auto axes = detail::normalize_axes(axes_in, static_cast<int>(a.ndim()), name);
  if ((type == ReduceType::max || type == ReduceType::min)) {
    for (int ax : axes) {
      if (a.shape()[ax] == 0) {
        throw std::invalid_argument(msg("[", name, "] cannot reduce the empty axis ", ax, " of shape ",
                                        shape_str(a.shape()), ": it has no identity"));
      }
    }
  }
  Dtype out_dtype = a.dtype();
  if (type == ReduceType::all || type == ReduceType::any) out_dtype = bool_;
  else if (type == ReduceType::sum || type == ReduceType::prod) out_dtype = sum_dtype(a.dtype());
  if (widen) out_dtype = float32;
  // Nothing to reduce (no axes, or a 0-d input): the values as they are, in the reduction's dtype.
  if (axes.empty()) return astype(a, out_dtype);
  Shape kshape = a.shape();
  for (int ax : axes) kshape[ax] = 1;
  array out(kshape, out_dtype, std::make_shared<Reduce>(type, axes), {a});
  return keepdims ? out : squeeze(out, axes);
}

// The number of elements reduced over `axes`; validates the axes with `name` as the op in errors.
size_t reduced_count(const array& a, const std::vector<int>& axes, const char* name) {
  auto ax = detail::normalize_axes(axes, static_cast<int>(a.ndim()), name);
  size_t n = 1;
  for (int i : ax) n *= a.shape()[i];
  return n;
}

// sum and prod are in Autocast's float32 list (ops/autocast.h): a half input's sum reads it as it
// is and accumulates and writes float32 (a bias gradient reads its bfloat16 cotangent once, with no
// float32 copy); prod casts it up first. max, min, all and any are exact in any dtype.
array reduce_autocast(const array& a, const std::vector<int>& axes, bool keepdims, ReduceType t) {
  if (t == ReduceType::sum && (a.dtype() == bfloat16 || a.dtype() == float16) && autocast_dtype()) {
    return reduce(a, axes, keepdims, t, true);
  }
  return reduce(t == ReduceType::prod ? detail::autocast_float32(a) : a, axes, keepdims, t);
}

}  // namespace

#define LOOM_REDUCTION(FN, TYPE)                                                                  \
  array FN(const array& a, const std::vector<int>& axes, bool keepdims, StreamOrDevice s) {        \
    OnStream on(s);                                                                                \
    return reduce_autocast(a, axes, keepdims, TYPE);                                               \
  }                                                                                                \
  array FN(const array& a, int axis, bool keepdims, StreamOrDevice s) {                            \
    OnStream on(s);                                                                                \
    return reduce_autocast(a, {axis}, keepdims, TYPE);                                             \
  }                                                                                                \
  array FN(const array& a, bool keepdims, StreamOrDevice s) {                                      \
    OnStream on(s);                                                                                \
    return reduce_autocast(a, all_axes(a), keepdims, TYPE);                                        \
  }
LOOM_REDUCTION(sum, ReduceType::sum)
LOOM_REDUCTION(prod, ReduceType::prod)
LOOM_REDUCTION(max, ReduceType::max)
LOOM_REDUCTION(min, ReduceType::min)
LOOM_REDUCTION(all, ReduceType::all)
LOOM_REDUCTION(any, ReduceType::any)
#undef LOOM_REDUCTION

array mean(const array& a_cast, const std::vector<int>& axes, bool keepdims, StreamOrDevice stream) {
  OnStream on(stream);
  const array a = detail::autocast_float32(a_cast);
  size_t n = reduced_count(a, axes, "mean");
  const Dtype acc = accumulation_dtype(a.dtype());
  array s = sum(astype(a, acc), axes, keepdims);
  return astype(multiply(s, array(n ? 1.0 / double(n) : std::nan(""), acc)), result_dtype(a.dtype()));
}
array mean(const array& a, int axis, bool keepdims, StreamOrDevice s) {
  OnStream on(s);
  return mean(a, std::vector<int>{axis}, keepdims);
}
array mean(const array& a, bool keepdims, StreamOrDevice s) { OnStream on(s); return mean(a, all_axes(a), keepdims); }

namespace {
array var_impl(const array& a_cast, const std::vector<int>& axes, bool keepdims, int ddof, const char* name) {
  const array a = detail::autocast_float32(a_cast);
  size_t n = reduced_count(a, axes, name);
  const Dtype acc = accumulation_dtype(a.dtype());
  array x = astype(a, acc);
  array centered = subtract(x, mean(x, axes, true));
  // Complex: the mean squared magnitude (float32), as numpy and MLX.
  array s = is_complex(acc) ? sum(real(multiply(centered, conjugate(centered))), axes, keepdims)
                            : sum(square(centered), axes, keepdims);
  double denom = double(n) - ddof;
  return astype(multiply(s, array(denom > 0 ? 1.0 / denom : std::nan(""), s.dtype())),
                is_complex(acc) ? float32 : result_dtype(a.dtype()));
}
}  // namespace

array var(const array& a, const std::vector<int>& axes, bool keepdims, int ddof, StreamOrDevice s) {
  OnStream on(s);
  return var_impl(a, axes, keepdims, ddof, "var");
}
array var(const array& a, int axis, bool keepdims, int ddof, StreamOrDevice s) {
  OnStream on(s);
  return var(a, std::vector<int>{axis}, keepdims, ddof);
}
array var(const array& a, bool keepdims, int ddof, StreamOrDevice s) {
  OnStream on(s);
  return var(a, all_axes(a), keepdims, ddof);
}
array std(const array& a, const std::vector<int>& axes, bool keepdims, int ddof, StreamOrDevice s) {
  OnStream on(s);
  return sqrt(var_impl(a, axes, keepdims, ddof, "std"));
}
array std(const array& a, int axis, bool keepdims, int ddof, StreamOrDevice s) {
  OnStream on(s);
  return std(a, std::vector<int>{axis}, keepdims, ddof);
}
array std(const array& a, bool keepdims, int ddof, StreamOrDevice s) {
  OnStream on(s);
  return std(a, all_axes(a), keepdims, ddof);
}

namespace {
// The max over `axes` (keepdims) as a constant for stabilizing exps, with -inf replaced by 0 (a row
// of -inf would otherwise give -inf - -inf = NaN); +inf too for logsumexp, whose answer is then +inf
// (as PyTorch's), but not for softmax, where a +inf entry makes the row NaN (numpy, PyTorch, MLX).
array stable_shift(const array& x, const std::vector<int>& axes, bool keep_positive_inf = false) {
  array m = stop_gradient(max(x, axes, true));
  array replace = keep_positive_inf ? logical_and(isinf(m), less(m, zeros_like(m))) : isinf(m);
  return where(replace, zeros_like(m), m);
}
}  // namespace

array logsumexp(const array& a_cast, const std::vector<int>& axes, bool keepdims, StreamOrDevice s) {
  OnStream on(s);
  const array a = detail::autocast_float32(a_cast);
  reduced_count(a, axes, "logsumexp");
  detail::reject_complex(a.dtype(), "logsumexp");
  const Dtype d = result_dtype(a.dtype());
  array x = astype(a, accumulation_dtype(a.dtype()));
  if (x.size() == 0) return astype(log(sum(exp(x), axes, keepdims)), d);
  array m = stable_shift(x, axes);
  array out = add(log(sum(exp(subtract(x, m)), axes, true)), m);
  return astype(keepdims ? out : squeeze(out, detail::normalize_axes(axes, static_cast<int>(a.ndim()), "logsumexp")), d);
}
array logsumexp(const array& a, int axis, bool keepdims, StreamOrDevice s) {
  OnStream on(s);
  return logsumexp(a, std::vector<int>{axis}, keepdims);
}
array logsumexp(const array& a, bool keepdims, StreamOrDevice s) {
  OnStream on(s);
  return logsumexp(a, all_axes(a), keepdims);
}

namespace detail {
// The fused primitive over the last axis (ops/softmax.cpp).
array softmax_last_axis(const array& x, bool take_log);

array softmax_composed(const array& x, const std::vector<int>& axes, bool take_log) {
  if (x.size() == 0) return x;  // max (for the shift) has no identity on an empty axis
  array shifted = subtract(x, stable_shift(x, axes, true));
  if (take_log) return subtract(shifted, log(sum(exp(shifted), axes, true)));
  array e = exp(shifted);
  return divide(e, sum(e, axes, true));
}
}  // namespace detail

namespace {
// Over the last axis alone, the fused primitive; otherwise the composition.
array softmax_impl(const array& a_cast, const std::vector<int>& axes, bool take_log, const char* name) {
  const array a = detail::autocast_float32(a_cast);
  reduced_count(a, axes, name);
  detail::reject_complex(a.dtype(), name);
  const Dtype d = result_dtype(a.dtype());
  array x = astype(a, d);
  if (x.size() == 0) return x;
  const bool last = axes.size() == 1 && (axes[0] == -1 || axes[0] == static_cast<int>(a.ndim()) - 1);
  if (last) return detail::softmax_last_axis(x, take_log);  // computes the half types in float32
  return astype(detail::softmax_composed(astype(x, accumulation_dtype(d)), axes, take_log), d);
}
}  // namespace

array softmax(const array& a, const std::vector<int>& axes, bool /*precise*/, StreamOrDevice s) {
  OnStream on(s);
  return softmax_impl(a, axes, false, "softmax");
}
array softmax(const array& a, int axis, bool precise, StreamOrDevice s) {
  OnStream on(s);
  return softmax(a, std::vector<int>{axis}, precise);
}
array softmax(const array& a, bool precise, StreamOrDevice s) {
  OnStream on(s);
  return softmax(a, all_axes(a), precise);
}

array log_softmax(const array& a, const std::vector<int>& axes, StreamOrDevice s) {
  OnStream on(s);
  return softmax_impl(a, axes, true, "log_softmax");
}
array log_softmax(const array& a, int axis, StreamOrDevice s) {
  OnStream on(s);
  return log_softmax(a, std::vector<int>{axis});
}

array argmax(const array& a, int axis, bool keepdims, StreamOrDevice stream) {
  OnStream on(stream);
  int ax = detail::normalize_axis(axis, static_cast<int>(a.ndim()), "argmax");
  if (a.shape()[ax] == 0) throw std::invalid_argument(msg("[argmax] axis ", ax, " of shape ", shape_str(a.shape()), " is empty"));
  Shape s = a.shape();
  s[ax] = 1;
  array out(s, int32, std::make_shared<ArgReduce>(true, ax), {a});
  return keepdims ? out : squeeze(out, ax);
}
array argmax(const array& a, bool keepdims, StreamOrDevice s) {
  OnStream on(s);
  array out = argmax(flatten(a), 0, true);
  return keepdims ? reshape(out, Shape(a.ndim(), 1)) : reshape(out, {});
}
array argmin(const array& a, int axis, bool keepdims, StreamOrDevice stream) {
  OnStream on(stream);
  int ax = detail::normalize_axis(axis, static_cast<int>(a.ndim()), "argmin");
  if (a.shape()[ax] == 0) throw std::invalid_argument(msg("[argmin] axis ", ax, " of shape ", shape_str(a.shape()), " is empty"));
  Shape s = a.shape();
  s[ax] = 1;
  array out(s, int32, std::make_shared<ArgReduce>(false, ax), {a});
  return keepdims ? out : squeeze(out, ax);
}
array argmin(const array& a, bool keepdims, StreamOrDevice s) {
  OnStream on(s);
  array out = argmin(flatten(a), 0, true);
  return keepdims ? reshape(out, Shape(a.ndim(), 1)) : reshape(out, {});
}

namespace {
array make_scan(const array& a_cast, int axis, bool reverse, bool inclusive, ScanType t, const char* name) {
  // cumsum and cumprod are in Autocast's float32 list; cummax and cummin are exact in any dtype.
  const array a = t == ScanType::sum || t == ScanType::prod ? detail::autocast_float32(a_cast) : a_cast;
  int ax = detail::normalize_axis(axis, static_cast<int>(a.ndim()), name);
  Dtype d = a.dtype();
  if (t == ScanType::sum && (d == bool_ || d == uint8)) d = int32;
  return array(a.shape(), d, std::make_shared<Scan>(t, ax, reverse, inclusive), {a});
}
}  // namespace

array cumsum(const array& a, int axis, bool reverse, bool inclusive, std::optional<Dtype> dtype, StreamOrDevice s) {
  OnStream on(s);
  return make_scan(dtype ? astype(a, *dtype) : a, axis, reverse, inclusive, ScanType::sum, "cumsum");
}
array cumsum(const array& a, bool reverse, bool inclusive, std::optional<Dtype> dtype, StreamOrDevice s) {
  OnStream on(s);
  return cumsum(flatten(a), 0, reverse, inclusive, dtype);
}

array cumprod(const array& a, int axis, bool reverse, bool inclusive, std::optional<Dtype> dtype, StreamOrDevice s) {
  OnStream on(s);
  return make_scan(dtype ? astype(a, *dtype) : a, axis, reverse, inclusive, ScanType::prod, "cumprod");
}
array cumprod(const array& a, bool reverse, bool inclusive, std::optional<Dtype> dtype, StreamOrDevice s) {
  OnStream on(s);
  return cumprod(flatten(a), 0, reverse, inclusive, dtype);
}

array cummax(const array& a, int axis, bool reverse, bool inclusive, StreamOrDevice s) {
  OnStream on(s);
  return make_scan(a, axis, reverse, inclusive, ScanType::max, "cummax");
}
array cummax(const array& a, bool reverse, bool inclusive, StreamOrDevice s) {
  OnStream on(s);
  return cummax(flatten(a), 0, reverse, inclusive);
}

array cummin(const array& a, int axis, bool reverse, bool inclusive, StreamOrDevice s) {
  OnStream on(s);
  return make_scan(a, axis, reverse, inclusive, ScanType::min, "cummin");
}
array cummin(const array& a, bool reverse, bool inclusive, StreamOrDevice s) {
  OnStream on(s);
  return cummin(flatten(a), 0, reverse, inclusive);
}

array logcumsumexp(const array& a, int axis, bool reverse, bool inclusive, StreamOrDevice s) {
  OnStream on(s);
  detail::normalize_axis(axis, static_cast<int>(a.ndim()), "logcumsumexp");
  detail::reject_complex(a.dtype(), "logcumsumexp");
  return make_scan(astype(a, result_dtype(a.dtype())), axis, reverse, inclusive, ScanType::logaddexp, "logcumsumexp");
}
array logcumsumexp(const array& a, bool reverse, bool inclusive, StreamOrDevice s) {
  OnStream on(s);
  return logcumsumexp(flatten(a), 0, reverse, inclusive);
}

}  // namespace loom

namespace loom {

// ---- median, count_nonzero, number_of_elements (compositions, MLX's semantics) ----
array median(const array& a, const std::vector<int>& axes, bool keepdims, StreamOrDevice s) {
  OnStream on(s);
  const int nd = static_cast<int>(a.ndim());
  std::vector<int> ax = detail::normalize_axes(axes, nd, "median");
  const Dtype d = result_dtype(a.dtype());
  if (ax.empty()) return astype(a, d);  // each element is the median of itself
  // The reduced axes moved last and flattened into one.
  std::vector<int> perm;
  for (int i = 0; i < nd; ++i) {
    if (!std::binary_search(ax.begin(), ax.end(), i)) perm.push_back(i);
  }
  const int lead = static_cast<int>(perm.size());
  perm.insert(perm.end(), ax.begin(), ax.end());
  int64_t n = 1;
  Shape flat;
  for (int i = 0; i < nd; ++i) {
    if (i < lead) flat.push_back(a.shape()[perm[i]]);
    else n *= a.shape()[perm[i]];
  }
  if (n == 0) {
    throw std::invalid_argument(msg("[median] cannot take the median over the empty axes of shape ",
                                    shape_str(a.shape())));
  }
  flat.push_back(detail::axis_length(n, "median", lead));
  array x = reshape(transpose(a, perm), flat);
  array sorted = sort(x, -1);
  // The middle element, or the mean of the two middle ones; the half types average in float32.
  const Dtype acc = accumulation_dtype(d);
  auto at = [&](int64_t k) {
    Shape start(flat.size(), 0), stop = flat;
    start.back() = static_cast<int>(k);
    stop.back() = static_cast<int>(k + 1);
    return astype(slice(sorted, start, stop), acc);
  };
  const int64_t mid = n / 2;
  array m = at(mid);
  if (n % 2 == 0) {
    // a/2 + b/2 rather than (a + b)/2: the same value, without overflow at the largest magnitudes.
    array half(0.5, acc);
    m = add(multiply(at(mid - 1), half), multiply(m, half));
  }
  // The sort puts NaNs last, where the middle never reaches them: a NaN anywhere makes the median NaN
  // (numpy, MLX's CPU backend).
  if (is_floating_point(a.dtype())) {
    m = where(any(isnan(x), -1, true), array(std::numeric_limits<double>::quiet_NaN(), acc), m);
  }
  m = astype(squeeze(m, -1), d);
  return keepdims ? expand_dims(m, ax) : m;
}
array median(const array& a, int axis, bool keepdims, StreamOrDevice s) {
  OnStream on(s);
  return median(a, std::vector<int>{axis}, keepdims);
}
array median(const array& a, bool keepdims, StreamOrDevice s) {
  OnStream on(s);
  return median(a, all_axes(a), keepdims);
}

array count_nonzero(const array& a, const std::vector<int>& axes, bool keepdims, StreamOrDevice s) {
  OnStream on(s);
  detail::normalize_axes(axes, static_cast<int>(a.ndim()), "count_nonzero");
  return sum(astype(not_equal(a, array(0, a.dtype())), int32), axes, keepdims);
}
array count_nonzero(const array& a, int axis, bool keepdims, StreamOrDevice s) {
  OnStream on(s);
  return count_nonzero(a, std::vector<int>{axis}, keepdims);
}
array count_nonzero(const array& a, bool keepdims, StreamOrDevice s) {
  OnStream on(s);
  return count_nonzero(a, all_axes(a), keepdims);
}

array number_of_elements(const array& a, std::vector<int> axes, bool inverted, Dtype dtype, StreamOrDevice s) {
  OnStream on(s);
  double n = 1;
  for (int ax : axes) n *= a.shape()[detail::normalize_axis(ax, static_cast<int>(a.ndim()), "number_of_elements")];
  return array(inverted ? 1.0 / n : n, dtype);
}

}  // namespace loom

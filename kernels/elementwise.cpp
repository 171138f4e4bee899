// The one elementwise driver: the layout plan, the allocation, the thread split and the strided
// walk of every unary and binary kernel, compiled once; each (op, dtype) brings only its loops.
#include "loom/kernels/elementwise.h"

namespace loom::kernels {

namespace {

// How a kernel runs: over the flat data of operands that share one layout (`n` elements; a size-1
// operand as a scalar), or row by row over collapsed dimensions (`strided`).
struct Plan {
  enum Flat { strided, all, scalar_first, scalar_second } flat = strided;
  size_t n = 0;
};

Plan plan_unary(const array& in, array& out, size_t itemsize) {
  Plan p;
  if (in.flags().contiguous && alloc_like(out, in, itemsize)) {
    p.flat = Plan::all;
    p.n = in.data_size();
  }
  return p;
}

Plan plan_binary(const array& a, const array& b, array& out, size_t itemsize) {
  Plan p;
  const bool as = a.data_size() == 1, bs = b.data_size() == 1;
  const bool ac = a.flags().contiguous, bc = b.flags().contiguous;
  const array& like = (as && !bs) ? b : a;
  if (out.size() == 1) out.alloc();
  if (out.size() == 1 ||
      (((ac && bc && a.strides() == b.strides()) || (as && bc) || (bs && ac)) && alloc_like(out, like, itemsize))) {
    p.n = out.size() == 1 ? 1 : like.data_size();
    p.flat = (as && !bs) ? Plan::scalar_first : (bs && !as) ? Plan::scalar_second : Plan::all;
  }
  return p;
}

// A span of the unary loops for strides (sx, sy): the unit-stride loop where it fits, else the
// strided one.
void unary_row(const UnaryLoops& k, const void* f, const char* x, int64_t sx, char* y, int64_t sy, size_t n) {
  if (sx == 1 && sy == 1 && k.span) return k.span(f, x, y, n);
  k.strided(f, x, sx, y, sy, n);
}

// A span of the binary loops for strides (sx, sz, sy): a unit-stride loop where one fits, else the
// strided one.
void binary_row(const BinaryLoops& k, const void* f, const char* x, int64_t sx, const char* z, int64_t sz,
                char* y, int64_t sy, size_t n) {
  if (sy == 1) {
    if (sx == 1 && sz == 1 && k.span) return k.span(f, x, z, y, n);
    if (sx == 0 && sz == 1 && k.span_sv) return k.span_sv(f, x, z, y, n);
    if (sx == 1 && sz == 0 && k.span_vs) return k.span_vs(f, x, z, y, n);
  }
  k.strided(f, x, sx, z, sz, y, sy, n);
}

}  // namespace

void unary_run(const array& in, array& out, const UnaryLoops& k, const void* f) {
  const size_t xs = in.itemsize(), ys = k.out_size;
  const Plan p = plan_unary(in, out, ys);
  const char* x = static_cast<const char*>(in.raw_data());
  if (p.flat != Plan::strided) {
    char* y = static_cast<char*>(out.raw_data());
    parallel_for(p.n, [&](size_t b, size_t e) { unary_row(k, f, x + b * xs, 1, y + b * ys, 1, e - b); });
    return;
  }
  out.alloc();
  Shape shape = in.shape();
  std::array<Strides, 2> st{in.strides(), out.strides()};
  collapse(shape, st);
  char* y = static_cast<char*>(out.raw_data());
  for_each_row<2>(shape, st, [&](const std::array<int64_t, 2>& o, int n, const std::array<int64_t, 2>& s) {
    unary_row(k, f, x + o[0] * int64_t(xs), s[0], y + o[1] * int64_t(ys), s[1], size_t(n));
  });
}

void binary_run(const array& a, const array& b, array& out, const BinaryLoops& k, const void* f) {
  const size_t xs = a.itemsize(), ys = k.out_size;
  const Plan p = plan_binary(a, b, out, ys);
  const char* x = static_cast<const char*>(a.raw_data());
  const char* z = static_cast<const char*>(b.raw_data());
  if (p.flat != Plan::strided) {
    char* y = static_cast<char*>(out.raw_data());
    const bool x1 = p.flat == Plan::scalar_first, z1 = p.flat == Plan::scalar_second;
    parallel_for(p.n, [&](size_t lo, size_t hi) {
      binary_row(k, f, x + (x1 ? 0 : lo * xs), x1 ? 0 : 1, z + (z1 ? 0 : lo * xs), z1 ? 0 : 1, y + lo * ys, 1, hi - lo);
    });
    return;
  }
  out.alloc();
  Shape shape = out.shape();
  std::array<Strides, 3> st{a.strides(), b.strides(), out.strides()};
  collapse(shape, st);
  char* y = static_cast<char*>(out.raw_data());
  for_each_row<3>(shape, st, [&](const std::array<int64_t, 3>& o, int n, const std::array<int64_t, 3>& s) {
    binary_row(k, f, x + o[0] * int64_t(xs), s[0], z + o[1] * int64_t(xs), s[1], y + o[2] * int64_t(ys), s[2],
               size_t(n));
  });
}

}  // namespace loom::kernels

// Arrays of any number of axes (numpy allows 64): every op family on arrays of 20, 33 and 64 axes,
// contiguous and not (transposed, sliced with steps, broadcast), with fusion on and off. Most axes
// have size 1, ten have size 2, 3 or 5, so the arrays stay small. Each result is checked against
// values computed here by hand, or against the same op on the array with its size-1 axes dropped
// (ten axes), whose elements are the same in the same row-major order.
#include <algorithm>
#include <numeric>

#include "../test_utils.h"
#include "loom/core/loops.h"

using namespace loom;

namespace {

struct Fusion {
  explicit Fusion(bool on) { detail::set_fusion(on); }
  ~Fusion() { detail::set_fusion(true); }
};

Shape squeezed(const Shape& s) {
  Shape out;
  for (int d : s) {
    if (d != 1) out.push_back(d);
  }
  return out;
}

// Asserts that `big` (many axes) and `small` (its size-1 axes dropped) hold the same values.
void expect_same_at(array big, array small, double tol = 1e-5) {
  ASSERT_EQ(squeezed(big.shape()), squeezed(small.shape()));
  auto a = big.to_vector<double>(), b = small.to_vector<double>();
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    ASSERT_NEAR(a[i], b[i], tol + tol * std::abs(b[i])) << "at flat index " << i;
  }
}

#define expect_same(...)    \
  do {                            \
    SCOPED_TRACE("expect_same");  \
    expect_same_at(__VA_ARGS__);  \
  } while (0)

// An array of R axes, ten of them of sizes (2, 2, 2, 3, 2, 2, 2, 5, 2, 2) spread out, holding
// 0, 1, 2, ... in row-major order; `t` is it transposed by p[i] = (13 i + 3) mod R (a view with
// strides out of order), `c` and `tc` the same with the size-1 axes dropped.
struct Case {
  int R;
  Shape S, St;
  std::vector<int> perm, perm_c;
  std::vector<int> big_axes;  // axis of St holding compact axis j of tc
  int n;
  array x, t, c, tc;

  explicit Case(int rank) : R(rank), x(0.0f), t(0.0f), c(0.0f), tc(0.0f) {
    S = Shape(R, 1);
    for (int k = 0; k < 10; ++k) S[k * (R - 1) / 9] = k == 3 ? 3 : k == 7 ? 5 : 2;
    n = 1;
    for (int d : S) n *= d;
    for (int i = 0; i < R; ++i) perm.push_back((13 * i + 3) % R);
    St = Shape(R, 1);
    for (int i = 0; i < R; ++i) St[i] = S[perm[i]];
    std::vector<int> rank_of(R, -1);
    for (int d = 0, k = 0; d < R; ++d) {
      if (S[d] != 1) rank_of[d] = k++;
    }
    for (int i = 0; i < R; ++i) {
      if (S[perm[i]] != 1) {
        perm_c.push_back(rank_of[perm[i]]);
        big_axes.push_back(i);
      }
    }
    x = reshape(arange(0, n, 1), S);
    x = astype(x, float32);
    c = reshape(x, squeezed(S));
    t = transpose(x, perm);
    tc = transpose(c, perm_c);
    eval(x, t, c, tc);
  }

  // The values of t in row-major order, computed by hand.
  std::vector<double> t_values() const {
    std::vector<int64_t> rs(R);
    for (int64_t d = R - 1, s = 1; d >= 0; --d) {
      rs[d] = s;
      s *= S[d];
    }
    std::vector<double> out(n);
    std::vector<int> idx(R, 0);
    for (int f = 0; f < n; ++f) {
      int64_t src = 0;
      for (int i = 0; i < R; ++i) src += idx[i] * rs[perm[i]];
      out[f] = double(src);
      for (int i = R - 1; i >= 0; --i) {
        if (++idx[i] < St[i]) break;
        idx[i] = 0;
      }
    }
    return out;
  }
  // The compact axis of tc of the given size (3 or 5), and its axis in t.
  int compact_axis_of_size(int size) const {
    Shape sc = squeezed(St);
    for (int j = 0; j < static_cast<int>(sc.size()); ++j) {
      if (sc[j] == size) return j;
    }
    return -1;
  }
  // A size-1 axis of t (and how many large axes come before it).
  int unit_axis(int* before) const {
    for (int i = R / 2; i < R; ++i) {
      if (St[i] == 1) {
        *before = 0;
        for (int j = 0; j < i; ++j) *before += St[j] != 1;
        return i;
      }
    }
    return -1;
  }
};

class Rank : public ::testing::TestWithParam<std::tuple<int, bool>> {
 protected:
  int R() const { return std::get<0>(GetParam()); }
  bool fused() const { return std::get<1>(GetParam()); }
};

TEST_P(Rank, ViewsReadInRowMajorOrder) {
  Fusion f(fused());
  Case k(R());
  ASSERT_EQ(k.t.ndim(), size_t(R()));
  ASSERT_FALSE(k.t.flags().row_contiguous);
  loom::testing::expect_array(k.t, k.St, k.t_values(), 0);
  loom::testing::expect_array(flatten(k.t), {k.n}, k.t_values(), 0);
  loom::testing::expect_array(reshape(k.t, {k.n}), {k.n}, k.t_values(), 0);
  expect_same(copy(k.t), k.tc);
  expect_same(astype(k.t, int32), k.tc);
  expect_same(astype(k.t, float64), k.tc);
}

TEST_P(Rank, ElementwiseChainsOverTransposedInputs) {
  Fusion f(fused());
  Case k(R());
  auto chain = [](const array& a) { return exp(a * 0.001f) * 2.0f + a - sqrt(a + 1.0f); };
  array y = chain(k.t);
  std::vector<double> want;
  for (double v : k.t_values()) want.push_back(std::exp(v * 0.001) * 2.0 + v - std::sqrt(v + 1.0));
  loom::testing::expect_array(y, k.St, want, 1e-5);
  // Two transposed operands, a broadcast one, a where.
  Shape bs(R(), 1);
  const int j5 = k.compact_axis_of_size(5);
  bs[k.big_axes[j5]] = 5;
  Shape bsc(10, 1);
  bsc[j5] = 5;
  array b = astype(arange(5), float32);
  auto mixed = [](const array& a, const array& a2, const array& bb) {
    array u = a * 0.5f + bb;
    return where(u > 700.0f, u - a2, tanh(u * 0.01f) + bb * a2);
  };
  expect_same(mixed(k.t, transpose(k.x * -1.0f, k.perm), reshape(b, bs)),
              mixed(k.tc, transpose(k.c * -1.0f, k.perm_c), reshape(b, bsc)));
  // A chain over a contiguous array and over a slice with steps.
  expect_same(chain(k.x), chain(k.c));
  Shape start(R(), 0), stop = k.St, step(R(), 1);
  const int j3 = k.compact_axis_of_size(3);
  step[k.big_axes[j3]] = 2;
  Shape startc(10, 0), stopc = squeezed(k.St), stepc(10, 1);
  stepc[j3] = 2;
  expect_same(chain(slice(k.t, start, stop, step)), chain(slice(k.tc, startc, stopc, stepc)));
  start[k.big_axes[j3]] = 1;
  startc[j3] = 1;
  expect_same(negative(slice(k.t, start, stop, step)), negative(slice(k.tc, startc, stopc, stepc)));
}

TEST_P(Rank, Reductions) {
  Fusion f(fused());
  Case k(R());
  const std::vector<int>& ax = k.big_axes;
  int before = 0;
  const int u = k.unit_axis(&before);
  expect_same(sum(k.t, {ax[1], ax[4], u}), sum(k.tc, {1, 4}));
  expect_same(sum(k.t, {ax[9]}), sum(k.tc, {9}));
  expect_same(sum(k.t * 1.0f, {ax[0]}), sum(k.tc, {0}));
  expect_same(max(k.t, {ax[2], ax[3], ax[5], ax[7]}), max(k.tc, {2, 3, 5, 7}));
  expect_same(min(k.t, std::vector<int>{ax[6]}, true), min(k.tc, std::vector<int>{6}, true));
  expect_same(prod(k.t * 0.0001f + 1.0f, {ax[8], ax[0]}), prod(k.tc * 0.0001f + 1.0f, {8, 0}));
  expect_same(mean(k.t), mean(k.tc));
  EXPECT_DOUBLE_EQ(sum(k.t).item<double>(), double(k.n) * (k.n - 1) / 2);
  expect_same(argmax(k.t, ax[3]), argmax(k.tc, 3));
  expect_same(argmin(k.t * -1.0f, ax[7]), argmin(k.tc * -1.0f, 7));
  expect_same(logsumexp(k.t * 0.01f, {ax[1], ax[2]}), logsumexp(k.tc * 0.01f, {1, 2}));
  expect_same(softmax(k.t * 0.01f, ax[5]), softmax(k.tc * 0.01f, 5));
  expect_same(softmax(k.t * 0.01f, ax[9] - R()), softmax(k.tc * 0.01f, -1));
  expect_same(var(k.t, {ax[4]}), var(k.tc, {4}));
  expect_same(any(k.t > 1000.0f, {ax[4], ax[9]}), any(k.tc > 1000.0f, {4, 9}));
  for (int j : {0, 3, 9}) {
    expect_same(cumsum(k.t, ax[j]), cumsum(k.tc, j));
    expect_same(cumsum(k.t, ax[j], true, false), cumsum(k.tc, j, true, false));
  }
}

TEST_P(Rank, ShapeOps) {
  Fusion f(fused());
  Case k(R());
  const std::vector<int>& ax = k.big_axes;
  expect_same(reshape(k.t, squeezed(k.St)), k.tc);
  Shape other = k.St;
  std::reverse(other.begin(), other.end());
  expect_same(reshape(reshape(k.t, other) + 0.0f, {k.n}), reshape(k.tc, {k.n}));
  expect_same(squeeze(k.t), k.tc);
  expect_same(expand_dims(k.t, {0, R() + 1}), k.tc);
  expect_same(transpose(k.t), transpose(k.tc));
  expect_same(swapaxes(k.t, ax[1], ax[8]), swapaxes(k.tc, 1, 8));
  // Broadcasting a size-1 axis to 4.
  int before = 0;
  const int u = k.unit_axis(&before);
  Shape bshape = k.St;
  bshape[u] = 4;
  Shape bshape_c = squeezed(k.St);
  bshape_c.insert(bshape_c.begin() + before, 4);
  expect_same(broadcast_to(k.t, bshape), broadcast_to(expand_dims(k.tc, before), bshape_c));
  expect_same(broadcast_to(k.t, bshape) * 3.0f, broadcast_to(expand_dims(k.tc, before), bshape_c) * 3.0f);
  expect_same(concatenate({k.t, k.t * 2.0f, k.t}, ax[2]), concatenate({k.tc, k.tc * 2.0f, k.tc}, 2));
  expect_same(stack({k.t, k.t}, ax[9] + 1), stack({k.tc, k.tc}, 10));
  expect_same(pad(k.t, {ax[0], ax[6]}, {1, 0}, {2, 3}, array(-1.0f)), pad(k.tc, {0, 6}, {1, 0}, {2, 3}, array(-1.0f)));
  expect_same(repeat(k.t, 3, ax[5]), repeat(k.tc, 3, 5));
  std::vector<int> reps(R(), 1), reps_c(10, 1);
  reps[ax[4]] = 2;
  reps_c[4] = 2;
  expect_same(tile(k.t, reps), tile(k.tc, reps_c));
  const int j2 = k.compact_axis_of_size(2);
  auto parts = split(k.t, 2, ax[j2]);
  auto parts_c = split(k.tc, 2, j2);
  expect_same(parts[1], parts_c[1]);
  Shape start(R(), 0), stop = k.St, step(R(), 1);
  const int j5 = k.compact_axis_of_size(5);
  start[k.big_axes[j5]] = 4;
  stop[k.big_axes[j5]] = 0;
  step[k.big_axes[j5]] = -3;
  Shape startc(10, 0), stopc = squeezed(k.St), stepc(10, 1);
  startc[j5] = 4;
  stopc[j5] = 0;
  stepc[j5] = -3;
  expect_same(slice(k.t, start, stop, step), slice(k.tc, startc, stopc, stepc));
  Shape ustart(R(), 0), ustop = k.St;
  ustop[k.big_axes[j5]] = 2;
  Shape ustart_c(10, 0), ustop_c = squeezed(k.St);
  ustop_c[j5] = 2;
  Shape ushape = k.St;
  ushape[k.big_axes[j5]] = 2;
  Shape ushape_c = squeezed(ushape);
  array upd = reshape(astype(arange(k.n / 5 * 2), float32), ushape) * -1.0f;
  expect_same(slice_update(k.t, upd, ustart, ustop), slice_update(k.tc, reshape(upd, ushape_c), ustart_c, ustop_c));
}

TEST_P(Rank, Indexing) {
  Fusion f(fused());
  Case k(R());
  const int j5 = k.compact_axis_of_size(5), j3 = k.compact_axis_of_size(3);
  const int a5 = k.big_axes[j5], a3 = k.big_axes[j3];
  array idx = array({4, 0, 2, 2, -1, 3}, int32);
  expect_same(take(k.t, idx, a5), take(k.tc, idx, j5));
  expect_same(take(k.t, reshape(idx, {2, 1, 3}), a5), take(k.tc, reshape(idx, {2, 1, 3}), j5));
  expect_same(take(k.t, array({2, 0, 1}, int32), a3), take(k.tc, array({2, 0, 1}, int32), j3));
  // Indices of t's shape, values along the size-5 axis.
  Shape sc = squeezed(k.St);
  array ind_c = astype(reshape(arange(0, k.n, 1), sc) * 7 % 5, int32);
  array ind = reshape(ind_c, k.St);
  expect_same(take_along_axis(k.t, ind, a5), take_along_axis(k.tc, ind_c, j5));
  // Transposed indices too.
  Shape st0(R(), 0), st1 = k.St, st2(R(), 1);
  st1[k.big_axes[0]] *= 2;
  st2[k.big_axes[0]] = 2;
  array ind_t = slice(repeat(ind, 2, k.big_axes[0]), st0, st1, st2);
  ind_t.eval();
  ASSERT_FALSE(ind_t.flags().row_contiguous);
  expect_same(take_along_axis(k.t, ind_t, a5), take_along_axis(k.tc, ind_c, j5));
  Shape one = k.St;
  one[a5] = 1;
  Shape one_c = squeezed(k.St);
  one_c[j5] = 1;
  array first = astype(reshape(arange(0, k.n / 5, 1), one_c) % 5, int32);
  array vals_c = reshape(astype(arange(0, k.n / 5, 1), float32), one_c) * -1.0f;
  expect_same(put_along_axis(k.t, reshape(first, one), reshape(vals_c, one), a5),
              put_along_axis(k.tc, first, vals_c, j5));
  expect_same(scatter_add_axis(k.t, ind, k.t * 0.5f, a5), scatter_add_axis(k.tc, ind_c, k.tc * 0.5f, j5));
  array sidx = array({0, 2, 0, 4}, int32);
  Shape us = take(k.t, sidx, a5).shape();
  array upd = reshape(astype(arange(0, k.n / 5 * 4, 1), float32), us);
  expect_same(scatter_add_take(k.t, sidx, upd, a5), scatter_add_take(k.tc, sidx, reshape(upd, squeezed(us)), j5));
}

TEST_P(Rank, Sorting) {
  Fusion f(fused());
  Case k(R());
  const int j5 = k.compact_axis_of_size(5), j3 = k.compact_axis_of_size(3);
  const int a5 = k.big_axes[j5], a3 = k.big_axes[j3];
  // Values that are out of order along every axis.
  array v = sin(k.t * 1.3f), vc = sin(k.tc * 1.3f);
  expect_same(sort(v, a5), sort(vc, j5));
  expect_same(sort(v, a3), sort(vc, j3));
  expect_same(argsort(v, a5), argsort(vc, j5));
  expect_same(argsort(v, k.big_axes[0]), argsort(vc, 0));
  expect_same(topk(v, 2, a5), topk(vc, 2, j5));
  expect_same(partition(v, 1, a3), partition(vc, 1, j3));
  expect_same(sort(v, k.big_axes[9] - R()), sort(vc, -1));
}

TEST_P(Rank, MatmulBatchAxes) {
  Fusion f(fused());
  const int r = R();
  // a: batch axes (r - 2 of them, three of size 2, one of size 3), then (2, 4); b: the same batch axes
  // but broadcast along two of them, then (4, 3). Both transposed in their batch axes.
  Shape sa(r, 1), sb(r, 1);
  sa[1] = 2, sa[r / 2] = 3, sa[r - 4] = 2, sa[r - 3] = 2;
  sb[r / 2] = 3, sb[r - 3] = 2;
  sa[r - 2] = 2, sa[r - 1] = 4, sb[r - 2] = 4, sb[r - 1] = 3;
  int na = 1, nb = 1;
  for (int d : sa) na *= d;
  for (int d : sb) nb *= d;
  std::vector<int> p(r);
  std::iota(p.begin(), p.end(), 0);
  std::swap(p[1], p[r - 4]);
  array a = transpose(reshape(astype(arange(na), float32) * 0.1f - 1.0f, sa), p);
  array b = transpose(reshape(astype(arange(nb), float32) * 0.2f - 0.5f, sb), p);
  array y = matmul(a, b);
  // The same product over one batch axis.
  Shape full = y.shape();
  full[r - 2] = 4, full[r - 1] = 3;
  array bb = broadcast_to(b, full);
  const int batch = static_cast<int>(y.size()) / 6;
  array ref = matmul(reshape(a, {batch, 2, 4}), reshape(bb, {batch, 4, 3}));
  ASSERT_EQ(y.ndim(), size_t(r));
  expect_same(reshape(y, {batch, 2, 3}), ref);
  // And by hand for one element: batch 5, row 1, column 2.
  auto av = reshape(a, {batch, 2, 4}).to_vector<double>(), bv = reshape(bb, {batch, 4, 3}).to_vector<double>();
  double want = 0;
  for (int q = 0; q < 4; ++q) want += av[5 * 8 + 1 * 4 + q] * bv[5 * 12 + q * 3 + 2];
  EXPECT_NEAR(reshape(y, {batch, 2, 3}).to_vector<double>()[5 * 6 + 1 * 3 + 2], want, 1e-4);
}

TEST_P(Rank, Random) {
  Fusion f(fused());
  Case k(R());
  array key = random::key(42);
  expect_same(random::uniform(k.S, key), random::uniform(squeezed(k.S), key), 0);
  expect_same(random::normal(k.S, float32, 0.0f, 1.0f, key), random::normal(squeezed(k.S), float32, 0.0f, 1.0f, key),
              0);
  expect_same(random::bits(k.St, key), random::bits(squeezed(k.St), key), 0);
}

INSTANTIATE_TEST_SUITE_P(Axes, Rank,
                         ::testing::Combine(::testing::Values(20, 33, 64), ::testing::Values(true, false)),
                         [](const auto& info) {
                           return std::to_string(std::get<0>(info.param)) + "_axes_fusion_" +
                                  (std::get<1>(info.param) ? "on" : "off");
                         });

// The strided iterator itself: seek, next and advance agree with offsets computed by hand, at 40
// axes, for two operands (row-major and reversed strides), from any start.
TEST(RankWalker, SeekNextAndAdvanceAgree) {
  const int R = 40;
  Shape S(R, 1);
  for (int k = 0; k < 8; ++k) S[k * 5 + 2] = k % 3 == 0 ? 3 : 2;
  int64_t n = 1;
  for (int d : S) n *= d;
  std::array<Strides, 2> st{Strides(R, 0), Strides(R, 0)};
  for (int64_t d = R - 1, s = 1; d >= 0; --d) st[0][d] = s, s *= S[d];
  for (int64_t d = 0, s = 1; d < R; ++d) st[1][d] = -s, s *= S[d];
  auto by_hand = [&](int64_t pos, int k) {
    int64_t off = 0;
    for (int d = R - 1; d >= 0; --d) {
      off += (pos % S[d]) * st[k][d];
      pos /= S[d];
    }
    return off;
  };
  for (int64_t start : {int64_t(0), int64_t(1), int64_t(7), n / 2 + 3, n - 1}) {
    kernels::Walker<2> w(S, st, start);
    for (int64_t p = start; p < std::min(n, start + 300); ++p, w.next()) {
      ASSERT_EQ(w.off[0], p) << p;
      ASSERT_EQ(w.off[1], by_hand(p, 1)) << p;
    }
    for (int64_t step : {int64_t(1), int64_t(2), int64_t(5), int64_t(37), int64_t(200)}) {
      kernels::Walker<2> a(S, st, start);
      for (int64_t p = start; p + step < n; p += step) {
        a.advance(step);
        ASSERT_EQ(a.off[0], p + step);
        ASSERT_EQ(a.off[1], by_hand(p + step, 1));
      }
    }
  }
  // Walking only the axes before the last (rows): 20 axes of the same shape.
  kernels::Walker<1> rows(S, st[0], 3, 20);
  ASSERT_EQ(rows.ndim(), 20);
  const int64_t inner = st[0][19];  // elements per position of the first 20 axes
  for (int64_t q = 3; q < n / inner; ++q, rows.next()) ASSERT_EQ(rows.off[0], q * inner);
  ASSERT_EQ(rows.off[0], 0);  // wrapped around
}

// Enough elements to split over threads and over several fusion blocks (each starting mid-array).
TEST(RankLarge, ThreadedWalksStartAnywhere) {
  const int R = 40;
  Shape S(R, 1);
  for (int k = 0; k < 16; ++k) S[k * (R - 1) / 15] = 2;
  std::vector<int> p(R);
  for (int i = 0; i < R; ++i) p[i] = (R - 1 - i + 5) % R;
  const int threads = get_num_threads();
  set_num_threads(2);
  for (bool on : {true, false}) {
    Fusion f(on);
    array x = astype(reshape(arange(1 << 16), S), float32);
    array t = transpose(x, p);
    array c = reshape(x, squeezed(S));
    std::vector<int> pc;
    for (int i = 0; i < R; ++i) {
      if (S[p[i]] == 1) continue;
      int rank = 0;
      for (int d = 0; d < p[i]; ++d) rank += S[d] != 1;
      pc.push_back(rank);
    }
    array tc = transpose(c, pc);
    expect_same(exp(t * 1e-5f) + t * 2.0f, exp(tc * 1e-5f) + tc * 2.0f);
    expect_same(copy(t), tc);
    expect_same(t + reshape(tc * 1.0f, t.shape()), tc + tc);
    std::vector<int> large;
    for (int i = 0; i < R; ++i) {
      if (S[p[i]] != 1) large.push_back(i);
    }
    expect_same(sum(t, {large[0], 1, large[15]}), sum(tc, {0, 15}));
  }
  set_num_threads(threads);
}

}  // namespace

// Runs alone (a group of size 1) and under mpirun -np 2 / -np 3; every assertion holds for any size.
#include <chrono>
#include <cstdlib>
#include <string>
#include <thread>

#include "../test_utils.h"
#include "loom/distributed/distributed.h"

using namespace loom;
using loom::testing::expect_array;
namespace dist = loom::distributed;

TEST(Distributed, InitTwiceReturnsTheSameWorld) {
  auto a = dist::init(), b = dist::init();
  EXPECT_EQ(a.impl(), b.impl());
  EXPECT_GE(a.size(), 1);
  EXPECT_GE(a.rank(), 0);
  EXPECT_LT(a.rank(), a.size());
  EXPECT_EQ(dist::is_available(), bool(LOOM_TEST_WITH_MPI));
}

TEST(Distributed, StrictInitNeedsMPIAndALauncher) {
  auto g = dist::init();
  if (!LOOM_TEST_WITH_MPI) {
    EXPECT_EQ(g.size(), 1);
    EXPECT_THROW_MSG(dist::init(true), std::runtime_error, "built without MPI (LOOM_WITH_MPI=OFF)");
  } else if (std::getenv("OMPI_COMM_WORLD_SIZE") || std::getenv("PMI_RANK")) {
    EXPECT_EQ(dist::init(true).impl(), g.impl());
  } else {
    EXPECT_THROW_MSG(dist::init(true), std::runtime_error, "not started by an MPI launcher");
  }
}

TEST(Distributed, EveryCollectiveOfASizeOneGroupIsItsInput) {
  auto g = dist::init();
  if (g.size() != 1) GTEST_SKIP() << "runs alone";
  EXPECT_EQ(g.rank(), 0);
  EXPECT_EQ(g.split(3).size(), 1);
  array x = reshape(arange(0.0, 6.0, 1.0, float32), {2, 3});
  eval(x);
  for (const array& y : {dist::all_sum(x), dist::all_mean(x), dist::all_max(x), dist::all_min(x), dist::all_gather(x),
                         dist::sum_scatter(x), dist::all_sum(x, g.split(0))}) {
    EXPECT_EQ(y.id(), x.id());
  }
  expect_array(dist::all_sum_flat({x, ones({2}, float32)}), {8}, {0, 1, 2, 3, 4, 5, 1, 1});
  expect_array(dist::all_mean_flat({x}), {6}, {0, 1, 2, 3, 4, 5});
  for (Dtype d : all_dtypes) {
    array v = astype(array({1.0, 0.0, 3.0}, float64), d);
    expect_array(dist::all_max(v), {3}, {1, 0, d == bool_ ? 1.0 : 3.0});
  }
  EXPECT_THROW_MSG(dist::send(x, 0), std::invalid_argument, "cannot send to itself");
  EXPECT_THROW_MSG(dist::recv_like(x, 0), std::invalid_argument, "cannot receive from itself");
}

TEST(Distributed, AllSumEveryDtype) {
  auto g = dist::init();
  const int n = g.size(), r = g.rank();
  double tri = n * (n + 1) / 2.0;
  for (Dtype d : {uint8, int32, int64, float16, bfloat16, float32, float64}) {
    array x = astype(array({1.0, 2.0, 3.0}, float64) * double(r + 1), d);
    array s = dist::all_sum(x);
    EXPECT_EQ(s.dtype(), d);
    expect_array(s, {3}, {tri, 2 * tri, 3 * tri});
  }
  array b = dist::all_sum(array({r == 0, false}));  // bool: logical or
  expect_array(b, {2}, {1, 0});
}

TEST(Distributed, AllSumOfAStridedViewAndSizeOneIsFree) {
  auto g = dist::init();
  array m = reshape(arange(0.0, 6.0, 1.0, float32), {2, 3});
  array s = dist::all_sum(transpose(m));
  double n = g.size();
  expect_array(s, {3, 2}, {0, 3 * n, 1 * n, 4 * n, 2 * n, 5 * n});
  if (g.size() == 1) {
    array x = ones({4});
    EXPECT_EQ(dist::all_sum(x).id(), x.id());  // no node, no copy
  }
}

TEST(Distributed, AllMaxMinAndGather) {
  auto g = dist::init();
  const int n = g.size(), r = g.rank();
  array x = array({float(r), float(-r)});
  expect_array(dist::all_max(x), {2}, {double(n - 1), 0});
  expect_array(dist::all_min(x), {2}, {0, double(1 - n)});
  array rows = full({1, 2}, array(float(r)));
  std::vector<double> want;
  for (int i = 0; i < n; ++i) want.insert(want.end(), {double(i), double(i)});
  expect_array(dist::all_gather(rows), {n, 2}, want);
  EXPECT_THROW_MSG(dist::all_gather(array(1.0f)), std::invalid_argument, "at least 1 dimension");
}

// sum_scatter: rank r holds x[i, j] = (r + 1) (3 i + j) over 2n rows; rank r gets rows 2r, 2r + 1 of
// the sum over ranks, S (3 i + j) with S = n (n + 1) / 2 (at most 230 for 4 ranks: exact in every dtype).
TEST(Distributed, SumScatterEveryDtype) {
  auto g = dist::init();
  const int n = g.size(), r = g.rank();
  const double S = n * (n + 1) / 2.0;
  std::vector<double> xs, want;
  for (int i = 0; i < 2 * n; ++i) {
    for (int j = 0; j < 3; ++j) {
      xs.push_back((r + 1) * (3 * i + j));
      if (i / 2 == r) want.push_back(S * (3 * i + j));
    }
  }
  const array x64 = array(xs, {2 * n, 3});
  for (Dtype d : {uint8, int32, int64, float16, bfloat16, float32, float64}) {
    SCOPED_TRACE(to_string(d));
    array y = dist::sum_scatter(astype(x64, d));
    EXPECT_EQ(y.dtype(), d);
    expect_array(y, {2, 3}, want);
  }
  // complex64: both parts summed.
  array c = dist::sum_scatter(multiply(astype(x64, complex64), array(complex64_t(1.0f, -2.0f))));
  ASSERT_EQ(c.dtype(), complex64);
  expect_array(real(c), {2, 3}, want);
  std::vector<double> want_im;
  for (double v : want) want_im.push_back(-2 * v);
  expect_array(imag(c), {2, 3}, want_im);
  // bool: a logical or; only rank 0 sets its own block's first element (and every rank the last).
  std::vector<float> flags(2 * n, 0.0f);
  flags[2 * n - 1] = 1;
  if (r == 0) flags[0] = 1;
  array bits = astype(array(flags, {2 * n}), bool_);
  expect_array(dist::sum_scatter(bits), {2}, {r == 0 ? 1.0 : 0.0, r == n - 1 ? 1.0 : 0.0});
  // A strided view (transposed) is made contiguous first; more axes keep their shape.
  array t = transpose(reshape(astype(x64, float32), {2 * n, 3}));  // (3, 2n)
  array back = dist::sum_scatter(transpose(t));
  expect_array(back, {2, 3}, want);
  array cube = dist::sum_scatter(reshape(astype(x64, float32), {2 * n, 3, 1}));
  expect_array(cube, {2, 3, 1}, want);
}

TEST(Distributed, SumScatterAndAllGatherAreEachOthersGradients) {
  // L_r = sum(w_r * sum_scatter(x_r)), w_r = r + 1 everywhere. The total loss sum_r L_r has
  // d/dx_r = all_gather(w): block k of every rank's gradient is k + 1.
  auto g = dist::init();
  const int n = g.size(), r = g.rank();
  const array w = full({2, 3}, array(float(r + 1)));
  array x = reshape(arange(0.0, 6.0 * n, 1.0, float32), {2 * n, 3});
  array gx = grad([&](const array& v) { return sum(w * dist::sum_scatter(v)); })(x);
  std::vector<double> want;
  for (int i = 0; i < 2 * n; ++i) want.insert(want.end(), 3, double(i / 2 + 1));
  expect_array(gx, {2 * n, 3}, want);
  // all_gather's gradient is sum_scatter's: L_r = sum((r + 1) c * all_gather(v_r)) has
  // d/dv_r = S * block r of c, S = n (n + 1) / 2.
  const array c = reshape(arange(0.0, 6.0 * n, 1.0, float32), {2 * n, 3});
  array gv = grad([&](const array& v) { return sum(c * float(r + 1) * dist::all_gather(v)); })(ones({2, 3}));
  std::vector<double> want_v;
  for (int k = 0; k < 6; ++k) want_v.push_back(n * (n + 1) / 2.0 * (6 * r + k));
  expect_array(gv, {2, 3}, want_v);
  // jvp: sum_scatter of the tangent; the tangent x gives the value itself.
  auto [out, tan] = jvp([&](const array& v) { return dist::sum_scatter(v); }, x, x);
  const std::vector<float> ov = out.to_vector<float>();
  expect_array(tan, {2, 3}, std::vector<double>(ov.begin(), ov.end()));
}

TEST(Distributed, SumScatterRejectsUnevenAxes) {
  auto g = dist::init();
  const int n = g.size();
  EXPECT_THROW_MSG(dist::sum_scatter(array(1.0f)), std::invalid_argument, "[sum_scatter] () cannot be split");
  if (n == 1) {
    expect_array(dist::sum_scatter(ones({3})), {3}, {1, 1, 1});
    return;
  }
  EXPECT_THROW_MSG(dist::sum_scatter(ones({2 * n + 1, 2})), std::invalid_argument,
                   "axis 0 must exist and be a multiple of the group size");
  // Ranks whose inputs disagree all throw, naming each rank's collective.
  EXPECT_THROW_MSG(eval(dist::sum_scatter(ones({n, g.rank() + 2}))), std::runtime_error,
                   "rank 0: sum_scatter float32 (" + std::to_string(n) + ",2); rank 1: sum_scatter float32 (" +
                       std::to_string(n) + ",3)");
}

TEST(Distributed, SendRecvRing) {
  auto g = dist::init();
  const int n = g.size(), r = g.rank();
  if (n == 1) {
    EXPECT_THROW_MSG(dist::send(ones({2}), 0), std::invalid_argument, "cannot send to itself");
    EXPECT_THROW_MSG(dist::recv({2}, float32, 0), std::invalid_argument, "cannot receive from itself");
    EXPECT_THROW_MSG(dist::send(ones({2}), 1), std::invalid_argument, "outside the group of size 1");
    return;
  }
  // Even ranks send first, odd ranks receive first: no deadlock for any size.
  array mine = full({3}, array(float(r)));
  int next = (r + 1) % n, prev = (r + n - 1) % n;
  array got = zeros({3});
  if (r % 2 == 0) {
    dist::send(mine, next).eval();
    got = dist::recv({3}, float32, prev);
    got.eval();
  } else {
    got = dist::recv_like(mine, prev);
    got.eval();
    dist::send(mine, next).eval();
  }
  expect_array(got, {3}, {double(prev), double(prev), double(prev)});
  EXPECT_THROW_MSG(dist::send(mine, n), std::invalid_argument, "outside the group");
}

// send_recv: every rank sends a large array (past MPI's eager limit, so a plain send would wait for
// its receiver) to the next rank while receiving the previous one's: a ring that blocks with send
// before recv on every rank runs at once. It pairs with a peer's plain recv and send too; what a
// peer sends that this rank did not expect is taken and named; ordered messages start in their
// chain's order; agree names each rank's description when they differ.
TEST(Distributed, SendRecvExchangesOrderedMessagesAndAgree) {
  auto g = dist::init();
  const int n = g.size(), r = g.rank();
  EXPECT_TRUE(dist::agree("alone or not").item<bool>());
  if (n == 1) {
    EXPECT_THROW_MSG(dist::send_recv(ones({2}), 0, {2}, float32, 0), std::invalid_argument,
                     "[send_recv] rank 0 cannot send to itself");
    return;
  }
  EXPECT_THROW_MSG(dist::send_recv(ones({2}), n, {2}, float32, 0), std::invalid_argument,
                   "[send_recv] destination rank " + std::to_string(n) + " is outside the group of size");
  EXPECT_THROW_MSG(dist::send_recv(ones({2}), (r + 1) % n, {-2}, float32, (r + n - 1) % n), std::invalid_argument,
                   "[send_recv] negative dimension in shape (-2)");
  const int next = (r + 1) % n, prev = (r + n - 1) % n, big = 1 << 20;
  const array mine = full({big}, float(r));
  array got = dist::send_recv(mine, next, {big}, float32, prev);
  eval(got);
  EXPECT_EQ(min(got).item<float>(), float(prev));
  EXPECT_EQ(max(got).item<float>(), float(prev));
  // Rank 0 exchanges with rank 1, which does a plain recv then send.
  if (r == 0) {
    array back = dist::send_recv(full({big}, 3.0f), 1, {4}, int32, 1);
    expect_array(back, {4}, {5, 5, 5, 5});
  } else if (r == 1) {
    array in = dist::recv({big}, float32, 0);
    eval(in);
    EXPECT_EQ(sum(in).item<float>(), 3.0f * big);
    eval(dist::send(full({4}, 5, int32), 0));
  }
  // A shape that differs: the receiver throws, naming both; the sender is not left waiting.
  if (r == 0) {
    EXPECT_THROW_MSG(eval(dist::send_recv(ones({3}), 1, {4}, float32, 1)), std::runtime_error,
                     "[send_recv] rank 0 expects float32 (4) from rank 1, which sends float32 (5)");
  } else if (r == 1) {
    array back = dist::send_recv(ones({5}), 0, {3}, float32, 0);
    eval(back);
    expect_array(back, {3}, {1, 1, 1});
  }
  // A chain decides the order: rank 1 sends (a value it computes first) and then receives, as rank 0
  // receives and then sends. Unchained, rank 1's receive (no inputs) would start before its send
  // and both ranks would wait to receive.
  if (r == 0) {
    array in = dist::recv({4}, float32, 1);
    eval(dist::send(in * 2.0f, 1, {in}));
    expect_array(in, {4}, {2, 2, 2, 2});
  } else if (r == 1) {
    array out = dist::send(exp(zeros({4})) * 2.0f, 0);
    array back = dist::recv({4}, float32, 0, {out});
    expect_array(back, {4}, {4, 4, 4, 4});
  }
  // agree: the same description passes; different ones throw on every rank, naming each.
  EXPECT_TRUE(dist::agree("the same plan").item<bool>());
  std::string what;
  try {
    eval(dist::agree(r == 0 ? "plan A" : "plan B"));
  } catch (const std::runtime_error& e) {
    what = e.what();
  }
  EXPECT_NE(what.find("[agree] the ranks disagree: rank 0: plan A; rank 1: plan B"), std::string::npos) << what;
  dist::barrier();
}

TEST(Distributed, SplitByParity) {
  auto g = dist::init();
  auto sub = g.split(g.rank() % 2);
  int expected = (g.size() + (g.rank() % 2 == 0 ? 1 : 0)) / 2;
  EXPECT_EQ(sub.size(), expected);
  array s = dist::all_sum(array(1.0f), sub);
  EXPECT_FLOAT_EQ(s.item<float>(), float(expected));
}

TEST(Distributed, GradientThroughAllSum) {
  // L = sum(w * all_sum(x)) on each rank; the total loss sum_r L_r has d/dx = all_sum(w) = n w.
  auto g = dist::init();
  array w({1.0f, -2.0f});
  auto gx = grad([&](const array& x) { return sum(w * dist::all_sum(x)); })(array({0.5f, 0.25f}));
  double n = g.size();
  expect_array(gx, {2}, {n, -2 * n});
}

TEST(Distributed, GradientThroughFlatAllSumReachesEachPartInItsShape) {
  // L_r = sum(w_r * all_sum_flat({x * x, transpose(y)})) with w_r = (r + 1) * (1, ..., 10): the
  // total loss has d/dx = 2 x * c[0:4] and d/dy = c[4:10] laid out as transpose(y), c = all_sum(w).
  auto g = dist::init();
  const double n = g.size(), ranks = n * (n + 1) / 2;  // sum over r of (r + 1)
  array w = arange(1.0, 11.0, 1.0, float32) * float(g.rank() + 1);
  array x({1.0f, -2.0f, 0.5f, 3.0f}, {2, 2}), y({1.0f, 2.0f, 3.0f, 4.0f, 5.0f, 6.0f}, {2, 3});
  auto gr = grad(
      [&](const std::vector<array>& p) { return sum(w * dist::all_sum_flat({p[0] * p[0], transpose(p[1])})); },
      {0, 1})({x, y});
  expect_array(gr[0], {2, 2}, {2 * 1 * ranks, -4 * 2 * ranks, 1 * 3 * ranks, 6 * 4 * ranks});
  // transpose(y) is (3, 2); its flattening holds y[0][0], y[1][0], y[0][1], ... at c[4..9].
  expect_array(gr[1], {2, 3}, {5 * ranks, 7 * ranks, 9 * ranks, 6 * ranks, 8 * ranks, 10 * ranks});
}

TEST(Distributed, AllMeanDividesBySizeAndRejectsIntegers) {
  auto g = dist::init();
  const double n = g.size(), mean_rank = (n - 1) / 2.0;
  for (Dtype d : {float16, bfloat16, float32, float64}) {
    array x = astype(array({1.0, 2.0, -4.0}, float64) + double(g.rank()), d);
    array m = dist::all_mean(x);
    EXPECT_EQ(m.dtype(), d);
    expect_array(m, {3}, {1 + mean_rank, 2 + mean_rank, -4 + mean_rank}, 1e-2);
  }
  // In place when nothing else holds the input, from a held array otherwise: the same values.
  array held = arange(0.0, 1000.0, 1.0, float32) * float(g.rank() + 1);
  array m1 = dist::all_mean(held), m2 = dist::all_mean(held * 1.0f);
  eval(m1, m2);
  EXPECT_FLOAT_EQ(held.to_vector<float>()[10], 10.0f * (g.rank() + 1));
  EXPECT_FLOAT_EQ(m1.to_vector<float>()[10], float(10 * (n + 1) / 2));
  EXPECT_FLOAT_EQ(m2.to_vector<float>()[10], float(10 * (n + 1) / 2));
  // The result takes the buffer of an input that nothing else reads (no second buffer while the
  // reduction runs); a transposed input is copied into the result and divided there.
  array m3 = dist::all_mean(held * 1.0f);
  clear_cache();  // a cached block up to 8 KiB larger would serve the result and count as held
  const size_t base = get_active_memory();
  reset_peak_memory();
  eval(m3);
  if (g.size() > 1) EXPECT_LE(get_peak_memory() - base, 1000 * sizeof(float) + 256);
  EXPECT_FLOAT_EQ(m3.to_vector<float>()[999], float(999 * (n + 1) / 2));
  array t = dist::all_mean(transpose(reshape(held, {10, 100})));
  EXPECT_FLOAT_EQ(t.to_vector<float>()[1], float(100 * (n + 1) / 2));  // t[0][1] = held[100]
  EXPECT_FLOAT_EQ(t.to_vector<float>()[999], float(999 * (n + 1) / 2));
  // d/dx of sum_r sum(w * all_mean(x)) is all_mean(w) = w.
  array w({1.0f, -2.0f});
  auto gx = grad([&](const array& x) { return sum(w * dist::all_mean(x)); })(array({0.5f, 0.25f}));
  expect_array(gx, {2}, {1, -2});
  try {
    dist::all_mean(array({1, 2}));
    ADD_FAILURE() << "all_mean of int32 did not throw";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("[all_mean]"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("int32"), std::string::npos) << e.what();
  }
}

TEST(Distributed, LargeAllSumsGoInPieces) {
  // 10 MB of float32 (three 4 MiB pieces, the last one partial) and 6 MB of float64, in place and
  // from a held array: every piece, and the elements on both sides of each boundary, are summed.
  auto g = dist::init();
  const double n = g.size();
  for (Dtype d : {float32, float64}) {
    const int len = d == float32 ? 2621441 : 786433;
    array held = astype(arange(0.0, double(len), 1.0, float32) * float(g.rank() + 1), d);
    array out_of_place = dist::all_sum(held);
    array in_place = dist::all_sum(held * 1.0f);
    eval(out_of_place, in_place);
    const size_t piece = (size_t(4) << 20) / held.itemsize();
    for (const array& s : {out_of_place, in_place}) {
      auto v = astype(s, float64).to_vector<double>();
      for (size_t i : {size_t(0), piece - 1, piece, 2 * piece - 1, 2 * piece, size_t(len - 1)}) {
        if (i >= v.size()) continue;
        EXPECT_DOUBLE_EQ(v[i], double(i) * n * (n + 1) / 2) << "element " << i << " of " << to_string(d);
      }
    }
  }
}

TEST(Distributed, ManyIndependentCollectivesInOneEval) {
  // Every rank builds the same graph, so eval issues the collectives in the same order everywhere.
  auto g = dist::init();
  std::vector<array> outs;
  for (int i = 0; i < 50; ++i) outs.push_back(dist::all_sum(full({i + 1}, array(float(i)))));
  eval(outs);
  for (int i = 0; i < 50; ++i) EXPECT_FLOAT_EQ(outs[i].to_vector<float>()[i], float(i * g.size()));
}

TEST(Distributed, RanksThatDisagreeOnACollectiveAllThrowNamingEachRanksCollective) {
  // Always checked, before any data moves: every rank throws the same error, and the group is still
  // in step afterwards.
  auto g = dist::init();
  if (g.size() < 2) GTEST_SKIP() << "needs 2+ ranks";
  // Rank r sends r + 1 elements.
  array x = ones({g.rank() + 1});
  EXPECT_THROW_MSG(eval(dist::all_sum(x)), std::runtime_error,
                   "the ranks disagree on collective #");
  EXPECT_THROW_MSG(eval(dist::all_sum(x)), std::runtime_error,
                   "(did they take different paths, run different numbers of steps (uneven data: nn::Join), or build different models?): "
                   "rank 0: all_sum float32 (1); rank 1: all_sum float32 (2)");
  // A different collective kind.
  array y = ones({4});
  array r = g.rank() == 0 ? dist::all_max(y) : dist::all_sum(y);
  EXPECT_THROW_MSG(eval(r), std::runtime_error, "rank 0: all_max float32 (4); rank 1: all_sum float32 (4)");
  // The same length in another dtype: MPI would have summed int32 bits as floats.
  array z = g.rank() == 0 ? ones({4}) : ones({4}, int32);
  EXPECT_THROW_MSG(eval(dist::all_sum(z)), std::runtime_error, "rank 0: all_sum float32 (4); rank 1: all_sum int32 (4)");
  // all_gather of rows of different widths would overrun the result.
  EXPECT_THROW_MSG(eval(dist::all_gather(ones({1, g.rank() + 2}))), std::runtime_error,
                   "rank 0: all_gather float32 (1,2); rank 1: all_gather float32 (1,3)");
  // Buckets of the same size laid out differently (two models whose gradients add up to as many
  // elements): the flat all_sum of (2,3) and (4) on rank 0 against (4) and (2,3) elsewhere.
  std::vector<array> parts = g.rank() == 0 ? std::vector<array>{ones({2, 3}), ones({4})}
                                           : std::vector<array>{ones({4}), ones({2, 3})};
  EXPECT_THROW_MSG(eval(dist::all_sum_flat(parts)), std::runtime_error,
                   "split into parts of different shapes: different models?): rank 0: all_sum float32 (10) in parts laid out as ");
  // The same through nn::average_gradients: gradient trees of one total size, different layouts.
  nn::ParamTree grads;
  grads.insert("a", ones({g.rank() == 0 ? 6 : 4}));
  grads.insert("b", ones({g.rank() == 0 ? 4 : 6}));
  auto avg = nn::average_gradients(grads);
  EXPECT_THROW_MSG(eval(avg.at("a")), std::runtime_error, "[all_mean] the ranks disagree");
  // recv expecting another dtype than was sent: the receiver names both.
  if (g.rank() == 0) {
    eval(dist::send(zeros({3}, int32), 1));
  } else if (g.rank() == 1) {
    EXPECT_THROW_MSG(eval(dist::recv({3}, float32, 0)), std::runtime_error,
                     "[recv] rank 1 expects float32 (3) from rank 0, which sends int32 (3)");
  }
  // ...and of more than 8 axes, whose message the receiver still drains (by its byte count).
  const Shape nine{1, 1, 1, 1, 1, 1, 1, 2, 3};
  Shape other = nine;
  other.back() = 5;
  if (g.rank() == 0) {
    eval(dist::send(ones(other), 1));
  } else if (g.rank() == 1) {
    EXPECT_THROW_MSG(eval(dist::recv(nine, float32, 0)), std::runtime_error,
                     "which sends float32 (1,1,1,1,1,1,1,2) (its first 8 axes)");
  }
  if (g.rank() <= 1) {  // the pair goes on talking: the drained message left nothing behind
    array back = g.rank() == 0 ? dist::recv({2}, float32, 1) : dist::send(full({2}, 7.0f), 0);
    if (g.rank() == 0) expect_array(back, {2}, {7, 7});
    eval(back);
  }
  // Agreeing collectives still work, with the same values.
  EXPECT_FLOAT_EQ(dist::all_sum(ones({2})).to_vector<float>()[0], float(g.size()));
  expect_array(dist::all_sum_flat({full({2, 3}, array(1.0f)), full({4}, array(2.0f))}), {10},
               {1.0 * g.size(), 1.0 * g.size(), 1.0 * g.size(), 1.0 * g.size(), 1.0 * g.size(), 1.0 * g.size(),
                2.0 * g.size(), 2.0 * g.size(), 2.0 * g.size(), 2.0 * g.size()});
}

TEST(Distributed, TimeoutsMustBePositive) {
  EXPECT_THROW_MSG(dist::set_peer_timeout(0), std::invalid_argument,
                   "[set_peer_timeout] the timeout must be a positive number of seconds, got 0");
  EXPECT_THROW_MSG(dist::set_collective_timeout(-1), std::invalid_argument,
                   "[set_collective_timeout] the timeout must be a positive number of seconds, got -1");
  EXPECT_THROW_MSG(dist::set_peer_timeout(std::nan("")), std::invalid_argument, "[set_peer_timeout]");
  // The defaults again (the README's), which other tests in this process rely on.
  dist::set_peer_timeout(10);
  dist::set_collective_timeout(1800);
}

// complex64: sums and means add both parts; max and min order lexicographically (real part, then
// imaginary part), as the single-process max and min; gathers and point-to-point carry the values.
TEST(Distributed, ComplexCollectives) {
  auto g = dist::init();
  const int n = g.size(), r = g.rank();
  using C = complex64_t;
  // Rank r holds (r + 1) + 2i and (1) + (r + 1)i; every rank's second element has the same real part,
  // so its max and min are decided by the imaginary part.
  array x = array(std::vector<C>{C(float(r + 1), 2.0f), C(1.0f, float(r + 1))}, Shape{2});
  const double tri = n * (n + 1) / 2.0;
  auto values = [](array a) {
    std::vector<double> v;
    for (C c : a.to_vector<C>()) v.insert(v.end(), {c.real(), c.imag()});
    return v;
  };
  array s = dist::all_sum(x);
  EXPECT_EQ(s.dtype(), complex64);
  EXPECT_EQ(values(s), (std::vector<double>{tri, 2.0 * n, double(n), tri}));
  EXPECT_EQ(values(dist::all_mean(x)), (std::vector<double>{tri / n, 2, 1, tri / n}));
  EXPECT_EQ(values(dist::all_max(x)), (std::vector<double>{double(n), 2, 1, double(n)}));
  EXPECT_EQ(values(dist::all_min(x)), (std::vector<double>{1, 2, 1, 1}));
  EXPECT_EQ(values(dist::all_sum_flat({x, x})), (std::vector<double>{tri, 2.0 * n, double(n), tri, tri, 2.0 * n,
                                                                     double(n), tri}));
  array gathered = dist::all_gather(reshape(x, {1, 2}));
  EXPECT_EQ(gathered.shape(), (Shape{n, 2}));
  EXPECT_EQ(values(slice(gathered, {n - 1, 0}, {n, 2})), (std::vector<double>{double(n), 2, 1, double(n)}));
  if (n > 1) {
    array sent = dist::send(x, (r + 1) % n);
    array got = dist::recv_like(x, (r + n - 1) % n);
    eval(sent, got);
    const int p = (r + n - 1) % n;
    EXPECT_EQ(values(got), (std::vector<double>{double(p + 1), 2, 1, double(p + 1)}));
  }
  // The gradient of a sum of the all_sum's real part: 1 for every element (a real linear map).
  auto grad_of = grad([](const array& z) { return sum(real(dist::all_sum(z))); });
  EXPECT_EQ(values(grad_of(x)), (std::vector<double>{double(n), 0, double(n), 0}));
}

TEST(Distributed, MaxMinGatherSendRecvEveryDtype) {
  auto g = dist::init();
  const int n = g.size(), r = g.rank();
  for (Dtype d : {uint8, int32, int64, float16, bfloat16, float32, float64}) {
    SCOPED_TRACE(to_string(d));
    array x = astype(array({double(r + 1), double(2 * n - r)}), d);
    expect_array(dist::all_max(x), {2}, {double(n), double(2 * n)});
    expect_array(dist::all_min(x), {2}, {1, double(n + 1)});
    std::vector<double> want;
    for (int i = 0; i < n; ++i) want.insert(want.end(), {double(i + 1), double(2 * n - i)});
    array gathered = dist::all_gather(reshape(x, {1, 2}));
    EXPECT_EQ(gathered.dtype(), d);
    expect_array(gathered, {n, 2}, want);
    if (n > 1) {  // a ring: each rank sends its x to the next and receives the previous one's
      array sent = dist::send(x, (r + 1) % n);
      array got = dist::recv_like(x, (r + n - 1) % n);
      eval(sent, got);
      int p = (r + n - 1) % n;
      EXPECT_EQ(got.dtype(), d);
      expect_array(got, {2}, {double(p + 1), double(2 * n - p)});
    }
  }
}

TEST(Distributed, CollectivesStartedEarlyGiveTheSameValuesAsInline) {
  // Four buckets and independent compute in one eval: the collectives run on the communication
  // thread while the matmuls run; consumers read the right sums.
  auto g = dist::init();
  const double n = g.size();
  std::vector<array> sums, uses;
  array a = full({64, 64}, 0.01f);
  array chain = a;
  for (int i = 0; i < 4; ++i) {
    array bucket = full({1000 * (i + 1)}, float(g.rank() + i));
    sums.push_back(dist::all_sum(bucket));
    chain = matmul(chain, a);
    uses.push_back(sum(sums.back()) + sum(chain));
  }
  eval(uses);
  double tri = n * (n - 1) / 2;
  array chain_alone = a;
  for (int i = 0; i < 4; ++i) {
    chain_alone = matmul(chain_alone, a);
    double want = 1000.0 * (i + 1) * (tri + n * i) + sum(chain_alone).item<float>();
    EXPECT_NEAR(uses[i].item<float>(), want, 1e-4 * want);
  }
}

TEST(Distributed, FlatReductionsOfManyArrays) {
  // all_sum_flat / all_mean_flat: the reduction of the concatenated flattenings, whatever the
  // inputs' shapes and layouts (a transposed view, an empty array), for every floating dtype; the
  // inputs, held here, are left as they were.
  auto g = dist::init();
  const double n = g.size(), rank_sum = n * (n + 1) / 2;
  for (Dtype d : {float16, bfloat16, float32, float64}) {
    array a = astype(reshape(arange(0.0, 6.0, 1.0, float32), {2, 3}) * float(g.rank() + 1), d);
    array b = astype(full({0}, 1.0f), d);
    array c = astype(array({10.0f, -20.0f, 30.0f, -40.0f}, {2, 2}) * float(g.rank() + 1), d);
    array ct = transpose(c);  // read as (10, 30, -20, -40)
    array s = dist::all_sum_flat({a, b, ct}), m = dist::all_mean_flat({a, b, ct});
    eval(s, m);
    EXPECT_EQ(s.dtype(), d);
    EXPECT_EQ(m.dtype(), d);
    const std::vector<double> base = {0, 1, 2, 3, 4, 5, 10, 30, -20, -40};
    std::vector<double> sums, means;
    for (double v : base) {
      sums.push_back(v * rank_sum);
      means.push_back(v * rank_sum / n);
    }
    expect_array(s, {10}, sums, 1e-2);
    expect_array(m, {10}, means, 1e-2);
    expect_array(astype(a, float64), {2, 3}, {0.0, 1.0 * (g.rank() + 1), 2.0 * (g.rank() + 1), 3.0 * (g.rank() + 1),
                                              4.0 * (g.rank() + 1), 5.0 * (g.rank() + 1)});
  }
  array ints = dist::all_sum_flat({array({1, 2}), array({3})});
  expect_array(ints, {3}, {n, 2 * n, 3 * n});
  // A single array comes back flattened.
  expect_array(dist::all_mean_flat({full({2, 2}, 3.0f)}), {4}, {3, 3, 3, 3});
}

TEST(Distributed, FlatReductionsAcrossPieces) {
  // Three arrays of 1.5M float32 (18 MB: five 4 MiB pieces, with runs crossing piece boundaries),
  // one held (copied in) and two made in the same graph (written straight into the result), summed
  // and averaged: every element at a piece or run boundary is right.
  auto g = dist::init();
  const double n = g.size(), rank_sum = n * (n + 1) / 2;
  const int len = 1500000;
  array held = arange(0.0, double(len), 1.0, float32) * float(g.rank() + 1);
  eval(held);
  for (bool mean : {false, true}) {
    std::vector<array> parts = {held, held * 2.0f, held * 3.0f};
    array r = mean ? dist::all_mean_flat(parts) : dist::all_sum_flat(parts);
    auto v = r.to_vector<float>();
    ASSERT_EQ(v.size(), size_t(3 * len));
    const size_t piece = (size_t(4) << 20) / sizeof(float);
    std::vector<size_t> at = {0, size_t(len) - 1, size_t(len), size_t(2 * len) - 1, size_t(2 * len), size_t(3 * len) - 1};
    for (size_t p = piece; p < v.size(); p += piece) {
      at.push_back(p - 1);
      at.push_back(p);
    }
    for (size_t i : at) {
      const double k = double(i % len), part = double(i / len + 1);
      const double want = k * part * rank_sum / (mean ? n : 1.0);
      EXPECT_NEAR(v[i], want, 1e-6 * want + 1e-6) << (mean ? "mean" : "sum") << " element " << i;
    }
  }
  EXPECT_FLOAT_EQ(held.to_vector<float>()[len - 1], float(len - 1) * (g.rank() + 1));
}

TEST(Distributed, FlatReductionProducersWriteIntoTheResult) {
  // Producers that nothing else reads are placed in the result's buffer: no buffer of their own.
  auto g = dist::init();
  const int len = 1 << 18;
  array x = arange(0.0, double(len), 1.0, float32);
  eval(x);
  array r = dist::all_mean_flat({x * 2.0f, exp(x * 0.0f), x + 1.0f});
  const size_t base = get_active_memory();
  reset_peak_memory();
  eval(r);
  EXPECT_LE(get_peak_memory() - base, 3 * len * sizeof(float) + 4096);
  auto v = r.to_vector<float>();
  EXPECT_FLOAT_EQ(v[7], 14.0f);
  EXPECT_FLOAT_EQ(v[len + 7], 1.0f);
  EXPECT_FLOAT_EQ(v[2 * len + 7], 8.0f);
}

TEST(Distributed, FlatReductionsRejectBadInput) {
  EXPECT_THROW_MSG(dist::all_sum_flat({}), std::invalid_argument, "[all_sum_flat] needs at least one array");
  EXPECT_THROW_MSG(dist::all_sum_flat({array({1.0f}), array({1.0}, float64)}), std::invalid_argument,
                   "array 0 is float32, array 1 is float64");
  EXPECT_THROW_MSG(dist::all_mean_flat({array({1, 2})}), std::invalid_argument, "[all_mean_flat] needs floating-point arrays, got int32");
}

// Rank q's x for the all_to_all tests: value 1000 q + its row-major index, so that every element
// names the rank and the place it came from.
array rank_values(int q, const Shape& shape, Dtype d) {
  int size = 1;
  for (int v : shape) size *= v;
  return astype(add(reshape(arange(0.0, double(size), 1.0, float64), shape), array(1000.0 * q)), d);
}

TEST(Distributed, AllToAllExchangesBlocks) {
  auto g = dist::init();
  const int n = g.size(), r = g.rank();
  // Axis 0 to axis 0 (PyTorch's all_to_all_single): the result's block j is rank j's block r.
  for (Dtype d : {int32, bfloat16, float32, float64, complex64}) {
    const array x = rank_values(r, {2 * n, 3}, d);
    std::vector<array> want;
    for (int j = 0; j < n; ++j) want.push_back(slice(rank_values(j, {2 * n, 3}, d), {2 * r, 0}, {2 * r + 2, 3}));
    const array y = dist::all_to_all(x);
    ASSERT_EQ(y.dtype(), d);
    EXPECT_TRUE(array_equal(y, concatenate(want, 0)).item<bool>()) << to_string(d) << ": " << y;
  }
  // Other axes: split axis 1 and concatenate along 0 (and the reverse, and one axis counted from the
  // end), against slicing every rank's x here.
  struct Case {
    int split, concat;
    Shape shape;
  };
  for (const Case& c : {Case{1, 0, {2, 3 * n}}, Case{0, 1, {2 * n, 3}}, Case{-1, -1, {2, 2, 2 * n}}, Case{2, 0, {2, 3, n}}}) {
    const std::string what = "split " + std::to_string(c.split) + ", concat " + std::to_string(c.concat);
    const int sa = c.split < 0 ? c.split + 3 : c.split;
    std::vector<array> want;
    for (int j = 0; j < n; ++j) {
      const array xj = rank_values(j, c.shape, float32);
      const int b = c.shape[sa] / n;
      want.push_back(slice(xj, [&] {
        Shape lo(c.shape.size(), 0);
        lo[sa] = r * b;
        return lo;
      }(), [&] {
        Shape hi = c.shape;
        hi[sa] = (r + 1) * b;
        return hi;
      }()));
    }
    const array y = dist::all_to_all(rank_values(r, c.shape, float32), c.split, c.concat);
    const array w = concatenate(want, c.concat);
    ASSERT_EQ(y.shape(), w.shape()) << what;
    EXPECT_TRUE(array_equal(y, w).item<bool>()) << what << ": " << y << "\nwant\n" << w;
  }
  // Its gradient: L_r = sum(c_r * all_to_all(x_r)) summed over ranks has d/dx_r = all_to_all(c):
  // block j of rank r's gradient is rank j's c block r.
  const array c = rank_values(r, {2 * n, 3}, float32);
  const array gx = grad([&](const array& v) { return sum(c * dist::all_to_all(v)); })(zeros({2 * n, 3}));
  EXPECT_TRUE(array_equal(gx, dist::all_to_all(c)).item<bool>()) << gx;
  EXPECT_THROW_MSG(dist::all_to_all(array(1.0f)), std::invalid_argument, "[all_to_all] needs an array of at least 1");
  EXPECT_THROW_MSG(dist::all_to_all(ones({2, 2}), 2, 0), std::invalid_argument,
                   "[all_to_all] axis 2 is out of range for shape (2,2)");
  if (n > 1) {
    EXPECT_THROW_MSG(dist::all_to_all(ones({n + 1, 2})), std::invalid_argument,
                     "axis 0 (" + std::to_string(n + 1) + ") must be a multiple of the group size");
    // Ranks whose blocks differ all throw, naming each rank's collective.
    EXPECT_THROW_MSG(eval(dist::all_to_all(ones({n, r + 2}))), std::runtime_error,
                     "rank 0: all_to_all float32 (" + std::to_string(n) + ",2); rank 1: all_to_all float32 (" +
                         std::to_string(n) + ",3)");
  } else {
    const array x = ones({3});
    EXPECT_EQ(dist::all_to_all(x).id(), x.id());
  }
}

TEST(Distributed, BroadcastFromEveryRoot) {
  auto g = dist::init();
  const int n = g.size(), r = g.rank();
  for (int root = 0; root < n; ++root) {
    for (Dtype d : {bool_, int64, bfloat16, float32, complex64}) {
      // The others pass arrays of the shape with their own values, which are not read.
      const array y = dist::broadcast(rank_values(r, {2, 3}, d), root);
      EXPECT_TRUE(array_equal(y, rank_values(root, {2, 3}, d)).item<bool>()) << "root " << root << ", " << to_string(d);
    }
    // The gradient: L_r = sum(w_r * broadcast(x_r)) summed over ranks reaches root's x as the sum of
    // every w, the others' as zero; the tangent is broadcast too.
    const array w = full({2, 3}, array(float(r + 1)));
    const array gx = grad([&](const array& v) { return sum(w * dist::broadcast(v, root)); })(ones({2, 3}));
    expect_array(gx, {2, 3}, std::vector<double>(6, r == root ? n * (n + 1) / 2.0 : 0.0));
    auto [out, tan] = jvp([&](const array& v) { return dist::broadcast(v, root); }, ones({2}), full({2}, array(float(r))));
    expect_array(tan, {2}, {double(root), double(root)});
  }
  const array x = ones({2});
  EXPECT_THROW_MSG(dist::broadcast(x, n), std::invalid_argument,
                   "[broadcast] root rank " + std::to_string(n) + " is outside the group of size " + std::to_string(n));
  EXPECT_THROW_MSG(dist::broadcast(x, -1), std::invalid_argument, "[broadcast] root rank -1 is outside");
  if (n == 1) {
    EXPECT_EQ(dist::broadcast(x, 0).id(), x.id());
    return;
  }
  // Ranks that name different roots all throw, naming each one's.
  EXPECT_THROW_MSG(eval(dist::broadcast(ones({4}), r == 0 ? 0 : 1)), std::runtime_error,
                   "rank 0: broadcast float32 (4) from root 0; rank 1: broadcast float32 (4) from root 1");
}

TEST(Distributed, BarrierWaitsForEveryRank) {
  auto g = dist::init();
  const int n = g.size(), r = g.rank();
  dist::barrier();  // alone: returns at once
  if (n == 1) return;
  // The last rank arrives 300 ms late: every other one waits for it.
  dist::barrier();
  const auto start = std::chrono::steady_clock::now();
  if (r == n - 1) std::this_thread::sleep_for(std::chrono::milliseconds(300));
  dist::barrier();
  const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_GE(waited, 0.25) << "rank " << r << " left the barrier before the last rank reached it";
  // A rank that meets another collective instead: every rank throws, naming each one's.
  if (r == 0) {
    EXPECT_THROW_MSG(dist::barrier(), std::runtime_error, "rank 0: barrier; rank 1: all_sum float32 (1)");
  } else {
    EXPECT_THROW_MSG(eval(dist::all_sum(ones({1}))), std::runtime_error, "rank 0: barrier; rank 1: all_sum float32 (1)");
  }
  dist::barrier();  // still in step
}

// Every factorization dp x tp of the world: rank r sits at (r / tp, r % tp), its tp group holds the
// ranks of its row and its dp group those of its column, in coordinate order.
TEST(Distributed, MeshGroupsAreTheAxesOfTheGrid) {
  auto g = dist::init();
  const int n = g.size(), r = g.rank();
  auto members = [](const dist::Group& group, int world_rank) {
    const std::vector<int32_t> v = dist::all_gather(array(std::vector<int32_t>{world_rank}, {1}, int32), group)
                                       .to_vector<int32_t>();
    return std::vector<int>(v.begin(), v.end());
  };
  for (int dp = 1; dp <= n; ++dp) {
    if (n % dp != 0) continue;
    const int tp = n / dp;
    const dist::Mesh mesh({{"dp", dp}, {"tp", tp}});
    const std::string what = "dp " + std::to_string(dp) + " x tp " + std::to_string(tp);
    EXPECT_EQ(mesh.shape(), (std::vector<int>{dp, tp})) << what;
    EXPECT_EQ(mesh.coordinate("dp"), r / tp) << what;
    EXPECT_EQ(mesh.coordinate("tp"), r % tp) << what;
    std::vector<int> row, column;
    for (int j = 0; j < tp; ++j) row.push_back(r / tp * tp + j);
    for (int i = 0; i < dp; ++i) column.push_back(i * tp + r % tp);
    EXPECT_EQ(members(mesh.group("tp"), r), row) << what;
    EXPECT_EQ(members(mesh.group("dp"), r), column) << what;
    // A collective over one axis sums that axis only.
    EXPECT_EQ(dist::all_sum(array(float(r)), mesh.group("tp")).item<float>(), float(tp * (r / tp * tp) + tp * (tp - 1) / 2))
        << what;
  }
  // Three axes, one inferred.
  const dist::Mesh three({{"pp", 1}, {"dp", -1}, {"tp", 1}});
  EXPECT_EQ(three.shape(), (std::vector<int>{1, n, 1}));
  EXPECT_EQ(three.size("dp"), n);
  EXPECT_EQ(three.axis_names(), (std::vector<std::string>{"pp", "dp", "tp"}));
  EXPECT_EQ(three.world().size(), n);
  const std::string world = std::to_string(n);
  EXPECT_THROW_MSG(dist::Mesh({{"dp", n + 1}}), std::invalid_argument,
                   "[Mesh] axes dp=" + std::to_string(n + 1) + " cannot hold the world's " + world + " ranks");
  EXPECT_THROW_MSG(dist::Mesh({{"dp", n}, {"tp", 2}}), std::invalid_argument,
                   "[Mesh] axes dp=" + world + " x tp=2 cannot hold the world's " + world + " ranks");
  EXPECT_THROW_MSG(dist::Mesh({{"dp", n}, {"dp", 1}}), std::invalid_argument, "[Mesh] axis 'dp' is named twice");
  EXPECT_THROW_MSG(dist::Mesh({{"", n}}), std::invalid_argument, "[Mesh] an axis needs a name");
  EXPECT_THROW_MSG(dist::Mesh({{"dp", 0}}), std::invalid_argument, "[Mesh] axis 'dp' has size 0");
  EXPECT_THROW_MSG(dist::Mesh({{"dp", -1}, {"tp", -1}}), std::invalid_argument, "[Mesh] axis 'tp' has size -1");
  EXPECT_THROW_MSG(dist::Mesh({}), std::invalid_argument, "[Mesh] needs at least one axis");
  EXPECT_THROW_MSG(three.group("ep"), std::invalid_argument, "[Mesh] no axis named 'ep'; the mesh has pp, dp, tp");
}

// Half-precision attention on both of its paths, half storage either way with float32 softmax and
// sums: products on float32 copies of each head (a CPU without oneDNN half kernels, and heads
// narrower than 64 on AMX), and on half operands (an AVX512-BF16 / AMX CPU; forced here with
// force_gemm_reads_half, the GEMM seam then widening inside each product where the CPU has no half
// kernels). Forward and the three gradients, with no mask, a boolean causal mask and an additive
// mask, heads 16 and 64 wide, dense and split from one qkv projection (rows one activation apart),
// against float64 values of the rounded inputs.
#include "loom/kernels/gemm.h"
#include "../test_utils.h"

namespace loom {
namespace {

struct HalfAttentionPaths : ::testing::Test {
  void TearDown() override { kernels::detail::force_gemm_reads_half(-1); }
};

// Within `rel` of the largest magnitude of `want` (half results: P and dS are rounded to the half
// type for their products, so errors scale with the values, not per entry).
void expect_near_half(const array& got, const array& want, Dtype d, double rel, const std::string& what) {
  ASSERT_EQ(got.dtype(), d) << what;
  ASSERT_EQ(got.shape(), want.shape()) << what;
  const std::vector<double> g = astype(got, float64).to_vector<double>(), w = array(want).to_vector<double>();
  double scale = 0;
  for (double x : w) scale = std::max(scale, std::abs(x));
  int bad = 0;
  for (size_t i = 0; i < g.size(); ++i) {
    if (!(std::abs(g[i] - w[i]) <= rel * scale + 1e-6) && bad++ < 5) {
      ADD_FAILURE() << what << " at " << i << ": " << g[i] << ", want " << w[i] << " (scale " << scale << ")";
    }
  }
}

TEST_F(HalfAttentionPaths, ForwardAndGradients) {
  const int B = 2, H = 3, L = 100, S = 100;  // two blocks of queries on either path
  struct Case {
    Dtype d;
    int E;
    bool split;
  };
  for (Case c : {Case{bfloat16, 16, false}, Case{float16, 16, false}, Case{bfloat16, 64, false}, Case{bfloat16, 16, true},
                 Case{float16, 64, true}}) {
    const Dtype d = c.d;
    const int E = c.E;
    array q = astype(testing::lcg_uniform({B, H, L, E}, -1, 1, 31), d);
    array k = astype(testing::lcg_uniform({B, H, S, E}, -1, 1, 32), d);
    array v = astype(testing::lcg_uniform({B, H, S, E}, -1, 1, 33), d);
    if (c.split) {  // the same values as views of one (B, L, 3, H, E) buffer, as a qkv projection gives
      const array qkv = contiguous(stack({transpose(q, {0, 2, 1, 3}), transpose(k, {0, 2, 1, 3}), transpose(v, {0, 2, 1, 3})}, 2));
      eval(qkv);
      auto part = [&](int i) {
        return transpose(squeeze(slice(qkv, {0, 0, i, 0, 0}, {B, L, i + 1, H, E}), 2), {0, 2, 1, 3});
      };
      q = part(0), k = part(1), v = part(2);
      eval(q, k, v);
      ASSERT_EQ(q.strides()[2], 3 * H * E);
    }
    const array cot = astype(testing::lcg_uniform({B, H, L, E}, -1, 1, 34), d);
    const array causal = less_equal(reshape(arange(S, int32), {1, S}), reshape(arange(L, int32), {L, 1}));
    const array additive = astype(testing::lcg_uniform({L, S}, -2, 0, 35), d);
    const double scale = 1.0 / std::sqrt(double(E));
    const double unit = d == bfloat16 ? 1.0 / 128 : 1.0 / 1024;  // two roundings of the half type
    for (int m = 0; m < 3; ++m) {
      const std::optional<array> mask = m == 0 ? std::nullopt : m == 1 ? std::optional<array>(causal) : additive;
      auto f = [&](const std::vector<array>& x) {
        std::optional<array> mm = mask;
        if (mm && mm->dtype() != bool_) mm = astype(*mm, x[0].dtype());
        return std::vector<array>{fast::scaled_dot_product_attention(x[0], x[1], x[2], scale, mm)};
      };
      auto [o64, g64] = vjp(f, {astype(q, float64), astype(k, float64), astype(v, float64)}, {astype(cot, float64)});
      for (int native : {0, 1}) {
        kernels::detail::force_gemm_reads_half(native);
        const std::string what = std::string(native ? "half operands" : "float32 operands") + ", " +
                                 (d == bfloat16 ? "bfloat16" : "float16") + ", E " + std::to_string(E) +
                                 (c.split ? ", split" : "") + ", mask " + std::to_string(m);
        auto [o, g] = vjp(f, {q, k, v}, {cot});
        expect_near_half(o[0], o64[0], d, unit, what + ": output");
        expect_near_half(g[0], g64[0], d, 2 * unit, what + ": dq");
        expect_near_half(g[1], g64[1], d, 2 * unit, what + ": dk");
        expect_near_half(g[2], g64[2], d, 2 * unit, what + ": dv");
      }
    }
  }
}

// Both paths keep half nodes: no float32 copies of q, k and v in the graph (the float32 path widens
// each head inside the kernel).
TEST_F(HalfAttentionPaths, HalfNodesOnBothPaths) {
  const array q = astype(testing::lcg_uniform({1, 2, 8, 4}, -1, 1, 41), bfloat16);
  for (int native : {0, 1}) {
    kernels::detail::force_gemm_reads_half(native);
    const array o = fast::scaled_dot_product_attention(q, q, q, 0.5);
    EXPECT_EQ(o.dtype(), bfloat16);
    EXPECT_STREQ(o.primitive().name(), "ScaledDotProductAttention");
    for (const array& in : o.inputs()) EXPECT_EQ(in.dtype(), bfloat16);
  }
}

// The profiler's rows of both kernels name their products' backend at any thread count: the products
// run inside the kernels' own pool tasks, where the seam knows no node.
TEST_F(HalfAttentionPaths, ProfilerNamesTheBackendAtAnyThreadCount) {
  const int threads = get_num_threads();
  const array q = astype(testing::lcg_uniform({4, 4, 64, 16}, -1, 1, 61), float32);
  auto f = [](const std::vector<array>& x) {
    return std::vector<array>{fast::scaled_dot_product_attention(x[0], x[1], x[2], 0.25)};
  };
  for (int t : {1, 2}) {
    set_num_threads(t);
    profile::start();
    auto [o, g] = vjp(f, {q, q, q}, {q});
    eval(o, g);
    profile::stop();
    for (const std::string name : {"ScaledDotProductAttention [", "ScaledDotProductAttentionBackward ["}) {
      bool found = false;
      for (const auto& s : profile::key_averages()) found |= s.name.rfind(name, 0) == 0;
      EXPECT_TRUE(found) << t << " thread(s): no row \"" << name << "...\" in\n" << profile::table();
    }
  }
  set_num_threads(threads);
}

// vmap runs the kernel itself over the batch (one more leading axis), not the composition: under
// bfloat16 the composition rounds the scores to bfloat16, which with large scores moves the softmax
// by percents (diff case 1684 of seed 1). So vmap equals the loop over entries bit for bit, forward
// and gradients, an unbatched input broadcast.
TEST_F(HalfAttentionPaths, VmapRunsTheKernel) {
  const int N = 3, H = 2, L = 5, E = 3;
  const array q = astype(testing::lcg_uniform({N, H, L, E}, -2, 2, 51), bfloat16);
  const array k = astype(testing::lcg_uniform({H, L, E}, -60, 60, 52), bfloat16);  // unbatched, large scores
  const array v = astype(testing::lcg_uniform({N, H, L, 8}, -60, 60, 53), bfloat16);
  const array cot = astype(testing::lcg_uniform({N, H, L, 8}, -1, 1, 54), bfloat16);
  auto f = [](const std::vector<array>& x) {
    return std::vector<array>{fast::scaled_dot_product_attention(x[0], x[1], x[2], 0.5)};
  };
  auto grads = [&](const std::vector<array>& x) {
    std::vector<array> in(x.begin(), x.begin() + 3);
    return vjp(f, in, {x[3]}).second;
  };
  for (int native : {0, 1}) {
    kernels::detail::force_gemm_reads_half(native);
    const std::vector<array> out = vmap(f, {0, -1, 0})({q, k, v});
    const std::vector<array> g = vmap(grads, {0, -1, 0, 0})({q, k, v, cot});
    for (int n = 0; n < N; ++n) {
      auto entry = [&](const array& a) { return squeeze(slice(a, {n, 0, 0, 0}, {n + 1, H, L, a.shape(-1)}), 0); };
      const std::string what = std::string(native ? "half operands" : "float32 operands") + ", entry " + std::to_string(n);
      EXPECT_TRUE(array_equal(entry(out[0]), f({entry(q), k, entry(v)})[0]).item<bool>()) << what << ": output";
      const std::vector<array> want = grads({entry(q), k, entry(v), entry(cot)});
      EXPECT_TRUE(array_equal(entry(g[0]), want[0]).item<bool>()) << what << ": dq";
      EXPECT_TRUE(array_equal(entry(g[2]), want[2]).item<bool>()) << what << ": dv";
      ASSERT_EQ(g[1].shape(), (Shape{N, H, L, E})) << what;  // k's gradient per entry
      EXPECT_TRUE(array_equal(entry(g[1]), want[1]).item<bool>()) << what << ": dk";
    }
  }
}

}  // namespace
}  // namespace loom

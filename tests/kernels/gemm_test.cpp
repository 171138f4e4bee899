// The GEMM seam (kernels/gemm.h) on each backend: float32 on OpenBLAS and on oneDNN (any x86-64 CPU
// runs oneDNN's float32 kernels), bfloat16 / float16 on oneDNN where it has kernels for this CPU and
// as float32 otherwise; against float64 references of the (rounded) inputs, within each dtype's
// accumulation bound. Products large enough to be split across two threads are among the cases.
#include <random>

#include "loom/kernels/gemm.h"
#include "../test_utils.h"

namespace loom {
namespace {

// Restores the CPU's choice of backend and the thread count after each test.
class GemmSeam : public ::testing::Test {
 protected:
  void SetUp() override { threads_ = get_num_threads(); }
  void TearDown() override {
    kernels::detail::reset_gemm_backend();
    set_num_threads(threads_);
  }
  int threads_ = 1;
};

// A case: op(A) M x K, op(B) K x N, leading dimensions padded by `pad`.
struct Case {
  bool ta, tb;
  int64_t M, N, K, pad;
  double alpha, beta;
};

std::vector<Case> cases() {
  std::vector<Case> v;
  for (int t = 0; t < 4; ++t) {
    v.push_back({bool(t & 1), bool(t & 2), 7, 5, 3, 0, 1.0, 0.0});
    v.push_back({bool(t & 1), bool(t & 2), 33, 65, 17, 3, 0.5, 0.0});
    v.push_back({bool(t & 1), bool(t & 2), 300, 96, 64, 1, 1.0, 1.0});   // split by rows at 2 threads
    v.push_back({bool(t & 1), bool(t & 2), 40, 260, 128, 0, -2.0, 0.25});  // split by columns
  }
  v.push_back({false, false, 1, 1, 1, 0, 1.0, 0.0});
  v.push_back({false, true, 1, 700, 1500, 0, 1.0, 0.0});  // a matrix-vector product
  // A transposed A over a long inner dimension (a weight gradient): oneDNN splits K in two halves.
  v.push_back({true, false, 40, 30, 2500, 1, 1.0, 0.5});
  v.push_back({true, true, 33, 32, 2049, 0, 2.0, 0.0});
  return v;
}

template <typename T>
T from_double(double x) {
  if constexpr (std::is_same_v<T, complex64_t>) {
    return T(float(x), 0.0f);
  } else {
    return T(float(x));
  }
}
template <typename T>
double to_double(T x) {
  return double(static_cast<float>(x));
}
template <>
double to_double<double>(double x) {
  return x;
}

// Runs one case through kernels::gemm with operands of dtype In and a result of dtype Out, and
// checks every entry against the float64 product of the inputs as stored, within
// rel * sum_k |a_ik b_kj| (+ the rounding of a half result).
template <typename In, typename Out>
void check_case(const Case& c, double rel, double out_round, const std::string& what) {
  std::mt19937 rng(unsigned(c.M * 131 + c.N * 7 + c.K));
  std::uniform_real_distribution<double> u(-1.0, 1.0);
  const int64_t ar = c.ta ? c.K : c.M, ac = c.ta ? c.M : c.K, br = c.tb ? c.N : c.K, bc = c.tb ? c.K : c.N;
  const int64_t lda = ac + c.pad, ldb = bc + c.pad, ldc = c.N + c.pad;
  std::vector<In> A(size_t(ar * lda)), B(size_t(br * ldb));
  std::vector<Out> C(size_t(c.M * ldc));
  for (auto& x : A) x = from_double<In>(u(rng));
  for (auto& x : B) x = from_double<In>(u(rng));
  for (auto& x : C) x = from_double<Out>(c.beta == 0.0 ? std::nan("") : u(rng));  // beta 0: C only written
  const std::vector<Out> C0 = C;
  // op(A) and op(B)^T as dense float64 rows, so the reference's inner loop reads two rows.
  std::vector<double> a(size_t(c.M * c.K)), bt(size_t(c.N * c.K));
  for (int64_t i = 0; i < c.M; ++i) {
    for (int64_t k = 0; k < c.K; ++k) a[size_t(i * c.K + k)] = to_double(c.ta ? A[size_t(k * lda + i)] : A[size_t(i * lda + k)]);
  }
  for (int64_t j = 0; j < c.N; ++j) {
    for (int64_t k = 0; k < c.K; ++k) bt[size_t(j * c.K + k)] = to_double(c.tb ? B[size_t(j * ldb + k)] : B[size_t(k * ldb + j)]);
  }
  constexpr Dtype din = std::is_same_v<In, float> ? float32 : std::is_same_v<In, double> ? float64
                        : std::is_same_v<In, bfloat16_t> ? bfloat16 : float16;
  constexpr Dtype dout = std::is_same_v<Out, float> ? float32 : std::is_same_v<Out, double> ? float64
                         : std::is_same_v<Out, bfloat16_t> ? bfloat16 : float16;
  kernels::gemm(kernels::Gemm{din, dout, c.ta, c.tb, c.M, c.N, c.K, A.data(), lda, B.data(), ldb, C.data(), ldc,
                              c.alpha, c.beta});
  int bad = 0;
  for (int64_t i = 0; i < c.M; ++i) {
    for (int64_t j = 0; j < ldc; ++j) {
      const double got = to_double(C[size_t(i * ldc + j)]);
      if (j >= c.N) {  // padding is never touched
        const double before = to_double(C0[size_t(i * ldc + j)]);
        if (!(got == before || (std::isnan(got) && std::isnan(before))) && bad++ < 5) {
          ADD_FAILURE() << what << ": wrote the padding at (" << i << ", " << j << ")";
        }
        continue;
      }
      double want = 0, mag = 0;
      const double *ai = a.data() + i * c.K, *bj = bt.data() + j * c.K;
      for (int64_t k = 0; k < c.K; ++k) {
        const double t = ai[k] * bj[k];
        want += t;
        mag += t < 0 ? -t : t;
      }
      want *= c.alpha;
      mag *= std::abs(c.alpha);
      if (c.beta != 0.0) {
        const double old = to_double(C0[size_t(i * ldc + j)]);
        want += c.beta * old;
        mag += std::abs(c.beta * old);
      }
      const double tol = rel * mag + out_round * std::abs(want) + 1e-30;
      if (!(std::abs(got - want) <= tol) && bad++ < 5) {
        ADD_FAILURE() << what << " ta=" << c.ta << " tb=" << c.tb << " M=" << c.M << " N=" << c.N << " K=" << c.K
                      << " alpha=" << c.alpha << " beta=" << c.beta << ": C(" << i << ", " << j << ") = " << got
                      << ", want " << want << " (tolerance " << tol << ")";
      }
    }
  }
}

// float32 accumulation over K terms: a few units of float32's epsilon per term, at most.
double f32_bound(int64_t K) { return 4.0 * double(K + 2) * 6e-8; }

TEST_F(GemmSeam, Float64AndComplexStayOnOpenBLAS) {
  for (GemmBackend b : {GemmBackend::openblas, GemmBackend::dnnl}) {
    kernels::detail::force_gemm_backend(b);
    EXPECT_EQ(gemm_backend(float64), GemmBackend::openblas);
    EXPECT_EQ(gemm_backend(complex64), GemmBackend::openblas);
    for (const Case& c : cases()) check_case<double, double>(c, 4.0 * double(c.K + 2) * 1.2e-16, 0, "float64");
  }
  // complex64 through the typed form: (1 + 2i)(3 - i) = 5 + 5i, summed over K = 2 and scaled by 2.
  const complex64_t A[2] = {{1, 2}, {1, 2}}, B[2] = {{3, -1}, {3, -1}};
  complex64_t C[1] = {{7, 7}};
  kernels::gemm<complex64_t>(false, false, 1, 1, 2, complex64_t(2.0f), A, 2, B, 1, complex64_t(1.0f), C, 1);
  EXPECT_EQ(C[0].real(), 27.0f);
  EXPECT_EQ(C[0].imag(), 27.0f);
}

// Half inputs: the products of the rounded inputs accumulate in float32; a half result adds one
// rounding (2^-8 for bfloat16, 2^-11 for float16).
template <typename H>
void check_half(const char* name) {
  for (const Case& c : cases()) {
    check_case<H, float>(c, f32_bound(c.K), 0, std::string(name) + " -> float32");
    check_case<H, H>(c, f32_bound(c.K), std::is_same_v<H, bfloat16_t> ? 1.0 / 256 : 1.0 / 2048, name);
  }
}

// float32 and the half types on each backend, at 1 and 2 threads. On OpenBLAS a half product runs as
// float32. With LOOM_GEMM=dnnl it runs on oneDNN's half kernels where it has them, and as float32 on
// oneDNN's float32 kernels where it does not (an AVX2 CPU): both are exercised on any CPU.
TEST_F(GemmSeam, EachDtypeOnEachBackend) {
  for (GemmBackend b : {GemmBackend::openblas, GemmBackend::dnnl}) {
    kernels::detail::force_gemm_backend(b);
    EXPECT_EQ(gemm_backend(float32), b);
    EXPECT_EQ(gemm_backend(bfloat16), b);
    for (int threads : {1, 2}) {
      set_num_threads(threads);
      const std::string on = std::string(" on ") + to_string(b) + ", " + std::to_string(threads) + " threads";
      for (const Case& c : cases()) check_case<float, float>(c, f32_bound(c.K), 0, "float32" + on);
      check_half<bfloat16_t>(("bfloat16" + on).c_str());
      check_half<float16_t>(("float16" + on).c_str());
    }
  }
}

// The inner dimension's halves are fixed by the shape, so a weight gradient's product is the same
// at 1 and 2 threads, bit for bit, on oneDNN (where it splits K) as on OpenBLAS.
TEST_F(GemmSeam, InnerSplitDoesNotDependOnTheThreadCount) {
  const int64_t M = 48, N = 40, K = 4096;
  std::vector<float> A(size_t(K * M)), B(size_t(K * N));
  for (size_t i = 0; i < A.size(); ++i) A[i] = float((i * 37) % 101) / 101.0f - 0.5f;
  for (size_t i = 0; i < B.size(); ++i) B[i] = float((i * 53) % 97) / 97.0f - 0.5f;
  std::vector<bfloat16_t> Ah(A.begin(), A.end()), Bh(B.begin(), B.end());
  for (GemmBackend b : {GemmBackend::openblas, GemmBackend::dnnl}) {
    kernels::detail::force_gemm_backend(b);
    std::vector<std::vector<float>> f32(2, std::vector<float>(size_t(M * N)));
    std::vector<std::vector<bfloat16_t>> h(2, std::vector<bfloat16_t>(size_t(M * N)));
    for (int t : {1, 2}) {
      set_num_threads(t);
      kernels::gemm<float>(true, false, M, N, K, 1.0f, A.data(), M, B.data(), N, 0.0f, f32[t - 1].data(), N);
      kernels::gemm<bfloat16_t>(true, false, M, N, K, 1.0f, Ah.data(), M, Bh.data(), N, 0.0f, h[t - 1].data(), N);
    }
    EXPECT_EQ(f32[0], f32[1]) << "float32 on " << to_string(b);
    int diff = 0;
    for (size_t i = 0; i < h[0].size(); ++i) diff += float(h[0][i]) != float(h[1][i]);
    EXPECT_EQ(diff, 0) << "bfloat16 on " << to_string(b);
  }
}

TEST_F(GemmSeam, OneDNNHalfKernelsWhereTheCPUHasThem) {
  if (!kernels::detail::dnnl_takes(bfloat16, bfloat16)) {
    GTEST_SKIP() << "oneDNN has no bfloat16 matmul kernel for this CPU (oneDNN 2.x needs AVX-512: "
                    "AVX512-BF16 or AMX for full speed), so bfloat16 products run as float32 here: "
                 << gemm_config();
  }
  kernels::detail::reset_gemm_backend();
  EXPECT_EQ(gemm_backend(bfloat16), GemmBackend::dnnl) << "the CPU's choice, with oneDNN's bfloat16 kernels";
  EXPECT_NE(gemm_config().find("bfloat16: dnnl"), std::string::npos) << gemm_config();
  for (int threads : {1, 2}) {
    set_num_threads(threads);
    check_half<bfloat16_t>("bfloat16 on dnnl");
  }
}

TEST_F(GemmSeam, PrimitivesAreKeptPerShape) {
  kernels::detail::force_gemm_backend(GemmBackend::dnnl);
  set_num_threads(1);
  std::vector<float> A(64 * 48, 0.5f), B(48 * 40, 2.0f), C(64 * 40);
  auto run = [&](int64_t M) {
    kernels::gemm<float>(false, false, M, 40, 48, 1.0f, A.data(), 48, B.data(), 40, 0.0f, C.data(), 40);
  };
  run(64);
  const auto first = kernels::detail::dnnl_cache_stats();
  for (int i = 0; i < 5; ++i) run(64);
  EXPECT_EQ(kernels::detail::dnnl_cache_stats().created, first.created) << "the same product made a new primitive";
  run(63);
  EXPECT_EQ(kernels::detail::dnnl_cache_stats().created, first.created + 1);
  EXPECT_LE(kernels::detail::dnnl_cache_stats().held, size_t(1024));
  EXPECT_FLOAT_EQ(C[0], 48.0f);
}

TEST_F(GemmSeam, EmptyProducts) {
  for (GemmBackend b : {GemmBackend::openblas, GemmBackend::dnnl}) {
    kernels::detail::force_gemm_backend(b);
    std::vector<float> C{1, 2, 3, 4};
    const float one = 1;
    // K = 0: C = beta C; with beta 0, zeros (not NaN * 0).
    kernels::gemm<float>(false, false, 2, 2, 0, 1.0f, &one, 1, &one, 2, 0.5f, C.data(), 2);
    EXPECT_EQ(C, (std::vector<float>{0.5f, 1, 1.5f, 2}));
    std::vector<bfloat16_t> H{bfloat16_t(std::nanf("")), bfloat16_t(1.0f)};
    const bfloat16_t h1(1.0f);
    kernels::gemm<bfloat16_t>(false, false, 1, 2, 0, bfloat16_t(1.0f), &h1, 1, &h1, 2, bfloat16_t(0.0f), H.data(), 2);
    EXPECT_EQ(float(H[0]), 0.0f);
    EXPECT_EQ(float(H[1]), 0.0f);
    // M = 0 or N = 0: nothing is read or written.
    float* none = nullptr;
    kernels::gemm<float>(false, false, 0, 2, 3, 1.0f, none, 3, none, 2, 0.0f, none, 2);
    kernels::gemm<float>(false, false, 2, 0, 3, 1.0f, none, 3, none, 1, 0.0f, none, 1);
  }
}

TEST_F(GemmSeam, BadDtypesAreRefused) {
  float x = 0;
  EXPECT_THROW_MSG(kernels::gemm(kernels::Gemm{float32, bfloat16, false, false, 1, 1, 1, &x, 1, &x, 1, &x, 1, 1, 0}),
                   std::invalid_argument, "no product of float32 operands into bfloat16");
  EXPECT_THROW_MSG(kernels::gemm(kernels::Gemm{int32, int32, false, false, 1, 1, 1, &x, 1, &x, 1, &x, 1, 1, 0}),
                   std::invalid_argument, "[gemm] no product of int32");
  EXPECT_THROW_MSG(gemm_backend(int32), std::invalid_argument, "[gemm_backend]");
}

// matmul, addmm and a batched matmul in bfloat16 on the process's own choice of backend, against
// float64 products of the rounded inputs.
TEST_F(GemmSeam, HalfMatmulOps) {
  set_num_threads(2);
  for (GemmBackend b : {GemmBackend::openblas, GemmBackend::dnnl}) {
    kernels::detail::force_gemm_backend(b);
    array a = astype(testing::lcg_uniform({3, 70, 40}, -1, 1, 1), bfloat16);
    array w = astype(testing::lcg_uniform({40, 90}, -1, 1, 2), bfloat16);
    array bias = astype(testing::lcg_uniform({90}, -1, 1, 3), bfloat16);
    array bw = astype(testing::lcg_uniform({3, 90, 40}, -1, 1, 4), bfloat16);
    const array a64 = astype(a, float64), w64 = astype(w, float64), bias64 = astype(bias, float64);
    const array bw64 = astype(bw, float64);
    struct Op {
      array got, want;
      const char* name;
    };
    const std::vector<Op> ops{
        {matmul(a, w), matmul(a64, w64), "matmul"},
        {addmm(bias, reshape(a, {210, 40}), w, 0.5f, 2.0f),
         add(multiply(array(0.5), matmul(reshape(a64, {210, 40}), w64)), multiply(array(2.0), bias64)), "addmm"},
        {matmul(a, swapaxes(bw, 1, 2)), matmul(a64, swapaxes(bw64, 1, 2)), "batched matmul, transposed b"},
    };
    for (const Op& op : ops) {
      EXPECT_EQ(op.got.dtype(), bfloat16) << op.name;
      const std::vector<double> g = astype(op.got, float64).to_vector<double>(), e = array(op.want).to_vector<double>();
      ASSERT_EQ(g.size(), e.size());
      for (size_t i = 0; i < g.size(); ++i) {
        // 40 terms of magnitude <= 1 in float32, then one bfloat16 rounding (2^-8 relative).
        ASSERT_NEAR(g[i], e[i], 40 * 4 * 6e-8 * 2 + std::abs(e[i]) / 256) << op.name << " on " << to_string(b) << " at " << i;
      }
    }
  }
}

TEST_F(GemmSeam, ProfilerNamesTheBackend) {
  for (GemmBackend b : {GemmBackend::openblas, GemmBackend::dnnl}) {
    kernels::detail::force_gemm_backend(b);
    array x = testing::lcg_uniform({64, 64}, -1, 1, 5);
    x = astype(x, float32);
    eval(x);
    profile::start();
    eval(matmul(x, x));
    profile::stop();
    const std::string want = std::string("Matmul [") + to_string(b) + " f32]";
    bool found = false;
    for (const auto& s : profile::key_averages()) found |= s.name == want;
    EXPECT_TRUE(found) << "no \"" << want << "\" in\n" << profile::table();
  }
}

TEST_F(GemmSeam, ConfigNamesEveryDtype) {
  const std::string c = gemm_config();
  for (const char* d : {"float32: ", "bfloat16: ", "float16: ", "float64: openblas", "complex64: openblas"}) {
    EXPECT_NE(c.find(d), std::string::npos) << d << " in " << c;
  }
}

}  // namespace
}  // namespace loom

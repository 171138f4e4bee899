// linalg::svd: numpy's singular values, the decomposition's identities (orthogonal factors that
// rebuild the input), batches, views, empty and wide matrices, complex64, and every bad input.
// Its derivatives are checked in linalg_lapack_test.cpp.
#include <complex>

#include "../test_utils.h"

using namespace loom;
using loom::testing::expect_array;
using loom::testing::lcg_uniform;

namespace {

// a ~= U[..., :, :k] diag(S) Vt[..., :k, :], U and Vt orthogonal (unitary), S descending and >= 0.
void expect_decomposition(const array& a, double tol) {
  const int m = a.shape()[a.ndim() - 2], n = a.shape()[a.ndim() - 1], k = std::min(m, n);
  auto usv = linalg::svd(a);
  ASSERT_EQ(usv.size(), 3u);
  const array& u = usv[0];
  const array& s = usv[1];
  const array& vt = usv[2];
  Shape batch(a.shape().begin(), a.shape().end() - 2);
  Shape us = batch, ss = batch, vs = batch;
  us.insert(us.end(), {m, m});
  ss.push_back(k);
  vs.insert(vs.end(), {n, n});
  ASSERT_EQ(u.shape(), us);
  ASSERT_EQ(s.shape(), ss);
  ASSERT_EQ(vt.shape(), vs);
  const bool cplx = a.dtype() == complex64;
  EXPECT_EQ(s.dtype(), cplx ? float32 : a.dtype());
  EXPECT_EQ(u.dtype(), a.dtype());
  // Rebuild in complex64 or float64 and compare.
  const Dtype w = cplx ? complex64 : float64;
  const array uk = slice(astype(u, w), Shape(a.ndim(), 0), [&] { Shape e = us; e.back() = k; return e; }());
  const array vk = slice(astype(vt, w), Shape(a.ndim(), 0), [&] { Shape e = vs; e[e.size() - 2] = k; return e; }());
  const array rebuilt = matmul(uk * expand_dims(astype(s, w), -2), vk);
  EXPECT_TRUE(allclose(rebuilt, astype(a, w), tol, tol).item<bool>());
  const array uh = cplx ? conjugate(swapaxes(u, -1, -2)) : swapaxes(u, -1, -2);
  const array vh = cplx ? conjugate(swapaxes(vt, -1, -2)) : swapaxes(vt, -1, -2);
  EXPECT_TRUE(allclose(matmul(uh, u), astype(broadcast_to(eye(m), us), a.dtype()), tol, tol).item<bool>());
  EXPECT_TRUE(allclose(matmul(vt, vh), astype(broadcast_to(eye(n), vs), a.dtype()), tol, tol).item<bool>());
  auto sv = astype(s, float64).to_vector<double>();
  for (size_t i = 0; i < sv.size(); ++i) {
    EXPECT_GE(sv[i], 0.0);
    if (k > 1 && i % k) EXPECT_LE(sv[i], sv[i - 1] + tol) << "singular values descend";
  }
}

}  // namespace

TEST(Svd, SingularValuesMatchNumpy) {
  // numpy.linalg.svd(a, compute_uv=False) in float64.
  const std::vector<double> a{2, -1, 0.5, 1, 3, -2, 0, 1, 1, 4, 0.25, -1};
  const std::vector<double> want{4.865938934677166, 3.569635205484754, 1.3758062304542251};
  for (Dtype dt : {float32, float64}) {
    auto s = linalg::svd(array(a, {4, 3}, dt), false);
    ASSERT_EQ(s.size(), 1u);
    EXPECT_EQ(s[0].dtype(), dt);
    expect_array(s[0], {3}, want, dt == float32 ? 1e-6 : 1e-13);
    // The wide transpose has the same singular values.
    expect_array(linalg::svd(transpose(array(a, {4, 3}, dt)), false)[0], {3}, want, dt == float32 ? 1e-6 : 1e-13);
  }
  // [[3, 0], [4, 5]]: singular values 3 sqrt(5) and sqrt(5).
  expect_array(linalg::svd(array({3.0f, 0.0f, 4.0f, 5.0f}, {2, 2}), false)[0], {2},
               {3 * std::sqrt(5.0), std::sqrt(5.0)}, 1e-6);
}

TEST(Svd, FactorsRebuildTheMatrix) {
  expect_decomposition(lcg_uniform({4, 3}, -1, 1, 1), 1e-12);
  expect_decomposition(lcg_uniform({3, 5}, -1, 1, 2), 1e-12);
  expect_decomposition(astype(lcg_uniform({6, 6}, -1, 1, 3), float32), 2e-5);
  // A batch (2, 3) of 4x2 matrices, and a transposed view.
  expect_decomposition(astype(lcg_uniform({2, 3, 4, 2}, -2, 2, 4), float32), 2e-5);
  expect_decomposition(transpose(lcg_uniform({5, 3, 2}, -1, 1, 5), {2, 1, 0}), 1e-12);
  // Rank-deficient: two equal rows give a zero singular value.
  auto s = linalg::svd(array({1.0, 2.0, 1.0, 2.0}, {2, 2}, float64), false)[0].to_vector<double>();
  EXPECT_NEAR(s[0], std::sqrt(10.0), 1e-12);
  EXPECT_NEAR(s[1], 0.0, 1e-12);
  expect_decomposition(array({1.0, 2.0, 1.0, 2.0}, {2, 2}, float64), 1e-12);
}

TEST(Svd, Complex64) {
  using C = complex64_t;
  // numpy: singular values of [[1, 2i, 0], [3 - i, 0.5, 1 + i]] (complex64).
  array b(std::vector<C>{{1, 0}, {0, 2}, {0, 0}, {3, -1}, {0.5f, 0}, {1, 1}}, {2, 3});
  auto s = linalg::svd(b, false)[0];
  EXPECT_EQ(s.dtype(), float32);
  expect_array(s, {2}, {3.7064526081085205, 1.874089002609253}, 1e-6);
  expect_decomposition(b, 2e-5);
  expect_decomposition(transpose(b), 2e-5);
}

TEST(Svd, EmptyMatricesAndBatches) {
  // (3, 0): no singular values, identity factors (numpy's).
  auto usv = linalg::svd(zeros({3, 0}));
  expect_array(usv[1], {0}, {});
  expect_array(usv[0], {3, 3}, {1, 0, 0, 0, 1, 0, 0, 0, 1});
  expect_array(usv[2], {0, 0}, {});
  usv = linalg::svd(zeros({0, 4, 2}));
  EXPECT_EQ(usv[0].shape(), (Shape{0, 4, 4}));
  EXPECT_EQ(usv[1].shape(), (Shape{0, 2}));
  EXPECT_EQ(usv[2].shape(), (Shape{0, 2, 2}));
  eval(usv);
}

TEST(Svd, BadInputs) {
  EXPECT_THROW_MSG(linalg::svd(zeros({3}), true), std::invalid_argument, "at least 2 dimensions; got shape (3)");
  EXPECT_THROW_MSG(linalg::svd(zeros({2, 2}, int32), true), std::invalid_argument,
                   "[linalg::svd] arrays must be float32, float64 or complex64; got int32");
  EXPECT_THROW_MSG(linalg::svd(zeros({2, 2}, float16), true), std::invalid_argument, "got float16");
  // Non-finite values are refused when evaluated, naming the matrix of the batch.
  array bad = array({1.0f, 2.0f, 3.0f, 4.0f, 1.0f, NAN, 0.0f, 1.0f}, {2, 2, 2});
  EXPECT_THROW_MSG(eval(linalg::svd(bad, false)), std::runtime_error, "[linalg::svd] matrix 1 of the batch holds NaN");
  array inf = array({INFINITY, 0.0f, 0.0f, 1.0f}, {2, 2});
  EXPECT_THROW_MSG(eval(linalg::svd(inf)), std::runtime_error, "NaN or infinity");
  // The derivative of S at I (a double singular value) is diag(cotangent): U diag(sbar) V^T, U = V.
  const array g = vjp([](const array& x) { return linalg::svd(x, false)[0]; }, eye(2), array({1.0f, 2.0f})).second;
  EXPECT_TRUE(allclose(g, array({1.0f, 0.0f, 0.0f, 2.0f}, {2, 2})).item<bool>()) << g;
}

TEST(Svd, UnderVmap) {
  // Each matrix is factored on its own, so the batched factors are the loop's, bit for bit.
  const array a = astype(lcg_uniform({3, 4, 5, 2}, -1, 1, 61), float32);
  for (int ax : {0, 1, 3}) {
    loom::testing::expect_vmap_matches_loop([](const std::vector<array>& v) { return linalg::svd(v[0]); }, {a}, {ax},
                                            {}, 0, 0);
    loom::testing::expect_vmap_matches_loop(
        [](const std::vector<array>& v) { return linalg::svd(v[0], false); }, {a}, {ax}, {}, 0, 0);
  }
}

// linalg beyond svd: numpy's values (numpy 1.24, float64, the call in each comment), the
// factorizations' identities on batched, non-square, ill-conditioned and complex inputs, the errors
// for bad shapes and dtypes (when built) and for singular, indefinite or non-finite values (when
// evaluated), derivatives against finite differences, vmap against a loop, and export.
#include <complex>

#include "../test_utils.h"

using namespace loom;
using loom::testing::expect_array;
using loom::testing::lcg_uniform;

namespace {

using C64 = complex64_t;

// numpy's A for inv, solve, det, eigvals and matrix norms; S symmetric positive definite.
array la_a(Dtype d = float64) { return array({4., -2., 1., 3., 6., -4., 2., 1., 8.}, {3, 3}, d); }
array la_s(Dtype d = float64) { return array({4., 2., 0.6, 2., 5., 1.5, 0.6, 1.5, 3.}, {3, 3}, d); }

array la_mT(const array& x) { return swapaxes(x, -1, -2); }
array la_mH(const array& x) { return x.dtype() == complex64 ? conjugate(la_mT(x)) : la_mT(x); }
bool la_close(const array& a, const array& b, double tol) { return allclose(a, b, tol, tol).item<bool>(); }
array la_eye_like(const array& a) {
  Shape s = a.shape();
  return astype(broadcast_to(eye(a.shape(-1)), s), a.dtype());
}

// A random well-conditioned square stack: noise plus n on the diagonal.
array la_square(const Shape& shape, unsigned seed, Dtype d = float64) {
  const int n = shape.back();
  array x = add(lcg_uniform(shape, -1, 1, seed), multiply(eye(n), array(double(n))));
  if (d == complex64) x = add(astype(x, complex64), multiply(astype(lcg_uniform(shape, -0.5, 0.5, seed + 1), complex64), array(C64(0, 1))));
  return astype(x, d);
}
// A random symmetric (Hermitian) positive definite stack: M M^H + n I.
array la_spd(const Shape& shape, unsigned seed, Dtype d = float64) {
  const array m = la_square(shape, seed, d);
  return add(matmul(m, la_mH(m)), astype(multiply(eye(shape.back()), array(double(shape.back()))), d));
}

template <typename F>
void la_expect_error(F&& f, const std::string& needle) {
  try {
    f();
    FAIL() << "expected an error mentioning " << needle;
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

}  // namespace

TEST(Linalg, ValuesMatchNumpy) {
  for (Dtype d : {float32, float64}) {
    const double tol = d == float32 ? 2e-6 : 1e-13;
    // numpy.linalg.inv(A)
    expect_array(linalg::inv(la_a(d)), {3, 3},
                 {0.19771863117870722, 0.06463878326996197, 0.00760456273764259, -0.12167300380228137,
                  0.11406844106463877, 0.07224334600760458, -0.03422053231939164, -0.03041825095057035,
                  0.1140684410646388},
                 tol);
    // numpy.linalg.cholesky(S)
    expect_array(linalg::cholesky(la_s(d)), {3, 3}, {2, 0, 0, 1, 2, 0, 0.3, 0.6, 1.5968719422671311}, tol);
    expect_array(linalg::cholesky(la_s(d), true), {3, 3}, {2, 1, 0.3, 0, 2, 0.6, 0, 0, 1.5968719422671311}, tol);
    // numpy.linalg.eigh(S)[0], eigvalsh
    expect_array(linalg::eigh(la_s(d)).first, {3}, {2.0045845125687465, 2.8474199084736522, 7.1479955789576035}, tol * 4);
    expect_array(linalg::eigvalsh(la_s(d), "U"), {3}, {2.0045845125687465, 2.8474199084736522, 7.1479955789576035},
                 tol * 4);
    // numpy.linalg.solve(A, b) and with a matrix B
    expect_array(linalg::solve(la_a(d), array({1., -2., 3.}, {3}, d)), {3},
                 {0.09125475285171103, -0.13307984790874522, 0.36882129277566544}, tol);
    expect_array(linalg::solve(la_a(d), array({1., 0.5, -2., 1., 3., 0.}, {3, 2}, d)), {3, 2},
                 {0.09125475285171103, 0.1634980988593156, -0.13307984790874522, 0.0532319391634981,
                  0.36882129277566544, -0.04752851711026617},
                 tol);
    // numpy.linalg.det / slogdet, 3 x 3 (the explicit formula) and 4 x 4 (LU)
    const array a4 = array({2., 1., 0., 3., 1., -3., 2., 1., 0., 4., 1., -1., 5., 0., 2., 2.}, {4, 4}, d);
    expect_array(linalg::det(la_a(d)), {}, {263.0}, d == float32 ? 1e-4 : 1e-11);
    expect_array(linalg::det(a4), {}, {112.0}, d == float32 ? 1e-4 : 1e-11);
    auto [sg, la] = linalg::slogdet(a4);
    expect_array(sg, {}, {1.0});
    expect_array(la, {}, {4.718498871295094}, tol * 4);
    // numpy.linalg.qr(R)[1], numpy.linalg.pinv(R)
    const array r = array({1., 2., 3., 4., 5., 6.}, {3, 2}, d);
    expect_array(linalg::qr(r).second, {2, 2}, {-5.916079783099616, -7.437357441610946, 0, 0.8280786712108248}, tol * 4);
    expect_array(linalg::pinv(r), {2, 3},
                 {-1.3333333333333337, -0.3333333333333329, 0.6666666666666666, 1.083333333333334,
                  0.33333333333333304, -0.4166666666666667},
                 d == float32 ? 1e-5 : 1e-12);
    // numpy.linalg.eigvals(A)
    array ev = linalg::eigvals(la_a(d));
    ASSERT_EQ(ev.dtype(), complex64);
    expect_array(real(ev), {3}, {4.810030296148609, 4.810030296148609, 8.379939407702794}, 1e-5);
    expect_array(abs(imag(ev)), {3}, {2.8719477168382688, 2.8719477168382688, 0}, 1e-5);
  }
}

TEST(Linalg, NormsMatchNumpy) {
  const array x = array({1., -2., 3., 0.5, 0., -4.}, {2, 3}, float64);
  const double inf = loom::testing::kInf;
  // numpy.linalg.norm(x, ord=o, axis=1)
  expect_array(linalg::norm(x, 1), {2}, {3.7416573867739413, 4.031128874149275});
  const std::vector<std::pair<double, std::vector<double>>> vec = {
      {1, {6, 4.5}}, {2, {3.7416573867739413, 4.031128874149275}}, {inf, {3, 4}}, {-inf, {1, 0}},
      {0, {3, 2}},   {3, {3.3019272488946263, 4.002602473082917}}, {-1, {0.5454545454545455, 0}}};
  for (const auto& [ord, want] : vec) expect_array(linalg::norm(x, ord, 1), {2}, want, 1e-12);
  // numpy.linalg.norm(A, ord=o)
  const array a = la_a();
  const std::vector<std::pair<double, double>> mat = {{1, 13}, {-1, 9}, {2, 9.385549506960283}, {-2, 4.1429961279603535},
                                                      {inf, 13}, {-inf, 7}};
  for (const auto& [ord, want] : mat) expect_array(linalg::norm(a, ord), {}, {want}, 1e-12);
  expect_array(linalg::norm(a, "fro"), {}, {12.288205727444508}, 1e-12);
  expect_array(linalg::norm(a, "nuc"), {}, {20.29220171252416}, 1e-12);
  expect_array(linalg::norm(a), {}, {12.288205727444508}, 1e-12);
  // keepdims keeps the reduced axes; a matrix norm over axes (2, 0) of a stack.
  EXPECT_EQ(linalg::norm(a, std::nullopt, true).shape(), (Shape{1, 1}));
  EXPECT_EQ(linalg::norm(a, 2.0, std::vector<int>{0, 1}, true).shape(), (Shape{1, 1}));
  const array stack = lcg_uniform({3, 2, 4}, -1, 1, 5);
  const array by_axes = linalg::norm(stack, 1.0, std::vector<int>{2, 0});
  EXPECT_EQ(by_axes.shape(), (Shape{2}));
  for (int i = 0; i < 2; ++i) {
    const array m = swapaxes(take(stack, i, 1), 0, 1);  // rows: axis 2, columns: axis 0
    EXPECT_TRUE(la_close(take(by_axes, i, 0), linalg::norm(m, 1.0), 1e-12));
  }
  // Complex: the 2-norm of |z|; integers become floats.
  expect_array(linalg::norm(array({C64(3, 4), C64(0, 0)})), {}, {5.0});
  EXPECT_EQ(linalg::norm(array({3, 4})).dtype(), float32);
}

TEST(Linalg, FactorizationsHoldOnBatchedNonSquareAndComplexInputs) {
  for (Dtype d : {float32, float64, complex64}) {
    SCOPED_TRACE(::testing::Message() << d);
    const double tol = d == float64 ? 1e-10 : 2e-4;
    // qr: tall, square and wide stacks, Q with orthonormal columns and R upper triangular.
    for (Shape shape : {Shape{2, 5, 3}, Shape{3, 4, 4}, Shape{2, 3, 6}}) {
      array a = la_square({shape[0], std::max(shape[1], shape[2]), std::max(shape[1], shape[2])}, 10 + shape[2], d);
      a = slice(a, {0, 0, 0}, shape);
      auto [q, r] = linalg::qr(a);
      const int k = std::min(shape[1], shape[2]);
      EXPECT_EQ(q.shape(), (Shape{shape[0], shape[1], k}));
      EXPECT_EQ(r.shape(), (Shape{shape[0], k, shape[2]}));
      EXPECT_TRUE(la_close(matmul(q, r), a, tol));
      EXPECT_TRUE(la_close(matmul(la_mH(q), q), astype(broadcast_to(eye(k), {shape[0], k, k}), d), tol));
      EXPECT_TRUE(array_equal(r, triu(r)).item<bool>());
    }
    // inv, solve (a batch of b against one a, and a vector b), tri_inv and solve_triangular.
    const array a = la_square({4, 5, 5}, 20, d);
    EXPECT_TRUE(la_close(matmul(a, linalg::inv(a)), la_eye_like(a), tol));
    const array b = astype(lcg_uniform({3, 1, 5, 2}, -1, 1, 21), d);
    const array x = linalg::solve(a, b);
    EXPECT_EQ(x.shape(), (Shape{3, 4, 5, 2}));
    EXPECT_TRUE(la_close(matmul(a, x), broadcast_to(b, {3, 4, 5, 2}), tol));
    const array v = astype(lcg_uniform({5}, -1, 1, 22), d);
    EXPECT_EQ(linalg::solve(a, v).shape(), (Shape{4, 5}));
    const array l = tril(a), u = triu(a);
    EXPECT_TRUE(la_close(linalg::tri_inv(a), linalg::inv(l), tol));
    EXPECT_TRUE(la_close(linalg::tri_inv(a, true), linalg::inv(u), tol));
    EXPECT_TRUE(array_equal(linalg::tri_inv(a), tril(linalg::tri_inv(a))).item<bool>());
    EXPECT_TRUE(la_close(linalg::solve_triangular(a, b, true), linalg::solve(u, b), tol));
    EXPECT_TRUE(la_close(linalg::solve_triangular(a, b), linalg::solve(l, b), tol));
    // cholesky (both triangles), cholesky_inv, eigh.
    const array s = la_spd({3, 4, 4}, 30, d);
    const array lo = linalg::cholesky(s), up = linalg::cholesky(s, true);
    EXPECT_TRUE(la_close(matmul(lo, la_mH(lo)), s, tol));
    EXPECT_TRUE(la_close(matmul(la_mH(up), up), s, tol));
    EXPECT_TRUE(la_close(linalg::cholesky_inv(lo), linalg::inv(s), tol));
    EXPECT_TRUE(la_close(linalg::cholesky_inv(up, true), linalg::inv(s), tol));
    for (const char* uplo : {"L", "U"}) {
      auto [w, vec] = linalg::eigh(s, uplo);
      EXPECT_EQ(w.dtype(), d == complex64 ? float32 : d);
      EXPECT_TRUE(la_close(matmul(s, vec), multiply(vec, astype(expand_dims(w, -2), d)), tol * 10));
      EXPECT_TRUE(la_close(linalg::eigvalsh(s, uplo), w, tol * 10));
    }
    // eig: A V = V diag(w), complex64 out.
    auto [ew, ev] = linalg::eig(a);
    EXPECT_EQ(ew.dtype(), complex64);
    const array ac = astype(a, complex64);
    EXPECT_TRUE(la_close(matmul(ac, ev), multiply(ev, expand_dims(ew, -2)), 2e-4));
    // lu as MLX: take_along_axis(L, rows, -2) @ U == a, on square, tall and wide inputs.
    for (Shape shape : {Shape{2, 4, 4}, Shape{2, 5, 3}, Shape{2, 3, 5}}) {
      const array m = astype(lcg_uniform(shape, -1, 1, 40 + shape[2]), d);
      const std::vector<array> plu = linalg::lu(m);
      EXPECT_EQ(plu[0].dtype(), uint32);
      const array lp = take_along_axis(plu[1], expand_dims(plu[0], -1), -2);
      EXPECT_TRUE(la_close(matmul(lp, plu[2]), m, tol));
    }
  }
}

TEST(Linalg, ComplexValuesMatchNumpy) {
  // numpy.linalg.inv(C), eigvalsh(H), cholesky(H) in complex64.
  const array c = array({C64(2, 1), C64(1, -1), C64(0, 0.5f), C64(3, 0)}, {2, 2});
  array ci = linalg::inv(c);
  const std::vector<C64> want = {C64(0.4520548f, -0.20547946f), C64(-0.08219178f, 0.21917808f),
                                 C64(-0.034246575f, -0.07534247f), C64(0.369863f, 0.01369863f)};
  const std::vector<C64> got = ci.to_vector<C64>();
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_NEAR(got[i].real(), want[i].real(), 1e-6);
    EXPECT_NEAR(got[i].imag(), want[i].imag(), 1e-6);
  }
  const array h = array({C64(3, 0), C64(1, -2), C64(1, 2), C64(4, 0)}, {2, 2});
  expect_array(linalg::eigvalsh(h), {2}, {1.2087121, 5.791288}, 1e-6);
  array hl = linalg::cholesky(h);
  const std::vector<C64> l = hl.to_vector<C64>();
  EXPECT_NEAR(l[2].real(), 0.57735026, 1e-6);
  EXPECT_NEAR(l[2].imag(), 1.1547005, 1e-6);
  EXPECT_EQ(l[1], C64(0, 0));
}

TEST(Linalg, IllConditionedAndEmptyInputs) {
  // The 8 x 8 Hilbert matrix (condition 1.5e10): its inverse has integer entries.
  std::vector<double> hv;
  for (int i = 0; i < 8; ++i) {
    for (int j = 0; j < 8; ++j) hv.push_back(1.0 / (i + j + 1));
  }
  const array hil = array(hv, {8, 8}, float64);
  array hinv = linalg::inv(hil);
  const std::vector<double> got = hinv.to_vector<double>();
  EXPECT_NEAR(got[0], 64, 64 * 1e-6);
  EXPECT_NEAR(got[1], -2016, 2016 * 1e-6);
  EXPECT_NEAR(got[2], 20160, 20160 * 1e-6);
  EXPECT_NEAR(got[63], 176679360, 176679360 * 1e-6);
  EXPECT_TRUE(la_close(linalg::solve(hil, matmul(hil, ones({8}, float64))), ones({8}, float64), 1e-5));
  // Empty stacks and 0 x 0 matrices.
  EXPECT_EQ(linalg::inv(zeros({0, 3, 3})).shape(), (Shape{0, 3, 3}));
  EXPECT_EQ(linalg::qr(zeros({2, 0, 3})).first.shape(), (Shape{2, 0, 0}));
  expect_array(linalg::det(zeros({0, 0})), {}, {1.0});
  EXPECT_EQ(linalg::pinv(zeros({0, 3})).shape(), (Shape{3, 0}));
}

TEST(Linalg, CrossMatchesNumpy) {
  // numpy.cross([1, 2, 3], [4, 5, 6]) and numpy.cross([1, 2], [4, 5, 6])
  expect_array(linalg::cross(array({1., 2., 3.}), array({4., 5., 6.})), {3}, {-3, 6, -3});
  expect_array(linalg::cross(array({1., 2.}), array({4., 5., 6.})), {3}, {12, -6, -3});
  expect_array(linalg::cross(array({1., 2., 3.}), array({4., 5.})), {3}, {-15, 12, -3});
  expect_array(linalg::cross(array({1., 2.}), array({4., 5.})), {3}, {0, 0, -3});
  // Along axis 0, broadcast over the other axis.
  const array a = lcg_uniform({3, 4}, -1, 1, 50), b = lcg_uniform({3, 1}, -1, 1, 51);
  const array c = linalg::cross(a, b, 0);
  EXPECT_EQ(c.shape(), (Shape{3, 4}));
  // A x B is orthogonal to A and to B.
  EXPECT_TRUE(la_close(sum(multiply(c, a), 0), zeros({4}, float64), 1e-12));
  EXPECT_TRUE(la_close(sum(multiply(c, b), 0), zeros({4}, float64), 1e-12));
}

TEST(Linalg, BadInputsNameTheOp) {
  // When built: dtypes, ranks, shapes, arguments.
  la_expect_error([] { linalg::inv(array({1, 2, 3, 4}, {2, 2})); }, "[linalg::inv] arrays must be float32");
  la_expect_error([] { linalg::qr(array({1.0f, 2.0f})); }, "[linalg::qr] needs an array of at least 2 dimensions");
  la_expect_error([] { linalg::cholesky(zeros({2, 3})); }, "[linalg::cholesky] needs square matrices; got shape (2,3)");
  la_expect_error([] { linalg::solve(zeros({3, 3}), zeros({4})); }, "[linalg::solve] a of shape (3,3) and b of shape (4)");
  la_expect_error([] { linalg::solve(zeros({2, 3, 3}), zeros({4, 3, 1})); }, "do not broadcast");
  la_expect_error([] { linalg::solve(array({1, 0, 0, 1}, {2, 2}), array({1, 1})); }, "must promote to float32");
  la_expect_error([] { linalg::eigh(zeros({3, 3}), "X"); }, "[linalg::eigh] UPLO must be \"L\" or \"U\"");
  la_expect_error([] { linalg::norm(zeros({2, 2, 2}), 2.0); }, "[linalg::norm]");
  la_expect_error([] { linalg::norm(zeros({2, 2}), 3.0, std::vector<int>{0, 1}); }, "is not a matrix norm");
  la_expect_error([] { linalg::norm(zeros({2, 2}), "nuc", 0); }, "needs two axes");
  la_expect_error([] { linalg::norm(zeros({2, 2}), 1.0, std::vector<int>{1, 1}); }, "two different axes");
  la_expect_error([] { linalg::cross(zeros({4}), zeros({3})); }, "[linalg::cross] a of shape (4)");
  la_expect_error([] { linalg::det(astype(zeros({2, 2}), complex64)); }, "[linalg::det] complex");
  la_expect_error([] { linalg::eig(zeros({2, 3})); }, "[linalg::eig] needs square");
  // When evaluated: singular, indefinite and non-finite matrices, named with their batch entry.
  const array sing = array({1., 2., 2., 4.}, {2, 2});
  const array batch = stack({la_square({2, 2}, 60), sing});
  la_expect_error([&] { linalg::inv(batch).eval(); }, "[linalg::inv] matrix 1 of the batch is singular");
  la_expect_error([&] { linalg::solve(sing, array({1., 1.})).eval(); }, "[linalg::solve] matrix 0 of the batch is singular");
  la_expect_error([&] { linalg::tri_inv(array({1., 0., 5., 0.}, {2, 2})).eval(); }, "[linalg::tri_inv] matrix 0 of the batch is singular");
  la_expect_error([&] { linalg::solve_triangular(array({0., 0., 1., 1.}, {2, 2}), array({1., 1.})).eval(); },
                  "[linalg::solve_triangular] matrix 0 of the batch is singular");
  la_expect_error([] { linalg::cholesky(array({1., 2., 2., 1.}, {2, 2})).eval(); },
                  "[linalg::cholesky] matrix 0 of the batch is not positive definite");
  const array bad = array({1., loom::testing::kNaN, 0., 1.}, {2, 2});
  for (auto f : std::vector<std::function<array()>>{[&] { return linalg::inv(bad); },
                                                     [&] { return linalg::qr(bad).first; },
                                                     [&] { return linalg::eigh(bad).first; },
                                                     [&] { return linalg::eig(bad).first; },
                                                     [&] { return linalg::lu(bad)[1]; },
                                                     [&] { return linalg::cholesky(bad); },
                                                     [&] { return linalg::solve(bad, array({1., 1.})); }}) {
    la_expect_error([&] { f().eval(); }, "of the batch holds NaN or infinity");
  }
  // lu of a singular matrix is no error: U has a zero on its diagonal.
  const std::vector<array> plu = linalg::lu(sing);
  EXPECT_TRUE(la_close(matmul(take_along_axis(plu[1], expand_dims(plu[0], -1), -2), plu[2]), sing, 1e-12));
  // det and slogdet of a singular matrix: 0 and {0, -inf}.
  const array sing4 = array({1., 2., 3., 4., 2., 4., 6., 8., 0., 1., 0., 1., 1., 0., 0., 1.}, {4, 4});
  expect_array(linalg::det(sing4), {}, {0.0});
  auto [sg, la] = linalg::slogdet(sing4);
  expect_array(sg, {}, {0.0});
  expect_array(la, {}, {-loom::testing::kInf});
}

// ---- derivatives (finite differences, in float64) ----

TEST(LinalgGrad, InvSolveAndTriangles) {
  const array a = la_square({2, 3, 3}, 70), b = lcg_uniform({2, 3, 2}, -1, 1, 71);
  auto r = check_grads([](const std::vector<array>& p) { return std::vector<array>{linalg::inv(p[0])}; }, {a});
  EXPECT_TRUE(r.ok) << r.report;
  r = check_grads([](const std::vector<array>& p) { return std::vector<array>{linalg::tri_inv(p[0], true)}; }, {a});
  EXPECT_TRUE(r.ok) << r.report;
  r = check_grads([](const std::vector<array>& p) { return std::vector<array>{linalg::tri_inv(p[0])}; }, {a});
  EXPECT_TRUE(r.ok) << r.report;
  r = check_grads([](const std::vector<array>& p) { return std::vector<array>{linalg::solve(p[0], p[1])}; }, {a, b});
  EXPECT_TRUE(r.ok) << r.report;
  // A vector b, broadcast against a stack of a.
  r = check_grads([](const std::vector<array>& p) { return std::vector<array>{linalg::solve(p[0], p[1])}; },
                  {a, lcg_uniform({3}, -1, 1, 72)});
  EXPECT_TRUE(r.ok) << r.report;
  for (bool upper : {false, true}) {
    r = check_grads([upper](const std::vector<array>& p) { return std::vector<array>{linalg::solve_triangular(p[0], p[1], upper)}; },
                    {a, b});
    EXPECT_TRUE(r.ok) << upper << r.report;
  }
  // Through the compositions: pinv (tall), cholesky_inv, det and slogdet (3 x 3 formula and LU).
  r = check_grads([](const std::vector<array>& p) { return std::vector<array>{linalg::pinv(p[0])}; },
                  {lcg_uniform({4, 3}, -1, 1, 73)});
  EXPECT_TRUE(r.ok) << r.report;
  r = check_grads([](const std::vector<array>& p) { return std::vector<array>{linalg::cholesky_inv(p[0])}; },
                  {tril(la_square({3, 3}, 74))});
  EXPECT_TRUE(r.ok) << r.report;
  for (int n : {3, 5}) {
    r = check_grads([](const std::vector<array>& p) { return std::vector<array>{linalg::det(p[0])}; },
                    {la_square({2, n, n}, 75 + n)});
    EXPECT_TRUE(r.ok) << n << r.report;
    r = check_grads([](const std::vector<array>& p) { return std::vector<array>{linalg::slogdet(p[0]).second}; },
                    {la_square({n, n}, 77 + n)});
    EXPECT_TRUE(r.ok) << n << r.report;
  }
}

TEST(LinalgGrad, CholeskyAndEighReadOneTriangle) {
  const array s = la_spd({2, 4, 4}, 80);
  for (bool upper : {false, true}) {
    auto r = check_grads([upper](const std::vector<array>& p) { return std::vector<array>{linalg::cholesky(p[0], upper)}; },
                         {s});
    EXPECT_TRUE(r.ok) << upper << r.report;
    const char* uplo = upper ? "U" : "L";
    r = check_grads([uplo](const std::vector<array>& p) { return std::vector<array>{linalg::eigvalsh(p[0], uplo)}; }, {s});
    EXPECT_TRUE(r.ok) << uplo << r.report;
    // Eigenvectors up to sign: V diag(w^2) V^T and |V| are sign-free functions of them.
    r = check_grads([uplo](const std::vector<array>& p) {
      auto [w, v] = linalg::eigh(p[0], uplo);
      return std::vector<array>{matmul(multiply(v, expand_dims(square(w), -2)), swapaxes(v, -1, -2)), abs(v)};
    }, {s});
    EXPECT_TRUE(r.ok) << uplo << r.report;
  }
  // The symmetric gradient of a function of the symmetric part.
  const array g = grad([](const std::vector<array>& p) {
    return sum(linalg::eigvalsh(multiply(add(p[0], swapaxes(p[0], -1, -2)), array(0.5))));
  })({s})[0];
  EXPECT_TRUE(la_close(g, swapaxes(g, -1, -2), 1e-10));
  EXPECT_TRUE(la_close(g, broadcast_to(eye(4, float64), g.shape()), 1e-10));  // d trace / dA = I
}

TEST(LinalgGrad, QrAndSvd) {
  for (Shape shape : {Shape{5, 3}, Shape{4, 4}, Shape{3, 5}}) {
    SCOPED_TRACE(::testing::Message() << shape[0] << "x" << shape[1]);
    const array a = lcg_uniform(shape, -1, 1, 90 + shape[1]);
    auto r = check_grads([](const std::vector<array>& p) {
      auto [q, rr] = linalg::qr(p[0]);
      return std::vector<array>{q, rr};
    }, {a});
    EXPECT_TRUE(r.ok) << r.report;
    r = check_grads([](const std::vector<array>& p) { return linalg::svd(p[0], false); }, {a});
    EXPECT_TRUE(r.ok) << r.report;
    // Sign-free functions of the singular vectors: U_k diag(s^2) V_k^T, |U_k| and |V_k|.
    const int k = std::min(shape[0], shape[1]);
    r = check_grads([k](const std::vector<array>& p) {
      const std::vector<array> usv = linalg::svd(p[0]);
      const array uk = slice(usv[0], {0, 0}, {usv[0].shape(0), k}), vk = slice(usv[2], {0, 0}, {k, usv[2].shape(1)});
      return std::vector<array>{matmul(multiply(uk, expand_dims(square(usv[1]), 0)), vk), abs(uk), abs(vk)};
    }, {a});
    EXPECT_TRUE(r.ok) << r.report;
    // norms through svd: 2, -2 and nuclear.
    r = check_grads([](const std::vector<array>& p) {
      return std::vector<array>{linalg::norm(p[0], 2.0), linalg::norm(p[0], -2.0), linalg::norm(p[0], "nuc"),
                                linalg::norm(p[0], "fro"), linalg::norm(p[0], 3.0, 1)};
    }, {a});
    EXPECT_TRUE(r.ok) << r.report;
  }
  // Complex derivatives of qr, svd, cholesky and eigh are not implemented: a clear error.
  const array c = astype(la_square({3, 3}, 95), complex64);
  la_expect_error([&] { grad([](const std::vector<array>& p) { return sum(abs(linalg::qr(p[0]).second)); })({c}); },
                  "[linalg::qr] derivatives of complex inputs are not implemented");
  // eig and lu have none.
  la_expect_error([&] { grad([](const std::vector<array>& p) { return sum(abs(linalg::eigvals(p[0]))); })({la_a()}); },
                  "Eig");
}

TEST(LinalgGrad, VmapMatchesLoopAndPrimitivesRoundTrip) {
  const array a = la_square({3, 4, 4}, 100), s = la_spd({3, 4, 4}, 101), b = lcg_uniform({3, 4, 2}, -1, 1, 102);
  loom::testing::expect_vmap_matches_loop([](const std::vector<array>& p) {
    auto [q, r] = linalg::qr(p[0]);
    return std::vector<array>{linalg::inv(p[0]), linalg::solve(p[0], p[1]), linalg::solve_triangular(p[0], p[1], true),
                              q, r, linalg::det(p[0]), linalg::svd(p[0], false)[0], real(linalg::eigvals(p[0]))};
  }, {a, b}, {0, 0}, {}, 1e-9, 1e-9);
  loom::testing::expect_vmap_matches_loop([](const std::vector<array>& p) {
    return std::vector<array>{linalg::cholesky(p[0]), linalg::eigvalsh(p[0]), linalg::lu(p[0])[2]};
  }, {s}, {0}, {}, 1e-9, 1e-9);
  // One a against a batch of b.
  loom::testing::expect_vmap_matches_loop([](const std::vector<array>& p) { return std::vector<array>{linalg::solve(p[0], p[1])}; },
                                    {take(a, 0, 0), b}, {-1, 0}, {}, 1e-9, 1e-9);
  // Every primitive saves and loads.
  loom::testing::expect_export_roundtrip(linalg::inv(a));
  loom::testing::expect_export_roundtrip(linalg::tri_inv(a, true));
  loom::testing::expect_export_roundtrip(linalg::solve(a, b));
  loom::testing::expect_export_roundtrip(linalg::solve_triangular(a, b));
  loom::testing::expect_export_roundtrip(linalg::cholesky(s, true));
  loom::testing::expect_export_roundtrip(linalg::eigh(s, "U").first);
  loom::testing::expect_export_roundtrip(linalg::eig(a).first);
  loom::testing::expect_export_roundtrip(linalg::qr(a).first);
  loom::testing::expect_export_roundtrip(linalg::lu_factor(a).first);
  loom::testing::expect_export_roundtrip(linalg::slogdet(a).first);
}

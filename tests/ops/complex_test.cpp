// complex64: storage, promotion, the ops that take it (values from numpy 1.24 in complex64), the
// ops that refuse it, and gradients in MLX's and PyTorch's convention (the vjp of a holomorphic f is
// c conj(f'(z)); the gradient of a real function is d/dRe + i d/dIm), checked by finite differences.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <sstream>

#include "../test_utils.h"
#include "loom/loom.h"

namespace loom {
namespace {

using C = complex64_t;
using Pairs = std::vector<std::pair<double, double>>;

array carr(const std::vector<C>& v) { return array(v, Shape{static_cast<int>(v.size())}); }

void expect_complex(array a, const Pairs& want, double tol = 2e-6) {
  ASSERT_EQ(a.dtype(), complex64);
  std::vector<C> got = a.to_vector<C>();
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    const double scale = std::max(1.0, std::hypot(want[i].first, want[i].second));
    EXPECT_NEAR(got[i].real(), want[i].first, tol * scale) << "element " << i;
    EXPECT_NEAR(got[i].imag(), want[i].second, tol * scale) << "element " << i;
  }
}

// a and b of the numpy script (python3: a = np.array([1+2j, -0.5+0.25j, 3-1j], np.complex64), ...).
array a_vals() { return carr({C(1, 2), C(-0.5f, 0.25f), C(3, -1)}); }
array b_vals() { return carr({C(0.5f, -1), C(2, 0), C(-1, 3)}); }

TEST(Complex, DtypeAndPromotion) {
  EXPECT_EQ(sizeof(C), sizeof(std::complex<float>));
  EXPECT_EQ(size_of(complex64), 8u);
  EXPECT_EQ(to_string(complex64), "complex64");
  EXPECT_FALSE(is_floating_point(complex64));
  EXPECT_TRUE(is_complex(complex64));
  EXPECT_TRUE(issubdtype(complex64, Dtype::Category::complexfloating));
  EXPECT_TRUE(issubdtype(complex64, Dtype::Category::inexact));
  EXPECT_FALSE(issubdtype(complex64, Dtype::Category::floating));
  EXPECT_TRUE(issubdtype(complex64, Dtype::Category::number));
  for (Dtype d : all_dtypes) {
    EXPECT_EQ(promote_types(d, complex64), complex64) << d;
    EXPECT_EQ(promote_types(complex64, d), complex64) << d;
  }
  EXPECT_EQ(promote_types(complex64, complex64), complex64);
}

TEST(Complex, ConstructionItemAndCasts) {
  array x(C(1.0f, 1.0f));
  EXPECT_EQ(x.dtype(), complex64);
  EXPECT_EQ(x.item<C>(), C(1.0f, 1.0f));
  array y(std::complex<float>{2.0f, -3.0f});
  EXPECT_EQ(y.dtype(), complex64);
  EXPECT_EQ(y.item<C>(), C(2.0f, -3.0f));
  // A real value converts with a zero imaginary part; complex to real keeps the real part (numpy and
  // MLX), to bool tests both parts.
  array r = astype(array({1.5f, -2.0f, 0.0f}), complex64);
  expect_complex(r, {{1.5, 0}, {-2, 0}, {0, 0}});
  array c = carr({C(1.5f, 2), C(0, 3), C(0, 0), C(-2.75f, 0)});
  testing::expect_array(astype(c, float32), {4}, {1.5, 0, 0, -2.75});
  testing::expect_array(astype(c, int32), {4}, {1, 0, 0, -2});
  EXPECT_EQ(astype(c, bool_).to_vector<bool>(), (std::vector<bool>{true, true, false, true}));
  // zeros / full / scalar operators keep complex64.
  expect_complex(zeros({2}, complex64), {{0, 0}, {0, 0}});
  expect_complex(full({2}, C(1, -1)), {{1, -1}, {1, -1}});
  expect_complex(c * 2.0f, {{3, 4}, {0, 6}, {0, 0}, {-5.5, 0}});
}

TEST(Complex, Printing) {
  std::ostringstream os;
  os << carr({C(1, 2), C(-0.5f, -0.25f)});
  EXPECT_NE(os.str().find("1+2j, -0.5-0.25j"), std::string::npos) << os.str();
  EXPECT_NE(os.str().find("complex64"), std::string::npos) << os.str();
}

TEST(Complex, ArithmeticMatchesNumpy) {
  const array a = a_vals(), b = b_vals();
  expect_complex(a + b, {{1.5, 1.0}, {1.5, 0.25}, {2.0, 2.0}});
  expect_complex(a - b, {{0.5, 3.0}, {-2.5, 0.25}, {4.0, -4.0}});
  expect_complex(a * b, {{2.5, 0.0}, {-1.0, 0.5}, {0.0, 10.0}});
  expect_complex(a / b, {{-1.2, 1.6}, {-0.25, 0.125}, {-0.6, -0.8}});
  expect_complex(power(a, b), {{4.382565021514893, -1.1243975162506104}, {0.1875, -0.25},
                               {-0.6688770055770874, -0.49183472990989685}}, 1e-5);
  expect_complex(negative(a), {{-1, -2}, {0.5, -0.25}, {-3, 1}});
  // Mixed with real arrays: promoted to complex64.
  expect_complex(a * array({2.0f, 1.0f, -1.0f}), {{2, 4}, {-0.5, 0.25}, {-3, 1}});
  expect_complex(a + array({1, 2, 3}), {{2, 2}, {1.5, 0.25}, {6, -1}});
}


TEST(Complex, ProductIsTheSameInEveryKernelLoop) {
  // One product, four loops: a scalar operand on either side, two full operands, and the fused
  // block loop (a chain of at least 256 elements fuses). Each rounds its two parts once, so all agree
  // bit for bit (the differential tester found the scalar loop and the fused one a bit apart), and
  // agree with the exact product rounded once.
  const array re = testing::lcg_uniform({1000}, -3.0, 3.0, 7), im = testing::lcg_uniform({1000}, -3.0, 3.0, 8);
  array a = add(astype(re, complex64), multiply(astype(im, complex64), array(C(0, 1))));
  const array s = array(C(0.3f, -1.7f));
  const array s_full = contiguous(broadcast_to(s, a.shape()));
  eval(a, s_full);
  array sv = multiply(s, a), vs = multiply(a, s), vv = multiply(s_full, a);
  const array fused = add(multiply(s, a), array(C(0, 0)));  // computed block by block
  EXPECT_TRUE(array_equal(sv, vv).item<bool>());
  EXPECT_TRUE(array_equal(vs, vv).item<bool>());
  EXPECT_TRUE(array_equal(fused, vv).item<bool>());
  const std::vector<C> av = a.to_vector<C>(), got = sv.to_vector<C>();
  for (size_t i = 0; i < av.size(); ++i) {
    const double ar = av[i].real(), ai = av[i].imag(), sr = 0.3f, si = -1.7f;
    ASSERT_EQ(got[i].real(), static_cast<float>(sr * ar - si * ai)) << i;
    ASSERT_EQ(got[i].imag(), static_cast<float>(sr * ai + si * ar)) << i;
  }
  // The plain formula, as numpy and PyTorch: (inf + 0i)(1 + 0i) has a NaN imaginary part.
  const C inf_prod = multiply(array(C(INFINITY, 0)), array(C(1, 0))).item<C>();
  EXPECT_TRUE(std::isinf(inf_prod.real()));
  EXPECT_TRUE(std::isnan(inf_prod.imag()));
}
TEST(Complex, UnaryFunctionsMatchNumpy) {
  const array a = a_vals();
  struct Case {
    const char* name;
    std::function<array(const array&)> f;
    Pairs want;
  };
  const std::vector<Case> cases = {
      {"exp", [](const array& x) { return exp(x); },
       {{-1.13120436668396, 2.471726655960083}, {0.5876750946044922, 0.1500580906867981}, {10.852261543273926, -16.901395797729492}}},
      {"log", [](const array& x) { return log(x); },
       {{0.8047189712524414, 1.1071487665176392}, {-0.5815753936767578, 2.677945137023926}, {1.1512925624847412, -0.32175055146217346}}},
      {"sqrt", [](const array& x) { return sqrt(x); },
       {{1.272019624710083, 0.7861514091491699}, {0.17178037762641907, 0.727673351764679}, {1.7553173303604126, -0.28484877943992615}}},
      {"sin", [](const array& x) { return sin(x); },
       {{3.165778636932373, 1.9596009254455566}, {-0.4944857954978943, 0.2216881662607193}, {0.21775953471660614, 1.1634403467178345}}},
      {"cos", [](const array& x) { return cos(x); },
       {{2.0327229499816895, -3.0518977642059326}, {0.9051501154899597, 0.12110880017280579}, {-1.5276381969451904, 0.1658443957567215}}},
      {"tan", [](const array& x) { return tan(x); },
       {{0.03381282463669777, 1.0147936344146729}, {-0.5045007467269897, 0.31242072582244873}, {-0.05916853994131088, -0.768017590045929}}},
      {"tanh", [](const array& x) { return tanh(x); },
       {{1.1667362451553345, -0.24345821142196655}, {-0.4854872524738312, 0.1980554610490799}, {1.0020551681518555, -0.004517137538641691}}},
      {"sinh", [](const array& x) { return sinh(x); },
       {{-0.489056259393692, 1.4031192064285278}, {-0.5048956871032715, 0.2789791226387024}, {5.412680625915527, -8.47164535522461}}},
      {"cosh", [](const array& x) { return cosh(x); },
       {{-0.6421481370925903, 1.0686073303222656}, {1.0925707817077637, -0.1289210319519043}, {5.439580917358398, -8.429750442504883}}},
      {"arcsin", [](const array& x) { return arcsin(x); },
       {{0.427078515291214, 1.5285710096359253}, {-0.5016088485717773, 0.2813960611820221}, {1.2330951690673828, -1.824198603630066}}},
      {"arccos", [](const array& x) { return arccos(x); },
       {{1.1437177658081055, -1.5285710096359253}, {2.0724050998687744, -0.2813960611820221}, {0.33770114183425903, 1.824198603630066}}},
      {"arctan", [](const array& x) { return arctan(x); },
       {{1.338972568511963, 0.4023594856262207}, {-0.48425450921058655, 0.20058661699295044}, {1.2767950296401978, -0.09193120151758194}}},
      {"arcsinh", [](const array& x) { return arcsinh(x); },
       {{1.4693516492843628, 1.063439965248108}, {-0.49267566204071045, 0.22432845830917358}, {1.8641616106033325, -0.3076036274433136}}},
      {"arccosh", [](const array& x) { return arccosh(x); },
       {{1.5285710096359253, 1.1437177658081055}, {0.2813960611820221, 2.0724050998687744}, {1.824198603630066, -0.33770114183425903}}},
      {"arctanh", [](const array& x) { return arctanh(x); },
       {{0.1732867956161499, 1.1780972480773926}, {-0.5003700256347656, 0.3143981695175171}, {0.30594387650489807, -1.4614619016647339}}},
      {"log10", [](const array& x) { return log10(x); },
       {{0.34948500990867615, 0.4808286130428314}, {-0.25257498025894165, 1.1630167961120605}, {0.5, -0.13973449170589447}}},
      {"log2", [](const array& x) { return log2(x); },
       {{1.160964012145996, 1.5972779989242554}, {-0.8390359282493591, 3.8634581565856934}, {1.660964012145996, -0.4641879200935364}}},
      {"log1p", [](const array& x) { return log1p(x); },
       {{1.0397207736968994, 0.7853981852531433}, {-0.5815753936767578, 0.46364760398864746}, {1.4166066646575928, -0.244978666305542}}},
      {"square", [](const array& x) { return square(x); }, {{-3.0, 4.0}, {0.1875, -0.25}, {8.0, -6.0}}},
      {"reciprocal", [](const array& x) { return reciprocal(x); }, {{0.2, -0.4}, {-1.6, -0.8}, {0.3, 0.1}}},
      {"sign", [](const array& x) { return sign(x); },
       {{0.4472135901451111, 0.8944271802902222}, {-0.8944271802902222, 0.4472135901451111}, {0.9486832618713379, -0.3162277638912201}}},
      {"conjugate", [](const array& x) { return conjugate(x); }, {{1, -2}, {-0.5, -0.25}, {3, 1}}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    expect_complex(c.f(a), c.want, 1e-5);
  }
  // sign(0) is 0.
  expect_complex(sign(carr({C(0, 0)})), {{0, 0}});
}

TEST(Complex, PartsAbsAndPredicates) {
  const array a = a_vals();
  array re = real(a), im = imag(a), mag = abs(a);
  EXPECT_EQ(re.dtype(), float32);
  EXPECT_EQ(im.dtype(), float32);
  EXPECT_EQ(mag.dtype(), float32);
  testing::expect_array(re, {3}, {1, -0.5, 3});
  testing::expect_array(im, {3}, {2, 0.25, -1});
  testing::expect_array(mag, {3}, {2.2360680103302, 0.55901700258255, 3.1622776985168457}, 1e-6);
  // Real arrays: real is the array, imag is zeros, conjugate is the array (MLX).
  array f = array({1.0f, -2.0f});
  EXPECT_EQ(real(f).id(), f.id());
  EXPECT_EQ(conjugate(f).id(), f.id());
  testing::expect_array(imag(f), {2}, {0, 0});
  // Comparisons are lexicographic (numpy): (-0.5+0.25j) < (2+0j), (1+2j) > (0.5-1j).
  const array b = b_vals();
  EXPECT_EQ(less(a, b).to_vector<bool>(), (std::vector<bool>{false, true, false}));
  EXPECT_EQ(equal(a, a).to_vector<bool>(), (std::vector<bool>{true, true, true}));
  EXPECT_EQ(less(carr({C(1, 1)}), carr({C(1, 2)})).item<bool>(), true);
  expect_complex(maximum(a, b), {{1, 2}, {2, 0}, {3, -1}});
  expect_complex(minimum(a, b), {{0.5, -1}, {-0.5, 0.25}, {-1, 3}});
  const float inf = std::numeric_limits<float>::infinity(), nan = std::nanf("");
  array odd = carr({C(nan, 0), C(0, nan), C(inf, 0), C(0, -inf), C(1, 1)});
  EXPECT_EQ(isnan(odd).to_vector<bool>(), (std::vector<bool>{true, true, false, false, false}));
  EXPECT_EQ(isinf(odd).to_vector<bool>(), (std::vector<bool>{false, false, true, true, false}));
  EXPECT_EQ(isfinite(odd).to_vector<bool>(), (std::vector<bool>{false, false, false, false, true}));
  EXPECT_EQ(isposinf(odd).to_vector<bool>(), (std::vector<bool>{false, false, true, false, false}));
  // nan_to_num replaces each part (numpy).
  expect_complex(nan_to_num(carr({C(nan, 1), C(2, inf)}), 0.0f, 7.0f), {{0, 1}, {2, 7}});
  EXPECT_TRUE(array_equal(carr({C(nan, 1)}), carr({C(nan, 1)}), true).item<bool>());
  EXPECT_FALSE(array_equal(carr({C(nan, 1)}), carr({C(nan, 1)})).item<bool>());
  EXPECT_TRUE(allclose(a, a + array(C(1e-7f, 0))).item<bool>());
}

TEST(Complex, ReductionsAndMatmulMatchNumpy) {
  const array a = a_vals();
  expect_complex(reshape(sum(a), {1}), {{3.5, 1.25}});
  expect_complex(reshape(prod(a), {1}), {{-3.75, -1.25}}, 1e-5);
  expect_complex(reshape(mean(a), {1}), {{1.1666666269302368, 0.4166666567325592}});
  array v = var(a);
  EXPECT_EQ(v.dtype(), float32);
  EXPECT_NEAR(v.item<float>(), 3.569444417953491, 1e-5);
  expect_complex(cumsum(a), {{1, 2}, {0.5, 2.25}, {3.5, 1.25}});
  expect_complex(cumprod(a), {{1, 2}, {-1, -0.75}, {-3.75, -1.25}}, 1e-5);
  // Strided rows and an axis reduction: a (2, 3) stack summed over axis 0.
  array m2 = stack({a, b_vals()});
  expect_complex(sum(m2, 0), {{1.5, 1.0}, {1.5, 0.25}, {2.0, 2.0}});
  expect_complex(sum(transpose(m2), 1), {{1.5, 1.0}, {1.5, 0.25}, {2.0, 2.0}});
  EXPECT_TRUE(all(carr({C(0, 1), C(1, 0)})).item<bool>());
  EXPECT_FALSE(any(carr({C(0, 0)})).item<bool>());
  // numpy: m @ n with m = [[1+1j, 2-1j], [0.5j, 3]], n = [[2, 1j], [1-1j, -1]].
  array m = array(std::vector<C>{C(1, 1), C(2, -1), C(0, 0.5f), C(3, 0)}, {2, 2});
  array n = array(std::vector<C>{C(2, 0), C(0, 1), C(1, -1), C(-1, 0)}, {2, 2});
  expect_complex(flatten(matmul(m, n)), {{3, -1}, {-3, 2}, {3, -2}, {-3.5, 0}});
  expect_complex(flatten(matmul(transpose(m), n)), {{2.5, 2.5}, {-1, 0.5}, {7, -5}, {-2, 2}});
  // A real operand is promoted.
  expect_complex(flatten(matmul(m, array({1.0f, 2.0f}))), {{5, -1}, {6, 0.5}});
}

TEST(Complex, ShapeAndIndexingOpsCarryValues) {
  array m = array(std::vector<C>{C(1, 1), C(2, -1), C(0, 0.5f), C(3, 0)}, {2, 2});
  expect_complex(flatten(transpose(m)), {{1, 1}, {0, 0.5}, {2, -1}, {3, 0}});
  expect_complex(flatten(contiguous(transpose(m))), {{1, 1}, {0, 0.5}, {2, -1}, {3, 0}});
  expect_complex(reshape(slice(m, {0, 1}, {2, 2}), {2}), {{2, -1}, {3, 0}});
  expect_complex(concatenate({reshape(m, {4}), carr({C(9, 9)})}), {{1, 1}, {2, -1}, {0, 0.5}, {3, 0}, {9, 9}});
  expect_complex(take(reshape(m, {4}), array({3, 0})), {{3, 0}, {1, 1}});
  expect_complex(where(array({true, false}), carr({C(1, 1), C(2, 2)}), carr({C(3, 3), C(4, 4)})), {{1, 1}, {4, 4}});
  expect_complex(flatten(broadcast_to(carr({C(1, -1)}), {2, 1})), {{1, -1}, {1, -1}});
  expect_complex(pad(carr({C(1, 2)}), {0}, {1}, {0}, array(C(0, 7))), {{0, 7}, {1, 2}});
}

TEST(Complex, UnsupportedOpsRefuseAtBuildTime) {
  const array z = a_vals();
  auto throws_naming = [](const std::function<void()>& f, const std::string& op) {
    try {
      f();
      ADD_FAILURE() << op << " did not throw";
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find(op), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("complex64"), std::string::npos) << e.what();
    }
  };
  throws_naming([&] { floor(z); }, "floor");
  throws_naming([&] { sigmoid(z); }, "sigmoid");
  throws_naming([&] { erf(z); }, "erf");
  throws_naming([&] { remainder(z, z); }, "remainder");
  throws_naming([&] { arctan2(z, z); }, "arctan2");
  throws_naming([&] { bitwise_and(z, z); }, "bitwise_and");
  throws_naming([&] { trunc(z); }, "trunc");
  throws_naming([&] { logcumsumexp(z); }, "logcumsumexp");
  throws_naming([&] { softmax(z, 0); }, "");
}

// Orderings are lexicographic (real part, then imaginary part), as numpy and MLX; a NaN in either part
// propagates through max / min / cummax and sorts last. numpy 1.24 in complex64:
// x = np.array([2+1j, 2-1j, -1+5j, 2+0j], np.complex64).
TEST(Complex, OrderingOpsAreLexicographic) {
  const array x = carr({C(2, 1), C(2, -1), C(-1, 5), C(2, 0)});
  expect_complex(reshape(max(x), {1}), {{2, 1}});
  expect_complex(reshape(min(x), {1}), {{-1, 5}});
  EXPECT_EQ(argmax(x).item<int>(), 0);
  EXPECT_EQ(argmin(x).item<int>(), 2);
  expect_complex(sort(x), {{-1, 5}, {2, -1}, {2, 0}, {2, 1}});
  EXPECT_EQ(argsort(x).to_vector<int>(), (std::vector<int>{2, 1, 3, 0}));
  expect_complex(topk(x, 2), {{2, 0}, {2, 1}});
  // partition: the second smallest in place, the smallest before it (the rest in no set order).
  const std::vector<C> part = partition(x, 1).to_vector<C>();
  EXPECT_EQ(part[0], C(-1, 5));
  EXPECT_EQ(part[1], C(2, -1));
  expect_complex(cummax(x), {{2, 1}, {2, 1}, {2, 1}, {2, 1}});
  expect_complex(cummin(x), {{2, 1}, {2, -1}, {-1, 5}, {-1, 5}});
  expect_complex(max(stack({x, carr({C(3, 0), C(2, -2), C(-1, 6), C(1, 9)})}), 0), {{3, 0}, {2, -1}, {-1, 6}, {2, 0}});
  // np.max([1+1j, nan+0j, 5+0j]) is nan+0j; sort keeps NaNs last, in their order.
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const array withnan = carr({C(1, 1), C(nan, 0), C(5, 0), C(0, nan)});
  EXPECT_TRUE(std::isnan(max(withnan).item<C>().real()));
  EXPECT_TRUE(std::isnan(min(withnan).item<C>().real()));
  EXPECT_EQ(argmax(withnan).item<int>(), 1);
  const std::vector<C> sorted = sort(withnan).to_vector<C>();
  EXPECT_EQ(sorted[0], C(1, 1));
  EXPECT_EQ(sorted[1], C(5, 0));
  EXPECT_TRUE(std::isnan(sorted[2].real()) && sorted[2].imag() == 0);
  EXPECT_TRUE(sorted[3].real() == 0 && std::isnan(sorted[3].imag()));
  // np.round([1.5+2.5j, -0.5-1.5j]): each part, half to even.
  expect_complex(round(carr({C(1.5f, 2.5f), C(-0.5f, -1.5f)})), {{2, 2}, {0, -2}});
}

TEST(Complex, NpyAndSafetensorsRoundTrip) {
  const array a = transpose(array(std::vector<C>{C(1, 2), C(-3.5f, -0.25f), C(0, 1), C(7, 0)}, {2, 2}));
  std::stringstream npy;
  save(npy, a);
  EXPECT_NE(npy.str().find("'descr': '<c8'"), std::string::npos);
  expect_complex(flatten(load(npy)), {{1, 2}, {0, 1}, {-3.5, -0.25}, {7, 0}});
  std::stringstream st;
  save_safetensors(st, {{"z", a}});
  EXPECT_NE(st.str().find("\"C64\""), std::string::npos);
  expect_complex(flatten(load_safetensors(st).first.at("z")), {{1, 2}, {0, 1}, {-3.5, -0.25}, {7, 0}});
  // numpy's big-endian complex64 (np.save(f, np.array([1+2j, -3.5-0.25j], '>c8'))): each float32
  // part is swapped on its own.
  std::string header = "{'descr': '>c8', 'fortran_order': False, 'shape': (2,), }";
  header.resize(117, ' ');
  header += '\n';
  std::string file = std::string("\x93NUMPY\x01\x00", 8) + std::string(1, char(118)) + std::string(1, '\0') + header;
  const unsigned char data[] = {63, 128, 0, 0, 64, 0, 0, 0, 192, 96, 0, 0, 190, 128, 0, 0};
  file.append(reinterpret_cast<const char*>(data), sizeof(data));
  std::stringstream be(file);
  expect_complex(load(be), {{1, 2}, {-3.5, -0.25}});
}

// Finite-difference checks of both transforms for f: complex64 (n) -> complex64 or float32 (n).
// vjp: L(z) = sum(Re(conj(c) f(z))) has gradient dL/dRe z + i dL/dIm z = vjp(c).
// jvp: (f(z + eps t) - f(z - eps t)) / (2 eps).
void check_complex_grads(const std::function<array(const array&)>& f, array z, double tol = 2e-2) {
  const double eps = 1e-3;
  const int n = static_cast<int>(z.size());
  const array y = f(z);
  const bool real_out = y.dtype() == float32;
  const array c = real_out ? array({0.7f, -1.3f, 0.4f}) : carr({C(0.7f, -0.2f), C(-1.3f, 0.5f), C(0.4f, 1.1f)});
  const array t = carr({C(0.3f, 0.9f), C(-0.6f, 0.2f), C(1.0f, -0.5f)});
  auto L = [&](const array& x) {
    return static_cast<double>(sum(real(multiply(conjugate(c), f(x)))).item<float>());
  };
  const std::vector<C> g = vjp(f, z, c).second.to_vector<C>();
  const std::vector<C> zv = z.to_vector<C>();
  for (int k = 0; k < n; ++k) {
    for (int part = 0; part < 2; ++part) {
      std::vector<C> up = zv, dn = zv;
      const C step = part == 0 ? C(float(eps), 0) : C(0, float(eps));
      up[k] = up[k] + step;
      dn[k] = dn[k] - step;
      const double fd = (L(carr(up)) - L(carr(dn))) / (2 * eps);
      const double an = part == 0 ? g[k].real() : g[k].imag();
      EXPECT_NEAR(an, fd, tol * std::max(1.0, std::fabs(fd))) << "vjp element " << k << (part ? " imag" : " real");
    }
  }
  const array jv = jvp(f, z, t).second;
  const array tt = multiply(t, array(C(float(eps), 0)));
  const array fd = divide(subtract(f(add(z, tt)), f(subtract(z, tt))), array(float(2 * eps)));
  const std::vector<C> jg = astype(jv, complex64).to_vector<C>(), jf = astype(fd, complex64).to_vector<C>();
  for (int k = 0; k < n; ++k) {
    EXPECT_NEAR(jg[k].real(), jf[k].real(), tol * std::max(1.0f, std::abs(jf[k]))) << "jvp element " << k;
    EXPECT_NEAR(jg[k].imag(), jf[k].imag(), tol * std::max(1.0f, std::abs(jf[k]))) << "jvp element " << k;
  }
}

TEST(Complex, GradsMatchFiniteDifferences) {
  const array z = a_vals(), w = b_vals();
  struct Case {
    const char* name;
    std::function<array(const array&)> f;
  };
  const std::vector<Case> cases = {
      {"real", [](const array& x) { return real(x); }},
      {"imag", [](const array& x) { return imag(x); }},
      {"abs", [](const array& x) { return abs(x); }},
      {"conjugate", [](const array& x) { return conjugate(x); }},
      {"multiply", [&](const array& x) { return multiply(x, w); }},
      {"divide", [&](const array& x) { return divide(w, x); }},
      {"exp", [](const array& x) { return exp(x); }},
      {"log", [](const array& x) { return log(x); }},
      {"sin", [](const array& x) { return sin(x); }},
      {"tanh", [](const array& x) { return tanh(x); }},
      {"sqrt", [](const array& x) { return sqrt(x); }},
      {"square", [](const array& x) { return square(x); }},
      {"power", [&](const array& x) { return power(x, w); }},
      {"prod", [](const array& x) { return broadcast_to(prod(x, 0, true), {3}); }},
      {"cumprod", [](const array& x) { return cumprod(x); }},
      {"cumsum", [](const array& x) { return cumsum(x); }},
      {"matmul", [&](const array& x) { return diagonal(matmul(reshape(x, {3, 1}), reshape(w, {1, 3}))); }},
      {"max", [](const array& x) { return broadcast_to(max(x, 0, true), {3}); }},
      {"min_times", [&](const array& x) { return multiply(broadcast_to(min(x, 0, true), {3}), w); }},
      {"sort", [](const array& x) { return sort(x, 0); }},
      {"topk", [&](const array& x) { return concatenate({topk(x, 2, 0), take(x, array({0}))}); }},
      {"cummax", [](const array& x) { return cummax(x); }},
      {"cummin", [](const array& x) { return cummin(x, 0, true); }},
      {"real_times_complex", [&](const array& x) { return multiply(real(x), w); }},
      {"abs_of_product", [&](const array& x) { return abs(multiply(x, x)); }},
      {"logaddexp", [&](const array& x) { return logaddexp(x, w); }},
  };
  for (const Case& cs : cases) {
    SCOPED_TRACE(cs.name);
    check_complex_grads(cs.f, z);
  }
}

// MLX's C++ test values (autograd_tests.cpp, "test complex gradients"): facts of the convention.
TEST(Complex, GradientConventionAsMlx) {
  auto mul = [](const std::vector<array>& in) { return std::vector<array>{multiply(in[0], in[1])}; };
  auto r = vjp(mul, {array(C(2, 4)), array(3.0f)}, {array(C(2, 3))}).second;
  EXPECT_EQ(r[0].dtype(), complex64);
  EXPECT_EQ(r[0].item<C>(), C(6, 9));
  EXPECT_EQ(r[1].dtype(), float32);
  EXPECT_EQ(r[1].item<float>(), 16.0f);  // Re((2+3i) conj(2+4i))
  auto j = jvp(mul, {array(C(2, 4)), array(3.0f)}, {array(C(1, 2)), array(2.0f)}).second;
  EXPECT_EQ(j[0].item<C>(), C(7, 14));
  auto div = [](const std::vector<array>& in) { return std::vector<array>{divide(in[0], in[1])}; };
  auto d = vjp(div, {array(C(2, 3)), array(C(1, 2))}, {array(C(2, -4))}).second;
  EXPECT_NEAR(d[0].item<C>().real(), 2.0, 1e-6);
  EXPECT_NEAR(d[0].item<C>().imag(), 0.0, 1e-6);
  EXPECT_NEAR(d[1].item<C>().real(), -3.2, 1e-6);
  EXPECT_NEAR(d[1].item<C>().imag(), -0.4, 1e-6);
  // grad of sum(2 real(x)) is 2, of sum(2 imag(x)) is 2i (MLX's python test_complex_vjps).
  auto gr = grad([](const array& x) { return sum(multiply(real(x), array(2.0f))); })(a_vals());
  expect_complex(gr, {{2, 0}, {2, 0}, {2, 0}});
  auto gi = grad([](const array& x) { return sum(multiply(imag(x), array(2.0f))); })(a_vals());
  expect_complex(gi, {{0, 2}, {0, 2}, {0, 2}});
}

// Found by the differential tester's complex family (tests/diff): numpy's values and PyTorch's (and
// finite differences') derivatives.
TEST(Complex, NaNPartsAreUnordered) {
  const float nan = std::nanf("");
  array x = carr({C(2.5f, nan), C(1, 1)}), y = carr({C(1, 1), C(0, nan)});
  // numpy: (2.5+nanj) > (1+1j) is False, and so is every other order with a NaN part.
  for (array r : {greater(x, y), greater_equal(x, y), less(x, y), less_equal(x, y)}) {
    EXPECT_EQ(r.to_vector<bool>(), (std::vector<bool>{false, false}));
  }
  // maximum / minimum propagate the NaN (numpy: maximum(1+1j, 0+nanj) is 0+nanj).
  std::vector<C> m = maximum(carr({C(1, 1)}), carr({C(0, nan)})).to_vector<C>();
  EXPECT_TRUE(std::isnan(m[0].imag()));
  std::vector<C> c = clip(carr({C(2.5f, nan)}), array(C(0, 0)), array(C(2, 0))).to_vector<C>();
  EXPECT_EQ(c[0].real(), 2.5f);
  EXPECT_TRUE(std::isnan(c[0].imag()));
  // A NaN bound gives NaN, as minimum(maximum(a, lo), hi) in numpy.
  std::vector<C> n = clip(carr({C(1, 1)}), array(C(nan, 0)), std::nullopt).to_vector<C>();
  EXPECT_TRUE(std::isnan(n[0].real()));
}

TEST(Complex, Log2AndLog10OfZero) {
  // numpy: log2(-0-0j) = -inf - 4.5323601j, log10(0+0j) = -inf + 0j.
  std::vector<C> l2 = log2(carr({C(-0.0f, -0.0f)})).to_vector<C>();
  EXPECT_TRUE(std::isinf(l2[0].real()) && l2[0].real() < 0);
  EXPECT_NEAR(l2[0].imag(), -4.5323601, 1e-6);
  std::vector<C> l10 = log10(carr({C(0, 0)})).to_vector<C>();
  EXPECT_TRUE(std::isinf(l10[0].real()));
  EXPECT_EQ(l10[0].imag(), 0.0f);
}

// logaddexp of complex64 as MLX computes it: hi + log1p(exp(lo - hi)), hi the larger in lexicographic
// order (exact values from Python's cmath; the first two equal the principal log(e^a + e^b)). Far apart,
// exp(lo - hi) underflows and the result is hi; a NaN part makes both parts NaN.
TEST(Complex, LogAddExp) {
  const array a = carr({C(1, 2), C(-3, 0.5f), C(100, 1), C(2, -1), C(NAN, 0)});
  const array b = carr({C(0.5f, -1), C(-3, 0.25f), C(-50, 2), C(2, -1), C(1, 1)});
  const Pairs want = {{0.10499301432446873, 1.7889591478473275}, {-2.3146857496673308, 0.375}, {100, 1},
                      {2.6931471805599454, -1}};
  for (array r : {logaddexp(a, b), logaddexp(b, a)}) {  // symmetric
    expect_complex(slice(r, {0}, {4}), want);
    const C last = r.to_vector<C>()[4];
    EXPECT_TRUE(std::isnan(last.real()) && std::isnan(last.imag()));
  }
  // A real operand is promoted; an infinite real part wins (hi), -inf adds nothing.
  const std::vector<C> inf = logaddexp(carr({C(INFINITY, 1), C(1, 2)}), array({0.0f, -INFINITY})).to_vector<C>();
  EXPECT_EQ(inf[0], C(INFINITY, 1));
  EXPECT_EQ(inf[1], C(1, 2));
}

TEST(Complex, SignAndArccoshDerivatives) {
  // sign(z) = z / |z| is not holomorphic: vjp(c) = (c - s Re(conj(s) c)) / |z| (PyTorch's sgn
  // rule). z = 3 + 4i, s = 0.6 + 0.8i, c = 1: Re(conj(s)) = 0.6, (1 - 0.36 - 0.48i) / 5.
  auto vj = vjp([](const array& z) { return sign(z); }, array(C(3, 4)), array(C(1, 0))).second.item<C>();
  EXPECT_NEAR(vj.real(), 0.128, 1e-6);
  EXPECT_NEAR(vj.imag(), -0.096, 1e-6);
  // jvp(t) is the same map: t = i gives (i - s Re(conj(s) i)) / 5 = (i - s 0.8) / 5.
  auto jv = jvp([](const array& z) { return sign(z); }, array(C(3, 4)), array(C(0, 1))).second.item<C>();
  EXPECT_NEAR(jv.real(), -0.096, 1e-6);
  EXPECT_NEAR(jv.imag(), 0.072, 1e-6);
  // 0 at z = 0.
  EXPECT_EQ(vjp([](const array& z) { return sign(z); }, array(C(0, 0)), array(C(1, 1))).second.item<C>(), C(0, 0));
  // arccosh'(z) = 1 / (sqrt(z - 1) sqrt(z + 1)); at z = -2 + i numpy's finite difference is
  // 0.0853 - 0.4529i... computed here from the formula in complex128.
  const std::complex<double> z(-2, 1);
  const std::complex<double> d = 1.0 / (std::sqrt(z - 1.0) * std::sqrt(z + 1.0));
  auto jd = jvp([](const array& x) { return arccosh(x); }, array(C(-2, 1)), array(C(1, 0))).second.item<C>();
  EXPECT_NEAR(jd.real(), d.real(), 1e-5);
  EXPECT_NEAR(jd.imag(), d.imag(), 1e-5);
  const std::complex<double> h(1e-6, 0);
  const std::complex<double> fd = (std::acosh(z + h) - std::acosh(z - h)) / (2.0 * h);
  EXPECT_NEAR(fd.real(), d.real(), 1e-5);  // the formula is the principal branch's derivative
  EXPECT_NEAR(fd.imag(), d.imag(), 1e-5);
}

TEST(Complex, DerivativesOnABranchCutFollowTheSignOfZero) {
  // On arccosh's cut (-1, 1) the sign of the zero imaginary part picks the side (C99), and the
  // derivative is that side's limit: -i / sqrt(1 - x^2) above, +i / sqrt(1 - x^2) below. A one-sided
  // finite difference (the step along the real axis stays on the cut) agrees.
  const float x = -0.0493f;
  const double s = 1.0 / std::sqrt(1.0 - double(x) * x);
  for (float side : {0.0f, -0.0f}) {
    const C d = jvp([](const array& z) { return arccosh(z); }, array(C(x, side)), array(C(1, 0))).second.item<C>();
    const double want = std::signbit(side) ? s : -s;
    EXPECT_NEAR(d.real(), 0.0, 1e-6) << "imaginary part " << side;
    EXPECT_NEAR(d.imag(), want, 1e-5) << "imaginary part " << side;
    // (z + h with a complex h would add +0 to the imaginary -0 and cross the cut.)
    const std::complex<double> fd =
        (std::acosh(std::complex<double>(x + 1e-6, side)) - std::acosh(std::complex<double>(x - 1e-6, side))) / 2e-6;
    EXPECT_NEAR(fd.imag(), want, 1e-5) << "imaginary part " << side;
    // vjp of 1 is the conjugate derivative.
    const C v = vjp([](const array& z) { return arccosh(z); }, array(C(x, side)), array(C(1, 0))).second.item<C>();
    EXPECT_NEAR(v.imag(), -want, 1e-5) << "imaginary part " << side;
  }
  // log after cos: cos(2.5 + 0i) = -0.801 - 0i lies on log's cut, below it: log = -0.2217 - pi i,
  // and the derivative of log(cos z)^2 is 2 log(cos z) (-tan z), with that -pi.
  auto f = [](const array& z) { return square(log(cos(z))); };
  const C d = jvp(f, array(C(2.5f, 0.0f)), array(C(1, 0))).second.item<C>();
  const std::complex<double> l(std::log(-std::cos(2.5)), -M_PI);
  const std::complex<double> want = 2.0 * l * -std::tan(2.5);
  EXPECT_NEAR(d.real(), want.real(), 1e-4);
  EXPECT_NEAR(d.imag(), want.imag(), 1e-4);
}

TEST(Complex, Log1pKeepsPrecisionNearZero) {
  // log1p(z) for z = 1e-7 (1 + i): real part log1p(x (2 + x) + y^2) / 2 = 1e-7 to 7 digits;
  // log(1 + z) in float32 rounds 1 + z and gives 1.19e-7. Imaginary part atan2(1e-7, 1 + 1e-7).
  std::vector<C> l = log1p(carr({C(1e-7f, 1e-7f), C(-0.25f, 0.125f)})).to_vector<C>();
  EXPECT_NEAR(l[0].real(), 1.0e-7, 1e-13);
  EXPECT_NEAR(l[0].imag(), 9.99999900e-8, 1e-13);
  // Farther from 0 the result is log(1 + z): log(0.75 + 0.125i) = -0.27398259 + 0.16514868i.
  EXPECT_NEAR(l[1].real(), -0.27398259, 1e-6);
  EXPECT_NEAR(l[1].imag(), 0.16514868, 1e-6);
}

TEST(Complex, MaskedScatter) {
  array out = masked_scatter(zeros({4}, complex64), array({true, false, true, false}), carr({C(1, 2), C(3, -4)}));
  expect_complex(out, {{1, 2}, {0, 0}, {3, -4}, {0, 0}});
}

}  // namespace
}  // namespace loom

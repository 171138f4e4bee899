// The vectorized float32 math (ops/kernels/simd_math.h) as the ops run it: exp, log, tanh, sigmoid and
// erf on float32 arrays against the exact value (double std::, rounded to float) over a sample of every
// float32 plus dense windows where the formulas change, special values bit for bit as std:: gives
// them, and the float16 / bfloat16 / float64 and strided paths.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <string>

#include <loom/kernels/simd_math.h>

#include "../test_utils.h"

using namespace loom;

namespace {

float from_bits(uint32_t b) {
  float f;
  std::memcpy(&f, &b, sizeof f);
  return f;
}
uint32_t to_bits(float f) {
  uint32_t b;
  std::memcpy(&b, &f, sizeof b);
  return b;
}

// |y - exact| in units of the float32 ulp at `exact` (subnormal ulp below 2^-126). An exact value past
// FLT_MAX (rounding to inf) must give inf exactly.
double ulp_error(float y, double exact) {
  if (std::isnan(exact)) return std::isnan(y) ? 0 : 1e30;
  if (std::fabs(exact) >= 0x1.ffffffp127) return y == std::copysign(HUGE_VALF, exact) ? 0 : 1e30;
  if (std::isnan(y) || std::isinf(y)) return 1e30;
  int e;
  std::frexp(exact, &e);
  return std::fabs(double(y) - exact) / std::ldexp(1.0, std::max(e - 24, -149));
}

struct MathCase {
  const char* name;
  std::function<array(const array&)> op;
  std::function<double(double)> exact;
  std::function<float(float)> std_float;
  double max_ulp;  // against the exact value
};

double exact_sigmoid(double x) { return x >= 0 ? 1 / (1 + std::exp(-x)) : std::exp(x) / (1 + std::exp(x)); }

const MathCase kCases[] = {
    {"exp", [](const array& a) { return exp(a); }, [](double x) { return std::exp(x); },
     [](float x) { return std::exp(x); }, 1.0},
    {"log", [](const array& a) { return log(a); }, [](double x) { return std::log(x); },
     [](float x) { return std::log(x); }, 1.0},
    {"tanh", [](const array& a) { return tanh(a); }, [](double x) { return std::tanh(x); },
     [](float x) { return std::tanh(x); }, 1.5},
    {"sigmoid", [](const array& a) { return sigmoid(a); }, exact_sigmoid,
     [](float x) { return x >= 0 ? 1 / (1 + std::exp(-x)) : std::exp(x) / (1 + std::exp(x)); }, 2.5},
    {"erf", [](const array& a) { return erf(a); }, [](double x) { return std::erf(x); },
     [](float x) { return std::erf(x); }, 1.5},
};

// Every 509th float32 bit pattern (all signs, exponents, subnormals, infs and NaNs), and every float
// in windows around the places where a formula switches or the result leaves the normal range.
std::vector<float> sample_inputs() {
  std::vector<float> v;
  for (uint64_t b = 0; b < (uint64_t(1) << 32); b += 509) v.push_back(from_bits(uint32_t(b)));
  const float centers[] = {0.625f, 1.0f,    3.92f,   4.0f,     88.7228f, -87.33f, -103.97f, -104.0f,
                           89.0f,  1.41421f, 0.70711f, 1e-38f, 0.5f,    2.0f,    0.0f};
  for (float c : centers) {
    for (float s : {c, -c}) {
      uint32_t b = to_bits(s);
      for (int64_t d = -20000; d <= 20000; ++d) {
        int64_t bb = int64_t(b) + d;
        if (bb >= 0 && bb <= int64_t(UINT32_MAX)) v.push_back(from_bits(uint32_t(bb)));
      }
    }
  }
  return v;
}

TEST(SimdMath, Float32WithinUlpsOfExactOverSampledFloats) {
  const std::vector<float> in = sample_inputs();
  const array x(in, {int(in.size())});
  for (const MathCase& c : kCases) {
    std::vector<float> out = c.op(x).to_vector<float>();
    ASSERT_EQ(out.size(), in.size());
    double worst = 0;
    float worst_x = 0;
    for (size_t i = 0; i < in.size(); ++i) {
      double e = ulp_error(out[i], c.exact(double(in[i])));
      if (e > worst) worst = e, worst_x = in[i];
    }
    EXPECT_LE(worst, c.max_ulp) << c.name << " worst at x = " << worst_x;
  }
}

TEST(SimdMath, Float32WithinUlpsOfStdFloat) {
  // std::'s float functions are themselves within about 1 ulp of exact, so ours are within
  // max_ulp + 1 of theirs (in bits, over a sample of finite inputs).
  std::vector<float> in;
  for (uint64_t b = 0; b < (uint64_t(1) << 32); b += 4099) {
    float f = from_bits(uint32_t(b));
    if (std::isfinite(f)) in.push_back(f);
  }
  const array x(in, {int(in.size())});
  for (const MathCase& c : kCases) {
    std::vector<float> out = c.op(x).to_vector<float>();
    int64_t worst = 0;
    for (size_t i = 0; i < in.size(); ++i) {
      float s = c.std_float(in[i]);
      if (std::isnan(s)) {
        EXPECT_TRUE(std::isnan(out[i])) << c.name << "(" << in[i] << ")";
        continue;
      }
      // Distance in representable floats (signed-magnitude bits mapped to one ordered line).
      auto line = [](float f) {
        int64_t b = to_bits(f);
        return b & 0x80000000 ? -(b & 0x7fffffff) : b;
      };
      worst = std::max(worst, std::abs(line(out[i]) - line(s)));
    }
    EXPECT_LE(worst, int64_t(c.max_ulp) + 2) << c.name;
  }
}

TEST(SimdMath, SpecialValuesAsStd) {
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  const float denorm = std::numeric_limits<float>::denorm_min(), fmax = std::numeric_limits<float>::max();
  const float fmin = std::numeric_limits<float>::min();
  const std::vector<float> in = {0.0f,  -0.0f, inf,     -inf,   nan,    -nan,   denorm, -denorm, fmin,  -fmin,
                                 fmax,  -fmax, 1.0f,    -1.0f,  88.72283935546875f, 88.72283172607421875f,
                                 -87.5f, -100.0f, -103.972f, -104.0f, -200.0f, 20.0f,  -20.0f, 10.0f, -10.0f,
                                 5.0f,  -5.0f, 0x1p-130f, 1e-20f, -1e-20f};
  const array x(in, {int(in.size())});
  for (const MathCase& c : kCases) {
    std::vector<float> out = c.op(x).to_vector<float>();
    for (size_t i = 0; i < in.size(); ++i) {
      const float s = c.std_float(in[i]);
      if (std::isnan(s)) {
        EXPECT_TRUE(std::isnan(out[i])) << c.name << "(" << in[i] << ") = " << out[i];
      } else if (std::isinf(s) || s == 0.0f || std::fabs(s) == 1.0f) {
        EXPECT_EQ(to_bits(out[i]), to_bits(s)) << c.name << "(" << in[i] << ") = " << out[i] << ", std " << s;
      } else {
        EXPECT_LE(ulp_error(out[i], c.exact(in[i])), c.max_ulp) << c.name << "(" << in[i] << ") = " << out[i];
      }
    }
  }
}

TEST(SimdMath, StridedInputsMatchContiguous) {
  std::vector<float> in(64 * 48);
  for (size_t i = 0; i < in.size(); ++i) in[i] = -9.0f + 18.0f * float(i) / float(in.size());
  const array x(in, {64, 48});
  const array xt = transpose(x);  // a strided view: the per-row path
  for (const MathCase& c : kCases) {
    if (std::string(c.name) == "log") continue;  // negative inputs; checked below on |x|
    std::vector<float> a = c.op(xt).to_vector<float>(), b = transpose(c.op(x)).to_vector<float>();
    EXPECT_EQ(a, b) << c.name;
  }
  std::vector<float> a = log(abs(xt)).to_vector<float>(), b = transpose(log(abs(x))).to_vector<float>();
  EXPECT_EQ(a, b);
}

TEST(SimdMath, OtherFloatDtypesStillCorrect) {
  const std::vector<double> in = {-6.0, -2.5, -0.75, -0.1, 0.0, 0.3, 0.9, 1.7, 3.0, 7.5};
  std::vector<double> pos;
  for (double v : in) pos.push_back(std::fabs(v) + 0.05);
  for (const MathCase& c : kCases) {
    const bool is_log = std::string(c.name) == "log";
    const std::vector<double>& v = is_log ? pos : in;
    // float64 keeps std:: (bit for bit).
    std::vector<double> d = c.op(array(v, {int(v.size())}, float64)).to_vector<double>();
    for (size_t i = 0; i < v.size(); ++i) {
      double want = std::string(c.name) == "sigmoid" ? exact_sigmoid(v[i]) : c.exact(v[i]);
      EXPECT_EQ(d[i], want) << c.name << "(" << v[i] << ") float64";
    }
    // float16 and bfloat16 compute in float32 and round.
    for (Dtype dt : {float16, bfloat16}) {
      array h = astype(array(v, {int(v.size())}, float64), dt);
      std::vector<double> hin = astype(h, float64).to_vector<double>();
      std::vector<double> out = astype(c.op(h), float64).to_vector<double>();
      const double tol = dt == float16 ? 1e-3 : 8e-3;  // half an ulp of the format, relative
      for (size_t i = 0; i < v.size(); ++i) {
        double want = c.exact(hin[i]);
        EXPECT_NEAR(out[i], want, tol * std::max(std::fabs(want), 1e-4)) << c.name << "(" << hin[i] << ")";
      }
    }
  }
}

// gelu and gelu_tanh are not ops of their own (nn composes them from erf and sigmoid); the header's
// versions are for fused kernels and are checked here directly.
TEST(SimdMath, GeluFunctionsMatchTheirDefinitions) {
  double worst_exact = 0, worst_tanh = 0;
  float wx = 0, wt = 0;
  for (int i = -200000; i <= 200000; ++i) {
    const float x = float(i) * 5e-5f;  // [-10, 10]
    const double xd = x;
    const double want = 0.5 * xd * (1 + std::erf(xd / std::sqrt(2.0)));
    const double u = std::sqrt(2 / M_PI) * (xd + 0.044715 * xd * xd * xd);
    const double want_tanh = xd * exact_sigmoid(2 * u);  // = x (1 + tanh(u)) / 2 without the cancellation
    // A few ulp of the result, plus for x < 0, where 1 + erf cancels, |x| / 2 times an ulp of 1 (erf
    // near -1 is only known to an ulp of 1). The ratio must stay below 1.
    const double e = std::fabs(simd::gelu(x) - want) / (4 * 0x1p-24 * std::fabs(want) + std::fabs(xd) * 0x1p-24);
    // For gelu_tanh, the float32 rounding of sigmoid's argument w = 2u alone moves the result by
    // |w| ulp relative (sigmoid'(w) / sigmoid(w) = 1 - sigmoid(w)), so the bound grows with |w|.
    const double et =
        std::fabs(simd::gelu_tanh(x) - want_tanh) / (4 * 0x1p-24 * std::fabs(want_tanh) * (1 + 2 * std::fabs(u)));
    if (e > worst_exact) worst_exact = e, wx = x;
    if (et > worst_tanh) worst_tanh = et, wt = x;
  }
  EXPECT_LE(worst_exact, 1.0) << "at x = " << wx;
  EXPECT_LE(worst_tanh, 1.0) << "at x = " << wt;
  EXPECT_TRUE(std::isnan(simd::gelu(std::numeric_limits<float>::quiet_NaN())));
  EXPECT_EQ(simd::gelu(std::numeric_limits<float>::infinity()), std::numeric_limits<float>::infinity());
  EXPECT_EQ(simd::gelu_tanh(std::numeric_limits<float>::infinity()), std::numeric_limits<float>::infinity());
  EXPECT_EQ(simd::gelu(-30.0f), 0.0f);
  EXPECT_EQ(simd::gelu_tanh(-30.0f), 0.0f);
}

}  // namespace

#include "loom/core/serialize.h"
#include "loom/ops/elementwise.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "loom/kernels/elementwise.h"
#include "loom/kernels/simd_math.h"
#include "loom/ops/utils.h"

namespace loom {

namespace detail {

float erfinv_f(float y) { return static_cast<float>(erfinv_d(y)); }

double erfinv_d(double y) {
  if (std::isnan(y) || y < -1.0 || y > 1.0) return std::numeric_limits<double>::quiet_NaN();
  if (y == 1.0) return std::numeric_limits<double>::infinity();
  if (y == -1.0) return -std::numeric_limits<double>::infinity();
  double x = erfinv_approx(y);  // then Newton steps on erf(x) = y
  for (int i = 0; i < 2; ++i) {
    double err = std::erf(x) - y;
    x -= err / (1.1283791670955126 * std::exp(-x * x));
  }
  return x;
}

std::vector<int> normalize_axes(const std::vector<int>& axes, int ndim, const char* op) {
  std::vector<int> out;
  for (int a : axes) out.push_back(normalize_axis(a, ndim, op));
  std::sort(out.begin(), out.end());
  for (size_t i = 1; i < out.size(); ++i) {
    if (out[i] == out[i - 1]) {
      throw std::invalid_argument(msg("[", op, "] axis ", out[i], " is repeated"));
    }
  }
  return out;
}

}  // namespace detail

namespace {

using K = ElementwiseKind;

array zeros_grad(const array& v) { return zeros_like(v); }

// ---- unary ops ----
// exp, log, tanh, sigmoid and erf take a float overload from kernels/simd_math.h (float32, and
// float16 / bfloat16, which compute in float): loops over it vectorize. float64 keeps std::.
struct NegativeOp {
  static constexpr const char* name = "Negative";
  static constexpr bool complex = true;
  static constexpr K kind = K::numeric;
  template <class T> T operator()(T x) const {
    if constexpr (std::is_integral_v<T>) return kernels::wrapping_sub(T(0), x);  // -INT_MIN is INT_MIN
    else return -x;
  }
  static array grad(const array&, const array&, const array& v) { return negative(v); }
};
struct AbsOp {
  static constexpr const char* name = "Abs";
  static constexpr K kind = K::any;
  template <class T> T operator()(T x) const {
    if constexpr (std::is_unsigned_v<T>) return x;
    else if constexpr (std::is_integral_v<T>) return x < T(0) ? kernels::wrapping_sub(T(0), x) : x;  // |INT_MIN| wraps
    else return std::fabs(x);  // clears the sign of -0.0 too (x < 0 ? -x : x kept it)
  }
  static array grad(const array& x, const array&, const array& v) { return multiply(v, sign(x)); }
};
// z / d for a real d, part by part (a complex division would turn -inf * 0 into NaN).
inline complex64_t complex_over(std::complex<float> z, float d) { return complex64_t(z.real() / d, z.imag() / d); }

struct SignOp {
  static constexpr const char* name = "Sign";
  static constexpr bool complex = true;
  static constexpr K kind = K::any;
  template <class T> T operator()(T x) const {
    if constexpr (std::is_same_v<T, bool>) return x;
    else if constexpr (is_complex_v<T>) return x == T(0) ? x : x / T(std::abs(x));  // numpy 2 and MLX: z / |z|
    else if constexpr (std::is_unsigned_v<T>) return x != 0;
    else if constexpr (std::is_floating_point_v<T>) return std::isnan(x) ? x : T((x > T(0)) - (x < T(0)));
    else return T((x > T(0)) - (x < T(0)));
  }
  // Real sign is piecewise constant. Complex sign z / |z| is not holomorphic: its derivative maps w
  // to (w - s Re(conj(s) w)) / |z| (s = sign z), for tangents and cotangents alike, 0 at z = 0
  // (PyTorch's sgn rule).
  static array grad(const array& x, const array& y, const array& v) {
    return is_complex(x.dtype()) ? complex_rule(x, y, v) : zeros_grad(v);
  }
  static array complex_vjp(const array& x, const array& y, const array& c) { return complex_rule(x, y, c); }
  static array complex_rule(const array& x, const array& s, const array& w) {
    array r = abs(x);
    array at0 = equal(r, zeros_like(r));
    array d = divide(subtract(w, multiply(s, real(multiply(conjugate(s), w)))), where(at0, ones_like(r), r));
    return where(at0, zeros_like(d), d);
  }
};
struct SquareOp {
  static constexpr const char* name = "Square";
  static constexpr bool complex = true;
  static constexpr K kind = K::numeric;
  template <class T> T operator()(T x) const { return kernels::wrapping_mul(x, x); }
  static array grad(const array& x, const array&, const array& v) { return multiply(v, x * 2.0); }
};
struct SqrtOp {
  static constexpr const char* name = "Sqrt";
  static constexpr bool complex = true;
  static constexpr K kind = K::floating;
  template <class T> T operator()(T x) const { return std::sqrt(x); }
  static array grad(const array&, const array& y, const array& v) { return divide(v, y * 2.0); }
};
struct RsqrtOp {
  static constexpr const char* name = "Rsqrt";
  static constexpr bool complex = true;
  static constexpr K kind = K::floating;
  template <class T> T operator()(T x) const { return T(1) / T(std::sqrt(x)); }
  static array grad(const array&, const array& y, const array& v) { return multiply(v, y * y * y * -0.5); }
};
struct ReciprocalOp {
  static constexpr const char* name = "Reciprocal";
  static constexpr bool complex = true;
  static constexpr K kind = K::floating;
  template <class T> T operator()(T x) const { return T(1) / x; }
  static array grad(const array&, const array& y, const array& v) { return negative(multiply(v, y * y)); }
};
struct ExpOp {
  static constexpr const char* name = "Exp";
  static constexpr bool complex = true;
  static constexpr K kind = K::floating;
  template <class T> T operator()(T x) const { return std::exp(x); }
  LOOM_SIMD_INLINE float operator()(float x) const { return simd::exp(x); }
  static array grad(const array&, const array& y, const array& v) { return multiply(v, y); }
};
struct Expm1Op {
  static constexpr const char* name = "Expm1";
  static constexpr K kind = K::floating;
  template <class T> T operator()(T x) const { return std::expm1(x); }
  static array grad(const array&, const array& y, const array& v) { return multiply(v, y + 1.0); }
};
struct LogOp {
  static constexpr const char* name = "Log";
  static constexpr bool complex = true;
  static constexpr K kind = K::floating;
  template <class T> T operator()(T x) const { return std::log(x); }
  LOOM_SIMD_INLINE float operator()(float x) const { return simd::log(x); }
  static array grad(const array& x, const array&, const array& v) { return divide(v, x); }
};
struct Log1pOp {
  static constexpr const char* name = "Log1p";
  static constexpr bool complex = true;
  static constexpr K kind = K::floating;
  template <class T> T operator()(T x) const {
    if constexpr (is_complex_v<T>) {
      // Near 0, |1 + z|^2 = 1 + (x (2 + x) + y^2) and log1p of the small part keeps the relative
      // precision that log(1 + z) loses by rounding 1 + z (numpy's way); farther out, log(1 + z).
      const double re = x.real(), im = x.imag();
      if (re * re + im * im < 0.25) return T(float(0.5 * std::log1p(re * (2.0 + re) + im * im)), float(std::atan2(im, 1.0 + re)));
      return std::log(T(1) + x);
    } else {
      return std::log1p(x);
    }
  }
  static array grad(const array& x, const array&, const array& v) { return divide(v, x + 1.0); }
};
struct Log2Op {
  static constexpr const char* name = "Log2";
  static constexpr bool complex = true;
  static constexpr K kind = K::floating;
  template <class T> T operator()(T x) const {
    // Each part divided by ln 2 (numpy's), not a complex division: log(0) = -inf + i arg, and
    // -inf times the divisor's zero imaginary part would make the imaginary part NaN.
    if constexpr (is_complex_v<T>) return complex_over(std::log(x), float(M_LN2));
    else return std::log2(x);
  }
  static array grad(const array& x, const array&, const array& v) { return divide(v, x * M_LN2); }
};
struct Log10Op {
  static constexpr const char* name = "Log10";
  static constexpr bool complex = true;
  static constexpr K kind = K::floating;
  template <class T> T operator()(T x) const {
    if constexpr (is_complex_v<T>) return complex_over(std::log(x), float(M_LN10));  // as log2
    else return std::log10(x);
  }
  static array grad(const array& x, const array&, const array& v) { return divide(v, x * M_LN10); }
};
struct SinOp {
  static constexpr const char* name = "Sin";
  static constexpr bool complex = true;
  static constexpr K kind = K::floating;
  template <class T> T operator()(T x) const { return std::sin(x); }
  static array grad(const array& x, const array&, const array& v) { return multiply(v, cos(x)); }
};
struct CosOp {
  static constexpr const char* name = "Cos";
  static constexpr bool complex = true;
  static constexpr K kind = K::floating;
  template <class T> T operator()(T x) const { return std::cos(x); }
  static array grad(const array& x, const array&, const array& v) { return negative(multiply(v, sin(x))); }
};
struct TanOp {
  static constexpr const char* name = "Tan";
  static constexpr bool complex = true;
  static constexpr K kind = K::floating;
  template <class T> T operator()(T x) const { return std::tan(x); }
  static array grad(const array&, const array& y, const array& v) { return multiply(v, square(y) + 1.0); }
};
struct TanhOp {
  static constexpr const char* name = "Tanh";
  static constexpr bool complex = true;
  static constexpr K kind = K::floating;
  template <class T> T operator()(T x) const { return std::tanh(x); }
  LOOM_SIMD_INLINE float operator()(float x) const { return simd::tanh(x); }
  static array grad(const array&, const array& y, const array& v) { return multiply(v, 1.0 - square(y)); }
};
struct ArcSinOp {
  static constexpr const char* name = "ArcSin";
  static constexpr bool complex = true;
  static constexpr K kind = K::floating;
  template <class T> T operator()(T x) const { return std::asin(x); }
  static array grad(const array& x, const array&, const array& v) { return multiply(v, rsqrt(1.0 - square(x))); }
};
struct ArcCosOp {
  static constexpr const char* name = "ArcCos";
  static constexpr bool complex = true;
  static constexpr K kind = K::floating;
  template <class T> T operator()(T x) const { return std::acos(x); }
  static array grad(const array& x, const array&, const array& v) { return negative(multiply(v, rsqrt(1.0 - square(x)))); }
};
struct ArcTanOp {
  static constexpr const char* name = "ArcTan";
  static constexpr bool complex = true;
  static constexpr K kind = K::floating;
  template <class T> T operator()(T x) const { return std::atan(x); }
  static array grad(const array& x, const array&, const array& v) { return divide(v, square(x) + 1.0); }
};
struct SinhOp {
  static constexpr const char* name = "Sinh";
  static constexpr bool complex = true;
  static constexpr K kind = K::floating;
  template <class T> T operator()(T x) const { return std::sinh(x); }
  static array grad(const array& x, const array&, const array& v) { return multiply(v, cosh(x)); }
};
struct CoshOp {
  static constexpr const char* name = "Cosh";
  static constexpr bool complex = true;
  static constexpr K kind = K::floating;
  template <class T> T operator()(T x) const { return std::cosh(x); }
  static array grad(const array& x, const array&, const array& v) { return multiply(v, sinh(x)); }
};
struct ArcSinhOp {
  static constexpr const char* name = "ArcSinh";
  static constexpr bool complex = true;
  static constexpr K kind = K::floating;
  template <class T> T operator()(T x) const { return std::asinh(x); }
  static array grad(const array& x, const array&, const array& v) { return multiply(v, rsqrt(square(x) + 1.0)); }
};
struct ArcCoshOp {
  static constexpr const char* name = "ArcCosh";
  static constexpr bool complex = true;
  static constexpr K kind = K::floating;
  template <class T> T operator()(T x) const { return std::acosh(x); }
  // 1 / (sqrt(z - 1) sqrt(z + 1)): on complex inputs 1 / sqrt(z^2 - 1) has the wrong sign where
  // Re z < 0 (the principal branch of acosh is not that of the square root of z^2 - 1).
  static array grad(const array& x, const array&, const array& v) {
    return divide(v, multiply(sqrt(x - 1.0), sqrt(x + 1.0)));
  }
};
struct ArcTanhOp {
  static constexpr const char* name = "ArcTanh";
  static constexpr bool complex = true;
  static constexpr K kind = K::floating;
  template <class T> T operator()(T x) const { return std::atanh(x); }
  static array grad(const array& x, const array&, const array& v) { return divide(v, 1.0 - square(x)); }
};
struct SigmoidOp {
  static constexpr const char* name = "Sigmoid";
  static constexpr K kind = K::floating;
  template <class T> T operator()(T x) const {
    if (x >= T(0)) return T(1) / (T(1) + std::exp(-x));
    T e = std::exp(x);
    return e / (T(1) + e);
  }
  LOOM_SIMD_INLINE float operator()(float x) const { return simd::sigmoid(x); }
  static array grad(const array&, const array& y, const array& v) { return multiply(v, y * (1.0 - y)); }
};
struct ErfOp {
  static constexpr const char* name = "Erf";
  static constexpr K kind = K::floating;
  template <class T> T operator()(T x) const { return std::erf(x); }
  LOOM_SIMD_INLINE float operator()(float x) const { return simd::erf(x); }
  static array grad(const array& x, const array&, const array& v) {
    return multiply(v, exp(negative(square(x))) * M_2_SQRTPI);
  }
};
struct ErfinvOp {
  static constexpr const char* name = "Erfinv";
  static constexpr K kind = K::floating;
  template <class T> T operator()(T x) const {
    if constexpr (std::is_same_v<T, double>) return detail::erfinv_d(x);
    else return detail::erfinv_f(x);
  }
  static array grad(const array&, const array& y, const array& v) {
    return multiply(v, exp(square(y)) * (0.5 * std::sqrt(M_PI)));
  }
};
struct FloorOp {
  static constexpr const char* name = "Floor";
  static constexpr K kind = K::numeric;
  template <class T> T operator()(T x) const {
    if constexpr (std::is_floating_point_v<T>) return std::floor(x);
    else return x;
  }
  static array grad(const array&, const array&, const array& v) { return zeros_grad(v); }
};
struct CeilOp {
  static constexpr const char* name = "Ceil";
  static constexpr K kind = K::numeric;
  template <class T> T operator()(T x) const {
    if constexpr (std::is_floating_point_v<T>) return std::ceil(x);
    else return x;
  }
  static array grad(const array&, const array&, const array& v) { return zeros_grad(v); }
};
struct RoundOp {  // half to even (the default rounding mode); complex64: each part, as numpy and MLX
  static constexpr const char* name = "Round";
  static constexpr bool complex = true;
  static constexpr K kind = K::numeric;
  template <class T> T operator()(T x) const {
    if constexpr (is_complex_v<T>) return T(std::complex<float>(std::nearbyint(x.real()), std::nearbyint(x.imag())));
    else if constexpr (std::is_floating_point_v<T>) return std::nearbyint(x);
    else return x;
  }
  static array grad(const array&, const array&, const array& v) { return zeros_grad(v); }
};
struct LogicalNotOp {
  static constexpr const char* name = "LogicalNot";
  static constexpr bool complex = true;
  static constexpr K kind = K::predicate;
  template <class T> bool operator()(T x) const { return !(x != T(0)); }
  static array grad(const array&, const array&, const array& v) { return zeros_grad(v); }
};
struct IsNanOp {
  static constexpr const char* name = "IsNan";
  static constexpr bool complex = true;
  static constexpr K kind = K::predicate;
  template <class T> bool operator()(T x) const {
    if constexpr (is_complex_v<T>) return std::isnan(x.real()) || std::isnan(x.imag());
    else if constexpr (std::is_floating_point_v<T>) return std::isnan(x);
    else return false;
  }
  static array grad(const array&, const array&, const array& v) { return zeros_grad(v); }
};
struct IsInfOp {
  static constexpr const char* name = "IsInf";
  static constexpr bool complex = true;
  static constexpr K kind = K::predicate;
  template <class T> bool operator()(T x) const {
    if constexpr (is_complex_v<T>) return std::isinf(x.real()) || std::isinf(x.imag());
    else if constexpr (std::is_floating_point_v<T>) return std::isinf(x);
    else return false;
  }
  static array grad(const array&, const array&, const array& v) { return zeros_grad(v); }
};
struct IsFiniteOp {
  static constexpr const char* name = "IsFinite";
  static constexpr bool complex = true;
  static constexpr K kind = K::predicate;
  template <class T> bool operator()(T x) const {
    if constexpr (is_complex_v<T>) return std::isfinite(x.real()) && std::isfinite(x.imag());
    else if constexpr (std::is_floating_point_v<T>) return std::isfinite(x);
    else return true;
  }
  static array grad(const array&, const array&, const array& v) { return zeros_grad(v); }
};

// ---- binary ops ----
struct AddOp {
  static constexpr const char* name = "Add";
  static constexpr bool complex = true;
  static constexpr K kind = K::any;
  template <class T> T operator()(T a, T b) const {
    if constexpr (std::is_same_v<T, bool>) return a || b;
    else return kernels::wrapping_add(a, b);
  }
  static array grad(int, const array&, const array&, const array&, const array& v) { return v; }
};
struct SubtractOp {
  static constexpr const char* name = "Subtract";
  static constexpr bool complex = true;
  static constexpr K kind = K::numeric;
  template <class T> T operator()(T a, T b) const { return kernels::wrapping_sub(a, b); }
  static array grad(int arg, const array&, const array&, const array&, const array& v) {
    return arg == 0 ? v : negative(v);
  }
};
struct MultiplyOp {
  static constexpr const char* name = "Multiply";
  static constexpr bool complex = true;
  static constexpr K kind = K::any;
  template <class T> T operator()(T a, T b) const {
    if constexpr (std::is_same_v<T, bool>) return a && b;
    else return kernels::wrapping_mul(a, b);
  }
  static array grad(int arg, const array& a, const array& b, const array&, const array& v) {
    return multiply(v, arg == 0 ? b : a);
  }
};
struct DivideOp {
  static constexpr const char* name = "Divide";
  static constexpr bool complex = true;
  static constexpr K kind = K::floating;
  template <class T> T operator()(T a, T b) const { return a / b; }
  static array grad(int arg, const array&, const array& b, const array& y, const array& v) {
    return arg == 0 ? divide(v, b) : negative(divide(multiply(v, y), b));
  }
};
struct FloorDivideOp {
  static constexpr const char* name = "FloorDivide";
  static constexpr K kind = K::numeric;
  template <class T> T operator()(T a, T b) const {
    if constexpr (std::is_floating_point_v<T>) {
      // numpy's divmod: the quotient agrees with remainder() (1 // 0.1 is 9 because 1 % 0.1 is
      // 0.0999..., where floor(1 / 0.1) would say 10).
      if (b == T(0)) return a / b;
      T mod = std::fmod(a, b);
      T div = (a - mod) / b;
      if (mod != T(0) && ((b < T(0)) != (mod < T(0)))) div -= T(1);
      if (div == T(0)) return std::copysign(T(0), a / b);
      T q = std::floor(div);
      return div - q > T(0.5) ? q + T(1) : q;
    } else {
      if (b == 0) return 0;  // numpy's result for integer division by zero
      if constexpr (std::is_signed_v<T>) {
        if (b == -1) return static_cast<T>(0 - static_cast<std::make_unsigned_t<T>>(a));
        T q = a / b;
        return (q * b != a && ((a < 0) != (b < 0))) ? q - 1 : q;
      } else {
        return a / b;
      }
    }
  }
  static array grad(int, const array&, const array&, const array&, const array& v) { return zeros_grad(v); }
};
struct RemainderOp {
  static constexpr const char* name = "Remainder";
  static constexpr K kind = K::numeric;
  template <class T> T operator()(T a, T b) const {
    if constexpr (std::is_floating_point_v<T>) {
      T r = std::fmod(a, b);
      return (r != T(0) && ((r < T(0)) != (b < T(0)))) ? r + b : r;
    } else {
      if (b == 0) return 0;
      if constexpr (std::is_signed_v<T>) {
        if (b == -1) return 0;
        T r = a % b;
        return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r;
      } else {
        return a % b;
      }
    }
  }
  static array grad(int arg, const array& a, const array& b, const array&, const array& v) {
    return arg == 0 ? v : negative(multiply(v, floor_divide(a, b)));
  }
};
struct PowerOp {
  static constexpr const char* name = "Power";
  static constexpr bool complex = true;
  static constexpr K kind = K::any;
  template <class T> T operator()(T a, T b) const {
    if constexpr (std::is_floating_point_v<T> || is_complex_v<T>) {
      return std::pow(a, b);
    } else if constexpr (std::is_same_v<T, bool>) {
      return a || !b;  // MLX's bool power: x^0 is 1, 0^1 is 0, 1^1 is 1
    } else {
      if constexpr (std::is_signed_v<T>) {
        if (b < 0) return a == 1 ? 1 : (a == -1 ? ((b & 1) ? -1 : 1) : 0);
      }
      using U = kernels::wrap_t<T>;
      U base = static_cast<U>(a), result = 1;
      for (T e = b; e > 0; e >>= 1) {
        if (e & 1) result = static_cast<U>(result * base);
        base = static_cast<U>(base * base);
      }
      return static_cast<T>(result);
    }
  }
  static array grad(int arg, const array& a, const array& b, const array& y, const array& v) {
    if (arg == 0) {
      // a^0 is 1 for every a (0^0 too), so its derivative is 0, where b a^(b-1) is 0 * inf = NaN at
      // a = 0 (PyTorch and JAX give 0 as well).
      array g = multiply(v, multiply(b, power(a, b - 1.0)));
      return where(equal(b, zeros_like(b)), zeros_like(g), g);
    }
    array g = multiply(v, multiply(y, log(a)));
    return where(logical_and(equal(a, zeros_like(a)), greater_equal(b, zeros_like(b))), zeros_like(g), g);
  }
};
struct MaximumOp {
  static constexpr const char* name = "Maximum";
  static constexpr bool complex = true;
  static constexpr K kind = K::any;
  template <class T> T operator()(T a, T b) const {
    // NaN in, NaN out: a when a is NaN, else b when b is (a > b is false then). One select,
    // so that the loops vectorize (relu is maximum(x, 0)).
    if constexpr (std::is_floating_point_v<T>) return ((a > b) | (a != a)) ? a : b;
    else if constexpr (is_complex_v<T>) return (a > b || std::isnan(a.real()) || std::isnan(a.imag())) ? a : b;
    else return a > b ? a : b;
  }
  // The whole cotangent goes to the input the output came from, as the kernel selects it: a when
  // a > b or a is NaN, b otherwise (so b at a tie, as MLX; PyTorch splits a tie in halves).
  static array grad(int arg, const array& a, const array& b, const array&, const array& v) {
    array from_a = logical_or(greater(a, b), isnan(a));
    return arg == 0 ? where(from_a, v, zeros_like(v)) : where(from_a, zeros_like(v), v);
  }
};
struct MinimumOp {
  static constexpr const char* name = "Minimum";
  static constexpr bool complex = true;
  static constexpr K kind = K::any;
  template <class T> T operator()(T a, T b) const {
    // NaN in, NaN out: a when a is NaN, else b when b is (a < b is false then). One select,
    // so that the loops vectorize (relu is maximum(x, 0)).
    if constexpr (std::is_floating_point_v<T>) return ((a < b) | (a != a)) ? a : b;
    else if constexpr (is_complex_v<T>) return (a < b || std::isnan(a.real()) || std::isnan(a.imag())) ? a : b;
    else return a < b ? a : b;
  }
  // As maximum's: a when a < b or a is NaN, b otherwise (b at a tie, as MLX).
  static array grad(int arg, const array& a, const array& b, const array&, const array& v) {
    array from_a = logical_or(less(a, b), isnan(a));
    return arg == 0 ? where(from_a, v, zeros_like(v)) : where(from_a, zeros_like(v), v);
  }
};
struct ArcTan2Op {
  static constexpr const char* name = "ArcTan2";
  static constexpr K kind = K::floating;
  template <class T> T operator()(T a, T b) const { return std::atan2(a, b); }
  static array grad(int arg, const array& a, const array& b, const array&, const array& v) {
    array den = add(square(a), square(b));
    return arg == 0 ? divide(multiply(v, b), den) : negative(divide(multiply(v, a), den));
  }
};

struct LogAddExpOp {
  static constexpr const char* name = "LogAddExp";
  static constexpr bool complex = true;
  static constexpr K kind = K::floating;
  template <class T> T operator()(T a, T b) const {
    if constexpr (is_complex_v<T>) {
      // MLX's: hi + log1p(exp(lo - hi)) with hi the larger in complex64's (lexicographic) order, so
      // that exp never overflows; a NaN part makes the whole result NaN (PyTorch's).
      const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
      if (std::isnan(a.real()) || std::isnan(a.imag()) || std::isnan(b.real()) || std::isnan(b.imag())) return T(nan, nan);
      const T hi = a > b ? a : b, lo = a > b ? b : a;
      if (hi.real() == inf || lo.real() == -inf) return hi;
      return hi + Log1pOp{}(T(std::exp(static_cast<std::complex<float>>(lo - hi))));
    } else {
      if (a != a || b != b) return a + b;  // NaN
      const T hi = a > b ? a : b, lo = a > b ? b : a;
      // Equal infinities (and -inf with anything) give the larger input: hi - hi would be NaN.
      if (hi == std::numeric_limits<T>::infinity() || lo == -std::numeric_limits<T>::infinity()) return hi;
      return hi + std::log1p(std::exp(lo - hi));
    }
  }
  // d/da = exp(a - y), the share of exp(a) in the sum, = sigmoid(a - b): written so because
  // exp(a - y) is exp(inf - inf) = NaN at a = inf where the share is 1 (MLX's and PyTorch's answer).
  // complex64 has no sigmoid: 1 / (1 + exp(b - a)), the same share.
  static array grad(int arg, const array& a, const array& b, const array&, const array& v) {
    array d = arg == 0 ? subtract(a, b) : subtract(b, a);
    return multiply(v, is_complex(d.dtype()) ? reciprocal(exp(negative(d)) + 1.0f) : sigmoid(d));
  }
};

#define LOOM_COMPARISON(NAME, OPNAME, EXPR)                                                               \
  struct NAME {                                                                                          \
    static constexpr const char* name = OPNAME;                                                          \
    static constexpr K kind = K::predicate;                                                              \
    static constexpr bool complex = true; /* complex64 compares lexicographically, as numpy */            \
    template <class T> bool operator()(T a, T b) const { return EXPR; }                                  \
    static array grad(int, const array&, const array&, const array&, const array& v) { return zeros_grad(v); } \
  };
LOOM_COMPARISON(EqualOp, "Equal", a == b)
LOOM_COMPARISON(NotEqualOp, "NotEqual", a != b)
LOOM_COMPARISON(LessOp, "Less", a < b)
LOOM_COMPARISON(LessEqualOp, "LessEqual", a <= b)
LOOM_COMPARISON(GreaterOp, "Greater", a > b)
LOOM_COMPARISON(GreaterEqualOp, "GreaterEqual", a >= b)
#undef LOOM_COMPARISON
struct LogicalAndOp {
  static constexpr const char* name = "LogicalAnd";
  static constexpr K kind = K::logical;
  template <class T> bool operator()(T a, T b) const { return a && b; }
  static array grad(int, const array&, const array&, const array&, const array& v) { return zeros_grad(v); }
};
struct LogicalOrOp {
  static constexpr const char* name = "LogicalOr";
  static constexpr K kind = K::logical;
  template <class T> bool operator()(T a, T b) const { return a || b; }
  static array grad(int, const array&, const array&, const array&, const array& v) { return zeros_grad(v); }
};

// ---- bitwise ops (bool and integers) ----
struct BitwiseAndOp {
  static constexpr const char* name = "BitwiseAnd";
  static constexpr K kind = K::bitwise;
  template <class T> T operator()(T a, T b) const { return static_cast<T>(a & b); }
  static array grad(int, const array&, const array&, const array&, const array& v) { return zeros_grad(v); }
};
struct BitwiseOrOp {
  static constexpr const char* name = "BitwiseOr";
  static constexpr K kind = K::bitwise;
  template <class T> T operator()(T a, T b) const { return static_cast<T>(a | b); }
  static array grad(int, const array&, const array&, const array&, const array& v) { return zeros_grad(v); }
};
struct BitwiseXorOp {
  static constexpr const char* name = "BitwiseXor";
  static constexpr K kind = K::bitwise;
  template <class T> T operator()(T a, T b) const { return static_cast<T>(a ^ b); }
  static array grad(int, const array&, const array&, const array&, const array& v) { return zeros_grad(v); }
};
// Shift counts outside [0, bits) are undefined behaviour in C++ (and left to the hardware by
// MLX's CPU backend); these give numpy's answers: every bit shifted out (0, or -1 for a negative
// value shifted right). A negative value shifts left as its two's-complement bits.
template <class T>
constexpr bool shift_in_range(T b) {
  if constexpr (std::is_signed_v<T>) {
    if (b < 0) return false;
  }
  return static_cast<uint64_t>(b) < sizeof(T) * 8;
}
struct LeftShiftOp {
  static constexpr const char* name = "LeftShift";
  static constexpr K kind = K::bitwise;
  template <class T> T operator()(T a, T b) const {
    if (!shift_in_range(b)) return T(0);
    return static_cast<T>(static_cast<kernels::wrap_t<T>>(a) << b);
  }
  static array grad(int, const array&, const array&, const array&, const array& v) { return zeros_grad(v); }
};
struct RightShiftOp {
  static constexpr const char* name = "RightShift";
  static constexpr K kind = K::bitwise;
  template <class T> T operator()(T a, T b) const {
    if (!shift_in_range(b)) {
      if constexpr (std::is_signed_v<T>) return a < 0 ? T(-1) : T(0);
      else return T(0);
    }
    return static_cast<T>(a >> b);  // arithmetic for signed types (gcc and clang define it)
  }
  static array grad(int, const array&, const array&, const array&, const array& v) { return zeros_grad(v); }
};
struct BitwiseInvertOp {
  static constexpr const char* name = "BitwiseInvert";
  static constexpr K kind = K::bitwise;
  template <class T> T operator()(T x) const {
    if constexpr (std::is_same_v<T, bool>) return !x;  // (bitwise_invert sends bool to logical_not)
    else return static_cast<T>(~x);
  }
  static array grad(const array&, const array&, const array& v) { return zeros_grad(v); }
};

// Dtype handling shared by unary and binary ops: returns the dtype the kernel runs in.
Dtype input_dtype(K kind, Dtype in, const char* name) {
  switch (kind) {
    case K::numeric:
      if (in == bool_) throw std::invalid_argument(detail::msg("[", name, "] is not defined for bool arrays"));
      return in;
    case K::floating:
      return is_inexact(in) ? in : float32;
    case K::logical:
      return bool_;
    case K::bitwise:
      if (is_inexact(in)) {
        throw std::invalid_argument(detail::msg("[", name, "] needs integer or bool arrays, got ", in));
      }
      return in;
    default:
      return in;
  }
}

// `name` is the public op's name (e.g. "floor_divide"), used in error messages.
template <typename Op>
void check_complex(Dtype d, const char* name) {
  if (is_complex(d) && !takes_complex_v<Op>) {
    throw std::invalid_argument(detail::msg("[", name, "] is not defined for complex64 arrays"));
  }
}

template <typename Op>
array make_unary(const array& a, const char* name) {
  check_complex<Op>(a.dtype(), name);
  Dtype d = input_dtype(Op::kind, a.dtype(), name);
  array x = a.dtype() == d ? a : astype(a, d);
  Dtype out = Op::kind == K::predicate ? bool_ : d;
  return array(x.shape(), out, std::make_shared<Unary<Op>>(), {x});
}

// broadcast_shapes, with the error naming the public op instead of broadcast_shapes.
// (A pointer and a count, not a vector: this runs for every elementwise op built.)
Shape broadcast_for(const array* const* arrays, size_t n, const char* name) {
  Shape shape = arrays[0]->shape();
  for (size_t i = 1; i < n; ++i) {
    if (arrays[i]->shape() == shape) continue;
    try {
      shape = broadcast_shapes(shape, arrays[i]->shape());
    } catch (const std::invalid_argument&) {
      std::string shapes;
      for (size_t k = 0; k < n; ++k) shapes += (shapes.empty() ? "" : " and ") + detail::shape_str(arrays[k]->shape());
      throw std::invalid_argument(detail::msg("[", name, "] shapes ", shapes, " cannot be broadcast together"));
    }
  }
  return shape;
}
Shape broadcast_for(std::initializer_list<const array*> arrays, const char* name) {
  return broadcast_for(arrays.begin(), arrays.size(), name);
}

template <typename Op>
array make_binary(const array& a, const array& b, const char* name) {
  const Dtype promoted = promote_types(a.dtype(), b.dtype());
  check_complex<Op>(promoted, name);
  Dtype d = input_dtype(Op::kind, promoted, name);
  Shape shape = broadcast_for({&a, &b}, name);
  array x = a.dtype() == d ? a : astype(a, d);
  array y = b.dtype() == d ? b : astype(b, d);
  if (x.shape() != shape) x = detail::broadcast_to_like(x, shape, {b});
  if (y.shape() != shape) y = detail::broadcast_to_like(y, shape, {a});
  return array(std::move(shape), Binary<Op>::out_dtype(d), std::make_shared<Binary<Op>>(), {x, y});
}

// Whether Op's kernel exists for storage type T: the dtypes its kind admits (make_unary and
// make_binary cast the inputs there first), and complex64 when the op says so.
template <typename Op, typename T>
constexpr bool has_kernel() {
  if constexpr (is_complex_v<T>) {
    return takes_complex_v<Op>;
  } else if constexpr (Op::kind == K::floating) {
    return std::is_floating_point_v<compute_t<T>>;
  } else if constexpr (Op::kind == K::numeric) {
    return !std::is_same_v<T, bool>;
  } else if constexpr (Op::kind == K::bitwise) {
    return std::is_integral_v<T>;
  } else {
    return true;
  }
}
template <typename Op, typename T>
using result_t = std::conditional_t<Op::kind == K::predicate || Op::kind == K::logical, bool, T>;

}  // namespace

template <typename Op>
void Unary<Op>::eval_cpu(const std::vector<array>& inputs, array& out) {
  const array& in = inputs[0];
  LOOM_DISPATCH_ALL(in.dtype(), T, {
    if constexpr (has_kernel<Op, T>()) kernels::unary<T, result_t<Op, T>>(in, out, Op{});
    else detail::unsupported_dtype(in.dtype());
  });
}

template <typename Op>
void Binary<Op>::eval_cpu(const std::vector<array>& inputs, array& out) {
  const array& a = inputs[0];
  const array& b = inputs[1];
  LOOM_DISPATCH_ALL(a.dtype(), T, {
    if constexpr (has_kernel<Op, T>()) kernels::binary<T, result_t<Op, T>>(a, b, out, Op{});
    else detail::unsupported_dtype(a.dtype());
  });
}

template <typename Op>
void Unary<Op>::eval_block(const Dtype* in_dtypes, const void* const* in, void* out, size_t n) const {
  LOOM_DISPATCH_ALL(in_dtypes[0], T, {
    if constexpr (has_kernel<Op, T>()) kernels::unary_block<T, result_t<Op, T>>(in[0], out, n, Op{});
    else detail::unsupported_dtype(in_dtypes[0]);
  });
}

template <typename Op>
void Binary<Op>::eval_block(const Dtype* in_dtypes, const void* const* in, void* out, size_t n) const {
  LOOM_DISPATCH_ALL(in_dtypes[0], T, {
    if constexpr (has_kernel<Op, T>()) kernels::binary_block<T, result_t<Op, T>>(in[0], in[1], out, n, Op{});
    else detail::unsupported_dtype(in_dtypes[0]);
  });
}

// ---- complex64 parts ----
namespace {

// complex64 in, float32 out, elementwise. Op gives the value and both derivatives (|z| is not
// holomorphic, so its vjp and jvp are not one rule as in Unary).
template <typename Op>
class ComplexToReal : public UnaryPrimitive {
 public:
  ComplexToReal() { (void)kLoads; }  // instantiates the registration of this Op's loader
  void save(detail::Writer&) const override {}
  std::vector<Shape> output_shapes(const std::vector<Shape>& in) const override { return same_shape_output(in); }
  bool supports_complex() const override { return true; }
  bool is_elementwise() const override { return true; }
  uint64_t donors(const std::vector<array>&, int) const override { return 0; }  // 8-byte input, 4-byte output
  void eval_cpu(const std::vector<array>& in, array& out) override {
    kernels::unary<complex64_t, float>(in[0], out, Op{});
  }
  void eval_block(const Dtype*, const void* const* in, void* out, size_t n) const override {
    kernels::unary_block<complex64_t, float>(in[0], out, n, Op{});
  }
  std::vector<array> vjp(const std::vector<array>& p, const std::vector<array>& cot, const std::vector<int>&,
                         const std::vector<array>&) override {
    return {Op::vjp(p[0], astype(cot[0], complex64))};
  }
  std::vector<array> jvp(const std::vector<array>& p, const std::vector<array>& t, const std::vector<int>&) override {
    return {Op::jvp(p[0], t[0])};
  }
  std::pair<std::vector<array>, std::vector<int>> vmap(const std::vector<array>& in, const std::vector<int>& axes,
                                                       const std::vector<array>& outs) override {
    return detail::vmap_elementwise(in, axes, outs);
  }
  const char* name() const override { return Op::name; }

 private:
  static const bool kLoads;
};
template <typename Op>
const bool ComplexToReal<Op>::kLoads = detail::register_primitive(Op::name, [](detail::Reader&) -> std::shared_ptr<Primitive> {
  return std::make_shared<ComplexToReal<Op>>();
});

// Cotangents c of the float32 result arrive as c + 0i; the vjp is d/dRe + i d/dIm (MLX's and
// PyTorch's convention: the gradient of real(z) is 1, of imag(z) is i).
struct RealOp {
  static constexpr const char* name = "Real";
  float operator()(complex64_t z) const { return z.real(); }
  static array vjp(const array&, const array& c) { return c; }
  static array jvp(const array&, const array& t) { return real(t); }
};
struct ImagOp {
  static constexpr const char* name = "Imag";
  float operator()(complex64_t z) const { return z.imag(); }
  static array vjp(const array&, const array& c) { return multiply(c, array(complex64_t(0.0f, 1.0f))); }
  static array jvp(const array&, const array& t) { return imag(t); }
};
struct ComplexAbsOp {
  static constexpr const char* name = "ComplexAbs";  // not "Abs": export_function finds a primitive's class by its name
  float operator()(complex64_t z) const { return std::abs(static_cast<const std::complex<float>&>(z)); }
  // d|z| = Re(conj(z / |z|) dz); the gradient is c z / |z|.
  static array vjp(const array& z, const array& c) { return multiply(c, sign(z)); }
  static array jvp(const array& z, const array& t) { return real(multiply(t, conjugate(sign(z)))); }
};
struct ConjugateOp {
  static constexpr const char* name = "Conjugate";
  static constexpr K kind = K::any;
  static constexpr bool complex = true;
  template <class T> T operator()(T x) const {
    if constexpr (is_complex_v<T>) return std::conj(static_cast<const std::complex<float>&>(x));
    else return x;
  }
  static array grad(const array&, const array&, const array& v) { return conjugate(v); }
};

array complex_abs(const array& a) { return array(a.shape(), float32, std::make_shared<ComplexToReal<ComplexAbsOp>>(), {a}); }

}  // namespace

array real(const array& a, StreamOrDevice s) {
  OnStream on(s);
  if (!is_complex(a.dtype())) return a;
  return array(a.shape(), float32, std::make_shared<ComplexToReal<RealOp>>(), {a});
}
array imag(const array& a, StreamOrDevice s) {
  OnStream on(s);
  if (!is_complex(a.dtype())) return zeros_like(a);
  return array(a.shape(), float32, std::make_shared<ComplexToReal<ImagOp>>(), {a});
}
array conjugate(const array& a, StreamOrDevice s) {
  OnStream on(s);
  if (!is_complex(a.dtype())) return a;
  return make_unary<ConjugateOp>(a, "conjugate");
}
array conj(const array& a, StreamOrDevice s) { OnStream on(s); return conjugate(a); }

// ---- public unary ops ----
array negative(const array& a, StreamOrDevice s) { OnStream on(s); return make_unary<NegativeOp>(a, "negative"); }
array abs(const array& a, StreamOrDevice s) {
  OnStream on(s);
  if (is_complex(a.dtype())) return complex_abs(a);
  return make_unary<AbsOp>(a, "abs");
}
array sign(const array& a, StreamOrDevice s) { OnStream on(s); return make_unary<SignOp>(a, "sign"); }
array square(const array& a, StreamOrDevice s) { OnStream on(s); return make_unary<SquareOp>(a, "square"); }
array sqrt(const array& a, StreamOrDevice s) { OnStream on(s); return make_unary<SqrtOp>(a, "sqrt"); }
array rsqrt(const array& a, StreamOrDevice s) { OnStream on(s); return make_unary<RsqrtOp>(a, "rsqrt"); }
array reciprocal(const array& a, StreamOrDevice s) { OnStream on(s); return make_unary<ReciprocalOp>(a, "reciprocal"); }
array exp(const array& a, StreamOrDevice s) { OnStream on(s); return make_unary<ExpOp>(a, "exp"); }
array expm1(const array& a, StreamOrDevice s) { OnStream on(s); return make_unary<Expm1Op>(a, "expm1"); }
array log(const array& a, StreamOrDevice s) { OnStream on(s); return make_unary<LogOp>(a, "log"); }
array log1p(const array& a, StreamOrDevice s) { OnStream on(s); return make_unary<Log1pOp>(a, "log1p"); }
array log2(const array& a, StreamOrDevice s) { OnStream on(s); return make_unary<Log2Op>(a, "log2"); }
array log10(const array& a, StreamOrDevice s) { OnStream on(s); return make_unary<Log10Op>(a, "log10"); }
array sin(const array& a, StreamOrDevice s) { OnStream on(s); return make_unary<SinOp>(a, "sin"); }
array cos(const array& a, StreamOrDevice s) { OnStream on(s); return make_unary<CosOp>(a, "cos"); }
array tan(const array& a, StreamOrDevice s) { OnStream on(s); return make_unary<TanOp>(a, "tan"); }
array tanh(const array& a, StreamOrDevice s) { OnStream on(s); return make_unary<TanhOp>(a, "tanh"); }
array arcsin(const array& a, StreamOrDevice s) { OnStream on(s); return make_unary<ArcSinOp>(a, "arcsin"); }
array arccos(const array& a, StreamOrDevice s) { OnStream on(s); return make_unary<ArcCosOp>(a, "arccos"); }
array arctan(const array& a, StreamOrDevice s) { OnStream on(s); return make_unary<ArcTanOp>(a, "arctan"); }
array sinh(const array& a, StreamOrDevice s) { OnStream on(s); return make_unary<SinhOp>(a, "sinh"); }
array cosh(const array& a, StreamOrDevice s) { OnStream on(s); return make_unary<CoshOp>(a, "cosh"); }
array arcsinh(const array& a, StreamOrDevice s) { OnStream on(s); return make_unary<ArcSinhOp>(a, "arcsinh"); }
array arccosh(const array& a, StreamOrDevice s) { OnStream on(s); return make_unary<ArcCoshOp>(a, "arccosh"); }
array arctanh(const array& a, StreamOrDevice s) { OnStream on(s); return make_unary<ArcTanhOp>(a, "arctanh"); }
array sigmoid(const array& a, StreamOrDevice s) { OnStream on(s); return make_unary<SigmoidOp>(a, "sigmoid"); }
array erf(const array& a, StreamOrDevice s) { OnStream on(s); return make_unary<ErfOp>(a, "erf"); }
array erfinv(const array& a, StreamOrDevice s) { OnStream on(s); return make_unary<ErfinvOp>(a, "erfinv"); }
array floor(const array& a, StreamOrDevice s) { OnStream on(s); return make_unary<FloorOp>(a, "floor"); }
array ceil(const array& a, StreamOrDevice s) { OnStream on(s); return make_unary<CeilOp>(a, "ceil"); }
array round(const array& a, int decimals, StreamOrDevice s) {
  OnStream on(s);
  if (decimals == 0) return make_unary<RoundOp>(a, "round");
  const Dtype d = is_inexact(a.dtype()) ? a.dtype() : float32;
  const float scale = std::pow(10.0f, static_cast<float>(decimals));
  array r = make_unary<RoundOp>(multiply(a, array(scale, d)), "round");
  return astype(multiply(r, array(1.0f / scale, d)), a.dtype());
}
array logical_not(const array& a, StreamOrDevice s) {
  OnStream on(s);
  return make_unary<LogicalNotOp>(a, "logical_not");
}
array isnan(const array& a, StreamOrDevice s) { OnStream on(s); return make_unary<IsNanOp>(a, "isnan"); }
array isinf(const array& a, StreamOrDevice s) { OnStream on(s); return make_unary<IsInfOp>(a, "isinf"); }
array isfinite(const array& a, StreamOrDevice s) { OnStream on(s); return make_unary<IsFiniteOp>(a, "isfinite"); }

array trunc(const array& a, StreamOrDevice s) {
  OnStream on(s);
  if (is_complex(a.dtype())) throw std::invalid_argument("[trunc] is not defined for complex64 arrays");
  if (!is_floating_point(a.dtype())) return a;
  return where(less(a, array(0, a.dtype())), ceil(a), floor(a));
}

array degrees(const array& a, StreamOrDevice s) {
  OnStream on(s);
  const Dtype d = input_dtype(K::floating, a.dtype(), "degrees");
  return multiply(astype(a, d), array(180.0 / M_PI, d));
}

array radians(const array& a, StreamOrDevice s) {
  OnStream on(s);
  const Dtype d = input_dtype(K::floating, a.dtype(), "radians");
  return multiply(astype(a, d), array(M_PI / 180.0, d));
}

// A complex element is +inf or -inf only as (±inf, 0), as in MLX.
array isposinf(const array& a, StreamOrDevice s) {
  OnStream on(s);
  if (!is_inexact(a.dtype())) return full(a.shape(), false, bool_);
  return equal(a, array(std::numeric_limits<double>::infinity(), a.dtype()));
}

array isneginf(const array& a, StreamOrDevice s) {
  OnStream on(s);
  if (!is_inexact(a.dtype())) return full(a.shape(), false, bool_);
  return equal(a, array(-std::numeric_limits<double>::infinity(), a.dtype()));
}

array nan_to_num(const array& a, float nan, std::optional<float> posinf, std::optional<float> neginf,
                 StreamOrDevice s) {
  OnStream on(s);
  const Dtype d = a.dtype();
  if (is_complex(d)) {  // each part on its own, as numpy (MLX replaces whole elements)
    const array re = nan_to_num(real(a), nan, posinf, neginf), im = nan_to_num(imag(a), nan, posinf, neginf);
    return add(astype(re, complex64), multiply(astype(im, complex64), array(complex64_t(0.0f, 1.0f))));
  }
  if (!is_floating_point(d)) return a;
  // The dtype's largest finite value (float64 too, where MLX raises).
  const double big = d == float16 ? 65504.0
                     : d == bfloat16 ? 3.3895313892515355e38
                     : d == float32 ? double(std::numeric_limits<float>::max())
                                    : std::numeric_limits<double>::max();
  array out = where(isnan(a), array(double(nan), d), a);
  out = where(isposinf(a), array(posinf ? double(*posinf) : big, d), out);
  return where(isneginf(a), array(neginf ? double(*neginf) : -big, d), out);
}

// ---- public binary ops ----
array add(const array& a, const array& b, StreamOrDevice s) { OnStream on(s); return make_binary<AddOp>(a, b, "add"); }
array subtract(const array& a, const array& b, StreamOrDevice s) {
  OnStream on(s);
  return make_binary<SubtractOp>(a, b, "subtract");
}
array multiply(const array& a, const array& b, StreamOrDevice s) {
  OnStream on(s);
  return make_binary<MultiplyOp>(a, b, "multiply");
}
array divide(const array& a, const array& b, StreamOrDevice s) {
  OnStream on(s);
  return make_binary<DivideOp>(a, b, "divide");
}
array floor_divide(const array& a, const array& b, StreamOrDevice s) {
  OnStream on(s);
  return make_binary<FloorDivideOp>(a, b, "floor_divide");
}
array remainder(const array& a, const array& b, StreamOrDevice s) {
  OnStream on(s);
  return make_binary<RemainderOp>(a, b, "remainder");
}
array power(const array& a, const array& b, StreamOrDevice s) {
  OnStream on(s);
  return make_binary<PowerOp>(a, b, "power");
}
array maximum(const array& a, const array& b, StreamOrDevice s) {
  OnStream on(s);
  return make_binary<MaximumOp>(a, b, "maximum");
}
array minimum(const array& a, const array& b, StreamOrDevice s) {
  OnStream on(s);
  return make_binary<MinimumOp>(a, b, "minimum");
}
array arctan2(const array& a, const array& b, StreamOrDevice s) {
  OnStream on(s);
  return make_binary<ArcTan2Op>(a, b, "arctan2");
}
array logaddexp(const array& a, const array& b, StreamOrDevice s) {
  OnStream on(s);
  return make_binary<LogAddExpOp>(a, b, "logaddexp");
}

// ---- bitwise ----
array bitwise_and(const array& a, const array& b, StreamOrDevice s) {
  OnStream on(s);
  return make_binary<BitwiseAndOp>(a, b, "bitwise_and");
}
array bitwise_or(const array& a, const array& b, StreamOrDevice s) {
  OnStream on(s);
  return make_binary<BitwiseOrOp>(a, b, "bitwise_or");
}
array bitwise_xor(const array& a, const array& b, StreamOrDevice s) {
  OnStream on(s);
  return make_binary<BitwiseXorOp>(a, b, "bitwise_xor");
}

// Shifts of bool operands run in uint8 (MLX: true << true is 2).
array left_shift(const array& a, const array& b, StreamOrDevice s) {
  OnStream on(s);
  const bool both_bool = a.dtype() == bool_ && b.dtype() == bool_;
  return make_binary<LeftShiftOp>(both_bool ? astype(a, uint8) : a, b, "left_shift");
}
array right_shift(const array& a, const array& b, StreamOrDevice s) {
  OnStream on(s);
  const bool both_bool = a.dtype() == bool_ && b.dtype() == bool_;
  return make_binary<RightShiftOp>(both_bool ? astype(a, uint8) : a, b, "right_shift");
}

array bitwise_invert(const array& a, StreamOrDevice s) {
  OnStream on(s);
  if (is_inexact(a.dtype())) {
    throw std::invalid_argument(detail::msg("[bitwise_invert] needs integer or bool arrays, got ", a.dtype()));
  }
  if (a.dtype() == bool_) return logical_not(a);
  return make_unary<BitwiseInvertOp>(a, "bitwise_invert");
}

// ---- whole-array comparisons ----
array isclose(const array& a, const array& b, double rtol, double atol, bool equal_nan, StreamOrDevice s) {
  OnStream on(s);
  broadcast_for({&a, &b}, "isclose");
  // MLX's formula and dtypes: the tolerances are float32 scalars.
  array out = less_equal(abs(subtract(a, b)), add(array(float(atol)), multiply(array(float(rtol)), abs(b))));
  // An infinity is close only to the same infinity (|inf - inf| is NaN, and inf <= inf would make
  // inf close to any finite b).
  const array a_pos = isposinf(a), b_pos = isposinf(b), a_neg = isneginf(a), b_neg = isneginf(b);
  const array any_inf = logical_or(logical_or(a_pos, a_neg), logical_or(b_pos, b_neg));
  const array same_inf = logical_or(logical_and(a_pos, b_pos), logical_and(a_neg, b_neg));
  out = logical_or(logical_and(out, logical_not(any_inf)), same_inf);
  if (equal_nan) out = logical_or(out, logical_and(isnan(a), isnan(b)));
  return out;
}

array allclose(const array& a, const array& b, double rtol, double atol, bool equal_nan, StreamOrDevice s) {
  OnStream on(s);
  return all(isclose(a, b, rtol, atol, equal_nan));
}

array array_equal(const array& a, const array& b, bool equal_nan, StreamOrDevice s) {
  OnStream on(s);
  if (a.shape() != b.shape()) return array(false);
  const Dtype d = promote_types(a.dtype(), b.dtype());
  const array x = astype(a, d), y = astype(b, d);
  array same = equal(x, y);
  if (equal_nan && is_inexact(d)) same = logical_or(same, logical_and(isnan(x), isnan(y)));
  return all(same);
}
array equal(const array& a, const array& b, StreamOrDevice s) {
  OnStream on(s);
  return make_binary<EqualOp>(a, b, "equal");
}
array not_equal(const array& a, const array& b, StreamOrDevice s) {
  OnStream on(s);
  return make_binary<NotEqualOp>(a, b, "not_equal");
}
array less(const array& a, const array& b, StreamOrDevice s) {
  OnStream on(s);
  return make_binary<LessOp>(a, b, "less");
}
array less_equal(const array& a, const array& b, StreamOrDevice s) {
  OnStream on(s);
  return make_binary<LessEqualOp>(a, b, "less_equal");
}
array greater(const array& a, const array& b, StreamOrDevice s) {
  OnStream on(s);
  return make_binary<GreaterOp>(a, b, "greater");
}
array greater_equal(const array& a, const array& b, StreamOrDevice s) {
  OnStream on(s);
  return make_binary<GreaterEqualOp>(a, b, "greater_equal");
}
array logical_and(const array& a, const array& b, StreamOrDevice s) {
  OnStream on(s);
  return make_binary<LogicalAndOp>(a, b, "logical_and");
}
array logical_or(const array& a, const array& b, StreamOrDevice s) {
  OnStream on(s);
  return make_binary<LogicalOrOp>(a, b, "logical_or");
}

// ---- where and clip ----
namespace {

// c ? x : y as a bit-mask blend: GCC makes ?: a branch, which random masks (relu's backward)
// mispredict half the time; the blend vectorizes.
template <typename U>
U blend(uint8_t c, U x, U y) {
  const U m = static_cast<U>(0) - static_cast<U>(c);
  return static_cast<U>((x & m) | (y & static_cast<U>(~m)));
}

class Select : public UnaryPrimitive {
 public:
  void save(detail::Writer&) const override {}
  std::vector<Shape> output_shapes(const std::vector<Shape>& in) const override { return same_shape_output(in); }
  bool is_equivalent(const Primitive& other) const override { return detail::same_primitive(this, other); }
  bool supports_complex() const override { return true; }
  void eval_cpu(const std::vector<array>& in, array& out) override {
    // The bits of the elements, whatever their dtype: one kernel per item size.
    LOOM_DISPATCH_ITEMSIZE(in[1].itemsize(), U, {
      kernels::ternary<bool, U>(in[0], in[1], in[2], out, [](bool c, U x, U y) { return blend<U>(c, x, y); });
    });
  }
  bool is_elementwise() const override { return true; }
  void eval_block(const Dtype* in_dtypes, const void* const* in, void* out, size_t n) const override {
    LOOM_DISPATCH_ITEMSIZE(size_of(in_dtypes[1]), U, {
      // `out` may be x's or y's own block (a fused group's result takes a leaf's buffer), so no
      // __restrict: only element i is read before element i is written, which is what ivdep says.
      const uint8_t* c = static_cast<const uint8_t*>(in[0]);
      const U* x = static_cast<const U*>(in[1]);
      const U* y = static_cast<const U*>(in[2]);
      U* o = static_cast<U*>(out);
      LOOM_IVDEP
      for (size_t i = 0; i < n; ++i) o[i] = blend<U>(c[i], x[i], y[i]);
    });
  }
  std::vector<array> vjp(const std::vector<array>& p, const std::vector<array>& cot, const std::vector<int>& argnums,
                         const std::vector<array>&) override {
    std::vector<array> out;
    array z = zeros_like(cot[0]);
    for (int arg : argnums) {
      if (arg == 0) out.push_back(zeros_like(p[0]));
      else if (arg == 1) out.push_back(where(p[0], cot[0], z));
      else out.push_back(where(p[0], z, cot[0]));
    }
    return out;
  }
  std::vector<array> jvp(const std::vector<array>& p, const std::vector<array>& t,
                         const std::vector<int>& argnums) override {
    array tx = zeros_like(p[1]), ty = zeros_like(p[2]);
    for (size_t i = 0; i < argnums.size(); ++i) {
      if (argnums[i] == 1) tx = t[i];
      if (argnums[i] == 2) ty = t[i];
    }
    return {where(p[0], tx, ty)};
  }
  std::pair<std::vector<array>, std::vector<int>> vmap(const std::vector<array>& in, const std::vector<int>& axes,
                                                       const std::vector<array>& outs) override {
    return detail::vmap_elementwise(in, axes, outs);
  }
  const char* name() const override { return "Select"; }
};
const bool kSelectLoads = detail::register_primitive("Select", [](detail::Reader&) -> std::shared_ptr<Primitive> {
  return std::make_shared<Select>();
});
}  // namespace

array where(const array& cond, const array& x, const array& y, StreamOrDevice s) {
  OnStream on(s);
  Dtype d = promote_types(x.dtype(), y.dtype());
  Shape shape = broadcast_for({&cond, &x, &y}, "where");
  array c = cond.dtype() == bool_ ? cond : astype(cond, bool_);
  array a = x.dtype() == d ? x : astype(x, d);
  array b = y.dtype() == d ? y : astype(y, d);
  if (c.shape() != shape) c = detail::broadcast_to_like(c, shape, {x, y});
  if (a.shape() != shape) a = detail::broadcast_to_like(a, shape, {cond, y});
  if (b.shape() != shape) b = detail::broadcast_to_like(b, shape, {cond, x});
  return array(std::move(shape), d, std::make_shared<Select>(), {c, a, b});
}

array clip(const array& a, const std::optional<array>& lo, const std::optional<array>& hi, StreamOrDevice s) {
  OnStream on(s);
  if (!lo && !hi) throw std::invalid_argument("[clip] needs at least one of lo and hi");
  std::vector<const array*> operands{&a};
  if (lo) operands.push_back(&*lo);
  if (hi) operands.push_back(&*hi);
  broadcast_for(operands.data(), operands.size(), "clip");
  // Gradient flows to `a` wherever lo <= a <= hi (as torch.clamp). A NaN bound gives NaN, as
  // minimum(maximum(a, lo), hi) does in numpy, PyTorch and MLX.
  auto beyond = [](array outside, const array& bound) {
    return is_floating_point(bound.dtype()) || is_complex(bound.dtype()) ? logical_or(outside, isnan(bound)) : outside;
  };
  array out = a;
  if (lo) out = where(beyond(less(out, *lo), *lo), astype(*lo, promote_types(a.dtype(), lo->dtype())), out);
  if (hi) out = where(beyond(greater(out, *hi), *hi), astype(*hi, promote_types(out.dtype(), hi->dtype())), out);
  return out;
}

}  // namespace loom

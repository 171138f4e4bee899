// Element types, half-precision storage types and numpy-style type promotion.
#pragma once

#include <complex>
#include <cstdint>
#include <cstring>
#include <ostream>
#include <string>
#include <type_traits>

namespace loom {

namespace detail {
/// `v` as a float rounded to odd: exact conversions are unchanged, inexact ones are truncated and
/// get their lowest bit set. Rounding that float again to float16/bfloat16 (13 or 16 fewer bits)
/// then gives the correctly rounded result of `v`, with no double-rounding error (int64 values
/// beyond 2^53 are first rounded to double).
template <typename T>
inline float to_float_round_to_odd(T v) {
  const double d = static_cast<double>(v);
  float f = static_cast<float>(d);
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) >= 0x7f800000u || static_cast<double>(f) == d) return f;  // inf, NaN or exact
  const double af = f < 0 ? -static_cast<double>(f) : static_cast<double>(f), ad = d < 0 ? -d : d;
  if (af > ad) u -= 1;  // rounded away from zero: step the magnitude back toward zero
  u |= 1u;
  std::memcpy(&f, &u, 4);
  return f;
}
}  // namespace detail

/// IEEE-754 binary16 storage. Arithmetic happens in float32.
struct float16_t {
  uint16_t bits = 0;
  float16_t() = default;
  float16_t(float f) : bits(from_float(f)) {}
  template <typename T, typename = std::enable_if_t<std::is_arithmetic_v<T>>>
  float16_t(T v) : float16_t(detail::to_float_round_to_odd(v)) {}
  operator float() const { return to_float(bits); }
  static uint16_t from_float(float f);
  static float to_float(uint16_t h);
};

/// bfloat16 storage (the top 16 bits of a float32). Arithmetic happens in float32.
struct bfloat16_t {
  uint16_t bits = 0;
  bfloat16_t() = default;
  bfloat16_t(float f) : bits(from_float(f)) {}
  template <typename T, typename = std::enable_if_t<std::is_arithmetic_v<T>>>
  bfloat16_t(T v) : bfloat16_t(detail::to_float_round_to_odd(v)) {}
  operator float() const { return to_float(bits); }
  static uint16_t from_float(float f) {
    uint32_t u;
    std::memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40);  // quiet NaN
    u += 0x7fffu + ((u >> 16) & 1u);  // round to nearest even
    return static_cast<uint16_t>(u >> 16);
  }
  static float to_float(uint16_t b) {
    uint32_t u = static_cast<uint32_t>(b) << 16;
    float f;
    std::memcpy(&f, &u, 4);
    return f;
  }
};

// Comparisons and same-type arithmetic of the half types, as MLX defines them: without them
// `h == 1.0f` and `a + b` would be ambiguous between converting the halves to float and making
// arrays of them (array's scalar constructor is implicit, as MLX's). They compute in float32;
// half op half gives a half, and comparisons give bool.
namespace detail {
template <class T>
inline constexpr bool is_half_storage_v = std::is_same_v<T, float16_t> || std::is_same_v<T, bfloat16_t>;
template <class A, class B>
inline constexpr bool half_operands_v = (is_half_storage_v<A> && (is_half_storage_v<B> || std::is_arithmetic_v<B>)) ||
                                        (std::is_arithmetic_v<A> && is_half_storage_v<B>);
template <class T>
auto half_value(T v) {
  if constexpr (is_half_storage_v<T>) return static_cast<float>(v);
  else return v;
}
}  // namespace detail
#define LOOM_HALF_COMPARISON(OP)                                                             \
  template <class A, class B, typename = std::enable_if_t<detail::half_operands_v<A, B>>>   \
  bool operator OP(A a, B b) {                                                             \
    return detail::half_value(a) OP detail::half_value(b);                                 \
  }
LOOM_HALF_COMPARISON(==)
LOOM_HALF_COMPARISON(!=)
LOOM_HALF_COMPARISON(<)
LOOM_HALF_COMPARISON(<=)
LOOM_HALF_COMPARISON(>)
LOOM_HALF_COMPARISON(>=)
#undef LOOM_HALF_COMPARISON
#define LOOM_HALF_ARITHMETIC(OP)                                                                        \
  template <class H, typename = std::enable_if_t<detail::is_half_storage_v<H>>>                        \
  H operator OP(H a, H b) {                                                                             \
    return H(static_cast<float>(a) OP static_cast<float>(b));                                           \
  }
LOOM_HALF_ARITHMETIC(+)
LOOM_HALF_ARITHMETIC(-)
LOOM_HALF_ARITHMETIC(*)
LOOM_HALF_ARITHMETIC(/)
#undef LOOM_HALF_ARITHMETIC

/// complex64 storage: two float32s (real, imaginary), as std::complex<float>, which it is. Real
/// values convert to it with a zero imaginary part. Ordering is lexicographic (real part, then
/// imaginary), as numpy and MLX order complex numbers in comparisons, maximum and sort.
struct complex64_t : std::complex<float> {
  constexpr complex64_t() : std::complex<float>() {}
  constexpr complex64_t(float re, float im) : std::complex<float>(re, im) {}
  constexpr complex64_t(std::complex<float> v) : std::complex<float>(v) {}
  template <typename T, typename = std::enable_if_t<std::is_arithmetic_v<T> || std::is_same_v<T, float16_t> ||
                                                    std::is_same_v<T, bfloat16_t>>>
  constexpr complex64_t(T x) : std::complex<float>(static_cast<float>(x), 0.0f) {}
};
// numpy's lexicographic order: a NaN in either imaginary part makes the real parts' order void, so
// every comparison with a NaN part is false (as with real NaNs).
inline bool operator>(const complex64_t& a, const complex64_t& b) {
  return (a.real() > b.real() && a.imag() == a.imag() && b.imag() == b.imag()) ||
         (a.real() == b.real() && a.imag() > b.imag());
}
inline bool operator>=(const complex64_t& a, const complex64_t& b) {
  return (a.real() > b.real() && a.imag() == a.imag() && b.imag() == b.imag()) ||
         (a.real() == b.real() && a.imag() >= b.imag());
}
inline bool operator<(const complex64_t& a, const complex64_t& b) { return b > a; }
inline bool operator<=(const complex64_t& a, const complex64_t& b) { return b >= a; }
// std::complex's operators return std::complex<float>; these keep complex64_t (so that `a + b`
// stays the storage type and templates over T see T).
inline complex64_t operator+(const complex64_t& a, const complex64_t& b) {
  return static_cast<const std::complex<float>&>(a) + static_cast<const std::complex<float>&>(b);
}
inline complex64_t operator-(const complex64_t& a, const complex64_t& b) {
  return static_cast<const std::complex<float>&>(a) - static_cast<const std::complex<float>&>(b);
}
inline complex64_t operator*(const complex64_t& a, const complex64_t& b) {
  return static_cast<const std::complex<float>&>(a) * static_cast<const std::complex<float>&>(b);
}
inline complex64_t operator/(const complex64_t& a, const complex64_t& b) {
  return static_cast<const std::complex<float>&>(a) / static_cast<const std::complex<float>&>(b);
}
inline complex64_t operator-(const complex64_t& a) { return -static_cast<const std::complex<float>&>(a); }
inline bool operator==(const complex64_t& a, const complex64_t& b) { return a.real() == b.real() && a.imag() == b.imag(); }
inline bool operator!=(const complex64_t& a, const complex64_t& b) { return !(a == b); }

struct Dtype {
  // MLX's order for the integers (unsigned, then signed, each by width); then the floats and
  // complex64, so that the kind of a dtype is a range of this enum.
  enum class Val : uint8_t {
    bool_, uint8, uint16, uint32, uint64, int8, int16, int32, int64, float16, bfloat16, float32, float64, complex64
  };
  /// numpy's categories, as MLX names them (`issubdtype`).
  enum class Category { complexfloating, floating, inexact, signedinteger, unsignedinteger, integer, number, generic };
  /// numpy's kind codes, as MLX has them: bfloat16, which numpy lacks, is V.
  enum class Kind { b, u, i, f, c, V };
  Val val;
  uint8_t size;  // bytes per element
  constexpr bool operator==(const Dtype& o) const { return val == o.val; }
  constexpr bool operator!=(const Dtype& o) const { return val != o.val; }
};

inline constexpr Dtype bool_{Dtype::Val::bool_, 1};
inline constexpr Dtype uint8{Dtype::Val::uint8, 1};
inline constexpr Dtype uint16{Dtype::Val::uint16, 2};
inline constexpr Dtype uint32{Dtype::Val::uint32, 4};
inline constexpr Dtype uint64{Dtype::Val::uint64, 8};
inline constexpr Dtype int8{Dtype::Val::int8, 1};
inline constexpr Dtype int16{Dtype::Val::int16, 2};
inline constexpr Dtype int32{Dtype::Val::int32, 4};
inline constexpr Dtype int64{Dtype::Val::int64, 8};
inline constexpr Dtype float16{Dtype::Val::float16, 2};
inline constexpr Dtype bfloat16{Dtype::Val::bfloat16, 2};
inline constexpr Dtype float32{Dtype::Val::float32, 4};
inline constexpr Dtype float64{Dtype::Val::float64, 8};
inline constexpr Dtype complex64{Dtype::Val::complex64, 8};

/// Every real dtype, in the enum's order (every dtype but complex64, which most ops reject).
inline constexpr Dtype all_dtypes[] = {bool_, uint8,    uint16,  uint32,  uint64,  int8,   int16,
                                       int32, int64,    float16, bfloat16, float32, float64};

/// float16, bfloat16, float32 and float64 (not complex64: numpy's `floating`).
inline constexpr bool is_floating_point(Dtype t) { return t.val >= Dtype::Val::float16 && t.val <= Dtype::Val::float64; }
inline constexpr bool is_complex(Dtype t) { return t.val == Dtype::Val::complex64; }
/// Floating or complex (numpy's `inexact`).
inline constexpr bool is_inexact(Dtype t) { return t.val >= Dtype::Val::float16; }
/// uint8 ... int64 (not bool).
inline constexpr bool is_integral(Dtype t) { return t.val >= Dtype::Val::uint8 && t.val <= Dtype::Val::int64; }
/// bool and the unsigned integers: the dtypes with no negative values.
inline constexpr bool is_unsigned(Dtype t) { return t.val <= Dtype::Val::uint64; }
inline constexpr bool is_signed_integer(Dtype t) { return t.val >= Dtype::Val::int8 && t.val <= Dtype::Val::int64; }
inline constexpr size_t size_of(Dtype t) { return t.size; }

/// MLX's (and JAX's) promotion table: the dtype two operands are computed in. Within a kind the
/// wider type wins; uintN with intM gives the signed type wide enough for both (uint64 with any
/// signed integer gives float32, as in MLX); an integer with a float gives the float; float16 with
/// bfloat16 gives float32.
Dtype promote_types(Dtype a, Dtype b);

/// The category `t` belongs to (generic for bool), and numpy's `issubdtype` over dtypes and categories.
Dtype::Category category_of(Dtype t);
bool issubdtype(Dtype a, Dtype b);
bool issubdtype(Dtype a, Dtype::Category b);
bool issubdtype(Dtype::Category a, Dtype b);
bool issubdtype(Dtype::Category a, Dtype::Category b);

/// The categories as values, as MLX spells them: issubdtype(t, floating).
inline constexpr Dtype::Category complexfloating = Dtype::Category::complexfloating;
inline constexpr Dtype::Category floating = Dtype::Category::floating;
inline constexpr Dtype::Category inexact = Dtype::Category::inexact;
inline constexpr Dtype::Category signedinteger = Dtype::Category::signedinteger;
inline constexpr Dtype::Category unsignedinteger = Dtype::Category::unsignedinteger;
inline constexpr Dtype::Category integer = Dtype::Category::integer;
inline constexpr Dtype::Category number = Dtype::Category::number;
inline constexpr Dtype::Category generic = Dtype::Category::generic;

/// numpy's kind of `t` (b, u, i, f, c; V for bfloat16).
Dtype::Kind kindof(Dtype t);

/// The limits of a floating dtype, as numpy's and MLX's finfo: min is the lowest finite value,
/// smallest_normal the least positive normal one. complex64 reports its float32 parts (dtype
/// float32). Throws std::invalid_argument for the other dtypes.
struct finfo {
  explicit finfo(Dtype dtype);
  Dtype dtype;
  int bits;
  double min;
  double max;
  double eps;
  double smallest_normal;
};

/// The range of an integer dtype, as numpy's and MLX's iinfo. Throws std::invalid_argument for the
/// other dtypes (bool included).
struct iinfo {
  explicit iinfo(Dtype dtype);
  Dtype dtype;
  int64_t min;
  uint64_t max;
};

/// "float32", "int64", ... (numpy's names).
std::string to_string(Dtype t);
std::ostream& operator<<(std::ostream& os, Dtype t);

template <typename T>
struct TypeToDtype;
template <> struct TypeToDtype<bool> { static constexpr Dtype value = bool_; };
template <> struct TypeToDtype<uint8_t> { static constexpr Dtype value = uint8; };
template <> struct TypeToDtype<uint16_t> { static constexpr Dtype value = uint16; };
template <> struct TypeToDtype<uint32_t> { static constexpr Dtype value = uint32; };
template <> struct TypeToDtype<uint64_t> { static constexpr Dtype value = uint64; };
template <> struct TypeToDtype<int8_t> { static constexpr Dtype value = int8; };
template <> struct TypeToDtype<int16_t> { static constexpr Dtype value = int16; };
template <> struct TypeToDtype<int32_t> { static constexpr Dtype value = int32; };
template <> struct TypeToDtype<int64_t> { static constexpr Dtype value = int64; };
template <> struct TypeToDtype<float16_t> { static constexpr Dtype value = float16; };
template <> struct TypeToDtype<bfloat16_t> { static constexpr Dtype value = bfloat16; };
template <> struct TypeToDtype<float> { static constexpr Dtype value = float32; };
template <> struct TypeToDtype<complex64_t> { static constexpr Dtype value = complex64; };
template <> struct TypeToDtype<std::complex<float>> { static constexpr Dtype value = complex64; };
// As MLX: a C++ double makes a float32 array (array(0.1), full(shape, 2.0), array({1.0, 2.0})), the
// dtype models train in; pass float64 to keep double precision (array(0.1, float64)).
template <> struct TypeToDtype<double> { static constexpr Dtype value = float32; };
// The C++ integer types that are not one of the above on this platform.
template <> struct TypeToDtype<char> { static constexpr Dtype value = uint8; };
template <> struct TypeToDtype<long long> { static constexpr Dtype value = int64; };
template <> struct TypeToDtype<unsigned long long> { static constexpr Dtype value = uint64; };
template <typename T>
inline constexpr Dtype dtype_of = TypeToDtype<T>::value;

}  // namespace loom

#include "loom/core/dtype.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <stdexcept>

namespace loom {

uint16_t float16_t::from_float(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  uint32_t sign = (x >> 16) & 0x8000u;
  uint32_t absx = x & 0x7fffffffu;
  if (absx >= 0x7f800000u) {  // inf or NaN
    return static_cast<uint16_t>(sign | 0x7c00u | (absx > 0x7f800000u ? 0x200u : 0u));
  }
  if (absx >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // rounds to inf
  if (absx < 0x38800000u) {                                                // subnormal or zero in half
    if (absx < 0x33000000u) return static_cast<uint16_t>(sign);          // below half of min subnormal
    uint32_t mant = (absx & 0x7fffffu) | 0x800000u;
    int shift = 126 - static_cast<int>(absx >> 23);  // 14 + (113 - exp)
    uint32_t rounded = mant >> shift;
    uint32_t rem = mant & ((1u << shift) - 1u);
    uint32_t half = 1u << (shift - 1);
    if (rem > half || (rem == half && (rounded & 1u))) rounded++;
    return static_cast<uint16_t>(sign | rounded);
  }
  uint32_t h = ((absx >> 13) - (112u << 10));
  uint32_t rem = absx & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) h++;
  return static_cast<uint16_t>(sign | h);
}

float float16_t::to_float(uint16_t h) {
  uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  uint32_t out;
  if (exp == 0) {
    if (mant == 0) {
      out = sign;
    } else {  // subnormal: normalise
      int e = -1;
      do {
        e++;
        mant <<= 1;
      } while ((mant & 0x400u) == 0);
      out = sign | ((112u - e) << 23) | ((mant & 0x3ffu) << 13);
    }
  } else if (exp == 31) {
    out = sign | 0x7f800000u | (mant << 13);
  } else {
    out = sign | ((exp + 112u) << 23) | (mant << 13);
  }
  float f;
  std::memcpy(&f, &out, 4);
  return f;
}

namespace {
constexpr int kNumTypes = 13;
// Rows and columns in Dtype::Val order. MLX's table (JAX's rules); complex64 with anything is
// complex64 (promote_types), float64 too, as in MLX.
#define B bool_
#define U1 uint8
#define U2 uint16
#define U4 uint32
#define U8 uint64
#define I1 int8
#define I2 int16
#define I4 int32
#define I8 int64
#define F2 float16
#define BF bfloat16
#define F4 float32
#define F8 float64
constexpr Dtype kPromote[kNumTypes][kNumTypes] = {
    //  bool uint8 uint16 uint32 uint64 int8 int16 int32 int64 f16 bf16 f32 f64
    {B, U1, U2, U4, U8, I1, I2, I4, I8, F2, BF, F4, F8},   // bool
    {U1, U1, U2, U4, U8, I2, I2, I4, I8, F2, BF, F4, F8},  // uint8
    {U2, U2, U2, U4, U8, I4, I4, I4, I8, F2, BF, F4, F8},  // uint16
    {U4, U4, U4, U4, U8, I8, I8, I8, I8, F2, BF, F4, F8},  // uint32
    {U8, U8, U8, U8, U8, F4, F4, F4, F4, F2, BF, F4, F8},  // uint64
    {I1, I2, I4, I8, F4, I1, I2, I4, I8, F2, BF, F4, F8},  // int8
    {I2, I2, I4, I8, F4, I2, I2, I4, I8, F2, BF, F4, F8},  // int16
    {I4, I4, I4, I8, F4, I4, I4, I4, I8, F2, BF, F4, F8},  // int32
    {I8, I8, I8, I8, F4, I8, I8, I8, I8, F2, BF, F4, F8},  // int64
    {F2, F2, F2, F2, F2, F2, F2, F2, F2, F2, F4, F4, F8},  // float16
    {BF, BF, BF, BF, BF, BF, BF, BF, BF, F4, BF, F4, F8},  // bfloat16
    {F4, F4, F4, F4, F4, F4, F4, F4, F4, F4, F4, F4, F8},  // float32
    {F8, F8, F8, F8, F8, F8, F8, F8, F8, F8, F8, F8, F8},  // float64
};
#undef B
#undef U1
#undef U2
#undef U4
#undef U8
#undef I1
#undef I2
#undef I4
#undef I8
#undef F2
#undef BF
#undef F4
#undef F8
}  // namespace

Dtype promote_types(Dtype a, Dtype b) {
  if (is_complex(a) || is_complex(b)) return complex64;
  return kPromote[static_cast<int>(a.val)][static_cast<int>(b.val)];
}

Dtype::Category category_of(Dtype t) {
  if (t == bool_) return Dtype::Category::generic;
  if (is_complex(t)) return Dtype::Category::complexfloating;
  if (is_floating_point(t)) return Dtype::Category::floating;
  return is_signed_integer(t) ? Dtype::Category::signedinteger : Dtype::Category::unsignedinteger;
}

bool issubdtype(Dtype a, Dtype b) { return a == b; }

bool issubdtype(Dtype::Category a, Dtype::Category b) {
  using C = Dtype::Category;
  if (a == b || b == C::generic) return true;
  switch (b) {
    case C::inexact: return a == C::floating || a == C::complexfloating;
    case C::integer: return a == C::signedinteger || a == C::unsignedinteger;
    case C::number: return a != C::generic;
    default: return false;
  }
}

bool issubdtype(Dtype a, Dtype::Category b) {
  // bool is only generic (numpy: np.issubdtype(np.bool_, np.number) is False).
  return issubdtype(category_of(a), b);
}

bool issubdtype(Dtype::Category, Dtype) { return false; }

Dtype::Kind kindof(Dtype t) {
  if (t == bool_) return Dtype::Kind::b;
  if (t == bfloat16) return Dtype::Kind::V;
  if (is_complex(t)) return Dtype::Kind::c;
  if (is_floating_point(t)) return Dtype::Kind::f;
  return is_signed_integer(t) ? Dtype::Kind::i : Dtype::Kind::u;
}

finfo::finfo(Dtype d) : dtype(d == complex64 ? float32 : d) {
  // IEEE binary16 and bfloat16 (8 exponent bits, 7 fraction bits) have no std::numeric_limits.
  if (dtype == float16) {
    bits = 16, max = 65504.0, eps = std::ldexp(1.0, -10), smallest_normal = std::ldexp(1.0, -14);
  } else if (dtype == bfloat16) {
    bits = 16, max = std::ldexp(255.0, 120), eps = std::ldexp(1.0, -7), smallest_normal = std::ldexp(1.0, -126);
  } else if (dtype == float32) {
    bits = 32, max = std::numeric_limits<float>::max(), eps = std::numeric_limits<float>::epsilon(),
    smallest_normal = std::numeric_limits<float>::min();
  } else if (dtype == float64) {
    bits = 64, max = std::numeric_limits<double>::max(), eps = std::numeric_limits<double>::epsilon(),
    smallest_normal = std::numeric_limits<double>::min();
  } else {
    throw std::invalid_argument("[finfo] " + to_string(d) + " is not a floating or complex dtype");
  }
  min = -max;
}

iinfo::iinfo(Dtype d) : dtype(d) {
  if (!is_integral(d)) throw std::invalid_argument("[iinfo] " + to_string(d) + " is not an integer dtype");
  if (is_signed_integer(d)) {
    const int b = 8 * d.size;
    min = b == 64 ? std::numeric_limits<int64_t>::min() : -(int64_t(1) << (b - 1));
    max = b == 64 ? uint64_t(std::numeric_limits<int64_t>::max()) : (uint64_t(1) << (b - 1)) - 1;
  } else {
    min = 0;
    max = d.size == 8 ? std::numeric_limits<uint64_t>::max() : (uint64_t(1) << (8 * d.size)) - 1;
  }
}

std::string to_string(Dtype t) {
  switch (t.val) {
    case Dtype::Val::bool_: return "bool";
    case Dtype::Val::uint8: return "uint8";
    case Dtype::Val::uint16: return "uint16";
    case Dtype::Val::uint32: return "uint32";
    case Dtype::Val::uint64: return "uint64";
    case Dtype::Val::int8: return "int8";
    case Dtype::Val::int16: return "int16";
    case Dtype::Val::int32: return "int32";
    case Dtype::Val::int64: return "int64";
    case Dtype::Val::float16: return "float16";
    case Dtype::Val::bfloat16: return "bfloat16";
    case Dtype::Val::float32: return "float32";
    case Dtype::Val::float64: return "float64";
    case Dtype::Val::complex64: return "complex64";
  }
  return "unknown";
}

std::ostream& operator<<(std::ostream& os, Dtype t) { return os << to_string(t); }

}  // namespace loom

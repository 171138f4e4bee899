#include "loom/core/dtype.h"

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

Dtype promote_types(Dtype a, Dtype b) {
  if (a == b) return a;
  bool fa = is_floating_point(a), fb = is_floating_point(b);
  if (fa && fb) {
    if ((a == float16 && b == bfloat16) || (a == bfloat16 && b == float16)) return float32;
    return a.val > b.val ? a : b;
  }
  if (fa) return a;
  if (fb) return b;
  return a.val > b.val ? a : b;  // bool < uint8 < int32 < int64
}

std::string to_string(Dtype t) {
  switch (t.val) {
    case Dtype::Val::bool_: return "bool";
    case Dtype::Val::uint8: return "uint8";
    case Dtype::Val::int32: return "int32";
    case Dtype::Val::int64: return "int64";
    case Dtype::Val::float16: return "float16";
    case Dtype::Val::bfloat16: return "bfloat16";
    case Dtype::Val::float32: return "float32";
    case Dtype::Val::float64: return "float64";
  }
  return "unknown";
}

std::ostream& operator<<(std::ostream& os, Dtype t) { return os << to_string(t); }

}  // namespace loom

// Dtype dispatch and value conversion used by kernels and by `array`'s templates.
#pragma once

#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "loom/core/dtype.h"

namespace loom {

template <typename T>
inline constexpr bool is_half_v = std::is_same_v<T, float16_t> || std::is_same_v<T, bfloat16_t>;

template <typename T>
inline constexpr bool is_complex_v = std::is_same_v<T, complex64_t>;

/// The type a kernel computes in for storage type T: float for the half types, T otherwise.
template <typename T>
using compute_t = std::conditional_t<is_half_v<T>, float, T>;

/// Converts between any two element types. Float to integer truncates toward zero and saturates
/// (NaN becomes 0), so no conversion is undefined behaviour. Complex to real keeps the real part
/// (numpy and MLX); complex to bool tests both parts.
template <typename To, typename From>
inline To cast_value(From v) {
  if constexpr (std::is_same_v<To, From>) {
    return v;
  } else if constexpr (is_complex_v<From>) {
    if constexpr (std::is_same_v<To, bool>) return v.real() != 0.0f || v.imag() != 0.0f;
    else return cast_value<To>(v.real());
  } else if constexpr (is_complex_v<To>) {
    return To(cast_value<float>(v));
  } else if constexpr (is_half_v<From>) {
    return cast_value<To>(static_cast<float>(v));
  } else if constexpr (std::is_same_v<To, bool>) {
    return v != From(0);
  } else if constexpr (is_half_v<To>) {
    return To(v);  // rounds once from v (not via a rounded float)
  } else if constexpr (std::is_integral_v<To> && std::is_floating_point_v<From>) {
    if (std::isnan(v)) return To(0);
    constexpr From lo = static_cast<From>(std::numeric_limits<To>::min());
    constexpr From hi = static_cast<From>(std::numeric_limits<To>::max());
    if (v <= lo) return std::numeric_limits<To>::min();
    if (v >= hi) return std::numeric_limits<To>::max();
    return static_cast<To>(v);
  } else {
    return static_cast<To>(v);
  }
}

namespace detail {
/// The error of a kernel reached with a dtype it has no case for (the op should have refused the
/// dtype when it was built; this keeps a missed check from computing garbage).
[[noreturn]] inline void unsupported_dtype(Dtype d) {
  throw std::invalid_argument("[eval] no kernel for dtype " + to_string(d));
}
}  // namespace detail

}  // namespace loom

#define LOOM_DTYPE_CASE(VAL, CTYPE, NAME, ...) \
  case ::loom::Dtype::Val::VAL: {              \
    using NAME = CTYPE;                        \
    __VA_ARGS__;                               \
    break;                                     \
  }

/// Runs the block with NAME bound to the C++ type of `dtype`: every Loom dtype (ALL) or every one
/// but complex64 (REAL), which then throws.
#define LOOM_DISPATCH_ALL(dtype, NAME, ...)                              \
  switch ((dtype).val) {                                                 \
    LOOM_DTYPE_CASE(complex64, ::loom::complex64_t, NAME, __VA_ARGS__)   \
    LOOM_REAL_CASES(NAME, __VA_ARGS__)                                   \
  }
#define LOOM_DISPATCH_REAL(dtype, NAME, ...)                             \
  switch ((dtype).val) {                                                 \
    LOOM_REAL_CASES(NAME, __VA_ARGS__)                                   \
    default:                                                             \
      ::loom::detail::unsupported_dtype(dtype);                          \
  }
#define LOOM_REAL_CASES(NAME, ...)                                       \
    LOOM_DTYPE_CASE(bool_, bool, NAME, __VA_ARGS__)                      \
    LOOM_DTYPE_CASE(uint8, uint8_t, NAME, __VA_ARGS__)                   \
    LOOM_DTYPE_CASE(uint16, uint16_t, NAME, __VA_ARGS__)                 \
    LOOM_DTYPE_CASE(uint32, uint32_t, NAME, __VA_ARGS__)                 \
    LOOM_DTYPE_CASE(uint64, uint64_t, NAME, __VA_ARGS__)                 \
    LOOM_DTYPE_CASE(int8, int8_t, NAME, __VA_ARGS__)                     \
    LOOM_DTYPE_CASE(int16, int16_t, NAME, __VA_ARGS__)                   \
    LOOM_DTYPE_CASE(int32, int32_t, NAME, __VA_ARGS__)                   \
    LOOM_DTYPE_CASE(int64, int64_t, NAME, __VA_ARGS__)                   \
    LOOM_DTYPE_CASE(float16, ::loom::float16_t, NAME, __VA_ARGS__)       \
    LOOM_DTYPE_CASE(bfloat16, ::loom::bfloat16_t, NAME, __VA_ARGS__)     \
    LOOM_DTYPE_CASE(float32, float, NAME, __VA_ARGS__)                   \
    LOOM_DTYPE_CASE(float64, double, NAME, __VA_ARGS__)

/// Runs the block with NAME bound to the unsigned integer of an item size (1, 2, 4, else 8 bytes):
/// kernels that only move elements (copies, gathers, where's blend) need no arithmetic, so four
/// instantiations serve every dtype.
#define LOOM_DISPATCH_ITEMSIZE(size, NAME, ...)   \
  switch (size) {                                 \
    case 1: {                                     \
      using NAME = uint8_t;                       \
      __VA_ARGS__;                                \
      break;                                      \
    }                                             \
    case 2: {                                     \
      using NAME = uint16_t;                      \
      __VA_ARGS__;                                \
      break;                                      \
    }                                             \
    case 4: {                                     \
      using NAME = uint32_t;                      \
      __VA_ARGS__;                                \
      break;                                      \
    }                                             \
    default: {                                    \
      using NAME = uint64_t;                      \
      __VA_ARGS__;                                \
      break;                                      \
    }                                             \
  }

/// Floating dtypes only.
#define LOOM_DISPATCH_FLOAT(dtype, NAME, ...)                            \
  switch ((dtype).val) {                                                 \
    LOOM_DTYPE_CASE(float16, ::loom::float16_t, NAME, __VA_ARGS__)       \
    LOOM_DTYPE_CASE(bfloat16, ::loom::bfloat16_t, NAME, __VA_ARGS__)     \
    LOOM_DTYPE_CASE(float32, float, NAME, __VA_ARGS__)                   \
    LOOM_DTYPE_CASE(float64, double, NAME, __VA_ARGS__)                  \
    default:                                                             \
      break;                                                             \
  }

// Argument checking shared by the op functions (internal).
#pragma once

#include <cstdint>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "loom/core/array.h"

namespace loom {
class Primitive;
}

namespace loom::detail {

/// The primitive of astype(x, d) (ops/creation.cpp), for a primitive that runs a cast and adds
/// something of its own (the autocast policy's kept casts).
std::shared_ptr<Primitive> astype_primitive(Dtype d);

/// For ops that compute in a real floating dtype (casting integers there): complex64 would lose its
/// imaginary part in that cast, so it is an error naming `op`.
inline void reject_complex(Dtype d, const char* op) {
  if (is_complex(d)) throw std::invalid_argument(std::string("[") + op + "] is not defined for complex64 arrays");
}

/// Maps a possibly negative axis into [0, ndim); throws std::out_of_range naming `op` otherwise.
inline int normalize_axis(int axis, int ndim, const char* op) {
  int ax = axis < 0 ? axis + ndim : axis;
  if (ax < 0 || ax >= ndim) {
    throw std::out_of_range(std::string("[") + op + "] axis " + std::to_string(axis) +
                            " is out of range for an array of " + std::to_string(ndim) + " dimensions");
  }
  return ax;
}

/// `n` as the length of axis `axis` of an op's result; throws std::overflow_error naming `op` when an
/// axis cannot hold it (at most 2^31 - 1 elements, as in MLX).
inline int axis_length(int64_t n, const char* op, int axis) {
  if (n > INT32_MAX) {
    throw std::overflow_error(std::string("[") + op + "] axis " + std::to_string(axis) + " would have " +
                              std::to_string(n) + " elements; an axis holds at most 2147483647");
  }
  return static_cast<int>(n);
}

/// True when `from` broadcasts to exactly `to`.
inline bool broadcasts_to(const Shape& from, const Shape& to) {
  if (from.size() > to.size()) return false;
  const size_t off = to.size() - from.size();
  for (size_t i = 0; i < from.size(); ++i) {
    if (from[i] != 1 && from[i] != to[off + i]) return false;
  }
  return true;
}

/// Normalizes, sorts and checks a list of axes for duplicates.
std::vector<int> normalize_axes(const std::vector<int>& axes, int ndim, const char* op);

template <typename... Parts>
std::string msg(const Parts&... parts) {
  std::ostringstream os;
  (os << ... << parts);
  return os.str();
}

/// broadcast_to(a, shape), where `shape` is the broadcast of a's shape with `others`' (an elementwise
/// op's other operands). In a shapeless trace (core/array.h) the others are inputs of the Broadcast
/// too, for their shapes only, so that a shapeless call infers the broadcast shape from all of them.
array broadcast_to_like(const array& a, const Shape& shape, const std::vector<array>& others);

}  // namespace loom::detail

#include "loom/ops/autocast.h"

#include <stdexcept>

#include "loom/ops/ops.h"
#include "loom/ops/utils.h"

namespace loom {
namespace {
// Per thread: a policy belongs to the code building a graph, and another thread building its own
// graph at the same time (a data loader, a second model) is not in the region.
thread_local std::optional<Dtype> policy;

bool is_half(Dtype d) { return d == float16 || d == bfloat16; }
}  // namespace

Autocast::Autocast(Dtype dtype, bool enabled) : previous_(policy) {
  if (enabled && !is_half(dtype)) {
    throw std::invalid_argument(detail::msg("[Autocast] computes in bfloat16 or float16; got ", dtype));
  }
  policy = enabled ? std::optional<Dtype>(dtype) : std::nullopt;
}

Autocast::~Autocast() { policy = previous_; }

std::optional<Dtype> autocast_dtype() { return policy; }

namespace detail {
array autocast_lower(const array& x) {
  if (!policy || x.dtype() == *policy || !(is_half(x.dtype()) || x.dtype() == float32)) return x;
  return astype(x, *policy);
}

array autocast_float32(const array& x) {
  if (!policy || !is_half(x.dtype())) return x;
  return astype(x, float32);
}

std::optional<array> autocast_lower(const std::optional<array>& x) {
  if (!x) return std::nullopt;
  return autocast_lower(*x);
}

std::optional<array> autocast_float32(const std::optional<array>& x) {
  if (!x) return std::nullopt;
  return autocast_float32(*x);
}
}  // namespace detail

}  // namespace loom

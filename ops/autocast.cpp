#include "loom/ops/autocast.h"

#include <stdexcept>
#include <unordered_map>

#include "loom/ops/ops.h"
#include "loom/ops/utils.h"

namespace loom {
namespace {
// Per thread: a policy belongs to the code building a graph, and another thread building its own
// graph at the same time (a data loader, a second model) is not in the region.
thread_local std::optional<Dtype> policy;

bool is_half(Dtype d) { return d == float16 || d == bfloat16; }

// The casts this thread's policy has made, by source array and dtype, both held weakly: an array
// that several products read (an activation feeding the q, k and v projections, the gate and up
// projections of a gated MLP; a tied weight) is cast once per graph, as torch.autocast's cast cache
// does, and its products' cotangents meet at the one cast. Neither the source nor the cast is kept
// alive: an entry ends with either.
struct CastMemo {
  struct Entry {
    array::Weak source, cast;
  };
  std::unordered_map<uint64_t, Entry> entries;  // key: source id and dtype
  size_t sweep_at = 64;

  static uint64_t key(const array& x, Dtype d) { return uint64_t(x.id()) * 16 + uint64_t(d.val); }

  std::optional<array> find(const array& x, Dtype d) {
    auto it = entries.find(key(x, d));
    if (it == entries.end()) return std::nullopt;
    std::optional<array> src = it->second.source.lock();
    std::optional<array> cast = it->second.cast.lock();
    if (!src || !cast) {  // an array now at a dead source's address has the key, not the weak reference
      entries.erase(it);
      return std::nullopt;
    }
    return cast;
  }
  void insert(const array& x, Dtype d, const array& cast) {
    if (entries.size() >= sweep_at) {  // drop the entries whose arrays are gone
      for (auto it = entries.begin(); it != entries.end();) {
        it = (!it->second.source.lock() || !it->second.cast.lock()) ? entries.erase(it) : std::next(it);
      }
      sweep_at = std::max<size_t>(64, 2 * entries.size());
    }
    entries[key(x, d)] = Entry{x.weak(), cast.weak()};
  }
};
thread_local CastMemo memo;

array cast_once(const array& x, Dtype d) {
  if (std::optional<array> c = memo.find(x, d)) return *c;
  array c = astype(x, d);
  memo.insert(x, d, c);
  return c;
}
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
  return cast_once(x, *policy);
}

array autocast_float32(const array& x) {
  if (!policy || !is_half(x.dtype())) return x;
  return cast_once(x, float32);
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

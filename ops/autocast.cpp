#include "loom/ops/autocast.h"

#include <atomic>
#include <mutex>
#include <stdexcept>
#include <string_view>
#include <unordered_map>

#include "loom/core/primitive.h"
#include "loom/core/serialize.h"
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

// An evaluated array's cast, once computed: the cast's buffer in an array with no graph.
struct Kept {
  std::mutex m;
  std::optional<array> value;
  std::atomic<bool> ready{false};  // value is set: for the sweep, which takes no lock
};

// AsType of an evaluated source (a parameter, a frozen weight, an input batch), which leaves its
// result in `kept` when it runs: the later graphs that cast the same source reuse it (ValueCasts).
// Everything else is AsType's own (its kernel, derivatives, name and saved form).
class KeptCast : public UnaryPrimitive {
 public:
  KeptCast(Dtype d, std::shared_ptr<Kept> kept) : cast_(detail::astype_primitive(d)), kept_(std::move(kept)) {}
  void save(detail::Writer& w) const override { cast_->save(w); }
  std::vector<Shape> output_shapes(const std::vector<Shape>& in) const override { return cast_->output_shapes(in); }
  void eval_cpu(const std::vector<array>& in, array& out) override {
    std::vector<array> outs{out};
    cast_->eval_cpu(in, outs);
    array v(out.shape(), out.dtype(), cast_, {});  // the result's buffer, without its graph
    v.copy_shared_buffer(out);
    v.set_evaluated();
    v.detach();
    std::lock_guard<std::mutex> lock(kept_->m);
    kept_->value = std::move(v);
    kept_->ready.store(true, std::memory_order_release);
  }
  std::vector<array> vjp(const std::vector<array>& p, const std::vector<array>& cot, const std::vector<int>& argnums,
                         const std::vector<array>& outs) override {
    return cast_->vjp(p, cot, argnums, outs);
  }
  std::vector<array> jvp(const std::vector<array>& p, const std::vector<array>& t, const std::vector<int>& argnums) override {
    return cast_->jvp(p, t, argnums);
  }
  std::pair<std::vector<array>, std::vector<int>> vmap(const std::vector<array>& in, const std::vector<int>& axes,
                                                       const std::vector<array>& outs) override {
    return cast_->vmap(in, axes, outs);
  }
  const char* name() const override { return cast_->name(); }

 private:
  std::shared_ptr<Primitive> cast_;
  std::shared_ptr<Kept> kept_;
};

// vjp's traced copy x of an evaluated source, in dtype d, from `cast`, that source's kept cast: x's
// value is the source's, so the node shares cast's buffer and computes nothing; its derivative is
// AsType's, back to x in x's dtype.
class CastOfValue : public UnaryPrimitive {
 public:
  explicit CastOfValue(Dtype d) : dtype_(d) {}
  void save(detail::Writer& w) const override { w.put(dtype_); }
  std::vector<Shape> output_shapes(const std::vector<Shape>& in) const override { return {in.at(0)}; }
  bool is_equivalent(const Primitive& other) const override {
    auto* p = detail::same_primitive(this, other);
    return p && dtype_ == p->dtype_;
  }
  bool makes_view() const override { return true; }
  void eval_cpu(const std::vector<array>& in, array& out) override { out.copy_shared_buffer(in[1]); }
  std::vector<array> vjp(const std::vector<array>& p, const std::vector<array>& cot, const std::vector<int>& argnums,
                         const std::vector<array>&) override {
    std::vector<array> g;
    for (int a : argnums) g.push_back(a == 0 ? astype(cot[0], p[0].dtype()) : zeros_like(p[1]));
    return g;
  }
  std::vector<array> jvp(const std::vector<array>& p, const std::vector<array>& t,
                         const std::vector<int>& argnums) override {
    for (size_t i = 0; i < argnums.size(); ++i) {
      if (argnums[i] == 0) return {astype(t[i], dtype_)};
    }
    return {zeros(p[0].shape(), dtype_)};
  }
  // Under vmap x may differ per entry: a real cast of it.
  std::pair<std::vector<array>, std::vector<int>> vmap(const std::vector<array>& in, const std::vector<int>& axes,
                                                       const std::vector<array>&) override {
    return {{astype(in[0], dtype_)}, {axes[0]}};
  }
  const char* name() const override { return "CastOfValue"; }

 private:
  Dtype dtype_;
};
const bool kCastsLoad =
    detail::register_primitive("CastOfValue", [](detail::Reader& r) -> std::shared_ptr<Primitive> {
      return std::make_shared<CastOfValue>(r.get<Dtype>());
    });

// The casts of evaluated arrays, kept while their source lives once they have been computed: a
// parameter is cast once per value, not once per graph, so the micro-batches of one optimizer step
// (nn::GradientAccumulator) share one half copy of each weight, as they share the weight. An entry
// holds the source and the cast node weakly and the computed cast strongly; it ends when the source
// dies (the optimizer's update replaces the parameter), or when the cast node died uncomputed. Each
// miss sweeps the entries (a check of two weak references each), so the last step's half copies go
// as the next step casts its new parameters, not later.
struct ValueCasts {
  struct Entry {
    array::Weak source, cast;
    std::uintptr_t tracer;  // the traced copy `cast` was made of, 0 for an untraced source
    std::shared_ptr<Kept> kept;
  };
  std::unordered_map<uint64_t, Entry> entries;  // key: source id and dtype

  static std::optional<array> computed(const Entry& e) {
    std::lock_guard<std::mutex> lock(e.kept->m);
    return e.kept->value;
  }

  // x in dtype d, where `source` is evaluated: x itself, or (`traced`) vjp's copy of it.
  array cast(const array& x, const array& source, Dtype d, bool traced) {
    const uint64_t key = CastMemo::key(source, d);
    auto it = entries.find(key);
    if (it != entries.end() && it->second.source.lock()) {
      const Entry& e = it->second;
      if (std::optional<array> c = computed(e)) {
        return traced ? array(x.shape(), d, std::make_shared<CastOfValue>(d), {x, *c}) : *c;
      }
      std::optional<array> c = e.cast.lock();  // the same graph's second use: one cast, cotangents meet
      if (c && e.tracer == (traced ? x.id() : 0)) return *c;
    }
    for (auto i = entries.begin(); i != entries.end();) {
      const Entry& e = i->second;
      const bool dead = e.source.expired() || (e.cast.expired() && !e.kept->ready.load(std::memory_order_acquire));
      i = dead ? entries.erase(i) : std::next(i);
    }
    auto kept = std::make_shared<Kept>();
    array c(x.shape(), d, std::make_shared<KeptCast>(d, kept), {x});
    entries.insert_or_assign(key, Entry{source.weak(), c.weak(), traced ? x.id() : 0, std::move(kept)});
    return c;
  }
};
thread_local ValueCasts value_casts;

// The cast of x from ValueCasts where x is an evaluated array, vjp's traced copy of one, or a
// transpose or reshape of either (nn::Linear's weight.T: the view of the weight's cast).
std::optional<array> value_cast(const array& x, Dtype d) {
  if (x.is_evaluated() && !x.is_tracer()) return value_casts.cast(x, x, d, false);
  if (!x.has_primitive() || x.inputs().size() != 1) return std::nullopt;
  const std::string_view name = x.primitive().name();
  if (name == "Copy" && x.is_tracer() && x.inputs()[0].is_evaluated()) {
    return value_casts.cast(x, x.inputs()[0], d, true);
  }
  if (name == "Transpose" || name == "Reshape") {
    if (std::optional<array> c = value_cast(x.inputs()[0], d)) return array(x.shape(), d, x.primitive_ptr(), {*c});
  }
  return std::nullopt;
}

array cast_once(const array& x, Dtype d) {
  if (std::optional<array> c = value_cast(x, d)) return *c;
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

// The oneDNN backend of the GEMM seam (kernels/gemm.h): bfloat16 and float16 products on the CPU's
// bf16 / fp16 / AMX instructions (float32 accumulation), and float32 ones when LOOM_GEMM=dnnl.
//
// Creating a oneDNN primitive costs 0.1-0.2 ms (1 ms the first in a process: benchmarks/README.md),
// far more than a small product, so primitives are kept, per dtypes, shape, layout and scalars, in
// a bounded LRU cache. Each is made and run single-threaded: Loom splits a product into shares on
// its own pool (kernels/gemm.cpp), as it does OpenBLAS's, because oneDNN's OpenMP team splits
// statically and spins at its barriers (1.3-2x slower at 2 threads on a shared machine).
#include <dlfcn.h>

#include <oneapi/dnnl/dnnl.hpp>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <list>
#include <memory>
#include <mutex>
#include <new>
#include <stdexcept>
#include <unordered_map>

#include "loom/kernels/gemm_backends.h"

namespace loom::kernels::backends {

namespace {

using dnnl::memory;

memory::data_type dnnl_type(Dtype d) {
  if (d == bfloat16) return memory::data_type::bf16;
  if (d == float16) return memory::data_type::f16;
  return memory::data_type::f32;
}

dnnl::engine& engine() {
  static dnnl::engine e(dnnl::engine::kind::cpu, 0);
  return e;
}

dnnl::stream& stream() {
  thread_local dnnl::stream s(engine());
  return s;
}

// Debian's oneDNN threads with OpenMP and sizes its team by omp_get_max_threads() on the calling
// thread, when a primitive is made (its blocking) and when it runs. A share of a product runs on one
// of Loom's threads, so for that call the thread's OpenMP width is 1, then what it was (a user's
// own OpenMP code on the same thread keeps its setting). The functions come from the libgomp that
// libdnnl loaded; resolved at run time so that Loom itself does not link an OpenMP runtime.
class OneOmpThread {
 public:
  OneOmpThread() {
    static const Fns fns = resolve();
    fns_ = &fns;
    if (fns_->set) {
      saved_ = fns_->get();
      if (saved_ != 1) fns_->set(1);
    }
  }
  ~OneOmpThread() {
    if (fns_->set && saved_ != 1) fns_->set(saved_);
  }
  OneOmpThread(const OneOmpThread&) = delete;
  OneOmpThread& operator=(const OneOmpThread&) = delete;

 private:
  struct Fns {
    int (*get)() = nullptr;
    void (*set)(int) = nullptr;
  };
  static Fns resolve() {
    (void)engine();  // the engine exists: libdnnl and its OpenMP runtime are loaded
    Fns f;
    for (const char* lib : {"libgomp.so.1", "libomp.so.5", "libiomp5.so"}) {
      void* h = dlopen(lib, RTLD_LAZY | RTLD_NOLOAD);
      if (!h) continue;
      f.get = reinterpret_cast<int (*)()>(dlsym(h, "omp_get_max_threads"));
      f.set = reinterpret_cast<void (*)(int)>(dlsym(h, "omp_set_num_threads"));
      if (f.get && f.set) return f;
      f = Fns{};
    }
    return f;
  }
  const Fns* fns_ = nullptr;
  int saved_ = 1;
};

struct Key {
  uint8_t in, out;
  bool ta, tb;
  uint8_t zero[4];  // the bytes before M's alignment, named so that copies keep them (zero)
  int64_t M, N, K, lda, ldb, ldc;
  uint64_t alpha, beta;  // bits of the doubles
  bool operator==(const Key& o) const { return std::memcmp(this, &o, sizeof(Key)) == 0; }
};
static_assert(sizeof(Key) == 72, "Key has no padding bytes: operator== compares its bytes");

struct KeyHash {
  size_t operator()(const Key& k) const {
    uint64_t h = 1469598103934665603ull;
    auto mix = [&](uint64_t v) { h = (h ^ v) * 1099511628211ull; };
    mix(uint64_t(k.in) | uint64_t(k.out) << 8 | uint64_t(k.ta) << 16 | uint64_t(k.tb) << 17);
    for (int64_t v : {k.M, k.N, k.K, k.lda, k.ldb, k.ldc}) mix(uint64_t(v));
    mix(k.alpha);
    mix(k.beta);
    return size_t(h);
  }
};

uint64_t bits(double v) {
  uint64_t u;
  std::memcpy(&u, &v, sizeof u);
  return u;
}

Key key_of(const Gemm& g) {
  Key k;
  std::memset(&k, 0, sizeof k);
  k.in = uint8_t(g.in.val), k.out = uint8_t(g.out.val), k.ta = g.ta, k.tb = g.tb;
  k.M = g.M, k.N = g.N, k.K = g.K, k.lda = g.lda, k.ldb = g.ldb, k.ldc = g.ldc;
  k.alpha = bits(g.alpha), k.beta = bits(g.beta);
  return k;
}

struct Entry {
  memory::desc a, b, c, scratch;
  dnnl::matmul prim;
  bool refused = false;  // oneDNN has no implementation for this layout: the caller computes it
};

// The scratchpad of every primitive a thread runs (packed panels of B, partial sums): the user's,
// one per thread, grown as needed and kept. With the library's scratchpad (and Debian's build's
// concurrent execution) each call allocated and freed its own, megabytes for a large product: page
// faults on every call, at 2 threads half the rate of one thread. Backend memory, as OpenBLAS's
// own buffers are, not arrays': it is not counted in get_active_memory (which would otherwise grow
// whenever a pool worker ran its first product, whatever the graph).
void* thread_scratch(size_t bytes) {
  struct Scratch {
    void* ptr = nullptr;
    size_t size = 0;
    ~Scratch() { std::free(ptr); }
  };
  thread_local Scratch s;
  if (bytes > s.size) {
    std::free(s.ptr);
    s.ptr = nullptr, s.size = 0;
    const size_t rounded = (bytes + 63) / 64 * 64;
    s.ptr = std::aligned_alloc(64, rounded);
    if (!s.ptr) throw std::bad_alloc();
    s.size = rounded;
  }
  return s.ptr;
}

// Made on the calling thread, with one OpenMP thread in force (OneOmpThread). Throws dnnl::error
// where oneDNN has no implementation.
std::shared_ptr<Entry> make_entry(const Gemm& g) {
  auto e = std::make_shared<Entry>();
  const memory::data_type ti = dnnl_type(g.in), to = dnnl_type(g.out);
  e->a = memory::desc({g.M, g.K}, ti, g.ta ? memory::dims{1, g.lda} : memory::dims{g.lda, 1});
  e->b = memory::desc({g.K, g.N}, ti, g.tb ? memory::dims{1, g.ldb} : memory::dims{g.ldb, 1});
  e->c = memory::desc({g.M, g.N}, to, memory::dims{g.ldc, 1});
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  if (g.alpha != 1.0) attr.set_output_scales(0, {float(g.alpha)});
  if (g.beta != 0.0) {
    dnnl::post_ops po;
    po.append_sum(float(g.beta));  // C = alpha A B + beta C: the sum post-op reads C before writing
    attr.set_post_ops(po);
  }
  dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(e->a, e->b, e->c), attr, engine());
  e->scratch = pd.scratchpad_desc();
  e->prim = dnnl::matmul(pd);
  return e;
}

// An entry, or a refused one where oneDNN declines this layout (the probe in dnnl_supports used a
// dense one; strides it declines must not stop the product).
std::shared_ptr<Entry> make_entry_or_refusal(const Gemm& g) {
  try {
    return make_entry(g);
  } catch (const dnnl::error&) {
    auto e = std::make_shared<Entry>();
    e->refused = true;
    return e;
  }
}

// A map from keys to values that drops the least recently used entry beyond `capacity`; not
// thread-safe (the shared cache locks around it; the per-thread one needs no lock).
template <typename V>
class Lru {
 public:
  explicit Lru(size_t capacity) : capacity_(capacity) {}
  V* find(const Key& k) {
    auto it = index_.find(k);
    if (it == index_.end()) return nullptr;
    lru_.splice(lru_.begin(), lru_, it->second);
    return &it->second->second;
  }
  V& insert(const Key& k, V v) {
    lru_.emplace_front(k, std::move(v));
    index_.emplace(k, lru_.begin());
    if (lru_.size() > capacity_) {
      index_.erase(lru_.back().first);
      lru_.pop_back();
    }
    return lru_.front().second;
  }
  size_t size() const { return lru_.size(); }

 private:
  size_t capacity_;
  std::list<std::pair<Key, V>> lru_;
  std::unordered_map<Key, typename decltype(lru_)::iterator, KeyHash> index_;
};

// The primitives of the process, shared by its threads; least recently used go first once it holds
// kCapacity (oneDNN's own default).
class Cache {
 public:
  static constexpr size_t kCapacity = 1024;
  std::shared_ptr<Entry> get(const Key& k, const Gemm& g) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (auto* e = lru_.find(k)) return *e;
    }
    std::shared_ptr<Entry> e = make_entry_or_refusal(g);  // outside the lock: other shapes go on meanwhile
    std::lock_guard<std::mutex> lock(mu_);
    if (auto* made = lru_.find(k)) return *made;  // another thread made it first
    ++created_;
    return lru_.insert(k, std::move(e));
  }
  detail::DnnlCacheStats stats() {
    std::lock_guard<std::mutex> lock(mu_);
    return {lru_.size(), created_};
  }

 private:
  std::mutex mu_;
  Lru<std::shared_ptr<Entry>> lru_{kCapacity};
  size_t created_ = 0;
};

Cache& cache() {
  static Cache* c = new Cache;  // never destroyed: products may run while the process exits
  return *c;
}

std::string pair_str(Dtype in, Dtype out) { return kmsg(in, in == out ? "" : " -> ", in == out ? "" : kmsg(out)); }

Gemm probe(Dtype in, Dtype out, int64_t n) {
  Gemm g;
  g.in = in, g.out = out, g.M = g.N = g.K = n, g.lda = g.ldb = g.ldc = n;
  return g;
}

}  // namespace

namespace {

// A primitive bound to memory objects on one thread: a call only points them at its operands.
// Making four oneDNN memory objects and an argument map per call cost about 1 us, as much as
// oneDNN's own execution of attention's 128 x 32 x 32 products (benchmarks/README.md).
struct Bound {
  std::shared_ptr<Entry> entry;  // held, so that the primitive outlives the shared cache's eviction
  memory a, b, c, scratch;
  dnnl_exec_arg_t args[4];
  int nargs = 0;
};

Bound bind(std::shared_ptr<Entry> e) {
  Bound b;
  b.entry = std::move(e);
  if (b.entry->refused) return b;
  b.a = memory(b.entry->a, engine(), DNNL_MEMORY_NONE);
  b.b = memory(b.entry->b, engine(), DNNL_MEMORY_NONE);
  b.c = memory(b.entry->c, engine(), DNNL_MEMORY_NONE);
  b.args[0] = {DNNL_ARG_SRC, b.a.get()}, b.args[1] = {DNNL_ARG_WEIGHTS, b.b.get()}, b.args[2] = {DNNL_ARG_DST, b.c.get()};
  b.nargs = 3;
  if (b.entry->scratch.get_size() > 0) {
    b.scratch = memory(b.entry->scratch, engine(), DNNL_MEMORY_NONE);
    b.args[b.nargs++] = {DNNL_ARG_SCRATCHPAD, b.scratch.get()};
  }
  return b;
}

// The calling thread's bound primitives, the most recently used first: a hit takes no lock.
Bound& bound(const Gemm& g) {
  constexpr size_t kPerThread = 128;
  thread_local Lru<Bound> mine(kPerThread);
  const Key k = key_of(g);
  if (Bound* b = mine.find(k)) return *b;
  return mine.insert(k, bind(cache().get(k, g)));
}

void check(dnnl_status_t st, const char* what) {
  if (st != dnnl_success) throw dnnl::error(st, what);
}

}  // namespace

bool dnnl_gemm(const Gemm& g) {
  OneOmpThread one;
  try {
    Bound& b = bound(g);
    if (b.entry->refused) return false;
    // The C API: the C++ one builds a vector of the arguments from a map on every call.
    check(dnnl_memory_set_data_handle_v2(b.a.get(), const_cast<void*>(g.A), nullptr), "set A");
    check(dnnl_memory_set_data_handle_v2(b.b.get(), const_cast<void*>(g.B), nullptr), "set B");
    check(dnnl_memory_set_data_handle_v2(b.c.get(), g.C, nullptr), "set C");
    if (b.nargs == 4) {
      check(dnnl_memory_set_data_handle_v2(b.scratch.get(), thread_scratch(b.entry->scratch.get_size()), nullptr),
            "set the scratchpad");
    }
    check(dnnl_primitive_execute(b.entry->prim.get(), stream().get(), b.nargs, b.args), "execute");
    check(dnnl_stream_wait(stream().get()), "wait");
    return true;
  } catch (const dnnl::error& err) {
    throw std::runtime_error(kmsg("[gemm] oneDNN failed on a ", pair_str(g.in, g.out), " product of (", g.M, ", ", g.K,
                                  ") by (", g.K, ", ", g.N, "): ", err.what()));
  }
}

bool dnnl_supports(Dtype in, Dtype out) {
  // Asked on every product (the seam's route): one relaxed load once known, the probe (a primitive
  // made, about 1 ms) once per pair under the lock. 0 unknown, 1 no, 2 yes.
  constexpr int kDtypes = int(Dtype::Val::complex64) + 1;
  static std::atomic<uint8_t> known[kDtypes][kDtypes];
  std::atomic<uint8_t>& k = known[int(in.val)][int(out.val)];
  if (const uint8_t v = k.load(std::memory_order_acquire)) return v == 2;
  static std::mutex mu;
  std::lock_guard<std::mutex> lock(mu);
  if (const uint8_t v = k.load(std::memory_order_acquire)) return v == 2;
  bool ok = false;
  const bool pair = (in == float32 && out == float32) ||
                    ((in == bfloat16 || in == float16) && (out == in || out == float32));
  if (pair) {
    OneOmpThread one;
    try {
      make_entry(probe(in, out, 64));
      ok = true;
    } catch (const dnnl::error&) {
      ok = false;  // no kernel for this pair on this CPU ("could not create a primitive descriptor")
    }
  }
  k.store(ok ? 2 : 1, std::memory_order_release);
  return ok;
}

// The widest instruction set oneDNN uses on this CPU (ONEDNN_MAX_CPU_ISA may lower it).
const char* isa_name() {
  switch (dnnl::get_effective_cpu_isa()) {
    case dnnl::cpu_isa::avx512_core_amx: return "AMX";
    case dnnl::cpu_isa::avx512_core_bf16: return "AVX512-BF16";
    case dnnl::cpu_isa::avx512_core_vnni: return "AVX-512 VNNI";
    case dnnl::cpu_isa::avx512_core: return "AVX-512";
    case dnnl::cpu_isa::avx2_vnni: return "AVX2 VNNI";
    case dnnl::cpu_isa::avx2: return "AVX2";
    case dnnl::cpu_isa::avx: return "AVX";
    default: return "SSE4.1";
  }
}

std::string dnnl_impl(Dtype in, Dtype out) {
  OneOmpThread one;
  try {
    const Gemm g = probe(in, out, 256);
    memory::desc a({g.M, g.K}, dnnl_type(in), memory::dims{g.K, 1}), b({g.K, g.N}, dnnl_type(in), memory::dims{g.N, 1}),
        c({g.M, g.N}, dnnl_type(out), memory::dims{g.N, 1});
    dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(a, b, c), engine());
    return std::string(pd.impl_info_str()) + ", oneDNN's ISA " + isa_name();
  } catch (const dnnl::error&) {
    return std::string("none, oneDNN's ISA ") + isa_name();
  }
}

detail::DnnlCacheStats dnnl_stats() { return cache().stats(); }

}  // namespace loom::kernels::backends

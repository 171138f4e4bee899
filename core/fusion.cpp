#include "loom/core/fusion.h"


#include <algorithm>
#include <cstring>
#include <memory>
#include <unordered_map>

#include "loom/core/allocator.h"
#include "loom/core/eval.h"
#include "loom/core/loops.h"
#include "loom/core/primitive.h"
#include "loom/core/threads.h"

namespace loom::detail {

namespace {

bool fusion_on = true;

constexpr size_t kBlock = 2048;           // elements per block: a few blocks stay in L1/L2
constexpr size_t kSlotBytes = kBlock * 8;  // one block of the widest dtype
constexpr size_t kParallelFrom = 1 << 15;  // as the elementwise kernels

// Asks for the cache lines of [p, p + bytes), to read or to write.
void prefetch(const char* p, size_t bytes, bool write) {
  for (size_t off = 0; off < bytes; off += 64) {
    if (write) {
      __builtin_prefetch(p + off, 1, 3);
    } else {
      __builtin_prefetch(p + off, 0, 3);
    }
  }
}

// Copies elements [lo, lo + len) in row-major order of `a` (any strides) to `dst`.
void gather_block(const array& a, size_t lo, size_t len, char* dst) {
  const size_t isz = a.itemsize();
  const char* base = static_cast<const char*>(a.raw_data());
  const int nd = static_cast<int>(a.ndim());
  if (nd == 0 || a.data_size() == 1) {
    for (size_t i = 0; i < len; ++i) std::memcpy(dst + i * isz, base, isz);
    return;
  }
  // One run per stretch of the last axis, found by the shared strided walker.
  const int last = nd - 1;
  const int64_t s = a.strides()[last], n_last = a.shape()[last];
  kernels::Walker<1> w(a.shape(), a.strides(), static_cast<int64_t>(lo));
  size_t done = 0;
  while (done < len) {
    const size_t run = std::min(len - done, static_cast<size_t>(n_last - w.index(last)));
    const char* src = base + w.off[0] * static_cast<int64_t>(isz);
    char* out = dst + done * isz;
    if (s == 1) {
      std::memcpy(out, src, run * isz);
    } else {
      // (Signed: a negative stride times the unsigned item size would wrap.)
      const int64_t step = s * static_cast<int64_t>(isz);
      for (size_t i = 0; i < run; ++i) std::memcpy(out + i * isz, src + static_cast<int64_t>(i) * step, isz);
    }
    done += run;
    w.advance(static_cast<int64_t>(run));
  }
}

}  // namespace

void set_fusion(bool on) { fusion_on = on; }

FusionPlan plan_fusion(const std::vector<array>& tape, const std::unordered_map<const Node*, int>& index,
                       const std::vector<char>& excluded, size_t min_size) {
  const int n = static_cast<int>(tape.size());
  FusionPlan plan;
  plan.internal.assign(n, 0);
  plan.member.assign(n, -1);
  plan.groups.resize(n);
  if (!fusion_on) return plan;
  auto fusable = [&](int i) {
    return !(i < static_cast<int>(excluded.size()) && excluded[i]) && tape[i].primitive().is_elementwise() &&
           tape[i].size() >= std::max<size_t>(min_size, 1) && !tape[i].is_tracer();
  };
  // Who reads each node, and how often.
  std::vector<int> consumer(n, -1), uses(n, 0);
  std::vector<char> many(n, 0);
  for (int i = 0; i < n; ++i) {
    for (const auto& in : tape[i].inputs()) {
      if (in.is_evaluated()) continue;
      auto it = index.find(in.node_id());
      if (it == index.end()) continue;
      int j = it->second;
      if (consumer[j] >= 0 && consumer[j] != i) many[j] = 1;
      consumer[j] = i;
      ++uses[j];
    }
  }
  bool any = false;
  for (int j = 0; j < n; ++j) {
    const int c = consumer[j];
    // The tape and the consumer's input list are the only holders: no user handle, no eval output.
    if (c >= 0 && !many[j] && fusable(j) && fusable(c) && tape[j].shape() == tape[c].shape() &&
        tape[j].held_only_by(1 + uses[j])) {
      plan.internal[j] = 1;
      any = true;
    }
  }
  if (!any) return plan;
  for (int r = 0; r < n; ++r) {
    if (plan.internal[r] || !fusable(r)) continue;
    std::vector<int> members, stack = {r};
    while (!stack.empty()) {
      int k = stack.back();
      stack.pop_back();
      members.push_back(k);
      for (const auto& in : tape[k].inputs()) {
        if (in.is_evaluated()) continue;
        auto it = index.find(in.node_id());
        const int j = it == index.end() ? -1 : it->second;
        // x * x lists x twice: push it once (a shared chain would otherwise be walked 2^depth times).
        if (j >= 0 && plan.internal[j] && consumer[j] == k && plan.member[j] == -1) {
          plan.member[j] = 0;
          stack.push_back(j);
        }
      }
    }
    if (members.size() < 2) continue;
    std::sort(members.begin(), members.end());
    for (size_t k = 0; k + 1 < members.size(); ++k) plan.member[members[k]] = static_cast<int>(k);
    plan.groups[r] = std::move(members);
  }
  return plan;
}

// How a group runs: where each member's inputs come from (another member's block, a leaf read in
// place, a scalar leaf spread over a block once, or a leaf gathered block by block) and the slots of
// scratch the blocks live in, reused once their reader has run. It depends on the graph and on the
// layout of the group's leaves only, so a program (whose graph stays) makes it once per group and
// remakes it only when a leaf's layout changes. Flat arrays: a group may hold a million members.
struct FusedGroup {
  struct Input {
    const array* leaf = nullptr;  // held by the member's input list (null for another member's block)
    int slot = -1;                // the block it is read from (-1: the leaf in place)
    bool gather = false;          // the leaf is gathered into the slot for every block
  };
  size_t n = 0;                                        // elements computed: the root's, or its data's
  // The root takes the layout of `like` (a leaf), computed over its data_size elements, when every
  // leaf that is not a scalar shares that layout and it is not row-major (a transposed or broadcast
  // layout): as the unfused kernels give their output their input's layout (kernels::alloc_like).
  // Else the root is row-major. Either way the root's layout is the one unfused kernels give it, so
  // what reads it (a reduction, whose order follows the layout) computes the same bits fused or not.
  const array* like = nullptr;
  // The group's distinct leaves, first read first: the graph's, so a program finds them once.
  std::vector<const array*> distinct;
  std::vector<const Primitive*> prims;                 // by member
  std::vector<Input> srcs;                             // the members' inputs, member after member
  std::vector<Dtype> dtypes;                           // by input
  std::vector<size_t> first;                           // by member (and one past): its first input
  std::vector<int> out_slot;                           // by member but the root: its block's slot
  std::vector<std::pair<const array*, int>> constants;  // scalar leaves and their slots
  std::vector<const array*> direct_leaves;             // leaves read in place, once each
  int slots = 0;
  std::vector<uint8_t> kinds;  // by distinct leaf: how it is read (the plan holds while these do)
};

namespace {

enum LeafKind : uint8_t { kDirect, kScalar, kGathered };
// How a leaf is read when n elements are computed: in place (row-major with n elements, or in the
// shared layout, whose data has n elements), as one value spread over a block, or gathered.
LeafKind leaf_kind(const array& in, size_t n, bool shared) {
  if ((in.flags().row_contiguous || (shared && in.flags().contiguous)) && in.data_size() == n) return kDirect;
  return in.data_size() == 1 ? kScalar : kGathered;
}

// The group's leaves (inputs that are not members), each once, in the order the members read them.
std::vector<const array*> distinct_leaves(const std::vector<array>& tape, const std::vector<int>& members,
                                          const FusionPlan& plan, const std::unordered_map<const Node*, int>& index) {
  std::vector<const array*> out;
  for (int k : members) {
    for (const auto& in : tape[k].inputs()) {
      auto it = in.is_evaluated() ? index.end() : index.find(in.node_id());
      if (it != index.end() && plan.member[it->second] >= 0) continue;  // another member
      bool seen = false;
      for (const array* l : out) seen = seen || l->id() == in.id();
      if (!seen) out.push_back(&in);
    }
  }
  return out;
}

// The leaf whose layout the root takes (FusedGroup::like), or null for row-major.
const array* shared_layout(const std::vector<const array*>& leaves, const array& root) {
  if (root.is_placed() || root.size() <= 1 || leaves.empty()) return nullptr;
  const array* like = nullptr;
  for (const array* in : leaves) {
    if (in->data_size() == 1) continue;
    if (!in->flags().contiguous) return nullptr;
    if (!like) {
      like = in;
    } else if (in->strides() != like->strides() || in->data_size() != like->data_size()) {
      return nullptr;
    }
  }
  if (!like) like = leaves.front();  // scalars only: the first one's (broadcast) layout
  return like->flags().contiguous && !like->flags().row_contiguous ? like : nullptr;
}

// Whether a kept plan still serves this run: the same mode (shared layout or row-major), the same
// count, each leaf read the same way. (Which shared layout does not matter: leaves in it are read
// in place, and the root takes it when the run allocates.)
bool still_fits(const FusedGroup& g, const array* like, size_t n) {
  if ((g.like == nullptr) != (like == nullptr) || g.n != n) return false;
  for (size_t i = 0; i < g.distinct.size(); ++i) {
    if (leaf_kind(*g.distinct[i], n, like != nullptr) != g.kinds[i]) return false;
  }
  return true;
}

void make_group(FusedGroup& g, const std::vector<array>& tape, const std::vector<int>& members,
                const FusionPlan& plan, const std::unordered_map<const Node*, int>& index, const array* like,
                size_t n) {
  const int m = static_cast<int>(members.size());
  std::vector<const array*> distinct = std::move(g.distinct);
  g = FusedGroup{};
  g.distinct = std::move(distinct);
  g.n = n;
  g.like = like;
  g.first.assign(m + 1, 0);
  g.out_slot.assign(m, -1);
  for (const array* leaf : g.distinct) {
    g.kinds.push_back(leaf_kind(*leaf, n, like != nullptr));
    if (g.kinds.back() == kDirect) g.direct_leaves.push_back(leaf);
  }
  std::vector<int> free_slots, release;
  auto take = [&] {
    if (free_slots.empty()) return g.slots++;
    int s = free_slots.back();
    free_slots.pop_back();
    return s;
  };
  for (int k = 0; k < m; ++k) {
    release.clear();
    g.first[k] = g.srcs.size();
    g.prims.push_back(&tape[members[k]].primitive());
    for (const auto& in : tape[members[k]].inputs()) {
      FusedGroup::Input src;
      auto it = in.is_evaluated() ? index.end() : index.find(in.node_id());
      const int producer = it == index.end() ? -1 : plan.member[it->second];
      if (producer >= 0) {
        src.slot = g.out_slot[producer];
        release.push_back(src.slot);
      } else {
        src.leaf = &in;
        const LeafKind kind = leaf_kind(in, n, like != nullptr);
        if (kind == kScalar) {
          // A slot of its own for the whole run, filled once per thread; one per leaf however many
          // members read it (a scalar added at every step of a chain).
          size_t c = 0;
          while (c < g.constants.size() && g.constants[c].first->id() != in.id()) ++c;
          if (c == g.constants.size()) g.constants.push_back({&in, -1});
          src.slot = -2 - static_cast<int>(c);
        } else if (kind == kGathered) {  // (kDirect: read in place, slot -1)
          src.slot = take();
          src.gather = true;
          release.push_back(src.slot);
        }
      }
      g.srcs.push_back(src);
      g.dtypes.push_back(in.dtype());
    }
    if (k < m - 1) g.out_slot[k] = take();
    for (int s : release) {
      if (std::find(free_slots.begin(), free_slots.end(), s) == free_slots.end()) free_slots.push_back(s);
    }
  }
  g.first[m] = g.srcs.size();
  for (auto& c : g.constants) c.second = g.slots++;
  for (auto& src : g.srcs) {
    if (src.slot <= -2) src.slot = g.constants[-2 - src.slot].second;
  }
}

}  // namespace

void run_fused(std::vector<array>& tape, const FusionPlan& plan, int root_pos,
               const std::unordered_map<const Node*, int>& index,
               KeptRefs kept_refs) {
  const std::vector<int>& members = plan.groups[root_pos];
  const int m = static_cast<int>(members.size());
  array& root = tape[members.back()];

  // A program's run keeps its groups' plans (the graph stays); eval's plans its groups afresh.
  FusedGroup local;
  FusedGroup* gp = &local;
  if (kept_refs) {
    if (plan.runs.size() != plan.groups.size()) plan.runs.resize(plan.groups.size());
    auto& kept = plan.runs[root_pos];
    if (!kept) {
      kept = std::make_shared<FusedGroup>();
      kept->distinct = distinct_leaves(tape, members, plan, index);
    }
    gp = kept.get();
  } else {
    local.distinct = distinct_leaves(tape, members, plan, index);
  }
  const array* like = shared_layout(gp->distinct, root);
  const size_t n = like ? like->data_size() : root.size();
  if (!kept_refs || !still_fits(*gp, like, n)) make_group(*gp, tape, members, plan, index, like, n);
  const FusedGroup& g = *gp;

  // The root's buffer: its placement, else a leaf read in place by nothing but this group (every
  // handle to it is one of the members' input slots), else a new one (in the shared layout, if any).
  if (!root.is_placed() && !g.direct_leaves.empty()) {
    std::unordered_map<std::uintptr_t, long> refs;  // leaves' slots in the group, counted when needed
    auto group_slots = [&](const array* leaf) -> long {
      const long kept = kept_refs ? kept_refs(*leaf) : 0;
      if (leaf->held_only_by(1 + kept)) return 1 + kept;
      if (refs.empty()) {
        for (int k = 0; k < m; ++k) {
          for (const auto& in : tape[members[k]].inputs()) refs[in.id()] += in.is_evaluated();
        }
      }
      return refs[leaf->id()] + kept;
    };
    for (const array* leaf : g.direct_leaves) {
      // (A buffer a view or another array shares is never given: skip counting the group's slots.)
      if (leaf->data_shared_ptr().use_count() != 1) continue;
      if (root.take_buffer(*leaf, group_slots(leaf))) break;
    }
  }
  if (like && !root.is_placed()) {
    root.set_data(allocator::malloc(n * root.itemsize()), n, like->strides(), like->flags());
  }
  root.alloc();  // keeps a placed or donated buffer

  const size_t blocks = (n + kBlock - 1) / kBlock;
  const int nt = kernels::threads_for(n, kParallelFrom);
  char* out = static_cast<char*>(root.raw_data());
  // Each part of the blocks has scratch of its own, with the constants gathered once.
  run_parts(blocks, nt > 1 ? parts_for(static_cast<int64_t>(blocks), nt) : 1, nt, [&](size_t b0, size_t b1) {
    std::unique_ptr<char[]> scratch_buf(new char[static_cast<size_t>(std::max(g.slots, 1)) * kSlotBytes]);
    char* scratch = scratch_buf.get();
    for (const auto& [leaf, slot] : g.constants) gather_block(*leaf, 0, std::min(kBlock, n), scratch + slot * kSlotBytes);
    std::vector<const void*> ptrs;
    for (size_t b = b0; b < b1; ++b) {
      const size_t lo = b * kBlock, len = std::min(kBlock, n - lo);
      // The next block's leaves and output lines are fetched while this block computes: otherwise
      // the reads come in a burst at the start of each block and the writes' line fills at its end,
      // and the math in between leaves memory idle (eltwise_chain_4m, 1 thread: see benchmarks/).
      if (lo + len < n) {
        const size_t next = std::min(kBlock, n - lo - len);
        for (const array* leaf : g.direct_leaves) {
          prefetch(static_cast<const char*>(leaf->raw_data()) + (lo + len) * leaf->itemsize(), next * leaf->itemsize(), false);
        }
        prefetch(out + (lo + len) * root.itemsize(), next * root.itemsize(), true);
      }
      for (int k = 0; k < m; ++k) {
        ptrs.clear();
        for (size_t i = g.first[k]; i < g.first[k + 1]; ++i) {
          const FusedGroup::Input& src = g.srcs[i];
          if (src.slot < 0) {
            ptrs.push_back(static_cast<const char*>(src.leaf->raw_data()) + lo * src.leaf->itemsize());
            continue;
          }
          char* block = scratch + src.slot * kSlotBytes;
          if (src.gather) gather_block(*src.leaf, lo, len, block);
          ptrs.push_back(block);
        }
        void* y = k == m - 1 ? out + lo * root.itemsize() : scratch + g.out_slot[k] * kSlotBytes;
        g.prims[k]->eval_block(g.dtypes.data() + g.first[k], ptrs.data(), y, len);
      }
    }
  });

  root.set_evaluated();
  if (kept_refs) return;
  if (!root.is_tracer()) root.detach();
  for (int k = 0; k < m; ++k) array done = std::move(tape[members[k]]);
}

}  // namespace loom::detail

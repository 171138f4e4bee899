#include "loom/distributed/detail/signature.h"

#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <vector>

#include "loom/distributed/detail/group_impl.h"
#include "loom/ops/utils.h"

namespace loom::distributed::detail {

using loom::detail::msg;
using loom::detail::shape_str;

namespace {

const char* const kKindNames[] = {"all_sum",     "all_max",    "all_min",   "all_gather", "send/recv",
                                  "all_mean",    "sum_scatter", "all_to_all", "broadcast", "barrier", "agree"};

// 64-bit FNV-1a: signatures are compared by this hash, so a difference anywhere in them shows.
uint64_t fnv(const void* data, size_t n, uint64_t h = 1469598103934665603ull) {
  const auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

// What a rank is about to do. Plain bytes: ranks exchange it as such.
struct Signature {
  int32_t kind = 0;
  int32_t dtype = 0;
  int32_t ndim = 0;
  int32_t root = -1;  // a broadcast's
  int64_t bytes = 0;  // what a send carries: a receiver that expected otherwise still drains it
  uint64_t sequence = 0;
  uint64_t layout = 0;
  int64_t dims[8] = {};  // the first 8 axes, for messages; `layout` covers every axis

  static Signature of(int kind, const array& x, uint64_t sequence, uint64_t layout, int root = -1) {
    Signature sig;
    sig.kind = kind;
    sig.root = root;
    sig.dtype = static_cast<int32_t>(x.dtype().val);
    sig.ndim = static_cast<int32_t>(x.ndim());
    sig.sequence = sequence;
    sig.layout = layout;
    sig.bytes = static_cast<int64_t>(x.nbytes());
    for (int i = 0; i < std::min(sig.ndim, 8); ++i) sig.dims[i] = x.shape(i);
    return sig;
  }
  uint64_t hash() const { return fnv(this, sizeof(*this)); }
  bool operator==(const Signature& o) const { return std::memcmp(this, &o, sizeof(*this)) == 0; }
  Dtype dt() const {
    for (Dtype d : all_dtypes) {
      if (static_cast<int32_t>(d.val) == dtype) return d;
    }
    return uint8;  // a peer's bytes are not to be trusted; the hash still tells them apart
  }
  Shape shape() const { return Shape(dims, dims + std::min(ndim, 8)); }
  std::string str() const {
    const bool known = kind >= 0 && kind < static_cast<int>(std::size(kKindNames));
    if (known && kind == kBarrierKind) return "barrier";
    return msg(known ? kKindNames[kind] : "an unknown collective", " ", typed_shape(dt(), shape()),
               root >= 0 ? msg(" from root ", root) : std::string());
  }
};

}  // namespace

std::string typed_shape(Dtype d, const Shape& s) { return msg(to_string(d), " ", shape_str(s)); }

uint64_t layout_hash(const std::vector<Shape>& parts) {
  uint64_t h = fnv(nullptr, 0);
  for (const Shape& s : parts) {
    const int64_t n = static_cast<int64_t>(s.size());
    h = fnv(&n, sizeof(n), h);
    for (int d : s) h = fnv(&d, sizeof(d), h);
  }
  return h;
}

void check_agreement(GroupImpl& group, const char* name, int kind, const array& x, uint64_t layout, int root) {
  const Signature mine = Signature::of(kind, x, group.next_sequence(), layout, root);
  if (group.agree(mine.hash())) return;
  // Every member saw the disagreement (agree's result is the same everywhere), so every member takes
  // this path and the gather below matches on all of them.
  const int n = group.size();
  std::vector<Signature> all(n);
  group.all_gather(&mine, all.data(), sizeof(Signature), uint8);
  bool same_shape = true, same_layout = true, same_sequence = true;
  for (const Signature& s : all) {
    same_shape = same_shape && s.str() == all[0].str();
    same_layout = same_layout && s.layout == all[0].layout;
    same_sequence = same_sequence && s.sequence == all[0].sequence;
  }
  std::string list;
  for (int r = 0; r < n; ++r) {
    list += msg(r ? "; " : "", "rank ", r, ": ", all[r].str());
    // Only what tells the ranks apart: a bucket of the same size laid out differently (different
    // models or gradient trees), or collectives numbered differently.
    if (same_shape && !same_layout) list += msg(" in parts laid out as ", std::hex, all[r].layout, std::dec);
    if (!same_sequence) list += msg(" (collective #", all[r].sequence, " of its group)");
  }
  const std::string which = same_sequence ? msg("collective #", mine.sequence, " of their group") : "a collective";
  const char* why = same_shape && !same_layout
                        ? " (the same number of elements, split into parts of different shapes: different models?)"
                        : " (did they take different paths, run different numbers of steps (uneven data: nn::Join), or build different models?)";
  throw std::runtime_error(msg("[", name, "] the ranks disagree on ", which, why, ": ", list));
}

void send_signature(GroupImpl& group, int dst, int kind, const array& x) {
  const Signature mine = Signature::of(kind, x, 0, layout_hash({x.shape()}));
  group.send(&mine, sizeof(Signature), uint8, dst);
}

void check_signature_from(GroupImpl& group, int src, int kind, const array& expected) {
  Signature theirs;
  group.recv(&theirs, sizeof(Signature), uint8, src);
  const Signature want = Signature::of(kind, expected, 0, layout_hash({expected.shape()}));
  if (theirs == want) return;
  // Take the data anyway, so that the sender is not left blocked; its size is the sender's.
  if (theirs.kind != kind || theirs.bytes < 0) {
    throw std::runtime_error(msg("[recv] rank ", group.rank(), " expects ", want.str(), " from rank ", src,
                                 ", which sends ", theirs.str()));
  }
  std::vector<char> scratch(static_cast<size_t>(theirs.bytes));
  group.recv(scratch.data(), scratch.size(), uint8, src);
  throw std::runtime_error(msg("[recv] rank ", group.rank(), " expects ",
                               typed_shape(expected.dtype(), expected.shape()), " from rank ", src, ", which sends ",
                               typed_shape(theirs.dt(), theirs.shape()), theirs.ndim > 8 ? " (its first 8 axes)" : ""));
}

void exchange_checked(GroupImpl& group, int dst, int kind, const array& sent, int src, const array& out) {
  const Signature mine = Signature::of(kind, sent, 0, layout_hash({sent.shape()}));
  const Signature want = Signature::of(kind, out, 0, layout_hash({out.shape()}));
  Signature theirs;
  std::vector<char> scratch;  // what a peer sends that this rank did not expect, taken all the same
  group.send_recv(&mine, &theirs, sizeof(Signature), sent.raw_data(), sent.nbytes(), dst, [&]() -> std::pair<void*, size_t> {
    if (theirs == want) return {out.raw_data(), out.nbytes()};
    scratch.resize(theirs.kind == kind && theirs.bytes >= 0 ? static_cast<size_t>(theirs.bytes) : 0);
    return {scratch.data(), scratch.size()};
  }, src);
  if (theirs == want) return;
  throw std::runtime_error(msg("[send_recv] rank ", group.rank(), " expects ", typed_shape(out.dtype(), out.shape()),
                               " from rank ", src, ", which sends ",
                               theirs.kind == kind ? typed_shape(theirs.dt(), theirs.shape()) : theirs.str(),
                               theirs.ndim > 8 ? " (its first 8 axes)" : ""));
}

}  // namespace loom::distributed::detail

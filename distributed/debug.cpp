#include "loom/distributed/detail/debug.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <vector>

#include "loom/distributed/detail/group_impl.h"
#include "loom/ops/utils.h"

namespace loom::distributed::detail {

using loom::detail::msg;
using loom::detail::shape_str;

namespace {

const char* const kKindNames[] = {"all_sum", "all_max", "all_min", "all_gather", "send/recv", "all_mean"};

// What a rank is about to do.
struct Signature {
  int kind = 0;
  Dtype dt = float32;
  int ndim = 0;
  int64_t dims[8] = {};
  static Signature of(int kind, const array& x) {
    Signature sig;
    sig.kind = kind;
    sig.dt = x.dtype();
    sig.ndim = static_cast<int>(x.ndim());
    for (int i = 0; i < std::min(sig.ndim, 8); ++i) sig.dims[i] = x.shape(i);
    return sig;
  }
  bool operator==(const Signature& o) const {
    return kind == o.kind && dt == o.dt && ndim == o.ndim && std::equal(dims, dims + 8, o.dims);
  }
  Shape shape() const { return Shape(dims, dims + std::min(ndim, 8)); }
};

}  // namespace

bool debug_checks() {
  static const bool on = [] {
    const char* v = std::getenv("LOOM_DISTRIBUTED_DEBUG");
    return v && *v && std::strcmp(v, "0") != 0;
  }();
  return on;
}

std::string typed_shape(Dtype d, const Shape& s) { return msg(to_string(d), " ", shape_str(s)); }

void check_agreement(GroupImpl& group, const char* name, int kind, const array& x) {
  const int n = group.size();
  std::vector<Signature> all(n);
  Signature mine = Signature::of(kind, x);
  group.all_gather(&mine, all.data(), sizeof(Signature), uint8);
  bool same = true;
  for (const auto& s : all) same = same && s == all[0];
  if (same) return;
  std::string list;
  for (int r = 0; r < n; ++r) {
    list += msg(r ? "; " : "", "rank ", r, ": ", kKindNames[all[r].kind], " ", typed_shape(all[r].dt, all[r].shape()));
  }
  throw std::runtime_error(msg("[", name, "] LOOM_DISTRIBUTED_DEBUG: the ranks disagree on this collective: ", list));
}

void send_signature(GroupImpl& group, int dst, int kind, const array& x) {
  Signature mine = Signature::of(kind, x);
  group.send(&mine, sizeof(Signature), uint8, dst);
}

void check_signature_from(GroupImpl& group, int src, int kind, const array& expected) {
  Signature theirs;
  group.recv(&theirs, sizeof(Signature), uint8, src);
  if (theirs == Signature::of(kind, expected)) return;
  size_t bytes = size_of(theirs.dt);
  for (int64_t d : theirs.shape()) bytes *= static_cast<size_t>(d);
  std::vector<char> scratch(bytes);
  group.recv(scratch.data(), bytes, uint8, src);
  throw std::runtime_error(msg("[recv] LOOM_DISTRIBUTED_DEBUG: rank ", group.rank(), " expects ",
                               typed_shape(expected.dtype(), expected.shape()), " from rank ", src, ", which sends ",
                               typed_shape(theirs.dt, theirs.shape())));
}

}  // namespace loom::distributed::detail

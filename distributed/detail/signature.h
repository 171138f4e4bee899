// Internal to distributed/: collective signatures. Before any data moves, every collective checks
// that all members of its group are about to run the same one: the same kind, dtype, shape, layout
// (a flat reduction's parts) and sequence number on the group. Always on: a disagreement (ranks that
// took different paths, ran different numbers of steps, or hold different models) would otherwise
// pass garbage between ranks or overrun a buffer inside the backend. Ranks that disagree all throw
// an error naming each rank's collective.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "loom/core/array.h"

namespace loom::distributed::detail {

class GroupImpl;

/// Collective kinds, as signatures carry them.
enum Kind { kSumKind = 0, kMaxKind = 1, kMinKind = 2, kGatherKind = 3, kPointToPointKind = 4, kMeanKind = 5,
           kScatterKind = 6, kAllToAllKind = 7, kBroadcastKind = 8, kBarrierKind = 9,
           kAgreeKind = 10 };

/// "float32 (2,3)": how collectives are named in errors.
std::string typed_shape(Dtype d, const Shape& s);

/// A hash of the shapes of a flat reduction's parts (or of the one array's shape): ranks whose
/// buckets hold the same number of elements in a different layout disagree on it.
uint64_t layout_hash(const std::vector<Shape>& parts);

/// Collectives: compares this rank's signature (`kind` of `x`, with `layout`, and `root` for a
/// broadcast) with every other member's, numbering it with the group's sequence; throws naming each
/// rank's collective when any differs. Costs one small reduction on the group, in which a rank that
/// arrives early backs off instead of spinning (so it is also a barrier).
void check_agreement(GroupImpl& group, const char* name, int kind, const array& x, uint64_t layout, int root = -1);
/// send / recv: the sender sends its signature before the data; the receiver compares it with what it
/// expects and, when they differ, takes the data anyway (so the sender is not left blocked) and throws.
void send_signature(GroupImpl& group, int dst, int kind, const array& x);
void check_signature_from(GroupImpl& group, int src, int kind, const array& expected);
/// send_recv: sends the signature of `sent` to `dst` while receiving `src`'s, then the data the same
/// way, into `out` (of `expected`'s shape and dtype). When what `src` sends differs from `expected`,
/// its data is taken anyway (the sender is not left blocked) and this throws, naming both.
void exchange_checked(GroupImpl& group, int dst, int kind, const array& sent, int src, const array& out);

}  // namespace loom::distributed::detail

// Internal to distributed/: LOOM_DISTRIBUTED_DEBUG. Every collective first checks that all ranks
// agree on its kind, shape and dtype (its signature), and throws naming each rank's collective when
// they do not.
#pragma once

#include <string>

#include "loom/core/array.h"

namespace loom::distributed::detail {

class GroupImpl;

/// Collective kinds, as signatures carry them.
enum Kind { kSumKind = 0, kMaxKind = 1, kMinKind = 2, kGatherKind = 3, kPointToPointKind = 4, kMeanKind = 5 };

/// Whether LOOM_DISTRIBUTED_DEBUG is set (and not 0).
bool debug_checks();

/// "float32 (2,3)": how collectives are named in errors.
std::string typed_shape(Dtype d, const Shape& s);

/// Collectives: exchanges this rank's signature (`kind` of `x`) with the group's; throws when any differs.
void check_agreement(GroupImpl& group, const char* name, int kind, const array& x);
/// send / recv: the sender sends its signature before the data; the receiver compares it with what it
/// expects and, when they differ, takes the data anyway (so the sender is not left blocked) and throws.
void send_signature(GroupImpl& group, int dst, int kind, const array& x);
void check_signature_from(GroupImpl& group, int src, int kind, const array& expected);

}  // namespace loom::distributed::detail

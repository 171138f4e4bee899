// The MPI backend's entry points in a build without MPI (LOOM_WITH_MPI=OFF): every process is a
// world of its own.
#include "loom/distributed/detail/group_impl.h"

namespace loom::distributed::detail::mpi {

bool is_available() { return false; }
std::string library_version() { return ""; }
std::optional<World> init() { return std::nullopt; }

}  // namespace loom::distributed::detail::mpi

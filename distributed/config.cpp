#include "loom/distributed/config.h"


#include <iostream>

#include "loom/core/isa.h"
#include "loom/core/threads.h"
#include "loom/distributed/detail/comm_thread.h"
#include "loom/distributed/detail/group_impl.h"
#include "loom/distributed/distributed.h"
#include "loom/kernels/backend.h"
#include "loom/ops/utils.h"

#ifndef LOOM_VERSION_STRING
#define LOOM_VERSION_STRING "unknown"
#endif

namespace loom {

using detail::msg;

namespace {
const char* cpu_vector_unit() {
#if defined(__x86_64__)
  if (__builtin_cpu_supports("avx512f")) return "AVX-512";
  if (__builtin_cpu_supports("avx2")) return "AVX2";
  if (__builtin_cpu_supports("avx")) return "AVX";
  return "SSE2";
#else
  return "n/a";
#endif
}
}  // namespace

std::string config() {
  distributed::Group world = distributed::init();
  const int procs = detail::processes_on_this_machine();
  std::string mpi = distributed::is_available() ? distributed::detail::mpi::library_version() : "not built in";
  return msg("Loom ", LOOM_VERSION_STRING, "\n",                                            //
             "kernels: ", kernel_isa(), " (the CPU has ", cpu_vector_unit(), ")\n",           //
             "BLAS: ", detail::blas_description(), "\n",                                     //
             "GEMM: ", gemm_config(), "\n",                                                  //
             "threads: ", get_num_threads(), " per process, ", procs, " process", procs > 1 ? "es" : "",
             " on this machine, ", loom::detail::machine_cores(), " cores",
             loom::detail::cores_available() < loom::detail::machine_cores()
                 ? msg(" (this process may run on ", loom::detail::cores_available(), ")")
                 : std::string(),
             "\n",  //
             "MPI: ", mpi, "; rank ", world.rank(), " of ", world.size(),
             world.size() > 1 ? msg(", collectives ", distributed::detail::comm_thread_for_collectives()
                                                          ? "beside compute (communication thread)"
                                                          : "inline")
                              : std::string(),
             "\n");
}

void print_config(std::ostream& out) { out << config() << std::flush; }
void print_config() { print_config(std::cout); }

}  // namespace loom

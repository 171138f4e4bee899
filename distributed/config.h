// What this process runs on: for bug reports and for checking a job's setup.
#pragma once

#include <iosfwd>
#include <string>

namespace loom {

/// Loom's version and the copy of the library loaded (kernel_isa), the CPU's vector unit, the BLAS
/// and its kernels, threads per process against cores and processes on this machine, and MPI (its
/// library, this rank, the world's size, whether collectives overlap compute). One item per line.
/// Calls distributed::init() (which joins MPI only under a launcher).
std::string config();
/// Prints config() (to std::cout by default).
void print_config();
void print_config(std::ostream& out);

}  // namespace loom

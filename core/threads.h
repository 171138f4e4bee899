// One thread count for Loom's kernels and its matrix products, which run on Loom's own thread pool
// (core/parallel.h; OpenBLAS itself runs single-threaded).
// At start-up (and when set_num_threads changes the count), rank 0 prints a note on stderr about a
// configuration that makes Loom slow: more threads on the machine than cores, or OPENBLAS_CORETYPE
// forcing kernels for a narrower vector unit than the CPU has.
#pragma once

#include <string>

namespace loom {

/// Sets the threads used by kernels and GEMM. n >= 1. The default is OMP_NUM_THREADS when set,
/// else the cores divided by the processes an MPI launcher started on this machine (so
/// `mpirun -np 2` on 2 cores gives each process 1 thread).
void set_num_threads(int n);
int get_num_threads();

namespace detail {
/// The cores this process may run on (its CPU affinity mask).
int cores_available();
/// The machine's online cores, whatever this process's affinity (an MPI launcher that binds each
/// rank to one core leaves every rank one core of a machine that has more).
int machine_cores();
/// The processes an MPI launcher started on this machine (1 without one).
int processes_on_this_machine();
/// "OpenBLAS 0.3.21 ... (kernels: SkylakeX)": the BLAS Loom calls and the kernels it picked.
std::string blas_description();
}  // namespace detail

}  // namespace loom

// One thread count for Loom's OpenMP kernels and OpenBLAS (both run on the same OpenMP runtime).
#pragma once

namespace loom {

/// Sets the threads used by kernels and GEMM. n >= 1. The default is OMP_NUM_THREADS when set,
/// else the cores divided by the processes an MPI launcher started on this machine (so
/// `mpirun -np 2` on 2 cores gives each process 1 thread).
void set_num_threads(int n);
int get_num_threads();

}  // namespace loom

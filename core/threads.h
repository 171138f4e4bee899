// One thread count for Loom's OpenMP kernels and OpenBLAS (both run on the same OpenMP runtime).
#pragma once

namespace loom {

/// Sets the threads used by kernels and GEMM. n >= 1.
void set_num_threads(int n);
int get_num_threads();

}  // namespace loom

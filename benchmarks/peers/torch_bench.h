// What the libtorch peers share: Loom's own timing helpers (../bench.h: now_ms, median, --threads,
// QUICK), the thread setup and the process's peak RSS. Links libtorch only, never Loom.
#pragma once

#include <ATen/Parallel.h>
#include <dlfcn.h>
#include <sys/resource.h>
#include <torch/torch.h>
#include <torch/version.h>

#include <cstdio>

#include "../bench.h"

namespace peer {

/// Once per process, before any torch work: ATen's inter-op pool to one thread (every workload here
/// is one chain of ops; the pool only competes for the cores).
inline void init(const char* program) {
  at::set_num_interop_threads(1);
  std::fprintf(stderr, "%s: libtorch %s (its headers' TORCH_VERSION)\n", program, TORCH_VERSION);
}

/// `threads` intra-op threads: ATen's OpenMP pool (torch::set_num_threads) and, when the BLAS that
/// libtorch loaded is OpenBLAS (Debian's default), OpenBLAS's own pthreads, which ATen does not size:
/// one process runs every `--threads T` in turn, so the environment alone (OMP_NUM_THREADS,
/// OPENBLAS_NUM_THREADS, which the caller sets) cannot size both runs.
inline void set_threads(int threads) {
  torch::set_num_threads(threads);
  using SetThreads = void (*)(int);
  static auto openblas = reinterpret_cast<SetThreads>(dlsym(RTLD_DEFAULT, "openblas_set_num_threads"));
  if (openblas) openblas(threads);
}

/// The process's peak resident set so far, in MB (getrusage's ru_maxrss is in KiB on Linux).
inline double peak_mb() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return u.ru_maxrss / 1024.0;
}

}  // namespace peer

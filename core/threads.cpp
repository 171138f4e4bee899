#include "loom/core/threads.h"

#include <omp.h>

#include <algorithm>
#include <cstdlib>
#include <stdexcept>
#include <string>

extern "C" void openblas_set_num_threads(int);

namespace loom {

namespace {

// Processes sharing this machine, as the launcher says (OpenMPI, MPICH/Hydra); 1 otherwise.
int local_processes() {
  for (const char* var : {"OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS"}) {
    if (const char* v = std::getenv(var)) {
      int n = std::atoi(v);
      if (n > 1) return n;
    }
  }
  return 1;
}

int& thread_count() {
  static int n = [] {
    int t = omp_get_max_threads();
    // Without OMP_NUM_THREADS, processes launched together on one machine share its cores: more
    // threads than cores makes every OpenMP barrier wait on a descheduled thread.
    if (!std::getenv("OMP_NUM_THREADS")) t = std::max(1, t / local_processes());
    omp_set_num_threads(t);
    openblas_set_num_threads(t);
    return t;
  }();
  return n;
}

// OpenBLAS gets the same count from the start, before any kernel asks for it.
const int initial_threads = thread_count();

}  // namespace

void set_num_threads(int n) {
  if (n < 1) throw std::invalid_argument("[set_num_threads] needs n >= 1, got " + std::to_string(n));
  thread_count() = n;
  omp_set_num_threads(n);
  openblas_set_num_threads(n);
}

int get_num_threads() { return thread_count(); }

}  // namespace loom

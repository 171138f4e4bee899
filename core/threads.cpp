#include "loom/core/threads.h"

#include <omp.h>

#include <stdexcept>
#include <string>

extern "C" void openblas_set_num_threads(int);

namespace loom {

namespace {
int& thread_count() {
  static int n = [] {
    int t = omp_get_max_threads();
    openblas_set_num_threads(t);
    return t;
  }();
  return n;
}
}  // namespace

void set_num_threads(int n) {
  if (n < 1) throw std::invalid_argument("[set_num_threads] needs n >= 1, got " + std::to_string(n));
  thread_count() = n;
  omp_set_num_threads(n);
  openblas_set_num_threads(n);
}

int get_num_threads() { return thread_count(); }

}  // namespace loom

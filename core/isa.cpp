#include "loom/core/isa.h"

namespace loom {

const char* kernel_isa() {
#if defined(LOOM_NATIVE_BUILD)
  return "native";
#elif defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512CD__) && defined(__AVX512DQ__) && \
    defined(__AVX512VL__)
  return "x86-64-v4";
#elif defined(__AVX2__) && defined(__FMA__)
  return "x86-64-v3";
#elif defined(__x86_64__)
  return "x86-64";
#elif defined(__aarch64__)
  return "aarch64";
#else
  return "unknown";
#endif
}

}  // namespace loom

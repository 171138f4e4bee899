// The dynamic loader gives every program the best copy of the library the CPU runs.
#include <cstdlib>

#include "../test_utils.h"

using namespace loom;

TEST(KernelIsa, TheLoadedCopyIsTheBestTheCpuRuns) {
  const std::string got = kernel_isa();
  // CI reruns the suite with CPU features hidden from the loader (GLIBC_TUNABLES) and says which copy
  // it must then get.
  if (const char* want = std::getenv("LOOM_EXPECT_ISA")) {
    EXPECT_EQ(got, want);
    return;
  }
  const std::string build = LOOM_BUILD_ISA;
  if (build == "native") {
    EXPECT_EQ(got, "native");
    return;
  }
#if defined(__x86_64__)
  std::string want = "x86-64";
  if (build == "variants") {
    __builtin_cpu_init();
    // glibc's x86-64-v3 and -v4 (the psABI levels), on the features that tell them apart in practice.
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("bmi2")) {
      want = "x86-64-v3";
      if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
          __builtin_cpu_supports("avx512cd") && __builtin_cpu_supports("avx512dq") &&
          __builtin_cpu_supports("avx512vl")) {
        want = "x86-64-v4";
      }
    }
  }
  EXPECT_EQ(got, want);
#else
  EXPECT_NE(got, "unknown");
#endif
}

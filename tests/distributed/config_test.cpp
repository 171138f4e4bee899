// print_config, and the start-up notes about configurations that make Loom slow (run in a child
// process of this test binary, with the environment that triggers them).
#include <unistd.h>

#include <cstdio>
#include <sstream>

#include "../test_utils.h"
#include "loom/distributed/config.h"

using namespace loom;

namespace {
// The stderr and stdout of this binary running no test, under `env`.
std::string startup_output(const std::string& env) {
  char self[4096] = {};
  if (readlink("/proc/self/exe", self, sizeof self - 1) <= 0) return "readlink failed";
  const std::string cmd = "env " + env + " '" + self + "' --gtest_filter=NoSuchTest 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  std::string out;
  char buf[512];
  while (p && fgets(buf, sizeof buf, p)) out += buf;
  if (p) pclose(p);
  return out;
}
}  // namespace

TEST(Config, ListsWhatThisProcessRunsOn) {
  std::ostringstream s;
  print_config(s);
  const std::string c = s.str();
  EXPECT_NE(c.find("Loom 0."), std::string::npos) << c;
  EXPECT_NE(c.find(std::string("kernels: ") + kernel_isa() + " (the CPU has "), std::string::npos) << c;
  EXPECT_NE(c.find("BLAS: OpenBLAS "), std::string::npos) << c;
  EXPECT_NE(c.find("(kernels: "), std::string::npos) << c;
  EXPECT_NE(c.find("threads: " + std::to_string(get_num_threads()) + " per process"), std::string::npos) << c;
  auto world = distributed::init();
  EXPECT_NE(c.find("; rank " + std::to_string(world.rank()) + " of " + std::to_string(world.size())),
            std::string::npos)
      << c;
  if (distributed::is_available()) EXPECT_NE(c.find("MPI: Open MPI"), std::string::npos) << c;
}

TEST(Config, NotesAboutSlowSettingsComeFromRankZeroOnly) {
  if (std::getenv("OMPI_COMM_WORLD_SIZE")) GTEST_SKIP() << "runs child processes outside mpirun";
  const std::string quiet = "-u OPENBLAS_CORETYPE -u OMP_NUM_THREADS -u OMPI_COMM_WORLD_LOCAL_SIZE";
  EXPECT_EQ(startup_output(quiet).find("loom: note"), std::string::npos);
  // More threads on the machine than cores: 64 processes of 1 thread each.
  std::string out = startup_output(quiet + " OMP_NUM_THREADS=1 OMPI_COMM_WORLD_LOCAL_SIZE=64");
  EXPECT_NE(out.find("loom: note: 64 processes on this machine x 1 threads = 64 threads on "), std::string::npos)
      << out;
  EXPECT_NE(out.find("Use 1 (cores / processes)"), std::string::npos) << out;
  // The same on rank 1: silent.
  out = startup_output(quiet + " OMP_NUM_THREADS=1 OMPI_COMM_WORLD_LOCAL_SIZE=64 OMPI_COMM_WORLD_RANK=1");
  EXPECT_EQ(out.find("loom: note"), std::string::npos) << out;
#if defined(__x86_64__)
  // OpenBLAS forced to its SSE-era kernels on a CPU with AVX or wider.
  if (__builtin_cpu_supports("avx")) {
    out = startup_output("-u OMP_NUM_THREADS -u OMPI_COMM_WORLD_LOCAL_SIZE OPENBLAS_CORETYPE=Prescott");
    EXPECT_NE(out.find("loom: note: OPENBLAS_CORETYPE=Prescott makes OpenBLAS run its Prescott kernels (SSE)"),
              std::string::npos)
        << out;
  }
#endif
}

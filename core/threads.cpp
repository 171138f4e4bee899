#include "loom/core/threads.h"

#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <thread>

extern "C" void openblas_set_num_threads(int);
extern "C" char* openblas_get_corename(void);
extern "C" char* openblas_get_config(void);

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

// Rank 0 of a job, or a process on its own: who prints notes.
bool lead_process() {
  for (const char* var : {"OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK"}) {
    if (const char* v = std::getenv(var)) return std::atoi(v) == 0;
  }
  return true;
}

// How wide a vector unit OpenBLAS kernels for `core` use: 4 AVX-512, 3 AVX2, 2 AVX, 1 SSE; 0 unknown.
int blas_core_level(std::string core) {
  for (char& c : core) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  for (const char* c : {"skylakex", "cooperlake", "sapphirerapids"}) {
    if (core == c) return 4;
  }
  for (const char* c : {"haswell", "zen", "skylake"}) {
    if (core == c) return 3;
  }
  if (core == "sandybridge") return 2;
  for (const char* c : {"prescott", "core2", "penryn", "dunnington", "nehalem", "atom", "barcelona", "opteron",
                        "nano", "katmai", "coppermine", "northwood"}) {
    if (core == c) return 1;
  }
  return 0;
}

int cpu_level() {
#if defined(__x86_64__)
  if (__builtin_cpu_supports("avx512f")) return 4;
  if (__builtin_cpu_supports("avx2")) return 3;
  if (__builtin_cpu_supports("avx")) return 2;
  return 1;
#else
  return 0;
#endif
}

void note(const std::string& text) {
  if (lead_process()) std::fprintf(stderr, "loom: note: %s\n", text.c_str());
}

// OMP_NUM_THREADS as OpenMP programs read it (the first count of a list); 0 when unset or invalid.
int env_threads() {
  const char* v = std::getenv("OMP_NUM_THREADS");
  if (!v) return 0;
  const int n = std::atoi(v);
  return n > 0 ? n : 0;
}

// More threads on this machine than cores: once per process, where the count is set.
void check_oversubscription(int threads) {
  static bool said_machine = false, said_mask = false;
  const int procs = local_processes(), cores = detail::machine_cores(), mine = detail::cores_available();
  if (!said_machine && procs * threads > cores) {
    said_machine = true;
    note(std::to_string(procs) + " process" + (procs > 1 ? "es" : "") + " on this machine x " +
         std::to_string(threads) + " threads = " + std::to_string(procs * threads) + " threads on " +
         std::to_string(cores) + " cores: they take turns on the cores and steps run slower. Use " +
         std::to_string(std::max(1, cores / procs)) + " (cores / processes): set_num_threads or OMP_NUM_THREADS.");
  } else if (!said_mask && threads > mine) {
    // The machine has the cores, but this process may run on fewer (taskset, mpirun --bind-to core).
    said_mask = true;
    note(std::to_string(threads) + " threads in a process whose CPU affinity allows " + std::to_string(mine) +
         " core" + (mine > 1 ? "s" : "") + " (of the machine's " + std::to_string(cores) +
         "): they take turns on " + (mine > 1 ? "them" : "it") + ". Bind each process to as many cores as it has " +
         "threads (mpirun --bind-to none, or --map-by slot:PE=" + std::to_string(threads) + "), or use " +
         std::to_string(mine) + " thread" + (mine > 1 ? "s" : "") + ".");
  }
}

// OPENBLAS_CORETYPE naming kernels for a narrower vector unit than the CPU has.
void check_blas_core() {
  const char* forced = std::getenv("OPENBLAS_CORETYPE");
  if (!forced || !*forced) return;
  const char* core = openblas_get_corename();
  const int level = blas_core_level(core ? core : forced), cpu = cpu_level();
  if (level == 0 || cpu <= level) return;
  const char* isa[] = {"", "SSE", "AVX", "AVX2", "AVX-512"};
  note(std::string("OPENBLAS_CORETYPE=") + forced + " makes OpenBLAS run its " + (core ? core : forced) +
       " kernels (" + isa[level] + ") on a CPU with " + isa[cpu] +
       ": matmuls run at a fraction of their speed. Unset OPENBLAS_CORETYPE to let OpenBLAS pick.");
}

int& thread_count() {
  static int n = [] {
    // Without OMP_NUM_THREADS, processes launched together on one machine share its cores.
    int t = env_threads();
    // The machine's cores shared by its processes, and no more than this process may run on.
    if (t == 0) t = std::max(1, std::min(detail::cores_available(), detail::machine_cores() / local_processes()));
    // OpenBLAS runs single-threaded: Loom splits a product across its own pool (kernels/gemm.h),
    // and OpenBLAS's OpenMP threads would spin at barriers beside it.
    openblas_set_num_threads(1);
    check_blas_core();
    check_oversubscription(t);
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
  check_oversubscription(n);
}

namespace detail {
int cores_available() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) == 0) return std::max(1, CPU_COUNT(&set));
  return std::max(1u, std::thread::hardware_concurrency());
}
int machine_cores() {
  const long n = sysconf(_SC_NPROCESSORS_ONLN);
  return n > 0 ? int(n) : std::max(1u, std::thread::hardware_concurrency());
}
int processes_on_this_machine() { return local_processes(); }
std::string blas_description() {
  const char* config = openblas_get_config();
  const char* core = openblas_get_corename();
  std::string out = std::string("OpenBLAS ") + (config ? config : "?");
  while (!out.empty() && out.back() == ' ') out.pop_back();
  return out + " (kernels: " + (core ? core : "?") + ")";
}
}  // namespace detail

int get_num_threads() { return thread_count(); }

}  // namespace loom

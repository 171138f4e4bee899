// Timing helpers for the benchmark programs: JSON lines on stdout, notes on stderr.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace bench {

inline double now_ms() {
  using namespace std::chrono;
  return duration<double, std::milli>(steady_clock::now().time_since_epoch()).count();
}

inline double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/// `--threads T` (several allowed: --threads 1 --threads 2); default 1 and 2.
inline std::vector<int> thread_counts(int argc, char** argv) {
  std::vector<int> t;
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::strcmp(argv[i], "--threads") == 0) t.push_back(std::atoi(argv[i + 1]));
  }
  if (t.empty()) t = {1, 2};
  return t;
}

inline bool quick() {
  const char* q = std::getenv("QUICK");
  return q && *q && std::strcmp(q, "0") != 0;
}

/// `--numpy` (also time numpy on the same workloads) and `--python PATH` (default python3).
struct NumpyArgs {
  bool numpy = false;
  std::string python = "python3";
};
inline NumpyArgs numpy_args(int argc, char** argv) {
  NumpyArgs a;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--numpy") == 0) a.numpy = true;
    if (std::strcmp(argv[i], "--python") == 0 && i + 1 < argc) a.python = argv[i + 1];
  }
  return a;
}

/// Runs `cmd` (a script timing numpy on the same workloads, one JSON line per workload with "bench"
/// and "median_ms"), echoes its lines, and prints for each workload and thread count of `loom_ms`
/// (Loom's medians by {workload, threads}) a "vs_numpy" line with both medians and their ratio:
/// with `match_threads`, only against the numpy line of the same "threads" (numpy's BLAS threads);
/// without, against every count (numpy single-threaded). Returns the script's exit status.
inline int compare_with_numpy(const std::string& cmd, const std::map<std::pair<std::string, int>, double>& loom_ms,
                              bool match_threads, const char* what) {
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) {
    std::fprintf(stderr, "%s: cannot run %s\n", what, cmd.c_str());
    return 1;
  }
  char line[1024];
  while (std::fgets(line, sizeof line, p)) {
    std::fputs(line, stdout);
    char name[128] = {0};
    double ms = 0;
    int threads = 1;
    const char* b = std::strstr(line, "\"bench\": \"");
    const char* m = std::strstr(line, "\"median_ms\": ");
    const char* t = std::strstr(line, "\"threads\": ");
    if (!b || !m || std::sscanf(b + 10, "%127[^\"]", name) != 1 || std::sscanf(m + 13, "%lf", &ms) != 1) continue;
    if (t) std::sscanf(t + 11, "%d", &threads);
    for (const auto& [key, loom] : loom_ms) {
      if (key.first != name || (match_threads && key.second != threads)) continue;
      std::printf("{\"bench\":\"%s\",\"impl\":\"vs_numpy\",\"threads\":%d,\"loom_ms\":%.4f,\"numpy_ms\":%.4f,"
                  "\"loom_over_numpy\":%.3f}\n",
                  name, key.second, loom, ms, loom / ms);
    }
    std::fflush(stdout);
  }
  return pclose(p) == 0 ? 0 : 1;
}

}  // namespace bench

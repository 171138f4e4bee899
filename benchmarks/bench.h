// Timing helpers for the benchmark programs: JSON lines on stdout, notes on stderr.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
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

}  // namespace bench

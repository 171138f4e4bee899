// The profiler across ranks (core/profile.h): write_trace gathers every rank's spans into rank 0's
// file, one process per rank, clocks on rank 0's, with each collective's bytes. Runs alone and
// under mpirun -np 2..4.
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>

#include "../test_utils.h"
#include "loom/distributed/distributed.h"

using namespace loom;
namespace dist = loom::distributed;
using nlohmann::json;

TEST(ProfileRanks, OneTraceWithAProcessPerRankAndTheCollectives) {
  dist::Group g = dist::init();
  const int n = g.size(), rank = g.rank();
  array x = full({1000}, float(rank + 1));
  eval(dist::all_sum(x, g));  // every rank is here before any records
  profile::start();
  for (int i = 0; i < 3; ++i) eval(dist::all_sum(x * 2.0f, g));
  profile::stop();
  // The same path on every rank (only rank 0 writes); by size, so that runs at several sizes may
  // go at once.
  const std::string path = ::testing::TempDir() + "loom_profile_ranks_" + std::to_string(n) + ".json";
  profile::write_trace(path);
  eval(dist::all_sum(x, g));  // rank 0 has written the file before anyone reads it
  if (rank != 0) return;
  std::ifstream f(path);
  ASSERT_TRUE(f.good()) << path;
  const json trace = json::parse(f);
  std::set<int> pids;
  std::map<int, double> first_eval;  // by rank: when its first eval began (us, rank 0's clock)
  int comm = 0;
  for (const json& e : trace["traceEvents"]) {
    pids.insert(e["pid"].get<int>());
    if (e["ph"] != "X") continue;
    if (e["cat"] == "eval" && !first_eval.count(e["pid"])) first_eval[e["pid"]] = e["ts"];
    if (e["cat"] == "comm") {
      ++comm;
      EXPECT_EQ(e["args"]["bytes_read"].get<uint64_t>(), 4000u);
      EXPECT_EQ(e["args"]["group_size"].get<int>(), n);
    }
  }
  EXPECT_EQ(static_cast<int>(pids.size()), n);
  // One all_sum per step per rank where its data moved (a single process has no collective).
  EXPECT_EQ(comm, n > 1 ? 3 * n : 0);
  // The ranks started their steps together (after a collective): on rank 0's clock within a
  // generous 100 ms of each other. (On one machine the clocks agree already; this checks that the
  // offsets do not move them apart.)
  ASSERT_EQ(static_cast<int>(first_eval.size()), n);
  for (const auto& [r, t] : first_eval) EXPECT_NEAR(t, first_eval[0], 1e5) << "rank " << r;
  std::remove(path.c_str());
}

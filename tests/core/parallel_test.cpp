// Loom's thread pool (core/parallel.h): every task runs exactly once, errors come back to the
// caller, nested and concurrent calls run, a forked child can use it, and results that are summed
// over parts do not depend on the thread count.
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cmath>
#include <stdexcept>
#include <thread>

#include "../test_utils.h"
#include "loom/core/parallel.h"

using namespace loom;

namespace {

// Runs `tasks` tasks on `threads` threads; each records how often it ran.
std::vector<int> run_counted(int64_t tasks, int threads) {
  std::vector<std::atomic<int>> hits(static_cast<size_t>(tasks));
  detail::run_tasks(tasks, threads, [&](int64_t i) { hits[static_cast<size_t>(i)].fetch_add(1); });
  std::vector<int> out;
  for (auto& h : hits) out.push_back(h.load());
  return out;
}

}  // namespace

TEST(Pool, EveryTaskRunsOnce) {
  for (int threads : {1, 2, 3, 8}) {
    for (int64_t tasks : {0, 1, 2, 7, 64, 1000}) {
      SCOPED_TRACE("threads " + std::to_string(threads) + ", tasks " + std::to_string(tasks));
      for (int rep = 0; rep < 20; ++rep) {
        EXPECT_EQ(run_counted(tasks, threads), std::vector<int>(static_cast<size_t>(tasks), 1));
      }
    }
  }
}

TEST(Pool, PartsCoverTheRangeWithoutOverlap) {
  for (size_t n : {size_t(1), size_t(5), size_t(100), size_t(100003)}) {
    for (int64_t parts : {1, 3, 8, 16}) {
      std::vector<std::atomic<int>> hits(n);
      detail::run_parts(n, std::min<int64_t>(parts, int64_t(n)), 4, [&](size_t b, size_t e) {
        EXPECT_LT(b, e);
        for (size_t i = b; i < e; ++i) hits[i].fetch_add(1);
      });
      for (size_t i = 0; i < n; ++i) ASSERT_EQ(hits[i].load(), 1) << "n " << n << ", parts " << parts << ", at " << i;
    }
  }
}

TEST(Pool, WorkersRunTasksAndNestedCallsRunOnTheirThread) {
  // Tasks that wait for one another can only finish if two threads run them at once.
  std::atomic<int> arrived{0};
  std::atomic<bool> nested_ok{true};
  detail::run_tasks(2, 2, [&](int64_t) {
    EXPECT_TRUE(detail::in_parallel());
    arrived.fetch_add(1);
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(1);
    while (arrived.load() < 2 && std::chrono::steady_clock::now() < until) std::this_thread::yield();
    const std::thread::id me = std::this_thread::get_id();
    detail::run_tasks(4, 2, [&](int64_t) {
      if (std::this_thread::get_id() != me) nested_ok = false;
    });
  });
  EXPECT_FALSE(detail::in_parallel());
  EXPECT_TRUE(nested_ok.load());
  // On a loaded machine the worker may not be scheduled within the second: then the caller ran
  // both tasks, which is allowed; what must hold is that they all ran.
  EXPECT_EQ(arrived.load(), 2);
}

TEST(Pool, FirstErrorReachesTheCallerAndThePoolStaysUsable) {
  for (int threads : {1, 2, 4}) {
    std::atomic<int> ran{0};
    EXPECT_THROW_MSG(detail::run_tasks(100, threads,
                                       [&](int64_t i) {
                                         ran.fetch_add(1);
                                         if (i == 3) throw std::runtime_error("task 3 failed");
                                       }),
                     std::runtime_error, "task 3 failed");
    EXPECT_GE(ran.load(), 1);
    EXPECT_FALSE(detail::in_parallel());
    EXPECT_EQ(run_counted(50, threads), std::vector<int>(50, 1));
  }
}

TEST(Pool, ConcurrentCallersEachGetAllTheirTasks) {
  std::vector<std::thread> callers;
  std::atomic<int> wrong{0};
  for (int c = 0; c < 4; ++c) {
    callers.emplace_back([&] {
      for (int rep = 0; rep < 200; ++rep) {
        if (run_counted(37, 2) != std::vector<int>(37, 1)) wrong.fetch_add(1);
      }
    });
  }
  for (auto& t : callers) t.join();
  EXPECT_EQ(wrong.load(), 0);
}

TEST(Pool, ForkedChildComputesInParallel) {
  run_counted(16, 2);  // the parent's workers exist
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    // The child has no workers of the parent's; its pool must still run every task.
    if (run_counted(1000, 2) != std::vector<int>(1000, 1)) _exit(1);
    set_num_threads(2);
    array x = astype(arange(0, 100000, 1, int32), float64);  // integers: exact sums in float64
    _exit(sum(x).item<double>() == 4999950000.0 ? 0 : 2);
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "1: a task did not run once; 2: a wrong sum";
}

// Per-feature sums of the norms' backward add per-part partials in part order: 1, 2 and 3 threads
// give the same bits.
TEST(Pool, GradientSumsDoNotDependOnTheThreadCount) {
  const int saved = get_num_threads();
  auto weight_grad = [](int threads) {
    set_num_threads(threads);
    array x = sin(reshape(arange(0, 4096 * 96, 1, float32), {4096, 96}) * 0.001f);
    array w = ones({96});
    array b = zeros({96});
    auto g = grad([&](const std::vector<array>& p) { return sum(square(fast::layer_norm(x, p[0], p[1], 1e-5f))); },
                  std::vector<int>{0, 1})({w, b});
    eval(g);
    std::vector<float> out = g[0].to_vector<float>();
    std::vector<float> gb = g[1].to_vector<float>();
    out.insert(out.end(), gb.begin(), gb.end());
    return out;
  };
  const auto one = weight_grad(1), two = weight_grad(2), three = weight_grad(3);
  set_num_threads(saved);
  EXPECT_EQ(one, two);
  EXPECT_EQ(one, three);
  for (float v : one) EXPECT_TRUE(std::isfinite(v));
}

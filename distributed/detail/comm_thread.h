// Internal to distributed/: the communication thread, on which collectives that eval started early
// run one at a time, in the order they were started, while eval computes.
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>

namespace loom::distributed::detail {

class CommThread {
 public:
  struct Job {
    std::function<void()> fn;
    std::atomic<bool> done{false};  // set under the thread's lock; read without it by ready()
    std::exception_ptr error;
    uint64_t number = 0;  // in the order of submission
  };

  CommThread();
  ~CommThread();

  std::shared_ptr<Job> submit(std::function<void()> fn);
  /// Blocks until `job` is done; rethrows its error.
  void wait(const std::shared_ptr<Job>& job);

 private:
  void loop();

  std::mutex mu_;
  std::condition_variable cv_, done_cv_;
  std::deque<std::shared_ptr<Job>> queue_;
  bool stop_ = false;
  // After a job fails, the jobs submitted after it are skipped with its error until its eval has
  // heard of it (wait on the failed job): they belong to the eval that fails, and a message that
  // follows a failed one would wait for a peer that is failing too (nn::Pipeline's chains).
  uint64_t submitted_ = 0;
  std::shared_ptr<Job> failed_;
  uint64_t skip_below_ = 0;  // once failed_ was heard of: jobs numbered from here run again
  std::thread thread_;
};

/// Started by init for a world of several processes whose backend allows calls from another thread;
/// stopped by the backend before it shuts down.
void start_comm_thread(int world_size, int local_ranks);
void stop_comm_thread();

/// The thread to run started collectives on, or null to run them inline, blocking. A per-process
/// speed decision: it changes where a collective runs, never when eval issues it.
CommThread* comm_thread_for_collectives();

}  // namespace loom::distributed::detail

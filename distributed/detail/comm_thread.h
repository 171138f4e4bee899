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

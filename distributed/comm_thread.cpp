#include "loom/distributed/detail/comm_thread.h"


#include <cstdlib>
#include <cstring>

#include "loom/core/profile.h"
#include "loom/core/threads.h"

namespace loom::distributed::detail {

CommThread::CommThread() : thread_([this] { loop(); }) {}

CommThread::~CommThread() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

std::shared_ptr<CommThread::Job> CommThread::submit(std::function<void()> fn) {
  auto job = std::make_shared<Job>();
  job->fn = std::move(fn);
  {
    std::lock_guard<std::mutex> lock(mu_);
    job->number = submitted_++;
    queue_.push_back(job);
  }
  cv_.notify_all();
  return job;
}

void CommThread::wait(const std::shared_ptr<Job>& job) {
  std::unique_lock<std::mutex> lock(mu_);
  done_cv_.wait(lock, [&] { return job->done.load(); });  // the fault watch ends the job if a peer never comes
  if (job == failed_ && skip_below_ <= failed_->number) skip_below_ = submitted_;  // its eval now knows
  if (job->error) std::rethrow_exception(job->error);
}

void CommThread::loop() {
  profile::detail::name_thread("communication");
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
    if (queue_.empty()) return;  // stop_
    auto job = queue_.front();
    queue_.pop_front();
    // (skip_below_ <= failed_->number: its eval has not heard yet; after, the jobs submitted before it did)
    const bool skip = failed_ && job->number > failed_->number &&
                      (skip_below_ <= failed_->number || job->number < skip_below_);
    lock.unlock();
    if (skip) {
      job->error = failed_->error;
    } else {
      try {
        job->fn();
      } catch (...) {
        job->error = std::current_exception();
      }
    }
    job->fn = nullptr;  // drop the arrays it holds before eval hears it is done
    lock.lock();
    if (job->error && !skip) failed_ = job, skip_below_ = 0;
    job->done = true;
    done_cv_.notify_all();
  }
}

namespace {

std::unique_ptr<CommThread> comm_thread;
int world_size = 1, local_ranks = 1;

// Whether collectives run on the communication thread beside compute. When every rank is on this
// machine, communication is shared-memory copies and sums, CPU work: it hides behind compute only
// on a spare core. Where the ranks' threads fill every core it would take turns with the compute,
// and blocking inline where the collective becomes ready is faster (2 ranks x 1 thread on 2 cores,
// dp_mlp_step with 1 MiB buckets: 7.0-7.1 ms async, 6.4-6.7 ms inline). Across machines the network
// does the moving, so collectives always go async. LOOM_ASYNC_COLLECTIVES=1 or 0 forces either way.
bool async_collectives() {
  static const int forced = [] {
    const char* v = std::getenv("LOOM_ASYNC_COLLECTIVES");
    return v && *v ? (std::strcmp(v, "0") != 0 ? 1 : 0) : -1;
  }();
  if (forced >= 0) return forced == 1;
  return local_ranks < world_size || local_ranks * get_num_threads() < loom::detail::cores_available();
}

}  // namespace

void start_comm_thread(int size, int local) {
  world_size = size, local_ranks = local;
  comm_thread = std::make_unique<CommThread>();
}

void stop_comm_thread() { comm_thread.reset(); }

CommThread* comm_thread_for_collectives() {
  return comm_thread && async_collectives() ? comm_thread.get() : nullptr;
}

}  // namespace loom::distributed::detail

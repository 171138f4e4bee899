// Internal to distributed/: the fault watch, a thread of every rank of a multi-process job that ends
// the job, naming the ranks, instead of leaving a rank waiting for ever:
//  - a rank left (returned from main or exited; every rank announces it at exit): a rank waiting for
//    it in a collective ends the job 2 s after the notice;
//  - a rank stopped answering (a stopped process, a dead link between hosts): the watches send each
//    other heartbeats every second, whatever their ranks compute; a rank waiting for a silent one, in
//    a collective or at exit, ends the job when the silence passes the peer timeout (10 s);
//  - a rank that answers but never reaches the collective (stuck in compute or I/O, or in another
//    collective): a rank that has waited in one collective longer than the collective timeout (30
//    minutes, as PyTorch's default) ends the job.
// It runs only where the backend may be called from several threads.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "loom/core/array.h"

namespace loom::distributed::detail {

class GroupImpl;

/// How the watch's messages travel: the backend's part of the watch. Called on the watch's thread
/// only, never blocking.
class WatchLink {
 public:
  virtual ~WatchLink() = default;
  /// Sets left[r] for every rank whose exit notice has come, and heard[r] for every rank from which a
  /// heartbeat came since the last poll.
  virtual void poll(std::vector<char>& left, std::vector<char>& heard) = 0;
  /// Sends a heartbeat to every other rank (not to one whose previous heartbeat is still in flight).
  virtual void beat() = 0;
  /// Sends this rank's exit notice to every other rank.
  virtual void announce() = 0;
  /// After every rank's exit notice has come: waits for this rank's own messages to go, and frees
  /// what the watch used.
  virtual void close() = 0;
};

class FaultWatch {
 public:
  using Clock = std::chrono::steady_clock;

  /// Reads LOOM_PEER_TIMEOUT and LOOM_COLLECTIVE_TIMEOUT (seconds), when set.
  FaultWatch();
  /// Starts the watch's thread; `world` ends the job.
  void start(int rank, int world_size, std::unique_ptr<WatchLink> link, std::shared_ptr<GroupImpl> world);
  bool on() const { return on_.load(std::memory_order_acquire); }

  /// The collective this process is in, if any (one at a time): `what` of `x` among world ranks `members`.
  void enter(const char* what, const array& x, const std::vector<int>& members);
  void leave();
  /// At exit: tells everyone, then waits until everyone has said the same, so that no rank shuts the
  /// backend down (a collective step of its own) while another still waits for it in a collective.
  /// A rank that stops answering meanwhile ends the job.
  void finish();

  void set_peer_timeout(double seconds);
  void set_collective_timeout(double seconds);

 private:
  void loop();
  // One round of the thread: poll, beat, and end the job if a rule above says so.
  void check(Clock::time_point now);
  [[noreturn]] void end_job(const std::string& why);

  std::mutex mu_;
  std::condition_variable wake_;
  std::thread thread_;
  std::atomic<bool> on_{false};
  bool stop_ = false;
  std::unique_ptr<WatchLink> link_;
  std::shared_ptr<GroupImpl> world_;
  int rank_ = 0;
  std::vector<char> left_flags_, heard_;
  std::vector<Clock::time_point> left_at_;     // when each rank's exit notice came (max() while none)
  std::vector<Clock::time_point> last_heard_;  // each rank's last heartbeat (or the watch's start)
  Clock::time_point last_beat_;
  double peer_timeout_, collective_timeout_;
  // The collective this process waits in, or the exit (finishing_).
  bool busy_ = false, finishing_ = false;
  const char* what_ = "";
  Shape shape_;
  Dtype dtype_ = float32;
  const std::vector<int>* members_ = nullptr;
  Clock::time_point since_;
};

FaultWatch& fault_watch();

/// From now on an uncaught exception on this rank prints "[loom rank R] uncaught exception: ..." and
/// ends the whole job through `world`, instead of leaving the others waiting in a collective.
void end_job_on_uncaught_exception(int rank, std::shared_ptr<GroupImpl> world);

}  // namespace loom::distributed::detail

// Internal to distributed/: the fault watch. Every rank tells every other when it leaves (normally or
// not, through exit/atexit). A rank that waits in a collective on a rank that has left would wait
// forever; the watch ends the job instead, 2 s after the notice, naming both ranks. It is checked by
// the communication thread while idle and by eval while it waits for a started collective, so it
// runs only where the backend may be called from several threads.
#pragma once

#include <chrono>
#include <memory>
#include <mutex>
#include <vector>

#include "loom/core/array.h"

namespace loom::distributed::detail {

class GroupImpl;

/// How the notices travel: the backend's part of the watch.
class ExitNotices {
 public:
  virtual ~ExitNotices() = default;
  /// Sets arrived[r] for every rank whose notice has come (never blocks).
  virtual void poll(std::vector<char>& arrived) = 0;
  /// Sends this rank's notice to every other rank.
  virtual void announce() = 0;
  /// Whether every other rank's notice has come (never blocks).
  virtual bool all_arrived() = 0;
  /// After all_arrived: waits for this rank's own notices to go, and frees what the watch used.
  virtual void close() = 0;
};

class FaultWatch {
 public:
  /// `world` ends the job when a rank waited for has left.
  void start(int rank, int world_size, std::unique_ptr<ExitNotices> notices, std::shared_ptr<GroupImpl> world);
  bool on() const { return notices_ != nullptr; }

  /// The collective this process is in, if any (one at a time): `what` of `x` among world ranks `members`.
  void enter(const char* what, const array& x, const std::vector<int>& members);
  void leave();
  /// Ends the job when a rank of the current collective left more than 2 s ago.
  void check();
  /// At exit: tells everyone, then waits until everyone has said the same, so that no rank shuts the
  /// backend down (a collective step of its own) while another still waits for it in a collective.
  void finish();

 private:
  using Clock = std::chrono::steady_clock;
  std::mutex mu_;
  std::unique_ptr<ExitNotices> notices_;
  std::shared_ptr<GroupImpl> world_;
  int rank_ = 0;
  std::vector<char> arrived_;
  std::vector<Clock::time_point> left_;  // when each rank's notice arrived (max() while it has not)
  bool busy_ = false;
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

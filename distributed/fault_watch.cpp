#include "loom/distributed/detail/fault_watch.h"

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>
#include <thread>

#include "loom/distributed/detail/debug.h"
#include "loom/distributed/detail/group_impl.h"

namespace loom::distributed::detail {

namespace {
constexpr double kGraceSeconds = 2.0;
}

void FaultWatch::start(int rank, int world_size, std::unique_ptr<ExitNotices> notices,
                       std::shared_ptr<GroupImpl> world) {
  std::lock_guard<std::mutex> lock(mu_);
  rank_ = rank;
  arrived_.assign(world_size, 0);
  left_.assign(world_size, Clock::time_point::max());
  world_ = std::move(world);
  notices_ = std::move(notices);
}

void FaultWatch::enter(const char* what, const array& x, const std::vector<int>& members) {
  std::lock_guard<std::mutex> lock(mu_);
  busy_ = true, what_ = what, shape_ = x.shape(), dtype_ = x.dtype(), members_ = &members, since_ = Clock::now();
}

void FaultWatch::leave() {
  std::lock_guard<std::mutex> lock(mu_);
  busy_ = false;
}

void FaultWatch::check() {
  if (!on()) return;
  std::lock_guard<std::mutex> lock(mu_);
  notices_->poll(arrived_);
  for (size_t r = 0; r < arrived_.size(); ++r) {
    if (arrived_[r] && left_[r] == Clock::time_point::max()) left_[r] = Clock::now();
  }
  if (!busy_) return;
  for (int q : *members_) {
    if (left_[q] == Clock::time_point::max()) continue;
    auto waited = std::chrono::duration<double>(Clock::now() - std::max(left_[q], since_)).count();
    if (waited < kGraceSeconds) continue;
    std::fprintf(stderr,
                 "[loom rank %d] rank %d has left the job while rank %d waits for it in %s; ending the "
                 "job (did one rank run fewer steps, or exit early?)\n",
                 rank_, q, rank_, (std::string(what_) + " of " + typed_shape(dtype_, shape_)).c_str());
    std::fflush(stderr);
    world_->abort();
  }
}

void FaultWatch::finish() {
  if (!on()) return;
  notices_->announce();
  for (;;) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (notices_->all_arrived()) break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  std::lock_guard<std::mutex> lock(mu_);
  notices_->close();
  notices_.reset();
  world_.reset();
}

FaultWatch& fault_watch() {
  static FaultWatch* watch = new FaultWatch;  // never destroyed: the backend's atexit finish uses it
  return *watch;
}

namespace {

int terminate_rank = 0;
std::shared_ptr<GroupImpl> terminate_world;

[[noreturn]] void terminate_job() {
  std::string what = "unknown exception";
  if (auto e = std::current_exception()) {
    try {
      std::rethrow_exception(e);
    } catch (const std::exception& x) {
      what = x.what();
    } catch (...) {
    }
  } else {
    what = "std::terminate called without an exception";
  }
  std::fprintf(stderr, "[loom rank %d] uncaught exception: %s\n[loom rank %d] ending the job\n", terminate_rank,
               what.c_str(), terminate_rank);
  std::fflush(stderr);
  if (terminate_world) terminate_world->abort();
  std::abort();
}

}  // namespace

void end_job_on_uncaught_exception(int rank, std::shared_ptr<GroupImpl> world) {
  terminate_rank = rank;
  terminate_world = std::move(world);
  std::set_terminate(terminate_job);
}

}  // namespace loom::distributed::detail

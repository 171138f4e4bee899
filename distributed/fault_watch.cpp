#include "loom/distributed/detail/fault_watch.h"

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <stdexcept>
#include <string>

#include "loom/distributed/detail/group_impl.h"
#include "loom/distributed/detail/signature.h"
#include "loom/ops/utils.h"

namespace loom::distributed::detail {

using loom::detail::msg;

namespace {

constexpr double kGraceSeconds = 2.0;  // after a rank's exit notice, for a collective it was already in
constexpr auto kBeatPeriod = std::chrono::seconds(1);
constexpr auto kRound = std::chrono::milliseconds(100), kExitRound = std::chrono::milliseconds(2);

double seconds(FaultWatch::Clock::duration d) { return std::chrono::duration<double>(d).count(); }

double timeout_from_env(const char* name, double fallback) {
  const char* v = std::getenv(name);
  if (!v || !*v) return fallback;
  char* end = nullptr;
  const double t = std::strtod(v, &end);
  if (*end != '\0' || !(t > 0)) {
    std::fprintf(stderr, "[loom] %s=%s is not a positive number of seconds; using %g\n", name, v, fallback);
    return fallback;
  }
  return t;
}

void check_timeout(const char* what, double s) {
  if (!(s > 0)) throw std::invalid_argument(msg("[", what, "] the timeout must be a positive number of seconds, got ", s));
}

}  // namespace

FaultWatch::FaultWatch()
    : peer_timeout_(timeout_from_env("LOOM_PEER_TIMEOUT", 10.0)),
      collective_timeout_(timeout_from_env("LOOM_COLLECTIVE_TIMEOUT", 1800.0)) {}

void FaultWatch::set_peer_timeout(double s) {
  check_timeout("set_peer_timeout", s);
  std::lock_guard<std::mutex> lock(mu_);
  peer_timeout_ = s;
}

void FaultWatch::set_collective_timeout(double s) {
  check_timeout("set_collective_timeout", s);
  std::lock_guard<std::mutex> lock(mu_);
  collective_timeout_ = s;
}

void FaultWatch::start(int rank, int world_size, std::unique_ptr<WatchLink> link, std::shared_ptr<GroupImpl> world) {
  std::lock_guard<std::mutex> lock(mu_);
  rank_ = rank;
  left_flags_.assign(world_size, 0);
  heard_.assign(world_size, 0);
  left_at_.assign(world_size, Clock::time_point::max());
  last_heard_.assign(world_size, Clock::now());
  last_beat_ = Clock::now() - kBeatPeriod;  // the first round beats
  world_ = std::move(world);
  link_ = std::move(link);
  on_ = true;
  thread_ = std::thread([this] { loop(); });
}

void FaultWatch::enter(const char* what, const array& x, const std::vector<int>& members) {
  std::lock_guard<std::mutex> lock(mu_);
  busy_ = true, what_ = what, shape_ = x.shape(), dtype_ = x.dtype(), members_ = &members, since_ = Clock::now();
}

void FaultWatch::leave() {
  std::lock_guard<std::mutex> lock(mu_);
  busy_ = false;
}

void FaultWatch::loop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!stop_) {
    check(Clock::now());
    wake_.wait_for(lock, finishing_ ? kExitRound : kRound, [&] { return stop_; });
  }
}

void FaultWatch::check(Clock::time_point now) {
  link_->poll(left_flags_, heard_);
  for (size_t r = 0; r < left_flags_.size(); ++r) {
    if (heard_[r]) last_heard_[r] = now, heard_[r] = 0;
    if (left_flags_[r] && left_at_[r] == Clock::time_point::max()) left_at_[r] = now;
  }
  if (now - last_beat_ >= kBeatPeriod) {
    link_->beat();
    last_beat_ = now;
  }
  if (!busy_ && !finishing_) return;
  const std::string where =
      busy_ ? msg(what_, " of ", typed_shape(dtype_, shape_)) : std::string("its exit (it has finished)");
  auto waits_for = [&](int q) {
    if (q == rank_) return;
    if (left_at_[q] != Clock::time_point::max()) {
      // A rank that left is no fault at exit; in a collective it is, once its last messages had time to land.
      if (busy_ && seconds(now - std::max(left_at_[q], since_)) >= kGraceSeconds) {
        end_job(msg("rank ", q, " has left the job while rank ", rank_, " waits for it in ", where,
                    " (did one rank run fewer steps, or exit early?)"));
      }
      return;
    }
    const double silent = seconds(now - last_heard_[q]);
    if (silent >= peer_timeout_) {
      end_job(msg("rank ", q, " has not answered for ", static_cast<int>(silent), " s while rank ", rank_,
                  " waits for it in ", where, " (a stopped process or a lost connection; LOOM_PEER_TIMEOUT=",
                  peer_timeout_, ")"));
    }
  };
  if (busy_) {
    for (int q : *members_) waits_for(q);
  } else {
    for (int q = 0; q < static_cast<int>(left_flags_.size()); ++q) waits_for(q);
  }
  if (busy_ && seconds(now - since_) >= collective_timeout_) {
    std::string members;
    for (int q : *members_) members += msg(members.empty() ? "" : ", ", q);
    end_job(msg("rank ", rank_, " has waited ", static_cast<int>(seconds(now - since_)), " s in ", where,
                " for ranks that answer but have not reached it (ranks ", members,
                "; LOOM_COLLECTIVE_TIMEOUT=", collective_timeout_, ")"));
  }
}

void FaultWatch::end_job(const std::string& why) {
  std::fprintf(stderr, "[loom rank %d] %s; ending the job\n", rank_, why.c_str());
  std::fflush(stderr);
  world_->abort();
  std::abort();  // not reached
}

void FaultWatch::finish() {
  if (!on_) return;
  {
    std::lock_guard<std::mutex> lock(mu_);
    link_->announce();
    finishing_ = true;
    left_flags_[rank_] = 1;
  }
  wake_.notify_all();
  // The thread polls every few milliseconds now, and ends the job if a rank falls silent.
  for (;;) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      bool all = true;
      for (char f : left_flags_) all = all && f;
      if (all) break;
    }
    std::this_thread::sleep_for(kExitRound);
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  wake_.notify_all();
  thread_.join();
  std::lock_guard<std::mutex> lock(mu_);
  link_->close();
  link_.reset();
  world_.reset();
  on_ = false;
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

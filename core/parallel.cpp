#include "loom/core/parallel.h"

#include <linux/futex.h>
#include <pthread.h>
#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <climits>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

#include "loom/core/profile.h"

namespace loom::detail {

namespace {

// Waiting: a futex on a 32-bit counter (Linux; Loom runs on Linux), so a sleeper costs nothing and
// waking it costs the waker one system call, made only when someone sleeps.
void futex_wait(std::atomic<uint32_t>& word, uint32_t expected) {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(&word), FUTEX_WAIT_PRIVATE, expected, nullptr, nullptr, 0);
}
void futex_wake_all(std::atomic<uint32_t>& word) {
  syscall(SYS_futex, reinterpret_cast<uint32_t*>(&word), FUTEX_WAKE_PRIVATE, INT_MAX, nullptr, nullptr, 0);
}

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

// How long an idle thread waits awake before it sleeps: first spinning (pause), then yielding its core
// to any thread that wants it. The kernels of a step follow each other within microseconds to
// milliseconds, and the next step's first kernel comes after the graph is built, so workers that wait
// long are awake for them; a yielding thread costs an idle core nothing (spinning longer slowed the
// other thread on a machine whose two cores share one physical core). But a thread that never sleeps
// competes with other processes for its time slice and loses it in the middle of tasks, which then
// hold up the caller: after such a stall the pool is "contended" for a while, and its workers wait
// awake only briefly, so that waking from sleep gives them priority. Figures: benchmarks/README.md,
// session 14.
constexpr auto kSpin = std::chrono::microseconds(20);
constexpr auto kYield = std::chrono::milliseconds(20);
constexpr auto kYieldContended = std::chrono::milliseconds(1);
constexpr auto kContendedFor = std::chrono::milliseconds(500);

std::atomic<int64_t> contended_until{0};  // steady_clock ticks

int64_t now_ticks() { return std::chrono::steady_clock::now().time_since_epoch().count(); }
bool contended() { return now_ticks() < contended_until.load(std::memory_order_relaxed); }

// Waits awake until done() or the budgets are spent; true if done().
template <typename Done>
bool spin_until(Done done) {
  const auto start = std::chrono::steady_clock::now();
  const auto spin_end = start + kSpin, yield_end = start + (contended() ? kYieldContended : kYield);
  bool yielding = false;
  for (int i = 1;; ++i) {
    if (done()) return true;
    if (yielding) {
      sched_yield();
      if (i % 16 == 0 && std::chrono::steady_clock::now() > yield_end) return false;
      continue;
    }
    cpu_relax();
    if (i % 64 == 0 && std::chrono::steady_clock::now() > spin_end) yielding = true;
  }
}

thread_local bool in_task = false;

struct Job {
  void (*fn)(void*, int64_t) = nullptr;
  void* ctx = nullptr;
  int64_t tasks = 0;
  int max_workers = 0;
  int joined = 0;  // guarded by Pool::mutex
  std::atomic<int64_t> next{0};
  std::atomic<int> active{0};  // workers that joined and have not left
  std::atomic<bool> failed{false};
  std::exception_ptr error;  // written by the thread that set `failed`
  const std::string* node = nullptr;  // while profiling: the node the caller runs (core/profile.h)

  // Claims and runs tasks until none is left (or one failed).
  void work() {
    for (int64_t i; (i = next.fetch_add(1, std::memory_order_relaxed)) < tasks;) {
      try {
        fn(ctx, i);
      } catch (...) {
        if (!failed.exchange(true)) error = std::current_exception();
        next.store(tasks, std::memory_order_relaxed);
      }
    }
  }
};

class Pool {
 public:
  static Pool& get() {
    static const bool hooked = [] {
      // A child of fork() has none of the workers: it starts a pool of its own.
      pthread_atfork(nullptr, nullptr, [] { instance() = new Pool; });
      return true;
    }();
    (void)hooked;
    return *instance();
  }

  void run(int64_t tasks, int threads, void (*fn)(void*, int64_t), void* ctx) {
    if (busy_.exchange(true, std::memory_order_acquire)) {  // another thread's call is running
      serial(tasks, fn, ctx);
      return;
    }
    const int want = static_cast<int>(std::min<int64_t>(threads - 1, tasks - 1));
    grow(want);
    Job job;
    job.fn = fn;
    job.ctx = ctx;
    job.tasks = tasks;
    job.max_workers = want;
    if (profile::detail::recording()) job.node = profile::detail::running_node();
    {
      std::lock_guard<std::mutex> lock(mutex_);
      current_ = &job;
    }
    epoch_.fetch_add(1, std::memory_order_seq_cst);
    if (sleepers_.load(std::memory_order_seq_cst) > 0) futex_wake_all(epoch_);
    const auto t_start = std::chrono::steady_clock::now();
    in_task = true;
    job.work();
    in_task = false;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      current_ = nullptr;  // no worker joins from here on
    }
    // Workers that joined finish the tasks they claimed and leave.
    const auto t_wait = std::chrono::steady_clock::now();
    if (!spin_until([&] { return job.active.load(std::memory_order_acquire) == 0; })) {
      caller_sleeping_.store(true, std::memory_order_seq_cst);
      for (;;) {
        const uint32_t seen = left_.load(std::memory_order_seq_cst);
        if (job.active.load(std::memory_order_seq_cst) == 0) break;
        futex_wait(left_, seen);
      }
      caller_sleeping_.store(false, std::memory_order_relaxed);
    }
    const auto t_end = std::chrono::steady_clock::now();
    // Waiting longer than the caller worked (and more than a brief moment): a worker lost its core
    // in the middle of a task.
    if (t_end - t_wait > std::max<std::chrono::steady_clock::duration>(std::chrono::microseconds(100), t_wait - t_start)) {
      contended_until.store((t_end + kContendedFor).time_since_epoch().count(), std::memory_order_relaxed);
    }
    busy_.store(false, std::memory_order_release);
    if (job.failed.load()) std::rethrow_exception(job.error);
  }

  static void serial(int64_t tasks, void (*fn)(void*, int64_t), void* ctx) {
    const bool outer = in_task;
    in_task = true;
    try {
      for (int64_t i = 0; i < tasks; ++i) fn(ctx, i);
    } catch (...) {
      in_task = outer;
      throw;
    }
    in_task = outer;
  }

 private:
  static Pool*& instance() {
    static Pool* pool = new Pool;  // never destroyed: workers may still spin while the process exits
    return pool;
  }

  // At least n workers (fewer if the system refuses threads: the caller then does more itself).
  void grow(int n) {
    if (started_.load(std::memory_order_acquire) >= n) return;
    std::lock_guard<std::mutex> lock(grow_mutex_);
    while (started_.load(std::memory_order_relaxed) < n) {
      try {
        const int n = started_.load(std::memory_order_relaxed) + 1;
        std::thread([this, n] {
          profile::detail::name_thread("pool worker " + std::to_string(n));
          worker();
        }).detach();
      } catch (const std::system_error&) {
        return;
      }
      started_.fetch_add(1, std::memory_order_release);
    }
  }

  void worker() {
    uint32_t seen = epoch_.load(std::memory_order_acquire);
    for (;;) {
      if (!spin_until([&] { return epoch_.load(std::memory_order_acquire) != seen; })) {
        sleepers_.fetch_add(1, std::memory_order_seq_cst);
        while (epoch_.load(std::memory_order_seq_cst) == seen) futex_wait(epoch_, seen);
        sleepers_.fetch_sub(1, std::memory_order_relaxed);
      }
      seen = epoch_.load(std::memory_order_acquire);
      Job* job = nullptr;
      {
        std::lock_guard<std::mutex> lock(mutex_);
        // A job whose tasks are all claimed has nothing for a latecomer, who would only make the
        // caller wait for it to leave.
        if (current_ && current_->joined < current_->max_workers &&
            current_->next.load(std::memory_order_relaxed) < current_->tasks) {
          job = current_;
          ++job->joined;
          job->active.fetch_add(1, std::memory_order_relaxed);
        }
      }
      if (!job) continue;
      in_task = true;
      const int64_t begin = job->node ? profile::detail::now_ns() : 0;
      job->work();
      in_task = false;
      if (job->node) {  // this worker's part of the node, recorded before the caller may return
        profile::detail::Span s;
        s.name = *job->node;
        s.category = "worker";
        s.begin_ns = begin;
        s.end_ns = profile::detail::now_ns();
        profile::detail::record(std::move(s));
      }
      if (job->active.fetch_sub(1, std::memory_order_acq_rel) == 1) {  // the job's last touch
        left_.fetch_add(1, std::memory_order_seq_cst);
        if (caller_sleeping_.load(std::memory_order_seq_cst)) futex_wake_all(left_);
      }
    }
  }

  std::atomic<bool> busy_{false};
  std::mutex mutex_;
  Job* current_ = nullptr;  // guarded by mutex_
  std::atomic<uint32_t> epoch_{0};  // one step per job: what idle workers watch
  std::atomic<int> sleepers_{0};
  std::atomic<uint32_t> left_{0};  // one step each time a job's last worker leaves
  std::atomic<bool> caller_sleeping_{false};
  std::mutex grow_mutex_;
  std::atomic<int> started_{0};
};

}  // namespace

void run_tasks(int64_t tasks, int threads, void (*fn)(void*, int64_t), void* ctx) {
  if (tasks <= 0) return;
  if (tasks == 1 || threads <= 1 || in_task) {
    Pool::serial(tasks, fn, ctx);
    return;
  }
  Pool::get().run(tasks, threads, fn, ctx);
}

bool in_parallel() { return in_task; }

void keep_work_on_this_thread() { in_task = true; }

}  // namespace loom::detail

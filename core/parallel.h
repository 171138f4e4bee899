// Loom's thread pool: every parallel kernel runs through run_tasks.
//
// Why a pool of our own rather than OpenMP: an OpenMP team splits work statically and its threads
// spin at every barrier (libgomp: hundreds of thousands of iterations), so on a machine where
// another process holds a core, a 2-thread step waited for a descheduled thread at every kernel and
// ran many times slower than 1 thread. Here the caller works too, and tasks are claimed one at a
// time: a worker the OS has not scheduled leaves its tasks to the threads that run, so extra
// threads can only help. Idle workers spin for a few microseconds (consecutive kernels of a step
// find them awake) and then sleep in the kernel; a caller waiting for a task still running on a
// worker sleeps too, which gives that worker the core.
#pragma once

#include <cstddef>
#include <cstdint>
#include <type_traits>
#include <utility>

namespace loom::detail {

/// Calls fn(ctx, i) once for each i in [0, tasks) on the calling thread and up to `threads - 1`
/// workers, and returns when all calls have returned. Tasks run in any order and on any thread, so
/// a result must not depend on which thread ran a task. Inside a task (and while another thread's
/// call is running) the tasks run serially on the calling thread. The first exception thrown by a
/// task is rethrown here after the others finished; tasks not yet started are then skipped.
void run_tasks(int64_t tasks, int threads, void (*fn)(void*, int64_t), void* ctx);

template <typename F>
void run_tasks(int64_t tasks, int threads, F&& f) {
  using Fn = std::remove_reference_t<F>;
  run_tasks(tasks, threads, [](void* c, int64_t i) { (*static_cast<Fn*>(c))(i); },
            const_cast<void*>(static_cast<const void*>(&f)));
}

/// True on a thread that is running a task of run_tasks (or that called keep_work_on_this_thread).
bool in_parallel();

/// From now on, parallel loops called on this thread run on it alone: for a background thread (the
/// data loader's) that must not take the pool from the training loop.
void keep_work_on_this_thread();

/// How many parts a parallel loop over `threads` threads is cut into: enough that a thread the OS
/// deschedules holds up little of the loop, few enough that each part's setup stays negligible.
inline int64_t parts_for(int64_t n, int threads) {
  const int64_t parts = int64_t(threads) * 4;
  return n < parts ? n : parts;
}

/// body(begin, end) over `parts` contiguous ranges of [0, n): part k is [n*k/parts, n*(k+1)/parts).
template <typename Body>
void run_parts(size_t n, int64_t parts, int threads, Body&& body) {
  run_tasks(parts, threads, [&](int64_t k) {
    const size_t b = n * size_t(k) / size_t(parts), e = n * size_t(k + 1) / size_t(parts);
    if (e > b) body(b, e);
  });
}

}  // namespace loom::detail

// Running the graph: eval and async_eval.
#pragma once

#include <vector>

#include "loom/core/array.h"

namespace loom {

/// Evaluates every array (and everything it depends on) once. The order of evaluation is a function
/// of the graph's structure only, so every rank of a distributed job runs its collectives in the
/// same order. Evaluated arrays are detached from the graph and intermediates are freed as soon as
/// their last consumer has run.
void eval(std::vector<array> outputs);

namespace detail {
/// `a` (evaluated) itself when row-contiguous, else a row-major copy of it (core/copy.h's
/// row_contiguous, for the public templates here).
array row_major_copy(const array& a);
/// Turns elementwise fusion in eval on or off (on by default; tests compare both paths).
void set_fusion(bool on);
/// Turns the buffer-plan check on or off (off by default; LOOM_CHECK_BUFFER_PLAN=1 turns it on): eval
/// then throws std::logic_error when a node it placed in its consumer's buffer wrote elsewhere.
void set_check_buffer_plan(bool on);
}  // namespace detail

/// Starts evaluating the arrays and returns at once (MLX's async_eval). Each node runs on the thread of
/// the stream it belongs to (see core/stream.h); work on different streams runs concurrently, and the
/// caller can build the next graph meanwhile, even on top of these arrays. Reading an array's data,
/// layout or graph (data(), item(), eval(), a transform) waits until it is computed and rethrows the
/// error that stopped its computation. One thread builds a graph and evaluates it, as in MLX; inside a
/// transform (vjp, jvp, ...) this is eval.
void async_eval(std::vector<array> outputs);

inline void collect_arrays(std::vector<array>& out, const array& a) { out.push_back(a); }
inline void collect_arrays(std::vector<array>& out, const std::vector<array>& v) {
  out.insert(out.end(), v.begin(), v.end());
}

/// eval(a, b, some_vector, model.parameters(), ...): any mix of arrays and containers that provide
/// a `collect_arrays(std::vector<array>&, const T&)` overload.
template <typename... Ts>
void eval(const Ts&... xs) {
  std::vector<array> all;
  (collect_arrays(all, xs), ...);
  eval(std::move(all));
}

template <typename... Ts>
void async_eval(const Ts&... xs) {
  std::vector<array> all;
  (collect_arrays(all, xs), ...);
  async_eval(std::move(all));
}

template <typename T>
std::vector<T> array::to_vector() {
  eval();
  std::vector<T> out(size());
  if (size() == 0) return out;
  // A view (transposed, sliced, broadcast) is first copied into row-major order by the strided copy.
  const array src = detail::row_major_copy(*this);
  LOOM_DISPATCH_ALL(dtype(), In, {
    const In* p = static_cast<const In*>(src.raw_data());
    for (size_t i = 0; i < out.size(); ++i) out[i] = cast_value<T>(p[i]);
  });
  return out;
}

}  // namespace loom

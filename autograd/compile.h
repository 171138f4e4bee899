// compile: trace a function once per input signature, simplify its graph, and run it again as one
// node whose kernels were planned at trace time (MLX's compile, mlx/compile.h).
#pragma once

#include <type_traits>
#include <utility>
#include <vector>

#include "loom/autograd/transforms.h"

namespace loom {

/// What compile does (MLX's CompileMode): `disabled` returns the function itself; `no_simplify`
/// skips merging equal subexpressions and scalars; `no_fuse` keeps the simplified graph but rebuilds
/// it node by node on every call (eval then runs it as any graph) instead of running it as one
/// `Compiled` node; `enabled` does all.
enum class CompileMode { disabled, no_simplify, no_fuse, enabled };

/// A function computing what `fun` computes, traced once per input signature (the inputs' shapes and
/// dtypes; with `shapeless`, their dtypes and numbers of dimensions).
///
/// Each call returns the outputs of one `Compiled` node whose inputs are the call's inputs: it builds
/// no other node and runs no op function, and eval runs the kernels of the graph planned at trace time
/// (order, fusion, buffers). On tracing:
///  - the function runs once on placeholders, which carry shapes and dtypes but no values: it must not
///    evaluate (eval, item, data) anything that depends on its inputs;
///  - arrays it captures, and everything it computes from them alone, are constants: they are
///    evaluated at trace time and later calls see those values, not the captured arrays' later ones
///    (as MLX; pass what changes as an input);
///  - random draws without an explicit key take their keys as inputs, split from the global key state
///    on every call: each call draws new numbers, exactly those the function would draw uncompiled;
///  - equal subexpressions and equal scalar constants are merged (unless CompileMode::no_simplify).
/// Inside a transform (grad, vjp, jvp, vmap, or another compile's trace), the function is called as
/// it is, as MLX does: the transform sees its graph.
///
/// With `shapeless`, a signature is traced once for all shapes; a call with other shapes infers every
/// node's shapes from its inputs (Primitive::output_shapes), and throws naming the primitive where the
/// graph holds one whose shapes are fixed at trace time (a reshape to a given shape, say).
VectorFn compile(VectorFn fun, bool shapeless = false);
/// The function-pointer form: calls of compile with the same function share their traces (MLX).
VectorFn compile(std::vector<array> (*fun)(const std::vector<array>&), bool shapeless = false);
/// Capture-less lambdas go to the function-pointer form.
template <typename F, typename = std::enable_if_t<std::is_convertible_v<F, decltype(+std::declval<F>())>>>
VectorFn compile(F&& f, bool shapeless = false) {
  return compile(+f, shapeless);
}

/// Turns compile off everywhere (compile then returns the function itself); the environment variable
/// LOOM_DISABLE_COMPILE (or MLX_DISABLE_COMPILE) set to anything but 0 does so at start.
void disable_compile();
/// Turns compile on again, overriding the environment.
void enable_compile();
void set_compile_mode(CompileMode mode);
CompileMode compile_mode();

}  // namespace loom

// compile's traces, shared by compile (autograd/compile.cpp) and export_function / import_function
// (autograd/export.cpp). Internal to autograd/.
#pragma once

#include <memory>
#include <vector>

#include "loom/autograd/transforms.h"
#include "loom/core/program.h"

namespace loom::detail {

/// A function traced for one input signature: its program (placeholders for the inputs, then for
/// the random keys it draws), and what a call needs to make its node.
struct CompiledTrace {
  std::vector<Shape> in_shapes;  // the signature: with shapeless, only their numbers of axes count
  std::vector<Dtype> in_dtypes;
  int num_keys = 0;  // random keys the function draws: inputs after its own
  bool shapeless = false;
  std::unique_ptr<Program> program;
  std::vector<Shape> out_shapes;
  std::vector<Dtype> out_dtypes;
  /// True when a call with `inputs` (the function's own, without keys) runs this trace.
  bool accepts(const std::vector<array>& inputs) const;
};

/// A placeholder for an input while a function is traced: its shape and dtype, and an error if
/// anything evaluates it.
array compile_placeholder(const Shape& shape, Dtype dtype);

/// Traces `fun` on placeholders of `inputs`' shapes and dtypes: constants folded, then (with
/// `simplify`) equal subexpressions merged; see compile.h.
std::shared_ptr<CompiledTrace> trace_function(const VectorFn& fun, const std::vector<array>& inputs, bool simplify,
                                              bool shapeless);
/// A trace from a program's parts (import_function): `placeholders` holds the inputs' then the keys'.
std::shared_ptr<CompiledTrace> make_trace(std::vector<array> placeholders, std::vector<array> outputs, int num_keys,
                                          bool shapeless);

/// One call of a trace on `inputs` (the function's own; the keys are drawn here): the outputs of one
/// Compiled node, or with `as_nodes` (CompileMode::no_fuse, or a transform tracing) the program's
/// graph rebuilt node by node.
std::vector<array> call_trace(const std::shared_ptr<const CompiledTrace>& trace, const std::vector<array>& inputs,
                              bool as_nodes);

}  // namespace loom::detail

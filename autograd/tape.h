// The walk every transform starts with (internal to autograd/).
#pragma once

#include <cstdint>
#include <stdexcept>
#include <unordered_set>
#include <vector>

#include "loom/core/array.h"
#include "loom/core/primitive.h"

namespace loom::detail {

/// The nodes behind `outputs` that depend on an array whose id is in `live`, in topological order
/// (one array per node), found iteratively (a million-node chain must not overflow the stack). The
/// arrays of `live` are leaves. With `differentiable_only`, so is every primitive that says it has
/// no derivative (stop_gradient, random samples: nothing behind it gets one through it), and a
/// node joins only through its floating-point outputs. Each joining node's outputs (those) are added
/// to `live`.
std::vector<array> dependent_tape(const std::vector<array>& outputs, std::unordered_set<std::uintptr_t>& live,
                                  bool differentiable_only);

/// Stands for an input while a transform traces a function (vmap's VmapInput, compile's
/// CompileInput): the input's shape and dtype, no values. Evaluating it throws `error`.
class TracePlaceholder : public UnaryPrimitive {
 public:
  TracePlaceholder(const char* name, const char* error) : name_(name), error_(error) {}
  void eval_cpu(const std::vector<array>&, array&) override { throw std::invalid_argument(error_); }
  const char* name() const override { return name_; }
  bool supports_complex() const override { return true; }

 private:
  const char* name_;
  const char* error_;
};

}  // namespace loom::detail

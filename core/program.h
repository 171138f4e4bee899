// A graph kept to run again and again (internal; compile's program, autograd/compile.cpp).
#pragma once

#include <memory>
#include <mutex>
#include <vector>

#include "loom/core/array.h"

namespace loom::detail {

/// The graph from `inputs` (placeholders: arrays with a shape and a dtype, unevaluated, which run()
/// binds to its arguments' buffers) to `outputs`, planned once as eval would plan it: the tape's
/// order, its elementwise fusion, its placements and, for each node, when its buffer can go or pass
/// to a reader (donation). run() then executes the kernels of that plan directly: it builds no node
/// and plans nothing. After a run every node of the graph is unevaluated again, holding no data.
///
/// The graph's own arrays are the program's state, so runs are serialised (a mutex). Nothing but
/// the program may hold its nodes once it is built: the plan counts the handles to them, as eval's
/// does. Leaves that are neither placeholders nor nodes (constants) are held, never written.
class Program {
 public:
  Program(std::vector<array> inputs, std::vector<array> outputs);
  ~Program();
  Program(const Program&) = delete;
  Program& operator=(const Program&) = delete;

  /// Runs the graph with placeholder i bound to inputs[i] (evaluated, of the placeholder's shape
  /// and dtype); outputs[k] (unevaluated, of output k's shape and dtype) take output k's buffer.
  /// With `shapes` (a shapeless program's run on other input shapes), node j of tape() gets the
  /// shapes (*shapes)[j] (one per output) for this run.
  void run(const std::vector<array>& inputs, std::vector<array>& outputs,
           const std::vector<std::vector<Shape>>* shapes = nullptr);

  const std::vector<array>& inputs() const { return inputs_; }
  const std::vector<array>& outputs() const { return outputs_; }
  /// The graph's nodes in the order they run (one entry per node: its first output); every input of
  /// an entry is an earlier entry's output, a placeholder or a constant.
  const std::vector<array>& tape() const { return tape_; }
  /// Every output of tape()[j], in output order.
  std::vector<array> node_outputs(size_t j) const;

 private:
  struct Plan;
  std::vector<array> inputs_, outputs_, tape_, constants_;
  std::vector<std::vector<array>> outs_;  // by tape position: every output of the node, in order
  std::unique_ptr<Plan> plan_;
  std::mutex mu_;
};

}  // namespace loom::detail

// The base of every operation in the graph: a forward kernel with its vjp and jvp beside it.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <typeinfo>
#include <ostream>
#include <utility>
#include <vector>

#include "loom/core/array.h"

namespace loom {

namespace detail {
class Writer;
}

/// The work begun by Primitive::eval_async: it owns whatever the run needs until it is done.
class AsyncWork {
 public:
  virtual ~AsyncWork() = default;
  /// Blocks until the work is done; rethrows its error. eval calls it once before the outputs are read
  /// (and, when eval unwinds, before the inputs' buffers can go).
  virtual void wait() = 0;
  /// True when the work is done and wait() would return at once: eval then finishes it early, which
  /// releases its inputs before a reader of its outputs comes. The default never claims it.
  virtual bool ready() { return false; }
};

class Primitive {
 public:
  /// A primitive belongs to the calling thread's default stream (see StreamContext), or to `stream`.
  Primitive() : stream_(detail::current_stream_index(), Device::cpu) {}
  explicit Primitive(Stream stream) : stream_(stream) {}
  virtual ~Primitive() = default;
  Stream stream() const { return stream_; }

  /// Computes `outputs` from evaluated `inputs`; asks for each output's buffer (array::alloc), which
  /// eval may already have given it (see donors and input_offsets).
  virtual void eval_cpu(const std::vector<array>& inputs, std::vector<array>& outputs) = 0;

  /// Cotangents of the inputs listed in `argnums`, given cotangents for every output.
  virtual std::vector<array> vjp(const std::vector<array>& primals, const std::vector<array>& cotangents,
                                 const std::vector<int>& argnums, const std::vector<array>& outputs);

  /// Tangents of every output, given tangents for the inputs listed in `argnums` (others are zero).
  virtual std::vector<array> jvp(const std::vector<array>& primals, const std::vector<array>& tangents,
                                 const std::vector<int>& argnums);

  /// The batching rule (vmap): this primitive's outputs for inputs where each input i with
  /// axes[i] >= 0 carries one more axis, at axes[i], along which its batch runs (all batched inputs
  /// have the same batch size; axes[i] == -1: input i is the same for every batch entry). `outputs`
  /// are the unbatched node's outputs (their shapes and dtypes; outputs[0].primitive_ptr() is this
  /// primitive). Returns the batched outputs and, for each, the axis its batch runs along (-1: it
  /// does not vary along the batch). The default throws std::invalid_argument naming the primitive:
  /// a primitive without a rule says why where it is declared.
  virtual std::pair<std::vector<array>, std::vector<int>> vmap(const std::vector<array>& inputs,
                                                               const std::vector<int>& axes,
                                                               const std::vector<array>& outputs);

  /// Shapeless compile (autograd/compile.h): the shapes of the outputs for inputs of shapes `inputs`,
  /// with this primitive's parameters. The default throws std::invalid_argument naming the primitive:
  /// its outputs' shapes were fixed when it was built. (MLX's takes the input arrays; Loom's takes
  /// their shapes, so that a shapeless call infers them without building arrays.)
  virtual std::vector<Shape> output_shapes(const std::vector<Shape>& inputs) const;
  /// output_shapes for primitives whose one output has the shape of every one of their inputs
  /// (elementwise ops), which must agree: else it throws naming the primitive and the shapes.
  std::vector<Shape> same_shape_output(const std::vector<Shape>& inputs) const;

  /// export_function (autograd/export.h): writes the parameters this primitive was built with, which
  /// the loader it registers (core/serialize.h, under its name()) reads back in the same order. The
  /// default throws std::invalid_argument naming the primitive: it cannot be exported.
  virtual void save(detail::Writer& params) const;

  /// Floating-point operations of one evaluation, for the profiler (core/profile.h), or -1 when
  /// not known. Elementwise primitives count one per output element (the default).
  virtual double flops(const std::vector<array>& inputs, const std::vector<array>& outputs) const;

  /// True when `other` computes what this primitive computes from the same inputs: compile merges
  /// such nodes (common subexpressions). The default never merges; a primitive that says yes compares
  /// its type and every parameter (MLX's name).
  virtual bool is_equivalent(const Primitive& other) const { return false; }
  /// True when the one output is the one input's values, unchanged (copy, stop_gradient): compile's
  /// simplification drops such nodes, as MLX's does.
  virtual bool is_noop() const { return false; }

  virtual const char* name() const = 0;
  virtual void print(std::ostream& os) const { os << name(); }

  /// False when the outputs carry no derivative whatever the inputs (stop_gradient, random samples,
  /// comparisons): transforms treat them as constants, calling neither vjp nor jvp and not walking
  /// the graph behind them.
  virtual bool is_differentiable() const { return true; }

  /// True when the kernel takes complex64 inputs and outputs. Building a node of a primitive that
  /// does not, with a complex64 input or output, throws naming the primitive: kernels never see a
  /// dtype they were not written for.
  virtual bool supports_complex() const { return false; }

  /// Elementwise primitives run fused with the elementwise nodes around them: eval_block computes `n`
  /// consecutive output elements from `n` consecutive elements of each input (contiguous, of dtypes
  /// `in_dtypes`), bit for bit as eval_cpu would.
  virtual bool is_elementwise() const { return false; }
  virtual void eval_block(const Dtype* in_dtypes, const void* const* inputs, void* out, size_t n) const {}

  /// Buffer plan, donation: the inputs whose buffer output `o` may take over, as a mask (bit k for
  /// input k; inputs past the 64th never donate). Naming input k promises that the kernel can compute
  /// the output in k's buffer, in k's layout, reading each element (or row) of k before it writes the
  /// output's. Eval gives the output the buffer of the first named input that nothing reads after
  /// this node and that fits (array::take_buffer); the kernel finds it there (array::is_placed). An
  /// elementwise primitive may take any input's (the default); others name theirs.
  virtual uint64_t donors(const std::vector<array>& inputs, int o) const {
    return is_elementwise() && inputs.size() < 64 ? (uint64_t(1) << inputs.size()) - 1 : 0;
  }
  /// The inputs among `ks` that are row-contiguous, as a donors() mask: for kernels that write their
  /// output in row-major order.
  static uint64_t row_contiguous_donors(const std::vector<array>& inputs, std::initializer_list<int> ks);
  /// True when input k appears once among `inputs`: a kernel that reads the other inputs anywhere but
  /// where it writes may take input k's buffer only then (matmul(a, b) + a must not overwrite a).
  static bool listed_once(const std::vector<array>& inputs, int k);

  /// Placement: when every input of this primitive fills one contiguous run of its row-contiguous output
  /// (concatenation along the leading axis, say), sets `offsets` to their element offsets and returns
  /// true. eval then lets each input's producer write straight into its run, and eval_cpu skips
  /// inputs found already in place.
  virtual bool input_offsets(const std::vector<array>& inputs, const array& output,
                             std::vector<int64_t>& offsets) const {
    return false;
  }
  /// input_offsets for inputs that fill the output one after another, in their order.
  static void consecutive_offsets(const std::vector<array>& inputs, std::vector<int64_t>& offsets);
  /// True when the output is the input's buffer reinterpreted whenever the input is row-contiguous
  /// (reshape): eval places such a node's producer where the node itself would go.
  virtual bool forwards_buffer() const { return false; }
  /// True when the output may be a view of an input's buffer rather than a buffer of its own
  /// (transpose, slice, broadcast, reshape, copy): eval never places such a node in its consumer,
  /// since a view does not write where it is put.
  virtual bool makes_view() const { return forwards_buffer(); }

  /// Communication primitives are asynchronous: eval starts them with `eval_async` as soon as their
  /// inputs are ready, runs independent nodes meanwhile, and waits on the returned work before anything
  /// reads their outputs. When nothing else could run, eval calls the blocking `eval_cpu` instead. Async
  /// primitives start in an order that depends only on the graph's structure, so whether a primitive is
  /// async must depend on the graph alone too. The primitive keeps no state of the run: the work owns
  /// it (a primitive may be evaluated again, or by another eval, before the work is waited on).
  virtual bool is_async() const { return false; }
  /// Among async primitives ready at the same time, eval starts the one with the smallest key first
  /// (then tape order). Communication numbers its nodes in the order the program creates them, so
  /// that ranks building the same collectives in the same order start them in that order even where
  /// the graphs around them differ (a rank shadowing the others' gradient averages: nn::Join).
  virtual uint64_t start_key() const { return 0; }
  /// Starts the work; nullptr when it is already done (the default runs eval_cpu).
  virtual std::unique_ptr<AsyncWork> eval_async(const std::vector<array>& inputs, std::vector<array>& outputs) {
    eval_cpu(inputs, outputs);
    return nullptr;
  }

 private:
  Stream stream_;
};

namespace detail {
/// For Primitive::is_equivalent: `other` as `self`'s own class (not a subclass), or null.
template <class P>
const P* same_primitive(const P* self, const Primitive& other) {
  return typeid(other) == typeid(*self) ? static_cast<const P*>(&other) : nullptr;
}

/// Called with the primitive of every node made from now on, when set (null: none). The test suite
/// sets one that checks each primitive against its registry of gradient checks; nothing else should.
using PrimitiveHook = void (*)(const Primitive&);
void set_primitive_hook(PrimitiveHook hook);
}  // namespace detail

/// A primitive with one output.
class UnaryPrimitive : public Primitive {
 public:
  void eval_cpu(const std::vector<array>& inputs, std::vector<array>& outputs) final {
    eval_cpu(inputs, outputs[0]);
  }
  virtual void eval_cpu(const std::vector<array>& inputs, array& out) = 0;
};

}  // namespace loom

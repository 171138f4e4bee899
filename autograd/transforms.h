// Function transforms over the lazy graph: vjp, jvp, grad, value_and_grad, vmap.
// They build more graph and evaluate nothing: the forward and backward run in the eval that follows.
#pragma once

#include <functional>
#include <optional>
#include <utility>
#include <vector>

#include "loom/core/array.h"

namespace loom {

using VectorFn = std::function<std::vector<array>(const std::vector<array>&)>;
using ScalarVectorFn = std::function<array(const std::vector<array>&)>;
using UnaryFn = std::function<array(const array&)>;

/// Outputs of `fun` at `primals` and the vector-Jacobian products with `cotangents` (one per output),
/// one per primal. Integer and bool primals get zero cotangents.
std::pair<std::vector<array>, std::vector<array>> vjp(const VectorFn& fun, const std::vector<array>& primals,
                                                      const std::vector<array>& cotangents);
std::pair<array, array> vjp(const UnaryFn& fun, const array& primal, const array& cotangent);
/// The same in two halves, as JAX's vjp(fun, *primals): `fun`'s outputs at `primals` now, and a
/// function that builds their vector-Jacobian products with cotangents given later (one per output,
/// or fewer: the rest count as zero), one per primal. For a backward whose cotangents are built
/// after other graph, as a pipeline stage's, which arrive from the next stage. The function keeps the
/// traced forward and may be called more than once, before the forward is evaluated (an eval
/// detaches what it computed from the graph, so a later call would find no path back). (Not in MLX.)
using VjpFn = std::function<std::vector<array>(const std::vector<array>& cotangents)>;
std::pair<std::vector<array>, VjpFn> vjp(const VectorFn& fun, const std::vector<array>& primals);

/// Outputs of `fun` at `primals` and the Jacobian-vector products with `tangents` (one per primal).
std::pair<std::vector<array>, std::vector<array>> jvp(const VectorFn& fun, const std::vector<array>& primals,
                                                      const std::vector<array>& tangents);
std::pair<array, array> jvp(const UnaryFn& fun, const array& primal, const array& tangent);

using ValueAndGradFn = std::function<std::pair<std::vector<array>, std::vector<array>>(const std::vector<array>&)>;
using SimpleValueAndGradFn = std::function<std::pair<array, std::vector<array>>(const std::vector<array>&)>;

/// A function returning `fun`'s outputs and the gradient of its first output (a scalar) with respect
/// to the inputs in `argnums`, as MLX: a negative number counts from the end, and the gradients come
/// in increasing input order whatever the order of `argnums`. An empty `argnums`, a repeated input or
/// one out of range throws std::invalid_argument, as does differentiating with respect to an integer
/// input.
ValueAndGradFn value_and_grad(const VectorFn& fun, const std::vector<int>& argnums);
inline ValueAndGradFn value_and_grad(const VectorFn& fun, int argnum = 0) {
  return value_and_grad(fun, std::vector<int>{argnum});
}
SimpleValueAndGradFn value_and_grad(const ScalarVectorFn& fun, const std::vector<int>& argnums);
inline SimpleValueAndGradFn value_and_grad(const ScalarVectorFn& fun, int argnum = 0) {
  return value_and_grad(fun, std::vector<int>{argnum});
}
std::function<std::pair<array, array>(const array&)> value_and_grad(const UnaryFn& fun);

/// The gradient part of value_and_grad.
std::function<std::vector<array>(const std::vector<array>&)> grad(const ScalarVectorFn& fun,
                                                                  const std::vector<int>& argnums);
inline std::function<std::vector<array>(const std::vector<array>&)> grad(const ScalarVectorFn& fun,
                                                                         int argnum = 0) {
  return grad(fun, std::vector<int>{argnum});
}
std::function<array(const array&)> grad(const UnaryFn& fun);

/// `fun` applied along an axis of its inputs (MLX's vmap): input i carries its batch along axis
/// in_axes[i], or is the same for every batch entry when in_axes[i] is -1 (None); output j gets its
/// batch at axis out_axes[j] (negative counts from the end of the batched output). Empty in_axes or
/// out_axes mean 0 for every input or output; as in MLX, in_axes that are all -1 need out_axes that
/// are all negative and the other way round (else std::invalid_argument when vmap is called). Each primitive's batching rule (Primitive::vmap) builds
/// the batched graph once: nothing loops over the batch. vmap nests, and composes with grad, jvp,
/// vjp and custom_function both ways. Throws std::invalid_argument for an axis out of range, batch
/// sizes that differ, no batched input, a function that evaluates inside vmap, or a primitive with no
/// batching rule (named in the message).
///
/// Every primitive has a batching rule but these, for the reasons given where each is declared:
/// - `send` (distributed/primitives.cpp): the receiving rank's recv depends on no batched input, so
///   it could not know the batched shape (recv has no inputs: vmap never meets it);
/// - the flat all_sum / all_mean (all_sum_flat, nn::average_gradients' buckets): its parts are
///   flattened into one vector, where a batch has no single place;
/// - quantize / dequantize with an nvfp4 global scale that varies along the batch.
/// - compile's `Compiled` node and its `CompileInput` placeholders (autograd/compile.h): a compiled
///   function called while a transform traces calls the function itself, so transforms never meet
///   them (nor differentiate them).
/// Random ops draw from their key: a batched key gives each entry its own samples; without a key,
/// the key taken when vmap traces is the same for every entry (as in MLX).
VectorFn vmap(const VectorFn& fun, const std::vector<int>& in_axes = {}, const std::vector<int>& out_axes = {});
std::function<array(const array&, const array&)> vmap(const std::function<array(const array&, const array&)>& fun,
                                                      int in_axis_a = 0, int in_axis_b = 0, int out_axis = 0);
std::function<array(const array&)> vmap(const UnaryFn& fun, int in_axis = 0, int out_axis = 0);

/// A user vjp rule: (primals, cotangents, outputs) -> one cotangent per primal.
using CustomVjpFn = std::function<std::vector<array>(const std::vector<array>& primals,
                                                     const std::vector<array>& cotangents,
                                                     const std::vector<array>& outputs)>;
/// A user jvp rule: (primals, tangents, argnums) -> one tangent per output. `tangents` holds one
/// tangent per primal listed in `argnums` (the others are zero), as in Primitive::jvp.
using CustomJvpFn = std::function<std::vector<array>(const std::vector<array>& primals,
                                                     const std::vector<array>& tangents,
                                                     const std::vector<int>& argnums)>;

/// A user batching rule: (inputs, axes) -> (outputs, the batch axis of each), as Primitive::vmap
/// (axes[i] == -1: input i is not batched).
using CustomVmapFn = std::function<std::pair<std::vector<array>, std::vector<int>>(const std::vector<array>& inputs,
                                                                                   const std::vector<int>& axes)>;

/// `fun` with its derivatives given by `fun_vjp` and/or `fun_jvp`, and its batching by `fun_vmap`,
/// instead of by transforming `fun` (the forward still runs `fun`). A missing rule falls back to
/// transforming `fun`; with none, `fun` itself is returned. The rules run when a transform needs them
/// and build graph like any op, so they compose (grad of grad works when the rules are
/// differentiable; under vmap the vjp and jvp rules still apply, batched themselves). The vjp rule
/// must return one cotangent per primal, each of its primal's shape.
VectorFn custom_function(VectorFn fun, std::optional<CustomVjpFn> fun_vjp = std::nullopt,
                         std::optional<CustomJvpFn> fun_jvp = std::nullopt,
                         std::optional<CustomVmapFn> fun_vmap = std::nullopt);

/// custom_function with only a vjp rule (forward mode differentiates through `fun`).
VectorFn custom_vjp(VectorFn fun, CustomVjpFn fun_vjp);

/// `fun` whose reverse-mode derivative keeps none of `fun`'s intermediates: the backward pass
/// recomputes `fun`'s forward from its inputs (once the cotangents of its outputs exist), trading
/// compute for memory. Values and gradients are the same as `fun`'s.
VectorFn checkpoint(VectorFn fun);

namespace detail {
/// vmap's two halves (as MLX's): vmap_trace runs `fun` on placeholders of the unbatched inputs
/// (returning them and the traced outputs); vmap_replace rebuilds the traced graph on the batched
/// `inputs` with each primitive's batching rule.
std::pair<std::vector<array>, std::vector<array>> vmap_trace(const VectorFn& fun, const std::vector<array>& inputs,
                                                             const std::vector<int>& in_axes);
std::vector<array> vmap_replace(const std::vector<array>& inputs, const std::vector<array>& s_inputs,
                                const std::vector<array>& s_outputs, const std::vector<int>& in_axes,
                                const std::vector<int>& out_axes);

/// Makes the cotangents once the traced outputs are known.
using CotangentFn = std::function<std::vector<array>(const std::vector<array>& outputs)>;
/// vjp restricted to the primals in `argnums`; the workhorse of every reverse-mode transform.
std::pair<std::vector<array>, std::vector<array>> vjp_impl(const VectorFn& fun, const std::vector<array>& primals,
                                                           const CotangentFn& make_cotangents,
                                                           const std::vector<int>& argnums);
}  // namespace detail

}  // namespace loom

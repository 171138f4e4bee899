// The base of every fused op (as MLX's fast::Custom): a fast kernel for something plain ops can
// already compute. The op hands over the composition that defines it (its reference), and the base
// derives every derivative from that one composition, so the rules cannot drift from the definition
// and derivatives of any order work. An op may add a fused backward kernel (a CustomBackward); that
// kernel's own derivatives again come from the reference.
//
// The reference is code, which export cannot write: each concrete op saves the parameters its
// constructor takes (Primitive::save), and its loader calls that constructor, which builds the
// reference again.
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "loom/core/primitive.h"

namespace loom::fast {

/// Outputs from inputs, written with plain ops.
using Composition = std::function<std::vector<array>(const std::vector<array>&)>;

class Custom : public Primitive {
 public:
  bool supports_complex() const override { return true; }
  /// `reference` computes this primitive's outputs from its inputs with plain ops.
  explicit Custom(Composition reference) : reference_(std::move(reference)) {}

  /// The fused kernel: the reference's outputs, to rounding.
  void eval_cpu(const std::vector<array>& inputs, std::vector<array>& outputs) override = 0;

  /// The fused backward when the op has one for these argnums (see fused_vjp), else the vjp of the
  /// reference.
  std::vector<array> vjp(const std::vector<array>& primals, const std::vector<array>& cotangents,
                         const std::vector<int>& argnums, const std::vector<array>& outputs) final;
  /// The jvp of the reference.
  std::vector<array> jvp(const std::vector<array>& primals, const std::vector<array>& tangents,
                         const std::vector<int>& argnums) final;
  /// This op's own kernel on the batch where batching() allows, else the batched reference (unfused).
  std::pair<std::vector<array>, std::vector<int>> vmap(const std::vector<array>& inputs, const std::vector<int>& axes,
                                                       const std::vector<array>& outputs) override;

 protected:
  /// A fused kernel's cotangents of the inputs in `argnums` (normally through backward() below), or
  /// nothing to let the reference's vjp answer.
  virtual std::vector<array> fused_vjp(const std::vector<array>& primals, const std::vector<array>& cotangents,
                                       const std::vector<int>& argnums, const std::vector<array>& outputs) {
    return {};
  }

  /// The outputs of `kernel` (a CustomBackward of this op made with the same `wrt`) on (primals...,
  /// cotangents..., extras...): the cotangents of the primals listed in `wrt`, each in its primal's
  /// shape and dtype. `extras` are arrays the kernel reads besides (the forward's outputs, say): they
  /// must be functions of the primals, and derivatives do not flow through them.
  static std::vector<array> backward(std::shared_ptr<Primitive> kernel, const std::vector<array>& primals,
                                     const std::vector<array>& cotangents, const std::vector<int>& wrt,
                                     const std::vector<array>& extras = {});

  /// 0, 1, ..., primals.size() - 1: a backward kernel that computes every input's cotangent at once.
  static std::vector<int> every_input(const std::vector<array>& primals);
  /// all[a] for each a in argnums.
  static std::vector<array> pick(const std::vector<array>& all, const std::vector<int>& argnums);

  /// How the kernel runs on batched inputs (axes as in vmap): `reference` (it cannot; the batched
  /// reference runs instead), `same_shape` (its inputs all have the output's shape and it works
  /// element- or row-wise, or they share the output's leading axes and it works per leading index:
  /// every input gets the batch first, unbatched ones broadcast), `rows` (it
  /// works row by row on input 0 and the batched inputs are row inputs: they get the batch first,
  /// the others stay as they are).
  enum class Batching { reference, same_shape, rows };
  virtual Batching batching(const std::vector<int>& axes) const { return Batching::reference; }

  /// output_shapes of a row op: x, then parameters of x's last axis (a norm's weight and bias); another
  /// x must keep that axis.
  std::vector<Shape> row_op_shapes(const std::vector<Shape>& in) const;

  /// The reference's cotangents of the inputs in `argnums`.
  std::vector<array> reference_vjp(const std::vector<array>& primals, const std::vector<array>& cotangents,
                                   const std::vector<int>& argnums) const;

 private:
  Composition reference_;
};

/// A fused backward kernel for a Custom op whose reference is `forward`: its inputs are that op's
/// primals (num_primals of them), the cotangents of its outputs, then any extras; its outputs are
/// the cotangents of the primals listed in `wrt`. Its own reference is the vjp of `forward`, so its
/// derivatives (second order and up) come from the forward's composition too.
class CustomBackward : public Custom {
 public:
  CustomBackward(const Composition& forward, int num_primals, int num_cotangents, const std::vector<int>& wrt);
  void eval_cpu(const std::vector<array>& inputs, std::vector<array>& outputs) override = 0;
};

}  // namespace loom::fast

// Mixed precision as a policy (torch.autocast's model; MLX has no counterpart): while an Autocast is
// alive on a thread, the ops built on that thread choose their compute dtype by kind.
//
//  - Matrix products compute in the policy's dtype (bfloat16 or float16): matmul, addmm, gather_mm,
//    block_masked_mm, the convolutions and fast::scaled_dot_product_attention cast their float32,
//    float16 and bfloat16 inputs to it.
//  - Ops whose accuracy needs float32 compute in float32: softmax, log_softmax, logsumexp, sum, mean,
//    var, std, prod, cumsum, fast::layer_norm, fast::rms_norm and fast::softmax_cross_entropy (and so
//    the nn losses built on them) cast float16 and bfloat16 inputs up to float32.
//  - Every other op runs in the dtype its inputs promote to, as without the policy: GELU of a
//    bfloat16 matmul's output is bfloat16; a residual float32 stream plus a bfloat16 branch is float32.
//
// float64 and complex inputs are never cast. The casts are astype nodes, so gradients come back
// through them in each input's own dtype: float32 parameters get float32 gradients. An array is cast
// once per dtype while it and its cast live (as torch.autocast's cache): the q, k and v projections
// of one activation, or a tied weight's uses, share one cast, where their cotangents add up (in the
// cast's dtype, as in PyTorch) before flowing back. An evaluated array (a parameter) is cast once
// per value: later graphs reuse the cast the first computed (the micro-batches of one optimizer step
// share one half copy of each weight), which lives as long as the parameter. The backward
// graph is built with the policy of the thread that builds it (nn::value_and_grad's compute_dtype
// covers both passes).
//
//     {
//       loom::Autocast mixed(bfloat16);   // this scope's matmuls run in bfloat16
//       array loss = model_loss(x, y);    // float32: the loss is in the float32 list
//     }
#pragma once

#include <optional>

#include "loom/core/array.h"

namespace loom {

/// Turns the policy on (with `dtype`, bfloat16 or float16) or off (`enabled = false`) for the calling
/// thread until destroyed, then restores the enclosing policy: regions nest.
class Autocast {
 public:
  explicit Autocast(Dtype dtype = bfloat16, bool enabled = true);
  ~Autocast();
  Autocast(const Autocast&) = delete;
  Autocast& operator=(const Autocast&) = delete;

 private:
  std::optional<Dtype> previous_;
};

/// The compute dtype of the calling thread's policy, or nullopt outside any enabled Autocast.
std::optional<Dtype> autocast_dtype();

namespace detail {
/// For a matrix-product op: `x` in the policy's dtype when the policy is on and x is float32, float16
/// or bfloat16; `x` itself otherwise.
array autocast_lower(const array& x);
/// For a float32-list op: float16 and bfloat16 `x` as float32 when the policy is on.
array autocast_float32(const array& x);
/// The same for an optional operand (a mask, a norm's weight): nullopt stays nullopt.
std::optional<array> autocast_lower(const std::optional<array>& x);
std::optional<array> autocast_float32(const std::optional<array>& x);
}  // namespace detail

}  // namespace loom

#include "loom/nn/moe.h"

#include <cmath>
#include <stdexcept>

#include "loom/nn/activations.h"
#include "loom/ops/indexing.h"
#include "loom/ops/ops.h"
#include "loom/ops/random.h"
#include "loom/ops/utils.h"

namespace loom::nn {

using Init = detail::MoEInit;
using loom::detail::msg;
using loom::detail::shape_str;

namespace {

detail::MoEInit check(int dims, int hidden, int num_experts, int top_k, double capacity_factor,
           const std::optional<distributed::Group>& group) {
  if (dims <= 0 || hidden <= 0 || num_experts <= 0) {
    throw std::invalid_argument(msg("[nn::MoE] dims, hidden and num_experts must be positive; got ", dims, ", ", hidden,
                                    " and ", num_experts));
  }
  if (top_k < 1 || top_k > num_experts) {
    throw std::invalid_argument(msg("[nn::MoE] top_k must be between 1 and the ", num_experts, " experts; got ", top_k));
  }
  if (!(capacity_factor > 0)) {
    throw std::invalid_argument(msg("[nn::MoE] capacity_factor must be positive; got ", capacity_factor));
  }
  const int n = group ? group->size() : 1, r = group ? group->rank() : 0;
  if (num_experts % n != 0) {
    throw std::invalid_argument(msg("[nn::MoE] ", num_experts, " experts cannot be spread evenly over a group of ", n,
                                    " ranks: the number of experts must be a multiple of the group size"));
  }
  const int local = num_experts / n;
  return {dims, hidden, num_experts, top_k, r * local, local};
}

// This rank's experts' parameter `shape` (per expert), each expert drawn from its own key of `keys`,
// so that the split does not change the values.
array draw(const array& keys, const detail::MoEInit& in, const Shape& shape, double bound) {
  std::vector<array> parts;
  for (int e = in.first; e < in.first + in.local; ++e) {
    parts.push_back(random::uniform(-bound, bound, shape, float32, take(keys, e, 0)));
  }
  return stack(parts, 0);
}

}  // namespace

MoE::Experts::Experts(array w1_, array b1_, array w2_, array b2_)
    : w1(std::move(w1_)), b1(std::move(b1_)), w2(std::move(w2_)), b2(std::move(b2_)) {
  register_parameter("w1", w1);
  register_parameter("b1", b1);
  register_parameter("w2", w2);
  register_parameter("b2", b2);
}

MoE::MoE(int dims, int hidden, int num_experts, int top_k, double capacity_factor,
         std::optional<distributed::Group> group, std::function<array(const array&)> activation, bool renormalize)
    : MoE(check(dims, hidden, num_experts, top_k, capacity_factor, group), capacity_factor, group,
          std::move(activation), renormalize) {}

MoE::MoE(const detail::MoEInit& in, double capacity_factor, const std::optional<distributed::Group>& group,
         std::function<array(const array&)> activation, bool renormalize)
    : router(in.dims, in.experts, false),
      experts([&] {
        // One key for all the experts (the router's came first), split into one per expert.
        const array keys = random::split(random::detail::next_key(), 4 * in.experts);
        const double a = 1.0 / std::sqrt(static_cast<double>(in.dims)), b = 1.0 / std::sqrt(static_cast<double>(in.hidden));
        auto of = [&](int which) { return slice(keys, {which * in.experts, 0}, {(which + 1) * in.experts, 2}); };
        return Experts(draw(of(0), in, {in.dims, in.hidden}, a), draw(of(1), in, {in.hidden}, a),
                       draw(of(2), in, {in.hidden, in.dims}, b), draw(of(3), in, {in.dims}, b));
      }()),
      dims_(in.dims), experts_(in.experts), k_(in.k), local_(in.local),
      capacity_factor_(capacity_factor), group_(group),
      activation_(activation ? std::move(activation) : std::function<array(const array&)>(gelu)),
      renormalize_(renormalize) {
  register_module("router", router);
  register_module("experts", experts);
  if (group_ && group_->size() > 1) {
    for (const char* name : {"experts.w1", "experts.b1", "experts.w2", "experts.b2"}) {
      set_split(name, Split{0, {experts_}, *group_});
    }
  }
}

int MoE::capacity(int tokens) const {
  return static_cast<int>(std::ceil(capacity_factor_ * tokens * k_ / experts_));
}

MoEOutput MoE::forward(const array& x) const {
  if (x.ndim() == 0 || x.shape(-1) != dims_) {
    throw std::invalid_argument(msg("[nn::MoE] expects tokens of ", dims_, " features (..., ", dims_, "); got shape ",
                                    shape_str(x.shape())));
  }
  const int t = static_cast<int>(x.size() / static_cast<size_t>(dims_)), e = experts_, k = k_;
  const int n = group_ ? group_->size() : 1, c = std::max(capacity(t), 1);
  const array xt = reshape(x, {t, dims_});

  // Routing, in float32.
  const array probs = loom::softmax(astype(router(xt), float32), -1);                       // (T, E)
  const array choice = slice(argsort(negative(stop_gradient(probs)), -1), {0, 0}, {t, k});  // (T, k)
  array gates = take_along_axis(probs, choice, -1);                                   // (T, k)
  if (renormalize_) gates = divide(gates, sum(gates, -1, true));
  // (token, choice) pairs, first choices first: their expert, their place in its queue, their slot.
  const array expert = flatten(transpose(choice));                                    // (kT)
  const array onehot = astype(equal(reshape(expert, {k * t, 1}), reshape(arange(e, int32), {1, e})), int32);
  const array place = subtract(take_along_axis(cumsum(onehot, 0), reshape(expert, {k * t, 1}), 1), array(1, int32));
  const array placed = flatten(place);
  const array kept = less(placed, array(c, int32));
  const array slot = where(kept, add(multiply(expert, array(c, int32)), placed), array(e * c, int32));  // E*C: none
  const array token = flatten(broadcast_to(reshape(arange(t, int32), {1, t}), {k, t}));
  // Slot -> its token (T: the zero row), then the tokens in slots: (E, C, dims).
  const array owner = slice(put_along_axis(full({e * c + 1}, t, int32), slot, token, 0), {0}, {e * c});
  const array rows = concatenate({xt, zeros({1, dims_}, xt.dtype())}, 0);
  array dispatched = reshape(take(rows, owner, 0), {e, c, dims_});
  // Expert parallelism: every rank's slots for this rank's experts, (E/N, N * C, dims).
  if (n > 1) {
    dispatched = distributed::all_to_all(dispatched, *group_);                          // (N * E/N, C, d): by source
    dispatched = reshape(transpose(reshape(dispatched, {n, local_, c, dims_}), {1, 0, 2, 3}), {local_, n * c, dims_});
  }
  const array h = activation_(add(matmul(dispatched, experts.w1), expand_dims(experts.b1, 1)));
  array out = add(matmul(h, experts.w2), expand_dims(experts.b2, 1));                  // (E/N, N * C, d)
  if (n > 1) {
    out = reshape(transpose(reshape(out, {local_, n, c, dims_}), {1, 0, 2, 3}), {e, c, dims_});
    out = distributed::all_to_all(out, *group_);                                       // back to the tokens' rank
  }
  // Each pair's output, weighted by its gate (a dropped pair reads the zero row), summed per token.
  const array outs = concatenate({reshape(out, {e * c, dims_}), zeros({1, dims_}, out.dtype())}, 0);
  const array per_pair = reshape(take(outs, slot, 0), {k, t, dims_});
  const array weights = astype(expand_dims(transpose(gates), -1), per_pair.dtype());
  const array y = reshape(sum(multiply(per_pair, weights), 0), x.shape());
  // Switch's load-balancing loss: E * sum_e (share of the pairs sent to e) * (mean probability of e).
  const array share = divide(astype(sum(onehot, 0), float32), array(static_cast<float>(k * t)));
  const array aux = multiply(sum(multiply(share, mean(probs, 0))), array(static_cast<float>(e)));
  const array dropped = subtract(array(1.0f), divide(astype(sum(astype(kept, int32)), float32), array(static_cast<float>(k * t))));
  return {y, aux, dropped};
}

array MoE::operator()(const array& x) {
  last_ = forward(x);
  return last_->y;
}

const MoEOutput& MoE::last() const {
  if (!last_) throw std::logic_error("[nn::MoE::last] the layer has not been called");
  return *last_;
}

}  // namespace loom::nn

#include "loom/nn/pipeline.h"

#include <algorithm>
#include <stdexcept>

#include "loom/ops/autocast.h"
#include "loom/ops/graph.h"
#include "loom/ops/ops.h"
#include "loom/ops/utils.h"

namespace loom::nn {

using loom::detail::msg;
using loom::detail::shape_str;
namespace dist = distributed;

namespace detail {

std::vector<PipelineAction> pipeline_actions(PipelineSchedule schedule, int stages, int micro_batches, int stage) {
  std::vector<PipelineAction> out;
  const int m = micro_batches;
  if (schedule == PipelineSchedule::gpipe) {
    for (int i = 0; i < m; ++i) out.push_back({true, i});
    for (int i = 0; i < m; ++i) out.push_back({false, i});
    return out;
  }
  const int warmup = std::min(stages - 1 - stage, m);
  for (int i = 0; i < warmup; ++i) out.push_back({true, i});
  for (int k = 0; k + warmup < m; ++k) {
    out.push_back({true, warmup + k});
    out.push_back({false, k});
  }
  for (int k = m - warmup; k < m; ++k) out.push_back({false, k});
  return out;
}

std::vector<PipelineMessage> pipeline_messages(PipelineSchedule schedule, int stages, int micro_batches, int stage,
                                               bool backward) {
  using M = PipelineMessage;
  std::vector<M> out;
  const int last = stages - 1;
  std::vector<PipelineAction> actions;
  if (backward) {
    actions = pipeline_actions(schedule, stages, micro_batches, stage);
  } else {
    for (int i = 0; i < micro_batches; ++i) actions.push_back({true, i});
  }
  for (const PipelineAction& a : actions) {
    if (a.forward) {
      if (stage > 0) out.push_back({M::activation, false, a.micro_batch, stage - 1, false});
      if (stage < last) out.push_back({M::activation, true, a.micro_batch, stage + 1, false});
    } else {
      if (stage < last) out.push_back({M::gradient, false, a.micro_batch, stage + 1, false});
      if (stage > 0) out.push_back({M::gradient, true, a.micro_batch, stage - 1, false});
    }
  }
  // The loss, from the last stage to each of the others.
  if (stage == last) {
    for (int r = 0; r < last; ++r) out.push_back({M::loss, true, 0, r, false});
  } else {
    out.push_back({M::loss, false, 0, last, false});
  }
  for (size_t k = 0; k + 1 < out.size(); ++k) {
    out[k].with_next = out[k].send && !out[k + 1].send && out[k].peer == out[k + 1].peer;
  }
  return out;
}

}  // namespace detail

namespace {

const char* schedule_name(PipelineSchedule s) { return s == PipelineSchedule::gpipe ? "GPipe" : "1F1B"; }

std::vector<int> split_layers(size_t layers, int stages, std::vector<int> sizes) {
  if (static_cast<int>(layers) < stages) {
    throw std::invalid_argument(msg("[nn::Pipeline] ", layers, " layers cannot be split into ", stages,
                                    " stages: each stage needs at least one layer"));
  }
  if (sizes.empty()) {
    for (int s = 0; s < stages; ++s) sizes.push_back(static_cast<int>(layers) / stages + (s < static_cast<int>(layers) % stages));
    return sizes;
  }
  int64_t total = 0;
  bool positive = true;
  for (int n : sizes) total += n, positive = positive && n > 0;
  if (static_cast<int>(sizes.size()) != stages || !positive || total != static_cast<int64_t>(layers)) {
    std::string list;
    for (int n : sizes) list += (list.empty() ? "" : ", ") + std::to_string(n);
    throw std::invalid_argument(msg("[nn::Pipeline] stage sizes {", list, "} do not split ", layers, " layers into ",
                                    stages, " stages of at least one layer each"));
  }
  return sizes;
}

}  // namespace

Pipeline::Pipeline(Sequential& model, dist::Group group, std::vector<int> stage_sizes)
    : group_(std::move(group)), sizes_(split_layers(model.size(), group_.size(), std::move(stage_sizes))),
      stage_(group_.rank()) {
  for (int s = 0; s < stage_; ++s) first_ += static_cast<size_t>(sizes_[s]);
  end_ = first_ + static_cast<size_t>(sizes_[stage_]);
  for (size_t i = 0; i < model.size(); ++i) {
    layers_.push_back(model.shared_layer(i));
    calls_.push_back(model.call(i));
    Module* layer = layers_.back().get();
    if (!layer) continue;
    if (i >= first_ && i < end_) {
      register_module("layers." + std::to_string(i), *layer);
    } else {
      // Another stage's layer: only its shapes are needed here (input_boundary), so its arrays give way
      // to unevaluated placeholders and whatever they held is freed.
      // In evaluation mode, so that finding shapes draws no dropout masks from this rank's generator.
      layer->update(tree_map(layer->parameters(), [](const array& p) { return zeros(p.shape(), p.dtype()); }));
      layer->eval();
    }
  }
}

array Pipeline::apply(size_t begin, size_t end, const array& x) const {
  array y = x;
  for (size_t i = begin; i < end; ++i) y = calls_[i](y);
  return y;
}

Pipeline::Boundary Pipeline::input_boundary(const array& micro_x, std::optional<Dtype> compute_dtype) {
  if (stage_ == 0) return {micro_x.shape(), micro_x.dtype()};
  const auto key = std::make_tuple(micro_x.shape(), static_cast<int>(micro_x.dtype().val),
                                   compute_dtype ? static_cast<int>(compute_dtype->val) : -1);
  auto it = boundaries_.find(key);
  if (it != boundaries_.end()) return it->second;
  // The earlier stages' layers on a placeholder: a graph that is only looked at, never evaluated.
  const array y = apply(0, first_, zeros(micro_x.shape(), micro_x.dtype()));
  return boundaries_.emplace(key, Boundary{y.shape(), y.dtype()}).first->second;
}

PipelineStep Pipeline::value_and_grad(const array& x, const array& y, const LossFn& loss_fn, int micro_batches,
                                      PipelineSchedule schedule, std::optional<Dtype> compute_dtype) {
  return run(x, y, loss_fn, micro_batches, schedule, compute_dtype, true);
}

array Pipeline::loss(const array& x, const array& y, const LossFn& loss_fn, int micro_batches,
                     std::optional<Dtype> compute_dtype) {
  return run(x, y, loss_fn, micro_batches, PipelineSchedule::gpipe, compute_dtype, false).loss;
}

PipelineStep Pipeline::run(const array& x, const array& y, const LossFn& loss_fn, int micro_batches,
                           PipelineSchedule schedule, std::optional<Dtype> compute_dtype, bool backward) {
  const char* op = backward ? "[nn::Pipeline::value_and_grad]" : "[nn::Pipeline::loss]";
  if (micro_batches < 1) throw std::invalid_argument(msg(op, " needs at least one micro-batch, got ", micro_batches));
  if (x.ndim() == 0 || y.ndim() == 0) {
    throw std::invalid_argument(msg(op, " x and y need a batch axis; got shapes ", shape_str(x.shape()), " and ",
                                    shape_str(y.shape())));
  }
  if (x.shape(0) % micro_batches != 0 || y.shape(0) != x.shape(0)) {
    throw std::invalid_argument(msg(op, " a batch of ", x.shape(0), " (x ", shape_str(x.shape()), ", y ",
                                    shape_str(y.shape()), ") cannot be split into ", micro_batches,
                                    " equal micro-batches of x and y"));
  }
  if (compute_dtype) Autocast check(*compute_dtype);  // rejects a dtype the policy has no use for, now
  std::optional<Autocast> mixed;
  if (compute_dtype) mixed.emplace(*compute_dtype);

  const int p = num_stages(), s = stage_, m = micro_batches, last = p - 1;
  const int per = x.shape(0) / m;
  auto micro = [per](const array& a, int i) {
    Shape lo(a.ndim(), 0), hi = a.shape();
    lo[0] = i * per;
    hi[0] = (i + 1) * per;
    return slice(a, lo, hi);
  };
  const Boundary in = input_boundary(micro(x, 0), compute_dtype);

  // Every rank checks that all run this step: the same schedule, micro-batches, split and data.
  const std::string plan =
      msg("nn::Pipeline ", backward ? schedule_name(schedule) : "forward", " step of ", m, " micro-batches, x ",
          to_string(x.dtype()), " ", shape_str(x.shape()), ", y ", to_string(y.dtype()), " ", shape_str(y.shape()),
          compute_dtype ? msg(", compute ", to_string(*compute_dtype)) : std::string(), ", stages of ",
          [&] {
            std::string l;
            for (int n : sizes_) l += (l.empty() ? "" : "+") + std::to_string(n);
            return l;
          }(),
          " layers");
  array token = dist::agree(plan, group_);

  // The messages, in this stage's order; each starts after the one before it (token), and a receive
  // also after the pass before it (order): a stage receives a micro-batch once it is ready to work
  // on it. (Where eval runs messages inline, blocking, a receive started early would hold up the
  // pass that the peer is waiting for.)
  array order = token;  // the last pass's result: the next pass's input waits for it (depends)
  const std::vector<detail::PipelineMessage> messages = detail::pipeline_messages(schedule, p, m, s, backward);
  size_t next = 0;
  std::map<std::pair<int, int>, array> received;  // (kind, micro-batch) -> what arrived
  std::map<int, Boundary> out_shape;  // micro-batch -> this stage's output (its gradient comes back)
  // What a receive brings: an activation this stage's input, a gradient what this stage sent forward
  // for that micro-batch, the loss a float32 scalar.
  auto incoming = [&](const detail::PipelineMessage& g) -> Boundary {
    if (g.kind == detail::PipelineMessage::activation) return in;
    if (g.kind == detail::PipelineMessage::loss) return {Shape{}, float32};
    return out_shape.at(g.micro_batch);
  };
  auto receive = [&](detail::PipelineMessage::Kind kind, int i) -> array {
    auto it = received.find({kind, i});
    if (it != received.end()) {
      array a = it->second;
      received.erase(it);
      return a;
    }
    const detail::PipelineMessage& g = messages.at(next);
    if (g.send || g.kind != kind || (kind != detail::PipelineMessage::loss && g.micro_batch != i)) {
      throw std::logic_error(msg(op, " internal: the schedule's messages are out of order at message ", next));
    }
    ++next;
    const Boundary b = incoming(g);
    token = dist::recv(b.shape, b.dtype, g.peer, {token, order}, group_);
    return token;
  };
  auto post = [&](detail::PipelineMessage::Kind kind, int i, const array& data) {
    const detail::PipelineMessage& g = messages.at(next);
    if (!g.send || g.kind != kind || (kind != detail::PipelineMessage::loss && g.micro_batch != i)) {
      throw std::logic_error(msg(op, " internal: the schedule's messages are out of order at message ", next));
    }
    ++next;
    if (!g.with_next) {
      token = dist::send(data, g.peer, {token}, group_);
      return;
    }
    const detail::PipelineMessage& r = messages.at(next++);
    const Boundary b = incoming(r);
    token = dist::send_recv(data, g.peer, b.shape, b.dtype, r.peer, {token}, group_);
    received.emplace(std::make_pair(static_cast<int>(r.kind), r.micro_batch), token);
  };

  const ParamTree params = trainable_parameters();
  const std::vector<array> values = params.values();
  const size_t n = values.size();
  std::vector<VjpFn> pullbacks(m);
  std::vector<array> acc;   // the gradients so far, summed in micro-batch order
  array loss_sum = array(0.0f);
  bool have_loss = false;

  const std::vector<detail::PipelineAction> actions =
      backward ? detail::pipeline_actions(schedule, p, m, s) : [m] {
        std::vector<detail::PipelineAction> f;
        for (int i = 0; i < m; ++i) f.push_back({true, i});
        return f;
      }();
  for (const detail::PipelineAction& a : actions) {
    const int i = a.micro_batch;
    if (a.forward) {
      array input = s == 0 ? micro(x, i) : receive(detail::PipelineMessage::activation, i);
      input = depends({input}, {order})[0];
      const array target = s == last ? micro(y, i) : array(0.0f);
      VectorFn stage_fn = [&](const std::vector<array>& v) {
        std::vector<array> p_only(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(n));
        update(tree_unflatten(params, p_only));
        array out = apply(first_, end_, backward && s > 0 ? v[n] : input);
        if (s == last) out = loss_fn(out, target);
        return std::vector<array>{out};
      };
      struct Restore {  // the stage keeps its real parameters even when a layer throws
        Module& mod;
        const ParamTree& p;
        ~Restore() { mod.update(p); }
      } restore{*this, params};
      array out = array(0.0f);
      if (backward) {
        std::vector<array> primals = values;
        if (s > 0) primals.push_back(input);
        auto [outs, pullback] = vjp(stage_fn, primals);
        out = outs[0];
        pullbacks[i] = std::move(pullback);
      } else {
        out = stage_fn(values)[0];
      }
      if (s == last) {
        if (out.ndim() != 0) {
          throw std::invalid_argument(msg(op, " loss_fn must return a scalar (the micro-batch's mean); got shape ",
                                          shape_str(out.shape())));
        }
        loss_sum = have_loss ? add(loss_sum, out) : out;
        have_loss = true;
      } else {
        out_shape[i] = {out.shape(), out.dtype()};
        post(detail::PipelineMessage::activation, i, out);
      }
      order = out;
    } else {
      // (On the last stage the seed waits for the pass before, as a received gradient does.)
      const array cot = s == last ? depends({full({}, 1.0 / m, loss_sum.dtype())}, {order})[0]
                                  : receive(detail::PipelineMessage::gradient, i);
      std::vector<array> g = pullbacks[i]({cot});
      pullbacks[i] = nullptr;  // the micro-batch's forward graph goes once its backward is built
      if (s > 0) {
        post(detail::PipelineMessage::gradient, i, g[n]);
        g.pop_back();
      }
      if (acc.empty()) {
        acc = std::move(g);
      } else {
        for (size_t k = 0; k < n; ++k) acc[k] = add(acc[k], g[k]);
      }
      order = n == 0 ? (s > 0 ? token : order) : depends({token}, acc)[0];
    }
  }
  // The loss: the mean on the last stage, sent from there to every other stage.
  array loss_value = array(0.0f);
  if (s == last) {
    loss_value = astype(divide(loss_sum, array(static_cast<float>(m), loss_sum.dtype())), float32);
    for (int r = 0; r < last; ++r) post(detail::PipelineMessage::loss, 0, loss_value);
  } else {
    loss_value = receive(detail::PipelineMessage::loss, 0);
  }
  if (next != messages.size()) {
    throw std::logic_error(msg(op, " internal: ", messages.size() - next, " of the schedule's messages were not built"));
  }
  // Whatever is evaluated of the step (its loss or its gradients) runs all of the step's messages.
  PipelineStep step{depends({loss_value}, {token})[0], ParamTree{}};
  if (backward && n > 0) step.grads = tree_unflatten(params, depends(acc, {token}));
  return step;
}

}  // namespace loom::nn

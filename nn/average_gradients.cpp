#include "loom/nn/average_gradients.h"

#include <cmath>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "loom/core/eval.h"
#include "loom/ops/graph.h"
#include "loom/ops/ops.h"

namespace loom::nn {

namespace {

// The sum or mean over the group of one bucket: one gradient alone, or several as one flat array
// (all_*_flat lets their producers write straight into its buffer). With a communication dtype the
// casts write there instead, and the sum is cast back and divided in one fused pass.
array reduce_bucket(const std::vector<array>& xs, std::optional<Dtype> comm, const distributed::Group& g, bool mean) {
  if (!comm) {
    if (xs.size() == 1) return mean ? distributed::all_mean(xs[0], g) : distributed::all_sum(xs[0], g);
    return mean ? distributed::all_mean_flat(xs, g) : distributed::all_sum_flat(xs, g);
  }
  std::vector<array> cast;
  for (const array& x : xs) cast.push_back(astype(x, *comm));
  array sum = astype(cast.size() == 1 ? distributed::all_sum(cast[0], g) : distributed::all_sum_flat(cast, g),
                     xs[0].dtype());
  return mean ? sum * (1.0 / g.size()) : sum;
}

// Buckets of consecutive gradients, newest (last) first: at most `limit` bytes of one dtype, a larger
// gradient alone; `limit` <= 0, every gradient alone.
std::vector<std::vector<size_t>> buckets(const ParamTree& grads, std::ptrdiff_t limit) {
  const auto items = grads.begin();
  std::vector<std::vector<size_t>> out;
  std::ptrdiff_t bytes_in_last = 0;
  for (size_t i = grads.size(); i-- > 0;) {
    const array& gr = items[i].second;
    const auto bytes = static_cast<std::ptrdiff_t>(gr.nbytes());
    const bool fits = limit > 0 && !out.empty() && items[out.back()[0]].second.dtype() == gr.dtype() &&
                      bytes_in_last + bytes <= limit;
    if (!fits) {
      out.emplace_back();
      bytes_in_last = 0;
    }
    out.back().push_back(i);
    bytes_in_last += bytes;
  }
  return out;
}

void check_gradients(const ParamTree& grads, std::optional<Dtype> communication_type) {
  if (communication_type && !is_floating_point(*communication_type)) {
    throw std::invalid_argument("[average_gradients] communication_type must be floating point, got " +
                                to_string(*communication_type));
  }
  for (const auto& [name, gr] : grads) {
    if (!is_floating_point(gr.dtype())) {
      throw std::invalid_argument("[average_gradients] gradient '" + name + "' has dtype " +
                                  to_string(gr.dtype()) + "; gradients are floating point");
    }
  }
}

// Join's count: this rank's contribution (1 with data, 0 without), appended to the first bucket.
struct JoinCount {
  float mine;
  bool divide_by_size;
  std::optional<array>* count;  // out: the first bucket's count part (float32), divided by the size if meaned
};

ParamTree average(const ParamTree& grads, std::ptrdiff_t all_reduce_size, std::optional<Dtype> communication_type,
                  const distributed::Group& g, const JoinCount* join) {
  check_gradients(grads, communication_type);
  const auto items = grads.begin();  // (name, gradient) by position
  const bool mean = !join || join->divide_by_size;
  std::vector<array> averaged;
  averaged.reserve(grads.size());
  for (size_t i = 0; i < grads.size(); ++i) averaged.push_back(items[i].second);
  std::optional<array> scale;  // 1 / (ranks with data), when a join divides by them
  const auto all = buckets(grads, all_reduce_size);
  std::optional<array> previous_count;
  for (size_t b = 0; b < all.size(); ++b) {
    const std::vector<size_t>& bucket = all[b];
    std::vector<array> parts_in;
    std::vector<Shape> shapes;
    for (size_t i : bucket) {
      parts_in.push_back(items[i].second);
      shapes.push_back(items[i].second.shape());
    }
    // Under a Join every bucket carries this rank's count (1 with data, 0 without; the first bucket's
    // is read), and bucket b's count depends on bucket b-1's gradients and count. So no bucket is ready before
    // the one made before it, and eval starts collectives ready together in the order they were made:
    // the buckets go in the order they are made here whatever produces the gradients, the same order
    // as on a rank averaging zeros.
    const bool with_count = join && b == 0;
    if (join) {
      array count = full({1}, join->mine, parts_in[0].dtype());
      if (previous_count) {
        std::vector<array> before{*previous_count};
        for (size_t i : all[b - 1]) before.push_back(items[i].second);
        count = depends({count}, before)[0];
      }
      previous_count = count;
      parts_in.push_back(count);
      shapes.push_back({1});
    }
    array reduced = reduce_bucket(parts_in, communication_type, g, mean);
    std::vector<array> parts = parts_in.size() == 1 ? std::vector<array>{reduced} : split_flat(reduced, shapes);
    if (with_count) {
      *join->count = astype(parts.back(), float32);
      if (!mean) scale = reciprocal(maximum(**join->count, array(1.0f)));
    }
    if (join) parts.pop_back();
    for (size_t k = 0; k < bucket.size(); ++k) {
      averaged[bucket[k]] = scale ? parts[k] * astype(*scale, parts[k].dtype()) : std::move(parts[k]);
    }
  }
  return tree_unflatten(grads, std::move(averaged));
}

}  // namespace

ParamTree average_gradients(const ParamTree& grads, std::ptrdiff_t all_reduce_size,
                            std::optional<Dtype> communication_type, std::optional<distributed::Group> group) {
  distributed::Group g = group ? *group : distributed::init();
  if (g.size() == 1) {
    check_gradients(grads, communication_type);
    return grads;
  }
  return average(grads, all_reduce_size, communication_type, g, nullptr);
}

ParamTree average_gradients(const ParamTree& grads, const std::vector<std::string>& local,
                            std::ptrdiff_t all_reduce_size, std::optional<Dtype> communication_type,
                            std::optional<distributed::Group> group) {
  std::set<std::string> mine(local.begin(), local.end());
  std::vector<std::pair<std::string, array>> shared;
  for (const auto& [name, g] : grads) {
    if (!mine.count(name)) shared.emplace_back(name, g);
  }
  if (shared.size() + mine.size() != grads.size()) {
    std::string missing;
    for (const std::string& n : mine) {
      if (!grads.contains(n)) missing += (missing.empty() ? "" : ", ") + n;
    }
    throw std::invalid_argument("[nn::average_gradients] local names not among the gradients: " + missing);
  }
  const distributed::Group g = group ? *group : distributed::init();
  const ParamTree averaged =
      shared.empty() ? ParamTree{} : average_gradients(tree_unflatten(shared), all_reduce_size, communication_type, g);
  std::vector<std::pair<std::string, array>> out;
  for (const auto& [name, grad] : grads) {
    if (!mine.count(name)) {
      out.emplace_back(name, averaged.at(name));
    } else {
      out.emplace_back(name, g.size() == 1 ? grad : divide(grad, array(static_cast<float>(g.size()), grad.dtype())));
    }
  }
  return tree_unflatten(out);
}

Join::Join(std::ptrdiff_t all_reduce_size, std::optional<Dtype> communication_type,
           std::optional<distributed::Group> group, bool divide_by_initial_size)
    : all_reduce_size_(all_reduce_size), communication_type_(communication_type),
      group_(group ? *group : distributed::init()), divide_by_initial_size_(divide_by_initial_size) {
  check_gradients({}, communication_type);
}

ParamTree Join::average(const ParamTree& grads, bool has_data) {
  if (grads.empty()) throw std::invalid_argument("[Join] there are no gradients to average");
  if (group_.size() == 1) {
    check_gradients(grads, communication_type_);
    active_ = array(has_data ? 1.0f : 0.0f);
    return grads;
  }
  const JoinCount count{has_data ? 1.0f : 0.0f, divide_by_initial_size_, &active_};
  return nn::average(grads, all_reduce_size_, communication_type_, group_, &count);
}

ParamTree Join::average_gradients(const ParamTree& grads) {
  if (finished_) throw std::logic_error("[Join] average_gradients after finish: this rank has already joined");
  return average(grads, true);
}

int Join::active() {
  if (!active_) throw std::logic_error("[Join] active() before any average");
  const float v = active_->item<float>() * (divide_by_initial_size_ ? group_.size() : 1);
  return static_cast<int>(std::lround(v));
}

int Join::finish(const ParamTree& like, const std::function<void(const ParamTree&)>& apply) {
  if (finished_) throw std::logic_error("[Join] finish called twice");
  finished_ = true;
  const ParamTree zeros = tree_map(like, [](const array& p) { return zeros_like(p); });
  int shadowed = 0;
  for (;;) {
    ParamTree avg = average(zeros, false);
    std::vector<array> outs{*active_};
    for (const auto& item : avg) outs.push_back(item.second);
    eval(outs);
    if (active() == 0) return shadowed;  // every rank is out of data: nothing to apply
    apply(avg);
    ++shadowed;
  }
}

GradientAccumulator::GradientAccumulator(int steps, std::ptrdiff_t all_reduce_size,
                                         std::optional<Dtype> communication_type,
                                         std::optional<distributed::Group> group)
    : steps_(steps),
      all_reduce_size_(all_reduce_size),
      communication_type_(communication_type),
      group_(group ? *group : distributed::init()) {
  if (steps < 1) {
    throw std::invalid_argument("[GradientAccumulator] steps must be at least 1, got " + std::to_string(steps));
  }
}

std::optional<ParamTree> GradientAccumulator::accumulate(const ParamTree& grads) {
  if (count_ > 0) {
    if (grads.size() != sum_.size()) {
      throw std::invalid_argument("[GradientAccumulator] got " + std::to_string(grads.size()) +
                                  " gradients after " + std::to_string(sum_.size()) + " in this step");
    }
    for (const auto& [name, g] : grads) {
      if (!sum_.contains(name) || sum_.at(name).shape() != g.shape()) {
        throw std::invalid_argument("[GradientAccumulator] gradient '" + name +
                                    "' does not match the ones accumulated in this step (name or shape)");
      }
    }
  }
  ++count_;
  const bool last = count_ == steps_;
  // The mean of the micro-batches: the last addition also scales, in the same fused pass.
  const double scale = 1.0 / steps_;
  ParamTree total = count_ == 1 ? grads : tree_map(sum_, grads, [](const array& s, const array& g) { return s + g; });
  if (!last) {
    sum_ = std::move(total);
    return std::nullopt;
  }
  if (steps_ > 1) total = tree_map(total, [scale](const array& s) { return s * scale; });
  reset();
  return average_gradients(total, all_reduce_size_, communication_type_, group_);
}

void GradientAccumulator::reset() {
  sum_ = ParamTree();
  count_ = 0;
}

}  // namespace loom::nn

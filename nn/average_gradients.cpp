#include "loom/nn/average_gradients.h"

#include <optional>
#include <stdexcept>
#include <vector>

#include "loom/ops/graph.h"
#include "loom/ops/ops.h"

namespace loom::nn {

namespace {

// The mean of one gradient.
array all_mean(const array& x, std::optional<Dtype> comm, const distributed::Group& g) {
  if (!comm) return distributed::all_mean(x, g);
  return astype(distributed::all_sum(astype(x, *comm), g), x.dtype()) * (1.0 / g.size());
}

// The mean of a bucket of gradients as one flat array. all_mean_flat divides as part of the
// collective and lets the gradients' producers write straight into its buffer; with a communication
// dtype the casts write there instead, and the sum is cast back and divided in one fused pass.
array all_mean_flat(const std::vector<array>& xs, std::optional<Dtype> comm, const distributed::Group& g) {
  if (!comm) return distributed::all_mean_flat(xs, g);
  std::vector<array> cast;
  for (const array& x : xs) cast.push_back(astype(x, *comm));
  return astype(distributed::all_sum_flat(cast, g), xs[0].dtype()) * (1.0 / g.size());
}

}  // namespace

ParamTree average_gradients(const ParamTree& grads, std::ptrdiff_t all_reduce_size,
                            std::optional<Dtype> communication_type, std::optional<distributed::Group> group) {
  distributed::Group g = group ? *group : distributed::init();
  const int n = g.size();
  if (n == 1) return grads;
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

  const auto items = grads.begin();  // (name, gradient) by position
  std::vector<std::optional<array>> averaged(grads.size());
  auto result = [&] {
    std::vector<array> out;
    out.reserve(averaged.size());
    for (auto& a : averaged) out.push_back(std::move(*a));
    return tree_unflatten(grads, std::move(out));
  };
  if (all_reduce_size <= 0) {
    for (size_t i = grads.size(); i-- > 0;) averaged[i] = all_mean(items[i].second, communication_type, g);
    return result();
  }

  // Buckets of consecutive gradients, newest (last) first.
  std::vector<size_t> bucket;
  std::ptrdiff_t bucket_bytes = 0;
  auto flush = [&] {
    if (bucket.empty()) return;
    if (bucket.size() == 1) {
      averaged[bucket[0]] = all_mean(items[bucket[0]].second, communication_type, g);
    } else {
      std::vector<array> parts_in;
      std::vector<Shape> shapes;
      parts_in.reserve(bucket.size());
      shapes.reserve(bucket.size());
      for (size_t i : bucket) {
        parts_in.push_back(items[i].second);
        shapes.push_back(items[i].second.shape());
      }
      std::vector<array> parts = split_flat(all_mean_flat(parts_in, communication_type, g), shapes);
      for (size_t k = 0; k < bucket.size(); ++k) averaged[bucket[k]] = std::move(parts[k]);
    }
    bucket.clear();
    bucket_bytes = 0;
  };
  for (size_t i = grads.size(); i-- > 0;) {
    const array& gr = items[i].second;
    const auto bytes = static_cast<std::ptrdiff_t>(gr.nbytes());
    bool fits = bucket.empty() ||
                (items[bucket[0]].second.dtype() == gr.dtype() && bucket_bytes + bytes <= all_reduce_size);
    if (!fits) flush();
    bucket.push_back(i);
    bucket_bytes += bytes;
  }
  flush();
  return result();
}

}  // namespace loom::nn

// The Optimizer base: name checks, the step counter, state bookkeeping and set_state.
#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <stdexcept>

#include "loom/ops/graph.h"
#include "loom/ops/ops.h"
#include "loom/ops/utils.h"
#include "loom/optim/optimizers.h"

namespace loom::optim {

using loom::detail::msg;
using loom::detail::shape_str;

namespace {

std::string join_names(const std::vector<std::string>& names, size_t max = 8) {
  std::string out;
  for (size_t i = 0; i < names.size() && i < max; ++i) out += (i ? ", " : "") + names[i];
  if (names.size() > max) out += msg(", ... (", names.size(), " in all)");
  return out;
}

constexpr const char* kStep = "step";

}  // namespace

void Optimizer::require(bool ok, const std::string& what, double value) const {
  if (!ok) throw std::invalid_argument(msg("[", name(), "] ", what, ", got ", value));
}

void Optimizer::check_learning_rate(const char* who) const {
  if (lr_.is_schedule()) return;
  const double lr = lr_(0);
  if (!(lr >= 0.0) || !std::isfinite(lr)) {
    throw std::invalid_argument(msg("[", who ? who : name(), "] learning_rate must be finite and >= 0, got ", lr));
  }
}

void Optimizer::update(nn::Module& model, const nn::ParamTree& grads) {
  if (sharding_) {
    sharded_update(model, grads);
    return;
  }
  model.update(apply_gradients(grads, model.trainable_parameters()));
}

void Optimizer::check_gradients(const nn::ParamTree& grads, const nn::ParamTree& params) const {
  // Names first: list everything that does not line up.
  std::vector<std::string> only_grads, only_params, bad;
  for (const auto& [n, g] : grads) {
    if (!params.contains(n)) only_grads.push_back(n);
  }
  for (const auto& [n, p] : params) {
    if (!grads.contains(n)) {
      only_params.push_back(n);
      continue;
    }
    const array& g = grads.at(n);
    if (g.shape() != p.shape()) {
      bad.push_back(msg(n, " (gradient ", shape_str(g.shape()), ", parameter ", shape_str(p.shape()), ")"));
    } else if (!is_floating_point(p.dtype())) {
      bad.push_back(msg(n, " (parameter dtype ", p.dtype(), " is not floating point)"));
    }
  }
  if (!only_grads.empty() || !only_params.empty()) {
    std::string m = msg("[", name(), "::apply_gradients] the gradients and parameters must have the same names");
    if (!only_grads.empty()) m += "; only in the gradients: " + join_names(only_grads);
    if (!only_params.empty()) m += "; only in the parameters: " + join_names(only_params);
    throw std::invalid_argument(m);
  }
  if (!bad.empty()) {
    throw std::invalid_argument(msg("[", name(), "::apply_gradients] mismatched gradients: ", join_names(bad)));
  }
}

nn::ParamTree Optimizer::apply_gradients(const nn::ParamTree& grads, const nn::ParamTree& params) {
  check_gradients(grads, params);
  const int64_t t = step_ + 1;
  const double lr = lr_(step_);
  if (!(lr >= 0) || !std::isfinite(lr)) {
    throw std::invalid_argument(
        msg("[", name(), "] the learning rate must be finite and non-negative, got ", lr, " at step ", step_));
  }

  // Build everything into temporaries so a throw leaves the optimizer as it was.
  nn::ParamTree new_params;
  std::vector<std::pair<std::string, array>> new_state;
  const std::vector<std::string> slots_known = slot_names();
  for (const auto& [n, p] : params) {
    Slots slots;
    for (const auto& s : slots_known) {
      const std::string key = n + "." + s;
      if (!state_.contains(key)) continue;
      const array& a = state_.at(key);
      const std::optional<Shape> want = slot_shape(s, p);
      if (!want) {
        throw std::invalid_argument(msg("[", name(), "::apply_gradients] state '", key, "' cannot belong to parameter '",
                                        n, "' of shape ", shape_str(p.shape())));
      }
      if (a.shape() != *want) {
        throw std::invalid_argument(msg("[", name(), "::apply_gradients] state '", key, "' has shape ",
                                        shape_str(a.shape()), " but parameter '", n, "' of shape ", shape_str(p.shape()),
                                        " needs ", shape_str(*want)));
      }
      slots.insert(s, astype(a, p.dtype()));
    }
    const array g = astype(grads.at(n), p.dtype());
    new_params.insert(n, apply_single(g, p, slots, t, lr));
    for (const auto& [s, a] : slots) new_state.emplace_back(n + "." + s, a);
  }
  for (auto& [k, a] : new_state) state_.insert(k, std::move(a));
  step_ = t;
  return new_params;
}

nn::ParamTree Optimizer::state() const {
  nn::ParamTree out;
  out.insert(kStep, array(step_, int64));
  for (const auto& [k, a] : state_) out.insert(k, a);
  return out;
}

void Optimizer::check_state(const nn::ParamTree& state, const nn::ParamTree& params) const {
  const std::vector<std::string> known = slot_names();
  std::vector<std::string> bad;
  if (sharding_) {  // this rank's slices: "flat.<dtype>.<slot>" of ceil(P / N) elements
    const std::vector<Flat> flats = flat_layout(params);
    for (const auto& [k, a] : state) {
      if (k == kStep) continue;
      std::optional<int64_t> want;
      for (const Flat& f : flats) {
        for (const auto& s : known) {
          if (k == f.name + "." + s) want = f.slice;
        }
      }
      if (!want) {
        bad.push_back(msg(k, " (not a slice of this sharded ", name(), "'s state)"));
      } else if (a.shape() != Shape{static_cast<int>(*want)}) {
        bad.push_back(msg(k, " (shape ", shape_str(a.shape()), ", this rank's slice is (", *want, "))"));
      }
    }
    if (!bad.empty()) {
      throw std::invalid_argument(msg("[", name(), "::check_state] state that does not fit the parameters: ",
                                      join_names(bad)));
    }
    return;
  }
  for (const auto& [k, a] : state) {
    if (k == kStep) continue;
    std::string problem = msg(k, " (no ", name(), " slot)");
    for (const auto& s : known) {
      if (k.size() <= s.size() + 1 || k.compare(k.size() - s.size() - 1, s.size() + 1, "." + s) != 0) continue;
      const std::string pname = k.substr(0, k.size() - s.size() - 1);
      if (!params.contains(pname)) {
        problem = msg(k, " (no parameter ", pname, ")");
        break;
      }
      const Shape& ps = params.at(pname).shape();
      const std::optional<Shape> want = slot_shape(s, params.at(pname));
      if (!want) {
        problem = msg(k, " (parameter ", pname, " of shape ", shape_str(ps), " keeps no '", s, "')");
      } else if (a.shape() != *want) {
        problem = msg(k, " (shape ", shape_str(a.shape()), ", parameter ", pname, " of shape ", shape_str(ps), " needs ",
                      shape_str(*want), ")");
      } else {
        problem.clear();
      }
      break;
    }
    if (!problem.empty()) bad.push_back(problem);
  }
  if (!bad.empty()) {
    throw std::invalid_argument(msg("[", name(), "::check_state] state that does not fit the parameters: ",
                                    join_names(bad)));
  }
}

void Optimizer::set_state(const nn::ParamTree& state) {
  const std::string who = msg("[", name(), "::set_state] ");
  if (!state.contains(kStep)) throw std::invalid_argument(who + "the state has no 'step' entry");
  array step_arr = state.at(kStep);
  if (step_arr.size() != 1 || !is_integral(step_arr.dtype())) {
    throw std::invalid_argument(msg(who, "'step' must be an integer scalar, got shape ", shape_str(step_arr.shape()),
                                    " of ", step_arr.dtype()));
  }
  const int64_t step = step_arr.item<int64_t>();
  if (step < 0) throw std::invalid_argument(msg(who, "'step' must be non-negative, got ", step));

  const std::vector<std::string> known = slot_names();
  std::vector<std::string> unknown;
  nn::ParamTree arrays;
  for (const auto& [k, a] : state) {
    if (k == kStep) continue;
    const bool ok = std::any_of(known.begin(), known.end(), [&k = k](const std::string& s) {
      return k.size() > s.size() + 1 && k.compare(k.size() - s.size(), s.size(), s) == 0 &&
             k[k.size() - s.size() - 1] == '.';
    });
    if (!ok) unknown.push_back(k);
    arrays.insert(k, a);
  }
  if (!unknown.empty()) {
    throw std::invalid_argument(msg(who, "names that are not ", name(), " state (slots ", join_names(known),
                                    "): ", join_names(unknown)));
  }
  if (!state_.empty()) {
    std::vector<std::string> missing, extra, shapes;
    for (const auto& [k, a] : state_) {
      if (!arrays.contains(k)) {
        missing.push_back(k);
      } else if (arrays.at(k).shape() != a.shape()) {
        shapes.push_back(msg(k, " ", shape_str(arrays.at(k).shape()), " instead of ", shape_str(a.shape())));
      }
    }
    for (const auto& [k, a] : arrays) {
      if (!state_.contains(k)) extra.push_back(k);
    }
    if (!missing.empty() || !extra.empty() || !shapes.empty()) {
      std::string m = who + "the state does not match this optimizer's";
      if (!missing.empty()) m += "; missing: " + join_names(missing);
      if (!extra.empty()) m += "; unexpected: " + join_names(extra);
      if (!shapes.empty()) m += "; wrong shapes: " + join_names(shapes);
      throw std::invalid_argument(m);
    }
  }
  state_ = std::move(arrays);
  step_ = step;
}

// ---- ZeRO: the state (and gradients) sharded across the ranks ----

void Optimizer::shard_state(std::optional<distributed::Group> group, int stage) {
  if (stage != 1 && stage != 2) {
    throw std::invalid_argument(msg("[", name(), "::shard_state] stage must be 1 or 2, got ", stage));
  }
  if (!elementwise()) {
    throw std::invalid_argument(msg("[", name(), "::shard_state] ", name(),
                                    " does not update each element on its own, so its state cannot be sharded"));
  }
  if (!state_.empty() || step_ != 0) {
    throw std::invalid_argument(msg("[", name(), "::shard_state] call it before the first update"));
  }
  sharding_ = Sharding{group ? *group : distributed::init(), stage};
}

namespace {

// Elements [begin, end) of the arrays flattened end to end, then padded with zeros: the pieces of the
// arrays that overlap the range, concatenated (nothing outside it is copied).
array flat_range(const std::vector<array>& xs, int64_t begin, int64_t end, Dtype dtype) {
  std::vector<array> pieces;
  int64_t offset = 0;
  for (const array& x : xs) {
    const int64_t n = static_cast<int64_t>(x.size()), lo = std::max(begin, offset), hi = std::min(end, offset + n);
    if (lo < hi) pieces.push_back(slice(reshape(x, {-1}), {int(lo - offset)}, {int(hi - offset)}));
    offset += n;
  }
  if (end > std::max(begin, offset)) pieces.push_back(zeros({int(end - std::max(begin, offset))}, dtype));
  return pieces.size() == 1 ? pieces[0] : concatenate(pieces, 0);
}

}  // namespace

std::vector<Optimizer::Flat> Optimizer::flat_layout(const nn::ParamTree& params) const {
  const int n = sharding_->group.size();
  std::vector<Flat> flats;
  const auto items = params.begin();
  for (size_t i = 0; i < params.size(); ++i) {
    const std::string name = msg("flat.", items[i].second.dtype());
    auto it = std::find_if(flats.begin(), flats.end(), [&](const Flat& f) { return f.name == name; });
    if (it == flats.end()) {
      flats.push_back({name, 0, 0, {}});
      it = flats.end() - 1;
    }
    it->members.push_back(i);
    it->size += static_cast<int64_t>(items[i].second.size());
  }
  for (Flat& f : flats) {
    f.slice = (f.size + n - 1) / n;
    if (f.slice * n > std::numeric_limits<int>::max()) {
      throw std::invalid_argument(msg("[", name(), "] the ", f.name.substr(5), " parameters hold ", f.size,
                                      " elements; a sharded update handles at most ", std::numeric_limits<int>::max()));
    }
  }
  return flats;
}

void Optimizer::sharded_update(nn::Module& model, const nn::ParamTree& grads) {
  const nn::ParamTree params = model.trainable_parameters();
  check_gradients(grads, params);
  const distributed::Group& g = sharding_->group;
  const int n = g.size(), r = g.rank();
  const auto items = params.begin();
  const std::vector<Flat> flats = flat_layout(params);
  nn::ParamTree flat_grads, flat_params;
  for (const Flat& f : flats) {
    const Dtype d = items[f.members[0]].second.dtype();
    std::vector<array> ps, gs;
    for (size_t i : f.members) {
      const auto& [pname, p] = items[i];
      ps.push_back(p);
      gs.push_back(astype(grads.at(pname), d));
    }
    const int64_t begin = r * f.slice, end = begin + f.slice;
    // Stage 2: the reduce-scatter hands this rank its slice of the sum alone; stage 1: the whole mean
    // (one flat all-reduce), of which this rank keeps its slice.
    array grad_slice = sharding_->stage == 2 ? distributed::sum_scatter(flat_range(gs, 0, f.slice * n, d), g) * (1.0 / n)
                                             : flat_range({distributed::all_mean_flat(gs, g)}, begin, end, d);
    flat_grads.insert(f.name, grad_slice);
    flat_params.insert(f.name, flat_range(ps, begin, end, d));
  }
  const nn::ParamTree updated = apply_gradients(flat_grads, flat_params);
  nn::ParamTree new_params = params;
  for (const Flat& f : flats) {
    std::vector<Shape> shapes;
    for (size_t i : f.members) shapes.push_back(items[i].second.shape());
    array whole = distributed::all_gather(updated.at(f.name), g);
    if (f.slice * n != f.size) whole = slice(whole, {0}, {int(f.size)});
    std::vector<array> parts = split_flat(whole, shapes);
    for (size_t j = 0; j < f.members.size(); ++j) new_params.insert(items[f.members[j]].first, parts[j]);
  }
  model.update(new_params);
}

nn::ParamTree Optimizer::gathered_state(const nn::ParamTree& params) const {
  nn::ParamTree out;
  if (!sharding_) {
    for (const auto& [k, a] : state_) out.insert(k, a);
    return out;
  }
  const distributed::Group& g = sharding_->group;
  const auto items = params.begin();
  for (const Flat& f : flat_layout(params)) {
    std::vector<Shape> shapes;
    for (size_t i : f.members) shapes.push_back(items[i].second.shape());
    for (const std::string& slot : slot_names()) {
      const std::string key = f.name + "." + slot;
      if (!state_.contains(key)) continue;
      array whole = distributed::all_gather(state_.at(key), g);
      if (f.slice * g.size() != f.size) whole = slice(whole, {0}, {int(f.size)});
      std::vector<array> parts = split_flat(whole, shapes);
      for (size_t j = 0; j < f.members.size(); ++j) out.insert(items[f.members[j]].first + "." + slot, parts[j]);
    }
  }
  return out;
}

}  // namespace loom::optim

// The Optimizer base: name checks, the step counter, state bookkeeping and set_state.
#include <algorithm>
#include <cmath>
#include <optional>
#include <stdexcept>

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
  model.update(apply_gradients(grads, model.trainable_parameters()));
}

nn::ParamTree Optimizer::apply_gradients(const nn::ParamTree& grads, const nn::ParamTree& params) {
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

}  // namespace loom::optim

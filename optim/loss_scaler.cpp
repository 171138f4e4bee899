#include "loom/optim/loss_scaler.h"

#include <cmath>
#include <sstream>
#include <stdexcept>

#include "loom/core/eval.h"
#include "loom/ops/ops.h"

namespace loom::optim {
namespace {
[[noreturn]] void bad(const std::string& what) {
  throw std::invalid_argument("[DynamicLossScaler] " + what);
}
std::string str(double v) {
  std::ostringstream os;
  os << v;
  return os.str();
}
}  // namespace

DynamicLossScaler::DynamicLossScaler(Options options, std::optional<distributed::Group> group)
    : options_(options), group_(std::move(group)), scale_(options.init_scale) {
  if (!(options.init_scale > 0) || !std::isfinite(options.init_scale)) {
    bad("init_scale must be finite and > 0; got " + str(options.init_scale));
  }
  if (!(options.growth_factor > 1) || !std::isfinite(options.growth_factor)) {
    bad("growth_factor must be finite and > 1; got " + str(options.growth_factor));
  }
  if (!(options.backoff_factor > 0 && options.backoff_factor < 1)) {
    bad("backoff_factor must be in (0, 1); got " + str(options.backoff_factor));
  }
  if (options.growth_interval < 1) bad("growth_interval must be >= 1; got " + std::to_string(options.growth_interval));
}

array DynamicLossScaler::scale(const array& loss) const {
  if (!is_floating_point(loss.dtype())) {
    std::ostringstream os;
    os << "scale needs a floating-point loss; got " << loss.dtype();
    bad(os.str());
  }
  return multiply(loss, array(scale_, loss.dtype()));
}

nn::ParamTree DynamicLossScaler::unscale(const nn::ParamTree& grads) const {
  nn::ParamTree out;
  for (const auto& [name, g] : grads) {
    // In float32 at least: 1 / 2^k is exact there, and a float16 gradient times a float16 reciprocal
    // of a large scale would go through float16's subnormals.
    const Dtype wide = promote_types(g.dtype(), float32);
    out.insert(name, astype(multiply(astype(g, wide), array(1.0 / scale_, wide)), g.dtype()));
  }
  return out;
}

bool DynamicLossScaler::step(Optimizer& optimizer, nn::Module& model, const nn::ParamTree& grads) {
  // One flag, 1 where any gradient holds an inf or a NaN, summed over the ranks: each rank then
  // reads the same count and takes the same decision.
  array overflow = array(false);
  for (const auto& [name, g] : grads) {
    if (is_inexact(g.dtype())) overflow = logical_or(overflow, any(logical_not(isfinite(g))));
  }
  array flag = astype(overflow, int32);
  const distributed::Group g = group_ ? *group_ : distributed::init();
  if (g.size() > 1) flag = distributed::all_sum(flag, g);
  const bool finite = flag.item<int32_t>() == 0;
  if (finite) {
    optimizer.update(model, unscale(grads));
    if (++good_steps_ >= options_.growth_interval) {
      scale_ *= options_.growth_factor;
      good_steps_ = 0;
    }
  } else {
    scale_ *= options_.backoff_factor;
    good_steps_ = 0;
    ++skipped_;
  }
  return finite;
}

nn::ParamTree DynamicLossScaler::state() const {
  return nn::ParamTree{{"scale", array(scale_, float64)}, {"good_steps", array(int64_t(good_steps_), int64)}};
}

void DynamicLossScaler::set_state(const nn::ParamTree& state) {
  for (const char* name : {"scale", "good_steps"}) {
    if (!state.contains(name)) bad(std::string("set_state: the state has no \"") + name + "\"");
    if (state.at(name).size() != 1) bad(std::string("set_state: \"") + name + "\" must be a scalar");
  }
  array s = astype(state.at("scale"), float64), n = astype(state.at("good_steps"), int64);
  eval({s, n});
  const double scale = s.item<double>();
  const int64_t good = n.item<int64_t>();
  if (!(scale > 0) || !std::isfinite(scale)) bad("set_state: scale must be finite and > 0; got " + str(scale));
  if (good < 0 || good >= options_.growth_interval) {
    bad("set_state: good_steps must be in [0, growth_interval = " + std::to_string(options_.growth_interval) +
        "); got " + std::to_string(good));
  }
  scale_ = scale;
  good_steps_ = static_cast<int>(good);
}

}  // namespace loom::optim

#include "loom/optim/checkpoint.h"

#include <algorithm>
#include <stdexcept>
#include <vector>

#include "loom/core/eval.h"
#include "loom/io/io.h"
#include "loom/ops/ops.h"
#include "loom/ops/random.h"
#include "loom/ops/utils.h"

namespace loom::optim {

using loom::detail::msg;
using loom::detail::shape_str;

namespace {

constexpr const char* kFormatKey = "loom.format";
constexpr const char* kFormat = "checkpoint/1";
constexpr const char* kOptimizerKey = "loom.optimizer";
constexpr const char* kStepKey = "loom.step";
constexpr const char* kModel = "model.";
constexpr const char* kOptim = "optimizer.";
constexpr const char* kRandom = "random.state";

bool starts_with(const std::string& s, const std::string& prefix) { return s.compare(0, prefix.size(), prefix) == 0; }

std::string join(const std::vector<std::string>& items, size_t max = 10) {
  std::string out;
  for (size_t i = 0; i < items.size() && i < max; ++i) out += (i ? ", " : "") + items[i];
  if (items.size() > max) out += msg(", ... (", items.size(), " in all)");
  return out;
}

}  // namespace

void save_checkpoint(const std::string& path, const nn::Module& model, const optim::Optimizer& optimizer,
                     const Metadata& metadata) {
  Metadata meta;
  for (const auto& [k, v] : metadata) {
    if (starts_with(k, "loom.")) {
      throw std::invalid_argument(msg("[save_checkpoint] metadata key '", k, "' uses the reserved prefix 'loom.'"));
    }
    meta.emplace(k, v);
  }
  meta[kFormatKey] = kFormat;
  meta[kOptimizerKey] = optimizer.name();
  meta[kStepKey] = std::to_string(optimizer.step());

  std::unordered_map<std::string, array> tensors;
  for (const auto& [name, a] : model.parameters()) tensors.emplace(kModel + name, a);
  for (const auto& [name, a] : optimizer.state()) tensors.emplace(kOptim + name, a);
  tensors.emplace(kRandom, random::get_state());
  save_safetensors(path, tensors, meta);
}

Metadata load_checkpoint(const std::string& path, nn::Module& model, optim::Optimizer& optimizer) {
  auto [tensors, meta] = load_safetensors(path);
  const std::string who = "[load_checkpoint] '" + path + "'";
  auto fmt = meta.find(kFormatKey);
  if (fmt == meta.end()) throw std::runtime_error(who + " is not a Loom checkpoint (no \"loom.format\" metadata)");
  if (fmt->second != kFormat) {
    throw std::runtime_error(msg(who, " has checkpoint format \"", fmt->second, "\"; this Loom reads \"", kFormat, "\""));
  }
  auto opt_name = meta.find(kOptimizerKey);
  if (opt_name == meta.end() || opt_name->second != optimizer.name()) {
    throw std::invalid_argument(msg(who, " holds the state of optimizer ",
                                    opt_name == meta.end() ? std::string("(none)") : opt_name->second, ", not ",
                                    optimizer.name()));
  }

  // Sort the file's tensors into the three groups.
  std::vector<std::string> names;
  for (const auto& kv : tensors) names.push_back(kv.first);
  std::sort(names.begin(), names.end());
  std::vector<std::string> stray, opt_names;
  for (const auto& n : names) {
    if (starts_with(n, kOptim)) {
      opt_names.push_back(n.substr(std::string(kOptim).size()));
    } else if (!starts_with(n, kModel) && n != kRandom) {
      stray.push_back(n);
    }
  }
  if (!stray.empty()) throw std::invalid_argument(msg(who, " has tensors that are not part of a checkpoint: ", join(stray)));
  const nn::ParamTree current = model.parameters();
  // The optimizer state in the model's parameter order ("step" first, slots by name within a
  // parameter), as the optimizer itself lists it after updating this model.
  nn::ParamTree opt_state;
  auto take = [&, &file = tensors](const std::string& n) { opt_state.insert(n, file.at(kOptim + n)); };
  if (std::find(opt_names.begin(), opt_names.end(), "step") != opt_names.end()) take("step");
  for (const auto& [pname, p] : current) {
    for (const auto& n : opt_names) {
      if (n.size() > pname.size() + 1 && starts_with(n, pname + ".") && n.find('.', pname.size() + 1) == std::string::npos) {
        take(n);
      }
    }
  }
  for (const auto& n : opt_names) {
    if (!opt_state.contains(n)) take(n);
  }

  // The model: exactly its names and shapes.
  std::vector<std::string> missing, unexpected, shapes;
  nn::ParamTree weights;
  for (const auto& [name, p] : current) {
    auto it = tensors.find(kModel + name);
    if (it == tensors.end()) {
      missing.push_back(name);
    } else if (it->second.shape() != p.shape()) {
      shapes.push_back(msg(name, " (file ", shape_str(it->second.shape()), ", model ", shape_str(p.shape()), ")"));
    } else {
      weights.insert(name, astype(it->second, p.dtype()));
    }
  }
  for (const auto& n : names) {
    if (starts_with(n, kModel) && !current.contains(n.substr(std::string(kModel).size()))) {
      unexpected.push_back(n.substr(std::string(kModel).size()));
    }
  }
  if (!missing.empty() || !unexpected.empty() || !shapes.empty()) {
    std::string m = who + " does not match the model";
    if (!missing.empty()) m += "; missing from the file: " + join(missing);
    if (!unexpected.empty()) m += "; not in the model: " + join(unexpected);
    if (!shapes.empty()) m += "; different shapes: " + join(shapes);
    throw std::invalid_argument(m);
  }

  auto rs = tensors.find(kRandom);
  if (rs == tensors.end()) throw std::invalid_argument(who + " has no \"random.state\" tensor");
  if ((rs->second.dtype() != uint32 && rs->second.dtype() != int32) || rs->second.shape() != Shape{2}) {
    throw std::invalid_argument(msg(who, " has a \"random.state\" of shape ", shape_str(rs->second.shape()), " and dtype ",
                                    rs->second.dtype(), " (a random key is uint32 of shape (2))"));
  }
  // Checkpoints written before keys became uint32 hold the key's words as int32 bit patterns.
  array random_state = rs->second;
  if (random_state.dtype() == int32) {
    const auto v = random_state.to_vector<int32_t>();
    const uint32_t w[2] = {static_cast<uint32_t>(v[0]), static_cast<uint32_t>(v[1])};
    random_state = array(w, Shape{2}, uint32);
  }

  // The optimizer state against the model's parameters (a fresh optimizer's set_state would leave
  // that to the next update, after the model had changed). Then change things: set_state validates
  // and throws before changing the optimizer. Their errors get the file's name (found by
  // fuzz_checkpoint: a slot name no optimizer has).
  try {
    optimizer.check_state(opt_state, current);
    optimizer.set_state(opt_state);
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument(who + " holds optimizer state that " + optimizer.name() + " refuses: " + e.what());
  }
  eval(weights);
  model.update(weights);
  random::set_state(random_state);

  Metadata user;
  for (const auto& [k, v] : meta) {
    if (!starts_with(k, "loom.")) user.emplace(k, v);
  }
  return user;
}

}  // namespace loom::optim

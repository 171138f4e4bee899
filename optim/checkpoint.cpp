#include "loom/optim/checkpoint.h"

#include <algorithm>
#include <filesystem>
#include <functional>
#include <stdexcept>
#include <unordered_set>
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
constexpr const char* kRanksKey = "loom.ranks";  // sharded checkpoints: the group size
constexpr const char* kRankKey = "loom.rank";    // and the rank whose part this is
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

// save_checkpoint's file from the trees it holds; `loom` adds reserved metadata.
void write_checkpoint(const char* op, const std::string& path, const nn::ParamTree& params, const nn::ParamTree& state,
                      const optim::Optimizer& optimizer, const Metadata& metadata, const Metadata& loom = {}) {
  Metadata meta;
  for (const auto& [k, v] : metadata) {
    if (starts_with(k, "loom.")) {
      throw std::invalid_argument(msg("[", op, "] metadata key '", k, "' uses the reserved prefix 'loom.'"));
    }
    meta.emplace(k, v);
  }
  for (const auto& [k, v] : loom) meta[k] = v;
  meta[kFormatKey] = kFormat;
  meta[kOptimizerKey] = optimizer.name();
  meta[kStepKey] = std::to_string(optimizer.step());

  std::unordered_map<std::string, array> tensors;
  for (const auto& [name, a] : params) tensors.emplace(kModel + name, a);
  for (const auto& [name, a] : state) tensors.emplace(kOptim + name, a);
  tensors.emplace(kRandom, random::get_state());
  save_safetensors(path, tensors, meta);
}

std::string shard_path(const std::string& path, int rank, int size) {
  return msg(path, ".rank", rank, "-of-", size);
}

Metadata load_checkpoint_file(const std::string& op, const std::string& path, nn::Module& model,
                              optim::Optimizer& optimizer, const std::function<void(const Metadata&)>& check_meta);

}  // namespace

void save_checkpoint(const std::string& path, const nn::Module& model, const optim::Optimizer& optimizer,
                     const Metadata& metadata) {
  write_checkpoint("save_checkpoint", path, model.parameters(), optimizer.state(), optimizer, metadata);
}

Metadata load_checkpoint(const std::string& path, nn::Module& model, optim::Optimizer& optimizer) {
  return load_checkpoint_file("load_checkpoint", path, model, optimizer, [&](const Metadata& meta) {
    auto ranks = meta.find(kRanksKey);
    if (ranks != meta.end() && ranks->second != "1") {
      throw std::invalid_argument(msg("[load_checkpoint] '", path, "' holds one rank's part of a run of ", ranks->second,
                                      " ranks: load it with load_sharded_checkpoint"));
    }
  });
}

namespace {

Metadata load_checkpoint_file(const std::string& op, const std::string& path, nn::Module& model,
                              optim::Optimizer& optimizer, const std::function<void(const Metadata&)>& check_meta) {
  auto [tensors, meta] = load_safetensors(path);
  const std::string who = "[" + op + "] '" + path + "'";
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
  check_meta(meta);

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

}  // namespace

void save_sharded_checkpoint(const std::string& path, const nn::Module& model, const optim::Optimizer& optimizer,
                             const distributed::Group& group, const Metadata& metadata) {
  write_checkpoint("save_sharded_checkpoint", shard_path(path, group.rank(), group.size()), model.parameters(),
                   optimizer.state(), optimizer, metadata,
                   {{kRanksKey, std::to_string(group.size())}, {kRankKey, std::to_string(group.rank())}});
}

Metadata load_sharded_checkpoint(const std::string& path, nn::Module& model, optim::Optimizer& optimizer,
                                 const distributed::Group& group) {
  const int n = group.size(), r = group.rank();
  const std::string mine = shard_path(path, r, n);
  if (!std::filesystem::exists(mine)) {
    // Name the rank count the checkpoint was written for, when its files are there.
    const std::filesystem::path p(path);
    const std::filesystem::path dir = p.has_parent_path() ? p.parent_path() : std::filesystem::path(".");
    const std::string stem = p.filename().string() + ".rank0-of-";
    std::error_code ec;
    for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
      const std::string f = e.path().filename().string();
      if (f.compare(0, stem.size(), stem) == 0) {
        throw std::invalid_argument(msg("[load_sharded_checkpoint] '", path, "' was written by ", f.substr(stem.size()),
                                        " ranks; this run has ", n));
      }
    }
  }
  // Every rank reads its file's step first and the ranks compare them, so that files of different
  // steps, or a file a rank cannot read, fail on every rank alike (a rank that threw alone would
  // leave the others waiting in the next collective). It reads the file twice: simple, and a
  // checkpoint is read once per run.
  int64_t step = -1;
  try {
    auto [tensors, meta] = load_safetensors(mine);
    auto it = meta.find(kStepKey);
    if (it != meta.end()) step = std::stoll(it->second);
  } catch (const std::exception&) {
    step = -1;  // unreadable: load_checkpoint_file below says why
  }
  array steps = distributed::all_gather(array({step}, int64), group);
  const std::vector<int64_t> all = steps.to_vector<int64_t>();
  if (std::any_of(all.begin(), all.end(), [&](int64_t s) { return s != all[0]; })) {
    std::string list;
    for (int i = 0; i < n; ++i) list += msg(i ? ", " : "", "rank ", i, ": ", all[i] < 0 ? std::string("unreadable") : std::to_string(all[i]));
    throw std::runtime_error(msg("[load_sharded_checkpoint] '", path, "': the ranks' files are not of one step (", list, ")"));
  }
  return load_checkpoint_file("load_sharded_checkpoint", mine, model, optimizer, [&](const Metadata& meta) {
    auto ranks = meta.find(kRanksKey), rank = meta.find(kRankKey);
    if (ranks == meta.end() || rank == meta.end()) {
      throw std::invalid_argument(msg("[load_sharded_checkpoint] '", mine, "' is not a sharded checkpoint"));
    }
    if (ranks->second != std::to_string(n) || rank->second != std::to_string(r)) {
      throw std::invalid_argument(msg("[load_sharded_checkpoint] '", mine, "' is rank ", rank->second, " of ",
                                      ranks->second, "; this is rank ", r, " of ", n));
    }
  });
}

namespace {
// The whole array of which `a` is this rank's Split slice: gathered along the split axis, and each
// part put together from every rank's slice of it.
array whole_of(const array& a, const nn::Module::Split& s) {
  const int n = s.group.size(), local = a.shape(s.axis);
  const array all = distributed::all_gather(contiguous(moveaxis(a, s.axis, 0)), s.group);  // rank r: rows r * local...
  std::vector<array> pieces;
  int offset = 0;
  for (int length : s.parts) {
    const int mine = length / n;
    for (int r = 0; r < n; ++r) {
      Shape start(all.ndim(), 0), stop = all.shape();
      start[0] = r * local + offset;
      stop[0] = start[0] + mine;
      pieces.push_back(slice(all, start, stop));
    }
    offset += mine;
  }
  return moveaxis(pieces.size() == 1 ? pieces[0] : concatenate(pieces, 0), 0, s.axis);
}
}  // namespace

void save_gathered_checkpoint(const std::string& path, const nn::Module& model, const optim::Optimizer& optimizer,
                              const distributed::Group& group, const Metadata& metadata) {
  const char* op = "save_gathered_checkpoint";
  std::unordered_map<std::string, nn::Module::Split> splits;
  for (const auto& [name, s] : model.splits()) {
    if (s.group.size() != group.size()) {
      throw std::invalid_argument(msg("[", op, "] '", name, "' is split across a group of ", s.group.size(),
                                      ", not across the ", group.size(), " ranks given"));
    }
    splits.emplace(name, s);
  }
  auto whole = [&](const std::string& name, const array& a) {
    auto it = splits.find(name);
    return it == splits.end() ? a : whole_of(a, it->second);
  };
  nn::ParamTree params, state;
  for (const auto& [name, a] : model.parameters()) params.insert(name, whole(name, a));
  const nn::ParamTree own = optimizer.state();
  state.insert("step", own.at("step"));
  for (const auto& [key, a] : optimizer.gathered_state(model.trainable_parameters())) {
    state.insert(key, whole(key.substr(0, key.rfind('.')), a));
  }
  eval(params, state);  // every rank takes part in the gathers
  if (group.rank() == 0) write_checkpoint(op, path, params, state, optimizer, metadata);
  eval(distributed::all_sum(array(1.0f), group));  // no rank returns before the file is there
}

}  // namespace loom::optim

#include "loom/nn/module.h"

#include <sstream>
#include <stdexcept>
#include <unordered_map>

#include "loom/core/eval.h"
#include "loom/io/io.h"
#include "loom/ops/ops.h"

namespace loom::nn {

namespace {

bool valid_name(const std::string& name) {
  if (name.empty() || name.front() == '.' || name.back() == '.') return false;
  return name.find("..") == std::string::npos;
}

// `name` lies under `target`: equal to it or a dotted descendant of it.
bool under(const std::string& name, const std::string& target) {
  return name == target || (name.size() > target.size() && name.compare(0, target.size(), target) == 0 &&
                            name[target.size()] == '.');
}

}  // namespace

void Module::add_entry(const std::string& name, Kind kind, array* value, Module* child) {
  if (!valid_name(name)) throw std::invalid_argument("[Module::register] invalid name '" + name + "'");
  for (const auto& e : entries_) {
    if (e.name == name) throw std::invalid_argument("[Module::register] the name '" + name + "' is already registered");
  }
  if (child == this) throw std::invalid_argument("[Module::register_module] a module cannot contain itself");
  entries_.push_back({name, kind, value, child, kind == Kind::buffer});
}

void Module::register_parameter(const std::string& name, array& param) {
  add_entry(name, Kind::parameter, &param, nullptr);
}

void Module::register_buffer(const std::string& name, array& buffer) {
  add_entry(name, Kind::buffer, &buffer, nullptr);
}

void Module::register_module(const std::string& name, Module& child) {
  add_entry(name, Kind::module, nullptr, &child);
}

// Calls visit(path, entry) for every parameter and buffer, depth first in registration order.
template <typename Visit>
void Module::walk(const std::string& prefix, Visit&& visit) const {
  for (const auto& e : entries_) {
    std::string path = prefix.empty() ? e.name : prefix + "." + e.name;
    if (e.kind == Kind::module) {
      e.child->walk(path, visit);
    } else {
      visit(path, e);
    }
  }
}

ParamTree Module::parameters() const {
  ParamTree out;
  walk("", [&](const std::string& path, const Entry& e) { out.insert(path, *e.value); });
  return out;
}

ParamTree Module::trainable_parameters() const {
  ParamTree out;
  walk("", [&](const std::string& path, const Entry& e) {
    if (!e.frozen) out.insert(path, *e.value);
  });
  return out;
}

ParamTree Module::buffers() const {
  ParamTree out;
  walk("", [&](const std::string& path, const Entry& e) {
    if (e.kind == Kind::buffer) out.insert(path, *e.value);
  });
  return out;
}

size_t Module::num_parameters() const {
  size_t n = 0;
  walk("", [&](const std::string&, const Entry& e) {
    if (e.kind == Kind::parameter) n += e.value->size();
  });
  return n;
}

void Module::update(const ParamTree& params) {
  std::unordered_map<std::string, array*> slots;
  walk("", [&](const std::string& path, const Entry& e) { slots.emplace(path, e.value); });
  // Check everything first so a bad update changes nothing.
  for (const auto& [name, value] : params) {
    auto it = slots.find(name);
    if (it == slots.end()) throw std::invalid_argument("[Module::update] the model has no parameter named '" + name + "'");
    if (it->second->shape() != value.shape()) {
      throw std::invalid_argument("[Module::update] '" + name + "' has shape " + detail::shape_str(it->second->shape()) +
                                  " but the update has shape " + detail::shape_str(value.shape()));
    }
  }
  for (const auto& [name, value] : params) *slots.at(name) = value;
}

void Module::set_frozen(const std::vector<std::string>& names, bool frozen, const char* op) {
  // Buffers stay frozen whatever is asked.
  auto apply = [&](const std::string& target) {
    bool found = false;
    std::vector<std::pair<std::string, Module*>> stack{{"", this}};
    while (!stack.empty()) {
      auto [prefix, m] = stack.back();
      stack.pop_back();
      for (auto& e : m->entries_) {
        std::string path = prefix.empty() ? e.name : prefix + "." + e.name;
        if (e.kind == Kind::module) {
          stack.emplace_back(path, e.child);
        } else if (target.empty() || under(path, target)) {
          found = true;
          if (e.kind == Kind::parameter) e.frozen = frozen;
        }
      }
    }
    if (!found && !target.empty()) {
      throw std::invalid_argument(std::string("[Module::") + op + "] no parameter or module named '" + target + "'");
    }
  };
  if (names.empty()) {
    apply("");
    return;
  }
  for (const auto& n : names) apply(n);
}

void Module::freeze(const std::vector<std::string>& names) { set_frozen(names, true, "freeze"); }
void Module::unfreeze(const std::vector<std::string>& names) { set_frozen(names, false, "unfreeze"); }

void Module::train(bool mode) {
  training_ = mode;
  for (auto& e : entries_) {
    if (e.kind == Kind::module) e.child->train(mode);
  }
}

std::vector<std::pair<std::string, Module*>> Module::modules() {
  std::vector<std::pair<std::string, Module*>> out;
  for (auto& e : entries_) {
    if (e.kind != Kind::module) continue;
    out.emplace_back(e.name, e.child);
    for (auto& [path, m] : e.child->modules()) out.emplace_back(e.name + "." + path, m);
  }
  return out;
}

void Module::save_weights(const std::string& path) const {
  ParamTree params = parameters();
  loom::eval(params);
  std::unordered_map<std::string, array> arrays;
  for (const auto& [name, value] : params) arrays.emplace(name, value);
  save_safetensors(path, arrays, {{"format", "loom"}});
}

void Module::load_weights(const std::string& path, bool strict) {
  auto loaded = load_safetensors(path).first;
  ParamTree current = parameters();
  ParamTree updates;
  std::vector<std::string> problems;
  for (const auto& [name, value] : current) {
    auto it = loaded.find(name);
    if (it == loaded.end()) {
      problems.push_back("missing from the file: " + name + " " + detail::shape_str(value.shape()));
      continue;
    }
    if (it->second.shape() != value.shape()) {
      problems.push_back("shape of " + name + ": model " + detail::shape_str(value.shape()) + ", file " +
                         detail::shape_str(it->second.shape()));
      continue;
    }
    updates.insert(name, it->second.dtype() == value.dtype() ? it->second : astype(it->second, value.dtype()));
  }
  for (const auto& [name, value] : loaded) {
    if (!current.contains(name)) problems.push_back("not in the model: " + name + " " + detail::shape_str(value.shape()));
  }
  if (strict && !problems.empty()) {
    std::ostringstream os;
    os << "[Module::load_weights] " << path << " does not match the model (" << problems.size() << " differences):";
    for (const auto& p : problems) os << "\n  " << p;
    throw std::invalid_argument(os.str());
  }
  update(updates);
}

}  // namespace loom::nn

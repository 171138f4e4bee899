#include "loom/nn/module.h"

#include <cxxabi.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <typeinfo>
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

// The innermost module of this thread whose construction may still be under way: a stack linked
// through the modules (trivially destructible, so modules destroyed after this thread's thread_local
// objects still find it). Modules close in stack order: one that closes closes all opened after it.
thread_local Module* open_tail = nullptr;

std::string demangled(const Module& m);

}  // namespace

Module::Module() {
  if (open_tail) {
    outer_ = open_tail;
    outer_->inside_.push_back(this);
  }
  open_prev_ = open_tail;
  open_tail = this;
  open_ = true;
}

Module::~Module() {
  close_construction();
  if (outer_) {
    auto& in = outer_->inside_;
    in.erase(std::remove(in.begin(), in.end(), this), in.end());
  }
  for (Module* m : inside_) {  // (a temporary built during another module's construction, say)
    m->outer_ = outer_;
    if (outer_) outer_->inside_.push_back(m);
  }
}

// Closes this module and every module opened after it: they were built inside it, so when its
// construction is over, so is theirs.
void Module::close_construction() const {
  if (!open_) return;
  while (open_tail != this) const_cast<Module*>(open_tail)->close_open_tail();
  const_cast<Module*>(this)->close_open_tail();
}

void Module::close_open_tail() {
  open_tail = open_prev_;
  open_prev_ = nullptr;
  open_ = false;
}

void Module::check_registration() const {
  close_construction();
  if (checked_) return;
  checked_ = true;
  std::vector<const Module*> todo{this};
  while (!todo.empty()) {
    const Module* p = todo.back();
    todo.pop_back();
    // p's members among the modules built while it was open: its registered children; and the
    // others, all of them when p's constructor body registered something (p was open until then,
    // after all its members were built), else (members declared as Child, or nothing registered,
    // so p may have stayed open past its constructor) only those lying inside p, before its last
    // registered child.
    const auto* lo = reinterpret_cast<const char*>(p);
    const char* hi = nullptr;
    for (const auto& e : p->entries_) {
      if (e.kind == Kind::module) hi = std::max(hi, reinterpret_cast<const char*>(e.child));
    }
    for (const Module* m : p->inside_) {
      const auto* a = reinterpret_cast<const char*>(m);
      // (A registered module sits inside_ the module that registered it last: add_child moves it.)
      const bool member = m->registered_ || p->built_ || (a > lo && a < hi);
      if (member) todo.push_back(m);
      if (!member || m->registered_ || m->checked_) continue;
      m->checked_ = true;  // warn once per module
      size_t n = 0;
      m->walk("", [&](const std::string&, const Entry& e) { n += e.kind == Kind::parameter ? e.value->size() : 0; });
      if (n == 0) continue;  // nothing is lost (an activation, say)
      std::fprintf(stderr,
                   "loom: warning: a %s with %zu parameters was built as part of a %s but never registered with "
                   "register_module: it is not trained, saved or loaded with it. Declare the member as "
                   "nn::Child<%s> name{this, \"name\", ...} or call register_module(\"name\", member).\n",
                   demangled(*m).c_str(), n, demangled(*p).c_str(), demangled(*m).c_str());
    }
  }
}

namespace {
// "nn::Linear" for loom::nn::Linear, the class name for a user's.
std::string demangled(const Module& m) {
  int status = 0;
  char* name = abi::__cxa_demangle(typeid(m).name(), nullptr, nullptr, &status);
  std::string out = status == 0 && name ? name : typeid(m).name();
  std::free(name);
  for (const std::string cut : {"loom::", "(anonymous namespace)::"}) {
    for (size_t at; (at = out.find(cut)) != std::string::npos;) out.erase(at, cut.size());
  }
  return out;
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

// A register_* call comes after the module's members are built (its constructor body runs last), so
// its construction is over.
void Module::register_parameter(const std::string& name, array& param) {
  close_construction();
  built_ = true;
  add_entry(name, Kind::parameter, &param, nullptr);
}

void Module::register_buffer(const std::string& name, array& buffer) {
  close_construction();
  built_ = true;
  add_entry(name, Kind::buffer, &buffer, nullptr);
}

void Module::register_module(const std::string& name, Module& child) {
  close_construction();
  built_ = true;
  add_child(name, child);
}

void Module::add_child(const std::string& name, Module& child) {
  add_entry(name, Kind::module, nullptr, &child);
  child.registered_ = true;
  // Everything opened after this module is built: the child, and the members declared before it.
  while (open_ && open_tail != this) const_cast<Module*>(open_tail)->close_open_tail();
  if (child.outer_ != this) {  // built inside a sibling that never closed (an activation, say)
    if (child.outer_) {
      auto& in = child.outer_->inside_;
      in.erase(std::remove(in.begin(), in.end(), &child), in.end());
    }
    child.outer_ = this;
    inside_.push_back(&child);
  }
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
  check_registration();
  ParamTree out;
  walk("", [&](const std::string& path, const Entry& e) { out.insert(path, *e.value); });
  return out;
}

ParamTree Module::trainable_parameters() const {
  check_registration();
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

void Module::update(const ParamTree& params, bool check_shapes) {
  std::unordered_map<std::string, array*> slots;
  walk("", [&](const std::string& path, const Entry& e) { slots.emplace(path, e.value); });
  // Check everything first so a bad update changes nothing.
  for (const auto& [name, value] : params) {
    auto it = slots.find(name);
    if (it == slots.end()) throw std::invalid_argument("[Module::update] the model has no parameter named '" + name + "'");
    if (check_shapes && it->second->shape() != value.shape()) {
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
        } else if (target.empty() || path_under(path, target)) {
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

void Module::set_split(const std::string& path, Split split) {
  for (auto& [p, sp] : splits_) {
    if (p == path) {
      sp = std::move(split);
      return;
    }
  }
  splits_.emplace_back(path, std::move(split));
}

std::vector<std::pair<std::string, Module::Split>> Module::splits() const {
  std::vector<std::pair<std::string, Split>> out = splits_;
  for (const auto& [prefix, m] : const_cast<Module*>(this)->modules()) {
    for (const auto& [path, sp] : m->splits_) out.emplace_back(prefix + "." + path, sp);
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

#include "loom/nn/tree.h"

#include <stdexcept>

namespace loom::nn {

ParamTree::ParamTree(std::initializer_list<value_type> items) {
  for (const auto& [name, value] : items) {
    if (contains(name)) throw std::invalid_argument("[ParamTree] duplicate name '" + name + "'");
    insert(name, value);
  }
}

ParamTree::ParamTree(std::vector<value_type> items) {
  for (auto& [name, value] : items) {
    if (contains(name)) throw std::invalid_argument("[ParamTree] duplicate name '" + name + "'");
    insert(name, std::move(value));
  }
}

ParamTree::Index& ParamTree::own_index() {
  if (!index_) {
    index_ = std::make_shared<Index>();
  } else if (index_.use_count() > 1) {
    index_ = std::make_shared<Index>(*index_);
  }
  return const_cast<Index&>(*index_);  // held by this tree alone
}

const array& ParamTree::at(const std::string& name) const {
  auto it = index_ ? index_->find(name) : Index::const_iterator();
  if (!index_ || it == index_->end()) throw std::out_of_range("[ParamTree] no entry named '" + name + "'");
  return items_[it->second].second;
}

array& ParamTree::at(const std::string& name) {
  return const_cast<array&>(static_cast<const ParamTree&>(*this).at(name));
}

void ParamTree::insert(const std::string& name, array value) {
  if (index_) {
    auto it = index_->find(name);
    if (it != index_->end()) {
      items_[it->second].second = std::move(value);
      return;
    }
  }
  own_index().emplace(name, items_.size());
  items_.emplace_back(name, std::move(value));
}

void ParamTree::erase(const std::string& name) {
  if (!contains(name)) return;
  Index& index = own_index();
  items_.erase(items_.begin() + static_cast<std::ptrdiff_t>(index.at(name)));
  index.clear();
  for (size_t i = 0; i < items_.size(); ++i) index.emplace(items_[i].first, i);
}

std::vector<std::string> ParamTree::names() const {
  std::vector<std::string> out;
  out.reserve(items_.size());
  for (const auto& item : items_) out.push_back(item.first);
  return out;
}

std::vector<array> ParamTree::values() const {
  std::vector<array> out;
  out.reserve(items_.size());
  for (const auto& item : items_) out.push_back(item.second);
  return out;
}

ParamTree ParamTree::subtree(const std::string& prefix) const {
  ParamTree out;
  const std::string head = prefix + ".";
  for (const auto& [name, value] : items_) {
    if (name.compare(0, head.size(), head) == 0) out.insert(name.substr(head.size()), value);
  }
  return out;
}

ParamTree ParamTree::same_names(const ParamTree& like) {
  ParamTree out;
  out.index_ = like.index_;
  out.items_.reserve(like.items_.size());
  return out;
}

ParamTree tree_map(const ParamTree& tree, const std::function<array(const array&)>& fn) {
  ParamTree out = ParamTree::same_names(tree);
  for (const auto& [name, value] : tree) out.items_.emplace_back(name, fn(value));
  return out;
}

ParamTree tree_map(const ParamTree& a, const ParamTree& b,
                   const std::function<array(const array&, const array&)>& fn) {
  if (a.size() != b.size()) {
    throw std::invalid_argument("[tree_map] the trees hold " + std::to_string(a.size()) + " and " +
                                std::to_string(b.size()) + " entries");
  }
  ParamTree out = ParamTree::same_names(a);
  for (const auto& [name, value] : a) {
    if (!b.contains(name)) throw std::invalid_argument("[tree_map] '" + name + "' is missing from the second tree");
    out.items_.emplace_back(name, fn(value, b.at(name)));
  }
  return out;
}

std::vector<std::pair<std::string, array>> tree_flatten(const ParamTree& tree) {
  return {tree.begin(), tree.end()};
}

ParamTree tree_unflatten(const std::vector<std::pair<std::string, array>>& items) { return ParamTree(items); }

ParamTree tree_unflatten(const ParamTree& like, std::vector<array> values) {
  if (like.size() != values.size()) {
    throw std::invalid_argument("[tree_unflatten] " + std::to_string(values.size()) + " arrays for a tree of " +
                                std::to_string(like.size()) + " names");
  }
  ParamTree out = ParamTree::same_names(like);
  for (size_t i = 0; i < values.size(); ++i) out.items_.emplace_back(like.items_[i].first, std::move(values[i]));
  return out;
}

void collect_arrays(std::vector<array>& out, const ParamTree& tree) {
  for (const auto& item : tree) out.push_back(item.second);
}

bool path_under(const std::string& name, const std::string& prefix) {
  return name == prefix || (name.size() > prefix.size() && name.compare(0, prefix.size(), prefix) == 0 &&
                            name[prefix.size()] == '.');
}

}  // namespace loom::nn

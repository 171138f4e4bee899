// Parameter trees: an ordered map from dotted names ("layers.0.weight") to arrays. Parameters,
// gradients and optimizer state all use it, so they line up name for name.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "loom/core/array.h"

namespace loom::nn {

class ParamTree {
 public:
  using value_type = std::pair<std::string, array>;
  using iterator = std::vector<value_type>::iterator;
  using const_iterator = std::vector<value_type>::const_iterator;

  ParamTree() = default;
  ParamTree(std::initializer_list<value_type> items);
  explicit ParamTree(std::vector<value_type> items);

  size_t size() const { return items_.size(); }
  bool empty() const { return items_.empty(); }
  bool contains(const std::string& name) const { return index_ && index_->count(name) != 0; }

  /// The array called `name`; throws std::out_of_range naming it when absent.
  const array& at(const std::string& name) const;
  array& at(const std::string& name);
  const array& operator[](const std::string& name) const { return at(name); }
  array& operator[](const std::string& name) { return at(name); }

  /// Adds `name` at the end, or replaces its array in place (keeping its position).
  void insert(const std::string& name, array value);
  /// Removes `name` if present.
  void erase(const std::string& name);

  std::vector<std::string> names() const;
  std::vector<array> values() const;

  iterator begin() { return items_.begin(); }
  iterator end() { return items_.end(); }
  const_iterator begin() const { return items_.begin(); }
  const_iterator end() const { return items_.end(); }

  /// The entries whose name starts with `prefix + "."`, with that prefix removed.
  ParamTree subtree(const std::string& prefix) const;

 private:
  using Index = std::unordered_map<std::string, size_t>;
  // Name -> position. Copies share it until one adds or removes a name (trees made from another,
  // by tree_map or tree_unflatten, then cost no hashing and no allocation per name).
  std::shared_ptr<const Index> index_;
  std::vector<value_type> items_;
  Index& own_index();
  // Trees with the names of another: they share its index and fill their items in its order.
  friend ParamTree tree_map(const ParamTree&, const std::function<array(const array&)>&);
  friend ParamTree tree_map(const ParamTree&, const ParamTree&, const std::function<array(const array&, const array&)>&);
  friend ParamTree tree_unflatten(const ParamTree&, std::vector<array>);
  static ParamTree same_names(const ParamTree& like);
};

/// A tree with the same names and `fn` applied to every array.
ParamTree tree_map(const ParamTree& tree, const std::function<array(const array&)>& fn);
/// `fn(a[name], b[name])` for every name; the trees must hold the same names (order of `a` is kept).
ParamTree tree_map(const ParamTree& a, const ParamTree& b, const std::function<array(const array&, const array&)>& fn);
/// The (name, array) pairs in order.
std::vector<std::pair<std::string, array>> tree_flatten(const ParamTree& tree);
/// A tree from (name, array) pairs; duplicate names throw.
ParamTree tree_unflatten(const std::vector<std::pair<std::string, array>>& items);
/// A tree with the names of `like` and the arrays of `values`, in order; the counts must agree.
ParamTree tree_unflatten(const ParamTree& like, std::vector<array> values);

/// Whether the dotted name `name` lies under `prefix`: equal to it or a dotted descendant of it
/// ("l1.weight" is under "l1", not under "l").
bool path_under(const std::string& name, const std::string& prefix);

/// Lets `eval(loss, model.parameters())` evaluate every array of a tree (found by ADL).
void collect_arrays(std::vector<array>& out, const ParamTree& tree);

}  // namespace loom::nn

// Sequential: applies its layers in order.
#pragma once

#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "loom/nn/module.h"

namespace loom::nn {

/// Layers applied one after the other, as MLX's nn.Sequential. A layer is a module held by
/// std::shared_ptr (or std::unique_ptr) whose call takes and returns one array, or a plain callable
/// `array(const array&)` such as nn::relu (no parameters). Layer i is registered as the child
/// "layers.i", so parameters are named "layers.0.weight", ...; callables take an index but register
/// nothing, as in MLX.
///
///     nn::Sequential mlp(std::make_shared<nn::Linear>(784, 512), nn::relu, std::make_shared<nn::Linear>(512, 10));
///     auto& head = mlp.emplace<nn::Linear>(10, 2);   // appended as "layers.3"
class Sequential : public Module {
 public:
  using Fn = std::function<array(const array&)>;

  Sequential() = default;
  template <typename First, typename... Rest>
  explicit Sequential(First&& first, Rest&&... rest) {
    append(std::forward<First>(first));
    (append(std::forward<Rest>(rest)), ...);
  }

  /// Appends a module; returns *this.
  template <typename M>
  Sequential& append(std::shared_ptr<M> layer) {
    static_assert(std::is_base_of_v<Module, M>, "Sequential::append: the layer must derive from nn::Module");
    static_assert(std::is_invocable_r_v<array, M&, const array&>,
                  "Sequential::append: the layer must be callable as array(const array&)");
    if (!layer) throw std::invalid_argument("[nn::Sequential] cannot append a null module");
    M* raw = layer.get();
    register_module("layers." + std::to_string(calls_.size()), *raw);
    calls_.push_back([raw](const array& x) -> array { return (*raw)(x); });
    modules_.push_back(std::move(layer));
    return *this;
  }
  template <typename M>
  Sequential& append(std::unique_ptr<M> layer) {
    return append(std::shared_ptr<M>(std::move(layer)));
  }
  /// Appends a parameter-free callable.
  template <typename F, typename = std::enable_if_t<std::is_invocable_r_v<array, F&, const array&> &&
                                                    !std::is_base_of_v<Module, std::decay_t<F>>>>
  Sequential& append(F fn) {
    calls_.push_back(Fn(std::move(fn)));
    modules_.push_back(nullptr);
    return *this;
  }

  /// Builds a module of type M in place at the end and returns it.
  template <typename M, typename... Args>
  M& emplace(Args&&... args) {
    auto layer = std::make_shared<M>(std::forward<Args>(args)...);
    M& ref = *layer;
    append(std::move(layer));
    return ref;
  }

  array operator()(const array& x) const;

  size_t size() const { return calls_.size(); }
  /// Layer i as a module (nullptr for a callable); throws std::out_of_range past the end.
  Module* layer(size_t i) const;
  /// Layer i as held, shared (nullptr for a callable), and its call: how nn::Pipeline keeps a stage's
  /// layers. Both throw std::out_of_range past the end.
  std::shared_ptr<Module> shared_layer(size_t i) const;
  const Fn& call(size_t i) const;
  /// Layer i as an M; throws std::invalid_argument if it is not one.
  template <typename M>
  M& get(size_t i) const {
    auto* m = dynamic_cast<M*>(layer(i));
    if (!m) throw std::invalid_argument("[nn::Sequential::get] layer " + std::to_string(i) + " has another type");
    return *m;
  }

 private:
  std::vector<std::shared_ptr<Module>> modules_;  // null for callables
  std::vector<Fn> calls_;
};

}  // namespace loom::nn

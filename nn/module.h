// nn::Module: the base of every layer and model. A module registers its parameters, buffers and
// child modules by name; parameters() walks them into a tree with dotted names.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "loom/autograd/compile.h"
#include "loom/autograd/transforms.h"
#include "loom/core/array.h"
#include "loom/distributed/distributed.h"
#include "loom/ops/autocast.h"
#include "loom/nn/tree.h"

namespace loom::detail {
/// f(in[0], ..., in[N - 1]) (compile_value_and_grad's traced call).
template <typename F, size_t... I>
auto call_with_first(F& f, const std::vector<array>& in, std::index_sequence<I...>) {
  return f(in[I]...);
}
}  // namespace loom::detail

namespace loom::nn {

template <class T>
class Child;

class Module {
 public:
  Module();
  virtual ~Module();
  // A module holds pointers to its own members, so it is neither copied nor moved; build it in
  // place (or hold it by std::unique_ptr / std::shared_ptr).
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;
  Module(Module&&) = delete;
  Module& operator=(Module&&) = delete;

  /// Every parameter and buffer as "child.name" paths, depth first in registration order: a
  /// module's entries come in the order of its register_* calls, a child's at the place it was
  /// registered. The first call warns (stderr, once) about any module with parameters that was
  /// built as part of this one (a member, say) but never registered: its parameters would be
  /// silently left out of training and checkpoints. Declare members as nn::Child to make that
  /// impossible.
  ParamTree parameters() const;
  /// The parameters that are not frozen (buffers never are trainable), in the same order.
  ParamTree trainable_parameters() const;
  /// The buffers alone (e.g. BatchNorm's running statistics).
  ParamTree buffers() const;
  /// Total number of elements of parameters() that are not buffers.
  size_t num_parameters() const;

  /// Replaces the named parameters and buffers with the given arrays. Every name must exist and,
  /// with `check_shapes`, every shape must match (shard_inplace gives each rank smaller slices);
  /// names not given keep their arrays.
  void update(const ParamTree& params, bool check_shapes = true);

  /// Freezes (excludes from trainable_parameters) everything, or the named parameters and modules
  /// ("l1" freezes all of l1, "l1.bias" just that).
  void freeze(const std::vector<std::string>& names = {});
  void unfreeze(const std::vector<std::string>& names = {});

  /// Training mode (dropout active, batch statistics) or evaluation mode, for this module and its
  /// children. Modules start in training mode.
  void train(bool mode = true);
  void eval() { train(false); }
  bool training() const { return training_; }

  /// Writes parameters() to a safetensors file (atomically).
  void save_weights(const std::string& path) const;
  /// Reads weights saved by save_weights. With `strict`, the file must hold exactly this model's
  /// names with the same shapes, or the error lists every difference; otherwise what matches loads
  /// and the rest is left alone. Arrays are cast to the parameter's dtype.
  void load_weights(const std::string& path, bool strict = true);

  /// Child modules by dotted path, depth first (this module itself is not listed).
  std::vector<std::pair<std::string, Module*>> modules();

  /// A parameter held as this rank's slice of a whole array split across `group`, in nn::shard's
  /// layout: along `axis`, each of the whole array's parts (`parts`: their lengths, e.g. three for a
  /// fused query/key/value weight) was cut into group.size() equal slices, and this rank holds its
  /// slice of every part, concatenated.
  struct Split {
    int axis;
    std::vector<int> parts;
    distributed::Group group;
  };
  /// Records that parameter `path` (this module's or a child's, dotted) is held as a Split;
  /// nn::shard_inplace, the tensor-parallel layers and nn::fully_shard record theirs, and
  /// optim::save_gathered_checkpoint gathers by them. A second record of a path replaces the first.
  void set_split(const std::string& path, Split split);
  /// Every recorded split of this module and its children, by the parameter's dotted path.
  std::vector<std::pair<std::string, Split>> splits() const;

 protected:
  void register_parameter(const std::string& name, array& param);
  /// A buffer is saved and updated with the parameters but never trained.
  void register_buffer(const std::string& name, array& buffer);
  void register_module(const std::string& name, Module& child);

 private:
  enum class Kind { parameter, buffer, module };
  struct Entry {
    std::string name;
    Kind kind;
    array* value;
    Module* child;
    bool frozen;
  };
  std::vector<Entry> entries_;
  std::vector<std::pair<std::string, Split>> splits_;
  bool training_ = true;

  // Finding members that were never registered (module.cpp). Modules built while this one's
  // construction was under way (its members, theirs, ...) are `inside_` it; `outer_` is the one
  // this was built inside. The open stack links modules whose construction may still be under
  // way on this thread: a module is open from its constructor to its first register_* call, its
  // registration by a parent, its first parameters() or its destruction.
  Module* outer_ = nullptr;
  std::vector<Module*> inside_;
  Module* open_prev_ = nullptr;
  bool open_ = false;
  bool registered_ = false;       // some module registered this one
  bool built_ = false;            // closed by its own register_* call: the constructor body runs
  mutable bool checked_ = false;  // parameters() has looked for unregistered members once
  void close_construction() const;
  void close_open_tail();
  void check_registration() const;
  void add_child(const std::string& name, Module& child);
  template <class T>
  friend class Child;

  void add_entry(const std::string& name, Kind kind, array* value, Module* child);
  template <typename Visit>
  void walk(const std::string& prefix, Visit&& visit) const;
  void set_frozen(const std::vector<std::string>& names, bool frozen, const char* op);
};

/// A member module registered as part of its declaration, so that it cannot be forgotten:
///
///     struct MLP : nn::Module {
///       nn::Child<nn::Linear> l1{this, "l1", 784, 512};  // an nn::Linear registered as "l1"
///       nn::Child<nn::Linear> l2{this, "l2", 512, 10};
///       array operator()(const array& x) { return l2(nn::relu(l1(x))); }
///     };
///
/// A Child<T> is a T (use it as one); the arguments after the name go to T's constructor. Children
/// are registered in declaration order, before the parent's constructor body runs.
template <class T>
class Child : public T {
 public:
  template <class... Args>
  Child(Module* parent, const std::string& name, Args&&... args) : T(std::forward<Args>(args)...) {
    parent->add_child(name, *this);  // (the parent is still being built: no register_module)
  }
};

/// Wraps `fn(args...)` (returning the loss, or a vector whose first element is the loss) into a
/// function of the same arguments returning `(value, grads)`, where grads are the gradients of the
/// loss with respect to `model.trainable_parameters()`, under the same names. Nothing is evaluated.
///
/// With `compute_dtype` (bfloat16 or float16), the forward and backward passes are built under
/// `Autocast(compute_dtype)` (ops/autocast.h: mixed precision): matrix products compute in it,
/// softmax, norms, reductions and losses in float32, and the gradients come back in each parameter's
/// own dtype (float32 parameters: float32 gradients). For float16, scale the loss
/// (optim::DynamicLossScaler) so that small gradients do not flush to zero.
template <typename Fn>
auto value_and_grad(Module& model, Fn fn, std::optional<Dtype> compute_dtype = std::nullopt) {
  if (compute_dtype) Autocast check(*compute_dtype);  // rejects a dtype the policy has no use for, now
  return [&model, fn, compute_dtype](const auto&... args) {
    std::optional<Autocast> mixed;
    if (compute_dtype) mixed.emplace(*compute_dtype);
    const ParamTree params = model.trainable_parameters();
    std::vector<int> argnums(params.size());
    for (size_t i = 0; i < argnums.size(); ++i) argnums[i] = static_cast<int>(i);
    constexpr bool single = std::is_same_v<std::decay_t<decltype(fn(args...))>, array>;
    VectorFn traced = [&](const std::vector<array>& p) {
      model.update(tree_unflatten(params, p));
      std::vector<array> outs;
      if constexpr (std::is_same_v<std::decay_t<decltype(fn(args...))>, array>) {
        outs.push_back(fn(args...));
      } else {
        outs = fn(args...);
      }
      return outs;
    };
    struct Restore {  // the model keeps its real parameters even when fn throws
      Module& m;
      const ParamTree& p;
      ~Restore() { m.update(p); }
    } restore{model, params};
    if (params.empty()) {
      throw std::invalid_argument("[nn::value_and_grad] the model has no trainable parameters");
    }
    auto [outs, grads] = loom::value_and_grad(traced, argnums)(params.values());
    ParamTree grad_tree = tree_unflatten(params, grads);
    if constexpr (single) {
      return std::make_pair(outs[0], std::move(grad_tree));
    } else {
      return std::make_pair(std::move(outs), std::move(grad_tree));
    }
  };
}

/// value_and_grad(model, fn) compiled (autograd/compile.h): the same results, from one Compiled node
/// per call whose program (forward, backward) is traced once per signature. `fn`'s arguments must be
/// arrays. Every entry of model.parameters() (buffers too) is an input of the compiled function on
/// every call, so changes between calls (an optimizer's update) are seen; what `fn` assigns to the
/// model (a BatchNorm's running statistics, in training mode) is an output, assigned after each call.
/// (MLX's Python spelling: compile(loss_and_grad, inputs=model.state, outputs=model.state).) The
/// trace is made again when the model's parameters, or which of them are trainable, change.
template <typename Fn>
auto compile_value_and_grad(Module& model, Fn fn) {
  auto vg = value_and_grad(model, std::move(fn));
  struct Traced {
    VectorFn compiled;
    std::vector<std::string> names, trainable;  // model.parameters() / trainable_parameters() when traced
    size_t values = 0;                          // fn's outputs
    std::vector<char> assigned;                 // by parameter: fn assigned it (an output follows)
  };
  auto traced = std::make_shared<Traced>();
  return [&model, vg, traced](const auto&... args) {
    using ArgIdx = std::make_index_sequence<sizeof...(args)>;  // a type: the traced lambda needs no capture
    constexpr bool single = std::is_same_v<std::decay_t<decltype(vg(args...).first)>, array>;
    const ParamTree state = model.parameters(), trainable = model.trainable_parameters();
    if (!traced->compiled || traced->names != state.names() || traced->trainable != trainable.names()) {
      Traced* t = traced.get();  // (not a shared_ptr: t owns the compiled function, which would own t)
      t->names = state.names();
      t->trainable = trainable.names();
      t->compiled = compile([&model, vg, t](const std::vector<array>& in) {
        const ParamTree before = model.parameters();
        struct Restore {  // the model keeps its real parameters however the trace ends
          Module& m;
          const ParamTree& p;
          ~Restore() { m.update(p, false); }
        } restore{model, before};
        const std::vector<array> bound(in.begin() + ArgIdx::size(), in.end());
        model.update(tree_unflatten(before, bound), false);
        auto [value, grads] = loom::detail::call_with_first(vg, in, ArgIdx{});
        std::vector<array> out;
        if constexpr (single) {
          out.push_back(value);
        } else {
          out = value;
        }
        t->values = out.size();
        for (const auto& g : grads.values()) out.push_back(g);
        const std::vector<array> after = model.parameters().values();
        t->assigned.assign(after.size(), 0);
        for (size_t i = 0; i < after.size(); ++i) {
          if (after[i].id() == bound[i].id()) continue;
          t->assigned[i] = 1;
          out.push_back(after[i]);
        }
        return out;
      });
    }
    std::vector<array> in{args...};
    for (const auto& p : state.values()) in.push_back(p);
    std::vector<array> out = traced->compiled(in);
    const size_t nv = traced->values, ng = trainable.size();
    ParamTree grads = tree_unflatten(trainable, std::vector<array>(out.begin() + nv, out.begin() + nv + ng));
    std::vector<array> now = state.values();
    size_t k = nv + ng;
    bool any = false;
    for (size_t i = 0; i < now.size(); ++i) {
      if (traced->assigned[i]) now[i] = out[k++], any = true;
    }
    if (any) model.update(tree_unflatten(state, std::move(now)), false);
    if constexpr (single) {
      return std::make_pair(out[0], std::move(grads));
    } else {
      return std::make_pair(std::vector<array>(out.begin(), out.begin() + nv), std::move(grads));
    }
  };
}

}  // namespace loom::nn

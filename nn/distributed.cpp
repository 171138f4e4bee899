#include "loom/nn/distributed.h"

#include <cmath>
#include <algorithm>
#include <mutex>
#include <set>
#include <stdexcept>
#include <tuple>

#include "loom/autograd/transforms.h"
#include "loom/nn/init.h"
#include "loom/ops/graph.h"
#include "loom/ops/ops.h"
#include "loom/ops/quantized.h"
#include "loom/ops/utils.h"

namespace loom::nn {

using detail::msg;
namespace dist = loom::distributed;

namespace {

dist::Group resolve(const std::optional<dist::Group>& g) { return g ? *g : dist::init(); }

// An all_sum whose vjp passes the cotangent through: every rank's loss is the same replicated value
// here, so the gradient of this rank's partial sum is the cotangent itself (MLX's all_sum vjp).
array all_sum_replicated(const array& x, const dist::Group& g) {
  if (g.size() == 1) return x;
  auto f = custom_vjp([g](const std::vector<array>& in) { return std::vector<array>{dist::all_sum(in[0], g)}; },
                      [](const std::vector<array>&, const std::vector<array>& cot, const std::vector<array>&) {
                        return std::vector<array>{cot[0]};
                      });
  return f({x})[0];
}

// The whole (rows, cols) weight or (n) bias drawn as Linear draws it, then this rank's slice: every rank
// draws the same numbers (Loom's key is the same on every rank until seeded), so the sharded layers
// of a model equal the unsplit one's built at the same point.
array uniform_slice(const Shape& full, int axis, const dist::Group& g, double k) {
  array w = init::uniform(full, -k, k);
  const int n = full[axis] / g.size();
  Shape start(full.size(), 0), stop = full;
  start[axis] = g.rank() * n;
  stop[axis] = (g.rank() + 1) * n;
  return contiguous(slice(w, start, stop));
}

void check_divides(int dims, const dist::Group& g, const char* op, const char* what) {
  if (dims <= 0) throw std::invalid_argument(msg("[", op, "] ", what, " must be positive, got ", dims));
  if (dims % g.size() != 0) {
    throw std::invalid_argument(msg("[", op, "] cannot split ", what, " ", dims, " among a group of ", g.size()));
  }
}

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

void check_input(const array& x, int dims, const char* op) {
  if (x.ndim() < 1 || x.shape().back() != dims) {
    throw std::invalid_argument(
        msg("[", op, "] expected input with last axis ", dims, ", got shape ", detail::shape_str(x.shape())));
  }
}

}  // namespace

array sum_gradients(const array& x, std::optional<dist::Group> group) {
  dist::Group g = resolve(group);
  if (g.size() == 1) return x;
  auto f = custom_vjp([](const std::vector<array>& in) { return std::vector<array>{in[0]}; },
                      [g](const std::vector<array>&, const std::vector<array>& cot, const std::vector<array>&) {
                        return std::vector<array>{dist::all_sum(cot[0], g)};
                      });
  return f({x})[0];
}

// ---- Segments and sharding ----

Segments::Segments(int count) : count_(count) {
  if (count < 1) throw std::invalid_argument(msg("[Segments] the number of parts must be positive, got ", count));
}

Segments Segments::at(std::vector<int> indices) {
  Segments s;
  s.indices_ = std::move(indices);
  s.count_ = static_cast<int>(s.indices_.size()) + 1;
  return s;
}

Segments Segments::fractions(std::vector<double> fractions) {
  for (size_t i = 0; i < fractions.size(); ++i) {
    if (!(fractions[i] > 0 && fractions[i] < 1) || (i > 0 && !(fractions[i] > fractions[i - 1]))) {
      throw std::invalid_argument("[Segments] fractions must increase strictly within (0, 1)");
    }
  }
  Segments s;
  s.fractions_ = std::move(fractions);
  s.count_ = static_cast<int>(s.fractions_.size()) + 1;
  return s;
}

std::vector<int> Segments::boundaries(int n, const char* op) const {
  std::vector<int> b;
  if (!fractions_.empty()) {
    for (double f : fractions_) b.push_back(static_cast<int>(f * n));  // MLX: int(s * N)
  } else if (!indices_.empty()) {
    b = indices_;
  } else {
    if (n % count_ != 0) {
      throw std::invalid_argument(msg("[", op, "] an axis of ", n, " cannot be cut into ", count_, " equal parts"));
    }
    for (int i = 1; i < count_; ++i) b.push_back(i * (n / count_));
  }
  for (size_t i = 0; i < b.size(); ++i) {
    if (b[i] < 0 || b[i] > n || (i > 0 && b[i] < b[i - 1])) {
      throw std::invalid_argument(msg("[", op, "] part boundaries must increase within [0, ", n, "]"));
    }
  }
  return b;
}

ShardingFn sharding_rule(const std::string& sharding, Segments segments) {
  if (sharding == "all-to-sharded") {
    return [segments](const std::string& path, const array& w) -> std::optional<std::pair<int, Segments>> {
      if (ends_with(path, "bias")) return std::make_pair(-1, segments);
      return std::make_pair(std::max(static_cast<int>(w.ndim()) - 2, 0), segments);
    };
  }
  if (sharding == "sharded-to-all") {
    return [segments](const std::string& path, const array&) -> std::optional<std::pair<int, Segments>> {
      if (ends_with(path, "bias")) return std::nullopt;
      return std::make_pair(-1, segments);
    };
  }
  throw std::invalid_argument("[shard] sharding '" + sharding + "' is not supported; choose 'all-to-sharded' or 'sharded-to-all'");
}

ParamTree shard(const ParamTree& params, const ShardingFn& sharding, std::optional<dist::Group> group) {
  dist::Group g = resolve(group);
  const int n = g.size(), r = g.rank();
  ParamTree out;
  for (const auto& [path, w] : params) {
    auto rule = sharding(path, w);
    if (!rule) {
      out.insert(path, w);
      continue;
    }
    if (w.ndim() == 0) throw std::invalid_argument("[shard] '" + path + "' is a scalar: it has no axis to split");
    const int nd = static_cast<int>(w.ndim()), axis = rule->first < 0 ? rule->first + nd : rule->first;
    if (axis < 0 || axis >= nd) {
      throw std::out_of_range(msg("[shard] axis ", rule->first, " is out of range for '", path, "' of shape ",
                                  detail::shape_str(w.shape())));
    }
    std::vector<array> mine;
    for (const array& part : split(w, rule->second.boundaries(w.shape(axis), "shard"), axis)) {
      if (part.shape(axis) % n != 0) {
        throw std::invalid_argument(msg("[shard] '", path, "' of shape ", detail::shape_str(w.shape()), ": a part of ",
                                        part.shape(axis), " along axis ", axis, " cannot be split among ", n, " ranks"));
      }
      mine.push_back(split(part, n, axis)[r]);
    }
    out.insert(path, contiguous(mine.size() == 1 ? mine[0] : concatenate(mine, axis)));
  }
  return out;
}

namespace {
// Records in `m` how `rule` splits `params` across `g` (Module::Split): `whole` says whether the
// arrays are the whole ones or this rank's slices already.
void record_splits(Module& m, const ParamTree& params, bool whole, const ShardingFn& rule, const dist::Group& g) {
  if (g.size() == 1) return;
  for (const auto& [path, w] : params) {
    auto r = rule(path, w);
    if (!r || w.ndim() == 0) continue;
    const int nd = static_cast<int>(w.ndim()), axis = r->first < 0 ? r->first + nd : r->first;
    const int n = whole ? w.shape(axis) : w.shape(axis) * g.size();
    std::vector<int> parts;
    int start = 0;
    for (int b : r->second.boundaries(n, "shard")) parts.push_back(b - start), start = b;
    parts.push_back(n - start);
    m.set_split(path, {axis, parts, g});
  }
}
}  // namespace

void shard_inplace(Module& module, const ShardingFn& sharding, std::optional<dist::Group> group) {
  const dist::Group g = resolve(group);
  const ParamTree whole = module.parameters();
  module.update(shard(whole, sharding, g), /*check_shapes=*/false);
  record_splits(module, whole, true, sharding, g);
}

void shard_inplace(Module& module, const std::string& sharding, Segments segments, std::optional<dist::Group> group) {
  shard_inplace(module, sharding_rule(sharding, segments), group);
}

// ---- the layers ----

namespace {

// A sharded layer holding `slices` of `source`, with the splits recorded by the parts of `segments`
// (its Slices constructor records one part per axis).
template <class Layer, class Source>
std::shared_ptr<Layer> sliced_from(const Source& source, typename Layer::Slices slices, const char* sharding,
                                   const Segments& segments) {
  auto layer = std::make_shared<Layer>(std::move(slices));
  record_splits(*layer, source.parameters(), true, sharding_rule(sharding, segments), layer->group);
  return layer;
}

// The slices of a Linear's weight (output_dims, input_dims) and bias, drawn whole as Linear draws them,
// split by rows (output features; the bias too) or by columns (input features; the bias whole).
ShardedLinear::Slices linear_slices(int in, int out, bool with_bias, const dist::Group& g, bool by_rows, const char* op) {
  check_divides(by_rows ? out : in, g, op, by_rows ? "output_dims" : "input_dims");
  if ((by_rows ? in : out) <= 0) {
    throw std::invalid_argument(msg("[", op, "] ", by_rows ? "input_dims" : "output_dims", " must be positive, got ",
                                    by_rows ? in : out));
  }
  const double k = 1.0 / std::sqrt(static_cast<double>(in));
  array w = uniform_slice({out, in}, by_rows ? 0 : 1, g, k);
  std::optional<array> b;
  if (with_bias) b = by_rows ? uniform_slice({out}, 0, g, k) : init::uniform({out}, -k, k);
  return {w, b, g};
}

ShardedLinear::Slices linear_slices(const Linear& l, const char* sharding, const Segments& segments,
                                    const dist::Group& g) {
  const ParamTree p = shard(l.parameters(), sharding_rule(sharding, segments), g);
  return {p.at("weight"), l.bias ? std::optional<array>(p.at("bias")) : std::nullopt, g};
}

// As linear_slices, quantized; the bias starts at zero (MLX's).
QuantizedShardedLinear::Slices quantized_slices(int in, int out, bool with_bias, std::optional<int> gs,
                                                std::optional<int> nbits, const std::string& mode, const dist::Group& g,
                                                bool by_rows, const char* op) {
  const ShardedLinear::Slices f = linear_slices(in, out, false, g, by_rows, op);
  const auto [group_size, bits] = quantization_defaults(mode, gs, nbits, op);
  std::vector<array> q = loom::quantize(f.weight, group_size, bits, mode);
  std::optional<array> bias;
  if (with_bias) bias = zeros({by_rows ? out / g.size() : out});
  return {q[0], q[1], q.size() > 2 ? std::optional<array>(q[2]) : std::nullopt, bias, group_size, bits, mode, g};
}

QuantizedShardedLinear::Slices quantized_slices(const QuantizedLinear& l, const char* sharding,
                                                const Segments& segments, const dist::Group& g) {
  const ParamTree p = shard(l.parameters(), sharding_rule(sharding, segments), g);
  auto opt = [&](bool has, const char* name) { return has ? std::optional<array>(p.at(name)) : std::nullopt; };
  return {p.at("weight"), p.at("scales"), opt(bool(l.biases), "biases"), opt(bool(l.bias), "bias"),
          l.group_size,   l.bits,         l.mode,                        g};
}

}  // namespace

ShardedLinear::ShardedLinear(Slices s) : weight(std::move(s.weight)), bias(std::move(s.bias)), group(std::move(s.group)) {
  register_parameter("weight", weight);
  if (bias) register_parameter("bias", *bias);
}

AllToShardedLinear::AllToShardedLinear(int input_dims, int output_dims, bool with_bias, std::optional<dist::Group> g)
    : AllToShardedLinear(linear_slices(input_dims, output_dims, with_bias, resolve(g), true, "nn::AllToShardedLinear")) {}

AllToShardedLinear::AllToShardedLinear(Slices s) : ShardedLinear(std::move(s)) {
  record_splits(*this, parameters(), false, sharding_rule("all-to-sharded"), group);
}

array all_to_sharded_linear(const array& x, const array& weight, const std::optional<array>& bias,
                            std::optional<dist::Group> group) {
  array xs = sum_gradients(x, group);
  return bias ? addmm(*bias, xs, transpose(weight)) : matmul(xs, transpose(weight));
}

array sharded_to_all_linear(const array& x, const array& weight, const std::optional<array>& bias,
                            std::optional<dist::Group> group) {
  array y = all_sum_replicated(matmul(x, transpose(weight)), resolve(group));
  return bias ? add(y, *bias) : y;
}

array AllToShardedLinear::operator()(const array& x) const {
  check_input(x, weight.shape(1), "nn::AllToShardedLinear");
  return all_to_sharded_linear(x, weight, bias, group);
}

std::shared_ptr<AllToShardedLinear> AllToShardedLinear::from_linear(const Linear& linear, Segments segments,
                                                                    std::optional<dist::Group> g) {
  return sliced_from<AllToShardedLinear>(linear, linear_slices(linear, "all-to-sharded", segments, resolve(g)), "all-to-sharded", segments);
}

ShardedToAllLinear::ShardedToAllLinear(int input_dims, int output_dims, bool with_bias, std::optional<dist::Group> g)
    : ShardedToAllLinear(linear_slices(input_dims, output_dims, with_bias, resolve(g), false, "nn::ShardedToAllLinear")) {}

ShardedToAllLinear::ShardedToAllLinear(Slices s) : ShardedLinear(std::move(s)) {
  record_splits(*this, parameters(), false, sharding_rule("sharded-to-all"), group);
}

array ShardedToAllLinear::operator()(const array& x) const {
  check_input(x, weight.shape(1), "nn::ShardedToAllLinear");
  return sharded_to_all_linear(x, weight, bias, group);
}

std::shared_ptr<ShardedToAllLinear> ShardedToAllLinear::from_linear(const Linear& linear, Segments segments,
                                                                    std::optional<dist::Group> g) {
  return sliced_from<ShardedToAllLinear>(linear, linear_slices(linear, "sharded-to-all", segments, resolve(g)), "sharded-to-all", segments);
}

QuantizedShardedLinear::QuantizedShardedLinear(Slices s)
    : weight(std::move(s.weight)),
      scales(std::move(s.scales)),
      biases(std::move(s.biases)),
      bias(std::move(s.bias)),
      group_size(s.group_size),
      bits(s.bits),
      mode(std::move(s.mode)),
      group(std::move(s.group)) {
  register_parameter("weight", weight);
  register_parameter("scales", scales);
  if (biases) register_parameter("biases", *biases);
  if (bias) register_parameter("bias", *bias);
  freeze();
}

int QuantizedShardedLinear::input_dims() const { return static_cast<int>(int64_t(weight.shape(1)) * 32 / bits); }

QuantizedAllToShardedLinear::QuantizedAllToShardedLinear(int input_dims, int output_dims, bool with_bias,
                                                         std::optional<int> gs, std::optional<int> nbits,
                                                         const std::string& mode, std::optional<dist::Group> g)
    : QuantizedAllToShardedLinear(quantized_slices(input_dims, output_dims, with_bias, gs, nbits, mode, resolve(g), true,
                                              "nn::QuantizedAllToShardedLinear")) {}

QuantizedAllToShardedLinear::QuantizedAllToShardedLinear(Slices s) : QuantizedShardedLinear(std::move(s)) {
  record_splits(*this, parameters(), false, sharding_rule("all-to-sharded"), group);
}

array QuantizedAllToShardedLinear::operator()(const array& x) const {
  check_input(x, input_dims(), "nn::QuantizedAllToShardedLinear");
  array y = quantized_matmul(sum_gradients(x, group), weight, scales, biases, true, group_size, bits, mode);
  return bias ? add(y, *bias) : y;
}

std::shared_ptr<QuantizedAllToShardedLinear> QuantizedAllToShardedLinear::from_quantized_linear(
    const QuantizedLinear& linear, Segments segments, std::optional<dist::Group> g) {
  return sliced_from<QuantizedAllToShardedLinear>(linear, quantized_slices(linear, "all-to-sharded", segments, resolve(g)), "all-to-sharded", segments);
}

QuantizedShardedToAllLinear::QuantizedShardedToAllLinear(int input_dims, int output_dims, bool with_bias,
                                                         std::optional<int> gs, std::optional<int> nbits,
                                                         const std::string& mode, std::optional<dist::Group> g)
    : QuantizedShardedToAllLinear(quantized_slices(input_dims, output_dims, with_bias, gs, nbits, mode, resolve(g), false,
                                              "nn::QuantizedShardedToAllLinear")) {}

QuantizedShardedToAllLinear::QuantizedShardedToAllLinear(Slices s) : QuantizedShardedLinear(std::move(s)) {
  record_splits(*this, parameters(), false, sharding_rule("sharded-to-all"), group);
}

array QuantizedShardedToAllLinear::operator()(const array& x) const {
  check_input(x, input_dims(), "nn::QuantizedShardedToAllLinear");
  array y = all_sum_replicated(quantized_matmul(x, weight, scales, biases, true, group_size, bits, mode), group);
  return bias ? add(y, *bias) : y;
}

std::shared_ptr<QuantizedShardedToAllLinear> QuantizedShardedToAllLinear::from_quantized_linear(
    const QuantizedLinear& linear, Segments segments, std::optional<dist::Group> g) {
  return sliced_from<QuantizedShardedToAllLinear>(linear, quantized_slices(linear, "sharded-to-all", segments, resolve(g)), "sharded-to-all", segments);
}

std::shared_ptr<Module> shard_linear(const Module& layer, const std::string& sharding, Segments segments,
                                     std::optional<dist::Group> group) {
  sharding_rule(sharding);  // checks the name
  const bool to_sharded = sharding == "all-to-sharded";
  if (auto* l = dynamic_cast<const Linear*>(&layer)) {
    if (to_sharded) return AllToShardedLinear::from_linear(*l, segments, group);
    return ShardedToAllLinear::from_linear(*l, segments, group);
  }
  if (auto* q = dynamic_cast<const QuantizedLinear*>(&layer)) {
    if (to_sharded) return QuantizedAllToShardedLinear::from_quantized_linear(*q, segments, group);
    return QuantizedShardedToAllLinear::from_quantized_linear(*q, segments, group);
  }
  throw std::invalid_argument("[shard_linear] expects an nn::Linear or nn::QuantizedLinear");
}

// ---- fully sharded data parallelism ----

namespace {

// The modules whose parameters a FullyShardedModule holds: an enclosing one leaves them alone.
std::mutex fsdp_mu;
std::set<const Module*>& fsdp_modules() {
  static std::set<const Module*> s;
  return s;
}

// The full parameters from this rank's slices, as one custom function: forward, per dtype, the slices
// flattened end to end (cast to the compute dtype) and all-gathered, then cut back into the full
// parameters; backward, the cotangents laid out the same way, reduce-scattered and divided by the
// group size (the mean over the ranks), cut into the slices' shapes and dtypes.
// The indices of xs grouped by dtype, in order of first appearance.
std::vector<std::vector<size_t>> by_dtype(const std::vector<array>& xs) {
  std::vector<std::vector<size_t>> groups;
  for (size_t i = 0; i < xs.size(); ++i) {
    auto it = std::find_if(groups.begin(), groups.end(), [&](const auto& gr) { return xs[gr[0]].dtype() == xs[i].dtype(); });
    if (it == groups.end()) {
      groups.push_back({i});
    } else {
      it->push_back(i);
    }
  }
  return groups;
}

// xs[idx] reshaped to (rows, -1) and laid side by side: one (rows, width) array, and the columns at
// which to cut it back.
std::pair<array, std::vector<int>> side_by_side(const std::vector<array>& xs, const std::vector<size_t>& idx, int rows) {
  std::vector<array> parts;
  std::vector<int> cuts;
  int width = 0;
  for (size_t j : idx) {
    parts.push_back(reshape(xs[j], {rows, -1}));
    width += static_cast<int>(xs[j].size()) / rows;
    cuts.push_back(width);
  }
  cuts.pop_back();
  return {parts.size() == 1 ? parts[0] : concatenate(parts, 1), cuts};
}

std::vector<array> cut(const array& a, const std::vector<int>& cuts) {
  return cuts.empty() ? std::vector<array>{a} : split(a, cuts, 1);
}

// The full parameters from this rank's slices, as one custom function: forward, per dtype, the slices
// flattened side by side (cast to the compute dtype) and all-gathered, then cut back into the full
// parameters; backward, the cotangents laid out the same way, reduce-scattered and divided by the
// group size (the mean over the ranks), cut into the slices' shapes and dtypes.
std::vector<array> gather_full(const std::vector<array>& slices, const std::vector<Shape>& full_shapes,
                               const dist::Group& g, std::optional<Dtype> compute) {
  const int n = g.size();
  auto forward = [full_shapes, g, compute](const std::vector<array>& in) {
    std::vector<array> cast, out(in.size(), array(0.0f));
    for (const array& x : in) cast.push_back(compute && x.dtype() != *compute ? astype(x, *compute) : x);
    for (const auto& idx : by_dtype(cast)) {
      auto [rows, cuts] = side_by_side(cast, idx, 1);
      std::vector<array> parts = cut(dist::all_gather(rows, g), cuts);  // (n, width)
      for (size_t k = 0; k < idx.size(); ++k) out[idx[k]] = reshape(parts[k], full_shapes[idx[k]]);
    }
    return out;
  };
  auto backward = [g, n](const std::vector<array>& primals, const std::vector<array>& cot, const std::vector<array>&) {
    std::vector<array> out(primals.size(), array(0.0f));
    for (const auto& idx : by_dtype(cot)) {
      auto [rows, cuts] = side_by_side(cot, idx, n);
      std::vector<array> parts = cut(dist::sum_scatter(rows, g) * (1.0 / n), cuts);
      for (size_t k = 0; k < idx.size(); ++k) {
        const array& p = primals[idx[k]];
        const array c = reshape(parts[k], p.shape());
        out[idx[k]] = c.dtype() == p.dtype() ? c : astype(c, p.dtype());
      }
    }
    return out;
  };
  return custom_function(forward, backward)(slices);
}

}  // namespace

FullyShardedModule::FullyShardedModule(Module& module, std::optional<dist::Group> group, std::optional<Dtype> compute)
    : module_(module), group_(resolve(group)), compute_dtype_(compute) {
  if (compute && !is_floating_point(*compute)) {
    throw std::invalid_argument(msg("[fully_shard] compute_dtype must be floating point, got ", *compute));
  }
  std::lock_guard<std::mutex> lock(fsdp_mu);
  if (fsdp_modules().count(&module)) throw std::invalid_argument("[fully_shard] the module is already fully sharded");
  if (group_.size() == 1) {
    fsdp_modules().insert(&module);
    return;
  }
  // Parameters of submodules that are sharded by themselves stay theirs.
  std::vector<std::string> inner;
  for (const auto& [path, m] : module.modules()) {
    if (fsdp_modules().count(m)) inner.push_back(path);
  }
  const ParamTree buffers = module.buffers();
  std::set<std::string> split_already;
  for (const auto& [path, sp] : module.splits()) split_already.insert(path);
  ParamTree mine;
  for (const auto& [path, p] : module.parameters()) {
    if (buffers.contains(path)) continue;
    if (std::any_of(inner.begin(), inner.end(), [&, &path = path](const std::string& pre) { return path_under(path, pre); })) continue;
    if (split_already.count(path)) {
      throw std::invalid_argument("[fully_shard] parameter '" + path + "' is split across ranks already (tensor parallel)");
    }
    if (p.ndim() == 0) throw std::invalid_argument("[fully_shard] cannot shard parameter '" + path + "': it is a scalar");
    if (p.shape(0) % group_.size() != 0) {
      throw std::invalid_argument(msg("[fully_shard] cannot shard parameter '", path, "' of shape ",
                                      detail::shape_str(p.shape()), " among ", group_.size(),
                                      " ranks: axis 0 must be a multiple of ", group_.size()));
    }
    mine.insert(path, p);
    paths_.push_back(path);
    full_shapes_.push_back(p.shape());
  }
  module.update(shard(mine, [](const std::string&, const array&) { return std::make_optional(std::make_pair(0, Segments(1))); },
                      group_),
                /*check_shapes=*/false);
  for (size_t i = 0; i < paths_.size(); ++i) module.set_split(paths_[i], {0, {full_shapes_[i][0]}, group_});
  fsdp_modules().insert(&module);
}

FullyShardedModule::~FullyShardedModule() {
  std::lock_guard<std::mutex> lock(fsdp_mu);
  fsdp_modules().erase(&module_);
}

std::vector<array> FullyShardedModule::slices() const {
  const ParamTree all = module_.parameters();
  std::vector<array> mine;
  for (const std::string& path : paths_) mine.push_back(all.at(path));
  return mine;
}

FullyShardedModule::Gathered::Gathered(const FullyShardedModule& f, const std::vector<array>& slices) : fs(f) {
  const ParamTree all = f.module_.parameters();
  for (const std::string& path : f.paths_) previous.insert(path, all.at(path));
  const std::vector<array> full = gather_full(slices, f.full_shapes_, f.group_, f.compute_dtype_);
  ParamTree installed;
  for (size_t i = 0; i < f.paths_.size(); ++i) installed.insert(f.paths_[i], full[i]);
  f.module_.update(installed, /*check_shapes=*/false);
}

FullyShardedModule::Gathered::~Gathered() { fs.module_.update(previous, /*check_shapes=*/false); }

namespace {
// The last checkpointed call's inputs (forward) and cotangents (backward) on this thread, held weakly:
// the next call's all_gather waits for them, which starts it while the previous block computes and
// no earlier.
thread_local std::vector<array::Weak> previous_inputs, previous_cotangents;

std::vector<array> exchange(std::vector<array::Weak>& previous, const std::vector<array>& now) {
  std::vector<array> alive;
  for (const auto& w : previous) {
    if (auto a = w.lock(); a && !a->is_evaluated()) alive.push_back(*a);
  }
  previous.clear();
  for (const array& a : now) previous.push_back(a.weak());
  return alive;
}
}  // namespace

std::vector<array> FullyShardedModule::checkpoint(const Fn& fn, const std::vector<array>& inputs) const {
  if (!fn) throw std::invalid_argument("[FullyShardedModule::checkpoint] the function is empty");
  if (paths_.empty()) return fn(inputs);
  const size_t n_in = inputs.size();
  auto body = [this, fn, n_in](const std::vector<array>& args) {
    Gathered scope(*this, std::vector<array>(args.begin() + n_in, args.end()));
    return fn(std::vector<array>(args.begin(), args.begin() + n_in));
  };
  auto rule = [body, n_in](const std::vector<array>& primals, const std::vector<array>& cot,
                           const std::vector<array>&) {
    // Recompute once the backward pass reaches this call; gather once it reaches the call after it.
    const std::vector<array> later = exchange(previous_cotangents, cot);
    std::vector<array> in = depends(std::vector<array>(primals.begin(), primals.begin() + n_in), cot);
    std::vector<array> sl = std::vector<array>(primals.begin() + n_in, primals.end());
    sl = depends(sl, later.empty() ? cot : later);
    in.insert(in.end(), sl.begin(), sl.end());
    return vjp(body, in, cot).second;
  };
  std::vector<array> args = inputs;
  std::vector<array> sl = slices();
  const std::vector<array> earlier = exchange(previous_inputs, inputs);
  if (!earlier.empty()) sl = depends(sl, earlier);
  args.insert(args.end(), sl.begin(), sl.end());
  return custom_vjp(body, rule)(args);
}

std::shared_ptr<FullyShardedModule> fully_shard(Module& module, std::optional<dist::Group> group,
                                                std::optional<Dtype> compute_dtype) {
  return std::make_shared<FullyShardedModule>(module, group, compute_dtype);
}

}  // namespace loom::nn

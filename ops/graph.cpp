#include "loom/core/serialize.h"
#include "loom/ops/graph.h"

#include <algorithm>
#include <stdexcept>

#include "loom/core/primitive.h"
#include "loom/ops/batching.h"
#include "loom/ops/ops.h"

namespace loom {

namespace {

// Outputs: the first n inputs, as they are; the other inputs are only waited for.
class Depends : public Primitive {
 public:
  void save(detail::Writer& w) const override { w.put(static_cast<uint64_t>(n_)); }
  bool supports_complex() const override { return true; }
  explicit Depends(size_t n) : n_(n) {}
  void eval_cpu(const std::vector<array>& inputs, std::vector<array>& outputs) override {
    for (size_t i = 0; i < n_; ++i) outputs[i].copy_shared_buffer(inputs[i]);
  }
  std::vector<array> vjp(const std::vector<array>& primals, const std::vector<array>& cotangents,
                         const std::vector<int>& argnums, const std::vector<array>&) override {
    std::vector<array> out;
    for (int a : argnums) {
      out.push_back(static_cast<size_t>(a) < n_ ? cotangents[a] : zeros_like(primals[a]));
    }
    return out;
  }
  std::vector<array> jvp(const std::vector<array>& primals, const std::vector<array>& tangents,
                         const std::vector<int>& argnums) override {
    std::vector<array> out;
    for (size_t i = 0; i < n_; ++i) {
      auto it = std::find(argnums.begin(), argnums.end(), static_cast<int>(i));
      out.push_back(it != argnums.end() ? tangents[it - argnums.begin()] : zeros_like(primals[i]));
    }
    return out;
  }
  std::pair<std::vector<array>, std::vector<int>> vmap(const std::vector<array>& in, const std::vector<int>& axes,
                                                       const std::vector<array>& /*outs*/) override {
    std::vector<array> first(in.begin(), in.begin() + n_), rest(in.begin() + n_, in.end());
    return {depends(first, rest), std::vector<int>(axes.begin(), axes.begin() + n_)};
  }
  const char* name() const override { return "Depends"; }
  bool makes_view() const override { return true; }

 private:
  size_t n_;
};
const bool kDependsLoads = detail::register_primitive("Depends", [](detail::Reader& r) -> std::shared_ptr<Primitive> {
  return std::make_shared<Depends>(static_cast<size_t>(r.get<uint64_t>()));
});

}  // namespace

std::vector<array> depends(const std::vector<array>& inputs, const std::vector<array>& dependencies) {
  if (inputs.empty()) throw std::invalid_argument("[depends] needs at least one input");
  if (dependencies.empty()) return inputs;
  std::vector<Shape> shapes;
  std::vector<Dtype> dtypes;
  for (const auto& a : inputs) {
    shapes.push_back(a.shape());
    dtypes.push_back(a.dtype());
  }
  std::vector<array> all = inputs;
  all.insert(all.end(), dependencies.begin(), dependencies.end());
  return array::make_arrays(std::move(shapes), dtypes, std::make_shared<Depends>(inputs.size()), std::move(all));
}


std::vector<array> tangents_or_zeros(const std::vector<array>& primals, const std::vector<array>& tangents,
                                     const std::vector<int>& argnums) {
  std::vector<array> t;
  t.reserve(primals.size());
  for (const auto& p : primals) t.push_back(zeros_like(p));
  for (size_t i = 0; i < argnums.size(); ++i) t[argnums[i]] = tangents[i];
  return t;
}

}  // namespace loom

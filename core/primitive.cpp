#include "loom/core/primitive.h"

#include <atomic>
#include <sstream>
#include <stdexcept>

namespace loom {

namespace detail {
// Read by array's node constructors (array.cpp): one relaxed load per node when unset.
std::atomic<PrimitiveHook> primitive_hook{nullptr};
void set_primitive_hook(PrimitiveHook hook) { primitive_hook.store(hook, std::memory_order_relaxed); }
}  // namespace detail

double Primitive::flops(const std::vector<array>&, const std::vector<array>& outputs) const {
  return is_elementwise() && !outputs.empty() ? double(outputs[0].size()) : -1.0;
}

std::vector<array> Primitive::vjp(const std::vector<array>&, const std::vector<array>&, const std::vector<int>&,
                                  const std::vector<array>&) {
  std::ostringstream os;
  print(os);
  throw std::invalid_argument("[vjp] " + os.str() + " has no vector-Jacobian product");
}

std::vector<array> Primitive::jvp(const std::vector<array>&, const std::vector<array>&, const std::vector<int>&) {
  std::ostringstream os;
  print(os);
  throw std::invalid_argument("[jvp] " + os.str() + " has no Jacobian-vector product");
}

std::pair<std::vector<array>, std::vector<int>> Primitive::vmap(const std::vector<array>&, const std::vector<int>&,
                                                                const std::vector<array>&) {
  std::ostringstream os;
  print(os);
  throw std::invalid_argument("[vmap] " + os.str() + " has no batching rule");
}

void Primitive::save(detail::Writer&) const {
  std::ostringstream os;
  print(os);
  throw std::invalid_argument("[export_function] " + os.str() + " cannot be exported");
}

std::vector<Shape> Primitive::output_shapes(const std::vector<Shape>&) const {
  std::ostringstream os;
  print(os);
  throw std::invalid_argument("[compile] " + os.str() +
                              " cannot infer its output shapes from its inputs': its shapes were fixed when it was "
                              "built, so a shapeless compiled function holding it runs only on the traced shapes");
}

std::vector<Shape> Primitive::same_shape_output(const std::vector<Shape>& inputs) const {
  for (const Shape& s : inputs) {
    if (s != inputs[0]) {
      std::string all;
      for (const Shape& t : inputs) all += (all.empty() ? "" : " and ") + detail::shape_str(t);
      throw std::invalid_argument(std::string("[compile] ") + name() + " needs inputs of one shape, got " + all +
                                  " (a broadcast fixed when the function was traced)");
    }
  }
  return {inputs.at(0)};
}

void Primitive::consecutive_offsets(const std::vector<array>& inputs, std::vector<int64_t>& offsets) {
  offsets.clear();
  int64_t offset = 0;
  for (const array& x : inputs) {
    offsets.push_back(offset);
    offset += static_cast<int64_t>(x.size());
  }
}

uint64_t Primitive::row_contiguous_donors(const std::vector<array>& inputs, std::initializer_list<int> ks) {
  uint64_t mask = 0;
  for (int k : ks) {
    if (inputs[k].flags().row_contiguous) mask |= uint64_t(1) << k;
  }
  return mask;
}

bool Primitive::listed_once(const std::vector<array>& inputs, int k) {
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (static_cast<int>(i) != k && inputs[i].id() == inputs[k].id()) return false;
  }
  return true;
}

}  // namespace loom

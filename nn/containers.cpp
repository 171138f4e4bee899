#include "loom/nn/containers.h"

namespace loom::nn {

array Sequential::operator()(const array& x) const {
  array y = x;
  for (const auto& call : calls_) y = call(y);
  return y;
}

namespace {
void check_layer(size_t i, size_t n) {
  if (i >= n) {
    throw std::out_of_range("[nn::Sequential] layer " + std::to_string(i) + " is out of range for " +
                            std::to_string(n) + " layers");
  }
}
}  // namespace

Module* Sequential::layer(size_t i) const {
  check_layer(i, modules_.size());
  return modules_[i].get();
}

std::shared_ptr<Module> Sequential::shared_layer(size_t i) const {
  check_layer(i, modules_.size());
  return modules_[i];
}

const Sequential::Fn& Sequential::call(size_t i) const {
  check_layer(i, calls_.size());
  return calls_[i];
}

}  // namespace loom::nn

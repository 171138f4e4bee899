#include "loom/nn/containers.h"

namespace loom::nn {

array Sequential::operator()(const array& x) const {
  array y = x;
  for (const auto& call : calls_) y = call(y);
  return y;
}

Module* Sequential::layer(size_t i) const {
  if (i >= modules_.size()) {
    throw std::out_of_range("[nn::Sequential] layer " + std::to_string(i) + " is out of range for " +
                            std::to_string(modules_.size()) + " layers");
  }
  return modules_[i].get();
}

}  // namespace loom::nn

#include "loom/fast/custom.h"

#include "loom/autograd/transforms.h"
#include "loom/ops/batching.h"
#include "loom/ops/graph.h"

namespace loom::fast {

std::vector<array> Custom::reference_vjp(const std::vector<array>& primals, const std::vector<array>& cotangents,
                                         const std::vector<int>& argnums) const {
  return loom::detail::vjp_impl(reference_, primals, [&](const std::vector<array>&) { return cotangents; }, argnums)
      .second;
}

std::vector<array> Custom::vjp(const std::vector<array>& primals, const std::vector<array>& cotangents,
                               const std::vector<int>& argnums, const std::vector<array>& outputs) {
  std::vector<array> fused = fused_vjp(primals, cotangents, argnums, outputs);
  return fused.empty() ? reference_vjp(primals, cotangents, argnums) : fused;
}

std::vector<array> Custom::jvp(const std::vector<array>& primals, const std::vector<array>& tangents,
                               const std::vector<int>& argnums) {
  return loom::jvp(reference_, primals, tangents_or_zeros(primals, tangents, argnums)).second;
}

std::pair<std::vector<array>, std::vector<int>> Custom::vmap(const std::vector<array>& inputs,
                                                             const std::vector<int>& axes,
                                                             const std::vector<array>& outputs) {
  const Batching how = batching(axes);
  if (how == Batching::reference) {
    std::vector<array> out = loom::vmap(reference_, axes, std::vector<int>(outputs.size(), 0))(inputs);
    return {out, std::vector<int>(out.size(), 0)};
  }
  std::vector<array> in;
  if (how == Batching::same_shape) {
    in = loom::detail::all_batch_first(inputs, axes);
  } else {
    for (size_t i = 0; i < inputs.size(); ++i) in.push_back(loom::detail::batch_first(inputs[i], axes[i]));
  }
  return loom::detail::same_op_batch_first(std::move(in), outputs, loom::detail::vmap_size(inputs, axes));
}

std::vector<array> Custom::backward(std::shared_ptr<Primitive> kernel, const std::vector<array>& primals,
                                    const std::vector<array>& cotangents, const std::vector<int>& wrt,
                                    const std::vector<array>& extras) {
  std::vector<Shape> shapes;
  std::vector<Dtype> dtypes;
  for (int i : wrt) {
    shapes.push_back(primals[i].shape());
    dtypes.push_back(primals[i].dtype());
  }
  std::vector<array> in = primals;
  in.insert(in.end(), cotangents.begin(), cotangents.end());
  in.insert(in.end(), extras.begin(), extras.end());
  return array::make_arrays(std::move(shapes), dtypes, std::move(kernel), std::move(in));
}

std::vector<int> Custom::every_input(const std::vector<array>& primals) {
  std::vector<int> all(primals.size());
  for (size_t i = 0; i < all.size(); ++i) all[i] = static_cast<int>(i);
  return all;
}

std::vector<array> Custom::pick(const std::vector<array>& all, const std::vector<int>& argnums) {
  std::vector<array> out;
  for (int a : argnums) out.push_back(all[a]);
  return out;
}

CustomBackward::CustomBackward(const Composition& forward, int num_primals, int num_cotangents,
                               const std::vector<int>& wrt)
    : Custom([forward, num_primals, num_cotangents, wrt](const std::vector<array>& in) {
        const std::vector<array> primals(in.begin(), in.begin() + num_primals);
        const std::vector<array> cotangents(in.begin() + num_primals, in.begin() + num_primals + num_cotangents);
        return loom::detail::vjp_impl(forward, primals, [&](const std::vector<array>&) { return cotangents; }, wrt)
            .second;
      }) {}

std::vector<Shape> Custom::row_op_shapes(const std::vector<Shape>& in) const {
  const Shape& x = in.at(0);
  for (size_t k = 1; k < in.size(); ++k) {
    if (x.empty() || in[k] != Shape{x.back()}) {
      throw std::invalid_argument(std::string("[compile] ") + name() + " of x " + detail::shape_str(x) +
                                  " with a parameter of shape " + detail::shape_str(in[k]));
    }
  }
  return {x};
}

}  // namespace loom::fast

// Elementwise primitives: one class per arity, parameterized by an op that keeps its forward function
// and its derivative together (internal; fusion reads the op structs too).
#pragma once

#include <typeinfo>
#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>

#include "loom/core/primitive.h"
#include "loom/core/serialize.h"
#include "loom/ops/batching.h"
#include "loom/ops/ops.h"

namespace loom {

/// What dtypes an elementwise op accepts and returns.
enum class ElementwiseKind {
  any,        // every dtype, result has the input dtype
  numeric,    // every dtype but bool, result has the input dtype
  floating,   // float dtypes (ints are cast to float32 first)
  predicate,  // every dtype, result is bool
  logical,    // inputs cast to bool, result is bool
  bitwise,    // bool and integer dtypes (floats are an error), result has the input dtype; no gradient
};

namespace detail {
/// Giles' single-precision erfinv polynomial evaluated in double, for y in (-1, 1): relative error
/// ~1e-7 (a float32 ulp or two). erfinv_d refines it with Newton steps to float64 accuracy.
inline double erfinv_approx(double y) {
  double w = -std::log((1.0 - y) * (1.0 + y)), p;
  if (w < 5.0) {
    w -= 2.5;
    p = 2.81022636e-08;
    p = 3.43273939e-07 + p * w;
    p = -3.5233877e-06 + p * w;
    p = -4.39150654e-06 + p * w;
    p = 0.00021858087 + p * w;
    p = -0.00125372503 + p * w;
    p = -0.00417768164 + p * w;
    p = 0.246640727 + p * w;
    p = 1.50140941 + p * w;
  } else {
    w = std::sqrt(w) - 3.0;
    p = -0.000200214257;
    p = 0.000100950558 + p * w;
    p = 0.00134934322 + p * w;
    p = -0.00367342844 + p * w;
    p = 0.00573950773 + p * w;
    p = -0.0076224613 + p * w;
    p = 0.00943887047 + p * w;
    p = 1.00167406 + p * w;
    p = 2.83297682 + p * w;
  }
  return p * y;
}
double erfinv_d(double y);
float erfinv_f(float y);
}  // namespace detail

/// Ops that also run on complex64 say `static constexpr bool complex = true;`.
template <typename Op, typename = void>
struct takes_complex : std::false_type {};
template <typename Op>
struct takes_complex<Op, std::void_t<decltype(Op::complex)>> : std::bool_constant<Op::complex> {};
template <typename Op>
inline constexpr bool takes_complex_v = takes_complex<Op>::value;

/// A primitive applying Op to every element. Op provides:
///   name, kind, `template <class T> T operator()(T)`, and
///   `static array grad(const array& x, const array& y, const array& v)`: v times dy/dx elementwise
///   (the Jacobian is diagonal, so this one rule is both the vjp and the jvp). On complex inputs the
///   jvp is t f'(z) and the vjp c conj(f'(z)) (PyTorch's and MLX's convention), which is
///   conj(grad(z, y, conj(c))) for the holomorphic ones; an Op that is not (complex sign) gives
///   `complex_vjp` too.
/// An Op whose complex derivative is not holomorphic gives its complex vjp itself:
/// `static array complex_vjp(const array& x, const array& y, const array& c)`.
template <typename Op, typename = void>
struct has_complex_vjp : std::false_type {};
template <typename Op>
struct has_complex_vjp<Op, std::void_t<decltype(&Op::complex_vjp)>> : std::true_type {};

template <typename Op>
class Unary : public UnaryPrimitive {
 public:
  Unary() { (void)kLoads; }  // instantiates the registration of this Op's loader
  void save(detail::Writer&) const override {}
  void eval_cpu(const std::vector<array>& inputs, array& out) override;
  bool is_elementwise() const override { return true; }
  bool supports_complex() const override { return takes_complex_v<Op>; }
  void eval_block(const Dtype* in_dtypes, const void* const* inputs, void* out, size_t n) const override;
  std::vector<array> vjp(const std::vector<array>& primals, const std::vector<array>& cotangents,
                         const std::vector<int>& argnums, const std::vector<array>& outputs) override {
    if (is_complex(primals[0].dtype())) {
      if constexpr (has_complex_vjp<Op>::value) return {Op::complex_vjp(primals[0], outputs[0], cotangents[0])};
      else return {conjugate(Op::grad(primals[0], outputs[0], conjugate(cotangents[0])))};
    }
    return {Op::grad(primals[0], outputs[0], cotangents[0])};
  }
  std::vector<array> jvp(const std::vector<array>& primals, const std::vector<array>& tangents,
                         const std::vector<int>& argnums) override {
    array y(primals[0].shape(), primals[0].dtype(), std::make_shared<Unary<Op>>(), {primals[0]});
    return {Op::grad(primals[0], y, tangents[0])};
  }
  std::pair<std::vector<array>, std::vector<int>> vmap(const std::vector<array>& in, const std::vector<int>& axes,
                                                       const std::vector<array>& outs) override {
    return detail::vmap_elementwise(in, axes, outs);
  }
  const char* name() const override { return Op::name; }
  bool is_equivalent(const Primitive& other) const override { return typeid(other) == typeid(*this); }
  std::vector<Shape> output_shapes(const std::vector<Shape>& in) const override { return same_shape_output(in); }
  bool is_differentiable() const override {
    return Op::kind != ElementwiseKind::predicate && Op::kind != ElementwiseKind::bitwise;
  }

 private:
  static const bool kLoads;
};
template <typename Op>
const bool Unary<Op>::kLoads = detail::register_primitive(Op::name, [](detail::Reader&) -> std::shared_ptr<Primitive> {
  return std::make_shared<Unary<Op>>();
});

/// A primitive applying Op to pairs of elements of same-shape, same-dtype inputs. Op provides name,
/// kind, `template <class T> auto operator()(T, T)` and
/// `static array grad(int arg, const array& a, const array& b, const array& y, const array& v)`:
/// v times d y / d input[arg].
template <typename Op>
class Binary : public UnaryPrimitive {
 public:
  Binary() { (void)kLoads; }  // instantiates the registration of this Op's loader
  void save(detail::Writer&) const override {}
  void eval_cpu(const std::vector<array>& inputs, array& out) override;
  bool is_elementwise() const override { return true; }
  bool supports_complex() const override { return takes_complex_v<Op>; }
  void eval_block(const Dtype* in_dtypes, const void* const* inputs, void* out, size_t n) const override;
  std::vector<array> vjp(const std::vector<array>& primals, const std::vector<array>& cotangents,
                         const std::vector<int>& argnums, const std::vector<array>& outputs) override {
    std::vector<array> out;
    const bool cplx = is_complex(primals[0].dtype());  // c conj(df/dz), as in Unary
    for (int arg : argnums) {
      if (cplx) out.push_back(conjugate(Op::grad(arg, primals[0], primals[1], outputs[0], conjugate(cotangents[0]))));
      else out.push_back(Op::grad(arg, primals[0], primals[1], outputs[0], cotangents[0]));
    }
    return out;
  }
  std::vector<array> jvp(const std::vector<array>& primals, const std::vector<array>& tangents,
                         const std::vector<int>& argnums) override {
    array y(primals[0].shape(), out_dtype(primals[0].dtype()), std::make_shared<Binary<Op>>(), primals);
    std::optional<array> acc;
    for (size_t i = 0; i < argnums.size(); ++i) {
      array t = Op::grad(argnums[i], primals[0], primals[1], y, tangents[i]);
      acc = acc ? add(*acc, t) : t;
    }
    return {*acc};
  }
  std::pair<std::vector<array>, std::vector<int>> vmap(const std::vector<array>& in, const std::vector<int>& axes,
                                                       const std::vector<array>& outs) override {
    return detail::vmap_elementwise(in, axes, outs);
  }
  const char* name() const override { return Op::name; }
  bool is_equivalent(const Primitive& other) const override { return typeid(other) == typeid(*this); }
  std::vector<Shape> output_shapes(const std::vector<Shape>& in) const override { return same_shape_output(in); }
  bool is_differentiable() const override {
    return Op::kind != ElementwiseKind::predicate && Op::kind != ElementwiseKind::logical &&
           Op::kind != ElementwiseKind::bitwise;
  }
  static Dtype out_dtype(Dtype in) {
    return (Op::kind == ElementwiseKind::predicate || Op::kind == ElementwiseKind::logical) ? bool_ : in;
  }

 private:
  static const bool kLoads;
};
template <typename Op>
const bool Binary<Op>::kLoads = detail::register_primitive(Op::name, [](detail::Reader&) -> std::shared_ptr<Primitive> {
  return std::make_shared<Binary<Op>>();
});

}  // namespace loom

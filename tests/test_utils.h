// Helpers shared by the test suites.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "loom/loom.h"
#include "loom/core/serialize.h"
#include "registry.h"

namespace loom::testing {

// Values the tests spell often (one definition: the tests of an area compile as one unit).
inline constexpr double kInf = std::numeric_limits<double>::infinity();
inline constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
inline constexpr float kInfF = std::numeric_limits<float>::infinity();
inline constexpr float kNaNF = std::numeric_limits<float>::quiet_NaN();
inline constexpr double kPi = 3.141592653589793;

// Every node a test makes is checked against the registry of primitives (registry.h).
inline const bool kRegistryHookInstalled = (detail::set_primitive_hook(&check_registered), true);

/// Asserts shape and values (row-major) within an absolute + relative tolerance; NaNs must match.
inline void expect_array(const array& a_in, const Shape& shape, const std::vector<double>& expected,
                         double tol = 1e-6) {
  array a = a_in;
  ASSERT_EQ(a.shape(), shape);
  auto got = a.to_vector<double>();
  ASSERT_EQ(got.size(), expected.size());
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::isnan(expected[i])) {
      EXPECT_TRUE(std::isnan(got[i])) << "at " << i;
    } else if (std::isinf(expected[i])) {
      EXPECT_EQ(got[i], expected[i]) << "at " << i;
    } else {
      EXPECT_NEAR(got[i], expected[i], tol + tol * std::abs(expected[i])) << "at flat index " << i;
    }
  }
}

/// Asserts that evaluating/building `expr` throws E and the message contains `needle`.
#define EXPECT_THROW_MSG(expr, E, needle)                                               \
  do {                                                                                  \
    try {                                                                               \
      expr;                                                                             \
      ADD_FAILURE() << "expected " #E " from " #expr;                                   \
    } catch (const E& e) {                                                              \
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();     \
    }                                                                                   \
  } while (0)

/// Deterministic values in [lo, hi) from a 64-bit LCG (the same on every platform), as float64.
inline array lcg_uniform(const Shape& shape, double lo, double hi, unsigned seed, uint64_t salt = 7) {
  size_t n = 1;
  for (int d : shape) n *= d;
  std::vector<double> v(n);
  uint64_t state = seed * 2654435761u + salt;
  for (auto& x : v) {
    state = state * 6364136223846793005ULL + 1442695040888963407ULL;
    x = lo + (hi - lo) * double(state >> 11) / double(1ULL << 53);
  }
  return array(v, shape, float64);
}

/// A one- or two-array function as a VectorFn (for the transforms that take one).
inline VectorFn as_vector_fn(const std::function<array(const array&)>& f) {
  return [f](const std::vector<array>& x) { return std::vector<array>{f(x[0])}; };
}
inline VectorFn as_vector_fn(const std::function<array(const array&, const array&)>& f) {
  return [f](const std::vector<array>& x) { return std::vector<array>{f(x[0], x[1])}; };
}

/// Checks vmap(fun, in_axes, out_axes) on `inputs` against calling `fun` on each batch entry and
/// stacking the results: same shapes, dtypes and values (within rtol/atol; NaNs must match).
inline void expect_vmap_matches_loop(const VectorFn& fun, const std::vector<array>& inputs,
                                     const std::vector<int>& in_axes, const std::vector<int>& out_axes = {},
                                     double rtol = 1e-5, double atol = 1e-6) {
  std::vector<array> got = vmap(fun, in_axes, out_axes)(inputs);
  int size = -1;
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (in_axes[i] >= 0) size = inputs[i].shape(in_axes[i]);
  }
  ASSERT_GE(size, 0);
  std::vector<std::vector<array>> per_entry;
  for (int b = 0; b < size; ++b) {
    std::vector<array> x;
    for (size_t i = 0; i < inputs.size(); ++i) x.push_back(in_axes[i] >= 0 ? take(inputs[i], b, in_axes[i]) : inputs[i]);
    per_entry.push_back(fun(x));
  }
  ASSERT_EQ(got.size(), per_entry.empty() ? got.size() : per_entry[0].size());
  for (size_t j = 0; j < got.size(); ++j) {
    std::vector<array> parts;
    for (auto& e : per_entry) parts.push_back(e[j]);
    const int ax = out_axes.empty() ? 0 : out_axes[j];
    array want = stack(parts, ax < 0 ? ax + static_cast<int>(parts[0].ndim()) + 1 : ax);
    ASSERT_EQ(got[j].shape(), want.shape()) << "output " << j;
    ASSERT_EQ(got[j].dtype(), want.dtype()) << "output " << j;
    const Dtype cd = is_complex(want.dtype()) ? complex64 : float64;
    array g = astype(got[j], cd), w = astype(want, cd);
    EXPECT_TRUE(allclose(g, w, rtol, atol, true).item<bool>())
        << "output " << j << ":\nvmap " << g << "\nloop " << w;
  }
}

/// Export round trip of one node's primitive (core/serialize.h): `out`'s primitive saves its
/// parameters, the loader registered under its name builds a new primitive from them, and a node of
/// that primitive over the same inputs must give the same outputs (shapes, dtypes, values bit for
/// bit, NaN to NaN). Call it before evaluating `out` (evaluation drops the graph).
inline void expect_export_roundtrip(const array& out) {
  ASSERT_TRUE(out.has_primitive()) << "evaluated already: nothing to save";
  const Primitive& p = out.primitive();
  const std::string name = p.name();  // (p goes with the graph when `out` is evaluated)
  detail::Writer w;
  p.save(w);
  detail::PrimitiveLoader load = detail::primitive_loader(name);
  ASSERT_NE(load, nullptr) << name << " saves but registers no loader";
  detail::Reader r(w.bytes().data(), w.bytes().size(), "the round trip");
  std::shared_ptr<Primitive> back = load(r);
  ASSERT_EQ(r.remaining(), 0u) << name << "'s loader left bytes its save wrote";
  ASSERT_EQ(std::string(back->name()), name);
  const std::vector<array> outs = out.outputs();
  std::vector<Shape> shapes;
  std::vector<Dtype> dtypes;
  for (const auto& o : outs) shapes.push_back(o.shape()), dtypes.push_back(o.dtype());
  const std::vector<array> again = array::make_arrays(shapes, dtypes, back, out.inputs());
  eval(outs, again);
  for (size_t k = 0; k < outs.size(); ++k) {
    EXPECT_TRUE(array_equal(outs[k], again[k], true).item<bool>())
        << name << " output " << k << ": saved " << outs[k] << ", loaded " << again[k];
  }
}

/// Names joined by single spaces (for comparing parameter-tree names in one assertion).
inline std::string joined(const std::vector<std::string>& names) {
  std::string out;
  for (const auto& n : names) out += (out.empty() ? "" : " ") + n;
  return out;
}

}  // namespace loom::testing

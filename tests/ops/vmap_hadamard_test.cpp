// vmap of hadamard_transform against a loop over the batch: the batch on any axis (the last one
// included, where the transform runs), the sizes m * 2^k, and gradients under vmap.
#include "../test_utils.h"
#include "loom/ops/hadamard.h"

using namespace loom;
using loom::testing::as_vector_fn;
using loom::testing::expect_vmap_matches_loop;
using loom::testing::lcg_uniform;

TEST(HadamardVmap, EveryBatchAxisAndSize) {
  for (int n : {8, 12, 20, 28}) {
    for (int at : {0, 1, 2}) {
      Shape s{2, n};
      s.insert(s.begin() + at, 3);
      const array x = astype(lcg_uniform(s, -1, 1, 1 + n + at), float32);
      expect_vmap_matches_loop(as_vector_fn([](const array& a) { return hadamard_transform(a); }), {x}, {at});
      expect_vmap_matches_loop(as_vector_fn([](const array& a) { return hadamard_transform(a, 0.5f); }), {x}, {at});
    }
  }
  // A 1-d input per entry (the batch axis first or last), other dtypes.
  const array v = astype(lcg_uniform({16, 3}, -1, 1, 40), float64);
  expect_vmap_matches_loop(as_vector_fn([](const array& a) { return hadamard_transform(a); }), {v}, {1});
  expect_vmap_matches_loop(as_vector_fn([](const array& a) { return hadamard_transform(a); }), {astype(v, bfloat16)}, {1},
                           {}, 1e-2, 1e-2);
  expect_vmap_matches_loop(as_vector_fn([](const array& a) { return hadamard_transform(a); }),
                           {astype(multiply(v, array(9.0)), int32)}, {1});
}

TEST(HadamardVmap, GradientsUnderVmap) {
  // m = 20: H is not symmetric, so the vjp's transpose shows.
  const array w = astype(lcg_uniform({2, 20}, -1, 1, 41), float32);
  auto g = as_vector_fn([w](const array& a) {
    return grad([w](const array& p) { return sum(multiply(hadamard_transform(p), w)); })(a);
  });
  expect_vmap_matches_loop(g, {astype(lcg_uniform({2, 20, 4}, -1, 1, 42), float32)}, {2});
  expect_vmap_matches_loop(g, {astype(lcg_uniform({4, 2, 20}, -1, 1, 43), float32)}, {0});
}

// gather_mm and block_masked_mm (MLX). Expected values computed once with numpy: the gathered
// products as np.stack([a[l] @ b[r] for l, r in zip(lhs, rhs)]), and the block masks spread over
// their blocks with np.repeat (twice) and sliced to the matrix, then (A * mask_lhs) @ (B * mask_rhs)
// * mask_out.
#include <cmath>
#include <limits>

#include "helpers.h"
#include "loom/autograd/check.h"

using namespace loom;
using loom::testing::expect_array;
using loom::testing::iota;

namespace {
void check_mm_grads(const std::function<array(const std::vector<array>&)>& f, const std::vector<array>& xs) {
  auto r = check_grads([&](const std::vector<array>& p) { return std::vector<array>{f(p)}; }, xs);
  EXPECT_TRUE(r.ok) << r.report;
}
}  // namespace

TEST(GatherMM, ProductsOfGatheredMatrices) {
  array a = iota({3, 2, 2}) * 0.5f - 1.f;
  array b = iota({2, 2, 3}) * 0.25f - 0.5f;
  expect_array(gather_mm(a, b, array({2, 0, 2}), array({1, 1, 0})), {3, 2, 3},
               {9.125, 10.75, 12.375, 11.875, 14.0, 16.125, -1.875, -2.25, -2.625, 0.875, 1.0, 1.125, -0.625, 1.0,
                2.625, -0.875, 1.25, 3.375});
  // Only rhs indices: a has no batch, so every product uses a.
  expect_array(gather_mm(iota({2, 3}) - 2.f, iota({4, 3, 2}) * 0.5f, std::nullopt, array({3, 0})), {2, 2, 2},
               {-28.0, -29.5, 62.0, 65.0, -1.0, -2.5, 8.0, 11.0});
  // A vector operand: a row, dropped again.
  expect_array(gather_mm(array({1.f, -2.f, 0.5f}), iota({2, 3, 2}), std::nullopt, array({1, 0})), {2, 2},
               {-5.0, -5.5, -2.0, -2.5});
  // Index arrays broadcast together ((2, 1) and (1, 3)); a negative index counts from the end.
  expect_array(gather_mm(iota({2, 2, 2}) - 3.f, iota({3, 2, 1}), array({0, 1}, {2, 1}), array({2, 0, -1}, {1, 3})),
               {2, 3, 2, 1}, {-22.0, -4.0, -2.0, 0.0, -22.0, -4.0, 14.0, 32.0, 2.0, 4.0, 14.0, 32.0});
  // No indices: matmul.
  expect_array(gather_mm(iota({2, 2}), iota({2, 2})), {2, 2}, {2, 3, 6, 11});
  // A transposed operand, float64 and bfloat16, and empty indices.
  array at = transpose(iota({2, 2, 3}), {0, 2, 1});  // (2, 3, 2)
  expect_array(gather_mm(at, ones({1, 2, 1}), array({1}), array({0})), {1, 3, 1}, {15, 17, 19});
  EXPECT_EQ(gather_mm(astype(a, float64), b, array({0}), array({0})).dtype(), float64);
  expect_array(gather_mm(astype(a, bfloat16), astype(b, bfloat16), array({2}), array({1})), {1, 2, 3},
               {9.125, 10.75, 12.375, 11.875, 14.0, 16.125});
  expect_array(gather_mm(a, b, array(std::vector<int>{}, {0}), array({0})), {0, 2, 3}, {});
}

TEST(GatherMM, BadInput) {
  array a = iota({3, 2, 2}), b = iota({2, 2, 3});
  array o = gather_mm(a, b, array({3}), array({0}));
  EXPECT_THROW_MSG(o.eval(), std::out_of_range, "[take] index 3 is out of bounds for axis 0 of size 3");
  EXPECT_THROW_MSG(gather_mm(astype(a, int32), astype(b, int32), array({0}), array({0})), std::invalid_argument,
                   "[gather_mm] only floating operands are supported");
  EXPECT_THROW_MSG(gather_mm(a, iota({2, 3, 3}), array({0}), array({0})), std::invalid_argument,
                   "[gather_mm] the last dimension of a (3,2,2) must match the second to last of b (2,3,3)");
  EXPECT_THROW_MSG(gather_mm(a, b, array({0.f}), array({0})), std::invalid_argument,
                   "[gather_mm] indices must have an integer dtype");
  EXPECT_THROW_MSG(gather_mm(a, b, array({0, 1}), array({0, 1, 1})), std::invalid_argument,
                   "[gather_mm] lhs indices of shape (2) and rhs indices of shape (3) do not broadcast together");
  EXPECT_THROW_MSG(gather_mm(array(1.f), b, array({0}), array({0})), std::invalid_argument,
                   "[gather_mm] operands of shapes () and (2,2,3) must have at least one dimension");
}

TEST(GatherMM, Gradients) {
  // Repeated indices: the gradient of a matrix used twice adds up.
  check_mm_grads([](const std::vector<array>& p) { return gather_mm(p[0], p[1], array({2, 0, 2}), array({1, 1, 0})); },
        {astype(iota({3, 2, 2}), float64) * 0.3 - 1.0, astype(iota({2, 2, 3}), float64) * 0.2 - 0.7});
  check_mm_grads([](const std::vector<array>& p) { return gather_mm(p[0], p[1], std::nullopt, array({1, 1})); },
        {astype(array({1.f, -2.f, 0.5f}), float64), astype(iota({2, 3, 2}), float64) * 0.1});
}

TEST(BlockMaskedMM, MasksBlocksOfOperandsAndResult) {
  array A = iota({4, 5}) * 0.1f - 1.f, B = iota({5, 3}) * 0.2f - 1.5f;
  array ml = array({true, false, true, false, true, true}, {2, 3});
  array mr = array({true, true, false, true, true, false}, {3, 2});
  array mo = array({true, false, true, true}, {2, 2});
  expect_array(block_masked_mm(A, B, 2, mo, ml, mr), {4, 3},
               {1.77, 1.27, 0.0, 1.02, 0.82, 0.0, 0.36, 0.44, 0.23, 0.81, 0.99, 0.63});
  // Floating masks scale the blocks.
  array fl = array({0.5f, 2.f, 1.f, -1.f, 1.f, 0.f}, {2, 3});
  array fr = array({1.f, 3.f, 2.f, 1.f, 1.f, -0.5f}, {3, 2});
  array fo = array({2.f, 1.f, 0.f, -1.f}, {2, 2});
  expect_array(block_masked_mm(A, B, 2, fo, fl, fr), {4, 3},
               {1.47, -1.55, 1.575, 1.17, 0.15, 0.85, 0.0, 0.0, -0.38, 0.0, 0.0, -3.18});
  // An output mask broadcast over a batch; a block size that does not divide the matrix.
  expect_array(block_masked_mm(iota({2, 4, 5}) * 0.1f - 2.f, B, 2, mo), {2, 4, 3},
               {3.3, 1.5, 0.0, 2.55, 1.25, 0.0, 1.8, 1.0, 0.2, 1.05, 0.75, 0.45,
                0.3, 0.5, 0.0, -0.45, 0.25, 0.0, -1.2, 0.0, 1.2, -1.95, -0.25, 1.45});
  expect_array(block_masked_mm(A, B, 3, array({true, false}, {2, 1})), {4, 3},
               {1.8, 1.0, 0.2, 1.05, 0.75, 0.45, 0.3, 0.5, 0.7, 0.0, 0.0, 0.0});
  // A vector operand, with only a lhs mask (the rhs one defaults to true).
  expect_array(block_masked_mm(array({1.f, 2.f, 3.f, 4.f, 5.f}), B, 2, std::nullopt, array({true, false, true})), {3},
               {1.2, 2.8, 4.4});
  // A bool mask zeroes a block even where it holds NaN (a floating one multiplies).
  array nanA = slice_update(A, array(std::numeric_limits<float>::quiet_NaN()), {0, 2}, {1, 3});  // in masked block (0, 1)
  auto v = block_masked_mm(nanA, B, 2, std::nullopt, ml, mr).to_vector<float>();
  EXPECT_FALSE(std::isnan(v[0]));
  auto w = block_masked_mm(nanA, B, 2, std::nullopt, astype(ml, float32), astype(mr, float32)).to_vector<float>();
  EXPECT_TRUE(std::isnan(w[0]));
  // No masks: matmul.
  expect_array(block_masked_mm(iota({2, 2}), iota({2, 2}), 32), {2, 2}, {2, 3, 6, 11});
}

TEST(BlockMaskedMM, BadInput) {
  array A = iota({4, 5}), B = iota({5, 3});
  array m = array({true, false, true, true}, {2, 2});
  EXPECT_THROW_MSG(block_masked_mm(A, B, 0, m), std::invalid_argument, "[block_masked_mm] block_size must be at least 1");
  EXPECT_THROW_MSG(block_masked_mm(A, B, 2, array({true, false, true}, {1, 3})), std::invalid_argument,
                   "[block_masked_mm] mask_out of shape (1,3) does not broadcast to (2,2) (blocks of 2)");
  EXPECT_THROW_MSG(block_masked_mm(A, iota({4, 3}), 2, m), std::invalid_argument,
                   "[block_masked_mm] the last dimension of a (4,5) must match the second to last of b (4,3)");
  EXPECT_THROW_MSG(block_masked_mm(astype(A, int32), astype(B, int32), 2, m), std::invalid_argument,
                   "[block_masked_mm] only floating operands are supported");
  EXPECT_THROW_MSG(block_masked_mm(iota({2, 4, 5}), iota({3, 5, 3}), 2, m), std::invalid_argument,
                   "[block_masked_mm] the batch dimensions of a (2,4,5) and b (3,5,3) do not broadcast together");
}

TEST(BlockMaskedMM, Gradients) {
  array A = astype(iota({4, 5}), float64) * 0.1 - 1.0, B = astype(iota({5, 3}), float64) * 0.2 - 1.5;
  array ml = array({true, false, true, false, true, true}, {2, 3});
  array mr = array({true, true, false, true, true, false}, {3, 2});
  check_mm_grads([&](const std::vector<array>& p) { return block_masked_mm(p[0], p[1], 2, greater(p[2], zeros_like(p[2])), ml, mr); },
        {A, B, array({1.0, -1.0, 1.0, 1.0}, {2, 2})});
  // Floating masks get gradients too.
  check_mm_grads([](const std::vector<array>& p) { return block_masked_mm(p[0], p[1], 2, p[2], p[3], p[4]); },
        {A, B, array({2.0, 1.0, 0.5, -1.0}, {2, 2}), array({0.5, 2.0, 1.0, -1.0, 1.0, 0.3}, {2, 3}),
         array({1.0, 3.0, 2.0, 1.0, 1.0, -0.5}, {3, 2})});
}

// vmap of the collectives: each rank's batched collective equals the loop of its entries' collectives.
// Runs alone (a group of size 1: the collectives are their inputs) and under mpirun.
#include "../test_utils.h"
#include "loom/distributed/distributed.h"

using namespace loom;
using loom::testing::expect_vmap_matches_loop;
namespace dist = loom::distributed;

TEST(DistributedVmap, CollectivesMatchTheLoop) {
  auto g = dist::init();
  // Different values on every rank.
  const array x = add(astype(loom::testing::lcg_uniform({4, 6, 3}, -1, 1, 71), float32), array(float(g.rank())));
  auto one = [](array (*f)(const array&, std::optional<dist::Group>, StreamOrDevice)) {
    return [f](const std::vector<array>& v) { return std::vector<array>{f(v[0], std::nullopt, {})}; };
  };
  for (int ax : {0, 1, 2}) {
    expect_vmap_matches_loop(one(&dist::all_sum), {x}, {ax});
    expect_vmap_matches_loop(one(&dist::all_max), {x}, {ax});
    expect_vmap_matches_loop(one(&dist::all_min), {x}, {ax});
    expect_vmap_matches_loop(one(&dist::all_mean), {x}, {ax});
    expect_vmap_matches_loop(one(&dist::all_gather), {x}, {ax});
  }
  // sum_scatter cuts axis 0 of each entry among the ranks.
  const array y = astype(loom::testing::lcg_uniform({2 * g.size(), 2 * g.size(), 4}, -1, 1, 72 + g.rank()), float32);
  for (int ax : {0, 1, 2}) expect_vmap_matches_loop(one(&dist::sum_scatter), {y}, {ax});
  // Gradients through the collectives, per batch entry.
  auto loss = [](const std::vector<array>& v) { return sum(square(dist::all_sum(v[0]))); };
  expect_vmap_matches_loop(grad(loss), {x}, {1});
}

TEST(DistributedVmap, FlatAllReduceHasNoRule) {
  auto g = dist::init();
  if (g.size() == 1) GTEST_SKIP() << "a group of one records no collective";
  const array x = ones({3, 4});
  auto f = [](const std::vector<array>& v) { return std::vector<array>{dist::all_sum_flat({v[0], v[0]})}; };
  EXPECT_THROW_MSG(vmap(f, {0})({x}), std::invalid_argument, "[vmap] all_sum has no batching rule");
}

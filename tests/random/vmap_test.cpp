// vmap of the random primitives: with a batch of keys each entry draws exactly what its key draws
// alone, and with a shared key and batched parameters (or arrays to permute) each entry matches the
// call on its own parameters; compared bit for bit with a loop over the batch.
#include "../test_utils.h"
#include "loom/ops/random.h"

using namespace loom;
using loom::testing::as_vector_fn;
using loom::testing::expect_vmap_matches_loop;
using loom::testing::lcg_uniform;

namespace {

constexpr int kVmrBatch = 4;

array vmr_f32(const Shape& shape, unsigned seed, double lo = -1.0, double hi = 1.0) {
  return astype(lcg_uniform(shape, lo, hi, seed), float32);
}

// kVmrBatch keys, batched along `at` (0: (4, 2), 1: (2, 4)).
array vmr_keys(int at, uint64_t seed = 7) {
  array k = random::split(random::key(seed), kVmrBatch);
  return at == 0 ? k : transpose(k);
}

// vmap over the keys (batched at `at`) equals the loop, bit for bit.
void vmr_expect_exact(const std::function<array(const array&)>& f, int at) {
  expect_vmap_matches_loop(as_vector_fn(f), {vmr_keys(at)}, {at}, {}, 0.0, 0.0);
}

}  // namespace

TEST(RandomVmap, BatchedKeysDrawWhatEachKeyDrawsAlone) {
  for (int at : {0, 1}) {
    for (int width : {1, 2, 4, 8}) {
      vmr_expect_exact([width](const array& k) { return random::bits({5}, width, k); }, at);
      vmr_expect_exact([width](const array& k) { return random::bits({2, 3}, width, k); }, at);
    }
    for (Dtype dt : {float32, float16, bfloat16, float64}) {
      vmr_expect_exact([dt](const array& k) { return random::uniform({7}, dt, k); }, at);
      vmr_expect_exact([dt](const array& k) { return random::normal({2, 3}, dt, 0.5f, 2.0f, k); }, at);
      vmr_expect_exact([dt](const array& k) { return random::gumbel({5}, dt, k); }, at);
      vmr_expect_exact([dt](const array& k) { return random::laplace({5}, dt, 1.0f, 0.5f, k); }, at);
      vmr_expect_exact([dt](const array& k) { return random::truncated_normal(-1.0f, 1.5f, {6}, dt, k); }, at);
    }
    vmr_expect_exact([](const array& k) { return random::uniform(-2.0f, 3.0f, {3, 2}, float32, k); }, at);
    vmr_expect_exact([](const array& k) { return random::normal({}, float32, k); }, at);
    for (Dtype dt : {int32, uint8, int64}) {
      vmr_expect_exact([dt](const array& k) { return random::randint(0, 9, {6}, dt, k); }, at);
    }
    vmr_expect_exact([](const array& k) { return random::randint(-3, 9, {6}, int32, k); }, at);
    vmr_expect_exact([](const array& k) { return random::bernoulli(0.3, {9}, k); }, at);
    vmr_expect_exact([](const array& k) { return random::permutation(9, k); }, at);
    vmr_expect_exact([](const array& k) { return random::split(k, 3); }, at);
    vmr_expect_exact([](const array& k) { return random::split(k).second; }, at);
    // Keys split from keys: a chain of draws per entry.
    vmr_expect_exact([](const array& k) { return random::uniform({3}, float32, random::split(k).first); }, at);
    // categorical: one distribution sampled by its inverse CDF, and rows through gumbel noise.
    const array logits = vmr_f32({5}, 1, -2, 2), rows = vmr_f32({3, 5}, 2, -2, 2);
    vmr_expect_exact([logits](const array& k) { return random::categorical(logits, -1, Shape{6}, k); }, at);
    vmr_expect_exact([rows](const array& k) { return random::categorical(rows, 1, k); }, at);
    vmr_expect_exact([rows](const array& k) { return random::categorical(rows, 0, 4, k); }, at);
    // Permuting an array shared by every entry, along either axis.
    const array x = vmr_f32({5, 3}, 3);
    vmr_expect_exact([x](const array& k) { return random::permutation(x, 0, k); }, at);
    vmr_expect_exact([x](const array& k) { return random::permutation(x, -1, k); }, at);
  }
  // Empty draws.
  vmr_expect_exact([](const array& k) { return random::uniform({0, 3}, float32, k); }, 0);
  vmr_expect_exact([](const array& k) { return random::permutation(0, k); }, 0);
}

TEST(RandomVmap, LargeDrawsPerKey) {
  // Blocks large enough that each draw parallelizes inside itself.
  vmr_expect_exact([](const array& k) { return random::uniform({70000}, float32, k); }, 0);
  vmr_expect_exact([](const array& k) { return random::bits({40001}, 1, k); }, 1);
  // Many small blocks, split across threads by key.
  const array many = random::split(random::key(9), 40);
  expect_vmap_matches_loop(as_vector_fn([](const array& k) { return random::normal({1000}, float32, k); }), {many}, {0}, {},
                           0.0, 0.0);
  expect_vmap_matches_loop(as_vector_fn([](const array& k) { return random::permutation(1000, k); }), {many}, {0}, {}, 0.0, 0.0);
}

TEST(RandomVmap, BatchedParametersWithASharedOrBatchedKey) {
  const array key = random::key(11);
  const array lows = vmr_f32({kVmrBatch, 3}, 4), highs = add(lows, transpose(vmr_f32({3, kVmrBatch}, 5, 0.5, 2.0)));
  auto uni = [](const std::vector<array>& v) {
    return std::vector<array>{random::uniform(v[0], v[1], {2, 3}, float32, v[2])};
  };
  const array keys = vmr_keys(0);
  expect_vmap_matches_loop(uni, {lows, transpose(highs), key}, {0, 1, -1}, {}, 0.0, 0.0);
  expect_vmap_matches_loop(uni, {lows, array(5.0f), key}, {0, -1, -1}, {}, 0.0, 0.0);
  expect_vmap_matches_loop(uni, {lows, highs, keys}, {0, 0, 0}, {}, 0.0, 0.0);
  expect_vmap_matches_loop(uni, {array(0.0f), highs, keys}, {-1, 0, 0}, {}, 0.0, 0.0);
  auto tn = [](const std::vector<array>& v) {
    return std::vector<array>{random::truncated_normal(v[0], v[1], {3}, float32, v[2])};
  };
  expect_vmap_matches_loop(tn, {lows, highs, key}, {0, 0, -1}, {}, 0.0, 0.0);
  expect_vmap_matches_loop(tn, {lows, array(2.0f), keys}, {0, -1, 0}, {}, 0.0, 0.0);
  auto ri = [](const std::vector<array>& v) {
    return std::vector<array>{random::randint(v[0], v[1], {3}, int32, v[2])};
  };
  const array ilo = astype(floor(multiply(lows, array(5.0f))), int32), ihi = add(ilo, array(7, int32));
  expect_vmap_matches_loop(ri, {ilo, ihi, key}, {0, 0, -1}, {}, 0.0, 0.0);
  expect_vmap_matches_loop(ri, {ilo, array(9, int32), keys}, {0, -1, 0}, {}, 0.0, 0.0);
  auto bern = as_vector_fn([](const array& p, const array& k) { return random::bernoulli(p, {3}, k); });
  const array ps = vmr_f32({3, kVmrBatch}, 6, 0.0, 1.0);
  expect_vmap_matches_loop(bern, {ps, key}, {1, -1}, {}, 0.0, 0.0);
  expect_vmap_matches_loop(bern, {ps, keys}, {1, 0}, {}, 0.0, 0.0);
  expect_vmap_matches_loop(bern, {astype(ps, float64), vmr_keys(1)}, {1, 1}, {}, 0.0, 0.0);
  // One categorical distribution per entry (the inverse-CDF path).
  auto cat = as_vector_fn([](const array& l, const array& k) { return random::categorical(l, 0, Shape{5}, k); });
  const array logits = vmr_f32({6, kVmrBatch}, 7, -2, 2);
  expect_vmap_matches_loop(cat, {logits, key}, {1, -1}, {}, 0.0, 0.0);
  expect_vmap_matches_loop(cat, {logits, keys}, {1, 0}, {}, 0.0, 0.0);
  expect_vmap_matches_loop(cat, {astype(logits, float64), keys}, {1, 0}, {}, 0.0, 0.0);
  // multivariate_normal with a shared covariance.
  const array mean = vmr_f32({kVmrBatch, 2}, 8), cov = array({2.0f, 0.5f, 0.5f, 1.0f}, {2, 2});
  auto mvn = as_vector_fn([cov](const array& m, const array& k) { return random::multivariate_normal(m, cov, {3}, float32, k); });
  expect_vmap_matches_loop(mvn, {mean, keys}, {0, 0}, {}, 1e-6, 1e-6);
}

TEST(RandomVmap, PermutationOfBatchedArrays) {
  auto perm = [](int axis) {
    return as_vector_fn([axis](const array& x, const array& k) { return random::permutation(x, axis, k); });
  };
  const array key = random::key(3);
  for (int axis : {0, 1, -1}) {
    for (int xa : {0, 1, 2}) {
      Shape s{5, 3};
      s.insert(s.begin() + xa, kVmrBatch);
      const array x = vmr_f32(s, 9);
      expect_vmap_matches_loop(perm(axis), {x, key}, {xa, -1}, {}, 0.0, 0.0);  // one permutation for all
      expect_vmap_matches_loop(perm(axis), {x, vmr_keys(1)}, {xa, 1}, {}, 0.0, 0.0);  // one per entry
    }
    expect_vmap_matches_loop(perm(axis), {vmr_f32({5, 3}, 10), vmr_keys(0)}, {-1, 0}, {}, 0.0, 0.0);
  }
  // Integer arrays, and nested vmap: a grid of keys against a grid of arrays.
  expect_vmap_matches_loop(perm(0), {astype(vmr_f32({kVmrBatch, 6}, 11, -9, 9), int32), vmr_keys(0)}, {0, 0}, {}, 0.0, 0.0);
  const array grid = random::split(random::key(5), 3 * kVmrBatch);
  const array kgrid = reshape(grid, {3, kVmrBatch, 2});
  const array xs = vmr_f32({kVmrBatch, 3, 6, 2}, 12);
  expect_vmap_matches_loop(vmap(perm(0), {0, 0}), {xs, kgrid}, {0, 1}, {}, 0.0, 0.0);
  expect_vmap_matches_loop(vmap(perm(1), {-1, 0}), {vmr_f32({6, 2}, 13), kgrid}, {-1, 1}, {}, 0.0, 0.0);
  expect_vmap_matches_loop(vmap(as_vector_fn([](const array& k) { return random::uniform({3}, float32, k); }), {0}), {kgrid},
                           {1}, {}, 0.0, 0.0);
}

TEST(RandomVmap, GradientsThroughPermutations) {
  // vmap of grad: each entry's gradient is its own inverse permutation of the weights.
  const array w = vmr_f32({5, 2}, 14);
  auto g = [w](const std::vector<array>& v) {
    return grad([w](const std::vector<array>& p) { return sum(multiply(random::permutation(p[0], 0, p[1]), w)); }, 0)(v);
  };
  expect_vmap_matches_loop(g, {vmr_f32({5, 2}, 15), vmr_keys(0)}, {-1, 0}, {}, 0.0, 0.0);
  expect_vmap_matches_loop(g, {vmr_f32({5, kVmrBatch, 2}, 16), vmr_keys(1)}, {1, 1}, {}, 0.0, 0.0);
  expect_vmap_matches_loop(g, {vmr_f32({5, kVmrBatch, 2}, 16), random::key(2)}, {1, -1}, {}, 0.0, 0.0);
  // grad of vmap: the summed per-entry losses.
  const array x = vmr_f32({5, 2}, 17), keys = vmr_keys(0);
  auto batched = [&](const std::vector<array>& v) {
    auto f = as_vector_fn([&](const array& a, const array& k) { return multiply(random::permutation(a, 0, k), w); });
    return sum(square(vmap(f, {-1, 0})({v[0], keys})[0]));
  };
  auto looped = [&](const std::vector<array>& v) {
    array s = array(0.0f);
    for (int b = 0; b < kVmrBatch; ++b) s = add(s, sum(square(multiply(random::permutation(v[0], 0, take(keys, b, 0)), w))));
    return s;
  };
  EXPECT_TRUE(allclose(grad(batched, 0)({x})[0], grad(looped, 0)({x})[0], 1e-6, 1e-6).item<bool>());
}

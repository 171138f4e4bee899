// Keys, the Threefry block, the stream layout, determinism, the global state and bad inputs.
#include <cstring>
#include <set>

#include "../test_utils.h"
#include "loom/core/primitive.h"
#include "loom/ops/random.h"

using namespace loom;
using loom::testing::expect_array;

namespace {

std::vector<int64_t> ints(array a) { return a.to_vector<int64_t>(); }

// The bit patterns of an int32 key array as uint32 words.
std::vector<uint32_t> words(array a) {
  std::vector<uint32_t> out;
  for (int32_t v : a.to_vector<int32_t>()) out.push_back(static_cast<uint32_t>(v));
  return out;
}

template <typename T>
bool same_bits(array a, array b) {
  auto x = a.to_vector<T>();
  auto y = b.to_vector<T>();
  return x.size() == y.size() && std::memcmp(x.data(), y.data(), x.size() * sizeof(T)) == 0;
}

}  // namespace

// Random123's kat_vectors (threefry2x32 R ctr0 ctr1 key0 key1 -> out0 out1), the same values JAX's
// random_test checks for 20 rounds: zeros, all ones and the digits of pi.
TEST(RandomThreefry, KnownAnswerVectors) {
  using random::detail::threefry2x32;
  struct Kat {
    std::array<uint32_t, 2> ctr, key, out;
  };
  const std::array<uint32_t, 2> z{0, 0}, f{0xffffffffu, 0xffffffffu};
  const std::array<uint32_t, 2> pi_ctr{0x243f6a88u, 0x85a308d3u}, pi_key{0x13198a2eu, 0x03707344u};

  Kat r20[] = {{z, z, {0x6b200159u, 0x99ba4efeu}},
               {f, f, {0x1cb996fcu, 0xbb002be7u}},
               {pi_ctr, pi_key, {0xc4923a9cu, 0x483df7a0u}}};
  for (auto& k : r20) EXPECT_EQ(threefry2x32<20>(k.key, k.ctr), k.out);

  Kat r13[] = {{z, z, {0x9d1c5ec6u, 0x8bd50731u}},
               {f, f, {0xfd36d048u, 0x2d17272cu}},
               {pi_ctr, pi_key, {0xba3e4725u, 0xf27d669eu}}};
  for (auto& k : r13) EXPECT_EQ(threefry2x32<13>(k.key, k.ctr), k.out);

  Kat r32[] = {{z, z, {0xcee3d47eu, 0xa23dfd5cu}},
               {f, f, {0x6e2fe0d0u, 0xb1b76f82u}},
               {pi_ctr, pi_key, {0xe2827716u, 0xc3c05cdfu}}};
  for (auto& k : r32) EXPECT_EQ(threefry2x32<32>(k.key, k.ctr), k.out);

  // block(key, j) uses the counter (j mod 2^32, j >> 32).
  EXPECT_EQ(random::detail::block(pi_key, 0x85a308d3243f6a88ull), (std::array<uint32_t, 2>{0xc4923a9cu, 0x483df7a0u}));
  EXPECT_EQ(random::detail::block(z, 0), (std::array<uint32_t, 2>{0x6b200159u, 0x99ba4efeu}));
}

TEST(RandomKeys, KeyFromSeed) {
  array k = random::key(0x0123456789abcdefull);
  EXPECT_EQ(k.shape(), (Shape{2}));
  EXPECT_EQ(k.dtype(), int32);
  EXPECT_EQ(words(k), (std::vector<uint32_t>{0x01234567u, 0x89abcdefu}));
  EXPECT_EQ(words(random::key(0)), (std::vector<uint32_t>{0, 0}));
  EXPECT_EQ(words(random::key(5)), (std::vector<uint32_t>{0, 5}));
}

// With key 0, block 0 is Threefry's zero vector: the stream starts 59 01 20 6b fe 4e ba 99.
TEST(RandomKeys, StreamLayoutKnownAnswers) {
  array k0 = random::key(0);
  array s = random::split(k0, 1);
  EXPECT_EQ(s.shape(), (Shape{1, 2}));
  EXPECT_EQ(s.dtype(), int32);
  EXPECT_EQ(words(s), (std::vector<uint32_t>{0x6b200159u, 0x99ba4efeu}));

  array b4 = random::bits({2}, 4, k0);
  EXPECT_EQ(b4.dtype(), uint32);
  EXPECT_EQ(ints(b4), (std::vector<int64_t>{0x6b200159, 0x99ba4efe}));
  array b8 = random::bits({1}, 8, k0);
  EXPECT_EQ(static_cast<uint64_t>(ints(b8)[0]), 0x99ba4efe6b200159ull);
  array b1 = random::bits({8}, 1, k0);
  EXPECT_EQ(b1.dtype(), uint8);
  EXPECT_EQ(ints(b1), (std::vector<int64_t>{0x59, 0x01, 0x20, 0x6b, 0xfe, 0x4e, 0xba, 0x99}));
  array b2 = random::bits({2, 2}, 2, k0);
  EXPECT_EQ(b2.dtype(), uint16);
  EXPECT_EQ(ints(b2), (std::vector<int64_t>{0x0159, 0x6b20, 0x4efe, 0x99ba}));

  // Blocks 0 and 1 of key 0 through the array API: split rows are consecutive blocks.
  auto blk1 = random::detail::block({0, 0}, 1);
  EXPECT_EQ(words(random::split(k0, 2)), (std::vector<uint32_t>{0x6b200159u, 0x99ba4efeu, blk1[0], blk1[1]}));
  auto [a, b] = random::split(k0);
  EXPECT_EQ(a.shape(), (Shape{2}));
  EXPECT_EQ(words(a), (std::vector<uint32_t>{0x6b200159u, 0x99ba4efeu}));
  EXPECT_EQ(words(b), (std::vector<uint32_t>{blk1[0], blk1[1]}));

  // uniform float32 element i = (word i >> 8) / 2^24; float64 element i = (block i >> 11) / 2^53.
  expect_array(random::uniform({2}, k0), {2},
               {double(0x6b200159u >> 8) / 16777216.0, double(0x99ba4efeu >> 8) / 16777216.0}, 0);
  expect_array(random::uniform({1}, float64, k0), {1}, {double(0x99ba4efe6b200159ull >> 11) / 9007199254740992.0}, 0);
  // uniform(low, high) = low + (high - low) u.
  expect_array(random::uniform(-2.0, 2.0, {1}, float64, k0), {1},
               {-2.0 + 4.0 * (double(0x99ba4efe6b200159ull >> 11) / 9007199254740992.0)}, 1e-15);

  // normal: z = sqrt(2) erfinv(u), u = (2k + 1) / 2^24 - 1 with k = word >> 8: erf(z / sqrt 2) = u.
  double u0 = (2.0 * double(0x6b200159u >> 8) + 1.0) / 16777216.0 - 1.0;
  float z0 = random::normal({1}, k0).item<float>();
  EXPECT_NEAR(std::erf(z0 / std::sqrt(2.0)), u0, 2e-7);
  float z1 = random::normal({1}, float32, 1.0f, 3.0f, k0).item<float>();
  EXPECT_NEAR(z1, 1.0f + 3.0f * z0, 1e-5);
  EXPECT_EQ(random::normal({1}, 1.0f, 3.0f, k0).item<float>(), z1);  // float32 is the default dtype
}

// The remaining generators at element 0 of key 0: word 0x6b200159, block 0x99ba4efe6b200159.
TEST(RandomKeys, GeneratorsKnownAnswers) {
  array k0 = random::key(0);
  const uint64_t W = 0x99ba4efe6b200159ull;
  // bernoulli: word / 2^32 = 0.41845... < p
  EXPECT_TRUE(random::bernoulli(0.4185, {1}, k0).item<bool>());
  EXPECT_FALSE(random::bernoulli(0.4184, {1}, k0).item<bool>());
  // randint: low + floor(W * range / 2^64); W / 2^64 = 0.60050...
  EXPECT_EQ(random::randint(0, 10, {1}, int32, k0).item<int>(), 6);
  EXPECT_EQ(random::randint(-100, 100, {1}, int64, k0).item<int64_t>(), 20);
  // gumbel: -log(-log(v)), v = (k + 1/2) / 2^24 with k = word >> 8.
  const double v32 = (double(0x6b200159u >> 8) + 0.5) / 16777216.0;
  EXPECT_NEAR(random::gumbel({1}, float32, k0).item<float>(), -std::log(-std::log(v32)), 1e-6);
  // truncated normal, float64: v = (k + 1/2) / 2^52 with k = W >> 12; between the bounds the CDF is
  // linear in v. Inside (-1, 2) through erf; in the tail (10, 11) through erfc, to full accuracy.
  const double v = (double(W >> 12) + 0.5) / 4503599627370496.0;
  const double r2 = std::sqrt(2.0);
  double z = random::truncated_normal(-1.0, 2.0, {1}, float64, k0).item<double>();
  double ea = std::erf(-1 / r2), eb = std::erf(2 / r2);
  EXPECT_NEAR(std::erf(z / r2), ea + (eb - ea) * v, 1e-14);
  double t = random::truncated_normal(10.0, 11.0, {1}, float64, k0).item<double>();
  double qa = std::erfc(10 / r2), qb = std::erfc(11 / r2);
  EXPECT_NEAR(std::erfc(t / r2) / (qb + (qa - qb) * v), 1.0, 1e-12);
  double tn = random::truncated_normal(-11.0, -10.0, {1}, float64, k0).item<double>();
  EXPECT_NEAR(std::erfc(-tn / r2) / (qb + (qa - qb) * v), 1.0, 1e-12);  // the mirror image
  // normal float64: erf(z / sqrt 2) = (2k + 1) / 2^52 - 1 with k = W >> 12.
  double zn = random::normal({1}, float64, k0).item<double>();
  EXPECT_NEAR(std::erf(zn / r2), (2.0 * double(W >> 12) + 1.0) / 4503599627370496.0 - 1.0, 1e-15);
}

TEST(RandomKeys, SameKeySameNumbersDifferentKeysDifferent) {
  array k = random::key(1234);
  EXPECT_TRUE(same_bits<float>(random::uniform({1000}, k), random::uniform({1000}, k)));
  EXPECT_TRUE(same_bits<double>(random::normal({1000}, float64, k), random::normal({1000}, float64, k)));
  EXPECT_TRUE(same_bits<int32_t>(random::randint(0, 100, {1000}, int32, k), random::randint(0, 100, {1000}, int32, k)));
  EXPECT_TRUE(same_bits<int32_t>(random::permutation(100, k), random::permutation(100, k)));

  auto a = random::uniform({1000}, random::key(1)).to_vector<float>();
  auto b = random::uniform({1000}, random::key(2)).to_vector<float>();
  auto c = random::uniform({1000}, random::key(uint64_t(1) << 32)).to_vector<float>();
  int same_ab = 0, same_ac = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    same_ab += a[i] == b[i];
    same_ac += a[i] == c[i];
  }
  EXPECT_LT(same_ab, 5);  // equal 24-bit values: expected 1000 / 2^24
  EXPECT_LT(same_ac, 5);
}

TEST(RandomKeys, PrefixAndShapeIndependence) {
  array k = random::key(99);
  auto big = random::uniform({1000}, k).to_vector<float>();
  auto small = random::uniform({7}, k).to_vector<float>();
  for (size_t i = 0; i < small.size(); ++i) EXPECT_EQ(small[i], big[i]);
  auto grid = random::uniform({20, 50}, k).to_vector<float>();
  EXPECT_EQ(grid, big);
  auto n_big = random::normal({33}, float64, k).to_vector<double>();
  auto n_small = random::normal({5}, float64, k).to_vector<double>();
  for (size_t i = 0; i < n_small.size(); ++i) EXPECT_EQ(n_small[i], n_big[i]);
  // Bits of width 4 are the 32-bit words the float32 uniforms use.
  auto w = ints(random::bits({1000}, k));
  for (size_t i = 0; i < w.size(); ++i) EXPECT_EQ(big[i], float(w[i] >> 8) / 16777216.0f);
}

TEST(RandomKeys, SplitKeysAreDistinctAndIndependent) {
  array k = random::key(2024);
  array ks = random::split(k, 64);
  EXPECT_EQ(ks.shape(), (Shape{64, 2}));
  auto v = words(ks);
  std::set<std::pair<uint32_t, uint32_t>> seen;
  for (size_t i = 0; i < 64; ++i) seen.insert({v[2 * i], v[2 * i + 1]});
  seen.insert({0u, 2024u});
  EXPECT_EQ(seen.size(), 65u);  // all children differ from each other and from the parent

  auto [k1, k2] = random::split(k);
  EXPECT_EQ(words(k1), (std::vector<uint32_t>{v[0], v[1]}));
  EXPECT_EQ(words(k2), (std::vector<uint32_t>{v[2], v[3]}));

  // Samples of two children (and of a child and its parent) are uncorrelated: |r| < 5 / sqrt(n).
  const int n = 200000;
  auto corr = [&](array x_, array y_) {
    auto x = x_.to_vector<double>();
    auto y = y_.to_vector<double>();
    double mx = 0, my = 0;
    for (int i = 0; i < n; ++i) mx += x[i], my += y[i];
    mx /= n, my /= n;
    double sxy = 0, sxx = 0, syy = 0;
    for (int i = 0; i < n; ++i) {
      sxy += (x[i] - mx) * (y[i] - my);
      sxx += (x[i] - mx) * (x[i] - mx);
      syy += (y[i] - my) * (y[i] - my);
    }
    return sxy / std::sqrt(sxx * syy);
  };
  EXPECT_LT(std::abs(corr(random::normal({n}, k1), random::normal({n}, k2))), 5.0 / std::sqrt(n));
  EXPECT_LT(std::abs(corr(random::normal({n}, k), random::normal({n}, k1))), 5.0 / std::sqrt(n));
  // Key (a, b) and key (a, b + 1) (neighbouring seeds) are unrelated too.
  EXPECT_LT(std::abs(corr(random::normal({n}, random::key(7)), random::normal({n}, random::key(8)))),
            5.0 / std::sqrt(n));
}

TEST(RandomKeys, StridedKeyViews) {
  array ks = random::split(random::key(3), 3);  // (3, 2)
  auto v = ks.to_vector<int32_t>();
  // Row 2 as a slice, and column 0 of the transpose (stride 2), used as keys.
  array row = reshape(slice(ks, {2, 0}, {3, 2}), {2});
  array col = reshape(slice(transpose(ks), {0, 1}, {2, 2}), {2});
  array row_ref({v[4], v[5]});
  array col_ref({v[2], v[3]});
  EXPECT_TRUE(same_bits<float>(random::uniform({100}, row), random::uniform({100}, row_ref)));
  EXPECT_TRUE(same_bits<float>(random::uniform({100}, col), random::uniform({100}, col_ref)));
  // A lazy key works as well.
  array lazy = add(row_ref, array(0));
  EXPECT_FALSE(lazy.is_evaluated());
  EXPECT_TRUE(same_bits<float>(random::uniform({100}, lazy), random::uniform({100}, row_ref)));
}

TEST(RandomGlobalState, SplitsOnEachUseLikeMLX) {
  random::seed(7);
  array s = random::get_state();
  EXPECT_EQ(words(s), (std::vector<uint32_t>{0, 7}));
  auto [next_state, used] = random::split(s);
  array x = random::uniform({16});
  EXPECT_TRUE(same_bits<float>(x, random::uniform({16}, used)));
  EXPECT_EQ(words(random::get_state()), words(next_state));

  // Same seed, same sequence of draws of every kind.
  auto draw_all = [] {
    std::vector<array> out{random::uniform({5}),          random::normal({5}),
                           random::randint(0, 9, {5}),    random::bernoulli(0.5, {5}),
                           random::gumbel({5}),           random::permutation(5),
                           random::categorical(zeros({3})), random::bits({5}),
                           random::truncated_normal(-1, 1, {5})};
    std::vector<double> v;
    for (auto& a : out) {
      auto x = a.to_vector<double>();
      v.insert(v.end(), x.begin(), x.end());
    }
    return v;
  };
  random::seed(123);
  auto first = draw_all();
  random::seed(123);
  EXPECT_EQ(draw_all(), first);
  random::seed(124);
  EXPECT_NE(draw_all(), first);
}

TEST(RandomGlobalState, CheckpointRestore) {
  random::seed(11);
  (void)random::uniform({3});
  array saved = random::get_state();
  const auto saved_words = words(saved);
  auto a = random::normal({10}).to_vector<float>();
  auto b = random::normal({10}).to_vector<float>();
  random::set_state(saved);
  EXPECT_EQ(random::normal({10}).to_vector<float>(), a);
  EXPECT_EQ(random::normal({10}).to_vector<float>(), b);
  // The saved state is a value, unaffected by later draws; set_state accepts a lazy key.
  EXPECT_EQ(words(saved), saved_words);
  EXPECT_NE(words(random::get_state()), saved_words);
  random::set_state(add(saved, array(0)));
  EXPECT_EQ(random::normal({10}).to_vector<float>(), a);
  // Draws with an explicit key leave the state alone.
  array before = random::get_state();
  (void)random::uniform({4}, random::key(1));
  EXPECT_EQ(words(random::get_state()), words(before));
}

TEST(RandomGlobalState, FailedCallsDoNotAdvanceTheState) {
  random::seed(5);
  array before = random::get_state();
  EXPECT_THROW(random::uniform({-1}), std::invalid_argument);
  EXPECT_THROW(random::normal({2}, int32), std::invalid_argument);
  EXPECT_THROW(random::bernoulli(2.0, {2}), std::invalid_argument);
  EXPECT_THROW(random::categorical(zeros({2, 3}), 5), std::out_of_range);
  EXPECT_THROW(random::permutation(zeros({3}), 1), std::out_of_range);
  EXPECT_EQ(words(random::get_state()), words(before));
}

TEST(RandomGraph, LazyNotDifferentiableStopsGradients) {
  array k = random::key(1);
  array lo = array(0.0f), hi = array(2.0f);
  array u = random::uniform(lo, hi, {3}, float32, k);
  EXPECT_FALSE(u.is_evaluated());
  EXPECT_STREQ(u.primitive().name(), "RandomUniform");
  EXPECT_FALSE(u.primitive().is_differentiable());
  auto g = u.primitive().vjp(u.inputs(), {ones({3})}, {1, 2}, {u});
  ASSERT_EQ(g.size(), 2u);
  expect_array(g[0], {3}, {0, 0, 0});
  expect_array(g[1], {3}, {0, 0, 0});
  auto t = u.primitive().jvp(u.inputs(), {ones({3})}, {1});
  expect_array(t[0], {3}, {0, 0, 0});
  EXPECT_FALSE(random::normal({2}, k).primitive().is_differentiable());
  EXPECT_FALSE(random::bits({2}, k).primitive().is_differentiable());
  EXPECT_FALSE(random::permutation(4, k).primitive().is_differentiable());
}

TEST(RandomGraph, PermutationOfArrayPassesGradients) {
  array k = random::key(17);
  array x = arange(0.0, 5.0, 1.0, float32);
  array y = random::permutation(x, 0, k);
  EXPECT_TRUE(y.primitive().is_differentiable());
  auto inputs = y.inputs();
  array cot({10.f, 20.f, 30.f, 40.f, 50.f});
  auto g = y.primitive().vjp(inputs, {cot}, {0}, {y});
  auto t = y.primitive().jvp(inputs, {cot}, {0});
  auto idx = y.to_vector<int>();  // y[j] = x[idx[j]] = idx[j]
  auto gv = g[0].to_vector<float>();
  auto tv = t[0].to_vector<float>();
  for (int j = 0; j < 5; ++j) {
    EXPECT_EQ(gv[idx[j]], cot.to_vector<float>()[j]);  // dx[idx[j]] = cot[j]
    EXPECT_EQ(tv[j], 10.f * (idx[j] + 1));            // dy[j] = t[idx[j]]
  }
}

TEST(RandomBadInput, ShapesKeysDtypesAndParameters) {
  using E = std::invalid_argument;
  array k = random::key(0);
  // negative shapes
  EXPECT_THROW_MSG(random::uniform({2, -1}, k), E, "[uniform] negative dimension in shape (2,-1)");
  EXPECT_THROW_MSG(random::normal({-3}, k), E, "[normal] negative dimension");
  EXPECT_THROW_MSG(random::bits({-3}, k), E, "[bits] negative dimension");
  EXPECT_THROW_MSG(random::randint(0, 3, {-1}, int32, k), E, "[randint] negative dimension");
  EXPECT_THROW_MSG(random::bernoulli(0.5, {-1}, k), E, "[bernoulli] negative dimension");
  EXPECT_THROW_MSG(random::gumbel({-1}, float32, k), E, "[gumbel] negative dimension");
  EXPECT_THROW_MSG(random::truncated_normal(-1, 1, {-2}, float32, k), E, "[truncated_normal] negative dimension");
  EXPECT_THROW_MSG(random::categorical(zeros({3}), -1, Shape{-2}, k), E, "[categorical] negative dimension");
  EXPECT_THROW_MSG(random::permutation(-4, k), E, "[permutation] needs n >= 0, got -4");
  EXPECT_THROW_MSG(random::split(k, -1), E, "[split] needs num >= 0, got -1");
  // keys
  EXPECT_THROW_MSG(random::uniform({2}, array({1, 2, 3})), E, "[uniform] a key must be an int32 array of shape (2), got shape (3) and dtype int32");
  EXPECT_THROW_MSG(random::normal({2}, array({int64_t(1), int64_t(2)})), E, "got shape (2) and dtype int64");
  EXPECT_THROW_MSG(random::bits({2}, array({1.f, 2.f})), E, "[bits] a key must be");
  EXPECT_THROW_MSG(random::split(zeros({2, 2}, int32), 2), E, "[split] a key must be an int32 array of shape (2), got shape (2,2)");
  EXPECT_THROW_MSG(random::split(array(1)), E, "[split] a key must be");
  EXPECT_THROW_MSG(random::permutation(3, array({1, 2, 3})), E, "[permutation] a key must be");
  EXPECT_THROW_MSG(random::categorical(zeros({3}), -1, array({1})), E, "[categorical] a key must be");
  EXPECT_THROW_MSG(random::set_state(array({1, 2, 3})), E, "[set_state] a key must be");
  // dtypes
  EXPECT_THROW_MSG(random::uniform({2}, int32, k), E, "[uniform] needs a floating dtype, got int32");
  EXPECT_THROW_MSG(random::uniform(0, 1, {2}, bool_, k), E, "[uniform] needs a floating dtype, got bool");
  EXPECT_THROW_MSG(random::normal({2}, int64, k), E, "[normal] needs a floating dtype, got int64");
  EXPECT_THROW_MSG(random::gumbel({2}, uint8, k), E, "[gumbel] needs a floating dtype, got uint8");
  EXPECT_THROW_MSG(random::truncated_normal(-1, 1, {2}, int32, k), E, "[truncated_normal] needs a floating dtype");
  EXPECT_THROW_MSG(random::randint(0, 4, {2}, float32, k), E, "[randint] needs an integer dtype, got float32");
  EXPECT_THROW_MSG(random::bernoulli(array(1), {2}, k), E, "[bernoulli] p must have a floating dtype, got int32");
  EXPECT_THROW_MSG(random::bits({2}, 3, k), E, "[bits] width must be 1, 2, 4 or 8 bytes, got 3");
  // bounds and probabilities
  EXPECT_THROW_MSG(random::uniform(1, 1, {2}, float32, k), E, "[uniform] needs low < high, got low 1 and high 1");
  EXPECT_THROW_MSG(random::uniform(array({0.f, 3.f}), array(2.f), {2}, float32, k), E, "got low 3 and high 2");
  EXPECT_THROW_MSG(random::randint(5, 2, {2}, int32, k), E, "[randint] needs low < high, got low 5 and high 2");
  EXPECT_THROW_MSG(random::randint(0, 300, {2}, uint8, k), E, "[randint] high 300 is beyond the range of uint8");
  EXPECT_THROW_MSG(random::randint(-1, 3, {2}, uint8, k), E, "[randint] low -1 is below the range of uint8");
  EXPECT_THROW_MSG(random::randint(0, int64_t(1) << 40, {2}, int32, k), E, "beyond the range of int32");
  EXPECT_THROW_MSG(random::truncated_normal(2, -2, {2}, float32, k), E, "[truncated_normal] needs lower < upper, got lower 2 and upper -2");
  EXPECT_THROW_MSG(random::bernoulli(1.5, {2}, k), E, "[bernoulli] p must be in [0, 1], got 1.5");
  EXPECT_THROW_MSG(random::bernoulli(-0.25, {2}, k), E, "got -0.25");
  EXPECT_THROW_MSG(random::bernoulli(std::nan(""), {2}, k), E, "[bernoulli] p must be in [0, 1]");
  EXPECT_THROW_MSG(random::bernoulli(array({0.5f, 1.25f}), k), E, "got 1.25");
  // parameter shapes
  EXPECT_THROW_MSG(random::uniform(array({0.f, 0.f, 0.f}), array(1.f), {2}, float32, k), E,
                   "[uniform] low of shape (3) does not broadcast to the requested shape (2)");
  EXPECT_THROW_MSG(random::randint(array(0), array({1, 2}), {3}, int32, k), E, "[randint] high of shape (2)");
  EXPECT_THROW_MSG(random::bernoulli(array({0.5f, 0.5f}), {3}, k), E, "[bernoulli] p of shape (2)");
  EXPECT_THROW_MSG(random::truncated_normal(zeros({2}), ones({3}), float32, k), E,
                   "[truncated_normal] lower of shape (2) and upper of shape (3) do not broadcast together");
  // categorical and permutation axes
  EXPECT_THROW_MSG(random::categorical(array(1.f)), E, "[categorical] logits must have at least one dimension");
  EXPECT_THROW_MSG(random::categorical(zeros({2, 3}), 2, k), std::out_of_range, "[categorical] axis 2 is out of range");
  EXPECT_THROW_MSG(random::categorical(zeros({2, 3}), -1, Shape{3}, k), E,
                   "[categorical] logits of shape (2,3) without axis 1 do not broadcast to the requested shape (3)");
  EXPECT_THROW_MSG(random::categorical(zeros({2, 3}), -1, -1, k), E, "[categorical] needs num_samples >= 0, got -1");
  EXPECT_THROW_MSG(random::categorical(zeros({2, 0}), -1, k), E, "[categorical] logits of shape (2,0) have no categories");
  EXPECT_THROW_MSG(random::permutation(array(1.f), 0, k), E, "[permutation] cannot permute a 0-dimensional array");
  EXPECT_THROW_MSG(random::permutation(zeros({2, 3}), -3, k), std::out_of_range, "[permutation] axis -3 is out of range");
}

TEST(RandomShapes, EmptyAndScalarShapes) {
  array k = random::key(8);
  array e = random::uniform({0, 3}, k);
  EXPECT_EQ(e.shape(), (Shape{0, 3}));
  EXPECT_EQ(e.to_vector<float>().size(), 0u);
  EXPECT_EQ(random::normal({4, 0}, float64, k).to_vector<double>().size(), 0u);
  EXPECT_EQ(random::bits({0}, 1, k).to_vector<int>().size(), 0u);
  EXPECT_EQ(random::randint(0, 5, {0}, int32, k).to_vector<int>().size(), 0u);
  EXPECT_EQ(random::permutation(0, k).shape(), (Shape{0}));
  EXPECT_EQ(random::permutation(0, k).to_vector<int>().size(), 0u);
  EXPECT_EQ(random::permutation(zeros({0, 2}), 0, k).to_vector<float>().size(), 0u);
  EXPECT_EQ(random::split(k, 0).shape(), (Shape{0, 2}));
  array c = random::categorical(zeros({2, 3}), -1, 0, k);
  EXPECT_EQ(c.shape(), (Shape{2, 0}));
  EXPECT_EQ(c.to_vector<int>().size(), 0u);
  array s = random::uniform({}, k);
  EXPECT_EQ(s.ndim(), 0u);
  float v = s.item<float>();
  EXPECT_GE(v, 0.f);
  EXPECT_LT(v, 1.f);
  array b = random::bernoulli(0.5, {}, k);
  EXPECT_EQ(b.ndim(), 0u);
  EXPECT_EQ(b.dtype(), bool_);
  EXPECT_EQ(random::categorical(zeros({4}), -1, k).ndim(), 0u);
}

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

// The words of a key array (checking that it is a uint32 key array, as MLX's are).
std::vector<uint32_t> words(array a) {
  EXPECT_EQ(a.dtype(), uint32);
  return a.to_vector<uint32_t>();
}

template <typename T>
bool same_bits(array a, array b) {
  auto x = a.to_vector<T>();
  auto y = b.to_vector<T>();
  return x.size() == y.size() && std::memcmp(x.data(), y.data(), x.size() * sizeof(T)) == 0;
}

// MLX's float conversion of a 32-bit word: float32(w) / float32(UINT32_MAX) (= 2^32).
float to_float(uint32_t w) { return float(w) / float(UINT32_MAX); }

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

  // detail::word: a draw of n words pairs counters (j, j + ceil(n / 2)); an odd middle word comes
  // from (n / 2, 0). With n = 1 the only word is threefry2x32(key, (0, 0))[0].
  EXPECT_EQ(random::detail::word(z, 1, 0), 0x6b200159u);
  EXPECT_EQ(random::detail::word(pi_key, 2, 0), threefry2x32<20>(pi_key, {0, 1})[0]);
  EXPECT_EQ(random::detail::word(pi_key, 2, 1), threefry2x32<20>(pi_key, {0, 1})[1]);
  EXPECT_EQ(random::detail::word(pi_key, 7, 2), threefry2x32<20>(pi_key, {2, 6})[0]);
  EXPECT_EQ(random::detail::word(pi_key, 7, 3), threefry2x32<20>(pi_key, {3, 0})[0]);
  EXPECT_EQ(random::detail::word(pi_key, 7, 6), threefry2x32<20>(pi_key, {2, 6})[1]);
}

// MLX's tests/random_tests.cpp, "test random key".
TEST(RandomKeys, KeyFromSeed) {
  array k = random::key(0x0123456789abcdefull);
  EXPECT_EQ(k.shape(), (Shape{2}));
  EXPECT_EQ(words(k), (std::vector<uint32_t>{0x01234567u, 0x89abcdefu}));
  EXPECT_EQ(words(random::key(0)), (std::vector<uint32_t>{0, 0}));
  EXPECT_EQ(words(random::key(1)), (std::vector<uint32_t>{0, 1}));
  EXPECT_EQ(words(random::key(uint64_t(1) << 32)), (std::vector<uint32_t>{1, 0}));
  EXPECT_EQ(words(random::key((uint64_t(1) << 32) + 1)), (std::vector<uint32_t>{1, 1}));
}

// MLX's tests/random_tests.cpp, "test random split".
TEST(RandomKeys, SplitMatchesMLX) {
  auto [key, subkey] = random::split(random::key(0));
  EXPECT_EQ(key.shape(), (Shape{2}));
  EXPECT_EQ(words(key), (std::vector<uint32_t>{4146024105u, 967050713u}));
  EXPECT_EQ(words(subkey), (std::vector<uint32_t>{2718843009u, 1272950319u}));
  array keys = random::split(random::key(0), 3);
  EXPECT_EQ(keys.shape(), (Shape{3, 2}));
  EXPECT_EQ(words(keys),
            (std::vector<uint32_t>{2467461003u, 428148500u, 3186719485u, 3840466878u, 2562233961u, 1946702221u}));
  // split(key) is split(key, 2)'s rows; split(key, n) is bits({n, 2}, 4, key).
  auto both = words(random::split(random::key(0), 2));
  EXPECT_EQ(both, (std::vector<uint32_t>{4146024105u, 967050713u, 2718843009u, 1272950319u}));
  EXPECT_EQ(ints(random::split(random::key(9), 5)), ints(random::bits({5, 2}, 4, random::key(9))));
}

// MLX's tests/random_tests.cpp, "test random bits" (values from JAX's threefry random_bits).
TEST(RandomKeys, BitsMatchMLX) {
  array k0 = random::key(0), k1 = random::key(1);
  array x = random::bits({}, k0);
  EXPECT_EQ(x.dtype(), uint32);
  EXPECT_EQ(x.ndim(), 0u);
  EXPECT_EQ(x.item<uint32_t>(), 1797259609u);
  EXPECT_EQ(random::bits({}, 2, k0).item<uint16_t>(), 345);
  EXPECT_EQ(random::bits({}, 1, k0).item<uint8_t>(), 89);
  EXPECT_EQ(random::bits({}, k1).item<uint32_t>(), 507451445u);
  EXPECT_EQ(random::bits({}, 2, k1).item<uint16_t>(), 6197);
  EXPECT_EQ(random::bits({}, 1, k1).item<uint8_t>(), 53);
  EXPECT_EQ(ints(random::bits({3, 1}, k0)), (std::vector<int64_t>{4146024105u, 1351547692u, 2718843009u}));
  EXPECT_EQ(ints(random::bits({5}, 2, k0)), (std::vector<int64_t>{20137, 63263, 64300, 20622, 16513}));
  EXPECT_EQ(ints(random::bits({6}, 2, k0)), (std::vector<int64_t>{20137, 63263, 64300, 20622, 16513, 41486}));
  EXPECT_EQ(ints(random::bits({7}, 2, k0)), (std::vector<int64_t>{20137, 63263, 1497, 14756, 16513, 41486, 44591}));
  EXPECT_EQ(ints(random::bits({8}, 2, k0)),
            (std::vector<int64_t>{20137, 63263, 1497, 14756, 16513, 41486, 44591, 19423}));
  EXPECT_EQ(random::bits({0}, k0).size(), 0u);
}

// The layout itself: element w of bits({n}) is detail::word(key, n, w); narrower widths are the
// little-endian bytes of ceil(n * width / 4) words, the last one cut; width 8 pairs 2n words.
TEST(RandomKeys, BitsLayout) {
  const std::array<uint32_t, 2> kw{0x13198a2eu, 0x03707344u};
  array k({kw[0], kw[1]});
  for (int n = 0; n <= 11; ++n) {
    auto b = ints(random::bits({n}, k));
    for (int w = 0; w < n; ++w) EXPECT_EQ(static_cast<uint32_t>(b[w]), random::detail::word(kw, n, w)) << n << " " << w;
  }
  for (int n : {1, 2, 3, 5, 6, 7, 9}) {
    auto b1 = ints(random::bits({n}, 1, k));
    const int nw = (n + 3) / 4;
    for (int i = 0; i < n; ++i) EXPECT_EQ(b1[i], (random::detail::word(kw, nw, i / 4) >> (8 * (i % 4))) & 0xff);
    auto b2 = ints(random::bits({n}, 2, k));
    const int nw2 = (n + 1) / 2;
    for (int i = 0; i < n; ++i) EXPECT_EQ(b2[i], (random::detail::word(kw, nw2, i / 2) >> (16 * (i % 2))) & 0xffff);
  }
  // bits({3}, 1) draws one word: the low three bytes of bits({}) (1797259609 = 0x6b200159 for key 0).
  EXPECT_EQ(ints(random::bits({3}, 1, random::key(0))), (std::vector<int64_t>{0x59, 0x01, 0x20}));
  // width 8 (Loom only): the words of a draw of 2n, in pairs (low word first).
  auto b8 = random::bits({3}, 8, k).to_vector<uint64_t>();
  auto b4 = random::bits({3, 2}, 4, k).to_vector<uint32_t>();
  for (int i = 0; i < 3; ++i) EXPECT_EQ(b8[i], uint64_t(b4[2 * i]) | (uint64_t(b4[2 * i + 1]) << 32));
}

// MLX's tests/random_tests.cpp, "test random uniform": the words above through to_float.
TEST(RandomKeys, UniformMatchesMLX) {
  array k0 = random::key(0);
  array x = random::uniform({}, k0);
  EXPECT_EQ(x.dtype(), float32);
  EXPECT_EQ(x.item<float>(), to_float(1797259609u));
  EXPECT_EQ(random::uniform({}, random::key(1)).item<float>(), to_float(507451445u));
  EXPECT_EQ(random::uniform({3, 1}, k0).to_vector<float>(),
            (std::vector<float>{to_float(4146024105u), to_float(1351547692u), to_float(2718843009u)}));
  // Word 0xffffffff would give 1.0f: MLX caps u at the largest float below 1.
  EXPECT_EQ(std::min(to_float(0xffffffffu), std::nextafter(1.0f, 0.0f)), std::nextafter(1.0f, 0.0f));
}

// Values computed by /usr/bin/python3 with numpy from the Threefry function and MLX's formulas
// (mlx/random.cpp; MLX's float32 erfinv polynomial with each fma done in float64 and rounded once;
// log and log1p in float64 rounded to float32, as a correctly rounded logf, like glibc's, gives):
// key 0, a draw of 4 words (0xf71f4ea9, 0x39a405d9, 0xa20e4081, 0x4bdfae2f) or of 6 or 8.
TEST(RandomKeys, GeneratorsKnownAnswers) {
  array k0 = random::key(0);
  auto f32 = [](array a) { return a.to_vector<float>(); };
  using V = std::vector<float>;
  EXPECT_EQ(f32(random::uniform({4}, k0)),
            (V{0.9653214812278748f, 0.22515903413295746f, 0.6330299973487854f, 0.2963818311691284f}));
  // (high - low) * u + low in float32
  EXPECT_EQ(f32(random::uniform(-2, 3, {4}, float32, k0)),
            (V{2.8266072273254395f, -0.8742048740386963f, 1.1651499271392822f, -0.5180908441543579f}));
  // float16: u capped at the largest float16 below 1, then rounded to float16
  EXPECT_EQ(random::uniform({4}, float16, k0).to_vector<float>(),
            (V{0.96533203125f, 0.2252197265625f, 0.6328125f, 0.29638671875f}));
  // normal: sqrt(2) * erfinv(2 u - 0.99999994)
  EXPECT_EQ(f32(random::normal({4}, k0)),
            (V{1.8160871267318726f, -0.7548847794532776f, 0.339889258146286f, -0.5348353385925293f}));
  // laplace: sign(v) * log1p(-|v|) with the same v
  EXPECT_EQ(f32(random::laplace({4}, k0)),
            (V{-2.6684885025024414f, 0.7978010773658752f, -0.3093280792236328f, 0.5229594111442566f}));
  // gumbel: -log(-log(u))
  EXPECT_EQ(f32(random::gumbel({4}, float32, k0)),
            (V{3.3440396785736084f, -0.3994123637676239f, 0.7825523614883423f, -0.1956544816493988f}));
  // truncated normal with infinite bounds: erf(-+inf) = -+1, so sqrt(2) * erfinv(2 u - 1)
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(f32(random::truncated_normal(array(-inf), array(inf), {4}, float32, k0)),
            (V{1.816086769104004f, -0.7548847794532776f, 0.33988916873931885f, -0.5348354578018188f}));
  // randint(0, 10): floor(10 u) of a draw of 6
  EXPECT_EQ(ints(random::randint(0, 10, {6}, int32, k0)), (std::vector<int64_t>{5, 0, 7, 8, 5, 4}));
  // bernoulli(0.5): word < 0.5 * nextafter(2^32, inf) in float32
  EXPECT_EQ(ints(random::bernoulli(0.5, {6}, k0)), (std::vector<int64_t>{0, 1, 0, 0, 0, 1}));
  // permutation(8): the stable argsort of a draw of 8 words
  EXPECT_EQ(ints(random::permutation(8, k0)), (std::vector<int64_t>{4, 6, 1, 2, 0, 7, 3, 5}));
  // categorical of one distribution with samples: inverse CDF of exp(x - max), u of a draw of 6
  EXPECT_EQ(ints(random::categorical(array({1.f, 2.f, 3.f}), 0, 6, k0)), (std::vector<int64_t>{2, 1, 2, 2, 2, 2}));
  // two distributions: argmax(gumbel of a (2, 3) draw + logits)
  EXPECT_EQ(ints(random::categorical(array({1.f, 2.f, 3.f, 1.f, 2.f, 3.f}, {2, 3}), -1, k0)),
            (std::vector<int64_t>{2, 2}));
  // normal with loc and scale: loc + (sqrt(2) * scale) * erfinv(v) in float32; float32 is the default
  float z1 = random::normal({1}, float32, 1.0f, 3.0f, k0).item<float>();
  EXPECT_EQ(random::normal({1}, 1.0f, 3.0f, k0).item<float>(), z1);
  const float e0 = random::normal({1}, k0).item<float>() / float(std::sqrt(2.0));
  EXPECT_NEAR(z1, 1.0f + 3.0f * float(std::sqrt(2.0)) * e0, 1e-5);
  // float64 normal: MLX's float32 erfinv cast to float64, times sqrt(2) in float64
  EXPECT_NEAR(random::normal({4}, float64, k0).to_vector<double>()[0], 1.8160871267318726, 1e-6);
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

// The draw depends on the total size, not on the shape; a shorter draw is NOT a prefix of a longer
// one (MLX's layout pairs counters j and j + ceil(n / 2), so n changes every pair).
TEST(RandomKeys, ShapeIndependenceNotPrefix) {
  array k = random::key(99);
  auto big = random::uniform({1000}, k).to_vector<float>();
  auto grid = random::uniform({20, 50}, k).to_vector<float>();
  EXPECT_EQ(grid, big);
  auto small = random::uniform({7}, k).to_vector<float>();
  int same = 0;
  for (size_t i = 0; i < small.size(); ++i) same += small[i] == big[i];
  EXPECT_EQ(same, 0);
  // Bits of width 4 are the words the float32 uniforms use.
  auto w = random::bits({1000}, k).to_vector<uint32_t>();
  for (size_t i = 0; i < w.size(); ++i) EXPECT_EQ(big[i], std::min(to_float(w[i]), std::nextafter(1.0f, 0.0f)));
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

  auto two = words(random::split(k, 2));
  auto [k1, k2] = random::split(k);
  EXPECT_EQ(words(k1), (std::vector<uint32_t>{two[0], two[1]}));
  EXPECT_EQ(words(k2), (std::vector<uint32_t>{two[2], two[3]}));

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
  auto v = ks.to_vector<uint32_t>();
  // Row 2 as a slice, and column 0 of the transpose (stride 2), used as keys.
  array row = reshape(slice(ks, {2, 0}, {3, 2}), {2});
  array col = reshape(slice(transpose(ks), {0, 1}, {2, 2}), {2});
  array row_ref({v[4], v[5]});
  array col_ref({v[2], v[3]});
  EXPECT_TRUE(same_bits<float>(random::uniform({100}, row), random::uniform({100}, row_ref)));
  EXPECT_TRUE(same_bits<float>(random::uniform({100}, col), random::uniform({100}, col_ref)));
  // A lazy key works as well.
  array lazy = add(row_ref, array(0u));
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
  random::set_state(add(saved, array(0u)));
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
  EXPECT_THROW(random::bernoulli(array(2), {2}), std::invalid_argument);
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
  EXPECT_THROW_MSG(random::uniform({2}, array({1, 2, 3})), E, "[uniform] a key must be a uint32 array of shape (2), got shape (3) and dtype int32");
  EXPECT_THROW_MSG(random::normal({2}, array({int64_t(1), int64_t(2)})), E, "got shape (2) and dtype int64");
  EXPECT_THROW_MSG(random::bits({2}, array({1.f, 2.f})), E, "[bits] a key must be");
  EXPECT_THROW_MSG(random::split(zeros({2, 2}, uint32), 2), E, "[split] a key must be a uint32 array of shape (2), got shape (2,2)");
  EXPECT_THROW_MSG(random::split(array(1)), E, "[split] a key must be");
  EXPECT_THROW_MSG(random::permutation(3, array({1, 2, 3})), E, "[permutation] a key must be");
  EXPECT_THROW_MSG(random::categorical(zeros({3}), -1, array({1})), E, "[categorical] a key must be");
  EXPECT_THROW_MSG(random::set_state(array({1, 2, 3})), E, "[set_state] a key must be");
  // int32 keys (Loom's old key dtype) are rejected, as MLX rejects them.
  EXPECT_THROW_MSG(random::uniform({2}, array({0, 0})), E,
                   "[uniform] a key must be a uint32 array of shape (2), got shape (2) and dtype int32");
  EXPECT_THROW_MSG(random::split(array({0, 0})), E, "[split] a key must be a uint32 array");
  EXPECT_THROW_MSG(random::laplace({2}, array({0, 0})), E, "[laplace] a key must be a uint32 array");
  EXPECT_THROW_MSG(random::laplace({2}, int32, k), E, "[laplace] needs a floating dtype, got int32");
  EXPECT_THROW_MSG(random::laplace({-2}, k), E, "[laplace] negative dimension");
  // dtypes
  EXPECT_THROW_MSG(random::uniform({2}, int32, k), E, "[uniform] needs a floating dtype, got int32");
  EXPECT_THROW_MSG(random::uniform(0, 1, {2}, bool_, k), E, "[uniform] needs a floating dtype, got bool");
  EXPECT_THROW_MSG(random::normal({2}, int64, k), E, "[normal] needs a floating dtype, got int64");
  EXPECT_THROW_MSG(random::gumbel({2}, uint8, k), E, "[gumbel] needs a floating dtype, got uint8");
  EXPECT_THROW_MSG(random::truncated_normal(-1, 1, {2}, int32, k), E, "[truncated_normal] needs a floating dtype");
  EXPECT_THROW_MSG(random::randint(0, 4, {2}, float32, k), E, "[randint] needs an integer or bool dtype, got float32");
  EXPECT_THROW_MSG(random::bernoulli(array(1), {2}, k), E, "[bernoulli] p must have a floating dtype, got int32");
  EXPECT_THROW_MSG(random::bits({2}, 3, k), E, "[bits] width must be 1, 2, 4 or 8 bytes, got 3");
  // bounds: the dtype's range (reversed bounds and probabilities outside [0, 1] are MLX's clipping,
  // tested in RandomBounds)
  EXPECT_THROW_MSG(random::randint(0, 300, {2}, uint8, k), E, "[randint] high 300 is beyond the range of uint8");
  EXPECT_THROW_MSG(random::randint(-1, 3, {2}, uint8, k), E, "[randint] low -1 is below the range of uint8");
  EXPECT_THROW_MSG(random::randint(0, int64_t(1) << 40, {2}, int32, k), E, "beyond the range of int32");
  EXPECT_THROW_MSG(random::randint(0, 3, {2}, bool_, k), E, "[randint] high 3 is beyond the range of bool");
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

// MLX's (and JAX's) semantics at the edges: a probability outside [0, 1] is clipped, reversed bounds
// give the lower bound everywhere (truncated_normal, randint), bool is a randint dtype.
TEST(RandomBounds, ClippedAsMLX) {
  array k = random::key(3);
  EXPECT_EQ(random::bernoulli(-1.0, {64}, k).to_vector<bool>(), std::vector<bool>(64, false));
  EXPECT_EQ(random::bernoulli(5.0, {64}, k).to_vector<bool>(), std::vector<bool>(64, true));
  EXPECT_EQ(random::bernoulli(array({-0.5f, 1.5f}), k).to_vector<bool>(), (std::vector<bool>{false, true}));
  EXPECT_EQ(random::truncated_normal(2.0, -2.0, {16}, float32, k).to_vector<float>(), std::vector<float>(16, 2.0f));
  EXPECT_EQ(random::randint(5, 2, {16}, int32, k).to_vector<int32_t>(), std::vector<int32_t>(16, 5));
  // uniform(low, high) with high < low is low + (high - low) u: inside [high, low].
  for (float v : random::uniform(1.0, -1.0, {256}, float32, k).to_vector<float>()) {
    EXPECT_LE(v, 1.0f);
    EXPECT_GE(v, -1.0f);
  }
  array b = random::randint(0, 2, {1000}, bool_, k);
  EXPECT_EQ(b.dtype(), bool_);
  const float frac = sum(astype(b, float32)).item<float>() / 1000.0f;
  EXPECT_GT(frac, 0.4f);
  EXPECT_LT(frac, 0.6f);
  // An array bound beside a number, as MLX's template takes it.
  array u = random::uniform(zeros({3, 1}), 1.0, {3, 3}, float32, k);
  EXPECT_EQ(u.shape(), (Shape{3, 3}));
  EXPECT_THROW(random::uniform(zeros({3, 3}), 1.0, {1, 3}, float32, k), std::invalid_argument);
}

TEST(RandomMultivariateNormal, IsMeanPlusNormalTimesTheSquareRootOfCov) {
  // cov = [[5, 4], [4, 5]] has the symmetric square root [[2, 1], [1, 2]]: the samples are
  // mean + z [[2, 1], [1, 2]] for z = normal(shape + (2)) of the same key, as MLX composes them.
  array k = random::key(5);
  array mean = array({1.0f, -2.0f});
  array x = random::multivariate_normal(mean, array({5.0f, 4.0f, 4.0f, 5.0f}, {2, 2}), {3}, float32, k);
  auto z = random::normal({3, 2}, float32, k).to_vector<float>();
  std::vector<double> want;
  for (int i = 0; i < 3; ++i) {
    want.push_back(1.0 + 2 * z[2 * i] + z[2 * i + 1]);
    want.push_back(-2.0 + z[2 * i] + 2 * z[2 * i + 1]);
  }
  expect_array(x, {3, 2}, want, 1e-5);
  // Batched covariances broadcast with the shape and with mean's batch axes (MLX's rule):
  // cov (1, 2, 3, 3) and shape (4, 2) give (4, 2, 3); a mean (2, 1, 3) with shape () gives (2, 2, 3)
  // when cov is (2, 3, 3). A zero covariance gives the mean itself.
  EXPECT_EQ(random::multivariate_normal(zeros({3}), zeros({1, 2, 3, 3}), {4, 2}, float32, k).shape(), (Shape{4, 2, 3}));
  array y = random::multivariate_normal(ones({2, 1, 3}), zeros({2, 3, 3}), {}, float32, k);
  expect_array(y, {2, 2, 3}, std::vector<double>(12, 1.0));
  // Differentiable in the mean: d sum(x) / d mean = the number of samples per mean.
  auto g = vjp([&](const array& m) { return sum(random::multivariate_normal(m, eye(2), {5}, float32, k)); },
               zeros({2}), array(1.0f));
  expect_array(g.second, {2}, {5, 5});
}

TEST(RandomMultivariateNormal, BadInputs) {
  using E = std::invalid_argument;
  EXPECT_THROW_MSG(random::multivariate_normal(zeros({3}), eye(3), {10}, float16), E,
                   "[multivariate_normal] dtype must be float32; got float16");
  EXPECT_THROW_MSG(random::multivariate_normal(array(0.0f), eye(1), {10}, float32), E, "mean must have at least one axis");
  EXPECT_THROW_MSG(random::multivariate_normal(zeros({3, 1}), eye(3), {10}, float32), E,
                   "cov must be (..., n, n) for mean (..., n); got mean (3,1) and cov (3,3)");
  EXPECT_THROW_MSG(random::multivariate_normal(zeros({3}), zeros({3}), {10}, float32), E, "cov (3)");
  EXPECT_THROW_MSG(random::multivariate_normal(zeros({3}), zeros({3, 4}), {10}, float32), E, "cov (3,4)");
  EXPECT_THROW_MSG(random::multivariate_normal(zeros({3}), zeros({2, 3, 3}), {4}, float32), E,
                   "the shape (4), mean (3) and cov (2,3,3) do not broadcast together");
  EXPECT_THROW_MSG(random::multivariate_normal(zeros({3}), eye(3), {-1}, float32), E, "negative dimension");
  EXPECT_THROW_MSG(random::multivariate_normal(zeros({3}), eye(3), {2}, float32, array({1, 2})), E,
                   "[multivariate_normal]");
}

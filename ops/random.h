// Counter-based random numbers with MLX's `mlx::core::random` API.
//
// Keys. A key is an int32 array of shape (2) holding the two 32-bit words (k0, k1) of a Threefry-2x32
// key as bit patterns (MLX uses uint32; Loom has no uint32 dtype, so a word >= 2^31 reads as a
// negative int32). `key(seed)` is (seed >> 32, seed & 0xffffffff), as in MLX.
//
// The generator. Threefry-2x32 with 20 rounds (Random123; the function JAX and MLX use). Block j of a
// key is threefry2x32(key, counter = (j mod 2^32, j >> 32)), and the random stream of a key is the
// little-endian byte sequence block 0, block 1, ... Every generator reads that stream at fixed
// positions: element i of a draw uses 32-bit word i (float16/bfloat16/float32 results, bool) or block
// i as one 64-bit word (float64 results, randint, permutation keys). So element i depends only on
// (key, i): results are identical for every thread count, every rank, and a shorter draw is a
// prefix of a longer one. `split(key, num)` returns blocks 0..num-1 as the new keys.
//
// The global key. Calls without an explicit key take one from a global key state, as MLX's
// KeySequence does: the state is split in two, the state becomes the first half and the call uses
// the second. The state starts as key(0) (so every process and rank draws the same numbers until
// it seeds differently); `seed`, `get_state` and `set_state` set, save and restore it (thread-safe).
//
// Laziness and gradients. Every generator records a node whose inputs are the key and the
// distribution's parameter arrays; nothing is drawn until eval. Random primitives are not
// differentiable: gradients stop at them (their vjp/jvp are zero). `permutation(x)` is the exception:
// it is a gather along an axis and passes gradients to x.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <type_traits>
#include <utility>

#include "loom/core/array.h"

namespace loom::random {

namespace detail {

inline constexpr uint32_t rotl32(uint32_t x, int r) { return (x << r) | (x >> (32 - r)); }

template <int R>
inline constexpr void threefry_round(uint32_t& x0, uint32_t& x1, const uint32_t (&ks)[3]) {
  constexpr int rot[8] = {13, 15, 26, 6, 17, 29, 16, 24};
  x0 += x1;
  x1 = rotl32(x1, rot[R % 8]);
  x1 ^= x0;
  if constexpr ((R & 3) == 3) {  // key injection after every 4 rounds
    constexpr uint32_t i = (R >> 2) + 1;
    x0 += ks[i % 3];
    x1 += ks[(i + 1) % 3] + i;
  }
}

template <int... Rs>
inline constexpr void threefry_rounds(uint32_t& x0, uint32_t& x1, const uint32_t (&ks)[3],
                                      std::integer_sequence<int, Rs...>) {
  (threefry_round<Rs>(x0, x1, ks), ...);
}

/// The Threefry-2x32 block function with `Rounds` rounds (Random123's threefry2x32_R), the key
/// schedule injected every 4 rounds. Returns the two output words. Fully unrolled at compile time.
template <int Rounds = 20>
inline constexpr std::array<uint32_t, 2> threefry2x32(std::array<uint32_t, 2> key, std::array<uint32_t, 2> ctr) {
  const uint32_t ks[3] = {key[0], key[1], 0x1BD11BDAu ^ key[0] ^ key[1]};
  uint32_t x0 = ctr[0] + ks[0];
  uint32_t x1 = ctr[1] + ks[1];
  threefry_rounds(x0, x1, ks, std::make_integer_sequence<int, Rounds>{});
  return {x0, x1};
}

/// Block j of the stream of `key`: threefry2x32<20>(key, (j mod 2^32, j >> 32)).
inline constexpr std::array<uint32_t, 2> block(std::array<uint32_t, 2> key, uint64_t j) {
  return threefry2x32<20>(key, {static_cast<uint32_t>(j), static_cast<uint32_t>(j >> 32)});
}

/// Splits the global key state: the state becomes split(state)[0], split(state)[1] is returned.
array next_key();

}  // namespace detail

// ---- keys and the global state ----

/// A key from a seed: int32 (2) holding (seed >> 32, seed & 0xffffffff).
array key(uint64_t seed);
/// Sets the global key state to key(seed).
void seed(uint64_t seed);
/// The global key state (an evaluated int32 array of shape (2)); save it to checkpoint the state.
array get_state();
/// Restores the global key state from an int32 array of shape (2) (evaluates it).
void set_state(const array& state);

/// `num` new keys from `key`: int32 of shape (num, 2).
array split(const array& key, int num);
/// Two new keys from `key`, each int32 of shape (2).
std::pair<array, array> split(const array& key);

// ---- generators (key: std::nullopt takes the next key of the global state) ----

/// Raw random bits: `width` bytes per element (1, 2, 4 or 8), as uint8, uint16, uint32 (MLX's
/// default) or uint64. Element i is bytes [i*width, (i+1)*width) of the key's stream.
array bits(const Shape& shape, int width, const std::optional<array>& key = std::nullopt);
inline array bits(const Shape& shape, const std::optional<array>& key = std::nullopt) { return bits(shape, 4, key); }

/// Uniform samples in [low, high) of a floating `dtype`; low and high are cast to `dtype` and
/// broadcast to `shape`. The result is never `high` (values that round up to it are moved to the
/// largest `dtype` value below it). Where low >= high (only knowable at eval for lazy bounds) the
/// result is low + (high - low) * u with u in [0, 1).
array uniform(const array& low, const array& high, const Shape& shape, Dtype dtype = float32,
              const std::optional<array>& key = std::nullopt);
template <typename T, typename U,
          typename = std::enable_if_t<std::is_arithmetic_v<T> && std::is_arithmetic_v<U>>>
array uniform(T low, U high, const Shape& shape, Dtype dtype = float32,
              const std::optional<array>& key = std::nullopt) {
  return uniform(array(static_cast<double>(low), float64), array(static_cast<double>(high), float64), shape, dtype,
                 key);
}
/// Uniform samples in [0, 1).
array uniform(const Shape& shape, Dtype dtype, const std::optional<array>& key = std::nullopt);
array uniform(const Shape& shape, const std::optional<array>& key = std::nullopt);

/// Normal samples loc + scale * z, z = sqrt(2) * erfinv(u) with u uniform in (-1, 1) (u on a grid of
/// 2^-23 for results of at most 32 bits, 2^-51 for float64; |z| stays below 5.5 and 8.3). The float64
/// erfinv is accurate to double precision; narrower results use Giles' single-precision polynomial.
array normal(const Shape& shape, Dtype dtype, std::optional<float> loc, std::optional<float> scale,
             const std::optional<array>& key = std::nullopt);
array normal(const Shape& shape, std::optional<float> loc, std::optional<float> scale,
             const std::optional<array>& key = std::nullopt);
array normal(const Shape& shape, Dtype dtype, const std::optional<array>& key = std::nullopt);
array normal(const Shape& shape, const std::optional<array>& key = std::nullopt);

/// Standard normal samples restricted to [lower, upper] (inverse CDF between the bounds; bounds are
/// cast to `dtype` and broadcast to `shape`; +-inf allowed). Tails are drawn through erfc, so bounds
/// far from 0 stay accurate.
array truncated_normal(const array& lower, const array& upper, const Shape& shape, Dtype dtype = float32,
                       const std::optional<array>& key = std::nullopt);
/// The shape is that of lower and upper broadcast together.
array truncated_normal(const array& lower, const array& upper, Dtype dtype = float32,
                       const std::optional<array>& key = std::nullopt);
template <typename T, typename U,
          typename = std::enable_if_t<std::is_arithmetic_v<T> && std::is_arithmetic_v<U>>>
array truncated_normal(T lower, U upper, const Shape& shape, Dtype dtype = float32,
                       const std::optional<array>& key = std::nullopt) {
  return truncated_normal(array(static_cast<double>(lower), float64), array(static_cast<double>(upper), float64),
                          shape, dtype, key);
}

/// Integers uniform in [low, high) of an integer `dtype`. Bounds are
/// converted to int64 (floats truncate toward zero) and broadcast to `shape`. Each element uses 64
/// random bits (Lemire's multiply-shift), so the bias is below (high - low) / 2^64.
array randint(const array& low, const array& high, const Shape& shape, Dtype dtype = int32,
              const std::optional<array>& key = std::nullopt);
template <typename T, typename U,
          typename = std::enable_if_t<std::is_arithmetic_v<T> && std::is_arithmetic_v<U>>>
array randint(T low, U high, const Shape& shape, Dtype dtype = int32, const std::optional<array>& key = std::nullopt) {
  return randint(array(cast_value<int64_t>(low), int64), array(cast_value<int64_t>(high), int64), shape, dtype, key);
}

/// Bool samples, true with probability p (a floating array broadcast to `shape`, values in [0, 1]).
array bernoulli(const array& p, const Shape& shape, const std::optional<array>& key = std::nullopt);
/// The shape of p.
array bernoulli(const array& p, const std::optional<array>& key = std::nullopt);
array bernoulli(double p, const Shape& shape, const std::optional<array>& key = std::nullopt);
/// One sample with p = 0.5 from the global key. (MLX also has bernoulli(key), but a key passed alone
/// would bind to the `p` overload; write bernoulli(0.5, {}, key).)
array bernoulli();

/// Standard Gumbel samples -log(-log(u)), u uniform in (0, 1).
array gumbel(const Shape& shape, Dtype dtype = float32, const std::optional<array>& key = std::nullopt);

/// Indices (int32) drawn from the categorical distribution softmax(logits) along `axis`, as
/// argmax(logits + gumbel). The result has `shape`, which the shape of logits without `axis` must
/// broadcast to. (Write Shape{n} for a one-element shape: a bare {n} picks the num_samples overload.)
array categorical(const array& logits, int axis, const Shape& shape, const std::optional<array>& key = std::nullopt);
/// `num_samples` draws per distribution: shape of logits without `axis`, plus (num_samples).
array categorical(const array& logits, int axis, int num_samples, const std::optional<array>& key = std::nullopt);
/// One draw per distribution: the shape of logits without `axis`.
array categorical(const array& logits, int axis = -1, const std::optional<array>& key = std::nullopt);

/// A random permutation of 0..n-1 (int32).
array permutation(int n, const std::optional<array>& key = std::nullopt);
/// `x` with its entries along `axis` shuffled (the same shuffle for every slice).
array permutation(const array& x, int axis = 0, const std::optional<array>& key = std::nullopt);

}  // namespace loom::random

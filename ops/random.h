// Counter-based random numbers with MLX's `mlx::core::random` API; the same key gives the same
// numbers as MLX's CPU backend.
//
// Keys. A key is a uint32 array of shape (2) holding the two words (k0, k1) of a Threefry-2x32 key;
// `key(seed)` is (seed >> 32, seed & 0xffffffff). Every op rejects a key of another dtype or shape
// (int32 keys too, as MLX does) with an error naming the op.
//
// The generator. threefry2x32(key, (c0, c1)) is Threefry-2x32 with 20 rounds (Random123; the
// function JAX and MLX use), giving two 32-bit words. A draw of n 32-bit words (MLX's RandomBits):
// with h = n / 2 and o = h + (n mod 2), the pair threefry2x32(key, (j, j + o)) is words j and j + o
// for j < h, and when n is odd word h is the first word of threefry2x32(key, (h, 0)); counters are
// taken mod 2^32. So word w depends on (key, n, w) only: results are identical for every thread count
// and rank, but a shorter draw is NOT a prefix of a longer one (n changes every counter pair).
// `bits(shape, width)` draws ceil(size * width / 4) words and the result is their little-endian
// bytes (the last word cut to the bytes that remain); width 8 (Loom only) draws 2 * size words.
// `split(key, num)` is bits({num, 2}, 4, key): keys are rows of a draw of 2 * num words.
//
// Generators, as MLX builds them from bits (word i of a draw of size(shape) words serves element i):
//   uniform   u = min(float32(w) / 2^32, largest dtype value below 1) cast to dtype, then
//             (high - low) * u + low in dtype, one rounding per operation (halves round each step).
//             float64 (Loom only; MLX has no float64 uniform): a 64-bit word per element (words 2i,
//             2i + 1 of a draw of 2n), u = (w >> 11) 2^-53.
//   normal    sqrt(2) * erfinv(v) with v the float32 uniform in [nextafter(-1, 0), 1) and MLX's
//             float32 erfinv polynomial; then cast to dtype, times sqrt(2) * scale, plus loc. So
//             float64 normals carry float32 resolution, as in MLX.
//   laplace   sign(v) * log1p(-|v|) with the same v, then scale and loc.
//   truncated_normal  sqrt(2) * erfinv(uniform(erf(lower / sqrt2), erf(upper / sqrt2))), clipped to
//             [lower, upper] (MLX's float32 erf and erfinv; float64 uses std::erf and an accurate erfinv).
//   randint   floor(float32 uniform(low, high)) clamped to [low, high - 1]: float32 resolution, as MLX.
//   bernoulli bits < p * nextafter(2^32, inf) compared in float32 (float64 for float64 p).
//   gumbel    -log(-log(uniform)) in dtype. float64 gumbel and truncated_normal (Loom only, as
//             MLX's uniform has no float64) use the float64 uniform above.
//   categorical  argmax(gumbel(float32) + logits); logits holding a single distribution with a
//             non-empty sample shape are sampled by their inverse CDF instead (as MLX does).
//   permutation  the stable argsort of bits({n}).
// The float32 transcendental steps reproduce MLX's CPU kernels (its exp, erf and erfinv
// polynomials; log and log1p from the C library, as MLX takes them).
//
// The global key. Calls without an explicit key take one from a global key state (one per process,
// guarded by a mutex; MLX's is per thread), as MLX's KeySequence does: the state is split in two, the state becomes the first half and the call uses
// the second. The state starts as key(0) (so every process and rank draws the same numbers until
// it seeds differently; MLX seeds its default from the clock); `seed`, `get_state` and `set_state`
// set, save and restore it (thread-safe).
//
// Laziness and gradients. Every generator records a node whose inputs are the key and the
// distribution's parameter arrays; nothing is drawn until eval. Random primitives are not
// differentiable: gradients stop at them (their vjp/jvp are zero). `permutation(x)` is the exception:
// it is a gather along an axis and passes gradients to x.
#pragma once

#include <functional>
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

/// Word w of a draw of n 32-bit words from `key` (the layout above).
inline constexpr uint32_t word(std::array<uint32_t, 2> key, uint64_t n, uint64_t w) {
  const uint64_t h = n / 2, o = h + (n & 1);
  if ((n & 1) && w == h) return threefry2x32<20>(key, {static_cast<uint32_t>(h), 0u})[0];
  if (w < h) return threefry2x32<20>(key, {static_cast<uint32_t>(w), static_cast<uint32_t>(w + o)})[0];
  return threefry2x32<20>(key, {static_cast<uint32_t>(w - o), static_cast<uint32_t>(w)})[1];
}

/// Splits the global key state: the state becomes split(state)[0], split(state)[1] is returned.
array next_key();
/// While set on this thread (compile's trace), next_key() returns source() instead: the compiled
/// function then takes the keys it draws as inputs, split from the global state on every call. Returns
/// the source it replaces.
using KeySource = std::function<array()>;
KeySource set_key_source(KeySource source);

}  // namespace detail

// ---- keys and the global state ----

/// A key from a seed: uint32 (2) holding (seed >> 32, seed & 0xffffffff).
array key(uint64_t seed);
/// Sets the global key state to key(seed).
void seed(uint64_t seed);
/// The global key state (an evaluated uint32 array of shape (2)); save it to checkpoint the state.
array get_state();
/// Restores the global key state from a uint32 array of shape (2) (evaluates it).
void set_state(const array& state);

/// `num` new keys from `key`: uint32 of shape (num, 2).
array split(const array& key, int num, StreamOrDevice s = {});
/// Two new keys from `key`, each uint32 of shape (2): split(key, 2)'s rows.
std::pair<array, array> split(const array& key, StreamOrDevice s = {});

// ---- generators (key: std::nullopt takes the next key of the global state) ----

namespace detail {
/// The bounds of uniform / truncated_normal given as numbers, or one as an array (MLX's template).
template <class T, class U>
inline constexpr bool bound_pair_v =
    (std::is_arithmetic_v<T> || std::is_same_v<T, array>) && (std::is_arithmetic_v<U> || std::is_same_v<U, array>) &&
    !(std::is_same_v<T, array> && std::is_same_v<U, array>);
inline array bound(const array& a) { return a; }
template <class T, typename = std::enable_if_t<std::is_arithmetic_v<T>>>
array bound(T v) {
  return array(static_cast<double>(v), float64);
}
}  // namespace detail

/// Raw random bits: `width` bytes per element (1, 2, 4 or 8), as uint8, uint16, uint32 (MLX's
/// default) or uint64 (Loom only). The little-endian bytes of a draw of ceil(size * width / 4) words.
array bits(const Shape& shape, int width, const std::optional<array>& key = std::nullopt, StreamOrDevice s = {});
inline array bits(const Shape& shape, const std::optional<array>& key = std::nullopt, StreamOrDevice s = {}) {
  return bits(shape, 4, key, s);
}

/// Uniform samples (high - low) * u + low of a floating `dtype`, u in [0, 1); low and high are cast
/// to `dtype` and broadcast to `shape` (high < low is allowed, as MLX: the samples then lie in
/// (high, low]). As in MLX the rounding of the last step can give `high` itself for some bounds
/// (never for [0, 1)). Either bound may be a number and the other an array.
array uniform(const array& low, const array& high, const Shape& shape, Dtype dtype = float32,
              const std::optional<array>& key = std::nullopt, StreamOrDevice s = {});
template <typename T, typename U, typename = std::enable_if_t<detail::bound_pair_v<T, U>>>
array uniform(T low, U high, const Shape& shape, Dtype dtype = float32,
              const std::optional<array>& key = std::nullopt, StreamOrDevice s = {}) {
  return uniform(detail::bound(low), detail::bound(high), shape, dtype, key, s);
}
/// Uniform samples in [0, 1).
array uniform(const Shape& shape, Dtype dtype, const std::optional<array>& key = std::nullopt, StreamOrDevice s = {});
array uniform(const Shape& shape, const std::optional<array>& key = std::nullopt, StreamOrDevice s = {});

/// Normal samples loc + sqrt(2) * scale * erfinv(v), v a float32 uniform in (-1, 1) (MLX's).
array normal(const Shape& shape, Dtype dtype, std::optional<float> loc, std::optional<float> scale,
             const std::optional<array>& key = std::nullopt, StreamOrDevice s = {});
array normal(const Shape& shape, std::optional<float> loc, std::optional<float> scale,
             const std::optional<array>& key = std::nullopt, StreamOrDevice s = {});
array normal(const Shape& shape, Dtype dtype, const std::optional<array>& key = std::nullopt, StreamOrDevice s = {});
array normal(const Shape& shape, const std::optional<array>& key = std::nullopt, StreamOrDevice s = {});

/// Standard normal samples restricted to [lower, upper] (inverse CDF between the bounds, as MLX;
/// bounds are cast to `dtype` and broadcast to `shape`; +-inf allowed; where upper < lower every
/// sample is lower, as MLX's clip). Bounds far out in one tail (beyond about 4) lose accuracy in
/// float32, as in MLX.
array truncated_normal(const array& lower, const array& upper, const Shape& shape, Dtype dtype = float32,
                       const std::optional<array>& key = std::nullopt, StreamOrDevice s = {});
/// The shape is that of lower and upper broadcast together.
array truncated_normal(const array& lower, const array& upper, Dtype dtype = float32,
                       const std::optional<array>& key = std::nullopt, StreamOrDevice s = {});
template <typename T, typename U, typename = std::enable_if_t<detail::bound_pair_v<T, U>>>
array truncated_normal(T lower, U upper, const Shape& shape, Dtype dtype = float32,
                       const std::optional<array>& key = std::nullopt, StreamOrDevice s = {}) {
  return truncated_normal(detail::bound(lower), detail::bound(upper), shape, dtype, key, s);
}

/// Integers in [low, high) of an integer or bool `dtype`: floor of a float32 uniform(low, high),
/// clamped to [low, high - 1] (MLX's; so high <= low gives low everywhere). Bounds are converted to
/// int64 (floats truncate toward zero), broadcast to `shape`, and must lie in the dtype's range
/// (bool's is [0, 1]). Ranges above 2^24 get float32 resolution (some values are never drawn).
array randint(const array& low, const array& high, const Shape& shape, Dtype dtype = int32,
              const std::optional<array>& key = std::nullopt, StreamOrDevice s = {});
template <typename T, typename U,
          typename = std::enable_if_t<std::is_arithmetic_v<T> && std::is_arithmetic_v<U>>>
array randint(T low, U high, const Shape& shape, Dtype dtype = int32, const std::optional<array>& key = std::nullopt,
              StreamOrDevice s = {}) {
  return randint(array(cast_value<int64_t>(low), int64), array(cast_value<int64_t>(high), int64), shape, dtype, key,
                 s);
}

/// Bool samples, true with probability p (a floating array broadcast to `shape`; as MLX and JAX, p
/// below 0 always gives false and above 1 always true).
/// A double p is taken as float32 (MLX's array(p)).
array bernoulli(const array& p, const Shape& shape, const std::optional<array>& key = std::nullopt,
                StreamOrDevice s = {});
/// The shape of p.
array bernoulli(const array& p, const std::optional<array>& key = std::nullopt, StreamOrDevice s = {});
array bernoulli(double p, const Shape& shape, const std::optional<array>& key = std::nullopt, StreamOrDevice s = {});
/// One sample with p = 0.5 from the global key. (MLX also has bernoulli(key), but a key passed alone
/// would bind to the `p` overload; write bernoulli(0.5, {}, key).)
array bernoulli(StreamOrDevice s = {});

/// Standard Gumbel samples -log(-log(u)), u uniform in [0, 1).
array gumbel(const Shape& shape, Dtype dtype = float32, const std::optional<array>& key = std::nullopt,
             StreamOrDevice s = {});

/// Laplace samples loc + scale * sign(v) * log1p(-|v|), v a float32 uniform in (-1, 1) (MLX's).
array laplace(const Shape& shape, Dtype dtype, float loc, float scale, const std::optional<array>& key = std::nullopt,
              StreamOrDevice s = {});
inline array laplace(const Shape& shape, float loc, float scale, const std::optional<array>& key = std::nullopt,
                     StreamOrDevice s = {}) {
  return laplace(shape, float32, loc, scale, key, s);
}
inline array laplace(const Shape& shape, Dtype dtype, const std::optional<array>& key = std::nullopt,
                     StreamOrDevice s = {}) {
  return laplace(shape, dtype, 0.0f, 1.0f, key, s);
}
inline array laplace(const Shape& shape, const std::optional<array>& key = std::nullopt, StreamOrDevice s = {}) {
  return laplace(shape, float32, 0.0f, 1.0f, key, s);
}

/// Indices (int32; MLX's are uint32) drawn from the categorical distribution softmax(logits) along
/// `axis`, as argmax(logits + gumbel), or by the inverse CDF for a single distribution (see above). The result has `shape`, which the shape of logits without `axis` must
/// broadcast to. (Write Shape{n} for a one-element shape: a bare {n} picks the num_samples overload.)
array categorical(const array& logits, int axis, const Shape& shape, const std::optional<array>& key = std::nullopt,
                  StreamOrDevice s = {});
/// `num_samples` draws per distribution: shape of logits without `axis`, plus (num_samples).
array categorical(const array& logits, int axis, int num_samples, const std::optional<array>& key = std::nullopt,
                  StreamOrDevice s = {});
/// One draw per distribution: the shape of logits without `axis`.
array categorical(const array& logits, int axis = -1, const std::optional<array>& key = std::nullopt,
                  StreamOrDevice s = {});

/// Samples of the multivariate normal N(mean, cov): mean + z std, z standard normal of shape
/// (shape broadcast with mean's and cov's batch axes) + (n), std = U sqrt(S) Vt from
/// linalg::svd(cov) (the symmetric square root when cov is symmetric positive semi-definite), as
/// MLX computes it. mean (..., n), cov (..., n, n); dtype must be float32 (MLX's rule). cov is not
/// checked to be a covariance: a non-symmetric one gives U sqrt(S) Vt all the same (MLX's too).
/// Differentiable in mean; not in cov (svd has no derivative, as in MLX).
array multivariate_normal(const array& mean, const array& cov, const Shape& shape, Dtype dtype,
                          const std::optional<array>& key = std::nullopt, StreamOrDevice s = {});

/// A random permutation of 0..n-1 (int32, Loom's index dtype; MLX's argsort gives uint32).
array permutation(int n, const std::optional<array>& key = std::nullopt, StreamOrDevice s = {});
/// `x` with its entries along `axis` shuffled (the same shuffle for every slice).
array permutation(const array& x, int axis = 0, const std::optional<array>& key = std::nullopt, StreamOrDevice s = {});

}  // namespace loom::random

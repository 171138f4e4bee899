// The FFT kernel of ops/fft.cpp (internal; ops/fft_kernel.cpp): one-dimensional transforms of every
// line of a strided array along one axis, in float32 / complex64.
//
// Algorithms: a mixed-radix Stockham FFT (radices 8, 4, 2, 3, 5 and a generic odd radix for primes up
// to kMaxGenericRadix) with twiddles computed in double; Bluestein's chirp-z transform (through a
// smooth length >= 2n - 1) for lengths with a larger prime factor. A real line of even length is
// transformed as half as many complex values (its even and odd samples) and one pass of twiddles.
// Plans are made once per length and kept (thread-safe); one plan serves both directions.
#pragma once

#include <cstdint>

#include "loom/core/array.h"

namespace loom::kernels::fft {

/// Lengths whose prime factors are all at most this use the Stockham passes; others use Bluestein.
inline constexpr int kMaxGenericRadix = 31;

enum class Kind {
  c2c,  // complex64 -> complex64, n values per line
  r2c,  // float32 (n) -> complex64 (n / 2 + 1): the non-negative frequencies
  c2r,  // complex64 (n / 2 + 1, Hermitian half) -> float32 (n); the imaginary parts of the zero
        // (and, for even n, the n / 2) frequency are ignored, as numpy's irfft does
};

/// For every line along `axis` of an array of shape `shape` (the output's shape; the input has the
/// same shape but along `axis`, where it has n (c2c, r2c) or n / 2 + 1 (c2r) elements):
///   y[k] = scale * sum_j x[j] exp(-+2 pi i j k / n)   (minus: forward, plus: inverse)
/// `src` and `dst` hold elements at the given strides (in elements of their dtypes; any strides,
/// zero included, for src; dst's lines must not overlap one another). dst may be src (same layout):
/// each line is read whole before it is written. Lines run on Loom's thread pool.
void transform_axis(Kind kind, bool inverse, int n, int axis, const Shape& shape, const void* src,
                    const Strides& src_strides, void* dst, const Strides& dst_strides, float scale);

/// The cached plans (for tests of the cache): how many lengths have one.
size_t cached_plans();

}  // namespace loom::kernels::fft

// Discrete Fourier transforms (MLX's mlx/fft.h, numpy's numpy.fft): complex and real transforms over
// one, two or any number of axes, their inverses, and the shifts and sample frequencies around them.
//
// Dtypes, as MLX: a transform computes in complex64 (MLX has no complex128): a real or integer input
// of fft / ifft / irfft is converted to complex64 first; rfft takes a real input (converted to
// float32) and gives complex64; irfft gives float32. Shapes, as numpy: `n` (one length per transformed
// axis) crops each axis or pads it with zeros before the transform; rfft's output holds n / 2 + 1
// frequencies along its last axis; irfft's `n` is the length of its real output (default
// 2 * (m - 1) for an input of m frequencies) and reads n / 2 + 1 of its input's, ignoring the
// imaginary part of the zero (and, for even n, the n / 2) frequency. `norm` as numpy's: Backward
// scales the inverse by 1 / n, Ortho both directions by 1 / sqrt(n), Forward the forward one by 1 / n.
//
// Errors are thrown when the op is built, naming it: std::invalid_argument for a 0-d array, an
// `n` of another size than `axes`, an n <= 0, duplicate axes, a complex input to rfft; and
// std::out_of_range for an axis out of range (Loom's rule for every op's axes).
//
// Deliberate differences from MLX (docs/coming-from-mlx.md):
// - rfft / rfft2 / rfftn of a complex64 input throw (MLX drops the imaginary parts silently);
// - an axis out of range throws std::out_of_range (MLX: std::invalid_argument), as in every Loom op;
// - the jvp and the batching rule of irfft / irfftn keep an odd output length n (MLX's give
//   2 (m - 1), a wrong shape);
// - the normalization is part of the transform's node, not a multiply after it.
#pragma once

#include <vector>

#include "loom/core/array.h"

namespace loom::fft {

enum class FFTNorm {
  Backward,  // forward unscaled, inverse scaled by 1 / n (numpy's default)
  Ortho,     // both scaled by 1 / sqrt(n): the transform is unitary
  Forward,   // forward scaled by 1 / n, inverse unscaled
};

/// The n-dimensional transform over `axes`, each cropped or zero-padded to its length in `n`.
array fftn(const array& a, const Shape& n, const std::vector<int>& axes, FFTNorm norm = FFTNorm::Backward,
           StreamOrDevice s = {});
/// Over `axes` at their own lengths.
array fftn(const array& a, const std::vector<int>& axes, FFTNorm norm = FFTNorm::Backward, StreamOrDevice s = {});
/// Over every axis.
array fftn(const array& a, FFTNorm norm = FFTNorm::Backward, StreamOrDevice s = {});

/// The n-dimensional inverse transform.
array ifftn(const array& a, const Shape& n, const std::vector<int>& axes, FFTNorm norm = FFTNorm::Backward,
            StreamOrDevice s = {});
array ifftn(const array& a, const std::vector<int>& axes, FFTNorm norm = FFTNorm::Backward, StreamOrDevice s = {});
array ifftn(const array& a, FFTNorm norm = FFTNorm::Backward, StreamOrDevice s = {});

/// The one-dimensional transform along `axis`, cropped or zero-padded to `n`.
array fft(const array& a, int n, int axis, FFTNorm norm = FFTNorm::Backward, StreamOrDevice s = {});
array fft(const array& a, int axis = -1, FFTNorm norm = FFTNorm::Backward, StreamOrDevice s = {});
array ifft(const array& a, int n, int axis, FFTNorm norm = FFTNorm::Backward, StreamOrDevice s = {});
array ifft(const array& a, int axis = -1, FFTNorm norm = FFTNorm::Backward, StreamOrDevice s = {});

/// The two-dimensional transform (over the last two axes by default).
array fft2(const array& a, const Shape& n, const std::vector<int>& axes, FFTNorm norm = FFTNorm::Backward,
           StreamOrDevice s = {});
array fft2(const array& a, const std::vector<int>& axes = {-2, -1}, FFTNorm norm = FFTNorm::Backward,
           StreamOrDevice s = {});
array ifft2(const array& a, const Shape& n, const std::vector<int>& axes, FFTNorm norm = FFTNorm::Backward,
            StreamOrDevice s = {});
array ifft2(const array& a, const std::vector<int>& axes = {-2, -1}, FFTNorm norm = FFTNorm::Backward,
            StreamOrDevice s = {});

/// The n-dimensional transform of a real input: the last of `axes` keeps n / 2 + 1 frequencies.
array rfftn(const array& a, const Shape& n, const std::vector<int>& axes, FFTNorm norm = FFTNorm::Backward,
            StreamOrDevice s = {});
array rfftn(const array& a, const std::vector<int>& axes, FFTNorm norm = FFTNorm::Backward, StreamOrDevice s = {});
array rfftn(const array& a, FFTNorm norm = FFTNorm::Backward, StreamOrDevice s = {});

/// The inverse of rfftn: `n` holds the output's lengths (the last one's default: 2 * (m - 1)).
array irfftn(const array& a, const Shape& n, const std::vector<int>& axes, FFTNorm norm = FFTNorm::Backward,
             StreamOrDevice s = {});
array irfftn(const array& a, const std::vector<int>& axes, FFTNorm norm = FFTNorm::Backward, StreamOrDevice s = {});
array irfftn(const array& a, FFTNorm norm = FFTNorm::Backward, StreamOrDevice s = {});

/// The one-dimensional real transform and its inverse along `axis`.
array rfft(const array& a, int n, int axis, FFTNorm norm = FFTNorm::Backward, StreamOrDevice s = {});
array rfft(const array& a, int axis = -1, FFTNorm norm = FFTNorm::Backward, StreamOrDevice s = {});
array irfft(const array& a, int n, int axis, FFTNorm norm = FFTNorm::Backward, StreamOrDevice s = {});
array irfft(const array& a, int axis = -1, FFTNorm norm = FFTNorm::Backward, StreamOrDevice s = {});

/// The two-dimensional real transform and its inverse (over the last two axes by default).
array rfft2(const array& a, const Shape& n, const std::vector<int>& axes, FFTNorm norm = FFTNorm::Backward,
            StreamOrDevice s = {});
array rfft2(const array& a, const std::vector<int>& axes = {-2, -1}, FFTNorm norm = FFTNorm::Backward,
            StreamOrDevice s = {});
array irfft2(const array& a, const Shape& n, const std::vector<int>& axes, FFTNorm norm = FFTNorm::Backward,
             StreamOrDevice s = {});
array irfft2(const array& a, const std::vector<int>& axes = {-2, -1}, FFTNorm norm = FFTNorm::Backward,
             StreamOrDevice s = {});

/// The sample frequencies of a transform of length n with spacing d (numpy's fftfreq): [0, 1, ...,
/// (n - 1) / 2, -(n / 2), ..., -1] / (n d), float32. Throws std::invalid_argument for n <= 0, d == 0.
array fftfreq(int n, double d = 1.0, StreamOrDevice s = {});
/// rfft's sample frequencies: [0, 1, ..., n / 2] / (n d), float32.
array rfftfreq(int n, double d = 1.0, StreamOrDevice s = {});

/// Moves the zero frequency to the centre: rolls each axis by floor(size / 2) (numpy's fftshift).
array fftshift(const array& a, StreamOrDevice s = {});
array fftshift(const array& a, const std::vector<int>& axes, StreamOrDevice s = {});
/// The inverse of fftshift: rolls each axis by -floor(size / 2).
array ifftshift(const array& a, StreamOrDevice s = {});
array ifftshift(const array& a, const std::vector<int>& axes, StreamOrDevice s = {});

}  // namespace loom::fft

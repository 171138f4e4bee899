"""numpy reference of MLX's quantization, for the expected values pasted into quantized_test.cpp.

Affine: MLX's CPU quantize kernel (mlx/backend/cpu/quantized.cpp) in float32, packing each row as a
little-endian bit stream into uint32 words; dequantize as MLX's composition (q * scale, then + bias).
E4M3: an independent definition (nearest finite E4M3 value, ties to the even code, saturating at
448), not MLX's bit trick. Run: python3 tests/ops/quantized_ref.py
"""
import numpy as np

f32 = np.float32


def test_w(rows, cols):
    # Built in float64 and rounded once to float32: the C++ test computes the same doubles.
    i = np.arange(rows * cols)
    v = ((i * 37) % 101 - 50) / 16.0 * (1 + ((i // 32) % 5) * 0.25) + (i % 13) * 0.0371
    return v.astype(f32).reshape(rows, cols)


def affine_quantize(w, gs, bits):
    n_bins = f32((1 << bits) - 1)
    eps = f32(1e-7)
    g = w.reshape(-1, gs)
    codes = np.zeros(g.shape, np.uint64)
    scales = np.zeros(len(g), f32)
    biases = np.zeros(len(g), f32)
    for k, grp in enumerate(g):
        w_max, w_min = f32(grp.max()), f32(grp.min())
        mask = abs(w_min) > abs(w_max)
        scale = max(f32(f32(w_max - w_min) / n_bins), eps)
        scale = scale if mask else -scale
        edge = w_min if mask else w_max
        q0 = np.rint(f32(edge / scale))
        bias = f32(0)
        if q0 != 0:
            scale = f32(edge / q0)
            bias = edge
        q = np.rint(((grp - bias).astype(f32) / scale).astype(f32))
        codes[k] = np.clip(q, 0, n_bins).astype(np.uint64)
        scales[k], biases[k] = scale, bias
    # bit stream per row
    flat = codes.reshape(w.shape[0], -1)
    words = []
    for row in flat:
        acc, have, out = 0, 0, []
        for c in row:
            acc |= int(c) << have
            have += bits
            while have >= 32:
                out.append(acc & 0xFFFFFFFF)
                acc >>= 32
                have -= 32
        words.append(out)
    return np.array(words, np.uint64), scales.reshape(w.shape[0], -1), biases.reshape(w.shape[0], -1), codes


def e4m3_values():
    vals = []
    for c in range(128):
        e, m = c >> 3, c & 7
        v = (m / 8.0) * 2.0 ** -6 if e == 0 else (1 + m / 8.0) * 2.0 ** (e - 7)
        vals.append(v)
    return np.array(vals[:127])  # 0x7F is NaN in E4M3FN; MLX saturates at 0x7E = 448


def to_e4m3_ref(x):
    vals = e4m3_values()
    a = abs(float(x))
    if not np.isfinite(a) or a >= 448:
        code = 0x7E
    else:
        d = np.abs(vals - a)
        best = np.flatnonzero(d == d.min())
        code = int(best[0]) if len(best) == 1 else int([b for b in best if b % 2 == 0][0])
    return code | (0x80 if np.signbit(x) else 0)


FP4 = np.array([0, 0.5, 1, 1.5, 2, 3, 4, 6, -0.0, -0.5, -1, -1.5, -2, -3, -4, -6], f32)


def e4m3_value(c):
    e, m = (c >> 3) & 15, c & 7
    v = (m / 8.0) * 2.0 ** -6 if e == 0 else (1 + m / 8.0) * 2.0 ** (e - 7)
    return -v if c & 128 else v


def fp_quantize(w, mode):
    """MLX's fp_quantize fallback (mlx/ops.cpp) for float32 w: (words, scale bytes)."""
    gs = 16 if mode == "nvfp4" else 32
    bits = 8 if mode == "mxfp8" else 4
    g = w.reshape(-1, gs).astype(f32)
    amax = np.abs(g).max(axis=1, keepdims=True)
    scales = (amax / f32(6.0 if bits == 4 else 448.0)).astype(f32)
    if mode == "nvfp4":
        s8 = np.array([to_e4m3_ref(v) for v in scales.reshape(-1)], np.int64).reshape(-1, 1)
        wq = (g / np.array([e4m3_value(c) for c in s8.reshape(-1)], f32).reshape(-1, 1)).astype(f32)
    else:
        e = np.where(scales == 0, f32(0), np.rint(np.log2(scales))).astype(f32)
        wq = (g / np.power(f32(2), e)).astype(f32)
        s8 = (e + 127).astype(np.int64)
    if bits == 4:
        codes = np.argmin(np.abs(wq[:, :, None] - FP4[None, None, :]), axis=-1).astype(np.uint64)
    else:
        codes = np.array([to_e4m3_ref(v) for v in wq.reshape(-1)], np.uint64).reshape(wq.shape)
    flat = codes.reshape(-1, 32 // bits)
    words = np.zeros(len(flat), np.uint64)
    for k in range(32 // bits):
        words |= flat[:, k] << np.uint64(k * bits)
    return words, s8.reshape(-1)


if __name__ == "__main__":
    w = test_w(2, 256)
    print("// affine: bits, gs, words[0..3], sum of words, scale[0], bias[0], scale[last], bias[last], sum of dequantized")
    for bits in (2, 3, 4, 5, 6, 8):
        for gs in (32, 64, 128):
            words, s, b, codes = affine_quantize(w, gs, bits)
            dq = (codes.reshape(-1, gs).astype(f32) * s.reshape(-1, 1)).astype(f32) + b.reshape(-1, 1)
            err = float(np.abs(dq.reshape(w.shape) - w).max())
            print("{%d, %d, {%s}, %du, %.9g, %.9g, %.9g, %.9g, %.9g}," % (
                bits, gs, ", ".join("%du" % x for x in words[0, :4]), int(words.sum()),
                s.flat[0], b.flat[0], s.flat[-1], b.flat[-1], float(dq.astype(np.float64).sum())))
    xs = [0.0, -0.0, 1.0, -1.0, 0.5, 448.0, 449.0, 470.0, 1e6, -1e6, 0.013671875, 0.0009765625, 0.001,
          1.0625, 1.1875, 3.3, -7.77, 2.0 ** -9, 2.0 ** -10, 240.0, 232.0, 0.3, 1e-9]
    print("// to_fp8")
    print(", ".join(repr(v) for v in xs))
    print(", ".join("0x%02X" % to_e4m3_ref(v) for v in xs))
    print("// fp modes on test_w(2, 256): mode, words[0..3], sum of words, scales[0..3], sum of scales")
    for mode in ("mxfp4", "mxfp8", "nvfp4"):
        words, sc = fp_quantize(test_w(2, 256), mode)
        print('{"%s", {%s}, %du, {%s}, %d},' % (mode, ", ".join("%du" % x for x in words[:4]), int(words.sum()),
                                               ", ".join(str(int(x)) for x in sc[:4]), int(sc.sum())))

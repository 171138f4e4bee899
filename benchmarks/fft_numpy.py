#!/usr/bin/env python3
"""numpy.fft on the workloads of bench_fft (benchmarks/fft.cpp), one JSON line per workload.

Run by `bench_fft --numpy` (or alone: `/usr/bin/python3 benchmarks/fft_numpy.py [--quick]`). The inputs
are complex64 / float32 arrays, as Loom's; numpy (before 2.0) computes every transform in float64 with
its pocketfft, on one thread, and returns complex128.
"""
import sys

import numpy as np

from numpy_timing import report

# name, op, shape: the same list as benchmarks/fft.cpp's kCases.
CASES = [
    ("fft_1024x1024", "fft", (1024, 1024)),
    ("fft_256x4096", "fft", (256, 4096)),
    ("fft_256x4093", "fft", (256, 4093)),
    ("fft_1x4096", "fft", (4096,)),
    ("fft_1x1048576", "fft", (1 << 20,)),
    ("rfft_1024x1024", "rfft", (1024, 1024)),
    ("rfft_256x4096", "rfft", (256, 4096)),
    ("rfft_256x4093", "rfft", (256, 4093)),
    ("fft2_1024x1024", "fft2", (1024, 1024)),
    ("fft_axis0_1024x1024", "fft_axis0", (1024, 1024)),
]


def main():
    quick = "--quick" in sys.argv
    rng = np.random.default_rng(0)
    for name, op, shape in CASES:
        if op == "rfft":
            x = rng.standard_normal(shape).astype(np.float32)
            fn = lambda: np.fft.rfft(x)
        else:
            x = (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(np.complex64)
            fn = {"fft": lambda: np.fft.fft(x), "fft2": lambda: np.fft.fft2(x),
                  "fft_axis0": lambda: np.fft.fft(x, axis=0)}[op]
        report(name, fn, 5 if quick else 15, 1)


if __name__ == "__main__":
    main()

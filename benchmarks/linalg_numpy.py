#!/usr/bin/env python3
"""numpy.linalg on the workloads of bench_linalg (benchmarks/linalg.cpp), one JSON line per workload.

Run by `bench_linalg --numpy` with OPENBLAS_NUM_THREADS set (or alone: `OPENBLAS_NUM_THREADS=1
/usr/bin/python3 benchmarks/linalg_numpy.py --threads 1 [--quick]`). The inputs are float32, as Loom's;
numpy computes float32 linalg in float32 with the LAPACK it is linked to.
"""
import sys

import numpy as np

from numpy_timing import report

# name, op, shape: the same list as benchmarks/linalg.cpp's kCases.
CASES = [
    ("inv_512", "inv", (512, 512)),
    ("solve_512x64", "solve", (512, 512)),
    ("cholesky_512", "cholesky", (512, 512)),
    ("qr_512", "qr", (512, 512)),
    ("svd_512", "svd", (512, 512)),
    ("eigh_512", "eigh", (512, 512)),
    ("det_512", "det", (512, 512)),
    ("inv_4096x8x8", "inv", (4096, 8, 8)),
    ("solve_4096x8x8", "solve", (4096, 8, 8)),
]


def main():
    quick = "--quick" in sys.argv
    threads = int(sys.argv[sys.argv.index("--threads") + 1]) if "--threads" in sys.argv else 1
    rng = np.random.default_rng(0)
    for name, op, shape in CASES:
        n = shape[-1]
        m = rng.standard_normal(shape).astype(np.float32)
        a = (m @ np.swapaxes(m, -1, -2) / np.float32(n) + np.eye(n, dtype=np.float32)).astype(np.float32)
        b = rng.standard_normal(shape[:-1] + ((64,) if len(shape) == 2 else (1,))).astype(np.float32)
        fn = {"inv": lambda: np.linalg.inv(a), "solve": lambda: np.linalg.solve(a, b),
              "cholesky": lambda: np.linalg.cholesky(a), "qr": lambda: np.linalg.qr(a),
              "svd": lambda: np.linalg.svd(a), "eigh": lambda: np.linalg.eigh(a),
              "det": lambda: np.linalg.det(a)}[op]
        report(name, fn, 3 if quick else 11, threads)


if __name__ == "__main__":
    main()

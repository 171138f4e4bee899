"""The timing loop of the numpy sides of bench_fft and bench_linalg (benchmarks/*_numpy.py): one JSON
line per workload, as benchmarks/bench.h's compare_with_numpy reads it."""
import json
import time

import numpy as np


def report(name, fn, reps, threads):
    """Calls fn once (warm-up), then `reps` times, and prints the median in ms."""
    fn()
    ms = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        ms.append((time.perf_counter() - t0) * 1e3)
    ms.sort()
    print(json.dumps({"bench": name, "impl": "numpy", "numpy": np.__version__, "threads": threads,
                      "median_ms": round(ms[len(ms) // 2], 4), "n": reps}), flush=True)

#!/usr/bin/env python3
"""Per-call overhead of rlx's Python API: Executable.run on a tiny graph (add of two f32[4])
from Python, against the same Executable::run called directly from C++ (rlx._core._bench_run,
a loop in the extension over a prepared TensorMap). Prints microseconds per call (best of 5).

Run after `pip install .` (or with PYTHONPATH=build-py/python): python3 bench/python_overhead.py
"""

import time

import numpy as np

import rlx


def best_us(fn, n, repeats=5):
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        best = min(best, (time.perf_counter() - t0) / n)
    return best * 1e6


def main():
    rlx.set_num_threads(1)
    g = rlx.Graph("tiny")
    x = g.input("x", (4,))
    y = g.input("y", (4,))
    g.outputs(x + y)
    exe = rlx.Session().compile(g)
    a = np.arange(4, dtype=np.float32)
    b = np.ones(4, dtype=np.float32)
    feeds = {"x": a, "y": b}
    n = 20000
    cpp = min(rlx._core._bench_run(exe, feeds, n) for _ in range(5)) * 1e6
    rows = [
        ("C++ Executable::run (direct)", cpp),
        ("Python exe.run(x=a, y=b)", best_us(lambda: exe.run(x=a, y=b), n)),
        ("Python exe.run({'x': a, 'y': b})", best_us(lambda: exe.run(feeds), n)),
        ("Python exe.run(a, b)", best_us(lambda: exe.run(a, b), n)),
        ("Python rlx.evaluate (reference)", best_us(lambda: rlx.evaluate(g, feeds), n // 10)),
        ("numpy a + b (for scale)", best_us(lambda: a + b, n)),
    ]
    width = max(len(r[0]) for r in rows)
    for name, us in rows:
        extra = f"  (+{us - cpp:.2f} us over C++)" if name.startswith("Python exe") else ""
        print(f"{name:<{width}}  {us:8.2f} us{extra}")


if __name__ == "__main__":
    main()

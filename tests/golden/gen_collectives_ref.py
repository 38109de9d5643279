#!/usr/bin/env python3
"""Reference results of jax's collectives for rlx's all_reduce / all_gather / reduce_scatter /
all_to_all over a simulated device axis.

Writes tests/golden/collectives_ref.json: per case the op, its rlx attributes, the number of
devices n (one group of all of them: jax.vmap(..., axis_name="i") maps the collective over a
named axis of size n, so device d is index d of the mapped axis), one operand per device and
jax's result per device: lax.psum / pmax / pmin / pmean, lax.all_gather(tiled=True),
lax.psum_scatter(tiled=True) and lax.all_to_all(tiled=True). f32 operands are small integers
(every sum exact, so results are bit-exact whatever the summation order); f64 operands are
random. Run from anywhere: python3 tests/golden/gen_collectives_ref.py
"""

import importlib.metadata
import json
import os

HERE = os.path.dirname(os.path.abspath(__file__))


def check_versions():
    """Asserts the installed jax / jaxlib / numpy equal the pins of requirements.txt."""
    with open(os.path.join(HERE, "requirements.txt")) as f:
        for line in f:
            line = line.split("#")[0].strip()
            if line:
                pkg, want = line.split("==")
                if pkg in ("jax", "jaxlib", "numpy"):
                    have = importlib.metadata.version(pkg)
                    assert have == want, f"{pkg} {have} installed, requirements.txt pins {want}"


check_versions()

import jax  # noqa: E402
import numpy as np  # noqa: E402
from jax import lax  # noqa: E402

jax.config.update("jax_enable_x64", True)
jax.config.update("jax_platforms", "cpu")

rng = np.random.default_rng(20261205)


def tensor(x):
    x = np.asarray(x)
    name = {"float32": "f32", "float64": "f64", "int32": "i32"}[str(x.dtype)]
    return {"dtype": name, "shape": list(x.shape), "data": x.ravel().tolist()}


def operands(n, shape, dtype):
    if dtype == "f64":
        return rng.normal(size=(n, *shape))
    if dtype == "i32":
        return rng.integers(-50, 50, size=(n, *shape)).astype(np.int32)
    return rng.integers(-20, 20, size=(n, *shape)).astype(np.float32)


def cases():
    out = []
    shape = (4, 8)
    for n in (1, 2, 4):
        for dtype in ("f32", "f64", "i32"):
            xs = operands(n, shape, dtype)
            specs = [
                ("all_reduce", {"reduce": "sum"}, lambda x: lax.psum(x, "i")),
                ("all_reduce", {"reduce": "max"}, lambda x: lax.pmax(x, "i")),
                ("all_reduce", {"reduce": "min"}, lambda x: lax.pmin(x, "i")),
            ]
            if dtype != "i32":
                specs.append(("all_reduce", {"reduce": "mean"}, lambda x: lax.pmean(x, "i")))
            for axis in (0, 1):
                specs.append(("all_gather", {"axis": axis},
                              lambda x, a=axis: lax.all_gather(x, "i", axis=a, tiled=True)))
                specs.append(("reduce_scatter", {"scatter_dimension": axis},
                              lambda x, a=axis: lax.psum_scatter(x, "i", scatter_dimension=a,
                                                                 tiled=True)))
            for split, concat in ((1, 0), (0, 1), (1, 1)):
                specs.append(("all_to_all", {"split_axis": split, "concat_axis": concat},
                              lambda x, s=split, c=concat: lax.all_to_all(
                                  x, "i", s, c, tiled=True)))
            for op, attrs, fn in specs:
                ys = np.asarray(jax.vmap(fn, axis_name="i")(xs))
                out.append({"op": op, "attrs": attrs, "devices": n,
                            "inputs": [tensor(x) for x in xs],
                            "expected": [tensor(y) for y in ys]})
    return out


def main():
    data = {"generator": "tests/golden/gen_collectives_ref.py", "jax": jax.__version__,
            "cases": cases()}
    path = os.path.join(HERE, "collectives_ref.json")
    with open(path, "w") as f:
        json.dump(data, f, separators=(",", ":"))
        f.write("\n")
    print(f"wrote {len(data['cases'])} cases to {path}")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Reference draws of jax.random for rlx's random-number ops and builders (rlx/ir/random.h).

Writes tests/golden/random_ref.json: for fixed keys, jax.random.key_data(PRNGKey(seed)), the
raw threefry2x32 primitive, bits, uniform (f32, f64, f16, bf16),
fold_in, split, bernoulli and vmapped (batched-key) draws, all with jax's threefry2x32 PRNG under
jax_threefry_partitionable=True (the default from jax 0.5.0; pinned here because jax 0.4.38,
the version requirements.txt pins, defaults to False). Integers are u32 words written as the
i32 bit patterns rlx carries them in. Run from anywhere: python3 tests/golden/gen_random_ref.py
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
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from jax._src import prng  # noqa: E402

jax.config.update("jax_enable_x64", True)  # 64-bit seeds and f64 draws
jax.config.update("jax_threefry_partitionable", True)
jax.config.update("jax_platforms", "cpu")

SEEDS = [0, 42, 2**32 - 1, 2**40 + 5, 2**63 + 12345]


def key(seed):
    return jax.random.PRNGKey(np.uint64(seed)) if seed >= 2**63 else jax.random.PRNGKey(seed)


def tensor(x):
    x = np.asarray(x)
    if x.dtype == np.uint32:
        x = x.view(np.int32)
    name = {"float32": "f32", "float64": "f64", "float16": "f16", "bfloat16": "bf16",
            "int32": "i32", "bool": "bool"}[str(x.dtype)]
    data = x.astype(np.float64).ravel().tolist() if name in ("f16", "bf16") else x.ravel().tolist()
    return {"dtype": name, "shape": list(x.shape), "data": data}


def words(k):
    return np.asarray(jax.random.key_data(k)).view(np.int32).tolist()


def main():
    cases = []

    def add(fn, expected, **kw):
        cases.append({"fn": fn, **kw, "expected": tensor(expected)})

    for s in SEEDS:
        add("key", jax.random.key_data(key(s)), seed=str(s))
    rng = np.random.default_rng(20260201)
    for shape in [(), (7,), (2, 3)]:
        w = [rng.integers(0, 2**32, shape, dtype=np.uint64).astype(np.uint32) for _ in range(4)]
        y0, y1 = prng.threefry2x32_p.bind(*map(jnp.asarray, w))
        cases.append({"fn": "threefry2x32", "operands": [tensor(v) for v in w],
                      "expected": tensor(y0), "expected1": tensor(y1)})
    for s in SEEDS[:4]:
        k = key(s)
        for shape in [(), (5,), (3, 4), (2, 3, 5)]:
            add("bits", jax.random.bits(k, shape, jnp.uint32), key=words(k), shape=list(shape))
        for dt, name in [(jnp.float32, "f32"), (jnp.float64, "f64"), (jnp.float16, "f16"),
                         (jnp.bfloat16, "bf16")]:
            add("uniform", jax.random.uniform(k, (4, 9), dt), key=words(k), shape=[4, 9],
                dtype=name)
        for d in [0, 1, 7, 123456789, -1]:
            add("fold_in", jax.random.key_data(jax.random.fold_in(k, np.uint32(d % 2**32))),
                key=words(k), data=d)
        add("split", jax.random.key_data(jax.random.split(k, 4)), key=words(k), num=4)
        add("bernoulli", jax.random.bernoulli(k, jnp.float32(0.3), (40,)), key=words(k), p=0.3,
            shape=[40])
    # A batch of keys (vmap) and the sampler's per-row draw uniform(fold_in(fold_in(key, seed),
    # step)) with per-row seeds and steps.
    ks = jax.random.split(key(7), 3)
    add("bits", jax.vmap(lambda k: jax.random.bits(k, (2, 3), jnp.uint32))(ks),
        key=np.asarray(jax.random.key_data(ks)).view(np.int32).tolist(), shape=[2, 3])
    seeds = np.array([0, 5, 5, 2**31 - 1], np.uint32)
    steps = np.array([0, 0, 3, 100000], np.uint32)
    draw = jax.vmap(lambda s, t: jax.random.uniform(
        jax.random.fold_in(jax.random.fold_in(key(7), s), t), (), jnp.float32))(seeds, steps)
    add("row_uniform", draw, key=words(key(7)), seeds=seeds.view(np.int32).tolist(),
        steps=steps.view(np.int32).tolist())

    path = os.path.join(HERE, "random_ref.json")
    with open(path, "w") as f:
        json.dump({"generator": "tests/golden/gen_random_ref.py", "jax": jax.__version__,
                   "jax_threefry_partitionable": True, "cases": cases}, f, separators=(",", ":"))
        f.write("\n")
    print(f"wrote {len(cases)} cases to {path}")


if __name__ == "__main__":
    main()

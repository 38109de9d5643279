#!/usr/bin/env python3
"""Reference batched outputs for tests/autodiff/vmap_ref_test.cc, computed with jax.vmap.

Writes tests/autodiff/vmap_ref.json: for each case the per-example graph it vmaps (a name the
C++ test builds identically, see build_graph() there), in_axes (null = not batched), out_axes,
the batch size, seeded batched inputs and jax.vmap(f, in_axes, out_axes)(*inputs). Keep the
per-example functions below in step with the C++ builders.
Run: python3 tests/autodiff/gen_vmap_ref.py (jax[cpu]==0.4.38, numpy).
"""

import math
import os

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from ref_json import write_cases

jax.config.update("jax_platforms", "cpu")
jax.config.update("jax_default_matmul_precision", "highest")

HERE = os.path.dirname(os.path.abspath(__file__))
NP = {"f32": np.float32, "i32": np.int32, "bool": np.bool_}
CASES = []


def layer_norm(x, s, b, eps=1e-5):
    m = jnp.mean(x, -1, keepdims=True)
    c = x - m
    return c * lax.rsqrt(jnp.mean(c * c, -1, keepdims=True) + eps) * s + b


def attention(q, k, v, mask):
    """softmax(q k^T / sqrt(D)) v over [B,H,S,D], keys masked by `mask` (bool) and causally."""
    s = jnp.einsum("bhqd,bhkd->bhqk", q, k) / math.sqrt(q.shape[-1])
    sq, sk = s.shape[-2:]
    causal = jnp.arange(sk)[None, :] <= jnp.arange(sq)[:, None] + (sk - sq)
    s = jnp.where(mask & causal, s, -jnp.inf)
    return jnp.einsum("bhqk,bhkd->bhqd", jax.nn.softmax(s, -1), v)


# Per-example functions; argument order = the C++ graph's input order.
GRAPHS = {
    "mlp": lambda x, w1, b1, w2: jax.nn.gelu(x @ w1 + b1, approximate=False) @ w2,
    "attention": lambda q, k, v, m: attention(q, k, v, m),
    "layer_norm": lambda x, s, b: layer_norm(x, s, b),
    "conv": lambda x, w: lax.conv_general_dilated(x, w, (1,), [(1, 1)]),
    "gather": lambda x, i: jnp.take(x, i, axis=0, mode="clip"),
    "dot_general": lambda a, b: lax.dot_general(a, b, (((2,), (1,)), ((0,), (0,)))),
    "cross_entropy": lambda l, y: jax.nn.logsumexp(l, -1)
    - jnp.take_along_axis(l, y[:, None], -1)[:, 0],
    "cumsum_softmax": lambda x: (jnp.max(jnp.cumsum(x, 1), 0), jax.nn.softmax(x, 0)),
    "scatter_add": lambda x, i, u: x.at[i].add(u, mode="drop"),
}


def case(graph, in_axes, out_axes, size, inputs):
    """inputs: list of (name, rlx dtype, per-example shape, generator(batched shape))."""
    arrays, spec = [], []
    for (name, dt, shape, gen), ax in zip(inputs, in_axes):
        shape = list(shape)
        if ax is not None:
            shape.insert(ax if ax >= 0 else len(shape) + 1 + ax, size)
        a = np.asarray(gen(shape), dtype=NP[dt])
        arrays.append(jnp.asarray(a))
        spec.append({"name": name, "dtype": dt, "shape": list(a.shape),
                     "data": [float(str(v)) if dt == "f32" else int(v) for v in a.reshape(-1)]})
    out = jax.vmap(GRAPHS[graph], in_axes=tuple(in_axes), out_axes=out_axes)(*arrays)
    outs = out if isinstance(out, tuple) else (out,)
    CASES.append({
        "name": f"{graph}_{len([c for c in CASES if c['graph'] == graph])}",
        "graph": graph, "in_axes": list(in_axes),
        "out_axes": list(out_axes) if isinstance(out_axes, tuple) else [out_axes] * len(outs),
        "size": size, "inputs": spec,
        "outputs": [{"shape": list(o.shape),
                     "data": [float(str(v)) for v in np.asarray(o, np.float32).reshape(-1)]}
                    for o in outs],
    })


def main():
    rng = np.random.default_rng(20261201)
    u = lambda scale=1.0: (lambda s: rng.uniform(-1.0, 1.0, s) * scale)
    ints = lambda lo, hi: (lambda s: rng.integers(lo, hi, s))
    boolean = lambda s: np.concatenate([np.ones(s[:-1] + [1], bool),
                                        rng.uniform(size=s[:-1] + [s[-1] - 1]) < 0.7], -1)

    mlp = [("x", "f32", [8], u()), ("w1", "f32", [8, 16], u(0.5)), ("b1", "f32", [16], u()),
           ("w2", "f32", [16, 4], u(0.5))]
    case("mlp", (0, None, None, None), 0, 5, mlp)
    case("mlp", (1, 0, None, None), 1, 3, mlp)
    case("mlp", (None, 2, None, 0), -1, 4, mlp)

    att = [("q", "f32", [1, 2, 5, 8], u()), ("k", "f32", [1, 2, 5, 8], u()),
           ("v", "f32", [1, 2, 5, 8], u()), ("m", "bool", [1, 1, 1, 5], boolean)]
    case("attention", (0, 0, 0, 0), 0, 3, att)
    case("attention", (None, 1, 1, 0), 2, 2, att)
    case("attention", (2, None, None, None), -1, 3, att)

    ln = [("x", "f32", [4, 6], u()), ("s", "f32", [6], u()), ("b", "f32", [6], u())]
    case("layer_norm", (0, None, None), 0, 3, ln)
    case("layer_norm", (1, 0, None), 1, 2, ln)
    case("layer_norm", (None, 0, 0), 0, 3, ln)

    conv = [("x", "f32", [1, 2, 7], u()), ("w", "f32", [4, 2, 3], u())]
    case("conv", (0, None), 0, 3, conv)
    case("conv", (None, 0), 2, 2, conv)
    case("conv", (0, 3), 0, 3, conv)

    # Gather clamps like jnp.take(mode="clip"); indices stay >= 0 (jnp wraps negative ones).
    gather = [("x", "f32", [5, 3], u()), ("idx", "i32", [4], ints(0, 7))]
    case("gather", (0, None), 0, 3, gather)
    case("gather", (None, 0), 1, 3, gather)
    case("gather", (1, 0), 0, 2, gather)

    dot = [("a", "f32", [2, 3, 4], u()), ("b", "f32", [2, 4, 5], u())]
    case("dot_general", (0, None), 0, 3, dot)
    case("dot_general", (None, 2), 3, 2, dot)
    case("dot_general", (2, 1), 1, 3, dot)

    ce = [("logits", "f32", [3, 5], u(3.0)), ("labels", "i32", [3], ints(0, 5))]
    case("cross_entropy", (0, 0), 0, 4, ce)
    case("cross_entropy", (None, 0), 1, 3, ce)
    case("cross_entropy", (1, None), 0, 2, ce)

    cs = [("x", "f32", [4, 5], u())]
    case("cumsum_softmax", (1,), (0, 1), 3, cs)
    case("cumsum_softmax", (-1,), (-1, 0), 2, cs)

    # scatter_add drops out-of-range updates like .at[].add(mode="drop"); index 6 is dropped.
    sc = [("x", "f32", [6, 2], u()), ("idx", "i32", [3], ints(0, 7)), ("u", "f32", [3, 2], u())]
    case("scatter_add", (0, 0, 0), 0, 3, sc)
    case("scatter_add", (None, 0, None), 1, 4, sc)

    write_cases(os.path.join(HERE, "vmap_ref.json"), CASES)


if __name__ == "__main__":
    main()

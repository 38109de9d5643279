#!/usr/bin/env python3
"""Reference derivatives through control flow for tests/autodiff/control_flow_ref_test.cc,
computed with jax.grad / jax.jvp / jax.vmap of lax.scan, lax.cond, lax.switch and lax.fori_loop.

Writes tests/autodiff/control_flow_ref.json: for each case its seeded inputs, the transform
("grad": names differentiated, then loss and gradients; "jvp": names and tangents, then outputs
and their tangents; "vmap": in_axes and batch size, then the batched outputs) and the expected
outputs in the transform's output order. The graphs are built identically in C++ (one builder
per graph name in control_flow_ref_test.cc); keep the two in step.
Run: python3 tests/autodiff/gen_control_flow_ref.py (jax[cpu]==0.4.38, numpy).
"""

import os

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from ref_json import write_cases

jax.config.update("jax_enable_x64", True)
jax.config.update("jax_platforms", "cpu")
jax.config.update("jax_default_matmul_precision", "highest")

HERE = os.path.dirname(os.path.abspath(__file__))
NP = {"f32": np.float32, "f64": np.float64, "i32": np.int32, "bool": np.bool_}
rng = np.random.default_rng(20261206)


def rand(dt, shape, lo=-1.0, hi=1.0):
    return rng.uniform(lo, hi, shape).astype(NP[dt])


def enc(a):
    a = np.asarray(a)
    if a.dtype == np.bool_:
        return [bool(v) for v in a.reshape(-1)]
    if a.dtype.kind in "iu":
        return [int(v) for v in a.reshape(-1)]
    return [float(v) for v in a.reshape(-1)]


def rlx_dtype(a):
    return {np.dtype(v): k for k, v in NP.items()}[np.asarray(a).dtype]


def tensor(a):
    return {"dtype": rlx_dtype(a), "shape": list(np.shape(a)), "data": enc(a)}


# ---- the graphs (C++: control_flow_ref_test.cc, same names)

T, B, I, H = 50, 2, 3, 4


def rnn(w, u, b, h0, xs):
    """The 50-step tanh RNN of the golden data; returns (h_T, ys)."""
    def cell(h, x):
        h = jnp.tanh(x @ w + h @ u + b)
        return h, h
    return lax.scan(cell, h0, xs)


def rnn_loss(w, u, b, h0, xs):
    hT, ys = rnn(w, u, b, h0, xs)
    return jnp.sum(hT * hT) + jnp.sum(ys) * jnp.float32(0.1)


def cond_fn(p, x, y):
    return lax.cond(p, lambda a, c: (jnp.sin(a) * c, a), lambda a, c: (jnp.exp(c) - a, a * c), x, y)


def cond_loss(p, x, y):
    r0, r1 = cond_fn(p, x, y)
    return jnp.sum(r0 * r0) + jnp.sum(r1)


SWITCH = [lambda a, c: jnp.sin(a) * c, lambda a, c: a + c * c, lambda a, c: jnp.exp(c) - a]


def switch_loss(i, x, y):
    r = lax.switch(i, SWITCH, x, y)
    return jnp.sum(r * r)


def loop_loss(a, x0):
    """A while_loop i < 4 (max_trip_count 6 in rlx) of x' = sin(x) a + x: a fori_loop in jax."""
    x = lax.fori_loop(0, 4, lambda _, x: jnp.sin(x) * a + x, x0)
    return jnp.sum(x * x)


def newton(a):
    """Newton's iteration for sqrt(a) to convergence: a while_loop without a trip bound."""
    def cond(c):
        i, x = c
        return (jnp.max(jnp.abs(x * x - a)) > 1e-12) & (i < 100)
    return lax.while_loop(cond, lambda c: (c[0] + 1, (c[1] + a / c[1]) * 0.5), (jnp.int32(0), a))


def newton_scan(c0, xs):
    """A scan whose body runs newton() (an unbounded while_loop): a = x_t + c^2, c' = 0.5 sqrt(a),
    y_t = sqrt(a)."""
    def step(c, x):
        r = newton(x + c * c)[1]
        return r * 0.5, r
    return lax.scan(step, c0, xs)


def main():
    cases = []

    def add(name, graph, dtype, inputs, transform, outputs, **extra):
        case = {"name": name, "graph": graph, "dtype": dtype, "transform": transform,
                "inputs": {k: tensor(v) for k, v in inputs.items()},
                "outputs": [tensor(np.asarray(o)) for o in outputs]}
        case.update(extra)
        cases.append(case)

    # grad of the 50-step RNN loss with respect to everything.
    rnn_in = {"w": rand("f32", (I, H), -0.8, 0.8), "u": rand("f32", (H, H), -0.8, 0.8),
              "b": rand("f32", (H,), -0.5, 0.5), "h0": rand("f32", (B, H)), "xs": rand("f32", (T, B, I))}
    names = ["w", "u", "b", "h0", "xs"]
    args = [jnp.asarray(rnn_in[n]) for n in names]
    loss, grads = jax.value_and_grad(rnn_loss, argnums=tuple(range(5)))(*args)
    add("rnn50_grad", "rnn_loss", "f32", rnn_in, "grad", [loss, *grads], wrt=names)
    # jvp of (h_T, ys) along tangents of w and h0.
    tw, th = rand("f32", (I, H)), rand("f32", (B, H))
    outs, touts = jax.jvp(lambda w, h0: rnn(w, args[1], args[2], h0, args[4]), (args[0], args[3]),
                          (jnp.asarray(tw), jnp.asarray(th)))
    add("rnn50_jvp", "rnn", "f32", rnn_in, "jvp", [*outs, *touts], primals=["w", "h0"],
        tangents={"w": tensor(tw), "h0": tensor(th)})

    # grad and jvp of cond, both predicates.
    x, y = rand("f32", (4,)), rand("f32", (4,))
    for p in (True, False):
        inputs = {"p": np.bool_(p), "x": x, "y": y}
        loss, grads = jax.value_and_grad(cond_loss, argnums=(1, 2))(p, jnp.asarray(x), jnp.asarray(y))
        add(f"cond_{str(p).lower()}_grad", "cond_loss", "f32", inputs, "grad", [loss, *grads], wrt=["x", "y"])
        tx, ty = rand("f32", (4,)), rand("f32", (4,))
        outs, touts = jax.jvp(lambda a, c: cond_fn(p, a, c), (jnp.asarray(x), jnp.asarray(y)),
                              (jnp.asarray(tx), jnp.asarray(ty)))
        add(f"cond_{str(p).lower()}_jvp", "cond", "f32", inputs, "jvp", [*outs, *touts], primals=["x", "y"],
            tangents={"x": tensor(tx), "y": tensor(ty)})

    # grad of a 3-way switch, indices clamped as lax.switch.
    for idx in (-1, 1, 5):
        inputs = {"i": np.int32(idx), "x": x, "y": y}
        loss, grads = jax.value_and_grad(switch_loss, argnums=(1, 2))(idx, jnp.asarray(x), jnp.asarray(y))
        add(f"switch_{'m1' if idx < 0 else idx}_grad", "switch_loss", "f32", inputs, "grad", [loss, *grads],
            wrt=["x", "y"])

    # grad of a bounded while_loop (4 trips of at most 6).
    a, x0 = rand("f64", (3,)), rand("f64", (3,))
    loss, grads = jax.value_and_grad(loop_loss, argnums=(0, 1))(jnp.asarray(a), jnp.asarray(x0))
    add("while_bounded_grad", "loop_loss", "f64", {"a": a, "x0": x0}, "grad", [loss, *grads], wrt=["a", "x0"])

    # jvp of an unbounded while_loop (forward mode carries the tangent): d sqrt(a) = t / 2 sqrt(a).
    a = rand("f64", (3,), 0.5, 40)
    ta = rand("f64", (3,))
    outs, touts = jax.jvp(newton, (jnp.asarray(a),), (jnp.asarray(ta),))
    add("newton_while_jvp", "newton", "f64", {"a": a}, "jvp", [outs[0], outs[1], touts[1]], primals=["a"],
        tangents={"a": tensor(ta)})

    # jvp of a scan whose body runs that unbounded while_loop (forward mode inside a region).
    c0, xs = rand("f64", (3,), 0.5, 2), rand("f64", (4, 3), 0.5, 4)
    tc, tx = rand("f64", (3,)), rand("f64", (4, 3))
    outs, touts = jax.jvp(newton_scan, (jnp.asarray(c0), jnp.asarray(xs)), (jnp.asarray(tc), jnp.asarray(tx)))
    add("newton_scan_jvp", "newton_scan", "f64", {"c0": c0, "xs": xs}, "jvp", [*outs, *touts],
        primals=["c0", "xs"], tangents={"c0": tensor(tc), "xs": tensor(tx)})

    write_cases(os.path.join(HERE, "control_flow_ref.json"), cases)


if __name__ == "__main__":
    main()

"""rlx.scan / rlx.cond / rlx.while_loop graphs compiled for pjrt:0 (XLA's CPU plugin, which lowers
them to stablehlo.while / stablehlo.case) against jax.lax, live."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

import rlx
from pjrt_plugin import pjrt_devices

jax.config.update("jax_enable_x64", True)
rng = np.random.default_rng(61)
needs_plugin = pytest.mark.skipif(not pjrt_devices(), reason="no PJRT plugin (lammps-jax-pjrt-cpu)")


def run_pjrt(g, **feeds):
    out = rlx.Session("pjrt:0", precision="always-f32").compile(g).run(feeds)
    return out if isinstance(out, list) else [out]


@needs_plugin
@pytest.mark.parametrize("reverse", [False, True])
def test_scan_of_two_xs_and_two_ys_matches_jax(reverse):
    # A moving average m' = alpha * tanh(m) + a_t * b_t over 20 steps, emitting (m, a_t - b_t).
    T = 20
    a = rng.uniform(-1, 1, (T, 3)).astype(np.float32)
    b = rng.uniform(-1, 1, (T,)).astype(np.float32)
    m0 = rng.uniform(-1, 1, (3,)).astype(np.float32)
    alpha = np.float32(0.9)
    g = rlx.Graph("ema")
    ga, gb = g.input("a", a.shape), g.input("b", b.shape)
    gm, gal = g.input("m0", (3,)), g.input("alpha", ())

    def step(al, m, x):
        at, bt = x
        return al * m.graph.tanh(m) + at * bt, (m, at - bt)

    m, (ms, d) = rlx.scan(step, gm, (ga, gb), consts=(gal,), reverse=reverse)
    g.outputs(m, ms, d)
    got = run_pjrt(g, a=a, b=b, m0=m0, alpha=alpha)

    def jstep(c, x):
        return alpha * jnp.tanh(c) + x[0] * x[1], (c, x[0] - x[1])

    want_m, (want_ms, want_d) = lax.scan(jstep, m0, (a, b), reverse=reverse)
    for g_, w_ in zip(got, [want_m, want_ms, want_d]):
        np.testing.assert_allclose(g_, w_, rtol=2e-5, atol=2e-5)


@needs_plugin
@pytest.mark.parametrize("p", [False, True])
def test_cond_of_while_matches_jax(p):
    a = rng.uniform(1, 20, (3,))
    g = rlx.Graph()
    gp, ga = g.input("p", (), "bool"), g.input("a", (3,), "f64")

    def newton(v):
        def go(v_, c):
            return c[0] < 30

        def step(v_, c):
            return c[0] + 1, 0.5 * (c[1] + v_ / c[1])

        return rlx.while_loop(go, step, (v.graph.constant(np.int32(0)), v), consts=(v,))[1]

    g.outputs(rlx.cond(gp, newton, lambda v: v * 2.0, ga))
    got = run_pjrt(g, p=np.bool_(p), a=a)

    def jnewton(v):
        return lax.while_loop(lambda c: c[0] < 30, lambda c: (c[0] + 1, 0.5 * (c[1] + v / c[1])),
                              (0, v))[1]

    want = lax.cond(p, jnewton, lambda v: v * 2.0, a)
    np.testing.assert_allclose(got[0], want, rtol=1e-12, atol=1e-12)

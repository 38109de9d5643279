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
def test_scan_rnn_matches_jax(reverse):
    T, B, H = 20, 2, 4
    xs = rng.uniform(-1, 1, (T, B, H)).astype(np.float32)
    h0 = rng.uniform(-1, 1, (B, H)).astype(np.float32)
    w = rng.uniform(-0.7, 0.7, (H, H)).astype(np.float32)
    g = rlx.Graph("rnn")
    gx, gh, gw = g.input("xs", xs.shape), g.input("h0", h0.shape), g.input("w", w.shape)

    def cell(w_, h, x):
        n = h.graph.tanh(x + h @ w_)
        return n, n * 2.0

    h, ys = rlx.scan(cell, gh, gx, consts=(gw,), reverse=reverse)
    g.outputs(h, ys)
    got = run_pjrt(g, xs=xs, h0=h0, w=w)

    def jcell(c, x):
        n = jnp.tanh(x + c @ w)
        return n, n * 2.0

    want = lax.scan(jcell, h0, xs, reverse=reverse)
    np.testing.assert_allclose(got[0], want[0], rtol=2e-5, atol=2e-5)
    np.testing.assert_allclose(got[1], want[1], rtol=2e-5, atol=2e-5)


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

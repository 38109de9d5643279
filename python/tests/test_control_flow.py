"""rlx.cond / switch / while_loop / scan / fori_loop against jax.lax, live: each builds its
bodies from Python functions; the graphs run on the reference evaluator and, compiled with
rlx.Session("cpu").compile, natively on the CPU backend (the `run` fixture runs each test on
both). Also the errors for values that are not rlx.Values, enclosing values used inside a body,
and mismatched branches or carries."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

import rlx

jax.config.update("jax_enable_x64", True)
rng = np.random.default_rng(16)


@pytest.fixture(params=["evaluator", "cpu"])
def run(request):
    """Runs a graph on the reference evaluator or compiled on the CPU backend (control-flow
    nodes native there: checked in the kernel report)."""
    if request.param == "evaluator":
        return rlx.evaluate

    def on_cpu(g, **feeds):
        exe = rlx.Session("cpu").compile(g)
        for k in exe.kernels():
            # Only a scan with empty ys (length 0) runs on the reference kernel.
            if k["op"] in ("cond", "while_loop", "scan"):
                assert k["native"] or k["fallback_reason"] == "some results are empty", k
        return exe.run(**feeds)

    return on_cpu


def close(a, b, tol=1e-5):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=tol, atol=tol)


def test_scan_rnn_cell_matches_jax(run):
    T, B, H = 50, 2, 4
    xs = rng.uniform(-1, 1, (T, B, H)).astype(np.float32)
    h0 = rng.uniform(-1, 1, (B, H)).astype(np.float32)
    w = rng.uniform(-0.7, 0.7, (H, H)).astype(np.float32)
    g = rlx.Graph("rnn")
    gx, gh, gw = g.input("xs", xs.shape), g.input("h0", h0.shape), g.input("w", w.shape)

    def cell(w_, h, x):
        n = h.graph.tanh(x + h @ w_)
        return n, n

    h, ys = rlx.scan(cell, gh, gx, consts=(gw,))
    assert ys.shape == (T, B, H)
    g.outputs(h, ys)
    got = run(g, xs=xs, h0=h0, w=w)
    want = lax.scan(lambda c, x: (jnp.tanh(x + c @ w),) * 2, h0, xs)
    close(got[0], want[0])
    close(got[1], want[1])


@pytest.mark.parametrize("reverse", [False, True])
def test_scan_cumsum_equals_the_cumsum_op(run, reverse):
    x = rng.integers(-50, 50, (7, 3)).astype(np.int32)
    g = rlx.Graph()
    gx = g.input("x", x.shape, "i32")
    zero = g.constant(np.zeros(3, np.int32))
    c, ys = rlx.scan(lambda c, v: (c + v, c + v), zero, gx, reverse=reverse)
    g.outputs(c, ys, g.cumsum(gx, 0, reverse=reverse))
    got = run(g, x=x)
    want = lax.scan(lambda c, v: (c + v, c + v), np.zeros(3, np.int32), x, reverse=reverse)
    np.testing.assert_array_equal(got[0], want[0])
    np.testing.assert_array_equal(got[1], want[1])
    np.testing.assert_array_equal(got[1], got[2])


def test_empty_scan_and_tuple_carries(run):
    g = rlx.Graph()
    gx = g.input("x", (0, 2))
    a, b = g.input("a", (2,)), g.input("b", ())
    (ca, cb), ys = rlx.scan(lambda c, v: ((c[0] * v, c[1] + 1.0), (v, c[1])), (a, b), gx)
    assert ys[0].shape == (0, 2) and ys[1].shape == (0,)
    g.outputs(ca, cb, ys[0], ys[1])
    av, bv = np.array([1.5, -2], np.float32), np.float32(3)
    got = run(g, x=np.zeros((0, 2), np.float32), a=av, b=bv)
    close(got[0], av)
    close(got[1], bv)
    assert got[2].shape == (0, 2) and got[3].shape == (0,)


def test_while_loop_newton_and_zero_trips(run):
    a = rng.uniform(0.5, 30, (3,))
    g = rlx.Graph()
    ga, gi = g.input("a", (3,), "f64"), g.input("i", (), "i32")

    def keep_going(a_, c):
        i, x = c
        err = (x * x - a_).graph.reduce_max(abs(x * x - a_), 0)
        return (err > 1e-12) & (i < 100)

    i, x = rlx.while_loop(keep_going, lambda a_, c: (c[0] + 1, (c[1] + a_ / c[1]) * 0.5), (gi, ga),
                          consts=(ga,))
    g.outputs(i, x)
    want = lax.while_loop(lambda c: (jnp.max(jnp.abs(c[1] * c[1] - a)) > 1e-12) & (c[0] < 100),
                          lambda c: (c[0] + 1, (c[1] + a / c[1]) * 0.5), (np.int32(0), a))
    got = run(g, a=a, i=np.int32(0))
    assert int(got[0]) == int(want[0]) > 2
    close(got[1], want[1], 1e-12)
    # Zero trips: cond false at once returns the init.
    got = run(g, a=a, i=np.int32(100))
    assert int(got[0]) == 100
    close(got[1], a, 0)


def test_switch_clamps_and_cond_picks(run):
    x = rng.normal(size=4).astype(np.float32)
    g = rlx.Graph()
    gi, gp, gx = g.input("i", (), "i32"), g.input("p", (), "bool"), g.input("x", (4,))
    fns = [lambda v: v.graph.sin(v), lambda v: v * 2.0, lambda v: v.graph.exp(v) - v]
    s = rlx.switch(gi, fns, gx)
    c = rlx.cond(gp, lambda v: v + 1.0, lambda v: -v, gx)
    g.outputs(s, c)
    jfns = [jnp.sin, lambda v: v * 2.0, lambda v: jnp.exp(v) - v]
    for idx in (-4, 0, 1, 2, 9):
        for p in (False, True):
            got = run(g, i=np.int32(idx), p=np.bool_(p), x=x)
            close(got[0], lax.switch(idx, jfns, x))
            close(got[1], lax.cond(p, lambda v: v + 1.0, lambda v: -v, x))


def test_fori_loop_matches_jax(run):
    g = rlx.Graph()
    gx = g.input("x", (3,))
    y = rlx.fori_loop(2, 7, lambda i, v: v * 0.5 + i.astype("f32"), gx)
    z = rlx.fori_loop(5, 5, lambda i, v: v + 1.0, gx)  # no steps
    g.outputs(y, z)
    x = np.array([1, -2, 4], np.float32)
    got = run(g, x=x)
    close(got[0], lax.fori_loop(2, 7, lambda i, v: v * 0.5 + i.astype(jnp.float32), x))
    close(got[1], x, 0)


def test_text_round_trip_of_nested_regions(run):
    g = rlx.Graph("nested")
    gp, gx = g.input("p", (), "bool"), g.input("x", (5,))
    inner = lambda v: rlx.scan(lambda c, t: (c + t, c + t), v.graph.constant(np.float32(0)), v)[1]
    g.outputs(rlx.cond(gp, inner, lambda v: -v, gx))
    text = g.to_string()
    back = rlx.parse(text)
    assert back.to_string() == text
    x = np.arange(5, dtype=np.float32)
    close(run(back, p=np.bool_(True), x=x), np.cumsum(x))


def test_errors_name_the_problem():
    g = rlx.Graph()
    gx, gp = g.input("x", (2,)), g.input("p", (), "bool")
    with pytest.raises(rlx.Error, match="branch 1 .* result 0 is f64\\[2\\] but branch 0 .* is f32\\[2\\]"):
        rlx.cond(gp, lambda v: v.astype("f64"), lambda v: v, gx)
    with pytest.raises(rlx.Error, match="a body sees only its arguments"):
        rlx.cond(gp, lambda v: gx, lambda v: v, gx)
    with pytest.raises(rlx.Error, match="operands must be rlx.Values"):
        rlx.cond(gp, lambda v: v, lambda v: v, 1.0)
    with pytest.raises(rlx.Error, match="body .* result 0 is f64\\[2\\] but carry 0 is f32\\[2\\]"):
        rlx.scan(lambda c, v: (c.astype("f64"), v), gx, g.input("xs", (3, 2)))
    with pytest.raises(rlx.Error, match="f must return a pair"):
        rlx.scan(lambda c, v: c, gx, g.input("xs2", (3, 2)))

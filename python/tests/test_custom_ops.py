"""rlx.custom_vjp and rlx.pure_callback (python/rlx/custom.py), custom ops from Python.

custom_vjp's value is fun's and its gradient is the user's bwd, checked against
jax.custom_vjp of the same functions (whose bwd is deliberately not fun's derivative, so a
gradient of fun would fail); pure_callback runs numpy code inside a graph compiled for the CPU
and fails clearly on XLA."""

from __future__ import annotations

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import rlx
from pjrt_plugin import pjrt_devices

RNG = np.random.default_rng(0)


def rlx_f(x):
    g = x.graph
    return g.sin(x) * x


def rlx_f_fwd(x):
    g = x.graph
    return rlx_f(x), (x, g.cos(x))


def rlx_f_bwd(res, ct):
    x, c = res
    # Deliberately 3 * cos(x) * ct: not the derivative of sin(x) * x.
    return (ct * c * 3.0,)


def jax_f(x):
    return jnp.sin(x) * x


def jax_f_fwd(x):
    return jax_f(x), (x, jnp.cos(x))


def jax_f_bwd(res, ct):
    x, c = res
    return (ct * c * 3.0,)


def loss_graph(f):
    g = rlx.Graph("cvjp")
    x = g.input("x", (3, 4))
    w = g.input("w", (3, 4))
    g.outputs(g.reduce_sum(f(x) * w))
    return g


def test_custom_vjp_value_is_fun_and_grad_is_bwd_like_jax():
    f = rlx.custom_vjp(rlx_f, rlx_f_fwd, rlx_f_bwd)
    g = loss_graph(f)
    x = RNG.uniform(-2, 2, (3, 4)).astype(np.float32)
    w = RNG.uniform(-1, 1, (3, 4)).astype(np.float32)

    jf = jax.custom_vjp(jax_f)
    jf.defvjp(jax_f_fwd, jax_f_bwd)
    want_loss, want_grad = jax.value_and_grad(lambda x: jnp.sum(jf(x) * w))(x)

    loss = rlx.evaluate(g, {"x": x, "w": w})
    np.testing.assert_allclose(loss, want_loss, rtol=1e-5)
    exe = rlx.Session().compile(g)
    np.testing.assert_allclose(exe.run(x=x, w=w), want_loss, rtol=1e-5)

    dg = rlx.grad(g, ["x"])
    for got in (rlx.evaluate(dg, {"x": x, "w": w}), rlx.Session().compile(dg).run(x=x, w=w)):
        np.testing.assert_allclose(got[0], want_loss, rtol=1e-5)
        np.testing.assert_allclose(got[1], want_grad, rtol=1e-5, atol=1e-6)
        # The user's bwd, not fun's derivative (which jax.grad of jax_f would give).
        np.testing.assert_allclose(got[1], 3 * np.cos(x) * w, rtol=1e-5, atol=1e-6)
        true_grad = jax.grad(lambda x: jnp.sum(jax_f(x) * w))(x)
        assert not np.allclose(got[1], true_grad, atol=1e-3)


def test_custom_vjp_defvjp_two_args_and_none_cotangent():
    def f(x, y):
        return x * y

    def fwd(x, y):
        return f(x, y), y

    def bwd(y, ct):
        return (ct * y, None)  # no cotangent for y: zeros

    cf = rlx.custom_vjp(f).defvjp(fwd, bwd)
    g = rlx.Graph("two")
    x, y = g.input("x", (4,)), g.input("y", (4,))
    g.outputs(g.reduce_sum(cf(x, y)))
    xv = np.array([1, 2, 3, 4], np.float32)
    yv = np.array([0.5, -1, 2, 0], np.float32)
    out = rlx.evaluate(rlx.grad(g, ["x", "y"]), {"x": xv, "y": yv})
    np.testing.assert_allclose(out[1], yv)
    np.testing.assert_allclose(out[2], np.zeros(4, np.float32))


def test_custom_vjp_errors():
    g = rlx.Graph("bad")
    x = g.input("x", (3,))
    with pytest.raises(rlx.Error, match="fwd must return a pair"):
        rlx.custom_vjp(rlx_f, lambda x: rlx_f(x), rlx_f_bwd)(x)
    with pytest.raises(rlx.Error, match="bwd must return a tuple of 1 cotangents"):
        rlx.custom_vjp(rlx_f, rlx_f_fwd, lambda r, ct: (ct, ct))(x)
    with pytest.raises(rlx.Error, match="define fwd and bwd first"):
        rlx.custom_vjp(rlx_f)(x)
    with pytest.raises(rlx.Error, match=r"bwd's outputs \(one cotangent per operand\) are "
                                        r"\(f32\[\]\) but should be \(f32\[3\]\)"):
        rlx.custom_vjp(rlx_f, rlx_f_fwd, lambda r, ct: (r[0].graph.reduce_sum(ct),))(x)
    with pytest.raises(rlx.Error, match="arguments must be rlx.Values"):
        rlx.custom_vjp(rlx_f, rlx_f_fwd, rlx_f_bwd)(np.zeros(3, np.float32))


def test_pure_callback_runs_numpy_in_a_compiled_cpu_graph():
    calls = []

    def host_sort(a):
        calls.append(a.shape)
        return np.sort(a, axis=-1)[..., ::-1] * 2  # numpy code rlx has no op for

    g = rlx.Graph("cb")
    x = g.input("x", (3, 5))
    y = rlx.pure_callback(host_sort, np.zeros((3, 5), np.float32), g.exp(x))
    g.outputs(g.log(y))
    xv = RNG.uniform(-1, 1, (3, 5)).astype(np.float32)
    want = np.log(np.sort(np.exp(xv), axis=-1)[..., ::-1] * 2)
    exe = rlx.Session().compile(g)
    np.testing.assert_allclose(exe.run(x=xv), want, rtol=1e-5, atol=1e-6)  # f32 exp / log
    assert calls == [(3, 5)]
    np.testing.assert_allclose(rlx.evaluate(g, {"x": xv}), want, rtol=1e-5, atol=1e-6)
    assert len(calls) == 2
    assert "py.pure_callback" in g.to_string()


def test_pure_callback_result_checks_and_errors():
    g = rlx.Graph("cb")
    x = g.input("x", (4,))
    g.outputs(rlx.pure_callback(lambda a: a[:2], ((3,), "f32"), x))
    with pytest.raises(rlx.Error, match=r"returned f32\[2\] but the declared result type is f32\[3\]"):
        rlx.evaluate(g, {"x": np.zeros(4, np.float32)})

    with pytest.raises(rlx.Error, match="result_shape_dtypes must have .shape and .dtype"):
        rlx.pure_callback(np.negative, "f32", x)
    with pytest.raises(rlx.Error, match="shape has a negative dim -1"):
        rlx.pure_callback(np.negative, ((-1,), "f32"), x)

    # The callback id is the process's: a graph text naming an unknown one fails when run.
    text = re.sub(r"callback=\d+", "callback=99999", g.to_string())
    with pytest.raises(rlx.Error, match="no callback with id 99999 in this process"):
        rlx.evaluate(rlx.parse(text), {"x": np.zeros(4, np.float32)})

    def boom(a):
        raise ValueError("no luck")

    g2 = rlx.Graph("cb2")
    x2 = g2.input("x", (4,))
    g2.outputs(rlx.pure_callback(boom, ((4,), np.float32), x2))
    with pytest.raises(rlx.Error, match="the callback raised ValueError: no luck"):
        rlx.Session().compile(g2).run(x=np.zeros(4, np.float32))
    with pytest.raises(rlx.Error, match="no vjp rule and no decomposition"):
        rlx.grad(g2.__class__.parse(g2.to_text()) if False else _sum_graph(boom), ["x"])


def _sum_graph(fn):
    g = rlx.Graph("sum")
    x = g.input("x", (4,))
    g.outputs(g.reduce_sum(rlx.pure_callback(fn, ((4,), "f32"), x)))
    return g


@pytest.mark.parametrize("device", pjrt_devices())
def test_pure_callback_on_xla_fails_naming_the_op(device):
    g = rlx.Graph("cb")
    x = g.input("x", (4,))
    g.outputs(rlx.pure_callback(np.negative, ((4,), "f32"), x))
    with pytest.raises(rlx.Error, match=r"custom op 'py.pure_callback' \(node %\w+\) has no "
                                        r"decomposition: it cannot run on backend 'pjrt"):
        rlx.Session(device).compile(g)


@pytest.mark.parametrize("device", pjrt_devices())
def test_custom_vjp_runs_fun_on_xla(device):
    f = rlx.custom_vjp(rlx_f, rlx_f_fwd, rlx_f_bwd)
    g = loss_graph(f)
    x = RNG.uniform(-2, 2, (3, 4)).astype(np.float32)
    w = RNG.uniform(-1, 1, (3, 4)).astype(np.float32)
    dg = rlx.grad(g, ["x"])
    got = rlx.Session(device, precision="f32").compile(dg).run(x=x, w=w)
    np.testing.assert_allclose(got[1], 3 * np.cos(x) * w, rtol=1e-5, atol=1e-6)

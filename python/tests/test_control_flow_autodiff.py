"""rlx.grad / rlx.jvp / rlx.vmap of graphs built with rlx.scan, rlx.cond and rlx.fori_loop
against jax.grad / jax.jvp / jax.vmap, on the reference evaluator (no backend runs control flow
natively yet); scan checkpointing gives the same gradients bit for bit."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

import rlx

jax.config.update("jax_enable_x64", True)
rng = np.random.default_rng(1606)


def close(a, b, tol=1e-5):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=tol, atol=tol)


def rnn_graph(T, B, H):
    g = rlx.Graph("rnn")
    gx, gh, gw = g.input("xs", (T, B, H)), g.input("h0", (B, H)), g.input("w", (H, H))

    def cell(w_, h, x):
        n = h.graph.tanh(x + h @ w_)
        return n, n

    h, ys = rlx.scan(cell, gh, gx, consts=(gw,))
    g.outputs(g.reduce_sum(h * h, [0, 1]) + g.reduce_sum(ys, [0, 1, 2]) * 0.1)
    return g


def rnn_loss(xs, h0, w):
    h, ys = lax.scan(lambda c, x: (jnp.tanh(x + c @ w),) * 2, h0, xs)
    return jnp.sum(h * h) + jnp.sum(ys) * jnp.float32(0.1)


def test_grad_of_scan_matches_jax_and_checkpointing_is_exact():
    T, B, H = 40, 2, 4
    xs = rng.uniform(-1, 1, (T, B, H)).astype(np.float32)
    h0 = rng.uniform(-1, 1, (B, H)).astype(np.float32)
    w = rng.uniform(-0.7, 0.7, (H, H)).astype(np.float32)
    g = rnn_graph(T, B, H)
    got = rlx.evaluate(rlx.grad(g, ["xs", "h0", "w"]), xs=xs, h0=h0, w=w)
    loss, grads = jax.value_and_grad(rnn_loss, argnums=(0, 1, 2))(xs, h0, w)
    close(got[0], loss, 1e-4)
    for k in range(3):
        close(got[k + 1], grads[k], 1e-4)
    for k in (8, 7):  # 40 = 5 segments of 8; 5 of 7 and an unchecked tail of 5
        ck = rlx.evaluate(rlx.grad(g, ["xs", "h0", "w"], scan_checkpoint_every=k), xs=xs, h0=h0, w=w)
        for a, b in zip(got, ck):
            assert np.array_equal(np.asarray(a), np.asarray(b))


def test_grad_and_jvp_of_cond_and_fori_loop_match_jax():
    x = rng.uniform(-1, 1, 3).astype(np.float32)
    g = rlx.Graph("branchy")
    gp, gx = g.input("p", (), "bool"), g.input("x", (3,))
    c = rlx.cond(gp, lambda v: v.graph.sin(v) * v, lambda v: v.graph.exp(v), gx)
    y = rlx.fori_loop(0, 5, lambda c_, i, v: v.graph.tanh(v) * 0.9 + c_, gx, consts=(c,))
    g.outputs(g.reduce_sum(y * y, [0]))

    def ref(p, v):
        cv = lax.cond(p, lambda u: jnp.sin(u) * u, jnp.exp, v)
        yv = lax.fori_loop(0, 5, lambda i, u: jnp.tanh(u) * 0.9 + cv, v)
        return jnp.sum(yv * yv)

    t = rng.uniform(-1, 1, 3).astype(np.float32)
    for p in (True, False):
        got = rlx.evaluate(rlx.grad(g, ["x"]), p=np.bool_(p), x=x)
        close(got[1], jax.grad(ref, argnums=1)(p, x))
        jg = rlx.evaluate(rlx.jvp(g, ["x"]), p=np.bool_(p), x=x, **{"tangent.x": t})
        close(jg[1], jax.jvp(lambda v: ref(p, v), (x,), (t,))[1])


def test_vmap_of_cond_with_batched_predicate_matches_jax():
    g = rlx.Graph("sel")
    gp, gx = g.input("p", (), "bool"), g.input("x", (3,))
    g.outputs(rlx.cond(gp, lambda v: v.graph.sin(v), lambda v: v * v, gx))
    p = np.array([True, False, True, False])
    x = rng.uniform(-1, 1, (4, 3)).astype(np.float32)
    got = rlx.evaluate(rlx.vmap(g, [0, 0], [0], 4), p=p, x=x)
    want = jax.vmap(lambda q, v: lax.cond(q, jnp.sin, lambda u: u * u, v))(p, x)
    close(got, want)

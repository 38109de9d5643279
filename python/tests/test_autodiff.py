"""rlx.grad / value_and_grad / vjp / jvp / hvp / vmap (graph transforms, include/rlx/autodiff/)
against jax.grad / jax.jvp / forward-over-reverse / jax.vmap on seeded random f32 inputs.

Every transformed graph runs on the CPU backend through a Session (full compile pipeline).
Non-scalar op outputs are reduced to a scalar loss as sum(out * c), c a fixed random array, so
every element of the cotangent is distinct and a transposed or misplaced gradient shows.
Tolerances: harness.tolerance (the one place they are stated), keyed by the op under test.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jax_refs
import rlx
from harness import SESSION, Arg, assert_close, make, rng_for


def conv_attrs(strides, lo, hi, dilation, groups):
    return {"strides": strides, "pad_low": lo, "pad_high": hi, "dilation": dilation,
            "groups": groups}


def run_cpu(g: rlx.Graph, feeds: dict) -> list:
    """Compiles `g` for the CPU backend and runs it; params of `g` are set from `feeds`."""
    exe = SESSION.compile(g)
    params = {name for name, _, _ in exe.params}
    for name in params:
        exe.set_param(name, feeds[name])
    out = exe.run({k: v for k, v in feeds.items() if k not in params})
    return out if isinstance(out, list) else [out]


def build_loss(build, args, case_id):
    """Graph with inputs a0.. whose output 0 is sum(build(...) * c); the JAX twin; the arrays."""
    rng = rng_for(case_id)
    arrays = [make(rng, a) for a in args]
    g = rlx.Graph("case")
    vals = [g.input(f"a{i}", x.shape, a.dtype) for i, (a, x) in enumerate(zip(args, arrays))]
    out = build(g, *vals)
    c = rng.standard_normal(out.shape).astype(np.float32)
    g.outputs(g.reduce_sum(out * g.constant(c)))
    return g, c, arrays


# (op, build, jax reference, args). Index/label args are non-differentiable and not in wrt.
GRAD_CASES = [
    ("exp", lambda g, x: g.exp(x), jnp.exp, [Arg((3, 4), kind="unit")]),
    ("log", lambda g, x: g.log(x), jnp.log, [Arg((3, 4), kind="pos")]),
    ("tanh", lambda g, x: g.tanh(x), jnp.tanh, [Arg((3, 4))]),
    ("logistic", lambda g, x: g.logistic(x), jax.nn.sigmoid, [Arg((3, 4))]),
    ("sqrt", lambda g, x: g.sqrt(x), jnp.sqrt, [Arg((3, 4), kind="pos")]),
    ("rsqrt", lambda g, x: g.rsqrt(x), jax.lax.rsqrt, [Arg((3, 4), kind="pos")]),
    ("sin", lambda g, x: g.sin(x), jnp.sin, [Arg((3, 4))]),
    ("atan", lambda g, x: g.atan(x), jnp.arctan, [Arg((3, 4))]),
    ("erf", lambda g, x: g.erf(x), jax.scipy.special.erf, [Arg((3, 4))]),
    ("gelu", lambda g, x: g.gelu(x), lambda x: jax.nn.gelu(x, approximate=False), [Arg((3, 4))]),
    ("silu", lambda g, x: g.silu(x), jax.nn.silu, [Arg((3, 4))]),
    ("softplus", lambda g, x: g.softplus(x), jax.nn.softplus, [Arg((3, 4))]),
    ("add", lambda g, x, y: x + y, jnp.add, [Arg((3, 4)), Arg((4,))]),
    ("mul", lambda g, x, y: x * y, jnp.multiply, [Arg((3, 1)), Arg((3, 4))]),
    ("div", lambda g, x, y: x / y, jnp.divide, [Arg((3, 4)), Arg((3, 4), kind="pos")]),
    ("pow", lambda g, x, y: g.pow(x, y), jnp.power, [Arg((3, 4), kind="pos"), Arg((3, 4), kind="unit")]),
    ("max", lambda g, x, y: g.max(x, y), jnp.maximum, [Arg((3, 4)), Arg((3, 4))]),
    ("select", lambda g, x, y: g.select(x > y, x * 2.0, y), lambda x, y: jnp.where(x > y, x * 2.0, y),
     [Arg((3, 4)), Arg((3, 4))]),
    ("matmul", lambda g, x, y: x @ y, jnp.matmul, [Arg((2, 3, 5)), Arg((5, 4))]),
    ("dot_general", lambda g, x, y: g.dot_general(x, y, [0], [0], [2], [1]),
     lambda x, y: jax.lax.dot_general(x, y, (([2], [1]), ([0], [0]))), [Arg((2, 3, 5)), Arg((2, 5, 4))]),
    ("reduce_sum", lambda g, x: g.reduce_sum(x, [1]), lambda x: jnp.sum(x, 1), [Arg((3, 4, 2))]),
    ("reduce_mean", lambda g, x: g.reduce_mean(x, [0, 2], True), lambda x: jnp.mean(x, (0, 2), keepdims=True),
     [Arg((3, 4, 2))]),
    ("reduce_max", lambda g, x: g.reduce_max(x, [1]), lambda x: jnp.max(x, 1), [Arg((3, 5))]),
    ("reduce_prod", lambda g, x: g.reduce_prod(x, [1]), lambda x: jnp.prod(x, 1), [Arg((3, 4), kind="pos")]),
    ("transpose", lambda g, x: g.transpose(x, [2, 0, 1]), lambda x: jnp.transpose(x, (2, 0, 1)),
     [Arg((2, 3, 4))]),
    ("reshape", lambda g, x: g.sin(g.reshape(x, [4, 6])), lambda x: jnp.sin(x.reshape(4, 6)), [Arg((2, 3, 4))]),
    ("broadcast_in_dim", lambda g, x: g.broadcast_in_dim(x, [2, 3, 4], [1]),
     lambda x: jax.lax.broadcast_in_dim(x, (2, 3, 4), (1,)), [Arg((3,))]),
    ("slice", lambda g, x: g.slice(x, [1, 0], [4, 5], [2, 2]), lambda x: x[1:4:2, 0:5:2], [Arg((5, 6))]),
    ("concatenate", lambda g, x, y: g.concatenate([x, y], 1), lambda x, y: jnp.concatenate([x, y], 1),
     [Arg((2, 3)), Arg((2, 4))]),
    ("pad", lambda g, x: g.pad(x, 0.5, [1, 0], [0, 2], [0, 1]),
     lambda x: jax.lax.pad(x, jnp.float32(0.5), [(1, 0, 0), (0, 2, 1)]), [Arg((3, 3))]),
    ("softmax", lambda g, x: g.softmax(x), jax.nn.softmax, [Arg((3, 5))]),
    ("log_softmax", lambda g, x: g.log_softmax(x, 0), lambda x: jax.nn.log_softmax(x, 0), [Arg((3, 5))]),
    ("layer_norm", lambda g, x, s, b: g.layer_norm(x, s, b),
     lambda x, s, b: (x - x.mean(-1, keepdims=True)) / jnp.sqrt(x.var(-1, keepdims=True) + 1e-5) * s + b,
     [Arg((4, 8)), Arg((8,)), Arg((8,))]),
    ("rms_norm", lambda g, x, s: g.rms_norm(x, s),
     lambda x, s: x / jnp.sqrt(jnp.mean(x * x, -1, keepdims=True) + 1e-6) * s, [Arg((4, 8)), Arg((8,))]),
    ("attention", lambda g, q, k, v: g.attention(q, k, v, "causal"),
     lambda q, k, v: jax_refs.attention({"mask": "causal", "window": 0}, q, k, v),
     [Arg((1, 2, 3, 4)), Arg((1, 2, 5, 4)), Arg((1, 2, 5, 4))]),
    ("conv", lambda g, x, w: g.conv(x, w, [2, 1], [1, 0], [1, 2], [1, 1], 2),
     lambda x, w: jax_refs.conv(conv_attrs([2, 1], [1, 0], [1, 2], [1, 1], 2), x, w), [Arg((2, 4, 6, 5)), Arg((4, 2, 3, 2))]),
    ("gather", lambda g, x, i: g.gather(x, i, 0), lambda x, i: jnp.take(x, i, axis=0),
     [Arg((5, 3)), Arg((4,), "i32", value=[4, 0, 2, 0])]),
    ("cumsum", lambda g, x: g.cumsum(x, 1), lambda x: jnp.cumsum(x, 1), [Arg((3, 5))]),
    ("softmax_cross_entropy", lambda g, x, l: g.softmax_cross_entropy(x, l),
     lambda x, l: -jnp.take_along_axis(jax.nn.log_softmax(x), l[:, None], 1)[:, 0],
     [Arg((4, 6)), Arg((4,), "i32", "label:6")]),
]


@pytest.mark.parametrize("op,build,ref,args", GRAD_CASES, ids=[c[0] for c in GRAD_CASES])
def test_grad_matches_jax(op, build, ref, args):
    g, c, arrays = build_loss(build, args, f"grad-{op}")
    wrt = [i for i, a in enumerate(args) if a.dtype == "f32"]
    dg = rlx.grad(g, [f"a{i}" for i in wrt])
    got = run_cpu(dg, {f"a{i}": x for i, x in enumerate(arrays)})
    loss = lambda *xs: jnp.sum(ref(*xs) * c)  # noqa: E731
    want_loss = loss(*arrays)
    want = jax.grad(loss, argnums=tuple(wrt))(*[jnp.asarray(x) for x in arrays])
    assert len(got) == 1 + len(wrt)
    assert_close(got[0], np.float32(want_loss), "f32", op, f"{op} loss")
    for k, i in enumerate(wrt):
        assert_close(got[1 + k], want[k], "f32", op, f"{op} d/da{i}")


def test_grad_op_count():
    # The brief asks for at least 25 differentiable ops across the families.
    assert len({c[0] for c in GRAD_CASES}) >= 25


def two_layer():
    """x[4,3] -> tanh(x @ w1 + b) @ w2 -> mean square: params and an input, shared values."""
    g = rlx.Graph("mlp")
    x = g.input("x", (4, 3))
    w1 = g.param("w1", (3, 5))
    b = g.param("b", (5,))
    w2 = g.param("w2", (5, 2))
    h = g.tanh(x @ w1 + b)
    y = h @ w2
    g.outputs(g.reduce_mean(y * y), y)
    ref = lambda x, w1, b, w2: jnp.mean((jnp.tanh(x @ w1 + b) @ w2) ** 2)  # noqa: E731
    return g, ref, [Arg((4, 3)), Arg((3, 5)), Arg((5,)), Arg((5, 2))]


def test_value_and_grad_keeps_outputs_and_params():
    g, ref, args = two_layer()
    rng = rng_for("vag")
    names = ["x", "w1", "b", "w2"]
    arrays = [make(rng, a) for a in args]
    feeds = dict(zip(names, arrays))
    out = run_cpu(rlx.value_and_grad(g, ["w1", "b", "w2"]), feeds)
    assert len(out) == 2 + 3
    assert_close(out[0], np.float32(ref(*arrays)), "f32", "matmul", "loss")
    assert_close(out[1], np.tanh(arrays[0] @ arrays[1] + arrays[2]) @ arrays[3], "f32", "matmul", "y")
    want = jax.grad(ref, argnums=(1, 2, 3))(*arrays)
    for k in range(3):
        assert_close(out[2 + k], want[k], "f32", "matmul", f"d/{names[1 + k]}")
    # loss given as a Value (not an output index) selects the same scalar.
    loss_value = g.output_values()[0]
    out2 = run_cpu(rlx.grad(g, ["w1"], loss=loss_value), feeds)
    assert_close(out2[1], want[0], "f32", "matmul", "d/w1 via Value loss")


def test_vjp_matches_jax():
    g, _, args = two_layer()
    arrays = [make(rng_for("vjp"), a) for a in args]
    fwd = lambda x, w1, b, w2: (lambda y: (jnp.mean(y * y), y))(jnp.tanh(x @ w1 + b) @ w2)  # noqa: E731
    outs, pullback = jax.vjp(lambda w1: fwd(arrays[0], w1, arrays[2], arrays[3]), arrays[1])
    ct0 = np.float32(0.7)
    ct1 = rng_for("vjp-ct").standard_normal((4, 2)).astype(np.float32)
    (want,) = pullback((ct0, ct1))
    feeds = dict(zip(["x", "w1", "b", "w2"], arrays), **{"ct.0": ct0, "ct.1": ct1})
    got = run_cpu(rlx.vjp(g, ["w1"]), feeds)
    assert_close(got[2], want, "f32", "matmul", "vjp w1")


# (name, builder(g) -> loss value; leaves' args; jax function of the leaves)
def _chain(g, x):
    return g.reduce_sum(g.sin(x) * g.exp(x * 0.5))


def _softmax_ce(g, x, w):
    return g.reduce_mean(g.log_softmax(x @ w) * -1.0)


def _norm(g, x, s):
    return g.reduce_sum(g.layer_norm(x, s, s) ** 2)


def _attn(g, q, k):
    return g.reduce_sum(g.attention(q, k, k, "causal") ** 2)


def _cum(g, x):
    return g.reduce_sum(g.cumsum(g.tanh(x), 0) ** 3)


def _conv(g, x, w):
    return g.reduce_sum(g.logistic(g.conv(x, w)))


def _ln_ref(x, s):
    return (x - x.mean(-1, keepdims=True)) / jnp.sqrt(x.var(-1, keepdims=True) + 1e-5) * s + s


FWD_CASES = [
    ("chain", _chain, [Arg((3, 4))], lambda x: jnp.sum(jnp.sin(x) * jnp.exp(x * 0.5)), "reduce_sum"),
    ("log_softmax", _softmax_ce, [Arg((3, 4)), Arg((4, 5))],
     lambda x, w: jnp.mean(-jax.nn.log_softmax(x @ w)), "log_softmax"),
    ("layer_norm", _norm, [Arg((3, 6)), Arg((6,))], lambda x, s: jnp.sum(_ln_ref(x, s) ** 2), "layer_norm"),
    ("attention", _attn, [Arg((1, 2, 3, 4)), Arg((1, 2, 3, 4))],
     lambda q, k: jnp.sum(jax_refs.attention({"mask": "causal", "window": 0}, q, k, k) ** 2), "attention"),
    ("cumsum", _cum, [Arg((4, 3))], lambda x: jnp.sum(jnp.cumsum(jnp.tanh(x), 0) ** 3), "cumsum"),
    ("conv", _conv, [Arg((1, 2, 5, 5)), Arg((3, 2, 3, 3))],
     lambda x, w: jnp.sum(jax.nn.sigmoid(jax_refs.conv(conv_attrs([1, 1], [0, 0], [0, 0], [1, 1], 1), x, w))), "conv"),
]


def _fwd_setup(name, build, args):
    rng = rng_for(f"fwd-{name}")
    arrays = [make(rng, a) for a in args]
    tangents = [make(rng, a) for a in args]
    g = rlx.Graph(name)
    vals = [g.input(f"a{i}", a.shape) for i, a in enumerate(args)]
    g.outputs(build(g, *vals))
    names = [f"a{i}" for i in range(len(args))]
    feeds = dict(zip(names, arrays))
    feeds.update({f"tangent.{n}": t for n, t in zip(names, tangents)})
    return g, names, arrays, tangents, feeds


@pytest.mark.parametrize("name,build,args,ref,op", FWD_CASES, ids=[c[0] for c in FWD_CASES])
def test_jvp_matches_jax(name, build, args, ref, op):
    g, names, arrays, tangents, feeds = _fwd_setup(name, build, args)
    got = run_cpu(rlx.jvp(g, names), feeds)
    primal, tangent = jax.jvp(ref, tuple(arrays), tuple(tangents))
    assert_close(got[0], np.float32(primal), "f32", op, f"{name} primal")
    assert_close(got[1], np.float32(tangent), "f32", op, f"{name} tangent")


@pytest.mark.parametrize("name,build,args,ref,op", FWD_CASES, ids=[c[0] for c in FWD_CASES])
def test_hvp_matches_forward_over_reverse(name, build, args, ref, op):
    g, names, arrays, tangents, feeds = _fwd_setup(name, build, args)
    got = run_cpu(rlx.hvp(g, names), feeds)
    argnums = tuple(range(len(args)))
    _, want = jax.jvp(jax.grad(ref, argnums=argnums), tuple(arrays), tuple(tangents))
    assert_close(got[0], np.float32(ref(*arrays)), "f32", op, f"{name} loss")
    for i in argnums:
        assert_close(got[1 + i], want[i], "f32", op, f"{name} Hv[{i}]")


def _vmap_graph():
    """Per example: x[3], w[3,4] -> tanh(x @ w) [4] and sum(w * w, 0) [4] (depends on w only)."""
    g = rlx.Graph("per_example")
    x = g.input("x", (3,))
    w = g.input("w", (3, 4))
    g.outputs(g.tanh(x @ w), g.reduce_sum(w * w, [0]))
    return g, lambda x, w: (jnp.tanh(x @ w), jnp.sum(w * w, 0))


@pytest.mark.parametrize("in_axes,out_axes", [((0, None), (0, None)), ((1, 0), (1, 0)), ((None, 2), (0, 1))],
                         ids=["0-None", "1-0", "None-2"])
def test_vmap_matches_jax(in_axes, out_axes):
    g, ref = _vmap_graph()
    batch = 5
    rng = rng_for(f"vmap-{in_axes}")
    shapes = [(3,), (3, 4)]
    arrays = []
    for s, a in zip(shapes, in_axes):
        full = list(s)
        if a is not None:
            full.insert(a, batch)
        arrays.append(rng.standard_normal(full).astype(np.float32))
    vg = rlx.vmap(g, list(in_axes), list(out_axes), batch)
    got = run_cpu(vg, {"x": arrays[0], "w": arrays[1]})
    want = jax.vmap(ref, in_axes=in_axes, out_axes=out_axes)(*arrays)
    for k in range(2):
        assert_close(got[k], want[k], "f32", "matmul", f"vmap {in_axes} output {k}")


def test_vmap_param_axes():
    g = rlx.Graph("p")
    x = g.input("x", (3,))
    w = g.param("w", (3,))
    g.outputs(g.reduce_sum(x * w))
    vg = rlx.vmap(g, [0], [0], 4, param_axes={"w": 1})
    rng = rng_for("vmap-param")
    xs = rng.standard_normal((4, 3)).astype(np.float32)
    ws = rng.standard_normal((3, 4)).astype(np.float32)
    got = run_cpu(vg, {"x": xs, "w": ws})
    assert_close(got[0], np.sum(xs * ws.T, 1), "f32", "reduce_sum", "vmap param_axes")


def test_grad_of_vmap_composes():
    g, ref = _vmap_graph()
    vg = rlx.vmap(g, [0, None], [0, 0], 3)
    y = vg.output_values()[0]
    vg.outputs(vg.reduce_sum(y * y))
    dg = rlx.grad(vg, ["w"])
    rng = rng_for("grad-vmap")
    xs = rng.standard_normal((3, 3)).astype(np.float32)
    w = rng.standard_normal((3, 4)).astype(np.float32)
    got = run_cpu(dg, {"x": xs, "w": w})
    want = jax.grad(lambda w: jnp.sum(jnp.tanh(xs @ w) ** 2))(w)
    assert_close(got[1], want, "f32", "matmul", "grad of vmap")


# ---- errors: rlx.Error carrying the C++ message


def test_error_unknown_wrt():
    g, _, _ = two_layer()
    with pytest.raises(rlx.Error, match=r"grad: no input or param named 'nope'"):
        rlx.grad(g, ["nope"])
    with pytest.raises(rlx.Error, match="nope"):
        rlx.jvp(g, ["nope"])


def test_error_non_scalar_loss():
    g, _, _ = two_layer()
    with pytest.raises(rlx.Error, match=r"f32\[4,2\]"):
        rlx.grad(g, ["w1"], loss=1)
    with pytest.raises(rlx.Error, match=r"f32\[4,2\]"):
        rlx.hvp(g, ["w1"], loss=g.output_values()[1])


def test_error_loss_of_other_graph():
    g, _, _ = two_layer()
    other, _, _ = two_layer()
    with pytest.raises(rlx.Error, match="another graph"):
        rlx.grad(g, ["w1"], loss=other.output_values()[0])


def test_error_in_axes_length():
    g, _ = _vmap_graph()
    with pytest.raises(rlx.Error, match=r"vmap: .*in_axes"):
        rlx.vmap(g, [0], [0, 0], 4)
    with pytest.raises(rlx.Error, match=r"vmap: in_axes entries must be int or None"):
        rlx.vmap(g, [0, "a"], [0, 0], 4)
    with pytest.raises(rlx.Error, match=r"vmap: "):
        rlx.vmap(g, [0, None], [None, 0], 4)  # output 0 depends on the batched x


def test_transform_outputs_have_meaningful_names():
    # Outputs were named by node numbers ('2', '22'); each transform now names what it adds.
    g = rlx.Graph("named")
    x = g.input("x", (4, 8))
    w = g.param("w", (8, 16))
    g.outputs(g.reduce_sum(g.gelu(x @ w), axes=[0, 1]))

    def names(graph):
        return [o[0] for o in rlx.Session().compile(graph).outputs]

    assert names(rlx.grad(g, ["w", "x"])) == ["loss", "grad_w", "grad_x"]
    assert names(rlx.value_and_grad(g, ["w"])) == ["loss", "grad_w"]
    assert names(rlx.vjp(g, ["w"])) == ["out_0", "vjp_w"]
    assert names(rlx.jvp(g, ["w"])) == ["out_0", "jvp_0"]
    assert names(rlx.hvp(g, ["w"])) == ["loss", "hvp_w"]
    # A name the user gave the loss is kept.
    h = rlx.Graph("user_named")
    a = h.input("a", (3,))
    h.outputs(h.emit("reduce_sum", [h.exp(a)], {"axes": [0]}, name="total"))
    assert names(rlx.grad(h, ["a"])) == ["total", "grad_a"]

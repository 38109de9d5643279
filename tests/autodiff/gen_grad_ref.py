#!/usr/bin/env python3
"""Reference gradients for tests/autodiff/grad_ref_test.cc, computed with jax.grad.

Writes tests/autodiff/grad_ref.json: for each case its seeded inputs, the names it
differentiates, the loss and jax.grad of the loss with respect to each name. The graphs are
built identically in C++ (tests/autodiff/ref_graphs.h, one builder per case name); keep the
two in step. Run: python3 tests/autodiff/gen_grad_ref.py (jax[cpu]==0.4.38, numpy, ml_dtypes).
"""

import math
import os

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
from jax import lax
from ref_json import write_cases

jax.config.update("jax_enable_x64", True)
jax.config.update("jax_platforms", "cpu")
jax.config.update("jax_default_matmul_precision", "highest")

HERE = os.path.dirname(os.path.abspath(__file__))
NP = {"f32": np.float32, "f64": np.float64, "bf16": ml_dtypes.bfloat16, "i32": np.int32,
      "bool": np.bool_}


def layer_norm(x, s, b, eps):
    m = jnp.mean(x, -1, keepdims=True)
    c = x - m
    return c * lax.rsqrt(jnp.mean(c * c, -1, keepdims=True) + eps) * s + b


def rms_norm(x, s, eps):
    return x * lax.rsqrt(jnp.mean(x * x, -1, keepdims=True) + eps) * s


def attention(q, k, v, mask=None):
    """softmax(q k^T / sqrt(D) + mask) v over [B,H,S,D]; mask: bool broadcasting to scores."""
    s = jnp.einsum("bhqd,bhkd->bhqk", q, k) / math.sqrt(q.shape[-1])
    if mask is not None:
        s = jnp.where(mask, s, -jnp.inf)
    return jnp.einsum("bhqk,bhkd->bhqd", jax.nn.softmax(s, -1), v)


def causal(sq, sk):
    return jnp.arange(sk)[None, :] <= jnp.arange(sq)[:, None] + (sk - sq)


def gelu(x):
    return jax.nn.gelu(x, approximate=False)


def rope_neox(x, cos, sin):
    h = x.shape[-1] // 2
    a, b = x[..., :h], x[..., h:]
    return jnp.concatenate([a * cos - b * sin, b * cos + a * sin], -1)


def encoder_layer(p, x, pad_mask, heads):
    """Post-LN BERT layer as tests/autodiff/ref_graphs.h builds it; pad_mask bool [B, S]."""
    b, s, hdim = x.shape
    dh = hdim // heads

    def lin(t, n):
        return t @ p[n + ".weight"] + p[n + ".bias"]

    def split(t):
        return t.reshape(b, s, heads, dh).transpose(0, 2, 1, 3)

    q, k, v = (split(lin(x, "attention." + n)) for n in "qkv")
    a = attention(q, k, v, pad_mask[:, None, None, :])
    a = a.transpose(0, 2, 1, 3).reshape(b, s, hdim)
    h = layer_norm(x + lin(a, "attention.out"), p["attention.norm.weight"], p["attention.norm.bias"], 1e-12)
    f = gelu(lin(h, "ffn.in"))
    return layer_norm(h + lin(f, "ffn.out"), p["ffn.norm.weight"], p["ffn.norm.bias"], 1e-12)


CASES = []


def case(name, inputs, wrt, loss_fn, dtype="f32"):
    """inputs: name -> (rlx dtype, array); loss_fn(dict of jnp arrays) -> scalar."""
    arrays = {k: jnp.asarray(a, dtype=NP[dt]) for k, (dt, a) in inputs.items()}

    def f(diff):
        return loss_fn({**arrays, **diff})

    diff = {k: arrays[k] for k in wrt}
    loss, grads = jax.value_and_grad(f)(diff)
    # Shortest decimal that reads back to the same f32 (every value here is an f32 or bf16):
    # keeps the file small without losing a bit.
    enc = lambda a: [float(str(v)) for v in np.asarray(a, dtype=np.float32).reshape(-1)]
    CASES.append({
        "name": name,
        "dtype": dtype,
        "inputs": {k: {"dtype": dt, "shape": list(np.shape(a)), "data": enc(arrays[k])}
                   for k, (dt, a) in inputs.items()},
        "wrt": list(wrt),
        "loss": float(loss),
        "grads": {k: enc(grads[k]) for k in wrt},
    })


def main():
    rng = np.random.default_rng(20260107)
    u = lambda *shape, lo=-1.0, hi=1.0: rng.uniform(lo, hi, shape)

    mlp = {"x": ("f32", u(4, 8)), "w1": ("f32", u(8, 16) * 0.5), "b1": ("f32", u(16)),
           "w2": ("f32", u(16, 3) * 0.5)}
    case("mlp_gelu", mlp, ["x", "w1", "b1", "w2"],
         lambda p: jnp.mean((gelu(p["x"] @ p["w1"] + p["b1"]) @ p["w2"]) ** 2))
    mlp16 = {k: ("bf16", a) for k, (_, a) in mlp.items()}
    case("mlp_gelu_bf16", mlp16, ["x", "w1", "b1", "w2"],
         lambda p: jnp.mean((gelu(p["x"] @ p["w1"] + p["b1"]) @ p["w2"]) ** 2), dtype="bf16")

    case("softmax_cross_entropy",
         {"x": ("f32", u(4, 8)), "w": ("f32", u(8, 5)), "labels": ("i32", np.array([0, 4, 2, 2]))},
         ["x", "w"],
         lambda p: jnp.mean(-jnp.take_along_axis(jax.nn.log_softmax(p["x"] @ p["w"]),
                                                  p["labels"][:, None], -1)[:, 0]))

    case("layer_norm",
         {"x": ("f32", u(3, 8, hi=3.0)), "s": ("f32", u(8, lo=0.5, hi=1.5)), "b": ("f32", u(8)),
          "c": ("f32", u(3, 8))},
         ["x", "s", "b"], lambda p: jnp.sum(jnp.tanh(layer_norm(p["x"], p["s"], p["b"], 1e-5)) * p["c"]))

    case("rms_norm_rope",
         {"x": ("f32", u(2, 4, 8)), "s": ("f32", u(8, lo=0.5, hi=1.5)), "cos": ("f32", np.cos(u(4, 4) * 3)),
          "sin": ("f32", np.sin(u(4, 4) * 3)), "c": ("f32", u(2, 4, 8))},
         ["x", "s"], lambda p: jnp.sum(rope_neox(rms_norm(p["x"], p["s"], 1e-6), p["cos"], p["sin"]) * p["c"]))

    qkv = {"q": ("f32", u(1, 2, 5, 8)), "k": ("f32", u(1, 2, 5, 8)), "v": ("f32", u(1, 2, 5, 8)),
           "c": ("f32", u(1, 2, 5, 8))}
    case("attention_causal", qkv, ["q", "k", "v"],
         lambda p: jnp.sum(attention(p["q"], p["k"], p["v"], causal(5, 5)) * p["c"]))
    pad = np.array([[1, 1, 1, 1, 0], [1, 1, 0, 0, 0]], bool)
    qkv2 = {"q": ("f32", u(2, 2, 5, 8)), "k": ("f32", u(2, 2, 5, 8)), "v": ("f32", u(2, 2, 5, 8)),
            "mask": ("bool", pad[:, None, None, :]), "c": ("f32", u(2, 2, 5, 8))}
    case("attention_padding", qkv2, ["q", "k", "v"],
         lambda p: jnp.sum(attention(p["q"], p["k"], p["v"], p["mask"]) * p["c"]))

    def conv_pool(p):
        y = lax.conv_general_dilated(p["x"], p["w"], (1, 1), [(1, 1), (1, 1)])
        y = jax.nn.relu(y + p["b"][None, :, None, None])
        y = lax.reduce_window(y, -jnp.inf, lax.max, (1, 1, 2, 2), (1, 1, 2, 2), "VALID")
        return jnp.sum(y * p["c"])
    case("conv_relu_max_pool",
         {"x": ("f32", u(2, 3, 6, 6)), "w": ("f32", u(4, 3, 3, 3)), "b": ("f32", u(4)),
          "c": ("f32", u(2, 4, 3, 3))}, ["x", "w", "b"], conv_pool)

    def conv_avg(p):
        y = lax.conv_general_dilated(p["x"], p["w"], (2, 2), [(1, 0), (0, 1)], rhs_dilation=(1, 2),
                                     feature_group_count=2)
        y = lax.reduce_window(y, 0.0, lax.add, (1, 1, 2, 2), (1, 1, 1, 1), "VALID") / 4
        return jnp.sum(jnp.tanh(y) * p["c"])
    case("conv_groups_avg_pool",
         {"x": ("f32", u(1, 4, 7, 7)), "w": ("f32", u(6, 2, 2, 2)), "c": ("f32", u(1, 6, 3, 2))},
         ["x", "w"], conv_avg)

    ids = np.array([[1, 3, 3, 0, 9], [2, 2, 7, 1, 3]])
    case("embedding_gather",
         {"table": ("f32", u(10, 6)), "ids": ("i32", ids), "w": ("f32", u(6, 4))}, ["table", "w"],
         lambda p: jnp.sum(jnp.tanh(jnp.take(p["table"], p["ids"], axis=0) @ p["w"]) ** 2))

    case("cumsum_pad_slice_concat",
         {"x": ("f32", u(3, 6))}, ["x"],
         lambda p: jnp.sum(jnp.sin(jnp.concatenate([
             lax.slice(jnp.cumsum(p["x"], 1), (0, 1), (3, 6), (1, 2)),
             lax.pad(p["x"], jnp.float32(0.5), [(1, -1, 0), (0, 0, 1)])[:, :3]], 1)) * 1.5))

    case("top_k_max_min",
         {"x": ("f32", u(3, 7))}, ["x"],
         lambda p: jnp.sum(lax.top_k(p["x"], 3)[0] ** 2) + jnp.sum(jnp.max(p["x"], 0))
         - jnp.sum(jnp.minimum(p["x"], 0.2)))

    case("elementwise_mix",
         {"x": ("f32", u(2, 5, lo=0.2, hi=2.0)), "y": ("f32", u(5, lo=0.5, hi=1.5))}, ["x", "y"],
         lambda p: jnp.sum(jnp.sqrt(p["x"]) / p["y"] + p["x"] ** p["y"]
                           + jax.nn.sigmoid(p["x"] * p["y"]) * jnp.log(p["x"])))

    case("dot_general_batch",
         {"a": ("f32", u(2, 3, 4)), "b": ("f32", u(4, 2, 5))}, ["a", "b"],
         lambda p: jnp.sum(jnp.tanh(lax.dot_general(p["a"], p["b"], (((2,), (0,)), ((0,), (1,)))))))

    # The BERT-style encoder layer (hidden 16, 2 heads, FFN 32) with a key padding mask.
    b, s, hd, ff = 2, 6, 16, 32
    enc = {"x": ("f32", u(b, s, hd)),
           "mask": ("bool", np.array([[1] * 6, [1] * 4 + [0] * 2], bool))}
    for n, (i, o) in {"attention.q": (hd, hd), "attention.k": (hd, hd), "attention.v": (hd, hd),
                      "attention.out": (hd, hd), "ffn.in": (hd, ff), "ffn.out": (ff, hd)}.items():
        enc[n + ".weight"] = ("f32", u(i, o) * 0.3)
        enc[n + ".bias"] = ("f32", u(o) * 0.1)
    for n in ("attention.norm", "ffn.norm"):
        enc[n + ".weight"] = ("f32", 1 + u(hd) * 0.2)
        enc[n + ".bias"] = ("f32", u(hd) * 0.1)
    wrt = [k for k in enc if k != "mask"]
    case("encoder_layer", enc, wrt,
         lambda p: jnp.mean(encoder_layer(p, p["x"], p["mask"], 2) ** 2))

    write_cases(os.path.join(HERE, "grad_ref.json"), CASES)


if __name__ == "__main__":
    main()

"""Parity of every op of ops.def: rlx's reference evaluator and its CPU backend (full compile
pipeline) against jax.numpy / jax.lax / jax.nn, on seeded random inputs.

Each entry of CASES is (op, case id, build, reference, args, options). Shapes are drawn by a
seeded generator (SHAPES) and include broadcasting, size-0 dims, negative axes, f16/bf16 and
NaN/inf inputs. Tolerances and the low-precision reference policy are in harness.py.
test_every_op_is_covered fails when an op is neither covered nor in EXCLUDED.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

import rlx
from harness import FALLBACKS, FLOATS, Arg, run_case

SHAPES = np.random.default_rng(20240601)


def rshape(rank: int, lo: int = 1, hi: int = 5) -> tuple:
    """A seeded random shape of `rank` with dims in [lo, hi]."""
    return tuple(int(d) for d in SHAPES.integers(lo, hi + 1, rank))


CASES: list = []


def case(op, cid, build, ref, args, **opts):
    CASES.append(pytest.param(op, build, ref, args, opts, id=f"{op}-{cid}",
                              marks=opts.pop("marks", ())))


# Ops with no case here, each with the reason. Leaves `input` and `param` appear in every case
# (run_case feeds inputs and, where asked, params), so they are covered implicitly.
EXCLUDED = {
    "input": "a leaf of every case's graph",
    "param": "a leaf of every case's graph (see the params= cases)",
}

# ----------------------------------------------------------------------------- elementwise unary

UNARY_FLOAT = {
    "exp": jnp.exp, "expm1": jnp.expm1, "log": jnp.log, "log1p": jnp.log1p, "sqrt": jnp.sqrt,
    "rsqrt": lax.rsqrt, "sin": jnp.sin, "cos": jnp.cos, "tan": jnp.tan, "tanh": jnp.tanh,
    "atan": jnp.arctan, "logistic": jax.nn.sigmoid, "erf": lax.erf, "floor": jnp.floor,
    "ceil": jnp.ceil, "round": jnp.round,
    "gelu": lambda x: jax.nn.gelu(x, approximate=False),
    "gelu_tanh": lambda x: jax.nn.gelu(x, approximate=True),
    "silu": jax.nn.silu, "softplus": jax.nn.softplus, "relu": jax.nn.relu,
}
UNARY_ANY = {"neg": jnp.negative, "abs": jnp.abs, "sign": jnp.sign}

for name, fn in {**UNARY_FLOAT, **UNARY_ANY}.items():
    for dt in FLOATS:
        for kind in ("normal", "special"):
            shape = rshape(int(SHAPES.integers(0, 4)))
            case(name, f"{dt}-{kind}-{shape}", lambda g, x, n=name: getattr(g, n)(x), fn,
                 [Arg(shape, dt, kind)])
    case(name, "f32-size0", lambda g, x, n=name: getattr(g, n)(x), fn, [Arg((2, 0, 3))])

for name, fn in {**UNARY_ANY, "relu": jax.nn.relu}.items():
    for dt in ("i8", "i32", "i64", "u8"):
        case(name, f"{dt}", lambda g, x, n=name: getattr(g, n)(x), fn,
             [Arg(rshape(2), dt, "intfull")])

# stop_gradient is the identity in the forward pass (any dtype).
for dt, kind in (("f32", "special"), ("i32", "intfull"), ("bool", "bool"), ("bf16", "normal")):
    case("stop_gradient", dt, lambda g, x: g.stop_gradient(x), lax.stop_gradient,
         [Arg(rshape(2), dt, kind)], upcast=False)

for dt in ("f32", "bf16"):
    case("leaky_relu", f"{dt}-alpha", lambda g, x: g.leaky_relu(x, 0.2),
         lambda x: jax.nn.leaky_relu(x, 0.2), [Arg(rshape(2), dt, "special")])
case("leaky_relu", "default", lambda g, x: g.leaky_relu(x), jax.nn.leaky_relu, [Arg((3, 4))])

for dt in ("bool", "i32", "u8", "i8"):
    case("not", dt, lambda g, x: g.logical_not(x),
         jnp.logical_not if dt == "bool" else jnp.invert,
         [Arg(rshape(2), dt, "bool" if dt == "bool" else "intfull")])

# convert: float -> int truncates and saturates with NaN -> 0 (docs/ir.md, XLA's CPU/GPU
# semantics); the reference spells that out in NumPy so it does not depend on how a JAX
# version lowers out-of-range conversions.


def sat_convert(x, dt):
    x = np.asarray(x, np.float64)
    info = np.iinfo(np.dtype(dt))
    y = np.where(np.isnan(x), 0, np.clip(np.trunc(np.nan_to_num(x, posinf=info.max, neginf=info.min)), info.min, info.max))
    return y.astype(dt)


CONVERTS = [
    ("f32", "i32", "special", lambda x: sat_convert(x, np.int32)),
    ("f64", "i8", "special", lambda x: sat_convert(x, np.int8)),
    ("f32", "u8", "special", lambda x: sat_convert(x, np.uint8)),
    ("f32", "f16", "special", lambda x: x.astype(jnp.float16)),
    ("f32", "bf16", "special", lambda x: x.astype(jnp.bfloat16)),
    ("f64", "f32", "special", lambda x: x.astype(jnp.float32)),
    ("bf16", "f16", "normal", lambda x: x.astype(jnp.float16)),
    ("i32", "i8", "intfull", lambda x: x.astype(jnp.int8)),
    ("i64", "f32", "intfull", lambda x: x.astype(jnp.float32)),
    ("f32", "bool", "special", lambda x: x != 0),
    ("bool", "f32", "bool", lambda x: x.astype(jnp.float32)),
    ("u8", "i32", "intfull", lambda x: x.astype(jnp.int32)),
]
for src, dst, kind, fn in CONVERTS:
    case("convert", f"{src}-{dst}", lambda g, x, d=dst: g.convert(x, d), fn,
         [Arg(rshape(2), src, kind)], upcast=False)

# ----------------------------------------------------------------------------- binary

BIN_SHAPES = [((3, 4), (3, 4)), ((2, 1, 4), (3, 1)), ((), (2, 3)), ((0, 3), (1, 3)),
              ((4, 1), (-1,))]


def bshapes(i):
    a, b = BIN_SHAPES[i % len(BIN_SHAPES)]
    if b == (-1,):
        b = (int(SHAPES.integers(1, 5)),)
    return a, b


ARITH = {"add": jnp.add, "sub": jnp.subtract, "mul": jnp.multiply, "div": jnp.divide,
         "max": lax.max, "min": lax.min, "rem": lax.rem, "pow": jnp.power}
LOGIC = {"logical_and": ("and", jnp.logical_and, jnp.bitwise_and),
         "logical_or": ("or", jnp.logical_or, jnp.bitwise_or),
         "logical_xor": ("xor", jnp.logical_xor, jnp.bitwise_xor)}
CMP = {"eq": jnp.equal, "ne": jnp.not_equal, "lt": jnp.less, "le": jnp.less_equal,
       "gt": jnp.greater, "ge": jnp.greater_equal}


def bcast(f):
    """numpy broadcasting for lax functions that need equal shapes."""
    def g(x, y):
        s = jnp.broadcast_shapes(x.shape, y.shape)
        return f(jnp.broadcast_to(x, s), jnp.broadcast_to(y, s))
    return g


def int_pow(x, y):
    """rlx's pinned integer pow (ops.def): by squaring with wrap-around; a negative exponent
    gives 0 unless |x| = 1. Computed exactly in Python integers."""
    x, y = np.broadcast_arrays(np.asarray(x), np.asarray(y))
    bits = 8 * x.dtype.itemsize
    signed = np.iinfo(x.dtype).min < 0
    out = []
    for b, e in zip(x.reshape(-1).tolist(), y.reshape(-1).tolist()):
        if e < 0:
            v = 1 if b == 1 else ((-1 if e % 2 else 1) if b == -1 else 0)
        else:
            v = pow(b % (1 << bits), e, 1 << bits)
        v %= 1 << bits
        out.append(v - (1 << bits) if signed and v >= 1 << (bits - 1) else v)
    return np.array(out, x.dtype).reshape(x.shape)


i = 0
for name, fn in ARITH.items():
    ref = bcast(fn) if name in ("max", "min", "rem") else fn
    for dt in FLOATS:
        for kind in ("normal", "special"):
            a, b = bshapes(i)
            i += 1
            kb = "pos" if name == "pow" and kind == "normal" else kind
            case(name, f"{dt}-{kind}-{a}x{b}", lambda g, x, y, n=name: getattr(g, n)(x, y), ref,
                 [Arg(a, dt, kind), Arg(b, dt, kb)])
    for dt in ("i32", "i64", "i8", "u8"):
        a, b = bshapes(i)
        i += 1
        iref = int_pow if name == "pow" else (bcast(lax.div) if name == "div" else ref)
        case(name, f"{dt}-{a}x{b}", lambda g, x, y, n=name: getattr(g, n)(x, y), iref,
             [Arg(a, dt, "intfull"), Arg(b, dt, "int")], upcast=False)

for name, (mn, lfn, bfn) in LOGIC.items():
    for dt in ("bool", "i32", "u8"):
        a, b = bshapes(i)
        i += 1
        kind = "bool" if dt == "bool" else "intfull"
        case(mn, f"{dt}-{a}x{b}", lambda g, x, y, n=name: getattr(g, n)(x, y),
             lfn if dt == "bool" else bfn, [Arg(a, dt, kind), Arg(b, dt, kind)])

for name, fn in CMP.items():
    for dt, kind in (("f32", "special"), ("i32", "int"), ("bool", "bool"), ("f16", "special"),
                     ("bf16", "normal")):
        a, b = bshapes(i)
        i += 1
        case(name, f"{dt}-{a}x{b}", lambda g, x, y, n=name: getattr(g, n)(x, y), fn,
             [Arg(a, dt, kind), Arg(b, dt, kind)], upcast=False)

for dt in ("f32", "i32", "bf16"):
    case("select", dt, lambda g, p, x, y: g.select(p, x, y), jnp.where,
         [Arg((2, 1, 4), "bool", "bool"), Arg((3, 4), dt, "special" if dt == "f32" else "int" if dt == "i32" else "normal"), Arg((), dt, "int" if dt == "i32" else "normal")])
for dt in ("f32", "i32", "f16"):
    kind = "int" if dt == "i32" else "special"
    case("clamp", dt, lambda g, lo, x, hi: g.clamp(lo, x, hi),
         lambda lo, x, hi: jnp.minimum(jnp.maximum(x, lo), hi),
         [Arg((), dt, "int" if dt == "i32" else "normal", value=-1), Arg((3, 5), dt, kind),
          Arg((1, 5), dt, "int" if dt == "i32" else "pos")])

# Python operators and weak scalars go through the same builders.
case("add", "operator-scalar", lambda g, x, y: (x + 1.5) * y - 2 / x, lambda x, y: (x + 1.5) * y - 2 / x,
     [Arg((2, 3)), Arg((3,))])
case("pow", "operator", lambda g, x: x ** 2, lambda x: x ** 2, [Arg((4,))])

# ----------------------------------------------------------------------------- linalg

DOTS = [  # lhs, rhs, (lb, rb, lc, rc)
    ((3, 4), (4, 5), ([], [], [1], [0])),
    ((2, 3, 4), (2, 4, 5), ([0], [0], [2], [1])),
    ((4, 3), (5, 4), ([], [], [0], [1])),
    ((2, 0, 4), (2, 4, 3), ([0], [0], [2], [1])),
]
for dt in ("f32", "f64", "f16", "bf16", "i32"):
    for k, (ls, rs, dims) in enumerate(DOTS):
        case("dot_general", f"{dt}-{k}", lambda g, x, y, d=dims: g.dot_general(x, y, *d),
             lambda x, y, d=dims: lax.dot_general(x, y, ((d[2], d[3]), (d[0], d[1]))),
             [Arg(ls, dt, "int" if dt == "i32" else "normal"), Arg(rs, dt, "int" if dt == "i32" else "normal")])
case("dot_general", "bf16-preferred-f32",
     lambda g, x, y: g.dot_general(x, y, [], [], [1], [0], preferred="f32"),
     lambda x, y: jnp.dot(x, y), [Arg((3, 8), "bf16"), Arg((8, 2), "bf16")])

MATMULS = [((3, 4), (4, 5)), ((4,), (4, 3)), ((3, 4), (4,)), ((2, 1, 3, 4), (5, 4, 2)),
           ((4,), (4,)), ((2, 3, 0), (0, 2))]
for dt in ("f32", "f16", "bf16", "i32"):
    for k, (ls, rs) in enumerate(MATMULS):
        case("matmul", f"{dt}-{k}", lambda g, x, y: x @ y, jnp.matmul,
             [Arg(ls, dt, "int" if dt == "i32" else "normal"), Arg(rs, dt, "int" if dt == "i32" else "normal")])

# ----------------------------------------------------------------------------- reductions


def red_ref(fn, ident=None):
    def make_ref(axes, keepdims):
        def f(x):
            kw = {}
            if ident is not None:
                kw["initial"] = ident(x.dtype)
            if fn in (jnp.sum, jnp.prod):
                kw["dtype"] = x.dtype
            return fn(x, axis=tuple(axes), keepdims=keepdims, **kw)
        return f
    return make_ref


def lowest(dt):
    return -np.inf if jnp.issubdtype(dt, jnp.floating) else jnp.iinfo(dt).min


def highest(dt):
    return np.inf if jnp.issubdtype(dt, jnp.floating) else jnp.iinfo(dt).max


REDUCE = {"reduce_sum": red_ref(jnp.sum), "reduce_prod": red_ref(jnp.prod),
          "reduce_max": red_ref(jnp.max, lowest), "reduce_min": red_ref(jnp.min, highest),
          "reduce_mean": red_ref(jnp.mean)}
RED_CFG = [((3, 4, 5), [1], False), ((3, 4, 5), [-1, 0], True), ((2, 0, 3), [1], False),
           ((4, 6), [0, 1], False), ((5,), [0], True)]
for name, mk in REDUCE.items():
    for dt in ("f32", "f64", "f16", "bf16", "i32", "i8"):
        if name == "reduce_mean" and dt not in FLOATS:
            continue
        for k, (shape, axes, keep) in enumerate(RED_CFG):
            kind = ("special" if k == 0 else "unit") if dt in FLOATS else "int"
            case(name, f"{dt}-{k}", lambda g, x, n=name, a=axes, kd=keep: getattr(g, n)(x, a, kd),
                 mk(axes, keep), [Arg(shape, dt, kind)])

for name, fn in (("argmax", jnp.argmax), ("argmin", jnp.argmin)):
    for dt, kind in (("f32", "special"), ("i32", "int"), ("bf16", "normal"), ("f64", "normal")):
        for axis, keep in ((1, False), (-1, True)):
            case(name, f"{dt}-{axis}-{keep}",
                 lambda g, x, n=name, a=axis, kd=keep: getattr(g, n)(x, a, kd),
                 lambda x, f=fn, a=axis, kd=keep: f(x, axis=a, keepdims=kd).astype(jnp.int32),
                 [Arg((3, 5, 4), dt, kind)], upcast=False)
    case(name, "i64-index", lambda g, x, n=name: getattr(g, n)(x, 0, index_dtype="i64"),
         lambda x, f=fn: f(x, axis=0).astype(jnp.int64), [Arg((6, 2), "f32")])

for dt in ("f32", "i32", "bf16", "f16"):
    for axis, excl, rev in ((0, False, False), (-1, True, False), (1, False, True), (1, True, True)):
        def cref(x, a=axis, e=excl, r=rev):
            c = lax.cumsum(x, axis=a % x.ndim, reverse=r)
            return c - x if e else c
        case("cumsum", f"{dt}-{axis}-{excl}-{rev}",
             lambda g, x, a=axis, e=excl, r=rev: g.cumsum(x, a, e, r), cref,
             [Arg((3, 4, 2), dt, "int" if dt == "i32" else "unit")])

# ----------------------------------------------------------------------------- shape ops

for dt in ("f32", "i64", "bool", "bf16"):
    kind = {"bool": "bool", "i64": "intfull"}.get(dt, "special")
    x = Arg((2, 3, 4), dt, kind)
    case("reshape", dt, lambda g, v: g.reshape(v, [4, -1]), lambda v: v.reshape(4, -1), [x])
    case("transpose", dt, lambda g, v: g.transpose(v, [2, 0, 1]),
         lambda v: jnp.transpose(v, (2, 0, 1)), [x])
    case("broadcast_in_dim", dt, lambda g, v: g.broadcast_in_dim(v, [2, 5, 3, 4], [0, 2, 3]),
         lambda v: lax.broadcast_in_dim(v, (2, 5, 3, 4), (0, 2, 3)), [x])
    case("expand", dt, lambda g, v: g.expand(v, [3, 1, 1, 4]),
         lambda v: jnp.broadcast_to(v, np.broadcast_shapes(v.shape, (3, 1, 1, 4))), [x])
    case("slice", dt, lambda g, v: g.slice(v, [0, 1, 0], [2, 3, 4], [1, 1, 2]),
         lambda v: lax.slice(v, (0, 1, 0), (2, 3, 4), (1, 1, 2)), [x])
    case("concatenate", dt, lambda g, a, b: g.concatenate([a, b, a], -2),
         lambda a, b: jnp.concatenate([a, b, a], axis=-2), [x, Arg((2, 1, 4), dt, kind)])
    case("reverse", dt, lambda g, v: g.reverse(v, [0, -1]), lambda v: lax.rev(v, (0, 2)), [x])
    case("squeeze", dt, lambda g, v: g.squeeze(v, [1, -1]), lambda v: lax.squeeze(v, (1, 3)),
         [Arg((2, 1, 3, 1), dt, kind)])
    case("expand_dims", dt, lambda g, v: g.expand_dims(v, [0, -1]),
         lambda v: jnp.expand_dims(v, (0, -1)), [x])
case("concatenate", "size0", lambda g, a, b: g.concatenate([a, b], 0),
     lambda a, b: jnp.concatenate([a, b]), [Arg((0, 3)), Arg((2, 3))])
case("slice", "size0", lambda g, v: g.slice(v, [1, 0], [1, 3]), lambda v: v[1:1, 0:3], [Arg((3, 3))])

for dt in ("f32", "i32", "f16"):
    case("pad", dt, lambda g, v, p: g.pad(v, p, [1, -1], [2, 0], [0, 1]),
         lambda v, p: lax.pad(v, p, [(1, 2, 0), (-1, 0, 1)]),
         [Arg((3, 4), dt, "int" if dt == "i32" else "normal"), Arg((), dt, "int" if dt == "i32" else "normal")])

# gather / take_along_axis clamp indices into [0, n-1] (StableHLO): a negative index clamps to
# 0, where jnp.take would wrap it. rlx documents the clamp (docs/ir.md), so the reference
# clips explicitly.
for dt in ("f32", "i64", "bf16"):
    for axis in (0, 1, -1):
        case("gather", f"{dt}-{axis}", lambda g, x, i, a=axis: g.gather(x, i, a),
             lambda x, i, a=axis: jnp.take(x, jnp.clip(i, 0, x.shape[a] - 1), axis=a),
             [Arg((4, 3, 5), dt, "normal" if dt != "i64" else "intfull"), Arg((2, 3), "i32", "index:3")])
        case("take_along_axis", f"{dt}-{axis}",
             lambda g, x, i, a=axis: g.take_along_axis(x, i, a),
             lambda x, i, a=axis: jnp.take_along_axis(x, jnp.clip(i, 0, x.shape[a] - 1), axis=a),
             [Arg((4, 3, 5), dt, "normal" if dt != "i64" else "intfull"),
              Arg((4, 1, 5) if axis == 1 else ((2, 3, 5) if axis == 0 else (4, 3, 2)), "i64", "index:3")])


def scatter_ref(x, i, u, axis):
    # rlx drops out-of-range indices; negative ones count as out of range (jnp would wrap
    # them), so they are moved past the end where mode="drop" drops them.
    n = x.shape[axis]
    i = jnp.where((i >= 0) & (i < n), i, n)
    sl = [slice(None)] * x.ndim
    sl[axis] = i
    return x.at[tuple(sl)].add(u, mode="drop")


for dt in ("f32", "i32", "f64"):
    for axis in (0, 1):
        ushape = (3, 4) if axis == 0 else (5, 3)
        case("scatter_add", f"{dt}-{axis}", lambda g, x, i, u, a=axis: g.scatter_add(x, i, u, a),
             lambda x, i, u, a=axis: scatter_ref(x, i, u, a),
             [Arg((5, 4), dt, "int" if dt == "i32" else "normal"), Arg((3,), "i32", "index:4"),
              Arg(ushape, dt, "int" if dt == "i32" else "normal")])

# Python indexing lowers to slice / reverse / reshape / gather.
case("slice", "indexing", lambda g, v: v[1:3, ::2, None, -1], lambda v: v[1:3, ::2, None, -1],
     [Arg((4, 5, 3))])
case("reverse", "indexing-negative-step", lambda g, v: v[::-2, 1], lambda v: v[::-2, 1],
     [Arg((5, 3))])
case("gather", "indexing-tensor", lambda g, v, i: v[..., i], lambda v, i: v[..., i],
     [Arg((2, 6)), Arg((3,), "i32", "label:6")])

# ----------------------------------------------------------------------------- leaves

for dt in ("f32", "i32", "bf16", "bool"):
    value = np.arange(6).reshape(2, 3) % 3
    arr = np.asarray(value, dtype=np.dtype({"f32": "float32", "i32": "int32", "bool": "bool"}.get(dt, "float32")))
    if dt == "bf16":
        import ml_dtypes
        arr = arr.astype(ml_dtypes.bfloat16)
    case("constant", dt, lambda g, x, c=arr: g.constant(c) + x if c.dtype != np.bool_ else g.logical_or(g.constant(c), x),
         lambda x, c=arr: (jnp.asarray(c).astype(x.dtype) + x) if c.dtype != np.bool_ else (jnp.asarray(c) | x),
         [Arg((2, 3), dt, "bool" if dt == "bool" else "int")], op_check="constant")
for dt in ("i32", "f32", "i64"):
    case("iota", dt, lambda g, x, d=dt: g.iota([3, 4], 1, d) + x,
         lambda x, d=dt: lax.broadcasted_iota(x.dtype, (3, 4), 1) + x,
         [Arg((3, 4), dt, "int")], op_check="iota")
case("param", "matmul", lambda g, x, w: x @ w, jnp.matmul, [Arg((2, 3)), Arg((3, 4))], params=(1,))

# ----------------------------------------------------------------------------- nn


def layer_norm_ref(axis, eps):
    def f(x, s, b):
        ax = tuple(range(axis % x.ndim, x.ndim))
        m = jnp.mean(x, axis=ax, keepdims=True)
        v = jnp.mean(jnp.square(x - m), axis=ax, keepdims=True)
        return (x - m) * lax.rsqrt(v + eps) * s + b
    return f


def rms_norm_ref(axis, eps):
    def f(x, s):
        ax = tuple(range(axis % x.ndim, x.ndim))
        return x * lax.rsqrt(jnp.mean(jnp.square(x), axis=ax, keepdims=True) + eps) * s
    return f


for dt in ("f32", "f64", "f16", "bf16"):
    for axis in (-1, 0, 1):
        case("softmax", f"{dt}-{axis}", lambda g, x, a=axis: g.softmax(x, a),
             lambda x, a=axis: jax.nn.softmax(x, axis=a), [Arg((3, 4, 5), dt)])
        case("log_softmax", f"{dt}-{axis}", lambda g, x, a=axis: g.log_softmax(x, a),
             lambda x, a=axis: jax.nn.log_softmax(x, axis=a), [Arg((3, 4, 5), dt)])
    case("layer_norm", f"{dt}", lambda g, x, s, b: g.layer_norm(x, s, b),
         layer_norm_ref(-1, 1e-5), [Arg((2, 3, 8), dt), Arg((8,), dt), Arg((8,), dt)])
    case("layer_norm", f"{dt}-axis1", lambda g, x, s, b: g.layer_norm(x, s, b, 1, 1e-3),
         layer_norm_ref(1, 1e-3), [Arg((2, 3, 4), dt), Arg((3, 4), dt), Arg((3, 4), dt)])
    case("rms_norm", f"{dt}", lambda g, x, s: g.rms_norm(x, s), rms_norm_ref(-1, 1e-6),
         [Arg((4, 16), dt), Arg((16,), dt)])
# A row that is entirely -inf is NaN (jax.nn.softmax agrees); large finite values do not
# overflow because both subtract the max.
case("softmax", "inf-rows", lambda g, x: g.softmax(x), lambda x: jax.nn.softmax(x),
     [Arg((3, 3), value=[[-np.inf] * 3, [1e30, 0, -1e30], [np.inf, 0, 1]])])


def attention_ref(mask, scale=None, window=0):
    """softmax(q k^T * scale + mask) v with rlx's masks (docs/ir.md): causal / sliding aligned
    so the last query sees the last key; masked positions contribute exactly 0; a fully masked
    row gives 0 (jax.nn.dot_product_attention would give NaN there); GQA head h reads kv head
    h // (Hq / Hkv)."""
    def f(q, k, v, m=None):
        hq, hkv = q.shape[1], k.shape[1]
        k = jnp.repeat(k, hq // hkv, axis=1)
        v = jnp.repeat(v, hq // hkv, axis=1)
        sc = scale if scale is not None else 1.0 / math.sqrt(q.shape[-1])
        s = jnp.einsum("bhqd,bhkd->bhqk", q, k) * sc
        sq, sk = q.shape[2], k.shape[2]
        qi = jnp.arange(sq)[:, None] + (sk - sq)
        kj = jnp.arange(sk)[None, :]
        allowed = jnp.ones(s.shape, bool)
        if mask == "causal":
            allowed = allowed & (kj <= qi)
        elif mask == "sliding_window":
            allowed = allowed & (kj <= qi) & (kj > qi - window)
        elif mask == "bool":
            allowed = allowed & m
        elif mask == "bias":
            s = s + m
            allowed = allowed & (s != -jnp.inf)
        s = jnp.where(allowed, s, -jnp.inf)
        mx = jnp.max(s, axis=-1, keepdims=True)
        mx = jnp.where(jnp.isfinite(mx), mx, 0)
        p = jnp.where(allowed, jnp.exp(s - mx), 0)
        den = jnp.sum(p, axis=-1, keepdims=True)
        return jnp.einsum("bhqk,bhkd->bhqd", p / jnp.where(den == 0, 1, den), v)
    return f


ATT = [("none", None, 0, None), ("causal", None, 0, None), ("sliding_window", 0.3, 2, None),
       ("bool", None, 0, (1, 1, 3, 5)), ("bias", None, 0, (2, 1, 1, 5))]
for dt in ("f32", "f16", "bf16"):
    for mask, scale, window, mshape in ATT:
        args = [Arg((2, 4, 3, 8), dt), Arg((2, 2, 5, 8), dt), Arg((2, 2, 5, 6), dt)]
        if mshape:
            args.append(Arg(mshape, "bool" if mask == "bool" else dt, "bool" if mask == "bool" else "normal"))
        case("attention", f"{dt}-{mask}",
             lambda g, q, k, v, *m, mk=mask, sc=scale, w=window: g.attention(
                 q, k, v, mk, sc, w, m[0] if m else None),
             lambda q, k, v, *m, mk=mask, sc=scale, w=window: attention_ref(mk, sc, w)(q, k, v, *m),
             args)


def rope_ref(layout):
    def f(x, c, s):
        half = c.shape[-1]
        r = 2 * half
        rot, rest = x[..., :r], x[..., r:]
        if layout == "neox":
            x1, x2 = rot[..., :half], rot[..., half:]
            out = jnp.concatenate([x1 * c - x2 * s, x2 * c + x1 * s], axis=-1)
        else:
            x1, x2 = rot[..., 0::2], rot[..., 1::2]
            out = jnp.stack([x1 * c - x2 * s, x2 * c + x1 * s], axis=-1).reshape(rot.shape)
        return jnp.concatenate([out, rest], axis=-1)
    return f


for dt in ("f32", "bf16"):
    for layout in ("neox", "gptj"):
        case("rope", f"{dt}-{layout}", lambda g, x, c, s, lo=layout: g.rope(x, c, s, lo),
             rope_ref(layout), [Arg((2, 5, 8), dt), Arg((5, 3), dt, "unit"), Arg((5, 3), dt, "unit")])


def conv_ref(strides, lo, hi, dil, groups):
    def f(x, w):
        dn = ("NCH", "OIH", "NCH") if x.ndim == 3 else ("NCHW", "OIHW", "NCHW")
        return lax.conv_general_dilated(x, w, strides, list(zip(lo, hi)), rhs_dilation=dil,
                                        dimension_numbers=dn, feature_group_count=groups)
    return f


CONVS = [((1, 2, 5, 5), (3, 2, 3, 3), [1, 1], [0, 0], [0, 0], [1, 1], 1),
         ((2, 4, 6, 5), (4, 2, 3, 2), [2, 1], [1, 0], [1, 2], [1, 1], 2),
         ((1, 1, 7, 7), (2, 1, 3, 3), [1, 2], [2, 0], [0, 1], [2, 2], 1),
         ((2, 3, 9), (4, 3, 3), [2], [1], [1], [1], 1)]
for dt in ("f32", "f16", "bf16"):
    for k, (xs, ws, st, lo, hi, dil, gr) in enumerate(CONVS):
        case("conv", f"{dt}-{k}",
             lambda g, x, w, a=(st, lo, hi, dil, gr): g.conv(x, w, *a),
             conv_ref(st, lo, hi, dil, gr), [Arg(xs, dt), Arg(ws, dt)])


def pool_ref(kind, window, strides, lo, hi, count_include_pad=True):
    def f(x):
        win = (1, 1) + tuple(window)
        st = (1, 1) + tuple(strides)
        pad = [(0, 0), (0, 0)] + list(zip(lo, hi))
        if kind == "max":
            return lax.reduce_window(x, -jnp.inf, lax.max, win, st, pad)
        tot = lax.reduce_window(x, 0.0, lax.add, win, st, pad)
        if count_include_pad:
            return tot / float(np.prod(window))
        cnt = lax.reduce_window(jnp.ones(x.shape, x.dtype), 0.0, lax.add, win, st, pad)
        return tot / cnt
    return f


POOLS = [((1, 2, 5, 5), [2, 2], [2, 2], [0, 0], [1, 1]),
         ((2, 1, 6, 4), [3, 2], [1, 2], [1, 0], [1, 1]),
         ((2, 3, 7), [3], [2], [1], [1])]
for dt in ("f32", "f16", "bf16"):
    for k, (xs, win, st, lo, hi) in enumerate(POOLS):
        case("max_pool", f"{dt}-{k}", lambda g, x, a=(win, st, lo, hi): g.max_pool(x, *a),
             pool_ref("max", win, st, lo, hi), [Arg(xs, dt, "special" if k == 0 and dt == "f32" else "normal")])
        for cip in (True, False):
            case("avg_pool", f"{dt}-{k}-{cip}",
                 lambda g, x, a=(win, st, lo, hi), c=cip: g.avg_pool(x, *a, count_include_pad=c),
                 pool_ref("avg", win, st, lo, hi, cip), [Arg(xs, dt)])

for dt, kind in (("f32", "normal"), ("i32", "int"), ("bf16", "normal"), ("f64", "normal")):
    for k in (1, 2, 5):
        case("top_k", f"{dt}-{k}", lambda g, x, kk=k: g.top_k(x, kk),
             lambda x, kk=k: lax.top_k(x, kk), [Arg((3, 4, 5), dt, kind)], upcast=False)


def sce_ref(logits, labels):
    n = logits.shape[-1]
    lse = jax.nn.logsumexp(logits, axis=-1)
    idx = jnp.clip(labels.astype(jnp.int64), 0, n - 1)
    return lse - jnp.take_along_axis(logits, idx[..., None], axis=-1)[..., 0]


for dt in ("f32", "f64", "bf16"):
    case("softmax_cross_entropy", dt, lambda g, lg, lb: g.softmax_cross_entropy(lg, lb), sce_ref,
         [Arg((2, 3, 7), dt), Arg((2, 3), "i32", "index:7")])

# ----------------------------------------------------------------------------- fused forms

ACTS = {"none": lambda x: x, "relu": jax.nn.relu,
        "gelu": lambda x: jax.nn.gelu(x, approximate=False),
        "gelu_tanh": lambda x: jax.nn.gelu(x, approximate=True), "silu": jax.nn.silu}
for dt in ("f32", "bf16"):
    for act, fn in ACTS.items():
        case("fused_matmul_bias_act", f"{dt}-{act}",
             lambda g, x, w, b, a=act: g.fused_matmul_bias_act(x, w, b, a),
             lambda x, w, b, f=fn: f(jnp.matmul(x, w) + b),
             [Arg((2, 3, 8), dt), Arg((8, 6), dt), Arg((6,), dt)])
    case("fused_residual_layer_norm", dt,
         lambda g, x, r, s, b: g.fused_residual_layer_norm(x, r, s, b),
         lambda x, r, s, b: (layer_norm_ref(-1, 1e-5)(x + r, s, b), x + r),
         [Arg((3, 8), dt), Arg((3, 8), dt), Arg((8,), dt), Arg((8,), dt)])
    case("fused_residual_rms_norm", dt,
         lambda g, x, r, s: g.fused_residual_rms_norm(x, r, s),
         lambda x, r, s: (rms_norm_ref(-1, 1e-6)(x + r, s), x + r),
         [Arg((3, 8), dt), Arg((3, 8), dt), Arg((8,), dt)])


def region_body(dt):
    body = rlx.Graph("body")
    a = body.input("a", (3, 4), dt)
    b = body.input("b", (3, 4), dt)
    t = body.tanh(a * b) + body.exp(-abs(a))
    body.outputs(t, body.max(a, b))
    return body


for dt in ("f32", "f16"):
    case("elementwise_region", dt,
         lambda g, x, y, d=dt: tuple(g.elementwise_region([x, y], region_body(d))),
         lambda x, y: (jnp.tanh(x * y) + jnp.exp(-jnp.abs(x)), jnp.maximum(x, y)),
         [Arg((3, 4), dt, "special" if dt == "f32" else "normal"), Arg((3, 4), dt)])

# ----------------------------------------------------------------------------- tests

# Cases where rlx is known to disagree with the reference: op-case id -> reason. They run as
# xfail(strict=True), so a fix makes the suite fail until the entry is removed.
KNOWN_WRONG: dict = {}


@pytest.mark.parametrize("op,build,ref,args,opts", CASES)
def test_parity(request, op, build, ref, args, opts):
    cid = request.node.callspec.id
    if cid in KNOWN_WRONG:
        request.applymarker(pytest.mark.xfail(strict=True, reason=KNOWN_WRONG[cid]))
    opts = dict(opts)
    check_op = opts.pop("op_check", op)
    run_case(check_op, build, ref, args, cid, **opts)


def covered_ops() -> set:
    return {p.values[0] for p in CASES} | {p.values[4].get("op_check", p.values[0]) for p in CASES}


def test_every_op_is_covered():
    all_ops = {o["name"] for o in rlx.ops()}
    missing = all_ops - covered_ops() - set(EXCLUDED)
    assert not missing, f"ops with neither a parity case nor an EXCLUDED reason: {sorted(missing)}"
    stale = set(EXCLUDED) - all_ops
    assert not stale, f"EXCLUDED names ops that do not exist: {sorted(stale)}"


def test_coverage_table(capsys):
    """Prints ops x dtypes covered (the number the report quotes)."""
    pairs = set()
    for p in CASES:
        op, args = p.values[0], p.values[3]
        pairs.add((op, args[0].dtype))
    ops = {op for op, _ in pairs}
    with capsys.disabled():
        print(f"\nparity suite: {len(CASES)} cases, {len(ops)} ops, {len(pairs)} op x dtype pairs")
        if FALLBACKS:  # informational: these ran on the CPU backend's reference fallback
            by_op = {}
            for op, dt in sorted(FALLBACKS):
                by_op.setdefault(op, []).append(dt)
            print("cpu reference fallback (op: first-input dtypes): " +
                  "; ".join(f"{op}: {','.join(d)}" for op, d in by_op.items()))
    assert len(ops) >= len({o['name'] for o in rlx.ops()}) - len(EXCLUDED)

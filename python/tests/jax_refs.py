"""Independent references for every op of ops.def, in jax.numpy / jax.lax / jax.nn, and an
interpreter that runs an rlx graph with them node by node.

REFS maps an op mnemonic to ``fn(attrs, *operands) -> result or tuple of results``. Where JAX
does not implement rlx's pinned semantics (docs/ir.md, include/rlx/ir/ops.def) the reference
spells the pinned rule out in NumPy/JAX and the comment says so: integer pow with negative
exponents, float -> int conversion (truncate, saturate, NaN -> 0), f64 -> bf16 rounding once,
gather / take_along_axis index clamping, scatter_add dropping out-of-range indices, attention
masks, top_k's order.

``interpret(graph, feeds)`` evaluates an ``rlx.Graph`` with these references: every node's
result is rounded to its dtype, as rlx's evaluator rounds every node. For f16/bf16 operands
the reference computes in f32 and rounds once (see harness.py for why).
"""

from __future__ import annotations

import math

import gguf
import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
from jax import lax

jax.config.update("jax_enable_x64", True)  # f64 / i64 references keep their dtype
jax.config.update("jax_platforms", "cpu")

NP = {
    "f32": np.dtype(np.float32), "f64": np.dtype(np.float64), "f16": np.dtype(np.float16),
    "bf16": np.dtype(ml_dtypes.bfloat16), "i8": np.dtype(np.int8), "u8": np.dtype(np.uint8),
    "i32": np.dtype(np.int32), "i64": np.dtype(np.int64), "bool": np.dtype(np.bool_),
}
LOW = ("f16", "bf16")


def _is_int(x) -> bool:
    return np.issubdtype(np.asarray(x).dtype, np.integer)


def _is_float(x) -> bool:  # ml_dtypes' bfloat16 is not a numpy floating subtype
    return np.asarray(x).dtype in (NP["f16"], NP["bf16"], NP["f32"], NP["f64"])


def _bcast(f):
    """numpy broadcasting for lax functions that need equal shapes."""
    def g(x, y):
        s = jnp.broadcast_shapes(jnp.shape(x), jnp.shape(y))
        return f(jnp.broadcast_to(x, s), jnp.broadcast_to(y, s))
    return g


def _round_bf16_once(x):
    """f64 -> bf16 rounded once (ml_dtypes and jax go through f32 and round twice)."""
    x = np.asarray(x, np.float64)
    out = np.empty(x.shape, np.float64)
    for i, v in np.ndenumerate(x):
        v = float(v)
        if math.isnan(v) or math.isinf(v) or v == 0.0:
            out[i] = v
            continue
        _, e = math.frexp(abs(v))
        q = math.ldexp(1.0, max(e - 1, -126) - 7)
        r = round(abs(v) / q) * q
        out[i] = math.copysign(math.inf if r > float(ml_dtypes.finfo(ml_dtypes.bfloat16).max) else r, v)
    return out.astype(NP["bf16"])


def convert(attrs, x):
    """rlx convert: float -> int truncates and saturates, NaN -> 0; -> bool is x != 0; f64 ->
    bf16 rounds once; everything else as numpy's astype (integers wrap)."""
    to = attrs["dtype"]
    x = np.asarray(x)
    if to == "bool":
        return x != 0
    if _is_float(x) and np.issubdtype(NP[to], np.integer):
        info = np.iinfo(NP[to])
        v = np.trunc(np.asarray(x, np.float64))
        out = np.zeros(v.shape, NP[to])  # NaN -> 0
        # Compared as doubles: int64's max is not a double, 2^63 is the first value above it.
        out[v >= float(info.max) + 1] = info.max
        out[v <= float(info.min)] = info.min
        inside = (v > float(info.min)) & (v < float(info.max) + 1)
        out[inside] = v[inside].astype(NP[to])
        return out
    if to == "bf16" and x.dtype == np.float64:
        return _round_bf16_once(x)
    with np.errstate(over="ignore", invalid="ignore"):
        return x.astype(NP[to])


def int_pow(x, y):
    """rlx's integer pow (ops.def): by squaring with wrap-around; a negative exponent gives 0
    unless |x| = 1. Exact in Python integers."""
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


def _int_exact(f):
    """Integer contractions in int64 (then wrapped to the dtype by the caller's cast), the
    exact value modulo 2^bits that rlx's wrap-around semantics pin."""
    def g(*args):
        if _is_int(args[0]):
            return f(*[np.asarray(a).astype(np.int64) for a in args])
        return f(*args)
    return g


def dot_general(attrs, x, y):
    dims = ((tuple(attrs["lhs_contract"]), tuple(attrs["rhs_contract"])),
            (tuple(attrs["lhs_batch"]), tuple(attrs["rhs_batch"])))
    if _is_int(x):
        return lax.dot_general(jnp.asarray(x, jnp.int64), jnp.asarray(y, jnp.int64), dims)
    return lax.dot_general(x, y, dims)


def reduce_ref(fn, ident=None):
    def f(attrs, x):
        kw = {}
        if ident is not None:
            kw["initial"] = ident(jnp.asarray(x).dtype)
        if fn in (jnp.sum, jnp.prod):
            kw["dtype"] = jnp.asarray(x).dtype
        return fn(x, axis=tuple(attrs["axes"]), keepdims=attrs["keepdims"], **kw)
    return f


def _lowest(dt):
    return -np.inf if jnp.issubdtype(dt, jnp.floating) else jnp.iinfo(dt).min


def _highest(dt):
    return np.inf if jnp.issubdtype(dt, jnp.floating) else jnp.iinfo(dt).max


def arg_ref(fn):
    def f(attrs, x):
        return fn(x, axis=attrs["axis"], keepdims=attrs["keepdims"]).astype(NP[attrs["index_dtype"]])
    return f


def cumsum(attrs, x):
    """Inclusive or exclusive (the shifted inclusive sum, so inf never meets -inf by a
    subtraction) prefix sums, forwards or reversed."""
    x = jnp.asarray(x)
    axis = attrs["axis"] % x.ndim
    c = lax.cumsum(x, axis=axis, reverse=attrs["reverse"])
    if not attrs["exclusive"]:
        return c
    n = x.shape[axis]
    zero = jnp.zeros_like(lax.slice_in_dim(x, 0, min(1, n), axis=axis))
    if attrs["reverse"]:
        return jnp.concatenate([lax.slice_in_dim(c, 1, n, axis=axis), zero], axis=axis)
    return jnp.concatenate([zero, lax.slice_in_dim(c, 0, max(n - 1, 0), axis=axis)], axis=axis)


def top_k(attrs, x):
    """The k largest along the last axis, descending, ties by lower index (NumPy's stable
    lexsort; ~x reverses the integer order without overflow)."""
    x = np.asarray(x)
    k = attrs["k"]
    key = -x.astype(np.float64) if _is_float(x) else ~x
    idx = np.broadcast_to(np.arange(x.shape[-1]), x.shape)
    order = np.lexsort((idx, key), axis=-1)[..., :k]
    return np.take_along_axis(x, order, axis=-1), order.astype(np.int32)


def gather(attrs, x, i):
    n = np.shape(x)[attrs["axis"]]
    return jnp.take(x, jnp.clip(jnp.asarray(i, jnp.int64), 0, n - 1), axis=attrs["axis"])


def take_along_axis(attrs, x, i):
    a = attrs["axis"]
    n = np.shape(x)[a]
    i = jnp.clip(jnp.asarray(i, jnp.int64), 0, n - 1)
    # The dims other than `axis` broadcast; along `axis` each keeps its own extent.
    xs1, is1 = list(np.shape(x)), list(np.shape(i))
    xs1[a] = is1[a] = 1
    shape = list(np.broadcast_shapes(tuple(xs1), tuple(is1)))
    xs, is_ = list(shape), list(shape)
    xs[a], is_[a] = np.shape(x)[a], np.shape(i)[a]
    return jnp.take_along_axis(jnp.broadcast_to(x, xs), jnp.broadcast_to(i, is_), axis=a)


def scatter_add(attrs, x, i, u):
    """rlx drops out-of-range indices; negative ones count as out of range (jnp would wrap
    them), so they are moved past the end where mode="drop" drops them."""
    axis = attrs["axis"] % np.ndim(x)
    n = np.shape(x)[axis]
    i = jnp.asarray(i, jnp.int64)
    i = jnp.where((i >= 0) & (i < n), i, n)
    sl = [slice(None)] * np.ndim(x)
    sl[axis] = i
    return jnp.asarray(x).at[tuple(sl)].add(u, mode="drop")


def dynamic_slice(attrs, x, *starts):
    """The lax primitive, whose starts are clamped to [0, dim - size] as StableHLO's (and rlx's);
    the lax.dynamic_slice wrapper would first wrap negative starts around like numpy."""
    return lax.dynamic_slice_p.bind(jnp.asarray(x), *map(jnp.asarray, starts),
                                    slice_sizes=tuple(attrs["slice_sizes"]))


def dynamic_update_slice(attrs, x, u, *starts):
    """The lax primitive (clamped starts; see dynamic_slice)."""
    return lax.dynamic_update_slice_p.bind(jnp.asarray(x), jnp.asarray(u),
                                           *map(jnp.asarray, starts))


def rng_key(attrs):
    """jax.random.PRNGKey(seed)'s key data as i32 bit patterns; no seed attr: the compile seed,
    0 in every suite (the evaluator's and CompileOptions' default)."""
    seed = attrs.get("seed")
    seed = 0 if seed is None else seed % 2**64  # the attr holds the seed's 64 bits as int64
    return np.asarray(jax.random.key_data(jax.random.PRNGKey(np.uint64(seed)))).view(np.int32)


def threefry2x32(attrs, *words):
    """jax's own threefry2x32 primitive on the u32 words (broadcast first: lax needs equal ranks)."""
    from jax._src import prng
    w = np.broadcast_arrays(*[np.asarray(x, np.int32).view(np.uint32) for x in words])
    y0, y1 = prng.threefry2x32_p.bind(*map(jnp.asarray, w))
    return np.asarray(y0).view(np.int32), np.asarray(y1).view(np.int32)


def layer_norm(attrs, x, s, b):
    ax = tuple(range(attrs["axis"] % x.ndim, x.ndim))
    m = jnp.mean(x, axis=ax, keepdims=True)
    v = jnp.mean(jnp.square(x - m), axis=ax, keepdims=True)
    return (x - m) * lax.rsqrt(v + attrs["eps"]) * s + b


def rms_norm(attrs, x, s):
    ax = tuple(range(attrs["axis"] % x.ndim, x.ndim))
    return x * lax.rsqrt(jnp.mean(jnp.square(x), axis=ax, keepdims=True) + attrs["eps"]) * s


def attention(attrs, q, k, v, m=None):
    """softmax(q k^T * scale + mask) v with rlx's masks (docs/ir.md): causal / sliding aligned
    so the last query sees the last key; masked positions contribute exactly 0; a fully
    masked row gives 0 (jax.nn.dot_product_attention would give NaN there); GQA head h reads
    kv head h // (Hq / Hkv)."""
    mask, window = attrs["mask"], attrs["window"]
    hq, hkv = q.shape[1], k.shape[1]
    k = jnp.repeat(k, hq // hkv, axis=1)
    v = jnp.repeat(v, hq // hkv, axis=1)
    sc = attrs.get("scale", 1.0 / math.sqrt(q.shape[-1]))
    s = jnp.einsum("bhqd,bhkd->bhqk", q, k) * sc
    sq, sk = q.shape[2], k.shape[2]
    qi = jnp.arange(sq)[:, None] + (sk - sq)
    kj = jnp.arange(sk)[None, :]
    allowed = jnp.ones(s.shape, bool)
    if mask == "causal":
        allowed = allowed & (kj <= qi)
    elif mask == "sliding_window":
        allowed = allowed & (kj <= qi) & (kj > qi - window)
    elif mask == "causal_lengths":
        # Row b's query i sits at position lengths[b] - Sq + i (a KV cache with lengths[b] keys).
        pos = jnp.asarray(m).reshape(-1, 1, 1, 1) - sq + jnp.arange(sq)[:, None]
        allowed = allowed & (kj <= pos)
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


def packed_qkv_attention(attrs, qkv, m=None):
    """attention on the column blocks q | k | v of qkv [B,S,(Hq+2Hkv)D] as [B,heads,S,D],
    returned token-major [B,S,Hq D]."""
    hq = attrs["heads"]
    hkv = attrs.get("kv_heads", hq)
    b, s, w = qkv.shape
    d = w // (hq + 2 * hkv)
    x = jnp.asarray(qkv).reshape(b, s, hq + 2 * hkv, d).transpose(0, 2, 1, 3)
    a = attention(attrs, x[:, :hq], x[:, hq:hq + hkv], x[:, hq + hkv:], m)
    return a.transpose(0, 2, 1, 3).reshape(b, s, hq * d)


def rope(attrs, x, c, s):
    half = c.shape[-1]
    rot, rest = x[..., :2 * half], x[..., 2 * half:]
    if attrs["layout"] == "neox":
        x1, x2 = rot[..., :half], rot[..., half:]
        out = jnp.concatenate([x1 * c - x2 * s, x2 * c + x1 * s], axis=-1)
    else:
        x1, x2 = rot[..., 0::2], rot[..., 1::2]
        out = jnp.stack([x1 * c - x2 * s, x2 * c + x1 * s], axis=-1).reshape(rot.shape)
    return jnp.concatenate([out, rest], axis=-1)


def dequantize(attrs, w):
    """ggml block formats through gguf-py's numpy dequantizers (gguf.quants.dequantize), the
    independent reference; Q8_K, which gguf-py cannot dequantize, as d * q from its layout
    (f32 d, then 256 int8 q)."""
    w = np.ascontiguousarray(np.asarray(w, np.uint8))
    fmt = attrs["format"].upper()
    if fmt == "Q8_K":
        blocks = w.reshape(-1, 292)
        d = blocks[:, 0:4].copy().view(np.float32)
        q = blocks[:, 4:260].view(np.int8).astype(np.float32)
        out = d * q
    else:
        out = gguf.quants.dequantize(w.reshape(-1), gguf.GGMLQuantizationType[fmt])
    return np.asarray(out, np.float32).reshape(w.shape[:-1] + (attrs["k"],))


def round_activations_int8(x):
    """act_quant "int8": per 32 elements of the last dim, d = max|x| / 127 and
    x -> round_half_even(x * (1 / d)) * d (1 / d = 0 where d is below the smallest normal f32),
    all in f32, back in x's dtype."""
    xf = np.asarray(x, np.float32)
    b = xf.reshape(xf.shape[:-1] + (xf.shape[-1] // 32, 32))
    d = np.max(np.abs(b), axis=-1, keepdims=True) / np.float32(127)
    with np.errstate(divide="ignore"):
        inv = np.where(d >= np.finfo(np.float32).tiny, np.float32(1) / d,
                       np.float32(0)).astype(np.float32)
    r = (np.rint(b * inv) * d).astype(np.float32)
    return r.reshape(xf.shape).astype(np.asarray(x).dtype)


def quant_matmul(attrs, x, w, bias=None):
    """activation(x . dequantize(w)^T [+ bias]) with the weights rounded to x's dtype (the op's
    convert), computed in f32 for f16 / bf16 x (x arrives in its own dtype: NO_UPCAST);
    act_quant "int8" rounds x first."""
    x = np.asarray(x)
    if attrs.get("act_quant", "none") == "int8":
        x = round_activations_int8(x)
    wd = dequantize(attrs, w).astype(x.dtype)
    if x.dtype in (NP["f16"], NP["bf16"]):
        x, wd = x.astype(np.float32), wd.astype(np.float32)
    y = jnp.matmul(x, wd.T)
    if bias is not None:
        y = y + np.asarray(bias).astype(y.dtype)
    return ACTIVATIONS[attrs.get("activation", "none")](y)


def _spatial(attrs, name, n, fill):
    v = list(attrs[name])
    return v if v else [fill] * n


def conv(attrs, x, w):
    n = x.ndim - 2
    dn = ("NCH", "OIH", "NCH") if n == 1 else ("NCHW", "OIHW", "NCHW")
    pad = list(zip(_spatial(attrs, "pad_low", n, 0), _spatial(attrs, "pad_high", n, 0)))
    return lax.conv_general_dilated(x, w, _spatial(attrs, "strides", n, 1), pad,
                                    rhs_dilation=_spatial(attrs, "dilation", n, 1),
                                    dimension_numbers=dn, feature_group_count=attrs["groups"])


def pool(kind):
    def f(attrs, x):
        n = x.ndim - 2
        win = (1, 1) + tuple(attrs["window"])
        st = (1, 1) + tuple(_spatial(attrs, "strides", n, 1))
        pad = [(0, 0), (0, 0)] + list(zip(_spatial(attrs, "pad_low", n, 0),
                                          _spatial(attrs, "pad_high", n, 0)))
        if kind == "max":
            return lax.reduce_window(x, -jnp.inf, lax.max, win, st, pad)
        tot = lax.reduce_window(x, 0.0, lax.add, win, st, pad)
        if attrs["count_include_pad"]:
            return tot / float(np.prod(attrs["window"]))
        cnt = lax.reduce_window(jnp.ones(x.shape, x.dtype), 0.0, lax.add, win, st, pad)
        return tot / cnt
    return f


def softmax_cross_entropy(attrs, logits, labels):
    n = logits.shape[-1]
    lse = jax.nn.logsumexp(logits, axis=-1)
    idx = jnp.clip(jnp.asarray(labels, jnp.int64), 0, n - 1)
    return lse - jnp.take_along_axis(logits, idx[..., None], axis=-1)[..., 0]


ACTIVATIONS = {"none": lambda x: x, "relu": jax.nn.relu,
               "gelu": lambda x: jax.nn.gelu(x, approximate=False),
               "gelu_tanh": lambda x: jax.nn.gelu(x, approximate=True), "silu": jax.nn.silu}


def elementwise_region(attrs, *operands):
    body = attrs["body"]
    feeds = {n["name"]: x for n, x in zip([n for n in body.nodes() if n["op"] == "input"],
                                         operands)}
    return tuple(interpret(body, feeds))


def _bitwise_or_logical(logical, bitwise):
    return lambda a, x, y: logical(x, y) if np.asarray(x).dtype == np.bool_ else bitwise(x, y)


def _unary(f):
    return lambda a, x: f(x)


def _binary(f):
    return lambda a, x, y: f(x, y)


REFS = {
    # leaves (inputs and params are fed)
    "constant": lambda a: a["value"],
    "iota": lambda a: lax.broadcasted_iota(NP[a["dtype"]], tuple(a["shape"]), a["dimension"]),
    # unary
    "neg": _unary(jnp.negative), "abs": _unary(jnp.abs), "sign": _unary(jnp.sign),
    "exp": _unary(jnp.exp), "expm1": _unary(jnp.expm1), "log": _unary(jnp.log),
    "log1p": _unary(jnp.log1p), "sqrt": _unary(jnp.sqrt), "rsqrt": _unary(lax.rsqrt),
    "sin": _unary(jnp.sin), "cos": _unary(jnp.cos), "tan": _unary(jnp.tan),
    "tanh": _unary(jnp.tanh), "atan": _unary(jnp.arctan), "logistic": _unary(jax.nn.sigmoid),
    "erf": _unary(lax.erf), "cbrt": _unary(lax.cbrt), "floor": _unary(jnp.floor), "ceil": _unary(jnp.ceil),
    "round": _unary(jnp.round),
    "not": lambda a, x: jnp.logical_not(x) if np.asarray(x).dtype == np.bool_ else jnp.invert(x),
    "convert": convert,
    "stop_gradient": _unary(lax.stop_gradient),
    "relu": _unary(jax.nn.relu), "gelu": _unary(lambda x: jax.nn.gelu(x, approximate=False)),
    "gelu_tanh": _unary(lambda x: jax.nn.gelu(x, approximate=True)), "silu": _unary(jax.nn.silu),
    "softplus": _unary(jax.nn.softplus),
    "leaky_relu": lambda a, x: jax.nn.leaky_relu(x, a["alpha"]),
    # binary (lax.max / min / rem / div need equal shapes)
    "add": _binary(jnp.add), "sub": _binary(jnp.subtract), "mul": _binary(jnp.multiply),
    "div": lambda a, x, y: _bcast(lax.div)(x, y) if _is_int(x) else jnp.divide(x, y),
    "pow": lambda a, x, y: int_pow(x, y) if _is_int(x) else jnp.power(x, y),
    "max": _binary(_bcast(lax.max)), "min": _binary(_bcast(lax.min)),
    "rem": _binary(_bcast(lax.rem)),
    "and": _bitwise_or_logical(jnp.logical_and, jnp.bitwise_and),
    "or": _bitwise_or_logical(jnp.logical_or, jnp.bitwise_or),
    "xor": _bitwise_or_logical(jnp.logical_xor, jnp.bitwise_xor),
    "eq": _binary(jnp.equal), "ne": _binary(jnp.not_equal), "lt": _binary(jnp.less),
    "le": _binary(jnp.less_equal), "gt": _binary(jnp.greater), "ge": _binary(jnp.greater_equal),
    "select": lambda a, p, x, y: jnp.where(p, x, y),
    "clamp": lambda a, lo, x, hi: jnp.minimum(jnp.maximum(x, lo), hi),
    # linear algebra
    "dot_general": dot_general,
    "matmul": lambda a, x, y: _int_exact(jnp.matmul)(x, y),
    # reductions
    "reduce_sum": reduce_ref(jnp.sum), "reduce_prod": reduce_ref(jnp.prod),
    "reduce_max": reduce_ref(jnp.max, _lowest), "reduce_min": reduce_ref(jnp.min, _highest),
    "reduce_mean": reduce_ref(jnp.mean),
    "argmax": arg_ref(jnp.argmax), "argmin": arg_ref(jnp.argmin),
    "cumsum": cumsum,
    # shape and data movement
    "reshape": lambda a, x: jnp.reshape(x, a["shape"]),
    "transpose": lambda a, x: jnp.transpose(x, a["permutation"]),
    "broadcast_in_dim": lambda a, x: lax.broadcast_in_dim(x, tuple(a["shape"]),
                                                          tuple(a["broadcast_dimensions"])),
    "expand": lambda a, x: jnp.broadcast_to(x, np.broadcast_shapes(np.shape(x),
                                                                   tuple(a["shape"]))),
    "slice": lambda a, x: lax.slice(x, a["start"], a["limit"], a["strides"] or None),
    "concatenate": lambda a, *xs: jnp.concatenate(xs, axis=a["dimension"]),
    "pad": lambda a, x, p: lax.pad(x, jnp.asarray(p, jnp.asarray(x).dtype),
                                   list(zip(a["low"], a["high"],
                                            a["interior"] or [0] * np.ndim(x)))),
    "gather": gather, "take_along_axis": take_along_axis, "scatter_add": scatter_add,
    "dynamic_slice": dynamic_slice, "dynamic_update_slice": dynamic_update_slice,
    "rng_key": rng_key, "threefry2x32": threefry2x32,
    "reverse": lambda a, x: lax.rev(x, tuple(d % np.ndim(x) for d in a["axes"])),
    "squeeze": lambda a, x: lax.squeeze(x, tuple(d % np.ndim(x) for d in a["axes"])),
    "expand_dims": lambda a, x: jnp.expand_dims(x, tuple(a["axes"])),
    # neural-network ops
    "softmax": lambda a, x: jax.nn.softmax(x, axis=a["axis"]),
    "log_softmax": lambda a, x: jax.nn.log_softmax(x, axis=a["axis"]),
    "layer_norm": layer_norm, "rms_norm": rms_norm, "attention": attention,
    "packed_qkv_attention": packed_qkv_attention, "rope": rope,
    "conv": conv, "max_pool": pool("max"), "avg_pool": pool("avg"),
    "top_k": top_k, "softmax_cross_entropy": softmax_cross_entropy,
    # quantized weights
    "dequantize": dequantize, "quant_matmul": quant_matmul,
    # fused forms
    "fused_matmul_bias_act": lambda a, x, w, b: ACTIVATIONS[a["activation"]](jnp.matmul(x, w) + b),
    "fused_residual_layer_norm": lambda a, x, r, s, b: (layer_norm(a, x + r, s, b), x + r),
    "fused_residual_rms_norm": lambda a, x, r, s: (rms_norm(a, x + r, s), x + r),
    "elementwise_region": elementwise_region,
}
# Leaves the interpreter feeds instead of computing.
FED = ("input", "param")
# Ops whose reference must see the operands' own dtype (no f32 upcast of f16 / bf16).
NO_UPCAST = ("convert", "quant_matmul")


def _cast(x, dtype: str):
    with np.errstate(over="ignore", invalid="ignore"):
        return np.asarray(x).astype(NP[dtype])


def interpret(graph, feeds: dict) -> list:
    """Runs `graph` (an rlx.Graph) on `feeds` (name -> numpy array) with REFS; returns the
    outputs in order as numpy arrays of their dtypes."""
    env = {}
    with jax.default_device(jax.devices("cpu")[0]):
        for n in graph.nodes():
            if n["op"] in FED:
                env[(n["name"], 0)] = np.asarray(feeds[n["name"]])
                continue
            args = [env[o] for o in n["operands"]]
            if n["op"] not in NO_UPCAST:
                args = [np.asarray(x, np.float32) if np.asarray(x).dtype in (NP["f16"], NP["bf16"])
                        else x for x in args]
            out = REFS[n["op"]](n["attrs"], *args)
            outs = list(out) if isinstance(out, (tuple, list)) else [out]
            assert len(outs) == len(n["results"]), n
            for i, (o, (dtype, shape)) in enumerate(zip(outs, n["results"])):
                o = _cast(o, dtype)
                assert o.shape == tuple(shape), f"{n['op']}: reference shape {o.shape} != {shape}"
                env[(n["name"], i)] = o
    return [env[(v.name, v.index)] for v in graph.output_values()]

"""Shared parity harness: tolerances (the one place they are stated), seeded inputs, and
runners that check a graph on rlx's reference evaluator and on the CPU backend (full pipeline)
against a JAX/NumPy reference: run_op_case for the cases of the op-case table (exported from
the C++ tests/ops/op_case.h), run_case for graphs built here with the Python builder.

Reference dtype policy: for f16/bf16 cases the reference is computed by JAX on the inputs
upcast to f32 and the result is rounded to the low dtype once (``upcast=True``, the default).
rlx's evaluator computes in double and rounds once, its CPU kernels compute low-precision ops
in f32 internally, so "f32-upcast then round" is the closest independent reference; the low
dtype tolerances below allow a few ulps for that and for intermediate roundings of
decomposed composites.
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass
from typing import Callable, Sequence

import jax
import ml_dtypes
import numpy as np

import rlx

jax.config.update("jax_enable_x64", True)  # f64 / i64 references keep their dtype
jax.config.update("jax_platforms", "cpu")

import jax.numpy as jnp  # noqa: E402

NP = {
    "f32": np.dtype(np.float32),
    "f64": np.dtype(np.float64),
    "f16": np.dtype(np.float16),
    "bf16": np.dtype(ml_dtypes.bfloat16),
    "i8": np.dtype(np.int8),
    "u8": np.dtype(np.uint8),
    "i32": np.dtype(np.int32),
    "i64": np.dtype(np.int64),
    "bool": np.dtype(np.bool_),
}
RLX_NAME = {v: k for k, v in NP.items()}
FLOATS = ("f32", "f64", "f16", "bf16")
LOW = ("f16", "bf16")

# ---- Tolerances: the one place they are stated. (rtol, atol) per result dtype; integers and
# bool are exact. f32: rlx's vectorized transcendentals have stated bounds of a few ulp
# (docs/runtime.md) and reductions sum in another order, so 2e-5 relative (~170 ulp) leaves
# room for both while still catching any real error. f16 / bf16: ~4 ulp of the dtype (2^-10,
# 2^-7) for double rounding and decomposed composites that round intermediates.
TOL = {
    "f64": (1e-12, 1e-12),
    "f32": (2e-5, 2e-6),
    "f16": (4e-3, 2e-3),
    "bf16": (3e-2, 2e-2),
}
# Ops whose error grows with the size of a sum or with conditioning get a multiplier on the
# tolerance above (same table, so every numeric allowance of the suite is here).
TOL_SCALE = {
    "tan": 10.0,  # |d tan| = 1 + tan^2: large near pi/2, any ulp of input error is amplified
    "pow": 10.0,  # x^y = exp(y log x): relative error ~ |y log x| ulps
    "dot_general": 5.0,  # sums of K products, accumulated in another order
    "matmul": 5.0,
    "quant_matmul": 5.0,
    "fused_matmul_bias_act": 5.0,
    "conv": 5.0,
    "attention": 5.0,
    "packed_qkv_attention": 5.0,
    "reduce_sum": 5.0,
    "reduce_mean": 5.0,
    "reduce_prod": 5.0,
    "cumsum": 5.0,
    "softmax_cross_entropy": 5.0,
    "log_softmax": 5.0,
    "layer_norm": 5.0,
    "rms_norm": 5.0,
    "fused_residual_layer_norm": 5.0,
    "fused_residual_rms_norm": 5.0,
    "avg_pool": 5.0,
    "scatter_add": 5.0,
}


def tolerance(dtype: str, op: str) -> tuple[float, float]:
    rtol, atol = TOL[dtype]
    s = TOL_SCALE.get(op, 1.0)
    return rtol * s, atol * s


# ---- Seeded inputs


@dataclass(frozen=True)
class Arg:
    """A generated input: shape, rlx dtype and value kind.

    kinds: normal (N(0,1)), pos (uniform [0.1, 3]), unit (uniform (-0.9, 0.9)), special
    (normal with NaN, +-inf, +-0 and huge values mixed in), int (small ints incl. 0 and
    negatives), intfull (the dtype's extremes mixed in), index:N (ints in [-2, N+1]: in and out
    of range), label:N, bool, or an explicit numpy array in ``value``.
    """

    shape: tuple
    dtype: str = "f32"
    kind: str = "normal"
    value: object = None


SPECIALS = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1e30, -1e30, 1.0, -1.0, 0.5])


def make(rng: np.random.Generator, a: Arg) -> np.ndarray:
    if a.value is not None:
        return np.asarray(a.value, NP[a.dtype])
    shape, dt, kind = tuple(a.shape), a.dtype, a.kind
    if kind == "bool":
        return rng.random(shape) < 0.5
    if kind.startswith(("index:", "label:")):
        n = int(kind.split(":")[1])
        lo, hi = (-2, n + 2) if kind.startswith("index") else (0, n)
        return rng.integers(lo, hi, shape).astype(NP[dt])
    if dt in FLOATS:
        if kind == "pos":
            x = rng.uniform(0.1, 3.0, shape)
        elif kind == "unit":
            x = rng.uniform(-0.9, 0.9, shape)
        else:
            x = rng.standard_normal(shape)
            if kind == "special" and x.size:
                pick = rng.random(shape) < 0.4
                x = np.where(pick, rng.choice(SPECIALS, shape), x)
        with np.errstate(over="ignore"):
            return x.astype(NP[dt])
    info = np.iinfo(NP[dt])
    lo, hi = max(info.min, -6), min(info.max, 6)
    x = rng.integers(lo, hi + 1, shape).astype(NP[dt])
    if kind == "intfull" and x.size:
        pick = rng.random(shape) < 0.4
        x = np.where(pick, rng.choice(np.array([info.min, info.max, 0, 1], NP[dt]), shape), x)
    return x.astype(NP[dt])


def rng_for(case_id: str) -> np.random.Generator:
    """One stream per case, stable across runs and independent of the other cases."""
    return np.random.default_rng(zlib.crc32(case_id.encode()))


def leaf_values(leaf: dict, case_id: str) -> np.ndarray:
    """Seeded values of one leaf of an exported op case (tests/ops/op_case.h): floats uniform in
    [lo, hi) (floored when integral), integers in [ilo, ihi] clipped to the dtype, bools 50/50,
    then the special values every 5th ("all") or 41st ("nonfinite") element; or the leaf's
    fixed values. Drawn with NumPy, independently of the C++ suites' generator."""
    dt, shape = leaf["dtype"], tuple(leaf["shape"])
    if leaf["fixed"]:
        return np.asarray(leaf["fixed"], np.float64).reshape(shape).astype(NP[dt])
    rng = rng_for(case_id + "/" + leaf["name"])
    if dt == "bool":
        return rng.random(shape) < 0.5
    if dt in FLOATS:
        x = rng.uniform(leaf["lo"], leaf["hi"], shape)
        if leaf["integral"]:
            x = np.floor(x)
    else:
        info = np.iinfo(NP[dt])
        lo, hi = max(leaf["ilo"], info.min), min(leaf["ihi"], info.max)
        x = rng.integers(lo, hi, shape, endpoint=True)
    flat = np.array(x, np.float64 if dt in FLOATS else np.int64).reshape(-1)
    if leaf["specials"] != "none" and flat.size:
        every = 41 if leaf["specials"] == "nonfinite" else 5
        if dt in FLOATS:
            vals = [np.nan, np.inf, -np.inf, -0.0, 0.0]
            if leaf["specials"] == "all":
                vals += [1e30, -1e-30, 65504.0]
        else:
            info = np.iinfo(NP[dt])
            vals = [info.min, info.max, 0, -1, 1] if info.min < 0 else [info.max, 0, 1, 128]
        for k, i in enumerate(range(0, flat.size, every)):
            flat[i] = vals[k % len(vals)]
    with np.errstate(over="ignore"):
        return flat.reshape(shape).astype(NP[dt])


# ---- Running and comparing

SESSION = rlx.Session()
# (op, dtype) pairs that the CPU backend ran on its reference fallback rather than a native
# kernel, read from exe.kernels(); test_parity's summary prints them.
FALLBACKS: set = set()


def _fallback_names(exe) -> list:
    """Op kinds of `exe` with a node on the reference fallback (each once)."""
    return list(dict.fromkeys(k["op"] for k in exe.kernels() if not k["native"]))


def to_np(x) -> np.ndarray:
    return np.asarray(x)


def assert_close(got, want, dtype: str, op: str, where: str) -> None:
    got = np.asarray(got)
    want = np.asarray(want)
    assert got.shape == want.shape, f"{where}: shape {got.shape} != expected {want.shape}"
    assert RLX_NAME[got.dtype] == dtype, f"{where}: dtype {got.dtype} != expected {dtype}"
    if dtype in FLOATS:
        rtol, atol = tolerance(dtype, op)
        np.testing.assert_allclose(
            got.astype(np.float64), want.astype(np.float64), rtol=rtol, atol=atol,
            equal_nan=True, err_msg=where)
    else:
        np.testing.assert_array_equal(got, want.astype(got.dtype), err_msg=where)


def _ref_input(x: np.ndarray, upcast: bool):
    if upcast and RLX_NAME[x.dtype] in LOW:
        x = x.astype(np.float32)
    return jnp.asarray(x)


def run_case(op: str, build: Callable, ref: Callable, args: Sequence[Arg], case_id: str,
             upcast: bool = True, backends: Sequence[str] = ("evaluate", "cpu"),
             params: Sequence[int] = ()) -> None:
    """Builds `build(g, *values)` over inputs drawn for `args`, checks that it emitted `op`,
    and compares the reference evaluator and the CPU backend with `ref(*arrays)`.
    Argument positions in `params` become graph params instead of inputs."""
    rng = rng_for(case_id)
    arrays = [make(rng, a) for a in args]
    g = rlx.Graph("case")
    vals = []
    for i, (a, x) in enumerate(zip(args, arrays)):
        leaf = g.param if i in params else g.input
        vals.append(leaf(f"a{i}", x.shape, a.dtype))
    out = build(g, *vals)
    outs = list(out) if isinstance(out, (tuple, list)) else [out]
    g.outputs(*outs)
    text = str(g)
    # Every case graph also round-trips through the text form (docs/ir.md).
    again = rlx.parse(text)
    assert again == g and str(again) == text, f"{case_id}: text round trip changed the graph"
    assert f"= {op} " in text or f"= {op}\n" in text or f"= {op} :" in text, (
        f"case {case_id} does not emit op {op}:\n{text}")
    with jax.default_device(jax.devices("cpu")[0]):
        want = ref(*[_ref_input(x, upcast) for x in arrays])
    want = list(want) if isinstance(want, (tuple, list)) else [want]
    assert len(want) == len(outs)
    out_dtypes = [v.dtype for v in outs]
    with np.errstate(all="ignore"):
        want = [np.asarray(w).astype(NP[d]) for w, d in zip(want, out_dtypes)]
    inputs = {f"a{i}": x for i, x in enumerate(arrays) if i not in params}
    pvals = {f"a{i}": x for i, x in enumerate(arrays) if i in params}
    check_backends(g, inputs, pvals, want, op, case_id, args[0].dtype if args else "-", backends)


def check_backends(g, inputs: dict, pvals: dict, want: list, op: str, case_id: str,
                   dtype: str, backends: Sequence[str] = ("evaluate", "cpu")) -> None:
    """Runs `g` on each backend ("evaluate": rlx's reference evaluator, "cpu": the CPU backend
    through the full pipeline) and compares every output with `want` under the tolerance of
    `op`. On the CPU backend a node may run on the reference kernel only for a reason the CPU
    kernel table declares; the ops that do are recorded in FALLBACKS (with `dtype`)."""
    out_dtypes = [v.dtype for v in g.output_values()]
    for backend in backends:
        if backend == "evaluate":
            got = rlx.evaluate(g, inputs, pvals)
        else:
            exe = SESSION.compile(g)
            undeclared = [k for k in exe.kernels()
                          if k["fallback_reason"].startswith("UNDECLARED")]
            assert not undeclared, undeclared
            for name in _fallback_names(exe):
                FALLBACKS.add((name, dtype))
            for k, v in pvals.items():
                exe.set_param(k, v)
            got = exe.run(inputs)
        got = got if isinstance(got, list) else [got]
        for i, (r, w, d) in enumerate(zip(got, want, out_dtypes)):
            assert_close(r, w, d, op, f"{case_id} [{backend}] output {i}")


def run_op_case(entry: dict, interpret) -> None:
    """Checks one exported op case (its graph in one dtype) on rlx's reference evaluator and on
    the CPU backend against `interpret` (jax_refs.interpret: the graph run op by op on the JAX
    references), output by output, with the tolerance of the case's op."""
    case_id = entry["name"] + "@" + entry["dtype"]
    g = rlx.parse(entry["ir"])
    leaves = {l["name"]: leaf_values(l, case_id) for l in entry["leaves"]}
    params = {l["name"] for l in entry["leaves"] if l["param"]}
    inputs = {k: v for k, v in leaves.items() if k not in params}
    pvals = {k: v for k, v in leaves.items() if k in params}
    check_backends(g, inputs, pvals, interpret(g, leaves), entry["op"], case_id, entry["dtype"])

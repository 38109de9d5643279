"""Parity of every op of ops.def: rlx's reference evaluator and its CPU backend (full compile
pipeline) against JAX.

The cases are the op-case table of the C++ suites (tests/ops/op_case.h), exported by
rlx._core._op_cases_json(): each is an rlx graph in one dtype with value ranges per leaf
(broadcasting, size-0 dims, negative axes, f16/bf16, NaN/inf, out-of-range indices). The
reference runs the same graph op by op on independent JAX references (jax_refs.py), so adding
an op means adding its C++ case and its JAX reference. Values are drawn here with NumPy;
tolerances and the low-precision reference policy are in harness.py.

A second, small list checks the Python builder's own sugar (operators, weak scalars,
indexing, constants) against jax.numpy.
"""

from __future__ import annotations

import json

import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

import rlx
from harness import FALLBACKS, Arg, run_case, run_op_case
from jax_refs import FED, REFS, interpret

OP_CASES = json.loads(rlx._core._op_cases_json())

# Op cases where rlx is known to disagree with the reference: "<case name>@<dtype>" ->
# reason. They run as xfail(strict=True), so a fix makes the suite fail until the entry is
# removed.
KNOWN_WRONG: dict = {}

# Ops outside this suite, with the reason. Control flow: its op cases run in the text and CPU
# parity suites only (docs/ops.md's declared holes), and its bodies come from Python functions:
# test_control_flow.py checks rlx.cond / switch / while_loop / scan / fori_loop against jax.lax
# on the reference evaluator and the CPU backend.
# Collectives: jax's need a named axis; test_collectives.py checks them against
# jax.vmap(axis_name=...) and NumPy over the simulated device axis (evaluator and CPU).
OUTSIDE = {"cond": "control flow", "while_loop": "control flow", "scan": "control flow",
           "all_reduce": "collective", "all_gather": "collective",
           "reduce_scatter": "collective", "all_to_all": "collective",
           "custom_call": "custom op (python/tests/test_custom_ops.py)"}


@pytest.mark.parametrize("entry", OP_CASES, ids=[f"{e['name']}@{e['dtype']}" for e in OP_CASES])
def test_op_case(request, entry):
    cid = f"{entry['name']}@{entry['dtype']}"
    if cid in KNOWN_WRONG:
        request.applymarker(pytest.mark.xfail(strict=True, reason=KNOWN_WRONG[cid]))
    run_op_case(entry, interpret)


def test_every_op_has_a_reference_and_cases():
    all_ops = {o["name"] for o in rlx.ops()} - set(OUTSIDE)
    missing = all_ops - set(REFS) - set(FED)
    assert not missing, f"ops without a JAX reference in jax_refs.REFS: {sorted(missing)}"
    stale = set(REFS) - all_ops
    assert not stale, f"jax_refs.REFS names ops that do not exist: {sorted(stale)}"
    covered = {e["op"] for e in OP_CASES}
    assert covered == all_ops, f"ops without an exported op case: {sorted(all_ops - covered)}"


# ----------------------------------------------------------------------------- builder sugar

API_CASES: list = []


def api_case(op, cid, build, ref, args, **opts):
    API_CASES.append(pytest.param(op, build, ref, args, opts, id=f"{op}-{cid}"))


# Python operators and weak scalars go through the same builders.
api_case("add", "operator-scalar", lambda g, x, y: (x + 1.5) * y - 2 / x,
         lambda x, y: (x + 1.5) * y - 2 / x, [Arg((2, 3)), Arg((3,))])
api_case("pow", "operator", lambda g, x: x ** 2, lambda x: x ** 2, [Arg((4,))])
api_case("matmul", "operator", lambda g, x, y: x @ y, jnp.matmul, [Arg((3, 4)), Arg((4, 5))])
# Python indexing lowers to slice / reverse / reshape / gather.
api_case("slice", "indexing", lambda g, v: v[1:3, ::2, None, -1], lambda v: v[1:3, ::2, None, -1],
         [Arg((4, 5, 3))])
api_case("reverse", "indexing-negative-step", lambda g, v: v[::-2, 1], lambda v: v[::-2, 1],
         [Arg((5, 3))])
api_case("gather", "indexing-tensor", lambda g, v, i: v[..., i], lambda v, i: v[..., i],
         [Arg((2, 6)), Arg((3,), "i32", "label:6")])
# g.constant from numpy arrays (dtype from the array), g.iota's default dtype, params.
for dt in ("f32", "i32", "bool"):
    arr = (np.arange(6).reshape(2, 3) % 3).astype({"f32": "float32", "i32": "int32", "bool": "bool"}[dt])
    if dt == "bool":
        api_case("constant", dt, lambda g, x, c=arr: g.logical_or(g.constant(c), x),
                 lambda x, c=arr: jnp.asarray(c) | x, [Arg((2, 3), dt, "bool")])
    else:
        api_case("constant", dt, lambda g, x, c=arr: g.constant(c) + x,
                 lambda x, c=arr: jnp.asarray(c).astype(x.dtype) + x, [Arg((2, 3), dt, "int")])
api_case("iota", "default-dtype", lambda g, x: g.iota([3, 4], 1) + x,
         lambda x: lax.broadcasted_iota(x.dtype, (3, 4), 1) + x, [Arg((3, 4), "i32", "int")])
api_case("matmul", "param", lambda g, x, w: x @ w, jnp.matmul, [Arg((2, 3)), Arg((3, 4))],
         params=(1,))


@pytest.mark.parametrize("op,build,ref,args,opts", API_CASES)
def test_builder_sugar(request, op, build, ref, args, opts):
    run_case(op, build, ref, args, request.node.callspec.id, **opts)


def test_coverage_table(capsys):
    """Prints how many cases, ops and op x dtype pairs the suite runs."""
    pairs = {(e["op"], e["dtype"]) for e in OP_CASES}
    ops = {op for op, _ in pairs}
    with capsys.disabled():
        print(f"\nparity suite: {len(OP_CASES)} op cases, {len(ops)} ops, {len(pairs)} op x "
              f"dtype pairs, {len(API_CASES)} builder-sugar cases")
        if FALLBACKS:  # informational: these ran on the CPU backend's reference fallback
            by_op = {}
            for op, dt in sorted(FALLBACKS):
                by_op.setdefault(op, []).append(dt)
            print("cpu reference fallback (op: dtypes): " +
                  "; ".join(f"{op}: {','.join(d)}" for op, d in by_op.items()))
    assert len(ops) == len({o["name"] for o in rlx.ops()} - set(OUTSIDE))

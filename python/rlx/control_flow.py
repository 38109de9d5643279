"""Control flow mirroring jax.lax: cond, switch, while_loop, scan and fori_loop.

Each function traces its Python callables into body graphs (docs/ir.md "Regions") and adds one
``cond`` / ``while_loop`` / ``scan`` node to the graph of its operands::

    g = rlx.Graph("rnn")
    xs, h0, w = g.input("xs", (50, 2, 4)), g.input("h0", (2, 4)), g.input("w", (4, 4))

    def cell(w, h, x):                  # consts first, then the carry and the step's x
        n = h.graph.tanh(x + h @ w)     # a body's ops are built on its own graph
        return n, n                     # (new carry, y)

    h, ys = rlx.scan(cell, h0, xs, consts=(w,))   # ys: [50, 2, 4]

A body is a self-contained graph: a callable sees only its arguments, which are values of the
body graph. A value of the enclosing graph must be passed in (``operands`` of cond / switch,
``consts`` of while_loop / scan / fori_loop); using one inside a callable raises an Error, as
does a callable returning a Python number or a value of another graph.

Carries, operands and per-step values may be one Value or a tuple / list of Values (jax's
pytrees of one level); results come back in the structure the callables return.

Graphs holding them run on the reference evaluator (:func:`rlx.evaluate`), compile for the CPU
(each body a compiled sub-program, nothing compiled or allocated per iteration) and for XLA
devices (``stablehlo.case`` / ``stablehlo.while``), and go through ``rlx.grad`` / ``jvp`` /
``vmap`` (docs/ir.md "Regions").
"""

from __future__ import annotations

from typing import Any, Callable, Optional, Sequence

import numpy as np

from ._core import Error, Graph, Value

__all__ = ["cond", "switch", "while_loop", "scan", "fori_loop"]

_count = [0]


def _leaves(tree: Any, what: str) -> tuple[list[Value], bool]:
    """The values of `tree` (one Value or a tuple / list of Values) and whether it was a
    sequence."""
    if isinstance(tree, Value):
        return [tree], False
    if isinstance(tree, (tuple, list)) and all(isinstance(v, Value) for v in tree):
        return list(tree), True
    raise Error(f"{what} must be an rlx.Value or a tuple / list of rlx.Values, got {tree!r}")


def _pack(values: Sequence[Value], is_seq: bool) -> Any:
    return tuple(values) if is_seq else values[0]


def _trace(role: str, fn: Callable[..., Any], groups: Sequence[tuple[list[tuple], bool]]) -> tuple[Graph, Any]:
    """Builds a body graph: one input per (shape, dtype) of each group, `fn` called with each
    group packed as it was given; returns the graph and fn's raw result."""
    _count[0] += 1
    body = Graph(f"{role}_{_count[0]}")
    args = []
    k = 0
    for types, is_seq in groups:
        vals = []
        for shape, dtype in types:
            vals.append(body.input(f"a{k}", tuple(shape), dtype))
            k += 1
        args.append(_pack(vals, is_seq))
    return body, fn(*args)


def _types(values: Sequence[Value]) -> list[tuple]:
    return [(v.shape, v.dtype) for v in values]


def _set_outputs(body: Graph, out: Sequence[Value], role: str) -> None:
    for v in out:
        if not isinstance(v, Value):
            raise Error(f"{role} must return rlx.Values of its own graph, got {v!r}")
        if v.graph is not body:
            raise Error(f"{role} returned a value of graph @{v.graph.name}: a body sees only "
                        "its arguments (pass enclosing values in as operands / consts)")
    body.outputs(*out)


def _graph_of(values: Sequence[Value], what: str) -> Graph:
    if not values:
        raise Error(f"{what}: needs at least one rlx.Value to know the graph to build in")
    return values[0].graph


def _selector_and_operands(op: str, name: str, selector: Any, type_text: str,
                           operands: Sequence[Any]) -> list:
    """Checks cond's / switch's selector and operands are rlx.Values; returns the operands."""
    if not isinstance(selector, Value):
        raise Error(f"{op}: {name} must be an rlx.Value ({type_text}), got {selector!r}")
    ops = list(operands)
    for v in ops:
        if not isinstance(v, Value):
            raise Error(f"{op}: operands must be rlx.Values, got {v!r}")
    return ops


def switch(index: Value, branches: Sequence[Callable[..., Any]], *operands: Value) -> Any:
    """jax.lax.switch: applies ``branches[index]`` to ``operands``. ``index`` is an i32[]
    scalar, clamped to [0, len(branches) - 1] as jax does; every branch must return the same
    structure and types."""
    ops = _selector_and_operands("switch", "index", index, "i32[]", operands)
    bodies, seq = [], None
    for i, fn in enumerate(branches):
        body, out = _trace(f"branch{i}", fn, [([t], False) for t in _types(ops)])
        leaves, is_seq = _leaves(out, f"branch {i}'s result")
        _set_outputs(body, leaves, f"branch {i}")
        bodies.append(body)
        seq = is_seq if seq is None else seq
    if seq is None:
        raise Error("switch: needs at least one branch")
    return _pack(index.graph.switch_case(index, bodies, ops), seq)


def cond(pred: Value, true_fun: Callable[..., Any], false_fun: Callable[..., Any],
         *operands: Value) -> Any:
    """jax.lax.cond: ``true_fun(*operands)`` if ``pred`` (a bool[] scalar) else
    ``false_fun(*operands)``; both must return the same structure and types."""
    ops = _selector_and_operands("cond", "pred", pred, "bool[]", operands)
    groups = [([t], False) for t in _types(ops)]
    tb, tout = _trace("true_branch", true_fun, groups)
    fb, fout = _trace("false_branch", false_fun, groups)
    tl, seq = _leaves(tout, "true_fun's result")
    fl, _ = _leaves(fout, "false_fun's result")
    _set_outputs(tb, tl, "true_fun")
    _set_outputs(fb, fl, "false_fun")
    return _pack(pred.graph.cond(pred, tb, fb, ops), seq)


def while_loop(cond_fun: Callable[..., Any], body_fun: Callable[..., Any], init_val: Any,
               consts: Sequence[Value] = (), max_trip_count: Optional[int] = None) -> Any:
    """jax.lax.while_loop: ``val = init_val; while cond_fun(val): val = body_fun(val)``.
    ``cond_fun`` returns a bool[] Value; ``body_fun`` returns ``val``'s structure and types.
    With ``consts`` (values of the enclosing graph) both are called as ``fn(*consts, val)``.
    ``max_trip_count`` also ends the loop after that many iterations (rlx's extension)."""
    init, seq = _leaves(init_val, "while_loop: init_val")
    consts = list(consts)
    g = _graph_of(init, "while_loop")
    groups = [([t], False) for t in _types(consts)] + [(_types(init), seq)]
    cb, cout = _trace("cond", cond_fun, groups)
    _set_outputs(cb, _leaves(cout, "cond_fun's result")[0], "cond_fun")
    bb, bout = _trace("body", body_fun, groups)
    _set_outputs(bb, _leaves(bout, "body_fun's result")[0], "body_fun")
    return _pack(g.while_loop(cb, bb, init, consts, max_trip_count), seq)


def scan(f: Callable[..., Any], init: Any, xs: Any = None, length: Optional[int] = None,
         reverse: bool = False, unroll: int = 1, consts: Sequence[Value] = ()) -> tuple[Any, Any]:
    """jax.lax.scan: ``carry = init; for t: carry, y_t = f(carry, xs[t])``; returns
    ``(carry, ys)`` with the y's stacked on a new leading axis (None when f returns no y).
    ``xs`` may be None (then ``length`` counts the steps). With ``consts`` (values of the
    enclosing graph) f is called as ``f(*consts, carry, x)``."""
    carry, cseq = _leaves(init, "scan: init")
    consts = list(consts)
    if xs is None:
        x_leaves, xseq = [], False
    else:
        x_leaves, xseq = _leaves(xs, "scan: xs")
    g = _graph_of(carry + x_leaves, "scan")
    x_types = [(v.shape[1:], v.dtype) for v in x_leaves]
    groups = [([t], False) for t in _types(consts)] + [(_types(carry), cseq)]

    def call(*args: Any) -> Any:
        return f(*args) if xs is not None else f(*args, None)

    if xs is not None:
        groups.append((x_types, xseq))
    body, out = _trace("step", call, groups)
    if not (isinstance(out, (tuple, list)) and len(out) == 2):
        raise Error(f"scan: f must return a pair (carry, y), got {out!r}")
    new_carry, cseq2 = _leaves(out[0], "scan: f's carry")
    if out[1] is None:
        ys, yseq = [], False
    else:
        ys, yseq = _leaves(out[1], "scan: f's y")
    _set_outputs(body, new_carry + ys, "scan's f")
    res = g.scan(body, carry, x_leaves, consts, length, reverse, unroll)
    c, y = res[:len(carry)], res[len(carry):]
    return _pack(c, cseq), (_pack(y, yseq) if ys else None)


def fori_loop(lower: int, upper: int, body_fun: Callable[..., Any], init_val: Any,
              consts: Sequence[Value] = ()) -> Any:
    """jax.lax.fori_loop with static int bounds: ``val = body_fun(i, val)`` for i in
    [lower, upper), ``i`` an i32[] Value; built as a scan of ``upper - lower`` steps (as jax
    does for static bounds; none when upper <= lower). With ``consts``, ``body_fun(*consts, i,
    val)``."""
    if not isinstance(lower, int) or not isinstance(upper, int):
        raise Error("fori_loop: lower and upper must be Python ints (static bounds)")
    init, seq = _leaves(init_val, "fori_loop: init_val")
    g = _graph_of(init, "fori_loop")
    start = g.constant(np.array(lower, dtype=np.int32))
    n = len(consts)

    def step(*args: Any) -> Any:
        cs, carry = args[:n], args[n]  # args[n + 1] is the missing x (None)
        i, vals = carry[0], list(carry[1:])
        new_leaves, _ = _leaves(body_fun(*cs, i, _pack(vals, seq)), "fori_loop: body_fun's result")
        return (i + 1, *new_leaves), None

    carry, _ = scan(step, (start, *init), None, length=max(upper - lower, 0), consts=consts)
    return _pack(list(carry[1:]), seq)

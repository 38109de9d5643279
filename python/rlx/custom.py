"""Custom ops from Python, mirroring jax: ``custom_vjp`` and ``pure_callback``.

Both build a ``custom_call`` node of a custom op the package registers (docs/ir.md
"Custom ops"):

* ``py.custom_vjp``: ``fun``, ``fwd`` and ``bwd`` traced into graphs held by the node. The
  evaluator, the CPU and XLA run ``fun``; grad / vjp / jvp use ``fwd`` and ``bwd``, as
  ``jax.custom_vjp`` does::

      def f(x):
          return x.graph.log1p(x.graph.exp(x))
      def f_fwd(x):
          return f(x), x                       # (output, residuals)
      def f_bwd(x, g):
          return (g * x.graph.logistic(x),)    # one cotangent per argument
      f = rlx.custom_vjp(f, f_fwd, f_bwd)      # or rlx.custom_vjp(f).defvjp(f_fwd, f_bwd)
      y = f(x)                                 # x: an rlx.Value

* ``py.pure_callback``: a Python function on numpy arrays run on the host by the reference
  evaluator and the CPU backend (with the GIL held); compiling one for XLA (``pjrt:0``) fails
  with an error naming the op, since XLA cannot call back into Python.
"""

from __future__ import annotations

from typing import Any, Callable, Optional

import numpy as np

from ._core import Error, Value, register_callback
from .control_flow import _leaves, _pack, _set_outputs, _trace, _types

__all__ = ["custom_vjp", "pure_callback"]


def _zeros_for(body, shape, dtype) -> Value:
    return body.constant(np.zeros(shape, dtype=_np_dtype(dtype)))


def _np_dtype(dtype: str):
    if dtype == "bf16":
        import ml_dtypes
        return ml_dtypes.bfloat16
    return {"f32": np.float32, "f16": np.float16, "f64": np.float64, "i8": np.int8,
            "u8": np.uint8, "i32": np.int32, "i64": np.int64, "bool": np.bool_}[dtype]


class custom_vjp:  # noqa: N801 (named as jax.custom_vjp)
    """jax.custom_vjp: ``fun``'s value with ``fwd`` / ``bwd`` as its derivative.

    ``fwd(*args)`` returns ``(out, residuals)`` (``residuals`` a Value, a tuple of Values or
    ``()``); ``bwd(residuals, g)`` returns a tuple with one cotangent per argument (``None``
    for zero), ``g`` having ``out``'s structure. Arguments are rlx.Values of one graph; each
    function sees values of its own traced graph (pass every input as an argument)."""

    def __init__(self, fun: Callable[..., Any], fwd: Optional[Callable[..., Any]] = None,
                 bwd: Optional[Callable[..., Any]] = None):
        self.fun, self.fwd, self.bwd = fun, fwd, bwd

    def defvjp(self, fwd: Callable[..., Any], bwd: Callable[..., Any]) -> "custom_vjp":
        self.fwd, self.bwd = fwd, bwd
        return self

    def __call__(self, *args: Value) -> Any:
        if self.fwd is None or self.bwd is None:
            raise Error("custom_vjp: define fwd and bwd first (custom_vjp(f, fwd, bwd) or "
                        ".defvjp(fwd, bwd))")
        for a in args:
            if not isinstance(a, Value):
                raise Error(f"custom_vjp: arguments must be rlx.Values, got {a!r}")
        if not args:
            raise Error("custom_vjp: needs at least one argument")
        groups = [([t], False) for t in _types(args)]
        fun_g, out = _trace("custom_vjp_fun", self.fun, groups)
        outs, seq = _leaves(out, "custom_vjp: fun's result")
        _set_outputs(fun_g, outs, "custom_vjp's fun")
        fwd_g, fres = _trace("custom_vjp_fwd", self.fwd, groups)
        if not (isinstance(fres, tuple) and len(fres) == 2):
            raise Error(f"custom_vjp: fwd must return a pair (out, residuals), got {fres!r}")
        fouts, _ = _leaves(fres[0], "custom_vjp: fwd's out")
        res = fres[1]
        if isinstance(res, (tuple, list)) and len(res) == 0:
            res_leaves, res_seq = [], True
        else:
            res_leaves, res_seq = _leaves(res, "custom_vjp: fwd's residuals")
        _set_outputs(fwd_g, fouts + res_leaves, "custom_vjp's fwd")

        def bwd_call(*a: Any) -> Any:
            r, gs = a[0], a[1]
            return self.bwd(r, gs)

        bwd_g, cts = _trace("custom_vjp_bwd", bwd_call,
                            [(_types(res_leaves), res_seq), (_types(outs), seq)])
        if not isinstance(cts, (tuple, list)) or len(cts) != len(args):
            raise Error(f"custom_vjp: bwd must return a tuple of {len(args)} cotangents (one per "
                        f"argument), got {cts!r}")
        ct_vals = [(_zeros_for(bwd_g, a.shape, a.dtype) if c is None else c)
                   for a, c in zip(args, cts)]
        _set_outputs(bwd_g, ct_vals, "custom_vjp's bwd")
        attrs = {"fun": fun_g, "fwd": fwd_g, "bwd": bwd_g, "num_residuals": len(res_leaves)}
        results = args[0].graph.custom_call("py.custom_vjp", list(args), attrs)
        return _pack(results, seq)


def pure_callback(callback: Callable[..., Any], result_shape_dtypes: Any, *args: Value) -> Value:
    """jax.pure_callback: ``callback(*arrays)`` on numpy copies of ``args`` (rlx.Values of one
    graph), returning an array of the declared type. ``result_shape_dtypes`` is anything with
    ``.shape`` and ``.dtype`` (a numpy array, ``jax.ShapeDtypeStruct``) or a pair
    ``(shape, dtype)``. The callback must be pure (constant folding may call it at compile
    time); it runs on the evaluator and the CPU backend, and compiling it for XLA fails."""
    if hasattr(result_shape_dtypes, "shape") and hasattr(result_shape_dtypes, "dtype"):
        shape, dtype = result_shape_dtypes.shape, result_shape_dtypes.dtype
    elif isinstance(result_shape_dtypes, (tuple, list)) and len(result_shape_dtypes) == 2:
        shape, dtype = result_shape_dtypes
    else:
        raise Error("pure_callback: result_shape_dtypes must have .shape and .dtype or be a "
                    f"pair (shape, dtype), got {result_shape_dtypes!r}")
    if not args or not all(isinstance(a, Value) for a in args):
        raise Error("pure_callback: needs at least one argument, all rlx.Values")
    if not callable(callback):
        raise Error(f"pure_callback: callback must be callable, got {callback!r}")
    cid = register_callback(callback)
    attrs = {"callback": cid, "dtype": dtype if isinstance(dtype, str) else np.dtype(dtype),
             "shape": [int(d) for d in shape]}
    return args[0].graph.custom_call("py.pure_callback", list(args), attrs)[0]

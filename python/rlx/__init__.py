"""rlx: an ML compiler and runtime (C++20) with a jax.lax-style IR.

Build a graph with :class:`Graph`, compile it with :class:`Session` and run it on numpy arrays::

    import numpy as np, rlx
    g = rlx.Graph("mlp")
    x = g.input("x", (4, 8))
    w = g.param("w", (8, 16))
    g.outputs(g.softmax(g.gelu(x @ w)))
    exe = rlx.Session().compile(g)
    exe.set_param("w", np.full((8, 16), 0.01, np.float32))
    y = exe.run(x=np.ones((4, 8), np.float32))

Errors from the C++ core are raised as :class:`Error` (a RuntimeError) with its message.
"""

from __future__ import annotations

import os as _os
from typing import Any, Mapping, Optional

# libgomp (the thread pool of rlx's CPU kernels and oneDNN) reads its wait policy once, when it
# loads with _core, so it is set here, before: idle pool threads spin briefly (a few
# microseconds), then block, instead of libgomp's default of milliseconds of spinning, which made
# 2-thread runs several times slower than 1-thread ones while other processes used the cores
# (docs/runtime.md "Threads"). A user's OMP_WAIT_POLICY or GOMP_SPINCOUNT wins; no effect when
# another module loaded libgomp first.
_DEFAULT_GOMP_SPINCOUNT = "300"
if "OMP_WAIT_POLICY" not in _os.environ and "GOMP_SPINCOUNT" not in _os.environ:
    _os.environ["GOMP_SPINCOUNT"] = _DEFAULT_GOMP_SPINCOUNT

from . import _core  # noqa: E402  (after the libgomp environment above)
from .control_flow import cond, fori_loop, scan, switch, while_loop
from .custom import custom_vjp, pure_callback
from ._core import (
    SGD,
    AdamW,
    AsyncResult,
    DLPackTensor,
    Error,
    Executable,
    Graph,
    Mesh,
    Optimizer,
    PartitionSpec,
    Session,
    Trainer,
    Value,
    build_train_step,
    clear_compile_cache,
    compile_cache_info,
    compile_replicated,
    compile_shard_map,
    compile_sharded,
    default_digits_path,
    devices,
    from_dlpack,
    grad,
    hvp,
    initialize,
    jvp,
    load_safetensors,
    num_threads,
    ops,
    parse,
    physical_cores,
    pjrt_devices,
    safetensors_metadata,
    save_safetensors,
    set_num_threads,
    stablehlo_sharded,
    to_dlpack,
    train_demo,
    value_and_grad,
    vjp,
    vmap,
)

__all__ = [
    "cond",
    "custom_vjp",
    "pure_callback",
    "fori_loop",
    "scan",
    "switch",
    "while_loop",
    "AdamW",
    "AsyncResult",
    "DLPackTensor",
    "Error",
    "Executable",
    "Graph",
    "Mesh",
    "Optimizer",
    "P",
    "PartitionSpec",
    "SGD",
    "Session",
    "Trainer",
    "Value",
    "build_train_step",
    "clear_compile_cache",
    "compile_cache_info",
    "compile_replicated",
    "compile_shard_map",
    "compile_sharded",
    "default_digits_path",
    "devices",
    "evaluate",
    "from_dlpack",
    "grad",
    "hvp",
    "initialize",
    "jvp",
    "load_safetensors",
    "num_threads",
    "ops",
    "parse",
    "physical_cores",
    "pjrt_devices",
    "safetensors_metadata",
    "save_safetensors",
    "set_num_threads",
    "stablehlo_sharded",
    "to_dlpack",
    "train_demo",
    "value_and_grad",
    "vjp",
    "vmap",
]

__version__ = "0.1.0"

#: jax.sharding.PartitionSpec's usual short name: ``rlx.P('data', None)``.
P = PartitionSpec


def evaluate(
    graph: Graph,
    inputs: Optional[Mapping[str, Any]] = None,
    params: Optional[Mapping[str, Any]] = None,
    **feeds: Any,
):
    """Runs ``graph`` on the reference evaluator (naive, in double, rounded once per op).

    Inputs and params are given by name in ``inputs`` / ``params`` or as keywords; every input and
    param must be present with its declared dtype and shape. Returns one array for a one-output
    graph, else a list. Raises :class:`Error` naming the input and types on a mismatch.
    """
    merged = dict(inputs or {})
    for name, value in feeds.items():
        if name in merged:
            raise Error(f"evaluate: input '{name}' given twice")
        merged[name] = value
    return _core.evaluate(graph, merged, dict(params or {}))
from . import models  # noqa: E402  (rlx.models.SentenceEmbedder, rlx.models.LLM)
from . import onnx  # noqa: E402  (rlx.onnx.InferenceSession, rlx.onnx.load)

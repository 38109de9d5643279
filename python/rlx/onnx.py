"""ONNX models on rlx with onnxruntime's API: :class:`InferenceSession` (``ort.InferenceSession``
-> ``rlx.onnx.InferenceSession`` is the whole migration) and :func:`load` (an ONNX model as an
:class:`rlx.Graph` for concrete input shapes, to grad / vmap / compile).

The importer (``include/rlx/import/onnx.h``, ``docs/onnx.md``) converts each ONNX node to rlx
ops for concrete input shapes; a session imports and compiles once per distinct set of input
shapes and caches the executable. Shape computations (Shape -> Gather -> Concat -> Reshape) fold
to constants. Errors are :class:`rlx.Error` naming the file and node: one error lists every op
type rlx lacks (with its opset and node names) before anything is converted.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Mapping, Optional, Sequence, Union

from . import _core
from ._core import Error, Graph

__all__ = ["InferenceSession", "NodeArg", "load", "model_info"]

PathOrBytes = Union[str, os.PathLike, bytes]

# onnxruntime's provider names -> rlx devices.
_PROVIDERS = {"CPUExecutionProvider": "cpu"}


@dataclass(frozen=True)
class NodeArg:
    """A graph input or output as onnxruntime's ``NodeArg``: ``name``, ``shape`` (ints, symbolic
    dim names as strings, None for unknown dims; None when undeclared) and ``type``
    (``"tensor(float)"``)."""

    name: str
    shape: Optional[list]
    type: str


def _model(path_or_bytes: PathOrBytes) -> "_core._OnnxModel":
    if isinstance(path_or_bytes, (bytes, bytearray, memoryview)):
        return _core._OnnxModel.from_bytes(bytes(path_or_bytes))
    if isinstance(path_or_bytes, (str, os.PathLike)):
        return _core._OnnxModel.load(os.fspath(path_or_bytes))
    raise Error(
        f"expected a model path or the model's bytes, got {type(path_or_bytes).__name__}"
    )


def _device(providers: Optional[Sequence[Any]], device: Optional[str]) -> str:
    if device is not None:
        return device
    if not providers:
        return "cpu"
    names = [p[0] if isinstance(p, (tuple, list)) else p for p in providers]
    for name in names:
        if name in _PROVIDERS:
            return _PROVIDERS[name]
    raise Error(
        f"providers {names}: rlx serves {sorted(_PROVIDERS)} (pass device='pjrt:0' for XLA)"
    )


class InferenceSession:
    """onnxruntime's ``InferenceSession`` on rlx.

    ``path_or_bytes`` is a model file (external data is read relative to it) or its bytes.
    ``providers`` takes onnxruntime's names (``CPUExecutionProvider`` runs on rlx's CPU
    backend); ``device`` (``"cpu"``, ``"pjrt:0"``) overrides it; ``precision`` is an rlx
    precision policy (``"auto-mixed-bf16"``; None: the device's default). ``sess_options`` is
    accepted for compatibility and ignored. Raises :class:`rlx.Error` for a missing or malformed
    file (naming it), and from :meth:`run` for unsupported ops or bad feeds.
    """

    def __init__(
        self,
        path_or_bytes: PathOrBytes,
        sess_options: Any = None,
        providers: Optional[Sequence[Any]] = None,
        provider_options: Any = None,
        *,
        device: Optional[str] = None,
        precision: Optional[str] = None,
    ) -> None:
        self._model = _model(path_or_bytes)
        info = self._model.info()
        self._inputs = [NodeArg(*t) for t in info["inputs"]]
        self._outputs = [NodeArg(*t) for t in info["outputs"]]
        self._device = _device(providers, device)
        self._session = _core._OnnxSession(self._model, self._device, precision)

    def get_inputs(self) -> list[NodeArg]:
        """The model's inputs (initializers excluded), in model order."""
        return list(self._inputs)

    def get_outputs(self) -> list[NodeArg]:
        """The model's outputs, in model order."""
        return list(self._outputs)

    def get_providers(self) -> list[str]:
        """The provider serving this session (``CPUExecutionProvider`` for rlx's CPU device)."""
        for name, dev in _PROVIDERS.items():
            if dev == self._device:
                return [name]
        return [self._device]

    def run(
        self,
        output_names: Optional[Sequence[str]],
        input_feed: Mapping[str, Any],
        run_options: Any = None,
    ) -> list:
        """Runs the model on ``input_feed`` (input name -> numpy array of the declared dtype;
        every input) and returns the outputs named in ``output_names`` (None or empty: all, in
        model order) as numpy arrays. The first run for a set of input shapes imports and
        compiles; later ones reuse the executable."""
        return self._session.run(list(output_names or []), dict(input_feed))


def model_info(path_or_bytes: PathOrBytes) -> dict:
    """What ``rlx info`` prints: ir_version, producer, opsets, inputs, outputs, op_histogram,
    num_nodes, num_initializers, unsupported (domain, op type, opset, node names) and
    unsupported_types."""
    return _model(path_or_bytes).info()


def load(
    path_or_bytes: PathOrBytes,
    input_shapes: Optional[Mapping[str, Sequence[int]]] = None,
    *,
    input_values: Optional[Mapping[str, Any]] = None,
    dim_params: Optional[Mapping[str, int]] = None,
    return_params: bool = False,
):
    """The ONNX model as an :class:`rlx.Graph` for concrete input shapes.

    ``input_shapes`` gives a shape per input (inputs not listed use their declared dims;
    symbolic dims come from ``dim_params``); ``input_values`` binds inputs to values, imported
    as constants (an input the model computes a shape or axes from). The graph's params are the
    model's float initializers; with ``return_params=True`` the result is ``(graph, params)``,
    params a dict of param name -> numpy array (views of the model's data) to ``set_param``.
    """
    graph, params, _, _ = _model(path_or_bytes).import_graph(
        {k: list(v) for k, v in (input_shapes or {}).items()},
        dict(input_values or {}),
        dict(dim_params or {}),
    )
    return (graph, params) if return_params else graph

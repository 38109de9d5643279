"""`rlx info`, `rlx run` and `rlx compile --emit stablehlo` on an ONNX model with a symbolic dim
and an If on an input's value (silero-vad's shape: the sampling rate picks a branch), against
onnxruntime and with the errors a user meets first (docs/onnx.md "InferenceSession")."""

from __future__ import annotations

import subprocess

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper  # noqa: E402

from test_serve import tool_path  # noqa: E402

pytestmark = pytest.mark.skipif(tool_path() is None, reason="needs the built rlx tool")


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    """y = -x if sr == 16000 else |x| * 2; x float [batch, 4], sr int64 scalar."""
    then_g = helper.make_graph([helper.make_node("Neg", ["x"], ["a"])], "then", [],
                               [helper.make_tensor_value_info("a", TensorProto.FLOAT, None)])
    else_g = helper.make_graph(
        [helper.make_node("Abs", ["x"], ["b0"]), helper.make_node("Add", ["b0", "b0"], ["b"])],
        "else", [], [helper.make_tensor_value_info("b", TensorProto.FLOAT, None)])
    nodes = [
        helper.make_node("Constant", [], ["rate"],
                         value=helper.make_tensor("rate", TensorProto.INT64, [], [16000])),
        helper.make_node("Equal", ["sr", "rate"], ["cond"]),
        helper.make_node("If", ["cond"], ["y"], name="if_rate", then_branch=then_g,
                         else_branch=else_g),
    ]
    g = helper.make_graph(
        nodes, "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4]),
         helper.make_tensor_value_info("sr", TensorProto.INT64, [])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 4])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 16)])
    path = tmp_path_factory.mktemp("onnx_cli") / "if_rate.onnx"
    onnx.save(m, str(path))
    return path


def rlx(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(tool_path()), *map(str, args)], capture_output=True, text=True,
                          timeout=120)


def test_info_lists_symbolic_dims_and_ops(model):
    r = rlx("info", model)
    assert r.returncode == 0, r.stderr
    assert "  x: tensor(float) [batch,4]" in r.stdout
    assert "  sr: tensor(int64) []" in r.stdout
    assert "rlx converts every op of this model" in r.stdout


@pytest.mark.parametrize("rate", [16000, 8000])
def test_run_takes_either_branch_like_onnxruntime(model, tmp_path, rate):
    x = np.array([[1.5, -2.0, 0.25, -0.5], [3.0, -1.0, 0.0, 2.0]], np.float32)
    np.save(tmp_path / "x.npy", x)
    np.save(tmp_path / "sr.npy", np.array(rate, np.int64))
    r = rlx("run", model, "--input", f"x={tmp_path / 'x.npy'}", "--input",
            f"sr={tmp_path / 'sr.npy'}", "--output-dir", tmp_path / "out")
    assert r.returncode == 0, r.stderr
    assert "output y: f32[2,4]" in r.stdout
    want = ort.InferenceSession(str(model)).run(None, {"x": x, "sr": np.array(rate, np.int64)})[0]
    np.testing.assert_array_equal(np.load(tmp_path / "out" / "y.npy"), want)


def test_dim_names_must_exist(model):
    r = rlx("run", model, "--dim", "input=3")
    assert r.returncode != 0
    assert ("--dim input: no input of the model has a symbolic dim 'input' (its symbolic dims: "
            "batch;") in r.stderr, r.stderr


def test_compile_binds_an_input_by_value(model, tmp_path):
    # Without sr's value the If is a run-time cond: a stablehlo.case holding both branches.
    r = rlx("compile", model, "--emit", "stablehlo", "--dim", "batch=2")
    assert r.returncode == 0, r.stderr
    assert "stablehlo.case" in r.stdout, r.stdout
    assert "stablehlo.abs" in r.stdout and "stablehlo.negate" in r.stdout
    np.save(tmp_path / "sr.npy", np.array(8000, np.int64))
    r = rlx("compile", model, "--emit", "stablehlo", "--dim", "batch=2", "--input",
            f"sr={tmp_path / 'sr.npy'}")
    assert r.returncode == 0, r.stderr
    assert "tensor<2x4xf32>" in r.stdout
    assert "stablehlo.abs" in r.stdout and "stablehlo.negate" not in r.stdout  # the else branch
    assert "stablehlo.case" not in r.stdout

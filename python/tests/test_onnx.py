"""rlx.onnx against onnxruntime 1.32 on the same models and inputs: the API (get_inputs /
get_outputs / run), a small CNN, MiniLM exported to ONNX (python/tests/onnx_bert.py: no torch)
also compared with rlx's own BERT (SentenceEmbedder), and the same model after onnxruntime's
transformer optimizer (com.microsoft SkipLayerNormalization, BiasGelu).

Tolerances: the CNN and the small models atol 1e-5 (f32, reassociation in GEMM/conv only);
MiniLM's last hidden state atol 1e-4 against ORT (6 layers of f32 GEMMs, LayerNorm, erf),
its mean-pooled normalized embedding atol 1e-5 against SentenceEmbedder.
"""

from __future__ import annotations

import os

import numpy as np
import pytest

import rlx
import rlx.onnx

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

from model_files import model_dir  # noqa: E402
from pjrt_plugin import pjrt_devices  # noqa: E402


def _ort(model) -> "ort.InferenceSession":
    data = model if isinstance(model, (str, os.PathLike)) else model.SerializeToString()
    return ort.InferenceSession(data, providers=["CPUExecutionProvider"])


def _model(nodes, inputs, outputs, inits=(), opset=17):
    g = helper.make_graph(nodes, "g", inputs, outputs, list(inits))
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])


def test_api_matches_onnxruntime():
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((4, 8)).astype(np.float32), "w")
    m = _model(
        [
            helper.make_node("MatMul", ["x", "w"], ["h"]),
            helper.make_node("Tanh", ["h"], ["y"]),
            helper.make_node("ArgMax", ["h"], ["idx"], axis=1, keepdims=0),
        ],
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])],
        [
            helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 8]),
            helper.make_tensor_value_info("idx", TensorProto.INT64, ["batch"]),
        ],
        [w],
    )
    ref, sess = _ort(m), rlx.onnx.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    for a, b in ((sess.get_inputs(), ref.get_inputs()), (sess.get_outputs(), ref.get_outputs())):
        assert [(x.name, x.shape, x.type) for x in a] == [(x.name, x.shape, x.type) for x in b]
    for batch in (3, 1):  # two shapes of the symbolic dim
        x = rng.standard_normal((batch, 4)).astype(np.float32)
        got, want = sess.run(None, {"x": x}), ref.run(None, {"x": x})
        np.testing.assert_allclose(got[0], want[0], atol=1e-5)
        np.testing.assert_array_equal(got[1], want[1])
        (only,) = sess.run(["idx"], {"x": x})
        np.testing.assert_array_equal(only, want[1])
    assert sess.get_providers() == ["CPUExecutionProvider"]


def test_cnn_matches_onnxruntime():
    rng = np.random.default_rng(1)
    f = lambda *s: rng.standard_normal(s).astype(np.float32)  # noqa: E731
    inits = [
        numpy_helper.from_array(f(8, 3, 3, 3) * 0.3, "cw"),
        numpy_helper.from_array(f(8), "cb"),
        numpy_helper.from_array(np.abs(f(8)) + 0.5, "scale"),
        numpy_helper.from_array(f(8), "bias"),
        numpy_helper.from_array(f(8), "mean"),
        numpy_helper.from_array(np.abs(f(8)) + 0.1, "var"),
        numpy_helper.from_array(f(5, 8), "fw"),
        numpy_helper.from_array(f(5), "fb"),
    ]
    m = _model(
        [
            helper.make_node("Conv", ["x", "cw", "cb"], ["c"], pads=[1, 1, 1, 1], strides=[2, 2]),
            helper.make_node("BatchNormalization", ["c", "scale", "bias", "mean", "var"], ["bn"]),
            helper.make_node("Relu", ["bn"], ["r"]),
            helper.make_node("MaxPool", ["r"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
            helper.make_node("GlobalAveragePool", ["p"], ["gap"]),
            helper.make_node("Flatten", ["gap"], ["flat"]),
            helper.make_node("Gemm", ["flat", "fw", "fb"], ["logits"], transB=1),
            helper.make_node("Softmax", ["logits"], ["y"], axis=1),
        ],
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 16, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 5])],
        inits,
    )
    x = f(2, 3, 16, 16)
    np.testing.assert_allclose(
        rlx.onnx.InferenceSession(m.SerializeToString()).run(None, {"x": x})[0],
        _ort(m).run(None, {"x": x})[0],
        atol=1e-5,
    )


# The importer's fast forms against ORT: ConvTranspose whose windows tile the output (a GEMM
# and a transpose; DBNet's 2x2 stride-2 upsampling), beside the general interior-padded
# convolution; a [N, C, H, 1] Conv as a 1-D one (magika); Resize nearest as one gather,
# integer upsampling as one broadcast.
@pytest.mark.parametrize(
    "op,shape,attrs,extra",
    [
        ("ConvTranspose", (2, 3, 5, 4), dict(kernel_shape=[2, 2], strides=[2, 2]), (3, 4, 2, 2)),
        ("ConvTranspose", (1, 3, 7), dict(kernel_shape=[3], strides=[3]), (3, 2, 3)),
        ("ConvTranspose", (1, 3, 5, 4), dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 0, 0]),
         (3, 2, 3, 3)),
        ("Conv", (2, 3, 9, 1), dict(kernel_shape=[3, 1], strides=[2, 1], pads=[1, 0, 1, 0]),
         (4, 3, 3, 1)),
        ("Resize", (1, 2, 3, 4), dict(mode="nearest", coordinate_transformation_mode="asymmetric",
                                      nearest_mode="floor"), [1, 1, 2, 3]),
        ("Resize", (1, 2, 3, 4), dict(mode="nearest"), [1, 1, 2.5, 1.5]),
        ("Resize", (1, 2, 3, 4), dict(mode="linear"), [1, 1, 2, 2]),
    ],
)
def test_fast_forms_match_onnxruntime(op, shape, attrs, extra):
    rng = np.random.default_rng(4)
    x = rng.standard_normal(shape).astype(np.float32)
    if op in ("Conv", "ConvTranspose"):
        out_channels = extra[0] if op == "Conv" else extra[1]
        inits = [numpy_helper.from_array(rng.standard_normal(extra).astype(np.float32), "w"),
                 numpy_helper.from_array(rng.standard_normal(out_channels).astype(np.float32), "b")]
        node = helper.make_node(op, ["x", "w", "b"], ["y"], **attrs)
    else:
        inits = [numpy_helper.from_array(np.array(extra, np.float32), "scales")]
        node = helper.make_node(op, ["x", "", "scales"], ["y"], **attrs)
    m = _model([node], [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(shape))],
               [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)
    got = rlx.onnx.InferenceSession(m.SerializeToString()).run(None, {"x": x})[0]
    want = _ort(m).run(None, {"x": x})[0]
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, atol=1e-5)


def test_per_channel_affine_ops_after_a_conv_fold_into_it():
    """Conv (+ bias) -> Mul / Add / Sub by per-channel or scalar constants -> BatchNormalization
    folds into the conv's weights and bias at import (ORT's Conv*Fusion); a conv output that
    something else also reads is left alone."""
    rng = np.random.default_rng(5)
    f = lambda *s: rng.standard_normal(s).astype(np.float32)  # noqa: E731
    inits = [numpy_helper.from_array(a, n) for a, n in [
        (f(6, 3, 3, 3), "w"), (f(6), "b"), (f(6, 1, 1), "s"), (np.float32(0.5), "t"),
        (f(1, 6, 1, 1), "u"), (np.abs(f(6)) + 0.5, "gamma"), (f(6), "beta"), (f(6), "mean"),
        (np.abs(f(6)) + 0.1, "var")]]
    nodes = [
        helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("Mul", ["c", "s"], ["m"]),
        helper.make_node("Add", ["t", "m"], ["a"]),
        helper.make_node("Sub", ["a", "u"], ["d"]),
        helper.make_node("BatchNormalization", ["d", "gamma", "beta", "mean", "var"], ["bn"]),
        helper.make_node("Relu", ["bn"], ["y"]),
        helper.make_node("Conv", ["x", "w"], ["c2"]),  # read twice: not folded
        helper.make_node("Mul", ["c2", "s"], ["m2"]),
        helper.make_node("Add", ["c2", "m2"], ["z"]),
    ]
    m = _model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 8, 8])],
               [helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in ("y", "z")],
               inits)
    x = f(2, 3, 8, 8)
    for got, want in zip(rlx.onnx.InferenceSession(m.SerializeToString()).run(None, {"x": x}),
                         _ort(m).run(None, {"x": x})):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    text = str(rlx.onnx.load(m.SerializeToString(), {"x": (2, 3, 8, 8)}))
    ops = [line.split("=")[1].split()[0] for line in text.splitlines() if " = " in line]
    assert ops.count("conv") == 2 and ops.count("mul") == 1 and "sub" not in ops, text


def test_load_gives_a_graph_to_compile():
    rng = np.random.default_rng(2)
    w = rng.standard_normal((6, 3)).astype(np.float32)
    m = _model(
        [helper.make_node("MatMul", ["x", "w"], ["h"]), helper.make_node("Sigmoid", ["h"], ["y"])],
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 6])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(w, "w")],
    )
    g, params = rlx.onnx.load(m.SerializeToString(), {"x": (2, 6)}, return_params=True)
    assert isinstance(g, rlx.Graph) and list(params) == ["w"]
    exe = rlx.Session().compile(g)
    exe.set_param("w", params["w"])
    x = rng.standard_normal((2, 6)).astype(np.float32)
    np.testing.assert_allclose(exe.run(x=x), 1 / (1 + np.exp(-(x @ w))), rtol=1e-5)


def test_errors_name_the_problem():
    m = _model(
        [helper.make_node("Relu", ["x"], ["a"]), helper.make_node("NoSuchOp", ["a"], ["y"], name="n1")],
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])],
    )
    sess = rlx.onnx.InferenceSession(m.SerializeToString())
    with pytest.raises(rlx.Error, match=r"NoSuchOp \(opset 17\): 1 node\(s\) 'n1'"):
        sess.run(None, {"x": np.zeros(2, np.float32)})
    info = rlx.onnx.model_info(m.SerializeToString())
    assert info["unsupported"] == [("", "NoSuchOp", 17, ["n1"])]
    with pytest.raises(rlx.Error, match="not a valid ONNX model"):
        rlx.onnx.InferenceSession(m.SerializeToString()[:-5])
    with pytest.raises(rlx.Error, match="providers"):
        rlx.onnx.InferenceSession(m.SerializeToString(), providers=["CUDAExecutionProvider"])


def test_error_quoting_bytes_that_are_not_utf8_is_an_rlx_error():
    # A malformed file's node name is quoted as it is; bytes that are not UTF-8 become \xNN
    # escapes in the message instead of a UnicodeDecodeError raised by the binding.
    m = _model(
        [helper.make_node("NoSuchOp", ["x"], ["y"], name="node_AAAA")],
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])],
    )
    data = m.SerializeToString().replace(b"node_AAAA", b"node_\xff\xfeAA")
    with pytest.raises(rlx.Error, match=r"NoSuchOp \(opset 17\): 1 node\(s\) 'node_\\xff\\xfeAA'"):
        rlx.onnx.load(data)
    assert rlx.onnx.model_info(data)["unsupported"] == [("", "NoSuchOp", 17, ["node_\\xff\\xfeAA"])]


# ---- control flow: If / Loop / Scan onto cond / while_loop / scan, against onnxruntime.

_F, _I64, _B = TensorProto.FLOAT, TensorProto.INT64, TensorProto.BOOL


def _vi(name, elem, shape):
    return helper.make_tensor_value_info(name, elem, shape)


def _init(name, value, dtype):
    return numpy_helper.from_array(np.array(value, dtype), name)


def _both(m, feeds, atol=1e-6):
    """Runs `m` on rlx (CPU, and XLA when the PJRT plugin is installed) and onnxruntime and
    checks every output agrees; returns rlx's CPU outputs."""
    theirs = _ort(m).run(None, feeds)
    results = []
    for device in ["cpu"] + (["pjrt:0"] if pjrt_devices() else []):
        ours = rlx.onnx.InferenceSession(m.SerializeToString(), device=device).run(None, feeds)
        assert len(ours) == len(theirs)
        for a, b in zip(ours, theirs):
            assert a.shape == b.shape and a.dtype == b.dtype, device
            np.testing.assert_allclose(a, b, atol=atol, rtol=1e-6, err_msg=device)
        results.append(ours)
    return results[0]


def _loop_body(nodes, carried, outs):
    """A Loop body (iteration_num, cond_in, *carried) -> (cond_out, *outs); (name, shape) pairs."""
    inputs = [_vi("i", _I64, []), _vi("c_in", _B, [])] + [_vi(n, _F, s) for n, s in carried]
    return helper.make_graph(nodes, "body", inputs, [_vi("c_out", _B, [])] + [_vi(n, _F, s) for n, s in outs])


def test_if_on_a_runtime_bool_captures_outer_values():
    # then reads a weight (a float initializer of 20 elements: a param, captured as an operand)
    # and x; else reads x only. The condition is a graph input: a cond, not a fold.
    rng = np.random.default_rng(1)
    w = numpy_helper.from_array(rng.standard_normal((4, 5)).astype(np.float32), "w")
    then_g = helper.make_graph([helper.make_node("Mul", ["x", "w"], ["t"])], "then", [], [_vi("t", _F, [4, 5])])
    else_g = helper.make_graph([helper.make_node("Neg", ["x"], ["e"])], "else", [], [_vi("e", _F, [4, 5])])
    m = _model(
        [helper.make_node("If", ["c"], ["y"], then_branch=then_g, else_branch=else_g)],
        [_vi("c", _B, []), _vi("x", _F, [4, 5])],
        [_vi("y", _F, [4, 5])],
        [w],
    )
    g, _ = rlx.onnx.load(m.SerializeToString(), {"c": [], "x": [4, 5]}, return_params=True)
    assert "cond" in str(g)
    x = rng.standard_normal((4, 5)).astype(np.float32)
    for c in (True, False):
        _both(m, {"c": np.array(c), "x": x})


def test_loop_with_a_counter_and_a_dynamic_condition():
    # y = y / 2 + i while sum(y) > 1, at most M times (M a run-time input): a while_loop.
    body = _loop_body(
        [
            helper.make_node("Cast", ["i"], ["fi"], to=_F),
            helper.make_node("Mul", ["y_in", "half"], ["h"]),
            helper.make_node("Add", ["h", "fi"], ["y_out"]),
            helper.make_node("ReduceSum", ["y_out"], ["s"], keepdims=0),
            helper.make_node("Greater", ["s", "one"], ["c_out"]),
        ],
        [("y_in", [3])],
        [("y_out", [3])],
    )
    m = _model(
        [helper.make_node("Loop", ["M", "c0", "x"], ["y"], body=body)],
        [_vi("M", _I64, []), _vi("c0", _B, []), _vi("x", _F, [3])],
        [_vi("y", _F, [3])],
        [_init("half", 0.5, np.float32), _init("one", 1.0, np.float32)],
    )
    g = rlx.onnx.load(m.SerializeToString(), {"M": [], "c0": [], "x": [3]})
    assert "while_loop" in str(g)
    x = [8.0, -1.0, 3.0]
    for trips, c0, x in [(10, True, x), (2, True, x), (10, False, [1.0] * 3), (0, True, [5.0] * 3)]:
        _both(m, {"M": np.array(trips, np.int64), "c0": np.array(c0), "x": np.array(x, np.float32)})


def test_loop_with_scan_outputs_and_constant_trip_count():
    # M = 6 (an initializer), no condition: scan outputs stacked per iteration [6, 2, 3].
    body = _loop_body(
        [
            helper.make_node("Cast", ["i"], ["fi"], to=_F),
            helper.make_node("Mul", ["x", "fi"], ["xi"]),
            helper.make_node("Add", ["acc_in", "xi"], ["acc_out"]),
            helper.make_node("Sin", ["acc_out"], ["row"]),
            helper.make_node("Identity", ["c_in"], ["c_out"]),
        ],
        [("acc_in", [2, 3])],
        [("acc_out", [2, 3]), ("row", [2, 3])],
    )
    m = _model(
        [helper.make_node("Loop", ["M", "", "x"], ["acc", "rows"], body=body)],
        [_vi("x", _F, [2, 3])],
        [_vi("acc", _F, [2, 3]), _vi("rows", _F, [6, 2, 3])],
        [_init("M", 6, np.int64)],
    )
    x = np.random.default_rng(2).standard_normal((2, 3)).astype(np.float32)
    _, rows = _both(m, {"x": x}, atol=1e-5)
    assert rows.shape == (6, 2, 3)


def test_scan_cumulative_sum_reverse_axis_1():
    # Scan input x [2, 5, 3] over axis 1 in reverse: the state is the reverse cumulative sum,
    # output 0 stacked back reversed on axis 1 (== a reverse cumsum), output 1 (x_t * 2) in
    # visiting order on the last axis.
    body = helper.make_graph(
        [
            helper.make_node("Add", ["s_in", "x_t"], ["s_out"]),
            helper.make_node("Identity", ["s_out"], ["cum"]),
            helper.make_node("Add", ["x_t", "x_t"], ["dbl"]),
        ],
        "body",
        [_vi("s_in", _F, [2, 3]), _vi("x_t", _F, [2, 3])],
        [_vi("s_out", _F, [2, 3]), _vi("cum", _F, [2, 3]), _vi("dbl", _F, [2, 3])],
    )
    node = helper.make_node(
        "Scan",
        ["s0", "x"],
        ["s", "cum", "dbl"],
        body=body,
        num_scan_inputs=1,
        scan_input_axes=[1],
        scan_input_directions=[1],
        scan_output_axes=[1, -1],
        scan_output_directions=[1, 0],
    )
    m = _model(
        [node],
        [_vi("s0", _F, [2, 3]), _vi("x", _F, [2, 5, 3])],
        [_vi("s", _F, [2, 3]), _vi("cum", _F, [2, 5, 3]), _vi("dbl", _F, [2, 3, 5])],
    )
    x = np.random.default_rng(3).standard_normal((2, 5, 3)).astype(np.float32)
    _, cum, _ = _both(m, {"s0": np.zeros((2, 3), np.float32), "x": x}, atol=1e-5)
    np.testing.assert_allclose(cum, np.flip(np.cumsum(np.flip(x, 1), 1), 1), atol=1e-5)


def test_if_nested_in_a_loop_reads_values_two_scopes_out():
    # The body's If (on i % 3 == 0) adds or subtracts x, a main-graph input the branches read
    # through the loop body, to the loop state.
    then_g = helper.make_graph([helper.make_node("Add", ["acc_in", "x"], ["t"])], "then", [], [_vi("t", _F, [3])])
    else_g = helper.make_graph([helper.make_node("Sub", ["acc_in", "x"], ["e"])], "else", [], [_vi("e", _F, [3])])
    body = _loop_body(
        [
            helper.make_node("Mod", ["i", "three"], ["r"]),
            helper.make_node("Equal", ["r", "zero"], ["even"]),
            helper.make_node("If", ["even"], ["acc_out"], then_branch=then_g, else_branch=else_g),
            helper.make_node("Mul", ["acc_out", "acc_out"], ["sq"]),
            helper.make_node("Identity", ["c_in"], ["c_out"]),
        ],
        [("acc_in", [3])],
        [("acc_out", [3]), ("sq", [3])],
    )
    m = _model(
        [helper.make_node("Loop", ["M", "", "x"], ["acc", "sq"], body=body)],
        [_vi("x", _F, [3])],
        [_vi("acc", _F, [3]), _vi("sq", _F, [7, 3])],
        [_init("M", 7, np.int64), _init("three", 3, np.int64), _init("zero", 0, np.int64)],
    )
    _both(m, {"x": np.array([1.5, -2.0, 0.25], np.float32)})


def test_loop_scan_outputs_with_a_dynamic_condition_is_an_error():
    body = _loop_body(
        [
            helper.make_node("Add", ["y_in", "y_in"], ["y_out"]),
            helper.make_node("ReduceSum", ["y_out"], ["s"], keepdims=0),
            helper.make_node("Less", ["s", "lim"], ["c_out"]),
        ],
        [("y_in", [2])],
        [("y_out", [2]), ("y_out", [2])],
    )
    m = _model(
        [helper.make_node("Loop", ["M", "", "x"], ["y", "ys"], body=body, name="grow")],
        [_vi("x", _F, [2])],
        [_vi("y", _F, [2]), _vi("ys", _F, [None, 2])],
        [_init("M", 9, np.int64), _init("lim", 100, np.float32)],
    )
    # onnxruntime honours the body's condition even without a cond input: the loop can stop
    # early, so the number of rows of ys is only known at run time.
    sess = rlx.onnx.InferenceSession(m.SerializeToString())
    with pytest.raises(rlx.Error, match=r"node 'grow' \(Loop, opset 17\): has scan outputs and a condition"):
        sess.run(None, {"x": np.array([1, 2], np.float32)})
    # Without the scan output it is a while_loop that stops where onnxruntime's does.
    del m.graph.node[0].output[1]
    del m.graph.output[1]
    del m.graph.node[0].attribute[0].g.output[2]
    _both(m, {"x": np.array([1, 2], np.float32)})


# Texts whose every word is in the BERT vocabulary (so whitespace splitting is WordPiece).
_TEXTS = ["the cat sat on the mat", "hello world", "a quick brown fox jumps over the lazy dog"]


@pytest.fixture(scope="module")
def minilm(tmp_path_factory):
    d = model_dir()
    if d is None:
        pytest.skip("all-MiniLM-L6-v2 is not installed (scripts/install_deps.sh)")
    from onnx_bert import export_bert

    path = str(tmp_path_factory.mktemp("onnx") / "minilm.onnx")
    export_bert(d, path)
    vocab = {w: i for i, w in enumerate(open(os.path.join(d, "vocab.txt")).read().splitlines())}
    rows = [[vocab["[CLS]"]] + [vocab[w] for w in t.split()] + [vocab["[SEP]"]] for t in _TEXTS]
    n = max(map(len, rows))
    ids = np.array([r + [0] * (n - len(r)) for r in rows], np.int64)
    feed = {"input_ids": ids, "attention_mask": (ids != 0).astype(np.int64), "token_type_ids": np.zeros_like(ids)}
    return d, path, feed


def test_minilm_matches_onnxruntime_and_rlx_bert(minilm):
    d, path, feed = minilm
    got = rlx.onnx.InferenceSession(path).run(None, feed)[0]
    want = _ort(path).run(None, feed)[0]
    np.testing.assert_allclose(got, want, atol=1e-4)
    # Mean pooling over the real tokens + L2 normalisation = sentence-transformers' embedding.
    mask = feed["attention_mask"][..., None].astype(np.float32)
    emb = (got * mask).sum(1) / mask.sum(1)
    emb /= np.linalg.norm(emb, axis=1, keepdims=True)
    ref = rlx.models.SentenceEmbedder(d).encode(_TEXTS)
    np.testing.assert_allclose(emb, ref, atol=1e-5)


def test_minilm_fused_by_onnxruntime_matches(minilm, tmp_path):
    _, path, feed = minilm
    optimizer = pytest.importorskip("onnxruntime.transformers.optimizer")
    fused = optimizer.optimize_model(path, model_type="bert", num_heads=12, hidden_size=384, opt_level=0)
    out = str(tmp_path / "fused.onnx")
    fused.save_model_to_file(out)
    ops = {(n.domain, n.op_type) for n in onnx.load(out).graph.node}
    assert ("com.microsoft", "SkipLayerNormalization") in ops and ("com.microsoft", "BiasGelu") in ops
    # Attention fused too, its mask_index the [batch] key lengths (ReduceSum of the 0/1 mask): the
    # feed's rows are padded to different lengths.
    assert ("com.microsoft", "Attention") in ops
    got = rlx.onnx.InferenceSession(out).run(None, feed)[0]
    np.testing.assert_allclose(got, _ort(out).run(None, feed)[0], atol=1e-4)

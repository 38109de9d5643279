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
    got = rlx.onnx.InferenceSession(out).run(None, feed)[0]
    np.testing.assert_allclose(got, _ort(out).run(None, feed)[0], atol=1e-4)

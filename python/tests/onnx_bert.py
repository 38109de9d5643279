"""Exports a BERT checkpoint (a Hugging Face model directory with model.safetensors) to ONNX with
onnx.helper, as torch.onnx exports BertModel at opset 17: word + position + token-type
embeddings, per layer Q/K/V MatMul + Add, heads split by Reshape to a shape computed from the
input (Shape -> Gather -> Unsqueeze -> Concat), Transpose, MatMul / Div / Add(mask) / Softmax,
Erf GELU, LayerNormalization; the output is last_hidden_state [batch, seq, hidden], or with
pooled=True the sentence-transformers embedding: attention-masked mean pooling and L2
normalisation (torch F.normalize, eps 1e-12), output embeddings [batch, hidden], each row of unit
length (bench/export_minilm_onnx.py writes that form for the benchmarks).

No torch needed: the weights are read from the safetensors file with numpy. The exported graph
keeps the symbolic batch and sequence dims, so the importer's shape folding is exercised.
"""

from __future__ import annotations

import json
import os
import struct

import numpy as np

_ST_DTYPES = {"F32": np.float32, "F16": np.float16, "I64": np.int64}


def read_safetensors(path: str) -> dict[str, np.ndarray]:
    with open(path, "rb") as f:
        data = f.read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8 : 8 + n])
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        start, end = info["data_offsets"]
        arr = np.frombuffer(data[8 + n + start : 8 + n + end], dtype=_ST_DTYPES[info["dtype"]])
        out[name] = arr.reshape(info["shape"]).astype(np.float32)
    return out


def export_bert(model_dir: str, out_path: str, pooled: bool = False) -> None:
    """Writes the ONNX model of the BERT checkpoint in `model_dir` to `out_path` (inputs
    input_ids, attention_mask, token_type_ids: int64[batch, sequence]); `pooled` selects the
    output (see the module doc)."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    cfg = json.load(open(os.path.join(model_dir, "config.json")))
    w = read_safetensors(os.path.join(model_dir, "model.safetensors"))
    prefix = "bert." if any(k.startswith("bert.") for k in w) else ""
    hidden, heads = cfg["hidden_size"], cfg["num_attention_heads"]
    head_dim = hidden // heads
    eps = cfg.get("layer_norm_eps", 1e-12)
    inits, nodes = [], []
    counter = [0]

    def name(base: str) -> str:
        counter[0] += 1
        return f"{base}_{counter[0]}"

    def init(n: str, arr: np.ndarray) -> str:
        inits.append(numpy_helper.from_array(np.array(arr, order="C"), n))
        return n

    def node(op: str, ins: list[str], **attrs) -> str:
        out = name(op.lower())
        nodes.append(helper.make_node(op, ins, [out], name=out, **attrs))
        return out

    def linear(x: str, base: str) -> str:
        wt = init(base + ".weight_t", w[prefix + base + ".weight"].T)  # [in, out]
        return node("Add", [node("MatMul", [x, wt]), init(base + ".bias", w[prefix + base + ".bias"])])

    def layer_norm(x: str, base: str) -> str:
        return node(
            "LayerNormalization",
            [x, init(base + ".weight", w[prefix + base + ".weight"]), init(base + ".bias", w[prefix + base + ".bias"])],
            axis=-1,
            epsilon=eps,
        )

    ids, mask, types = "input_ids", "attention_mask", "token_type_ids"
    # Positions 0..S-1 from the input's shape (Shape -> Gather -> Range), as exporters emit.
    shape = node("Shape", [ids])
    seq = node("Gather", [shape, init("one_i", np.array(1, np.int64))], axis=0)
    positions = node("Range", [init("zero_i", np.array(0, np.int64)), seq, init("one_step", np.array(1, np.int64))])
    emb = node("Gather", [init("word_emb", w[prefix + "embeddings.word_embeddings.weight"]), ids])
    emb = node("Add", [emb, node("Gather", [init("pos_emb", w[prefix + "embeddings.position_embeddings.weight"]), positions])])
    emb = node("Add", [emb, node("Gather", [init("type_emb", w[prefix + "embeddings.token_type_embeddings.weight"]), types])])
    x = layer_norm(emb, "embeddings.LayerNorm")
    # Additive mask (1 - mask) * float32 min, [B, 1, 1, S]: two Unsqueezes, as torch exports it
    # and as ONNX Runtime's attention fusion matches it.
    m = node("Unsqueeze", [mask, init("ax1_mask", np.array([1], np.int64))])
    m = node("Cast", [node("Unsqueeze", [m, init("ax2_mask", np.array([2], np.int64))])], to=TensorProto.FLOAT)
    m = node("Mul", [node("Sub", [init("one_f", np.array(1, np.float32)), m]), init("fmin", np.array(np.finfo(np.float32).min, np.float32))])
    batch = node("Gather", [shape, init("zero_idx", np.array(0, np.int64))], axis=0)
    b_u = node("Unsqueeze", [batch, init("ax0", np.array([0], np.int64))])
    s_u = node("Unsqueeze", [seq, init("ax0b", np.array([0], np.int64))])
    split_shape = node("Concat", [b_u, s_u, init("heads_dims", np.array([heads, head_dim], np.int64))], axis=0)
    merge_shape = node("Concat", [b_u, s_u, init("hidden_dim", np.array([hidden], np.int64))], axis=0)
    scale = init("sqrt_d", np.array(np.sqrt(head_dim), np.float32))
    for i in range(cfg["num_hidden_layers"]):
        p = f"encoder.layer.{i}."

        def heads_of(t: str) -> str:
            return node("Transpose", [node("Reshape", [t, split_shape])], perm=[0, 2, 1, 3])

        q = heads_of(linear(x, p + "attention.self.query"))
        k = node("Transpose", [node("Reshape", [linear(x, p + "attention.self.key"), split_shape])], perm=[0, 2, 3, 1])
        v = heads_of(linear(x, p + "attention.self.value"))
        scores = node("Add", [node("Div", [node("MatMul", [q, k]), scale]), m])
        ctx = node("MatMul", [node("Softmax", [scores], axis=-1), v])
        ctx = node("Reshape", [node("Transpose", [ctx], perm=[0, 2, 1, 3]), merge_shape])
        x = layer_norm(node("Add", [linear(ctx, p + "attention.output.dense"), x]), p + "attention.output.LayerNorm")
        h = linear(x, p + "intermediate.dense")
        gelu = node("Mul", [node("Mul", [h, node("Add", [node("Erf", [node("Div", [h, init(name("sqrt2"), np.array(np.sqrt(2), np.float32))])]), init(name("one"), np.array(1, np.float32))])]), init(name("half"), np.array(0.5, np.float32))])
        x = layer_norm(node("Add", [linear(gelu, p + "output.dense"), x]), p + "output.LayerNorm")
    if pooled:
        # sum(h * m, 1) / max(sum(m, 1), 1e-9), then x / max(||x||, 1e-12), as sentence-transformers.
        mf = node("Cast", [node("Unsqueeze", [mask, init("ax_last", np.array([-1], np.int64))])], to=TensorProto.FLOAT)
        ax1 = init("ax1", np.array([1], np.int64))
        total = node("ReduceSum", [node("Mul", [x, mf]), ax1], keepdims=0)
        count = node("Clip", [node("ReduceSum", [mf, ax1], keepdims=0), init("count_min", np.array(1e-9, np.float32))])
        mean = node("Div", [total, count])
        norm = node("Max", [node("ReduceL2", [mean], axes=[1], keepdims=1), init("norm_eps", np.array(1e-12, np.float32))])
        x, out_name, out_dims = node("Div", [mean, norm]), "embeddings", ["batch", hidden]
    else:
        out_name, out_dims = "last_hidden_state", ["batch", "sequence", hidden]
    nodes.append(helper.make_node("Identity", [x], [out_name], name="output"))
    int_input = lambda n: helper.make_tensor_value_info(n, TensorProto.INT64, ["batch", "sequence"])  # noqa: E731
    graph = helper.make_graph(
        nodes,
        "bert",
        [int_input(ids), int_input(mask), int_input(types)],
        [helper.make_tensor_value_info(out_name, TensorProto.FLOAT, out_dims)],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="rlx-tests")
    onnx.checker.check_model(model)
    onnx.save(model, out_path)

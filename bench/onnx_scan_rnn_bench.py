#!/usr/bin/env python3
"""An ONNX Scan RNN on rlx.onnx.InferenceSession against onnxruntime, one thread each: Scan over
T steps of h = tanh(x_t @ W + h @ R + b), batch B, hidden H (default T 200, B 8, H 64; the body's
two [B, H] x [H, H] GEMMs are the small-GEMM case of the CPU gemm kernel). Prints milliseconds
per run (median and min of repeated runs) for both, their ratio and the max abs difference.

Run: RLX_NUM_THREADS=1 PYTHONPATH=build/python python3 bench/onnx_scan_rnn_bench.py
"""
import argparse
import os

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from peers_common import time_runs


def scan_rnn_model(steps, batch, hidden):
    """The model: inputs h0 [B, H] and xs [T, B, H]; outputs h_T and hs [T, B, H]."""
    rng = np.random.default_rng(0)
    w = (rng.standard_normal((hidden, hidden)) / np.sqrt(hidden)).astype(np.float32)
    r = (rng.standard_normal((hidden, hidden)) / np.sqrt(hidden)).astype(np.float32)
    b = (0.1 * rng.standard_normal(hidden)).astype(np.float32)
    body = helper.make_graph(
        [
            helper.make_node("MatMul", ["x_t", "W"], ["xw"]),
            helper.make_node("MatMul", ["h", "R"], ["hr"]),
            helper.make_node("Add", ["xw", "hr"], ["s"]),
            helper.make_node("Add", ["s", "b"], ["sb"]),
            helper.make_node("Tanh", ["sb"], ["h_next"]),
            helper.make_node("Identity", ["h_next"], ["y_t"]),
        ],
        "rnn_cell",
        [helper.make_tensor_value_info("h", TensorProto.FLOAT, [batch, hidden]),
         helper.make_tensor_value_info("x_t", TensorProto.FLOAT, [batch, hidden])],
        [helper.make_tensor_value_info("h_next", TensorProto.FLOAT, [batch, hidden]),
         helper.make_tensor_value_info("y_t", TensorProto.FLOAT, [batch, hidden])],
        initializer=[numpy_helper.from_array(w, "W"), numpy_helper.from_array(r, "R"),
                     numpy_helper.from_array(b, "b")],
    )
    scan = helper.make_node("Scan", ["h0", "xs"], ["h_T", "hs"], num_scan_inputs=1, body=body)
    graph = helper.make_graph(
        [scan], "scan_rnn",
        [helper.make_tensor_value_info("h0", TensorProto.FLOAT, [batch, hidden]),
         helper.make_tensor_value_info("xs", TensorProto.FLOAT, [steps, batch, hidden])],
        [helper.make_tensor_value_info("h_T", TensorProto.FLOAT, [batch, hidden]),
         helper.make_tensor_value_info("hs", TensorProto.FLOAT, [steps, batch, hidden])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model.SerializeToString()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--hidden", type=int, default=64)
    ap.add_argument("--budget", type=float, default=2.0, help="seconds of timed runs per runtime")
    args = ap.parse_args()
    if os.environ.get("RLX_NUM_THREADS") != "1":
        print("note: RLX_NUM_THREADS is not 1 (set it for the one-thread comparison)")
    import onnxruntime as ort
    import rlx.onnx

    model = scan_rnn_model(args.steps, args.batch, args.hidden)
    rng = np.random.default_rng(1)
    feeds = {"h0": rng.standard_normal((args.batch, args.hidden)).astype(np.float32),
             "xs": rng.standard_normal((args.steps, args.batch, args.hidden)).astype(np.float32)}
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.inter_op_num_threads = 1
    ort_sess = ort.InferenceSession(model, so, providers=["CPUExecutionProvider"])
    rlx_sess = rlx.onnx.InferenceSession(model)
    want = ort_sess.run(None, feeds)
    got = rlx_sess.run(None, feeds)
    diff = max(float(np.max(np.abs(np.asarray(g) - w))) for g, w in zip(got, want))
    t_rlx, t_rlx_min = time_runs(lambda: rlx_sess.run(None, feeds), args.budget)
    t_ort, t_ort_min = time_runs(lambda: ort_sess.run(None, feeds), args.budget)
    print(f"ONNX Scan RNN, T {args.steps}, batch {args.batch}, hidden {args.hidden}, 1 thread:")
    print(f"  rlx          {t_rlx * 1e3:8.3f} ms (min {t_rlx_min * 1e3:.3f})")
    print(f"  onnxruntime  {t_ort * 1e3:8.3f} ms (min {t_ort_min * 1e3:.3f})")
    print(f"  rlx / ort    {t_rlx / t_ort:8.2f}   max |diff| {diff:.2e}")


if __name__ == "__main__":
    main()

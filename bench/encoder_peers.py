#!/usr/bin/env python3
"""The encoder-layer peers of bench/cpu_bench.cc: JAX (jit, XLA CPU) and ONNX Runtime (CPU EP).

Reads what `rlx_bench_cpu --section encoder --out DIR` wrote (DIR/b<batch>/: meta.json, x.npy,
params/<name>.npy, rlx_out.npy), builds the same post-LN BERT layer in jax.numpy and as an ONNX
graph (opset 17) with those weights, checks both outputs against rlx's (max abs diff) and prints
median latencies and the ratios rlx/JAX and rlx/ORT. Exits 1 when an output does not match.

Threads: every peer gets the thread count rlx used (meta.json "threads": RLX_NUM_THREADS or the
physical cores), as bench/peers_common.py sets them up.
"""
import argparse
import glob
import json
import math
import os
import sys

import numpy as np

from peers_common import configure_threads, max_diff, ort_session, peer_versions, time_runs

TOLERANCE = 2e-3  # max abs diff on layer-normed f32 outputs of magnitude ~1


def load(dirname):
    with open(os.path.join(dirname, "meta.json")) as f:
        meta = json.load(f)
    x = np.load(os.path.join(dirname, "x.npy"))
    params = {
        os.path.basename(p)[:-len(".npy")]: np.load(p)
        for p in glob.glob(os.path.join(dirname, "params", "*.npy"))
    }
    out_path = os.path.join(dirname, "rlx_out.npy")
    rlx_out = np.load(out_path) if os.path.exists(out_path) else None
    return meta, x, params, rlx_out


# ---- JAX


def jax_layer(meta):
    """The layer of rlx::models::build_encoder_block (one layer, rlx/models/encoder_block.h) in
    jax.numpy."""
    import jax
    import jax.numpy as jnp

    heads, eps = meta["heads"], meta["eps"]

    def layer(x, p):
        b, s, h = x.shape
        dh = h // heads

        def linear(t, name):
            return t @ p[name + ".weight"] + p[name + ".bias"]

        def split(t):  # [B,S,H] -> [B,heads,S,dh]
            return t.reshape(b, s, heads, dh).transpose(0, 2, 1, 3)

        def norm(t, name):
            mean = t.mean(-1, keepdims=True)
            var = ((t - mean)**2).mean(-1, keepdims=True)
            return (t - mean) * jax.lax.rsqrt(var + eps) * p[name + ".weight"] + p[name + ".bias"]

        q, k, v = (split(linear(x, "attention." + n)) for n in "qkv")
        scores = (q @ k.transpose(0, 1, 3, 2)) * (1.0 / math.sqrt(dh))
        a = jax.nn.softmax(scores, axis=-1) @ v
        a = a.transpose(0, 2, 1, 3).reshape(b, s, h)
        hid = norm(x + linear(a, "attention.out"), "attention.norm")
        f = jax.nn.gelu(linear(hid, "ffn.in"), approximate=False)
        return norm(hid + linear(f, "ffn.out"), "ffn.norm")

    return jax.jit(layer)


def run_jax(meta, x, params, budget_s):
    import jax

    fn = jax_layer(meta)
    xd = jax.device_put(x)
    pd = {k: jax.device_put(v) for k, v in params.items()}
    out = np.asarray(fn(xd, pd))
    return (out, *time_runs(lambda: fn(xd, pd).block_until_ready(), budget_s))


# ---- ONNX Runtime


def onnx_layer(meta, params):
    """The same layer as an ONNX graph (opset 17) with the weights as initializers."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    b, s, h, heads = meta["batch"], meta["seq"], meta["hidden"], meta["heads"]
    dh = h // heads
    nodes, inits = [], [numpy_helper.from_array(v, name) for name, v in params.items()]
    counter = [0]

    def const(name, array):
        inits.append(numpy_helper.from_array(np.asarray(array), name))
        return name

    def op(kind, inputs, **attrs):
        counter[0] += 1
        out = f"{kind.lower()}_{counter[0]}"
        nodes.append(helper.make_node(kind, inputs, [out], **attrs))
        return out

    def linear(t, name):
        return op("Add", [op("MatMul", [t, name + ".weight"]), name + ".bias"])

    heads_shape = const("heads_shape", np.array([b, s, heads, dh], np.int64))
    hidden_shape = const("hidden_shape", np.array([b, s, h], np.int64))
    scale = const("scale", np.array(1.0 / math.sqrt(dh), np.float32))
    half = const("half", np.array(0.5, np.float32))
    one = const("one", np.array(1.0, np.float32))
    sqrt2 = const("sqrt2", np.array(math.sqrt(2.0), np.float32))

    def heads_of(t, perm):
        return op("Transpose", [op("Reshape", [t, heads_shape])], perm=perm)

    def norm(t, name):
        return op("LayerNormalization", [t, name + ".weight", name + ".bias"], axis=-1,
                  epsilon=meta["eps"])

    q = heads_of(linear("x", "attention.q"), [0, 2, 1, 3])
    kt = heads_of(linear("x", "attention.k"), [0, 2, 3, 1])  # k transposed: [B,heads,dh,S]
    v = heads_of(linear("x", "attention.v"), [0, 2, 1, 3])
    probs = op("Softmax", [op("Mul", [op("MatMul", [q, kt]), scale])], axis=-1)
    a = op("Transpose", [op("MatMul", [probs, v])], perm=[0, 2, 1, 3])
    a = op("Reshape", [a, hidden_shape])
    hid = norm(op("Add", ["x", linear(a, "attention.out")]), "attention.norm")
    f = linear(hid, "ffn.in")
    erf = op("Erf", [op("Div", [f, sqrt2])])  # exact GELU: x/2 (1 + erf(x / sqrt 2))
    f = op("Mul", [op("Mul", [f, op("Add", [erf, one])]), half])
    y = norm(op("Add", [hid, linear(f, "ffn.out")]), "ffn.norm")

    graph = helper.make_graph(nodes, "encoder_layer",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [b, s, h])],
                              [helper.make_tensor_value_info(y, TensorProto.FLOAT, [b, s, h])],
                              inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8  # the IR version of opset 17, which every ORT release since 1.11 loads
    onnx.checker.check_model(model)
    return model.SerializeToString(), y


def run_ort(meta, x, params, budget_s):
    model, output = onnx_layer(meta, params)
    sess = ort_session(model, meta["threads"])
    feed = {"x": x}
    out = sess.run([output], feed)[0]
    return (out, *time_runs(lambda: sess.run([output], feed), budget_s))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dir", required=True, help="the --out directory of rlx_bench_cpu")
    ap.add_argument("--budget", type=float, default=2.0, help="timed seconds per peer and batch")
    args = ap.parse_args()

    dirs = sorted(glob.glob(os.path.join(args.dir, "b[0-9]*")),
                  key=lambda d: int(os.path.basename(d)[1:]))
    if not dirs:
        sys.exit(f"encoder_peers: no b<batch> directories in {args.dir}")
    with open(os.path.join(dirs[0], "meta.json")) as f:
        threads = json.load(f)["threads"]
    cpus = configure_threads(threads)
    peers = peer_versions()
    print(f"\n== 3b. encoder layer: rlx vs JAX {peers.get('jax', '-')} (jit, XLA CPU) vs "
          f"ONNX Runtime {peers.get('ort', '-')} (CPU EP), same weights and input;\n"
          f"threads: rlx {threads}, ORT intra_op {threads} inter_op 1 sequential, JAX pinned to "
          f"CPUs {cpus}, XLA_FLAGS='{os.environ['XLA_FLAGS']}'")
    print(f"{'batch':>6} {'rlx ms (min)':>18} {'JAX ms (min)':>18} {'ORT ms (min)':>18} "
          f"{'rlx/JAX':>8} {'rlx/ORT':>8} {'|JAX-rlx|':>10} {'|ORT-rlx|':>10} {'|ORT-JAX|':>10}")
    ok = True
    for d in dirs:
        meta, x, params, rlx_out = load(d)
        res = {}
        if "jax" in peers:
            res["jax"] = run_jax(meta, x, params, args.budget)
        if "ort" in peers:
            res["ort"] = run_ort(meta, x, params, args.budget)

        def ms(peer, which=1):  # which: 1 median, 2 min
            return res[peer][which] * 1e3 if peer in res else float("nan")

        def cell(median, minimum):
            return f"{median:.3f} ({minimum:.3f})"

        def diff(peer, other=None):  # None: not measured; NaN: mismatched NaNs (a failure)
            ref = rlx_out if other is None else (res[other][0] if other in res else None)
            return None if peer not in res or ref is None else max_diff(res[peer][0], ref)

        # null when the bench skipped rlx's run (a reference-fallback path too slow to time)
        rlx, rlx_min = (float("nan") if meta[k] is None else meta[k]
                        for k in ("rlx_median_ms", "rlx_min_ms"))
        diffs = [diff("jax"), diff("ort"), diff("ort", "jax")]
        ok = ok and all(v is None or v <= TOLERANCE for v in diffs)  # False for NaN
        times = [cell(rlx, rlx_min), cell(ms("jax"), ms("jax", 2)), cell(ms("ort"), ms("ort", 2))]
        print(f"{meta['batch']:>6} " + " ".join(f"{t:>18}" for t in times) +
              f" {rlx / ms('jax'):>8.2f} {rlx / ms('ort'):>8.2f} " +
              " ".join(f"{'-' if v is None else f'{v:.2e}':>10}" for v in diffs))
    print("median (min) of the timed runs after a warmup; rlx/X = rlx median latency / X's "
          "(< 1: rlx is faster);\n|A-B| = max abs difference of the layer outputs (all must be "
          f"<= {TOLERANCE:g}).")
    if not ok:
        print("MISMATCH: an output differs beyond the tolerance")
        sys.exit(1)


if __name__ == "__main__":
    main()

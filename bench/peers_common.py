"""Helpers shared by the peer scripts of the rlx benchmarks (bench/encoder_peers.py,
bench/embed_peers.py): thread pinning of JAX/XLA, ONNX Runtime sessions with rlx's thread
count, timing and output comparison.

Threads: every peer gets the thread count rlx used. ORT: intra_op_num_threads = threads,
inter_op 1, sequential. JAX/XLA has no thread-count option; the process is pinned to `threads`
CPUs (sched_setaffinity, before jax loads), which XLA's CPU client and its Eigen pool size
themselves by, and XLA_FLAGS gets --xla_cpu_multi_thread_eigen=true unless the caller set it.
"""
import os
import statistics
import time

import numpy as np


def pin_threads(threads):
    """Restricts this process to `threads` of its allowed CPUs; returns the CPUs it runs on."""
    cpus = sorted(os.sched_getaffinity(0))
    if threads < len(cpus):
        os.sched_setaffinity(0, cpus[:threads])
    return sorted(os.sched_getaffinity(0))


def configure_threads(threads):
    """Pins this process to `threads` CPUs and sets the JAX/XLA environment; call before
    importing jax. Returns the CPUs the process runs on."""
    cpus = pin_threads(threads)
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    if "xla_cpu_multi_thread_eigen" not in os.environ.get("XLA_FLAGS", ""):
        os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") +
                                   " --xla_cpu_multi_thread_eigen=true").strip()
    # The Rust tokenizers' pool (embed_peers.py) sizes itself by this, else by all CPUs.
    os.environ.setdefault("RAYON_NUM_THREADS", str(threads))
    return cpus


def peer_versions(modules=(("jax", "jax"), ("ort", "onnxruntime"))):
    """{peer name: version} of the importable peers; prints how to install the missing ones."""
    peers = {}
    for name, module in modules:
        try:
            peers[name] = __import__(module).__version__
        except ImportError:
            print(f"{module} is not installed: pip install -r bench/requirements.txt")
    return peers


def ort_session(model, threads):
    """An ONNX Runtime CPU-EP session of `model` (bytes or a path) with intra_op = threads,
    inter_op 1, sequential execution and every graph optimization."""
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    return ort.InferenceSession(model, so, providers=["CPUExecutionProvider"])


def time_runs(fn, budget_s, min_runs=10, max_runs=2000, warmup=1, clock="wall"):
    """`warmup` untimed calls, then calls until min_runs and budget_s (wall) are both reached (at
    most max_runs): (median, min) in seconds, each call timed in wall time or, with clock "cpu"
    (rlx_bench_embed's RLX_BENCH_CPU_TIME=1), in this process's CPU time."""
    if clock not in ("wall", "cpu"):
        raise ValueError(f"time_runs: clock must be 'wall' or 'cpu', got {clock!r}")
    tick = time.process_time if clock == "cpu" else time.perf_counter
    for _ in range(warmup):
        fn()
    samples = []
    start = time.perf_counter()
    while len(samples) < max_runs and (len(samples) < min_runs or
                                       time.perf_counter() - start < budget_s):
        t = tick()
        fn()
        samples.append(tick() - t)
    return statistics.median(samples), min(samples)


def max_diff(a, b):
    """Largest |a - b|; NaN when either output holds a NaN."""
    return float(np.max(np.abs(np.asarray(a, np.float64) - np.asarray(b, np.float64))))

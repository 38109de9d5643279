#!/usr/bin/env python3
"""Control flow on the CPU: rlx's native scan / while_loop against jax.jit(lax.scan /
lax.while_loop) on XLA's CPU client, same threads, in one run (issue 16's benchmark).

1. A 256-step scan of a [64, 256] tanh-RNN cell, h' = tanh(h W + x_t U + b) (W, U [256, 256]),
   forward: milliseconds per call and the ratio rlx / jax (target <= 1.0), outputs compared.
2. Forward + backward: jax's value_and_grad of sum(ys) against rlx.grad of the same graph (the
   scan's vjp: a residual scan plus a reverse scan of the body's vjp), loss and grads compared.
3. Per-iteration overhead of a trivial while loop (i < n: i + 1): (t(n1) - t(n0)) / (n1 - n0)
   in microseconds per iteration.

rlx is timed through rlx._core._bench_run (Executable::run in a C++ loop, no Python per call);
jax with block_until_ready. Threads: rlx.set_num_threads(threads); JAX is pinned to the same
CPUs (bench/peers_common.py). Prints the CPU model and flags.

Run: PYTHONPATH=build/python python3 bench/control_flow_bench.py [--threads N]
"""
import argparse
import os
import time

import numpy as np

from peers_common import configure_threads, max_diff, time_runs


def cpu_info():
    model, flags = "unknown CPU", []
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name") and model == "unknown CPU":
                    model = line.split(":", 1)[1].strip()
                if line.startswith("flags") and not flags:
                    have = set(line.split(":", 1)[1].split())
                    flags = [f for f in ("avx2", "fma", "avx512f", "avx512bw", "avx512vl",
                                         "avx512_vnni", "avx512_bf16", "amx_tile") if f in have]
    except OSError:
        pass
    return f"{model}, {os.cpu_count()} logical CPUs, flags: {' '.join(flags)}"


def rlx_seconds(rlx, exe, feeds, n, repeats=5):
    """Best of `repeats` mean seconds per Executable::run over n runs (C++ loop)."""
    return min(rlx._core._bench_run(exe, feeds, n) for _ in range(repeats))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--steps", type=int, default=256)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--budget", type=float, default=2.0, help="seconds per jax timing")
    ap.add_argument("--rounds", type=int, default=8, help="interleaved rlx / jax timing rounds")
    args = ap.parse_args()
    cpus = configure_threads(args.threads)
    import jax
    import jax.numpy as jnp
    from jax import lax

    import rlx

    rlx.set_num_threads(args.threads)
    print(f"CPU: {cpu_info()}")
    print(f"threads: {args.threads} (rlx.set_num_threads; jax pinned to CPUs {cpus}); "
          f"jax {jax.__version__}, XLA_FLAGS={os.environ.get('XLA_FLAGS', '')}")

    T, B, H = args.steps, args.batch, args.hidden
    rng = np.random.default_rng(0)
    xs = rng.uniform(-1, 1, (T, B, H)).astype(np.float32)
    h0 = rng.uniform(-1, 1, (B, H)).astype(np.float32)
    w = (rng.uniform(-1, 1, (H, H)) / np.sqrt(H)).astype(np.float32)
    u = (rng.uniform(-1, 1, (H, H)) / np.sqrt(H)).astype(np.float32)
    b = rng.uniform(-0.1, 0.1, (H,)).astype(np.float32)
    feeds = {"xs": xs, "h0": h0, "w": w, "u": u, "b": b}

    # ---- 1. forward scan
    g = rlx.Graph("rnn")
    gxs, gh0 = g.input("xs", xs.shape), g.input("h0", h0.shape)
    gw, gu, gb = g.input("w", w.shape), g.input("u", u.shape), g.input("b", b.shape)

    def cell(w_, u_, b_, h, x):
        n = h.graph.tanh(h @ w_ + x @ u_ + b_)
        return n, n

    hT, ys = rlx.scan(cell, gh0, gxs, consts=(gw, gu, gb))
    g.outputs(hT, ys)
    exe = rlx.Session("cpu").compile(g)
    got = exe.run(**feeds)

    def jcell(c, x):
        n = jnp.tanh(c @ w + x @ u + b)
        return n, n

    jscan = jax.jit(lambda h, x: lax.scan(jcell, h, x))
    want = jax.block_until_ready(jscan(h0, xs))
    diff = max(max_diff(got[0], want[0]), max_diff(got[1], want[1]))
    # Interleaved rounds, best of each (a shared machine's load hits both alike).
    t_rlx = t_jax = float("inf")
    for _ in range(args.rounds):
        t_rlx = min(t_rlx, rlx_seconds(rlx, exe, feeds, 5, repeats=1))
        t_jax = min(t_jax, time_runs(lambda: jax.block_until_ready(jscan(h0, xs)),
                                     args.budget / args.rounds, min_runs=5)[1])
    print(f"\n1. scan of a [{B},{H}] tanh-RNN cell, {T} steps, forward (max |rlx - jax| = "
          f"{diff:.2e})")
    print(f"   rlx cpu   {t_rlx * 1e3:8.3f} ms  ({t_rlx / T * 1e6:6.2f} us/step)")
    print(f"   jax       {t_jax * 1e3:8.3f} ms  ({t_jax / T * 1e6:6.2f} us/step)")
    print(f"   rlx / jax {t_rlx / t_jax:8.2f}x")
    # The cell alone as a graph (both GEMMs). Inside the scan the pipeline's
    # hoist-loop-invariants computes x_t @ U for every step as one GEMM before the loop only
    # when a step's product has fewer than 8 rows (batch < 8 here; docs/ir.md "Hoisting out of
    # loops"), so the difference is the scan's overhead (minus what batching saves).
    cg = rlx.Graph("cell")
    ch, cx = cg.input("h", h0.shape), cg.input("x", h0.shape)
    cg.outputs(cell(cg.input("w", w.shape), cg.input("u", u.shape), cg.input("b", b.shape),
                    ch, cx)[0])
    cexe = rlx.Session("cpu").compile(cg)
    t_cell = rlx_seconds(rlx, cexe, {"h": h0, "x": xs[0], "w": w, "u": u, "b": b}, 200, 8)
    print(f"   rlx: the cell compiled alone {t_cell * 1e6:.2f} us per run; the scan beyond {T} "
          f"runs of it: {(t_rlx / T - t_cell) * 1e6:+.2f} "
          f"us/step")

    # ---- 2. forward + backward
    loss = jax.jit(jax.value_and_grad(
        lambda w_, u_, b_: jnp.sum(lax.scan(
            lambda c, x: (jnp.tanh(c @ w_ + x @ u_ + b_),) * 2, h0, xs)[1]), argnums=(0, 1, 2)))
    jax.block_until_ready(loss(w, u, b))
    t_jax_fb = time_runs(lambda: jax.block_until_ready(loss(w, u, b)), args.budget)[1]
    lg = rlx.Graph("rnn_loss")
    lxs, lh0 = lg.input("xs", xs.shape), lg.input("h0", h0.shape)
    lw, lu, lb = lg.param("w", w.shape), lg.param("u", u.shape), lg.param("b", b.shape)
    _, lys = rlx.scan(cell, lh0, lxs, consts=(lw, lu, lb))
    lg.outputs(lg.reduce_sum(lys, axes=[0, 1, 2]))
    print(f"\n2. forward + backward (d sum(ys) / d W, U, b)")
    print(f"   jax       {t_jax_fb * 1e3:8.3f} ms")
    gg = rlx.grad(lg, ["w", "u", "b"], loss=0)
    gexe = rlx.Session("cpu").compile(gg)
    for name, value in (("w", w), ("u", u), ("b", b)):
        gexe.set_param(name, value)
    gout = gexe.run(xs=xs, h0=h0)
    jl, jg = loss(w, u, b)
    gdiff = max(max_diff(a, b_) for a, b_ in zip(gout, [jl, *jg]))
    t_rlx_fb = rlx_seconds(rlx, gexe, {"xs": xs, "h0": h0}, 3)
    print(f"   rlx cpu   {t_rlx_fb * 1e3:8.3f} ms  (max |rlx - jax| over loss and grads = "
          f"{gdiff:.2e})")
    print(f"   rlx / jax {t_rlx_fb / t_jax_fb:8.2f}x")

    # ---- 3. per-iteration overhead of a trivial while loop
    wg = rlx.Graph("count")
    gn = wg.input("n", (), "i32")
    wg.outputs(rlx.while_loop(lambda n_, i: i < n_, lambda n_, i: i + 1,
                              wg.constant(np.array(0, np.int32)), consts=(gn,)))
    wexe = rlx.Session("cpu").compile(wg)
    jloop = jax.jit(lambda n: lax.while_loop(lambda i: i < n, lambda i: i + 1, jnp.int32(0)))
    n0, n1 = 10, 100010
    for n in (n0, n1):
        out = wexe.run(n=np.int32(n))
        assert int(out[0] if isinstance(out, list) else out) == n == int(jloop(np.int32(n)))
    r0 = rlx_seconds(rlx, wexe, {"n": np.int32(n0)}, 200)
    r1 = rlx_seconds(rlx, wexe, {"n": np.int32(n1)}, 3)
    j0 = time_runs(lambda: jax.block_until_ready(jloop(np.int32(n0))), args.budget / 2)[1]
    j1 = time_runs(lambda: jax.block_until_ready(jloop(np.int32(n1))), args.budget / 2)[1]
    per_rlx = (r1 - r0) / (n1 - n0) * 1e6
    per_jax = (j1 - j0) / (n1 - n0) * 1e6
    print(f"\n3. trivial while loop (i < n: i + 1), per iteration ((t({n1}) - t({n0})) / "
          f"{n1 - n0})")
    print(f"   rlx cpu   {per_rlx:8.4f} us/iteration  (a run of {n0}: {r0 * 1e6:.1f} us)")
    print(f"   jax       {per_jax:8.4f} us/iteration  (a run of {n0}: {j0 * 1e6:.1f} us)")
    print(f"   rlx / jax {per_rlx / per_jax:8.2f}x")


if __name__ == "__main__":
    t0 = time.time()
    main()
    print(f"\n(total {time.time() - t0:.0f} s)")

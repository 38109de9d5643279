"""The IR collectives on the XLA CPU plugin, pmap-style: one replica's graph compiled with
rlx.compile_replicated(..., layout="stacked") runs on 2 and 4 devices with its collectives across
the replicas, against NumPy definitions (and rlx's evaluator): sums and means within f32
reassociation (1e-5 + 1e-5 * |ref|), max / min / all_gather / all_to_all bit-equal; plus the
layout errors."""

from __future__ import annotations

import numpy as np
import pytest

import rlx
from rlx import _core
from pjrt_plugin import pjrt_devices

needs_plugin = pytest.mark.skipif(not pjrt_devices(), reason="no PJRT plugin (lammps-jax-pjrt-cpu)")
rng = np.random.default_rng(21)

LAYOUTS = {
    "pair": [[0, 1]],
    "four": [[0, 1, 2, 3]],
    "pairs_adjacent": [[0, 1], [2, 3]],
    "pairs_strided": [[0, 2], [1, 3]],
}


def groups_of(layout):
    return {d: (grp, r) for grp in layout for r, d in enumerate(grp)}


def run(build, xs):
    g = rlx.Graph("c")
    g.outputs(build(g, g.input("x", xs.shape[1:], xs.dtype)))
    exe = rlx.compile_replicated(g, list(range(len(xs))), precision="always-f32", layout="stacked")
    assert exe.inputs[0][1] == xs.shape
    got = np.asarray(exe.run(x=xs))
    ref = _core.evaluate_spmd(g, [{"x": x} for x in xs])
    return got, np.stack([np.asarray(r) for r in ref])


@needs_plugin
@pytest.mark.parametrize("name", list(LAYOUTS))
@pytest.mark.parametrize("reduce,dtype", [(r, t) for t in ("float32", "int32")
                                          for r in ("sum", "max", "min", "mean")
                                          if not (r == "mean" and t == "int32")])  # mean: float
def test_all_reduce_on_replicas(name, dtype, reduce):
    layout = LAYOUTS[name]
    n = sum(len(g) for g in layout)
    xs = (rng.normal(size=(n, 3, 4)) * 100).astype(dtype)
    got, ref = run(lambda g, x: g.all_reduce(x, reduce, layout, "i"), xs)
    f = {"sum": np.sum, "max": np.max, "min": np.min, "mean": np.mean}[reduce]
    for d, (grp, _) in groups_of(layout).items():
        want = f(xs[grp].astype(np.float64), axis=0)
        if reduce in ("max", "min") or dtype == "int32":
            np.testing.assert_array_equal(got[d], want.astype(dtype))
        else:
            np.testing.assert_allclose(got[d], want, rtol=1e-5, atol=1e-5)
    if reduce in ("max", "min") or dtype == "int32":
        np.testing.assert_array_equal(got, ref)


@needs_plugin
@pytest.mark.parametrize("name", list(LAYOUTS))
@pytest.mark.parametrize("axis", [0, 1])
def test_gather_scatter_exchange_on_replicas(name, axis):
    layout = LAYOUTS[name]
    n = sum(len(g) for g in layout)
    xs = rng.normal(size=(n, 4, 8)).astype(np.float32)
    gathered, _ = run(lambda g, x: g.all_gather(x, axis, layout), xs)
    scattered, _ = run(lambda g, x: g.reduce_scatter(x, axis, layout), xs)
    exchanged, _ = run(lambda g, x: g.all_to_all(x, axis, 1 - axis, layout), xs)
    for d, (grp, r) in groups_of(layout).items():
        s = len(grp)
        np.testing.assert_array_equal(gathered[d], np.concatenate(xs[grp], axis=axis))
        np.testing.assert_allclose(scattered[d],
                                   np.split(xs[grp].astype(np.float64).sum(0), s, axis=axis)[r],
                                   rtol=1e-5, atol=1e-5)
        blocks = [np.split(xs[e], s, axis=axis)[r] for e in grp]
        np.testing.assert_array_equal(exchanged[d], np.concatenate(blocks, axis=1 - axis))


@needs_plugin
def test_layout_errors():
    g = rlx.Graph("c")
    x = g.input("x", (2, 3), "float32")
    g.outputs(g.all_reduce(x, "sum", [[0, 1], [2, 3]]))
    with pytest.raises(rlx.Error, match="layout must be 'concat' or 'stacked'"):
        rlx.compile_replicated(g, [0, 1, 2, 3], layout="pmap")
    with pytest.raises(rlx.Error, match=r"all_reduce \(node %.*name 4 devices, the run has 2"):
        rlx.compile_replicated(g, [0, 1], layout="stacked")


# shard_map-style (rlx.compile_shard_map): one data-parallel step of linear regression written per
# device with explicit all_reduce means, run on a 4-device mesh with the batch split, against
# the NumPy full-batch gradient and loss (f32: 1e-5 + 1e-5 * |ref|).
@needs_plugin
def test_shard_map_data_parallel_step_matches_numpy():
    b, n = 2, 4
    g = rlx.Graph("dp")
    x, y = g.input("x", (b, 3)), g.input("y", (b, 1))
    w = g.param("w", (3, 1))
    err = x @ w - y
    grad = g.all_reduce((g.transpose(x, (1, 0)) @ err) * (2.0 / b), "mean", axis_name="data",
                        axis_size=n)
    loss = g.all_reduce(g.reduce_mean(err * err, (0, 1)), "mean", axis_name="data", axis_size=n)
    g.outputs(grad, loss)
    mesh = rlx.Mesh({"data": n})
    exe = rlx.compile_shard_map(g, mesh, in_specs={"x": rlx.P("data"), "y": rlx.P("data")},
                                precision="always-f32")
    assert exe.inputs[0][1] == (b * n, 3)
    xs = rng.normal(size=(b * n, 3)).astype(np.float32)
    ys = rng.normal(size=(b * n, 1)).astype(np.float32)
    ws = rng.normal(size=(3, 1)).astype(np.float32)
    exe.set_param("w", ws)
    got_grad, got_loss = exe.run(x=xs, y=ys)
    e = xs.astype(np.float64) @ ws - ys
    np.testing.assert_allclose(got_grad, 2 * xs.T.astype(np.float64) @ e / (b * n), rtol=1e-5,
                               atol=1e-5)
    np.testing.assert_allclose(got_loss, np.mean(e * e), rtol=1e-5, atol=1e-5)
    assert "@SPMDFullToShardShape" in exe.kernel_report()

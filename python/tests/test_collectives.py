"""Collectives (all_reduce / all_gather / reduce_scatter / all_to_all) built from Python and run
on the reference evaluator's simulated device axis (rlx._core.evaluate_spmd) and on the CPU
backend's (rlx._core.run_spmd: clones of one executable on one thread per device), against jax's
collectives under jax.vmap(axis_name=...) for one group of all devices and against NumPy
definitions for the replica-group layouts [[0,1],[2,3]] and [[0,2],[1,3]]; plus the errors."""

from __future__ import annotations

import jax
import numpy as np
import pytest
from jax import lax

import rlx
from rlx import _core

jax.config.update("jax_enable_x64", True)
rng = np.random.default_rng(18)

LAYOUTS = {
    "one": [[0]],
    "pair": [[0, 1]],
    "four": [[0, 1, 2, 3]],
    "pairs_adjacent": [[0, 1], [2, 3]],
    "pairs_strided": [[0, 2], [1, 3]],
}


def run(build, xs, shape):
    g = rlx.Graph("c")
    g.outputs(build(g, g.input("x", shape, "f64")))
    feeds = [{"x": x} for x in xs]
    ref = [np.asarray(o) for o in _core.evaluate_spmd(g, feeds)]
    exe = rlx.Session().compile(g)
    cpu = _core.run_spmd([exe.clone() for _ in xs], feeds)
    for d, (r, c) in enumerate(zip(ref, cpu)):
        np.testing.assert_array_equal(np.asarray(c), r, err_msg=f"cpu device {d}")
    return ref


def groups_of(layout):
    return {d: (grp, r) for grp in layout for r, d in enumerate(grp)}


@pytest.mark.parametrize("name", list(LAYOUTS))
@pytest.mark.parametrize("reduce", ["sum", "max", "min", "mean"])
def test_all_reduce_matches_numpy(name, reduce):
    layout = LAYOUTS[name]
    n = sum(len(g) for g in layout)
    xs = rng.normal(size=(n, 3, 4))
    got = run(lambda g, x: g.all_reduce(x, reduce, layout, "i"), xs, (3, 4))
    f = {"sum": np.sum, "max": np.max, "min": np.min, "mean": np.mean}[reduce]
    for d, (grp, _) in groups_of(layout).items():
        np.testing.assert_allclose(got[d], f(xs[grp], axis=0), rtol=1e-12)


@pytest.mark.parametrize("name", list(LAYOUTS))
@pytest.mark.parametrize("axis", [0, 1])
def test_all_gather_reduce_scatter_all_to_all_match_numpy(name, axis):
    layout = LAYOUTS[name]
    n = sum(len(g) for g in layout)
    xs = rng.normal(size=(n, 4, 8))
    gathered = run(lambda g, x: g.all_gather(x, axis, layout), xs, (4, 8))
    scattered = run(lambda g, x: g.reduce_scatter(x, axis, layout), xs, (4, 8))
    exchanged = run(lambda g, x: g.all_to_all(x, axis, 1 - axis, layout), xs, (4, 8))
    for d, (grp, r) in groups_of(layout).items():
        s = len(grp)
        np.testing.assert_array_equal(gathered[d], np.concatenate(xs[grp], axis=axis))
        np.testing.assert_allclose(scattered[d], np.split(xs[grp].sum(0), s, axis=axis)[r],
                                   rtol=1e-12)
        blocks = [np.split(xs[e], s, axis=axis)[r] for e in grp]
        np.testing.assert_array_equal(exchanged[d], np.concatenate(blocks, axis=1 - axis))


# One group of every device (replica_groups absent, axis_size given) against jax's own
# collectives, mapped over a named axis by jax.vmap.
@pytest.mark.parametrize("n", [1, 2, 4])
def test_one_group_matches_jax_collectives(n):
    xs = rng.normal(size=(n, 4, 8))
    cases = [
        (lambda g, x: g.all_reduce(x, "sum", axis_name="i", axis_size=n),
         lambda x: lax.psum(x, "i")),
        (lambda g, x: g.all_reduce(x, "max", axis_name="i", axis_size=n),
         lambda x: lax.pmax(x, "i")),
        (lambda g, x: g.all_reduce(x, "mean", axis_name="i", axis_size=n),
         lambda x: lax.pmean(x, "i")),
        (lambda g, x: g.all_gather(x, 1, axis_name="i", axis_size=n),
         lambda x: lax.all_gather(x, "i", axis=1, tiled=True)),
        (lambda g, x: g.reduce_scatter(x, 0, axis_name="i", axis_size=n),
         lambda x: lax.psum_scatter(x, "i", scatter_dimension=0, tiled=True)),
    ]
    for build, ref in cases:
        got = run(build, xs, (4, 8))
        want = np.asarray(jax.vmap(ref, axis_name="i")(xs))
        for d in range(n):
            np.testing.assert_allclose(got[d], want[d], rtol=1e-12)


def test_errors_name_op_shape_and_group_size():
    g = rlx.Graph("c")
    x = g.input("x", (2, 3), "f32")
    with pytest.raises(rlx.Error, match=r"reduce_scatter.*not divisible by the group size 2"):
        g.reduce_scatter(x, 1, [[0, 1]])
    with pytest.raises(rlx.Error, match="give replica_groups or axis_size"):
        g.all_gather(x, 0)
    with pytest.raises(rlx.Error, match="same size"):
        g.all_gather(x, 0, [[0, 1], [2]])
    g.outputs(g.all_reduce(x, "sum", [[0, 1], [2, 3]]))
    with pytest.raises(rlx.Error, match="name 4 devices, the run has 2"):
        _core.evaluate_spmd(g, [{"x": np.zeros((2, 3), np.float32)}] * 2)

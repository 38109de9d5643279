"""rlx's random numbers against jax.random, bit for bit: the rng_key / threefry2x32 ops and the
Graph.random_* builders (rlx/ir/random.h) on the reference evaluator, the CPU backend and, when a
PJRT plugin is installed, pjrt:0, for random keys, shapes and dtypes; the compile seed as the key
of rng_key. jax runs with jax_threefry_partitionable=True (the default from jax 0.5.0), which is
the stream rlx implements.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax._src import prng

import rlx
from pjrt_plugin import pjrt_devices

jax.config.update("jax_enable_x64", True)  # f64 draws (as jax_refs.py does for every suite)
DEVICES = ["evaluate", "cpu"] + pjrt_devices()


@pytest.fixture(autouse=True)
def partitionable():
    with jax.threefry_partitionable(True):
        yield


def run(g, device, feeds=None, seed=0):
    feeds = feeds or {}
    if device == "evaluate":
        out = rlx.evaluate(g, feeds)
    else:
        out = rlx.Session(device).compile(g, seed=seed).run(feeds)
    return out if isinstance(out, list) else [out]


def key_words(k):
    return np.asarray(jax.random.key_data(k)).view(np.int32)


def u32(x):
    return np.asarray(x).view(np.uint32)


KEYS = [jax.random.PRNGKey(s) for s in (0, 1, 2**31 - 1, 2**40 + 3)]


@pytest.mark.parametrize("device", DEVICES)
def test_draws_equal_jax(device):
    g = rlx.Graph("draws")
    key = g.input("key", [2], "i32")
    shapes = [(), (1,), (7,), (3, 5), (2, 3, 4)]
    outs = [g.random_bits(key, s) for s in shapes]
    outs += [g.random_uniform(key, (6, 7), dt) for dt in ("f32", "f64", "f16", "bf16")]
    outs += [g.random_split(key, 5), g.random_fold_in(key, 12345), g.random_fold_in(key, 2**32 - 1),
             g.random_bernoulli(key, 0.25, (64,))]
    g.outputs(*outs)
    for k in KEYS:
        got = run(g, device, {"key": key_words(k)})
        want = [jax.random.bits(k, s, jnp.uint32) for s in shapes]
        want += [jax.random.uniform(k, (6, 7), dt)
                 for dt in (jnp.float32, jnp.float64, jnp.float16, jnp.bfloat16)]
        want += [jax.random.key_data(jax.random.split(k, 5)),
                 jax.random.key_data(jax.random.fold_in(k, 12345)),
                 jax.random.key_data(jax.random.fold_in(k, 2**32 - 1)),
                 jax.random.bernoulli(k, jnp.float32(0.25), (64,))]
        for i, (a, b) in enumerate(zip(got, want)):
            b = np.asarray(b)
            a = u32(a) if b.dtype == np.uint32 else np.asarray(a)
            assert a.dtype == b.dtype and a.shape == b.shape, (i, a.dtype, b.dtype, a.shape, b.shape)
            np.testing.assert_array_equal(a.reshape(-1).view(np.uint8), b.reshape(-1).view(np.uint8),
                                          err_msg=f"output {i}")


@pytest.mark.parametrize("device", DEVICES)
def test_threefry2x32_op_equals_jax_primitive(device):
    rng = np.random.default_rng(5)
    g = rlx.Graph("tf")
    ins = [g.input(n, s, "i32") for n, s in (("k0", [4, 1]), ("k1", [4, 1]), ("x0", []), ("x1", [9]))]
    g.outputs(*g.threefry2x32(*ins))
    w = {n: rng.integers(-2**31, 2**31, s, dtype=np.int64).astype(np.int32)
         for n, s in (("k0", (4, 1)), ("k1", (4, 1)), ("x0", ()), ("x1", (9,)))}
    y = run(g, device, w)
    b = np.broadcast_arrays(*[u32(w[n]) for n in ("k0", "k1", "x0", "x1")])
    want = prng.threefry2x32_p.bind(*map(jnp.asarray, b))
    for a, e in zip(y, want):
        np.testing.assert_array_equal(u32(a), np.asarray(e))


# A batch of keys (vmap over keys) and the sampler's per-row draw.
@pytest.mark.parametrize("device", DEVICES)
def test_batched_keys_are_vmap(device):
    keys = jax.random.split(jax.random.PRNGKey(9), 6)
    g = rlx.Graph("batched")
    k = g.input("keys", [6, 2], "i32")
    s = g.input("seed", [6], "i32")
    g.outputs(g.random_uniform(k, (3,)), g.random_uniform(g.random_fold_in(k, s), ()))
    seeds = np.array([0, 1, 2, 3, 2**31 - 1, 7], np.int32)
    got = run(g, device, {"keys": key_words(keys), "seed": seeds})
    f32 = jnp.float32  # explicit: with x64 on, jax's default dtype is f64
    np.testing.assert_array_equal(got[0], jax.vmap(lambda k: jax.random.uniform(k, (3,), f32))(keys))
    np.testing.assert_array_equal(got[1], jax.vmap(
        lambda k, d: jax.random.uniform(jax.random.fold_in(k, d), (), f32))(keys, u32(seeds)))


@pytest.mark.parametrize("device", DEVICES[1:])
def test_compile_seed_is_the_key_of_rng_key(device):
    g = rlx.Graph("seeded")
    g.outputs(g.random_bits(g.rng_key(), (16,)), g.rng_key(5))
    for seed in (0, 3, 2**40 + 1):
        bits, fixed = run(g, device, seed=seed)
        np.testing.assert_array_equal(u32(bits), jax.random.bits(jax.random.PRNGKey(seed), (16,), jnp.uint32))
        np.testing.assert_array_equal(fixed, key_words(jax.random.PRNGKey(5)))
    assert not np.array_equal(run(g, device, seed=1)[0], run(g, device, seed=2)[0])


def test_builder_errors():
    g = rlx.Graph("bad")
    f = g.input("f", [2])
    with pytest.raises(rlx.Error, match=r"random::bits: key must be i32\[\.\.\., 2\]"):
        g.random_bits(f, (3,))
    with pytest.raises(rlx.Error, match="random::uniform: dtype must be f32, f64, f16 or bf16"):
        g.random_uniform(g.rng_key(), (3,), "i32")

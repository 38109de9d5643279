"""The token sampler (rlx/models/sampling.h) against a NumPy reimplementation of each rule:
penalties (llama.cpp / HF repetition, OpenAI presence and frequency), top-k, top-p, min-p,
temperature and the inverse-CDF draw, in llama.cpp's order. The NumPy side gets the same uniform
draws (fed to the graph, or computed with jax.random for the graph's own stream), so ids must be
equal row for row; distributions are checked where the draws come from rlx's RNG. Also: greedy
is the argmax, seeds and steps key the draws, the ids on pjrt:0 equal the CPU's, and the edge
cases (top_k >= V, top_p = 1, equal logits, -inf, NaN, +inf).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import rlx
from pjrt_plugin import pjrt_devices

NEG_INF = np.float32(-np.inf)


def softmax(x):
    x = np.asarray(x, np.float32)
    e = np.exp(x - x.max())
    return (e / e.sum(dtype=np.float32)).astype(np.float32)


def np_sample(logits, p, history, u, k_max):
    """The sampler's rules, row by row, in float32 (sampling.h states them)."""
    B, V = logits.shape
    ids = np.zeros(B, np.int32)
    for b in range(B):
        l = np.where(np.isnan(logits[b]), NEG_INF, logits[b]).astype(np.float32)
        h = history[b][(history[b] >= 0) & (history[b] < V)]
        counts = np.bincount(h, minlength=V).astype(np.float32)
        rp = np.float32(p["repetition_penalty"][b])
        pen = np.where(l <= 0, l * rp, l / rp).astype(np.float32)
        pen = pen - (counts * np.float32(p["frequency_penalty"][b]) +
                     np.float32(p["presence_penalty"][b]))
        l = np.where(counts > 0, pen, l).astype(np.float32)
        K = min(k_max, V)
        order = np.argsort(-l, kind="stable")[:K]  # descending, ties to the lower id
        vals = l[order]
        pos = np.arange(K)
        tk = p["top_k"][b]
        keep = np.ones(K, bool) if tk <= 0 else pos < tk
        if p["top_p"][b] < 1:
            q = softmax(np.where(keep, vals, NEG_INF))
            before = np.concatenate([[np.float32(0)], np.cumsum(q, dtype=np.float32)[:-1]])
            keep &= (pos == 0) | (before < np.float32(p["top_p"][b]))
        if p["min_p"][b] > 0:
            keep &= (pos == 0) | (vals >= vals[0] + np.log(np.float32(p["min_p"][b])))
        t = np.float32(p["temperature"][b])
        if t <= 0:
            ids[b] = order[0]
            continue
        c = np.cumsum(softmax(np.where(keep, vals / t, NEG_INF)), dtype=np.float32)
        j = min(int(np.sum(c <= np.float32(u[b]) * c[-1])), int(keep.sum()) - 1)
        ids[b] = order[j]
    return ids


NAMES = ("temperature", "top_k", "top_p", "min_p", "repetition_penalty", "presence_penalty",
         "frequency_penalty")


def feeds(logits, p, history, seed=None, step=None, u=None):
    B = logits.shape[0]
    f = {"logits": logits.astype(np.float32), "sampler.history": history.astype(np.int32),
         "sampler.seed": np.zeros(B, np.int32) if seed is None else seed.astype(np.int32),
         "sampler.step": np.zeros(B, np.int32) if step is None else step.astype(np.int32)}
    for n in NAMES:
        f["sampler." + n] = np.asarray(p[n], np.int32 if n == "top_k" else np.float32)
    if u is not None:
        f["uniform"] = u.astype(np.float32)
    return f


def params(B, **over):
    p = {"temperature": np.ones(B), "top_k": np.zeros(B, np.int32), "top_p": np.ones(B),
         "min_p": np.zeros(B), "repetition_penalty": np.ones(B), "presence_penalty": np.zeros(B),
         "frequency_penalty": np.zeros(B)}
    for n, v in over.items():
        p[n] = np.broadcast_to(np.asarray(v), (B,)).copy()
    return p


def run(g, f, device="cpu", seed=0):
    return np.asarray(rlx.Session(device).compile(g, seed=seed).run(f))


RULES = {  # one rule switched on at a time, then all together
    "plain": {},
    "temperature": {"temperature": [0.3, 0.7, 1.5, 4.0]},
    "greedy": {"temperature": [0.0, -1.0, 0.0, 0.0]},
    "top_k": {"top_k": [1, 3, 10, 40]},
    "top_p": {"top_p": [0.1, 0.5, 0.9, 0.99]},
    "min_p": {"min_p": [0.01, 0.1, 0.3, 0.9]},
    "repetition": {"repetition_penalty": [1.1, 1.5, 3.0, 0.7]},
    "presence": {"presence_penalty": [0.5, 2.0, -1.0, 5.0]},
    "frequency": {"frequency_penalty": [0.3, 1.0, -0.5, 2.0]},
    "all": {"temperature": [0.6, 0.9, 1.3, 0.0], "top_k": [20, 0, 5, 40],
            "top_p": [0.8, 0.95, 1.0, 0.5], "min_p": [0.05, 0.0, 0.1, 0.02],
            "repetition_penalty": [1.2, 1.0, 1.5, 1.1], "presence_penalty": [0.5, 0.0, 1.0, 0.2],
            "frequency_penalty": [0.1, 0.5, 0.0, 0.3]},
}


@pytest.mark.parametrize("rule", RULES)
def test_each_rule_equals_numpy(rule):
    B, V, N, K = 64, 300, 16, 48
    rng = np.random.default_rng(list(RULES).index(rule))
    g = rlx._core.sampler_graph(B, V, N, K, uniform_input=True)
    exe = rlx.Session().compile(g)
    over = {n: np.tile(v, B // 4) for n, v in RULES[rule].items()}
    p = params(B, **over)
    mismatches = 0
    for trial in range(4):
        logits = (rng.standard_normal((B, V)) * rng.uniform(0.5, 4.0)).astype(np.float32)
        # Histories favour the top tokens so the penalties change the candidates; -1 = empty.
        top = np.argsort(-logits, axis=1)[:, :8]
        history = np.where(rng.random((B, N)) < 0.7,
                           np.take_along_axis(top, rng.integers(0, 8, (B, N)), 1),
                           rng.integers(-1, V, (B, N))).astype(np.int32)
        u = rng.random(B).astype(np.float32)
        want = np_sample(logits, p, history, u, K)
        got = np.asarray(exe.run(feeds(logits, p, history, u=u)))
        mismatches += int(np.sum(got != want))
    assert mismatches == 0, f"{mismatches} of {4 * B} rows differ from the NumPy rules"


def jax_uniform(compile_seed, seeds, steps):
    """The sampler's draw per row with jax.random: uniform(fold_in(fold_in(key, seed), step))."""
    with jax.threefry_partitionable(True):
        key = jax.random.PRNGKey(compile_seed)
        f = lambda s, t: jax.random.uniform(jax.random.fold_in(jax.random.fold_in(key, s), t), (),
                                            jnp.float32)
        return np.asarray(jax.vmap(f)(seeds.view(np.uint32), steps.view(np.uint32)))


DEVICES = ["cpu"] + pjrt_devices()


@pytest.mark.parametrize("device", DEVICES)
def test_draws_are_jax_random_and_devices_agree(device):
    B, V, N, K = 32, 1000, 8, 64
    rng = np.random.default_rng(11)
    g = rlx._core.sampler_graph(B, V, N, K)
    p = params(B, **{n: np.tile(v, B // 4) for n, v in RULES["all"].items()})
    seeds = rng.integers(-2**31, 2**31, B).astype(np.int32)
    for step in range(3):
        logits = (rng.standard_normal((B, V)) * 2).astype(np.float32)
        history = rng.integers(-1, V, (B, N)).astype(np.int32)
        steps = np.full(B, step, np.int32)
        for compile_seed in (0, 77):
            u = jax_uniform(compile_seed, seeds, steps)
            want = np_sample(logits, p, history, u, K)
            got = run(g, feeds(logits, p, history, seeds, steps), device, compile_seed)
            np.testing.assert_array_equal(got, want)


def test_seeds_and_steps():
    B, V = 16, 500
    g = rlx._core.sampler_graph(B, V, 1, 500)
    logits = np.zeros((B, V), np.float32)  # flat: the draw alone picks the token
    p = params(B)
    h = np.full((B, 1), -1, np.int32)
    zero = np.zeros(B, np.int32)
    a = run(g, feeds(logits, p, h, zero, zero))
    assert np.all(a == a[0])  # one seed and step: one draw for every row
    np.testing.assert_array_equal(run(g, feeds(logits, p, h, zero, zero)), a)  # deterministic
    per_row = run(g, feeds(logits, p, h, np.arange(B), zero))
    assert len(set(per_row.tolist())) >= 12  # 16 streams over 500 tokens
    assert per_row[0] == a[0]  # row 0 keeps seed 0: its draw does not depend on the others
    stepped = run(g, feeds(logits, p, h, np.arange(B), zero + 1))
    assert np.sum(stepped != per_row) >= 12
    assert np.sum(run(g, feeds(logits, p, h, zero, zero), seed=5) != a) >= 12


def test_distributions_follow_the_rules():
    """4000 draws of one row from rlx's own RNG (steps 0..3999): the token frequencies match the
    probabilities the rules give, within 5 standard deviations."""
    B, V, T = 1, 12, 4000
    logits = np.array([[2.0, 1.5, 1.0, 0.5, 0.0, -0.5, -1.0, -1.5, -2.0, -2.5, -3.0, NEG_INF]],
                      np.float32)
    g = rlx._core.sampler_graph(B, V, 1, V)
    exe = rlx.Session().compile(g)
    for over, probs in [
        ({"temperature": 1.0}, softmax(logits[0])),
        ({"temperature": 2.0}, softmax(logits[0] / 2)),
        ({"top_k": 3}, softmax(logits[0, :3])),
        ({"top_p": 0.7}, None),
        ({"min_p": 0.2}, None),
    ]:
        p = params(B, **over)
        if probs is None:
            probs = np.zeros(V, np.float32)
            # the kept set from the NumPy rules on fixed u; the probabilities renormalised on it
            kept = {int(np_sample(logits, p, np.full((1, 1), -1), np.array([x]), V)[0])
                    for x in np.linspace(0, 0.999999, 2001)}
            probs[sorted(kept)] = softmax(logits[0, sorted(kept)])
        probs = np.pad(probs, (0, V - len(probs)))
        counts = np.zeros(V)
        for t in range(T):
            f = feeds(logits, p, np.full((1, 1), -1), np.zeros(1), np.array([t]))
            counts[int(np.asarray(exe.run(f))[0])] += 1
        sd = np.sqrt(T * probs * (1 - probs)) + 1e-9
        assert np.all(np.abs(counts - T * probs) <= 5 * sd + 0.5), (over, counts, T * probs)


def test_edge_cases():
    V = 8
    g = rlx._core.sampler_graph(6, V, 2, V, uniform_input=True)
    exe = rlx.Session().compile(g)
    nan = np.float32(np.nan)
    logits = np.array([
        [0.0] * V,                                          # all equal
        [NEG_INF, 1.0, NEG_INF, 2.0, NEG_INF, 0.0, NEG_INF, NEG_INF],  # some -inf
        [NEG_INF] * V,                                      # all -inf -> token 0
        [nan, 1.0, nan, 0.5, 3.0, nan, nan, 0.0],           # NaN counts as -inf
        [nan] * V,                                          # all NaN -> token 0
        [0.0, 1.0, np.inf, 2.0, np.inf, 0.0, 0.0, 0.0],     # +inf wins (the first)
    ], np.float32)
    h = np.full((6, 2), -1, np.int32)
    B = 6
    for over in [{}, {"top_k": V + 5}, {"top_k": V}, {"top_p": 1.0}, {"temperature": 0.0},
                 {"top_p": 0.3, "min_p": 0.5}, {"repetition_penalty": 2.0}]:
        p = params(B, **over)
        for u in np.linspace(0, 0.999, 37):
            uu = np.full(B, u, np.float32)
            got = np.asarray(exe.run(feeds(logits, p, h, u=uu)))
            np.testing.assert_array_equal(got, np_sample(logits, p, h, uu, V), err_msg=str(over))
            assert got[1] in (1, 3, 5) and got[2] == 0 and got[3] in (1, 3, 4, 7)
            assert got[4] == 0 and got[5] == 2
    # all equal, temperature 1: the draw is uniform over the vocabulary (token = floor(u * V))
    p = params(B)
    for i in range(V):
        u = np.full(B, (i + 0.5) / V, np.float32)
        assert np.asarray(exe.run(feeds(logits, p, h, u=u)))[0] == i
    # temperature 0 is the argmax of the penalized logits (the history's token 4 is penalized)
    p = params(B, temperature=0.0, repetition_penalty=4.0)
    h4 = np.full((B, 2), 4, np.int32)
    got = np.asarray(exe.run(feeds(logits, p, h4, u=np.zeros(B, np.float32))))
    assert got[3] == 1  # 3.0 / 4 = 0.75 < 1.0
    np.testing.assert_array_equal(got, np_sample(logits, p, h4, np.zeros(B), V))


def test_top_k_beyond_the_candidates_reaches_every_candidate():
    B, V, K = 1, 100, 10
    g = rlx._core.sampler_graph(B, V, 1, K, uniform_input=True)
    exe = rlx.Session().compile(g)
    logits = np.linspace(5, -5, V, dtype=np.float32)[None] * 0.01  # nearly flat
    p = params(B, top_k=0)
    seen = {int(np.asarray(exe.run(feeds(logits, p, np.full((1, 1), -1), u=np.array([x]))))[0])
            for x in np.linspace(0, 0.999, 200)}
    assert seen == set(range(K))  # exactly the K best: tokens outside them are never drawn


def test_ties_with_history_tokens_order_by_id():
    """A penalized token that ties with others keeps its place by id (the candidates are ranked
    as lax.top_k ranks the whole penalized row), though it enters through the history's pool."""
    B, V, N, K = 3, 40, 4, 6
    g = rlx._core.sampler_graph(B, V, N, K, uniform_input=True)
    exe = rlx.Session().compile(g)
    logits = np.zeros((B, V), np.float32)
    logits[2, 30:] = 1.0  # row 2: ties at the top, one of them penalized into the tie below
    h = np.array([[3, 3, 0, -1], [39, 2, 7, 1], [31, 31, 31, 4]], np.int32)
    p = params(B, repetition_penalty=[2.0, 3.0, 1.0], presence_penalty=[0.0, 0.0, 1.0])
    for u in np.linspace(0, 0.999, 41):
        uu = np.full(B, u, np.float32)
        np.testing.assert_array_equal(np.asarray(exe.run(feeds(logits, p, h, u=uu))),
                                      np_sample(logits, p, h, uu, K))

"""The training API from Python: rlx.Trainer with rlx.AdamW / rlx.SGD against an independent
NumPy implementation of the same updates, a real dataset (scikit-learn's digits), the loss and
dropout builders, and safetensors load/save (bit-exact per dtype, interop with the safetensors
package, errors)."""

from __future__ import annotations

import gzip
import os
import threading

import numpy as np
import pytest

import rlx
from pjrt_plugin import pjrt_devices

# The CPU backend, plus the XLA CPU plugin's pjrt:0 when it is installed.
DEVICES = ["cpu"] + pjrt_devices()

# ---------------------------------------------------------------------------------------------
# A 2-layer MLP (tanh hidden layer, softmax cross-entropy) and its NumPy reference.

N, D, H, C = 16, 8, 12, 5


def mlp_graph(n=N, d=D, h=H, c=C, dtype="f32"):
    g = rlx.Graph("mlp")
    x = g.input("x", (n, d), dtype)
    y = g.input("y", (n,), "i32")
    w1, b1 = g.param("w1", (d, h), dtype), g.param("b1", (h,), dtype)
    w2, b2 = g.param("w2", (h, c), dtype), g.param("b2", (c,), dtype)
    logits = g.tanh(x @ w1 + b1) @ w2 + b2
    g.outputs(g.softmax_cross_entropy_loss(logits, y), logits)
    return g


def init_params(rng, d=D, h=H, c=C):
    return {
        "w1": (rng.standard_normal((d, h)) * 0.5).astype(np.float32),
        "b1": (rng.standard_normal(h) * 0.1).astype(np.float32),
        "w2": (rng.standard_normal((h, c)) * 0.5).astype(np.float32),
        "b2": (rng.standard_normal(c) * 0.1).astype(np.float32),
    }


def batches(rng, steps, n=N, d=D, c=C):
    return [
        {"x": rng.standard_normal((n, d)).astype(np.float32),
         "y": rng.integers(0, c, n).astype(np.int32)}
        for _ in range(steps)
    ]


def ref_loss_and_grads(p, x, y):
    """Forward and hand-written backward of the MLP in float64."""
    x = x.astype(np.float64)
    a = x @ p["w1"] + p["b1"]
    h = np.tanh(a)
    z = h @ p["w2"] + p["b2"]
    z_max = z.max(axis=1, keepdims=True)
    lse = np.log(np.exp(z - z_max).sum(axis=1, keepdims=True)) + z_max
    n = x.shape[0]
    loss = float(np.mean(lse[:, 0] - z[np.arange(n), y]))
    dz = np.exp(z - lse)
    dz[np.arange(n), y] -= 1.0
    dz /= n
    dh = dz @ p["w2"].T
    da = dh * (1.0 - h * h)
    grads = {"w2": h.T @ dz, "b2": dz.sum(0), "w1": x.T @ da, "b1": da.sum(0)}
    return loss, grads


def ref_train(params, data, lr, update, state_init):
    """Runs `update(p, g, state, t, lr) -> (p, state)` per param for each batch (float64)."""
    p = {k: v.astype(np.float64) for k, v in params.items()}
    state = {k: state_init(v) for k, v in p.items()}
    losses = []
    for t, b in enumerate(data, start=1):
        loss, grads = ref_loss_and_grads(p, b["x"], b["y"])
        losses.append(loss)
        for k in p:
            p[k], state[k] = update(p[k], grads[k], state[k], t, lr)
    return p, state, losses


def adamw_update(b1, b2, eps, wd):
    # torch.optim.AdamW / optax.adamw with bias correction (written from the paper, not rlx).
    def update(p, g, s, t, lr):
        m, v = s
        m = b1 * m + (1 - b1) * g
        v = b2 * v + (1 - b2) * g * g
        m_hat = m / (1 - b1**t)
        v_hat = v / (1 - b2**t)
        return p - lr * (m_hat / (np.sqrt(v_hat) + eps) + wd * p), (m, v)

    return update


def sgd_update(momentum, nesterov, wd):
    # torch.optim.SGD with dampening 0 (its first step sets buf = g', which is buf0 = 0 here).
    def update(p, g, buf, t, lr):
        g = g + wd * p
        buf = momentum * buf + g
        d = g + momentum * buf if nesterov else buf
        return p - lr * d, buf

    return update


def run_rlx(opt, params, data, lr, device="cpu"):
    # precision="f32": pjrt's default is auto-mixed-bf16 (bf16 matmul operands), off by 4e-4
    # in the first loss already; the CPU backend's default is f32 anyway.
    tr = rlx.Trainer(mlp_graph(), ["w1", "b1", "w2", "b2"], opt, params, session=device,
                     precision="f32")
    losses = [float(tr.step(b, lr)[0]) for b in data]
    return tr, losses


# f32 tolerance: 20 steps of f32 arithmetic (rlx) against float64 (reference). The observed
# max param error is 2e-7 (x86-64, CPU backend); 1e-5 absolute leaves 50x for reassociation,
# while a wrong formula is far off: no bias correction 4e-2, weight decay coupled into the
# gradient 3e-1, weight decay dropped 1e-2, heavy-ball instead of Nesterov 2e-2.
ATOL = 1e-5


@pytest.mark.parametrize("device", DEVICES)
def test_adamw_matches_numpy_reference(device):
    rng = np.random.default_rng(0)
    params, data = init_params(rng), batches(rng, 20)
    hp = dict(beta1=0.8, beta2=0.95, eps=1e-6, weight_decay=0.05)
    tr, losses = run_rlx(rlx.AdamW(**hp), params, data, 1e-2, device)
    zeros2 = lambda v: (np.zeros_like(v), np.zeros_like(v))  # noqa: E731
    ref_p, ref_s, ref_losses = ref_train(
        params, data, 1e-2, adamw_update(0.8, 0.95, 1e-6, 0.05), zeros2)
    assert tr.num_steps == 20
    np.testing.assert_allclose(losses, ref_losses, rtol=0, atol=ATOL)
    for k in params:
        assert tr.param(k).dtype == np.float32 and tr.param(k).shape == params[k].shape
        np.testing.assert_allclose(tr.param(k), ref_p[k], rtol=0, atol=ATOL, err_msg=k)
        np.testing.assert_allclose(tr.state(k, "m"), ref_s[k][0], rtol=0, atol=ATOL, err_msg=k)
        np.testing.assert_allclose(tr.state(k, "v"), ref_s[k][1], rtol=1e-3, atol=1e-7,
                                   err_msg=k)
    # The params moved well beyond the tolerance: the comparison is not vacuous.
    assert max(np.abs(tr.param(k) - params[k]).max() for k in params) > 0.05


def test_adamw_defaults_match_cpp():
    a = rlx.AdamW()
    assert (a.beta1, a.beta2, a.eps, a.weight_decay) == (0.9, 0.999, 1e-8, 0.01)
    assert a.name == "adamw" and a.slots == ["m", "v"]
    s = rlx.SGD()
    assert (s.momentum, s.nesterov, s.weight_decay) == (0.9, False, 0.0)
    assert s.name == "sgd" and s.slots == ["momentum"]
    assert rlx.SGD(momentum=0.0).slots == []
    assert repr(rlx.SGD(momentum=0.5)) == "rlx.SGD(momentum=0.5, nesterov=False, weight_decay=0.0)"


# Training on a 4-device mesh of the XLA CPU plugin (data parallel, model-sharded, 2x2) against
# the same float64 reference on the full batch: XLA's partitioner inserts the collectives, so
# only float reassociation separates them (same ATOL).
MESH_CASES = {
    "data": ({"data": 4}, {"x": rlx.P("data"), "y": rlx.P("data")}, {}),
    "model": ({"model": 4}, {}, {"w1": rlx.P(None, "model"), "b1": rlx.P("model")}),
    "2x2": ({"data": 2, "model": 2}, {"x": rlx.P("data"), "y": rlx.P("data")},
            {"w1": rlx.P(None, "model"), "b1": rlx.P("model")}),
}


@pytest.mark.skipif(not pjrt_devices(), reason="no PJRT plugin (pip install lammps-jax-pjrt-cpu)")
@pytest.mark.parametrize("case", sorted(MESH_CASES))
@pytest.mark.parametrize("resident", [True, False])
def test_adamw_on_a_mesh_matches_numpy_reference(case, resident):
    axes, batch_specs, param_specs = MESH_CASES[case]
    rng = np.random.default_rng(1)
    params, data = init_params(rng), batches(rng, 10)
    tr = rlx.Trainer(mlp_graph(), ["w1", "b1", "w2", "b2"], rlx.AdamW(weight_decay=0.05),
                     params, mesh=rlx.Mesh(axes), batch_shardings=batch_specs,
                     param_shardings=param_specs, resident=resident, precision="f32")
    losses = [float(tr.step(b, 1e-2)[0]) for b in data]
    zeros2 = lambda v: (np.zeros_like(v), np.zeros_like(v))  # noqa: E731
    ref_p, ref_s, ref_losses = ref_train(
        params, data, 1e-2, adamw_update(0.9, 0.999, 1e-8, 0.05), zeros2)
    np.testing.assert_allclose(losses, ref_losses, rtol=0, atol=ATOL)
    for k in params:
        np.testing.assert_allclose(tr.param(k), ref_p[k], rtol=0, atol=ATOL, err_msg=k)
        np.testing.assert_allclose(tr.state(k, "m"), ref_s[k][0], rtol=0, atol=ATOL, err_msg=k)
    assert max(np.abs(tr.param(k) - params[k]).max() for k in params) > 0.05


@pytest.mark.skipif(not pjrt_devices(), reason="no PJRT plugin (pip install lammps-jax-pjrt-cpu)")
def test_mesh_trainer_errors():
    rng = np.random.default_rng(2)
    params = init_params(rng)
    wrt = ["w1", "b1", "w2", "b2"]
    with pytest.raises(rlx.Error, match=r"dim 0 of size 16 is not divisible by 3"):
        rlx.Trainer(mlp_graph(), wrt, rlx.AdamW(), params, mesh=rlx.Mesh({"data": 3}),
                    batch_shardings={"x": rlx.P("data")})
    with pytest.raises(rlx.Error, match=r"need a mesh"):
        rlx.Trainer(mlp_graph(), wrt, rlx.AdamW(), params, batch_shardings={"x": rlx.P("data")})
    with pytest.raises(rlx.Error, match=r"must be a PartitionSpec"):
        rlx.Trainer(mlp_graph(), wrt, rlx.AdamW(), params, mesh=rlx.Mesh({"data": 4}),
                    batch_shardings={"x": "data"})


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("momentum,nesterov,wd", [(0.0, False, 0.0), (0.9, False, 0.01),
                                                  (0.8, True, 0.001)])
def test_sgd_matches_numpy_reference(momentum, nesterov, wd, device):
    rng = np.random.default_rng(1)
    params, data = init_params(rng), batches(rng, 20)
    opt = rlx.SGD(momentum=momentum, nesterov=nesterov, weight_decay=wd)
    tr, losses = run_rlx(opt, params, data, 0.05, device)
    ref_p, ref_s, ref_losses = ref_train(params, data, 0.05, sgd_update(momentum, nesterov, wd),
                                         np.zeros_like)
    np.testing.assert_allclose(losses, ref_losses, rtol=0, atol=ATOL)
    for k in params:
        np.testing.assert_allclose(tr.param(k), ref_p[k], rtol=0, atol=ATOL, err_msg=k)
        if momentum:
            np.testing.assert_allclose(tr.state(k, "momentum"), ref_s[k], rtol=0, atol=ATOL)
    if not momentum:
        with pytest.raises(rlx.Error, match="no state 'momentum' for 'w1'"):
            tr.state("w1", "momentum")
    assert max(np.abs(tr.param(k) - params[k]).max() for k in params) > 0.02


def test_trained_input_leaf_and_mse():
    # wrt may name an input (not a param): Trainer keeps it like a param. Linear regression
    # with plain SGD, mse_loss: w -= lr * 2/N X^T (Xw - t).
    rng = np.random.default_rng(2)
    g = rlx.Graph("linreg")
    x = g.input("x", (32, 3))
    w = g.input("w", (3, 1))
    t = g.input("t", (32, 1))
    g.outputs(g.mse_loss(x @ w, t))
    xs = rng.standard_normal((32, 3)).astype(np.float32)
    ts = (xs @ np.array([[1.0], [-2.0], [0.5]])).astype(np.float32)
    tr = rlx.Trainer(g, ["w"], rlx.SGD(momentum=0.0), {"w": np.zeros((3, 1), np.float32)},
                     session=rlx.Session("cpu"))
    w_ref = np.zeros((3, 1))
    for _ in range(5):
        (loss,) = tr.step({"x": xs, "t": ts}, 0.1)
        np.testing.assert_allclose(loss, np.mean((xs @ w_ref - ts) ** 2), rtol=1e-5)
        w_ref = w_ref - 0.1 * 2 / xs.shape[0] * xs.T @ (xs @ w_ref - ts)
    np.testing.assert_allclose(tr.param("w"), w_ref, rtol=1e-5, atol=1e-6)
    assert set(tr.params) == {"w"} and tr.wrt == ["w"]


def test_params_are_copies_and_step_graph():
    rng = np.random.default_rng(3)
    params = init_params(rng)
    tr = rlx.Trainer(mlp_graph(), ["w1", "b1", "w2", "b2"], rlx.AdamW(), params)
    p = tr.params
    assert set(p) == {"w1", "b1", "w2", "b2"}
    np.testing.assert_array_equal(p["w1"], params["w1"])
    params["w1"][:] = 7  # the Trainer copied the initial values
    p["w2"][:] = 7  # and hands out copies
    assert not (tr.param("w1") == 7).any() and not (tr.param("w2") == 7).any()
    np.testing.assert_array_equal(tr.state("b1", "v"), np.zeros(H, np.float32))
    names = str(tr.step_graph)
    for leaf in ("train.step", "train.lr", "w1.m", "b2.v"):
        assert leaf in names
    assert isinstance(tr.optimizer, rlx.AdamW)
    step = rlx.build_train_step(mlp_graph(), ["w1"], rlx.SGD())
    assert "w1.momentum" in str(step) and "b1.momentum" not in str(step)


def test_steps_from_threads():
    # step runs without the GIL, serialized per Trainer: two trainers in two threads, and one
    # trainer shared by two threads, give the results of sequential runs.
    rng = np.random.default_rng(4)
    params, data = init_params(rng), batches(rng, 8)
    _, ref_losses = run_rlx(rlx.AdamW(), params, data, 1e-2)
    trainers = [rlx.Trainer(mlp_graph(), ["w1", "b1", "w2", "b2"], rlx.AdamW(), params)
                for _ in range(2)]
    out = [[], []]

    def work(i):
        out[i] = [float(trainers[i].step(b, 1e-2)[0]) for b in data]

    threads = [threading.Thread(target=work, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert out[0] == ref_losses and out[1] == ref_losses
    shared = rlx.Trainer(mlp_graph(), ["w1", "b1", "w2", "b2"], rlx.AdamW(), params)
    threads = [threading.Thread(target=lambda: [shared.step(b, 1e-2) for b in data[:4]])
               for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert shared.num_steps == 8


def test_dropout_replays_under_seed():
    def trainer(seed):
        g = rlx.Graph("drop")
        x = g.input("x", (8, 16))
        w = g.param("w", (16, 1))
        h = g.dropout(x, 0.5, g.step_key(0))
        g.outputs(g.reduce_sum(h @ w) * (1.0 / 8))
        return rlx.Trainer(g, ["w"], rlx.SGD(momentum=0.0), {"w": np.ones((16, 1), np.float32)},
                           seed=seed)

    x = np.ones((8, 16), np.float32)
    a, b, c = trainer(1), trainer(1), trainer(2)
    la = [a.step({"x": x}, 0.1)[0] for _ in range(3)]
    lb = [b.step({"x": x}, 0.1)[0] for _ in range(3)]
    lc = [c.step({"x": x}, 0.1)[0] for _ in range(3)]
    assert la == lb  # same seed: same masks
    assert la != lc  # other seed: other masks
    assert la[0] != la[1]  # a fresh mask each step
    # Kept elements are scaled by 2: the first loss is 2 * (kept count) / 8 with w = 1.
    assert float(la[0]) * 8 / 2 == round(float(la[0]) * 8 / 2)


# ---------------------------------------------------------------------------------------------
# A real dataset: scikit-learn's digits (the train_demo data).

DIGITS = rlx.default_digits_path()


@pytest.mark.skipif(not DIGITS, reason="digits data not installed (scikit-learn)")
def test_digits_loss_decreases():
    with gzip.open(DIGITS, "rt") as f:
        rows = np.loadtxt(f, delimiter=",")
    xs = (rows[:, :64] / 16.0).astype(np.float32)
    ys = rows[:, 64].astype(np.int32)
    test = np.arange(len(ys)) % 4 == 3
    bs = 64
    g = mlp_graph(n=bs, d=64, h=64, c=10)
    params = {
        "w1": rlx.initialize("glorot_uniform", (64, 64), seed=1),
        "b1": rlx.initialize("zeros", (64,)),
        "w2": rlx.initialize("glorot_uniform", (64, 10), seed=2),
        "b2": rlx.initialize("zeros", (10,)),
    }
    tr = rlx.Trainer(g, ["w1", "b1", "w2", "b2"], rlx.AdamW(weight_decay=1e-4), params)
    xtr, ytr = xs[~test], ys[~test]
    rng = np.random.default_rng(0)
    losses = []
    for _ in range(3):  # epochs
        order = rng.permutation(len(ytr))
        for i in range(0, len(order) - bs + 1, bs):
            idx = order[i:i + bs]
            losses.append(float(tr.step({"x": xtr[idx], "y": ytr[idx]}, 1e-2)[0]))
    # Starts near ln(10) = 2.30 (chance), ends well below it.
    first, last = losses[0], np.mean(losses[-5:])
    assert first > 2.0 and last < 0.25 * first, (first, last)
    # Held-out accuracy with the trained params, in NumPy.
    p = tr.params
    logits = np.tanh(xs[test] @ p["w1"] + p["b1"]) @ p["w2"] + p["b2"]
    assert (logits.argmax(1) == ys[test]).mean() > 0.85


def test_initialize():
    w = rlx.initialize("glorot_uniform", (64, 32), seed=3)
    assert w.dtype == np.float32 and w.shape == (64, 32)
    a = np.sqrt(6 / (64 + 32))
    assert np.abs(w).max() <= a and np.abs(w).max() > 0.9 * a
    np.testing.assert_array_equal(w, rlx.initialize("glorot_uniform", (64, 32), seed=3))
    assert not np.array_equal(w, rlx.initialize("glorot_uniform", (64, 32), seed=4))
    he = rlx.initialize("he_normal", (400, 300), "f64", seed=0)
    assert he.dtype == np.float64 and abs(he.std() - np.sqrt(2 / 400)) < 0.01 * np.sqrt(2 / 400) * 5
    assert (rlx.initialize("zeros", (3,)) == 0).all()
    with pytest.raises(rlx.Error, match="unknown init 'xavier'.*glorot_uniform"):
        rlx.initialize("xavier", (2, 2))
    with pytest.raises(rlx.Error, match="needs rank >= 2"):
        rlx.initialize("he_uniform", (10,))
    with pytest.raises(rlx.Error, match="i32"):
        rlx.initialize("zeros", (2,), "i32")


# ---------------------------------------------------------------------------------------------
# Errors, with rlx's messages.


def test_trainer_errors():
    rng = np.random.default_rng(5)
    params = init_params(rng)
    wrt = ["w1", "b1", "w2", "b2"]
    g = mlp_graph()
    missing = {k: v for k, v in params.items() if k != "b2"}
    with pytest.raises(rlx.Error, match="Trainer: missing initial value for 'b2'"):
        rlx.Trainer(g, wrt, rlx.AdamW(), missing)
    bad = dict(params, w1=np.zeros((D, H + 1), np.float32))
    with pytest.raises(rlx.Error, match=r"Trainer: 'w1' expected f32\[8,12\], got f32\[8,13\]"):
        rlx.Trainer(g, wrt, rlx.AdamW(), bad)
    with pytest.raises(rlx.Error, match=r"Trainer: 'b1' expected f32\[12\], got f64\[12\]"):
        rlx.Trainer(g, wrt, rlx.AdamW(), dict(params, b1=params["b1"].astype(np.float64)))
    with pytest.raises(rlx.Error, match="nope"):
        rlx.Trainer(g, ["nope"], rlx.AdamW(), params)
    with pytest.raises(rlx.Error, match="Trainer: unknown option 'dump_stages'"):
        rlx.Trainer(g, wrt, rlx.AdamW(), params, dump_stages=True)
    with pytest.raises(rlx.Error, match="Trainer: expected an rlx.Session"):
        rlx.Trainer(g, wrt, rlx.AdamW(), params, session=3)
    with pytest.raises(rlx.Error, match="expected a dict"):
        rlx.Trainer(g, wrt, rlx.AdamW(), [1, 2])
    with pytest.raises(rlx.Error, match=r"sgd: momentum = 1.500000 must be in \[0, 1\)"):
        rlx.SGD(momentum=1.5)
    with pytest.raises(rlx.Error, match="adamw: eps must be > 0"):
        rlx.AdamW(eps=0.0)

    tr = rlx.Trainer(g, wrt, rlx.AdamW(), params)
    (b,) = batches(rng, 1)
    with pytest.raises(rlx.Error, match=r"run: missing input 'y' \(i32\[16\]\)"):
        tr.step({"x": b["x"]}, 0.1)
    with pytest.raises(rlx.Error, match="run: unknown input 'z'"):
        tr.step(dict(b, z=b["x"]), 0.1)
    with pytest.raises(rlx.Error, match=r"run: input 'x': expected f32\[16,8\]"):
        tr.step(dict(b, x=b["x"][:4]), 0.1)
    bad_y = b["y"].copy()
    bad_y[3] = 12
    with pytest.raises(rlx.Error, match=r"input 'y': label 12 at index 3 is outside \[0, 5\)"):
        tr.step(dict(b, y=bad_y), 0.1)
    with pytest.raises(rlx.Error, match="no param 'w9'"):
        tr.param("w9")
    with pytest.raises(rlx.Error, match="no state 'q' for 'w1'"):
        tr.state("w1", "q")
    assert tr.num_steps == 0  # nothing was updated by the failed steps
    np.testing.assert_array_equal(tr.param("w1"), params["w1"])
    tr.step(b, 0.1)
    assert tr.num_steps == 1


def test_loss_builder_errors():
    g = rlx.Graph()
    p = g.input("p", (4, 1))
    t = g.input("t", (4,))
    with pytest.raises(rlx.Error, match=r"mse_loss: pred f32\[4,1\] and target f32\[4\]"):
        g.mse_loss(p, t)
    with pytest.raises(rlx.Error, match="softmax_cross_entropy_loss"):
        g.softmax_cross_entropy_loss(p, t)
    with pytest.raises(rlx.Error, match="rate"):
        g.dropout(p, 1.5, g.step_key())
    other = rlx.Graph("other")
    with pytest.raises(rlx.Error, match="belongs to graph 'other'"):
        g.mse_loss(p, other.input("q", (4, 1)))


# ---------------------------------------------------------------------------------------------
# safetensors


def bf16():
    return pytest.importorskip("ml_dtypes").bfloat16


def sample_tensors():
    """One array per dtype, with edge values (signed zeros, inf, NaN payloads, subnormals,
    extremes), plus a 0-d and an empty array."""
    rng = np.random.default_rng(6)
    f32 = np.array([0.0, -0.0, np.inf, -np.inf, 1e-45, 3.4028235e38, 1.5, -2.25], np.float32)
    f32 = np.concatenate([f32, np.array([0x7FC00001, 0xFFA00000], np.uint32).view(np.float32)])
    f16 = np.array([0x0001, 0x8000, 0x7C00, 0x7E01, 0x3C00, 0xFBFF], np.uint16).view(np.float16)
    b16 = np.array([0x0001, 0x8000, 0x7F80, 0x7FC1, 0x3F80, 0xFF7F], np.uint16).view(bf16())
    return {
        "f64": rng.standard_normal((3, 4)),
        "f32": f32.reshape(2, 5),
        "f16": f16,
        "bf16": b16.reshape(3, 2),
        "i64": np.array([np.iinfo(np.int64).min, -1, 0, np.iinfo(np.int64).max]),
        "i32": rng.integers(-2**31, 2**31 - 1, (2, 2, 3), dtype=np.int32),
        "i8": np.array([-128, -1, 0, 127], np.int8),
        "u8": np.arange(256, dtype=np.uint8).reshape(16, 16),
        "bool": np.array([[True, False, True]]),
        "scalar": np.array(2.5, np.float32),
        "empty": np.zeros((0, 3), np.float32),
    }


def assert_bit_equal(a, b, name):
    assert a.dtype == b.dtype and a.shape == b.shape, (name, a.dtype, b.dtype, a.shape, b.shape)
    assert a.tobytes() == b.tobytes(), name


def test_safetensors_round_trip_bit_exact(tmp_path):
    ts = sample_tensors()
    path = str(tmp_path / "t.safetensors")
    rlx.save_safetensors(path, ts, metadata={"format": "np", "note": "ünïcode"})
    back = rlx.load_safetensors(path)
    assert list(back) == list(ts)  # file order = dict order
    for k in ts:
        assert_bit_equal(back[k], ts[k], k)
        assert not back[k].flags.writeable  # a view of the read-only mapping
    assert rlx.safetensors_metadata(path) == {"format": "np", "note": "ünïcode"}
    # Non-contiguous and Python-list inputs are converted.
    rlx.save_safetensors(path, {"t": np.arange(12, dtype=np.float32).reshape(3, 4).T,
                                "l": [1, 2, 3]})
    back = rlx.load_safetensors(path)
    np.testing.assert_array_equal(back["t"], np.arange(12, dtype=np.float32).reshape(3, 4).T)
    assert back["l"].dtype == np.int64
    assert rlx.safetensors_metadata(path) == {}


def test_trainer_checkpoint_round_trip(tmp_path):
    rng = np.random.default_rng(7)
    params, data = init_params(rng), batches(rng, 3)
    tr = rlx.Trainer(mlp_graph(), ["w1", "b1", "w2", "b2"], rlx.SGD(), params)
    for b in data:
        tr.step(b, 0.1)
    path = str(tmp_path / "ckpt.safetensors")
    rlx.save_safetensors(path, tr.params)
    again = rlx.Trainer(mlp_graph(), ["w1", "b1", "w2", "b2"], rlx.SGD(),
                        rlx.load_safetensors(path))
    for k in params:
        assert_bit_equal(again.param(k), tr.param(k), k)


def test_safetensors_interop_with_reference_package(tmp_path):
    st = pytest.importorskip("safetensors", reason="the safetensors PyPI package is not installed")
    import safetensors.numpy as stnp

    ts = sample_tensors()
    # The reference writes (from raw memory, so bf16 too; `ts` keeps the arrays alive); rlx
    # reads bit-exact and, saving in the file's order, writes the very same bytes.
    a = tmp_path / "ref.safetensors"
    specs = {k: st.TensorSpec(dtype=str(v.dtype), shape=list(v.shape), data_ptr=v.ctypes.data,
                              data_len=v.nbytes) for k, v in ts.items()}
    st.serialize_file(specs, str(a), metadata={"m": "1"})
    loaded = rlx.load_safetensors(str(a))
    assert set(loaded) == set(ts)
    for k in ts:
        assert_bit_equal(loaded[k], ts[k], k)
    b = tmp_path / "rlx.safetensors"
    rlx.save_safetensors(str(b), loaded, metadata={"m": "1"})
    assert a.read_bytes() == b.read_bytes()
    # rlx writes; the reference reads (its numpy loader has no BF16: that one as raw bytes).
    c = tmp_path / "rlx2.safetensors"
    rlx.save_safetensors(str(c), ts)
    ref = stnp.load_file(str(c))
    for k in ts:
        if k != "bf16":
            assert_bit_equal(ref[k], ts[k], k)
    raw = dict(st.deserialize(c.read_bytes()))
    assert raw["bf16"]["dtype"] == "BF16" and bytes(raw["bf16"]["data"]) == ts["bf16"].tobytes()


def test_safetensors_errors(tmp_path):
    with pytest.raises(rlx.Error, match="/nonexistent/x.safetensors"):
        rlx.load_safetensors("/nonexistent/x.safetensors")
    with pytest.raises(rlx.Error, match="/nonexistent/x.safetensors"):
        rlx.save_safetensors("/nonexistent/x.safetensors", {"a": np.zeros(2, np.float32)})
    with pytest.raises(rlx.Error, match="save_safetensors: 'a': unsupported numpy dtype uint16"):
        rlx.save_safetensors(str(tmp_path / "u.st"), {"a": np.zeros(2, np.uint16)})
    with pytest.raises(rlx.Error, match="unsupported numpy dtype complex64"):
        rlx.save_safetensors(str(tmp_path / "c.st"), {"a": np.zeros(2, np.complex64)})
    with pytest.raises(rlx.Error, match="names must be strings"):
        rlx.save_safetensors(str(tmp_path / "k.st"), {1: np.zeros(2, np.float32)})
    with pytest.raises(rlx.Error, match="metadata must be a dict of str -> str"):
        rlx.save_safetensors(str(tmp_path / "m.st"), {"a": np.zeros(2)}, metadata={"a": 1})
    assert not any(tmp_path.iterdir())  # failed writes leave nothing behind
    # A file holding a dtype rlx lacks (I16), written by hand per the format.
    header = b'{"x":{"dtype":"I16","shape":[2],"data_offsets":[0,4]}}'
    header += b" " * (-len(header) % 8)
    p = tmp_path / "i16.safetensors"
    p.write_bytes(len(header).to_bytes(8, "little") + header + b"\x01\x00\x02\x00")
    with pytest.raises(rlx.Error, match="tensor 'x' has dtype I16, which rlx does not support"):
        rlx.load_safetensors(str(p))
    # Truncated: the data buffer is shorter than the header says.
    p.write_bytes(len(header).to_bytes(8, "little") + header.replace(b"I16", b"F16") + b"\x01")
    with pytest.raises(rlx.Error, match="i16.safetensors"):
        rlx.load_safetensors(str(p))
    p.write_bytes(b"\x00\x01")
    with pytest.raises(rlx.Error, match="i16.safetensors"):
        rlx.load_safetensors(str(p))
    # The old file survives a failed save.
    good = tmp_path / "good.safetensors"
    rlx.save_safetensors(str(good), {"a": np.ones(2, np.float32)})
    with pytest.raises(rlx.Error):
        rlx.save_safetensors(str(good), {"a": np.zeros(2, np.uint16)})
    np.testing.assert_array_equal(rlx.load_safetensors(str(good))["a"], np.ones(2, np.float32))
    assert os.listdir(tmp_path) != []

"""Asynchronous dispatch from Python: Executable.run_async and Trainer.step_async return an
rlx.AsyncResult whose first read waits for the run; on pjrt:0 (XLA CPU plugin) resident training
dispatched asynchronously equals synchronous steps bit for bit and the NumPy AdamW reference of
test_train_api.py; the CPU backend runs synchronously behind the same API."""

from __future__ import annotations

import numpy as np
import pytest

import rlx
from pjrt_plugin import pjrt_devices
from test_train_api import ATOL, adamw_update, batches, init_params, mlp_graph, ref_train

DEVICES = ["cpu"] + pjrt_devices()


@pytest.mark.parametrize("device", DEVICES)
def test_run_async_equals_run(device):
    g = rlx.Graph("g")
    x = g.input("x", (4, 3), "f32")
    w = g.param("w", (3, 2), "f32")
    g.outputs(g.tanh(x @ w), g.exp(x))
    exe = rlx.Session(device, precision="f32").compile(g)
    rng = np.random.default_rng(1)
    exe.set_param("w", rng.standard_normal((3, 2)).astype(np.float32))
    xs = rng.standard_normal((4, 3)).astype(np.float32)
    want = exe.run(xs)
    r = exe.run_async(xs)
    assert len(r) == 2
    assert r.block_until_ready() is r
    got = r.outputs()
    for a, b in zip(got, want):
        assert a.dtype == b.dtype and a.shape == b.shape
        assert a.tobytes() == b.tobytes()
    assert r.output(1).tobytes() == want[1].tobytes()  # read twice
    with pytest.raises(rlx.Error, match=r"AsyncResult: output 2 of a run with 2 outputs"):
        r.output(2)
    assert r.output(-1).tobytes() == want[1].tobytes()  # from the end, as a sequence
    with pytest.raises(rlx.Error, match=r"AsyncResult: output -3 of a run with 2 outputs"):
        r.output(-3)
    with pytest.raises(rlx.Error, match=r"run: input 'x': expected f32\[4,3\], got f32\[3,4\]"):
        exe.run_async(xs.T.copy())
    if device.startswith("pjrt"):
        assert r.label.endswith("of 'g' on pjrt:0")


@pytest.mark.parametrize("device", DEVICES)
def test_step_async_equals_step_and_numpy(device):
    rng = np.random.default_rng(0)
    params, data = init_params(rng), batches(rng, 15)
    lr, wrt = 0.05, ["w1", "b1", "w2", "b2"]
    opt = rlx.AdamW(weight_decay=0.01)
    sync = rlx.Trainer(mlp_graph(), wrt, opt, params, session=device, precision="f32")
    asyn = rlx.Trainer(mlp_graph(), wrt, opt, params, session=device, precision="f32")
    sync_losses = [sync.step(b, lr)[0] for b in data]
    results = [asyn.step_async(b, lr) for b in data]  # nothing read until here
    assert asyn.num_steps == len(data)
    for name in wrt:
        assert asyn.param(name).tobytes() == sync.param(name).tobytes(), name
    for r, want in zip(results, sync_losses):
        assert r.output(0).tobytes() == want.tobytes()
        assert len(r) == 2  # the loss graph's two outputs: loss, logits
    ref_p, _, ref_losses = ref_train(params, data, lr, adamw_update(0.9, 0.999, 1e-8, 0.01),
                                     lambda v: (np.zeros_like(v), np.zeros_like(v)))
    np.testing.assert_allclose([float(r.output(0)) for r in results], ref_losses, atol=ATOL)
    for name in wrt:
        np.testing.assert_allclose(asyn.param(name), ref_p[name], atol=ATOL)

"""Meshes, PartitionSpecs and SPMD compiles from Python (rlx.Mesh, rlx.P, rlx.compile_sharded):
validation errors, the emitted shardings in both forms (GSPMD's mhlo.sharding, Shardy's
sdy.sharding), and a 2-layer MLP under every sharding and in both forms on the XLA CPU plugin's
4 devices against one device (f32: within 1e-5 + 1e-5 * |ref|)."""

from __future__ import annotations

import re
import subprocess
import sys

import numpy as np
import pytest

import rlx
from pjrt_plugin import pjrt_devices

P = rlx.P
PLUGIN = bool(pjrt_devices())
needs_plugin = pytest.mark.skipif(not PLUGIN, reason="no PJRT plugin (lammps-jax-pjrt-cpu)")


def mlp():
    g = rlx.Graph("mlp")
    x = g.input("x", (8, 16))
    w1, b1 = g.param("w1", (16, 32)), g.param("b1", (32,))
    w2, b2 = g.param("w2", (32, 4)), g.param("b2", (4,))
    g.outputs(g.relu(x @ w1 + b1) @ w2 + b2)
    return g


def feeds(seed=0):
    rng = np.random.default_rng(seed)
    shapes = {"x": (8, 16), "w1": (16, 32), "b1": (32,), "w2": (32, 4), "b2": (4,)}
    return {k: rng.uniform(-1, 1, s).astype(np.float32) for k, s in shapes.items()}


def test_mesh_and_partition_spec():
    mesh = rlx.Mesh({"data": 2, "model": 2})
    assert mesh.axis_names == ["data", "model"]
    assert mesh.shape == {"data": 2, "model": 2}
    assert mesh.devices == [0, 1, 2, 3] and mesh.size == 4
    assert repr(mesh) == "Mesh('data': 2, 'model': 2)"
    assert repr(P("data", None)) == "P('data', None)"
    assert repr(P(("data", "model"))) == "P(('data', 'model'),)"
    assert P("data") == P("data") and P() != P("data")
    with pytest.raises(rlx.Error, match="device pjrt:0 appears twice"):
        rlx.Mesh({"a": 2, "b": 1}, devices=[0, 0])
    with pytest.raises(rlx.Error, match="each dim is None, an axis name"):
        P(3)


def test_bad_shardings_name_the_tensor():
    g, mesh = mlp(), rlx.Mesh({"data": 2, "model": 2})
    with pytest.raises(rlx.Error, match=r"param 'w1' \[16,32\] .*unknown mesh axis 'batch'"):
        rlx.stablehlo_sharded(g, mesh, param_shardings={"w1": P(None, "batch")})
    with pytest.raises(rlx.Error, match="mesh axis 'data' is used twice"):
        rlx.stablehlo_sharded(g, mesh, in_shardings={"x": P("data", "data")})
    with pytest.raises(rlx.Error, match="dim 0 of size 8 is not divisible by 3"):
        rlx.stablehlo_sharded(g, rlx.Mesh({"data": 3}), in_shardings={"x": P("data")})
    with pytest.raises(rlx.Error, match="the graph has no input 'y'"):
        rlx.stablehlo_sharded(g, mesh, in_shardings={"y": P("data")})


def test_emitted_module_carries_the_shardings():
    g, mesh = mlp(), rlx.Mesh({"data": 2, "model": 2})
    text = rlx.stablehlo_sharded(g, mesh, in_shardings={"x": P("data")},
                                 param_shardings={"w1": P(None, "model")},
                                 out_shardings=[P("data")], precision="always-f32",
                                 sharding_form="gspmd")
    assert "mhlo.num_partitions = 4 : i32, mhlo.num_replicas = 1 : i32" in text
    assert "sdy." not in text
    assert ('%arg0: tensor<8x16xf32> {mhlo.sharding = '
            '"{devices=[2,1,2]<=[4] last_tile_dim_replicate}"}') in text
    assert ('tensor<16x32xf32> {mhlo.sharding = '
            '"{devices=[1,2,2]0,2,1,3 last_tile_dim_replicate}"}') in text
    assert ('-> (tensor<8x4xf32> {mhlo.sharding = '
            '"{devices=[2,1,2]<=[4] last_tile_dim_replicate}"})') in text


def test_emitted_module_in_shardy_form():
    g, mesh = mlp(), rlx.Mesh({"data": 2, "model": 2})
    text = rlx.stablehlo_sharded(g, mesh, in_shardings={"x": P("data")},
                                 param_shardings={"w1": P(None, "model")},
                                 out_shardings=[P("data")], precision="always-f32",
                                 sharding_form="shardy")
    assert "mhlo.num_partitions = 4 : i32, mhlo.num_replicas = 1 : i32" in text
    assert '  sdy.mesh @mesh = <["data"=2, "model"=2]>\n' in text
    assert '%arg0: tensor<8x16xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"data"}, {}]>}' in text
    assert 'tensor<16x32xf32> {sdy.sharding = #sdy.sharding<@mesh, [{}, {"model"}]>}' in text
    assert 'tensor<4xf32> {sdy.sharding = #sdy.sharding<@mesh, [{}]>}' in text
    assert '-> (tensor<8x4xf32> {sdy.sharding = #sdy.sharding<@mesh, [{"data"}, {}]>})' in text
    assert "mhlo.sharding" not in text
    with pytest.raises(rlx.Error, match="sharding_form must be 'auto', 'gspmd' or 'shardy'"):
        rlx.stablehlo_sharded(g, mesh, sharding_form="sdy")


@needs_plugin
def test_pjrt_devices_lists_every_device():
    devs = rlx.pjrt_devices()
    assert [d["device"] for d in devs][:1] == ["pjrt:0"]
    for i, d in enumerate(devs):
        assert d["device"] == f"pjrt:{i}" and d["kind"] and d["platform"]
        assert set(d) == {"device", "id", "kind", "platform", "bytes_limit", "bytes_in_use"}


SHARDINGS = {
    "replicated": ({"data": 4}, {}, {}, None),
    "batch": ({"data": 4}, {"x": P("data")}, {}, [P("data")]),
    "model": ({"model": 4}, {}, {"w1": P(None, "model"), "b1": P("model"),
                                 "w2": P("model", None)}, None),
    "mixed_2x2": ({"data": 2, "model": 2}, {"x": P("data")},
                  {"w1": P(None, "model"), "b1": P("model"), "w2": P("model", None)},
                  [P("data", None)]),
}


@needs_plugin
@pytest.mark.parametrize("form", ["gspmd", "shardy"])
@pytest.mark.parametrize("name", list(SHARDINGS))
def test_mlp_sharded_equals_one_device(name, form):
    if len(rlx.pjrt_devices()) < 4:
        pytest.skip("needs 4 pjrt devices")
    g, f = mlp(), feeds(1)
    one = rlx.Session("pjrt:0", precision="always-f32").compile(g)
    for k in ("w1", "b1", "w2", "b2"):
        one.set_param(k, f[k])
    want = one.run(x=f["x"])
    axes, ins, params, outs = SHARDINGS[name]
    exe = rlx.compile_sharded(g, rlx.Mesh(axes), in_shardings=ins, param_shardings=params,
                              out_shardings=outs, precision="always-f32", sharding_form=form)
    for k in ("w1", "b1", "w2", "b2"):
        exe.set_param(k, f[k])
    got = exe.run(x=f["x"])
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    report = exe.kernel_report()
    assert "mhlo.num_partitions = 4" in report
    assert ("shardings in Shardy form" if form == "shardy" else "shardings in GSPMD form") in report


@needs_plugin
def test_replicated_data_parallel_equals_one_device():
    if len(rlx.pjrt_devices()) < 4:
        pytest.skip("needs 4 pjrt devices")
    f = feeds(2)
    one = rlx.Session("pjrt:0", precision="always-f32").compile(mlp())
    for k in ("w1", "b1", "w2", "b2"):
        one.set_param(k, f[k])
    want = one.run(x=f["x"])
    g = rlx.Graph("mlp")  # one replica's program: batch 2
    x = g.input("x", (2, 16))
    w1, b1 = g.param("w1", (16, 32)), g.param("b1", (32,))
    w2, b2 = g.param("w2", (32, 4)), g.param("b2", (4,))
    g.outputs(g.relu(x @ w1 + b1) @ w2 + b2)
    exe = rlx.compile_replicated(g, [0, 1, 2, 3], precision="always-f32")
    assert exe.inputs[0][1] == (8, 16)
    for k in ("w1", "b1", "w2", "b2"):
        exe.set_param(k, f[k])
    np.testing.assert_allclose(exe.run(x=f["x"]), want, rtol=1e-5, atol=1e-5)
    assert "mhlo.num_replicas = 4" in exe.kernel_report()


# jax 0.4.38 with jax_use_shardy_partitioner, in a child process (it needs 4 host devices, set
# through XLA_FLAGS before jax starts): the signature of the same MLP under the mixed 2x2
# sharding.
JAX_SHARDY_MLP = r'''
import os
os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=4"
import jax, jax.numpy as jnp, numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
jax.config.update("jax_platforms", "cpu")
jax.config.update("jax_use_shardy_partitioner", True)
mesh = Mesh(np.array(jax.devices()[:4]).reshape(2, 2), ("data", "model"))
s = lambda *p: NamedSharding(mesh, P(*p))
def f(x, w1, b1, w2, b2):
    return jax.nn.relu(x @ w1 + b1) @ w2 + b2
args = [jnp.zeros(t, jnp.float32) for t in [(8, 16), (16, 32), (32,), (32, 4), (4,)]]
print(jax.jit(f, in_shardings=(s("data"), s(None, "model"), s("model"), s("model", None), s()),
              out_shardings=s("data", None)).lower(*args).as_text())
'''


def shardings_of_main(text):
    """The sdy.sharding of each @main argument, then of each result, and the sdy.mesh line."""
    sig = next(line for line in text.splitlines() if "func.func public @main(" in line)
    args, results = sig.split(") -> (")
    find = lambda part: re.findall(r"sdy\.sharding = (#sdy\.sharding<[^>]*>)", part)
    mesh = re.search(r"sdy\.mesh @mesh = <[^>]*>", text).group(0)
    return find(args), find(results), mesh


def test_shardy_form_matches_jax():
    """rlx's Shardy texts (mesh and every argument / result sharding) equal jax's."""
    pytest.importorskip("jax")
    run = subprocess.run([sys.executable, "-c", JAX_SHARDY_MLP], capture_output=True, text=True,
                         timeout=300)
    assert run.returncode == 0, run.stderr
    g, mesh = mlp(), rlx.Mesh({"data": 2, "model": 2})
    ours = rlx.stablehlo_sharded(
        g, mesh, in_shardings={"x": P("data")},
        param_shardings={"w1": P(None, "model"), "b1": P("model"), "w2": P("model", None)},
        out_shardings=[P("data", None)], precision="always-f32", sharding_form="shardy")
    want = shardings_of_main(run.stdout)
    assert len(want[0]) == 5 and len(want[1]) == 1, run.stdout
    assert shardings_of_main(ours) == want
@needs_plugin
def test_session_on_a_device_set_equals_one_device():
    """Data parallelism from a device string: rlx.Session("pjrt:0-3") (and "pjrt:all",
    "pjrt:2,0") splits the batch over those devices and equals pjrt:0."""
    if len(rlx.pjrt_devices()) < 4:
        pytest.skip("needs 4 pjrt devices")
    f = feeds(3)

    def run(device):
        exe = rlx.Session(device, precision="always-f32").compile(mlp())
        for k in ("w1", "b1", "w2", "b2"):
            exe.set_param(k, f[k])
        assert exe.device == device
        return exe.run(x=f["x"])

    want = run("pjrt:0")
    for device in ("pjrt:0-3", "pjrt:all", "pjrt:2,0"):
        np.testing.assert_allclose(run(device), want, rtol=1e-5, atol=1e-5)
    g = rlx.Graph("odd")
    g.outputs(g.input("x", (3, 2)) * 2.0)
    with pytest.raises(rlx.Error, match=r"input 'x' \[3,2\] has batch 3, not a multiple of 4"):
        rlx.Session("pjrt:0-3").compile(g)
    with pytest.raises(rlx.Error, match=r"unknown device 'pjrt:3-1': the range 3-1 is empty"):
        rlx.Session("pjrt:3-1")


@needs_plugin
def test_compile_cache_info_and_clear(tmp_path, monkeypatch):
    monkeypatch.setenv("RLX_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("RLX_CACHE_MAX_BYTES", "64M")
    info = rlx.compile_cache_info()
    assert info["dir"] == str(tmp_path / "pjrt")
    assert (info["entries"], info["bytes"], info["max_bytes"]) == (0, 0, 64 << 20)
    before = rlx.compile_cache_info()
    exe = rlx.Session("pjrt:0", precision="always-f32").compile(mlp())
    info = rlx.compile_cache_info()
    files = list((tmp_path / "pjrt").glob("*.xla"))
    assert info["entries"] == len(files) == 1
    assert info["bytes"] == files[0].stat().st_size
    assert info["misses"] - before["misses"] == 1 and info["stores"] - before["stores"] == 1
    # A new Session compiles again (its own in-memory cache is empty): the disk entry hits.
    rlx.Session("pjrt:0", precision="always-f32").compile(mlp())
    assert rlx.compile_cache_info()["hits"] - before["hits"] == 1
    assert exe.device == "pjrt:0"
    assert rlx.clear_compile_cache() == 1
    assert rlx.compile_cache_info()["entries"] == 0
    assert not list((tmp_path / "pjrt").glob("*.xla"))
    monkeypatch.setenv("RLX_CACHE_DIR", "off")
    assert rlx.compile_cache_info()["dir"] is None
    assert rlx.clear_compile_cache() == 0

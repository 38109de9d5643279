"""The Python API: builder, operators and indexing, text round trip, errors with their C++
messages, zero-copy inputs, DLPack, stage dumps, reports and the runtime helpers."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import rlx
from harness import jnp  # jax configured (x64, cpu) by the harness


def mlp():
    g = rlx.Graph("mlp")
    x = g.input("x", (4, 8))
    w = g.param("w", (8, 16))
    g.outputs(g.softmax(g.gelu(x @ w)))
    return g


# ---------------------------------------------------------------- builder and text form


def test_inferred_types_and_text_round_trip():
    g = rlx.Graph("t")
    x = g.input("x", (2, 3), np.float16)
    y = g.input("y", [3], "f16")
    z = (x + y) * 2 - 1
    assert z.shape == (2, 3) and z.dtype == "f16"
    c = x < y
    assert c.dtype == "bool"
    t, i = g.top_k(x, 2)
    g.outputs(z, c, t, i)
    text = str(g)
    assert "graph @t {" in text and "top_k" in text
    g2 = rlx.parse(text)
    assert g2 == g
    assert str(g2) == text
    assert rlx.Graph.parse(text) == g


def test_dtype_spellings():
    g = rlx.Graph()
    for spelling, name in [("bf16", "bf16"), (ml_dtypes.bfloat16, "bf16"), (np.int64, "i64"),
                           (np.dtype("uint8"), "u8"), ("float64", "f64"), (bool, "bool")]:
        assert g.input(f"v{name}{len(str(spelling))}", (1,), spelling).dtype == name


def test_weak_scalars_and_promotion():
    g = rlx.Graph()
    xi = g.input("xi", (2,), "i32")
    xh = g.input("xh", (2,), "f16")
    assert (xi + 1).dtype == "i32"
    assert (xi * 0.5).dtype == "f32"  # a float scalar next to ints gives f32 (jnp weak type)
    assert (xh * 0.5).dtype == "f16"  # ... and keeps a float value's dtype
    assert (xi + xh).dtype == "f16"  # jnp.promote_types(i32, f16)
    assert (np.ones(2, np.float64) + xh).dtype == "f64"  # numpy on the left defers


def test_indexing_shapes():
    g = rlx.Graph()
    x = g.input("x", (4, 5, 6))
    assert x[1].shape == (5, 6)
    assert x[1:3, ::2].shape == (2, 3, 6)
    assert x[..., None].shape == (4, 5, 6, 1)
    assert x[:, -1, None, 1:].shape == (4, 1, 5)
    assert x[::-1].shape == (4, 5, 6)
    i = g.input("i", (2, 7), "i32")
    assert x[:, i].shape == (4, 2, 7, 6)


@pytest.mark.parametrize("key,msg", [
    (5, "index 5 is out of bounds for axis 0 of size 4"),
    ((0, 0, 0, 0), "too many indices"),
    ((Ellipsis, Ellipsis), "more than one '...'"),
    ("a", "unsupported index element 'a'"),
    ([0, 1], "unsupported index element [0, 1]"),
])
def test_indexing_errors(key, msg):
    g = rlx.Graph()
    x = g.input("x", (4, 5, 6))
    with pytest.raises(rlx.Error, match=None) as e:
        x[key]
    assert msg in str(e.value)


def test_ambiguous_indexing_raises():
    g = rlx.Graph()
    x = g.input("x", (4, 5, 6))
    i = g.input("i", (2,), "i32")
    with pytest.raises(rlx.Error, match="ambiguous"):
        x[0, :, i]
    with pytest.raises(rlx.Error, match="ambiguous"):
        x[i, i]
    f = g.input("f", (2,), "f32")
    n = len(g)
    with pytest.raises(rlx.Error, match="integer dtype"):
        x[1:, f]
    assert len(g) == n  # nothing emitted by the failed indexing
    assert x[np.int64(1), np.int32(-1)].shape == (6,)
    with pytest.raises(rlx.Error, match="truth value"):
        bool(x > 0)


def test_emit_any_op_and_ops_listing():
    ops = {o["name"]: o for o in rlx.ops()}
    assert {"add", "attention", "elementwise_region"} <= set(ops)
    assert ops["cumsum"]["attrs"]["exclusive"] == ("bool", False)
    g = rlx.Graph()
    x = g.input("x", (3, 4))
    y = g.emit("cumsum", [x], {"axis": -1, "reverse": True})
    assert y.op == "cumsum" and y.shape == (3, 4)
    v, i = g.emit("top_k", [x], {"k": 2})
    assert (v.dtype, i.dtype) == ("f32", "i32")


# ---------------------------------------------------------------- errors carry the C++ message


def test_error_is_runtime_error():
    assert issubclass(rlx.Error, RuntimeError)


def test_builder_shape_error_message():
    g = rlx.Graph()
    a = g.input("a", (2, 3))
    b = g.input("b", (4,))
    with pytest.raises(rlx.Error) as e:
        a + b
    msg = str(e.value)
    assert "op 'add'" in msg and "f32[2,3]" in msg and "f32[4]" in msg
    assert len(g) == 2  # the failed builder left the graph as it was


def test_bad_attribute_messages():
    g = rlx.Graph()
    x = g.input("x", (2, 3))
    with pytest.raises(rlx.Error, match="op 'attention'.*mask|mask.*bogus"):
        g.attention(x[None, None], x[None, None], x[None, None], mask="bogus")
    with pytest.raises(rlx.Error, match="unknown attribute|frobnicate"):
        g.emit("cumsum", [x], {"axis": 0, "frobnicate": 1})
    with pytest.raises(rlx.Error, match="attribute 'axis': expected an int"):
        g.emit("cumsum", [x], {"axis": "zero"})
    with pytest.raises(rlx.Error, match="unknown dtype 'f33'"):
        g.input("y", (1,), "f33")
    with pytest.raises(rlx.Error, match="unknown op 'nope'"):
        g.emit("nope", [x])


def test_run_errors_name_input_and_types():
    exe = rlx.Session().compile(mlp())
    exe.set_param("w", np.zeros((8, 16), np.float32))
    x = np.ones((4, 8), np.float32)
    with pytest.raises(rlx.Error, match=r"input 'x': expected f32\[4,8\], got i64\[4,8\]"):
        exe.run(x=np.ones((4, 8), np.int64))
    with pytest.raises(rlx.Error, match=r"input 'x': expected f32\[4,8\], got f32\[8,4\]"):
        exe.run(x=np.ones((8, 4), np.float32))
    with pytest.raises(rlx.Error, match=r"unknown input 'y'.*x"):
        exe.run(x=x, y=x)
    with pytest.raises(rlx.Error, match="missing|input 'x'"):
        exe.run()
    with pytest.raises(rlx.Error, match=r"set_param 'w': expected f32\[8,16\], got f32\[8\]"):
        exe.set_param("w", np.zeros(8, np.float32))
    with pytest.raises(rlx.Error, match=r"unknown param 'v'"):
        exe.set_param("v", np.zeros(8, np.float32))


def test_missing_param_message():
    exe = rlx.Session().compile(mlp(), dce=False)  # a fresh executable (cache key differs)
    with pytest.raises(rlx.Error, match="param 'w'"):
        exe.run(x=np.ones((4, 8), np.float32))


def test_compile_option_errors():
    with pytest.raises(rlx.Error, match="unknown option 'fast'"):
        rlx.Session().compile(mlp(), fast=True)
    with pytest.raises(rlx.Error):
        rlx.Session(precision="half-ish")
    with pytest.raises(rlx.Error, match="device"):
        rlx.Session(device="tpu:x")


def test_parse_error_is_located():
    with pytest.raises(rlx.Error, match=r"line \d+:\d+"):
        rlx.parse("graph @g {\n  %x = input : f32[2\n}")


# ---------------------------------------------------------------- running


def test_run_forms_and_results():
    rng = np.random.default_rng(0)
    g = mlp()
    exe = rlx.Session().compile(g)
    w = rng.standard_normal((8, 16)).astype(np.float32)
    x = rng.standard_normal((4, 8)).astype(np.float32)
    exe.set_param("w", w)
    a = exe.run(x=x)
    b = exe.run({"x": x})
    c = exe.run(x)
    ref = rlx.evaluate(g, {"x": x}, {"w": w})
    assert isinstance(a, np.ndarray) and a.dtype == np.float32 and a.shape == (4, 16)
    np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(a, c)
    np.testing.assert_allclose(a, ref, rtol=2e-5, atol=1e-6)
    h = jnp.matmul(x, w)
    np.testing.assert_allclose(a, np.asarray(
        __import__("jax").nn.softmax(__import__("jax").nn.gelu(h, approximate=False))),
        rtol=2e-5, atol=1e-6)
    assert exe.inputs == [("x", (4, 8), "f32")]
    assert exe.params == [("w", (8, 16), "f32")]
    assert exe.outputs[0][1:] == ((4, 16), "f32")


def test_multiple_outputs_and_bf16_io():
    g = rlx.Graph()
    x = g.input("x", (3,), "bf16")
    g.outputs(x * 2, g.convert(x, "f32"))
    out = rlx.Session().compile(g).run(x=np.array([1.5, -2, 3], ml_dtypes.bfloat16))
    assert isinstance(out, list) and out[0].dtype == ml_dtypes.bfloat16
    np.testing.assert_array_equal(out[0].astype(np.float32), [3, -4, 6])
    np.testing.assert_array_equal(out[1], np.array([1.5, -2, 3], np.float32))


def test_python_scalars_and_lists_take_the_declared_dtype():
    g = rlx.Graph()
    x = g.input("x", (3,), "i64")
    g.outputs(x + 1)
    np.testing.assert_array_equal(rlx.Session().compile(g).run(x=[1, 2, 3]), [2, 3, 4])


def test_zero_copy_inputs():
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    addr, borrowed = rlx._core._input_address(a)
    assert borrowed and addr == a.ctypes.data  # the tensor run() builds is the array itself
    t = a.T  # not C-contiguous: copied
    addr, borrowed = rlx._core._input_address(t)
    assert not borrowed and addr != t.ctypes.data
    # A param is bound without a copy: writing the array between runs changes the result.
    g = rlx.Graph()
    x = g.input("x", (4,))
    w = g.param("w", (4,))
    g.outputs(x * w)
    exe = rlx.Session().compile(g)
    wv = np.ones(4, np.float32)
    exe.set_param("w", wv)
    xv = np.arange(4, dtype=np.float32)
    np.testing.assert_array_equal(exe.run(x=xv), xv)
    wv[:] = 3
    np.testing.assert_array_equal(exe.run(x=xv), 3 * xv)


def test_results_own_their_memory():
    g = rlx.Graph()
    x = g.input("x", (4,))
    g.outputs(x + 0)
    exe = rlx.Session().compile(g, fold_constants=False)
    xv = np.arange(4, dtype=np.float32)
    r1 = exe.run(x=xv)
    r2 = exe.run(x=xv + 1)
    np.testing.assert_array_equal(r1, xv)  # not overwritten by the second run
    np.testing.assert_array_equal(r2, xv + 1)


# ---------------------------------------------------------------- DLPack


def test_dlpack_numpy_round_trip():
    g = rlx.Graph()
    x = g.input("x", (2, 3))
    g.outputs(x * 2)
    out = rlx.Session().compile(g).run(x=np.ones((2, 3), np.float32))
    back = np.from_dlpack(rlx.DLPackTensor(out))  # rlx's exporter
    assert back.ctypes.data == out.ctypes.data
    np.testing.assert_array_equal(back, out)
    imported = rlx.from_dlpack(out)  # rlx's importer over numpy's exporter
    assert imported.ctypes.data == out.ctypes.data
    np.testing.assert_array_equal(imported, out)


def test_dlpack_jax_round_trip():
    import jax
    import jax.dlpack

    src = jnp.arange(6, dtype=jnp.float32).reshape(2, 3)
    arr = rlx.from_dlpack(src)  # zero copy from jax
    assert arr.ctypes.data == src.unsafe_buffer_pointer()
    g = rlx.Graph()
    x = g.input("x", (2, 3))
    g.outputs(x + 1)
    out = rlx.Session().compile(g).run(x=arr)
    back = jax.dlpack.from_dlpack(rlx.DLPackTensor(out))
    np.testing.assert_array_equal(np.asarray(back), np.asarray(src) + 1)
    bf = jnp.array([1.5, 2.5], jnp.bfloat16)
    assert rlx.from_dlpack(bf).dtype == ml_dtypes.bfloat16


@pytest.mark.parametrize("dtype", ["float32", "float16", "float64", "int8", "uint8", "int32",
                                   "int64", "bool", ml_dtypes.bfloat16])
def test_dlpack_dtypes_round_trip(dtype):
    a = (np.arange(6).reshape(2, 3) % 3).astype(dtype)
    exported = rlx.DLPackTensor(a)
    assert exported.shape == (2, 3)
    if a.dtype != ml_dtypes.bfloat16:  # numpy itself cannot import bf16 DLPack tensors
        b = np.from_dlpack(exported)
        assert b.dtype == a.dtype and b.ctypes.data == a.ctypes.data
        np.testing.assert_array_equal(b, a)
    c = rlx.from_dlpack(rlx.to_dlpack(a))
    assert c.dtype == a.dtype and c.ctypes.data == a.ctypes.data
    np.testing.assert_array_equal(c.astype(np.float64), a.astype(np.float64))


def test_dlpack_rejects_strided():
    a = np.arange(12, dtype=np.float32).reshape(3, 4)[:, ::2]
    with pytest.raises(rlx.Error, match="C-contiguous"):
        rlx.from_dlpack(a)


def test_dlpack_capsule_is_single_use():
    cap = rlx.to_dlpack(np.ones(3, np.float32))
    np.testing.assert_array_equal(rlx.from_dlpack(cap), np.ones(3))
    with pytest.raises(rlx.Error, match="capsule can be used once"):
        rlx.from_dlpack(cap)


# ---------------------------------------------------------------- inspection and runtime


def test_stages_and_reports():
    exe = rlx.Session().compile(mlp(), dump_stages=True)
    stages = exe.stages
    names = list(stages)
    assert names[0] == "input" and len(names) > 2
    assert all(t.startswith("graph @") for t in stages.values())
    assert "native" in exe.dispatch_report()
    assert isinstance(exe.kernel_report(), str) and exe.kernel_report()
    assert isinstance(exe.compiled_graph(), rlx.Graph)


def test_structured_kernel_and_dispatch_reports():
    exe = rlx.Session().compile(mlp())
    kernels = exe.kernels()
    assert kernels, "every computing node is listed"
    compiled = str(exe.compiled_graph())
    for k in kernels:
        assert set(k) == {"node", "name", "op", "kernel", "dtype", "native", "fallback_reason"}
        assert (k["fallback_reason"] == "") == k["native"]
        assert k["kernel"] == ("cpu" if k["native"] else "reference")
        assert f"%{k['name']} = {k['op']}" in compiled
    assert [k["node"] for k in kernels] == sorted(k["node"] for k in kernels)
    # The text report is derived from the same data: "  op: native / fallback" per op kind.
    rows = exe.kernel_report().splitlines()
    assert rows[0] == "cpu kernels (native / reference fallback):"
    counts = {}
    for k in kernels:
        native, fallback = counts.get(k["op"], (0, 0))
        counts[k["op"]] = (native + k["native"], fallback + (not k["native"]))
    assert sorted(rows[1:]) == sorted(f"  {op}: {n} / {f}" for op, (n, f) in counts.items())
    dispatch = exe.dispatch_counts()
    assert dispatch and all(set(c) == {"native", "decomposed", "missing"} for c in dispatch.values())
    assert all(c["missing"] == 0 for c in dispatch.values())
    assert dispatch["softmax"] == {"native": 1, "decomposed": 0, "missing": 0}
    # force_common decomposes the composite the CPU runs natively by default.
    common = rlx.Session().compile(mlp(), dispatch="force_common")
    assert common.dispatch_counts()["softmax"] == {"native": 0, "decomposed": 1, "missing": 0}
    assert "softmax" not in {k["op"] for k in common.kernels()}


def test_profile_and_planned_memory():
    rng = np.random.default_rng(3)
    x = rng.standard_normal((4, 8), np.float32)
    exe = rlx.Session().compile(mlp(), profile=True)
    exe.set_param("w", rng.standard_normal((8, 16), np.float32))
    assert exe.profile()["runs"] == 0
    for _ in range(3):
        exe(x)
    p = exe.profile()
    assert p["runs"] == 3
    assert 0 < p["kernel_seconds"] <= p["run_seconds"]
    assert sum(o["seconds"] for o in p["ops"]) == pytest.approx(p["kernel_seconds"], rel=1e-9)
    assert [o["seconds"] for o in p["ops"]] == sorted((o["seconds"] for o in p["ops"]),
                                                      reverse=True)
    # Every computing node ran once per run, under its op kind.
    kernels = exe.kernels()
    by_name = {n["name"]: n for n in p["nodes"]}
    for k in kernels:
        n = by_name[k["name"]]
        assert (n["op"], n["calls"], n["depth"], n["parent"]) == (k["op"], 3, 0, -1)
        assert n["self_seconds"] == n["seconds"] >= 0
    calls = {o["op"]: o["calls"] for o in p["ops"]}
    for op in {k["op"] for k in kernels}:
        assert calls[op] == 3 * sum(k["op"] == op for k in kernels)
    assert p["text"].startswith("rlx profile")
    # profile=False: off, also where RLX_PROFILE would turn it on.
    off = rlx.Session().compile(mlp(), profile=False)
    off.set_param("w", np.zeros((8, 16), np.float32))
    off(x)
    assert off.profile()["runs"] == 0 and off.profile()["ops"] == []
    with pytest.raises(rlx.Error, match=r"compile: profile must be True or False, got 'yes'"):
        rlx.Session().compile(mlp(), profile="yes")

    m = exe.planned_memory()
    assert set(m) == {"arena", "bodies", "params", "constants", "outputs", "state", "total"}
    assert (m["params"], m["outputs"], m["state"], m["bodies"]) == (8 * 16 * 4, 4 * 16 * 4, 0, 0)
    assert m["arena"] >= 0 and m["constants"] >= 0
    assert m["total"] == sum(v for k, v in m.items() if k != "total")
    # The memory-limit check counts the same total.
    with pytest.raises(rlx.Error, match="memory"):
        rlx.Session().compile(mlp(), memory_limit=m["total"] - 1)
    rlx.Session().compile(mlp(), memory_limit=m["total"])


def test_session_cache_and_precision():
    s = rlx.Session(precision="auto-mixed-bf16")
    g = mlp()
    e1 = s.compile(g)
    s.compile(g)
    assert s.cache_stats()["hits"] >= 1
    e1.set_param("w", np.full((8, 16), 0.1, np.float32))
    y = e1.run(x=np.ones((4, 8), np.float32))
    np.testing.assert_allclose(y.sum(axis=-1), 1.0, rtol=1e-2)


@pytest.mark.parametrize("precision,rtol", [("f32", 2e-6), ("always-f32", 2e-6),
                                             ("f16", 4e-3), ("bf16", 3e-2)])
def test_precision_names(precision, rtol):
    rng = np.random.default_rng(1)
    g = rlx.Graph()
    x = g.input("x", (4, 8))
    w = g.input("w", (8, 5))
    g.outputs(g.tanh(x @ w))
    feeds = {"x": rng.standard_normal((4, 8)).astype(np.float32),
             "w": rng.standard_normal((8, 5)).astype(np.float32) / 3}
    want = rlx.evaluate(g, feeds)
    got = rlx.Session(precision=precision).compile(g).run(feeds)
    assert got.dtype == np.float32  # precision changes internal dtypes only
    np.testing.assert_allclose(got, want, rtol=rtol, atol=rtol)
    got2 = rlx.Session().compile(g, precision=precision).run(feeds)
    np.testing.assert_array_equal(got, got2)


def test_devices_and_threads():
    assert "cpu" in rlx.devices()
    n = rlx.num_threads()
    rlx.set_num_threads(1)
    assert rlx.num_threads() == 1
    rlx.set_num_threads(n)
    with pytest.raises(rlx.Error):
        rlx.set_num_threads(0)


def test_bench_run_hook():
    g = rlx.Graph()
    x = g.input("x", (4,))
    g.outputs(x + x)
    exe = rlx.Session().compile(g)
    sec = rlx._core._bench_run(exe, {"x": np.ones(4, np.float32)}, 10)
    assert 0 < sec < 1


def test_output_that_is_an_input_is_a_copy():
    # Inputs are borrowed for the call only; a result never aliases the caller's array.
    g = rlx.Graph()
    x = g.input("x", (3,))
    g.outputs(x, x.reshape(3, 1))
    xv = np.arange(3, dtype=np.float32)
    a, b = rlx.Session().compile(g).run(x=xv)
    xv[:] = -1
    np.testing.assert_array_equal(a, [0, 1, 2])
    np.testing.assert_array_equal(b[:, 0], [0, 1, 2])


# Mnemonics that are Python keywords get the C++ builder's name.
BUILDER_NAME = {"not": "logical_not", "and": "logical_and", "or": "logical_or", "xor": "logical_xor"}


def test_every_op_has_a_builder():
    missing = [o["name"] for o in rlx.ops()
               if not hasattr(rlx.Graph, BUILDER_NAME.get(o["name"], o["name"]))]
    assert not missing, f"ops of ops.def without a Graph method: {missing}"


# ---------------------------------------------------------------- dynamic slices


def _lax_dynamic(name, *args, **kw):
    """The lax primitive: starts clamped to [0, dim - size] (StableHLO, rlx). The
    lax.dynamic_slice wrapper would first wrap a negative start around (start + dim)."""
    from jax import lax
    return np.asarray(getattr(lax, name + "_p").bind(*map(jnp.asarray, args), **kw))


@pytest.mark.parametrize("starts", [(1, 2), (-1, 3), (-100, -2), (7, 100), (2, -9)])
@pytest.mark.parametrize("index", ["i32", "i64"])
def test_dynamic_slice_and_update_clamp_like_lax(starts, index):
    rng = np.random.default_rng(7)
    x = rng.standard_normal((5, 7)).astype(np.float32)
    u = rng.standard_normal((2, 3)).astype(np.float32)
    dt = np.dtype(np.int32 if index == "i32" else np.int64)
    g = rlx.Graph()
    xv, uv = g.input("x", (5, 7)), g.input("u", (2, 3))
    r, c = g.input("r", (), index), g.input("c", (), index)
    ds = g.dynamic_slice(xv, [r, c], [3, 4])
    dus = g.dynamic_update_slice(xv, uv, [r, c])
    # Python ints as starts take the dtype of the first Value (i32 when there is none).
    mixed = g.dynamic_slice(xv, [r, starts[1]], [3, 4])
    const = g.dynamic_update_slice(xv, uv, list(starts))
    assert ds.shape == (3, 4) and dus.shape == (5, 7) and const.dtype == "f32"
    g.outputs(ds, dus, mixed, const)
    feeds = {"x": x, "u": u, "r": dt.type(starts[0]), "c": dt.type(starts[1])}
    got = rlx.Session().compile(g).run(feeds)
    s = [dt.type(v) for v in starts]
    want_ds = _lax_dynamic("dynamic_slice", x, *s, slice_sizes=(3, 4))
    want_dus = _lax_dynamic("dynamic_update_slice", x, u, *s)
    np.testing.assert_array_equal(got[0], want_ds)
    np.testing.assert_array_equal(got[1], want_dus)
    np.testing.assert_array_equal(got[2], want_ds)
    np.testing.assert_array_equal(got[3], want_dus)
    if starts[0] >= 0 and starts[1] >= 0:  # the lax wrappers agree where nothing is negative
        from jax import lax
        np.testing.assert_array_equal(got[0], lax.dynamic_slice(x, s, (3, 4)))


def test_dynamic_slice_zero_size_and_errors():
    g = rlx.Graph()
    x = g.input("x", (4, 6), "i8")
    u = g.input("u", (0, 6), "i8")
    i = g.input("i", (), "i32")
    g.outputs(g.dynamic_slice(x, [i, 0], [0, 6]), g.dynamic_update_slice(x, u, [i, 0]))
    xs = np.arange(24, dtype=np.int8).reshape(4, 6)
    out = rlx.Session().compile(g).run(x=xs, u=np.zeros((0, 6), np.int8), i=np.int32(3))
    assert out[0].shape == (0, 6)
    np.testing.assert_array_equal(out[1], xs)
    with pytest.raises(RuntimeError, match="start index 1 .* has dtype i64, but start index 0 "
                                           "has i32"):
        g.dynamic_slice(x, [i, g.input("j", (), "i64")], [1, 1])
    with pytest.raises(RuntimeError, match=r"update \[5,6\] is larger than x \[4,6\] in dim 0"):
        g.dynamic_update_slice(x, g.input("big", (5, 6), "i8"), [0, 0])
    with pytest.raises(RuntimeError, match="must be rlx Values or ints, got float"):
        g.dynamic_slice(x, [0, 1.5], [1, 1])
